// RUN: hetplan-opt %s --het-print-summary -o /dev/null | FileCheck %s
// RUN: hetplan-opt %s --het-print-summary="json=true" -o /dev/null | FileCheck %s --check-prefix=JSON

// CHECK: graph @mlp
// CHECK: nodes:      2 (2 op types)
// CHECK: parameters: 8 in 1 weights (32.0 B)
// CHECK: symbolic dims: batch
// CHECK: x: batch x 4 x f32
// JSON: "parameters": 8
// JSON: "symbolic_dims": [
// JSON-NEXT: "batch"
het.graph @mlp(%x: tensor<?x4xf32, #het.dims<"batch", "">> {het.name = "x"}) -> (tensor<?x2xf32, #het.dims<"batch", "">> {het.name = "y"}) {
  %w = het.weight @w at <file = "", offset = 0, length = 32, encoding = "raw"> : tensor<4x2xf32>
  %h = het.node "MatMul" opset 17 (%x, %w) : (tensor<?x4xf32, #het.dims<"batch", "">>, tensor<4x2xf32>) -> tensor<?x2xf32, #het.dims<"batch", "">>
  %y = het.node "Relu" opset 17 (%h) : (tensor<?x2xf32, #het.dims<"batch", "">>) -> tensor<?x2xf32, #het.dims<"batch", "">>
  het.return %y : tensor<?x2xf32, #het.dims<"batch", "">>
}
