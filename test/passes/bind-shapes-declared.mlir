// RUN: hetplan-opt %s -split-input-file -verify-diagnostics --het-bind-shapes="dims=batch=4" | FileCheck %s

// Declared shapes of outputs and value_info are hints, as in onnxruntime
// ("Error merging shape info ... Falling back to lenient merge"): where the
// graph computes another rank or size, the graph's shape is used, with one
// warning per graph at the first such output.
// CHECK-LABEL: het.graph @wrong_rank
// CHECK-SAME: -> tensor<4x2x4xf32>
het.graph @wrong_rank(%x: tensor<?x8xf32, #het.dims<"batch", "">>) -> tensor<?x2x2xf32, #het.dims<"batch", "", "">> {
  %s = het.constant(dense<[0, 2, 4]> : tensor<3xi64>) : tensor<3xi64>
  // expected-warning @+2 {{Reshape output #0 is tensor<4x2x4xf32> by the graph but the model declares tensor<4x8xf32> (and 1 more outputs declared with other shapes); declared shapes are hints, as in onnxruntime: the graph's shapes are used}}
  // CHECK: het.node "Reshape" {{.*}} -> tensor<4x2x4xf32>
  %y = het.node "Reshape" opset 17 (%x, %s) : (tensor<?x8xf32, #het.dims<"batch", "">>, tensor<3xi64>) -> tensor<?x8xf32, #het.dims<"batch", "">>
  // CHECK: het.node "Softmax" {{.*}} -> tensor<4x2x4xf32>
  %z = het.node "Softmax" opset 17 (%y) : (tensor<?x8xf32, #het.dims<"batch", "">>) -> tensor<?x2x2xf32, #het.dims<"batch", "", "">>
  het.return %z : tensor<?x2x2xf32, #het.dims<"batch", "", "">>
}

// -----

// A wrong static size in value_info (4 where the MatMul gives 8).
// CHECK-LABEL: het.graph @wrong_size
het.graph @wrong_size(%x: tensor<?x8xf32, #het.dims<"batch", "">>) -> () {
  %w = het.constant(dense<1.0> : tensor<8x8xf32>) : tensor<8x8xf32>
  // expected-warning @+2 {{MatMul output #0 is tensor<4x8xf32> by the graph but the model declares tensor<4x4xf32>; declared shapes are hints}}
  // CHECK: het.node "MatMul" {{.*}} -> tensor<4x8xf32>
  %h = het.node "MatMul" opset 17 (%x, %w) : (tensor<?x8xf32, #het.dims<"batch", "">>, tensor<8x8xf32>) -> tensor<?x4xf32, #het.dims<"batch", "">>
  het.return
}
