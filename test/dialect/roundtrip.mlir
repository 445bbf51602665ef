// Print -> parse -> print is stable, and every op of the dialect survives it.
// RUN: hetplan-opt %s > %t.1.mlir
// RUN: hetplan-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK-LABEL: het.graph @mlp
// CHECK-SAME: (%[[X:.*]]: tensor<?x4xf32, #het.dims<"batch", "">> {het.name = "x"})
// CHECK-SAME: -> (tensor<?x2xf32, #het.dims<"batch", "">> {het.name = "y"})
het.graph @mlp(%x: tensor<?x4xf32, #het.dims<"batch", "">> {het.name = "x"})
    -> (tensor<?x2xf32, #het.dims<"batch", "">> {het.name = "y"}) {
  // CHECK: %[[W:.*]] = het.weight @fc.weight at <file = "", offset = 96, length = 32, encoding = "raw"> : tensor<4x2xf32>
  %w = het.weight @fc.weight at <file = "", offset = 96, length = 32, encoding = "raw"> : tensor<4x2xf32>
  // CHECK: %[[S:.*]] = het.weight @shape value(dense<[-1, 2]> : tensor<2xi64>) : tensor<2xi64>
  %s = het.weight @shape value(dense<[-1, 2]> : tensor<2xi64>) : tensor<2xi64>
  // CHECK: het.node "MatMul" opset 17 (%[[X]], %[[W]]) {name = "fc"}
  %h = het.node "MatMul" opset 17 (%x, %w) {name = "fc"} : (tensor<?x4xf32, #het.dims<"batch", "">>, tensor<4x2xf32>) -> tensor<?x2xf32, #het.dims<"batch", "">>
  // CHECK: het.node "Gelu" domain "com.microsoft" opset 1
  %g = het.node "Gelu" domain "com.microsoft" opset 1 (%h) : (tensor<?x2xf32, #het.dims<"batch", "">>) -> tensor<?x2xf32, #het.dims<"batch", "">>
  // CHECK: het.node "LeakyRelu" opset 17 ({{.*}}) attrs {alpha = 1.000000e-01 : f32}
  %r = het.node "LeakyRelu" opset 17 (%g) attrs {alpha = 0.1 : f32} : (tensor<?x2xf32, #het.dims<"batch", "">>) -> tensor<?x2xf32, #het.dims<"batch", "">>
  het.return %r : tensor<?x2xf32, #het.dims<"batch", "">>
}

// CHECK-LABEL: het.graph @control_flow
het.graph @control_flow(%c: tensor<i1> {het.name = "cond"}, %x: tensor<3xf32>)
    -> (tensor<3xf32>, !het.seq<tensor<3xf32>>, !het.opt<tensor<3xf32>>) {
  // CHECK: het.none
  %none = het.none
  // CHECK: het.constant(dense<1.000000e+00> : tensor<3xf32>) : tensor<3xf32>
  %one = het.constant(dense<1.0> : tensor<3xf32>) : tensor<3xf32>
  // CHECK: het.constant(#het.extern<file = "w.bin", offset = 0, length = 12, encoding = "raw">) : tensor<3xf32>
  %ext = het.constant(#het.extern<file = "w.bin", offset = 0, length = 12, encoding = "raw">) : tensor<3xf32>
  // CHECK: het.node "If" opset 17 (%{{.*}}) {region_names = ["then_branch", "else_branch"]}
  // CHECK-NEXT: het.node "Add"
  // CHECK: }, {
  %y = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> tensor<3xf32> {
    %a = het.node "Add" opset 17 (%x, %one) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    het.return %a : tensor<3xf32>
  }, {
    het.return %ext : tensor<3xf32>
  }
  // CHECK: het.node "Clip" opset 17 (%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<3xf32>, none, none) -> tensor<3xf32>
  %clip = het.node "Clip" opset 17 (%y, %none, %none) : (tensor<3xf32>, none, none) -> tensor<3xf32>
  %seq = het.node "SequenceConstruct" opset 17 (%clip) : (tensor<3xf32>) -> !het.seq<tensor<3xf32>>
  %opt = het.node "Optional" opset 17 (%clip) : (tensor<3xf32>) -> !het.opt<tensor<3xf32>>
  het.return %clip, %seq, %opt : tensor<3xf32>, !het.seq<tensor<3xf32>>, !het.opt<tensor<3xf32>>
}

// CHECK-LABEL: het.graph @types
// CHECK-SAME: tensor<2x!het.string>, %{{.*}}: !het.map<i64, tensor<?xf32>>, %{{.*}}: !het.unknown, %{{.*}}: tensor<4xf8E4M3FN>, %{{.*}}: tensor<4xi4>
het.graph @types(%a: tensor<2x!het.string>, %b: !het.map<i64, tensor<?xf32>>, %c: !het.unknown, %d: tensor<4xf8E4M3FN>, %e: tensor<4xi4>) -> () {
  het.return
}
