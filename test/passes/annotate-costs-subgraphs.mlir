// RUN: hetplan-opt %s --het-bind-shapes --het-annotate-costs | FileCheck %s

// Subgraphs are priced, not ~0: If costs its dearest branch, Loop its body
// times the trip count (het-bind-shapes folds it from a shape chain and
// records het.trip_count), Scan its body times the sequence length. One
// MatMul of [4, 8] x [8, 8] is 2 * 4 * 8 * 8 = 512 FLOPs.
het.graph @subgraphs(%c: tensor<i1>, %x: tensor<4x8xf32>, %seq: tensor<4x16x8xf32>) -> (!het.unknown, !het.unknown, !het.unknown) {
  %w = het.weight @w at <file = "", offset = 0, length = 256, encoding = "raw"> : tensor<8x8xf32>
  // max(512, 32)
  // CHECK: het.node "If" {{.*}}flops = 5.120000e+02
  %y = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    %a = het.node "MatMul" opset 13 (%x, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> !het.unknown
    het.return %a : !het.unknown
  }, {
    %b = het.node "Relu" opset 14 (%x) : (tensor<4x8xf32>) -> !het.unknown
    het.return %b : !het.unknown
  }
  %s = het.node "Shape" opset 17 (%seq) : (tensor<4x16x8xf32>) -> !het.unknown
  %i1 = het.constant(dense<1> : tensor<i64>) : tensor<i64>
  %n = het.node "Gather" opset 13 (%s, %i1) attrs {axis = 0 : i64} : (!het.unknown, tensor<i64>) -> !het.unknown
  %true = het.constant(dense<true> : tensor<i1>) : tensor<i1>
  // 16 x 512
  // CHECK: het.node "Loop" {{.*}}flops = 8.192000e+03
  %h = het.node "Loop" opset 16 (%n, %true, %x) {region_names = ["body"]} : (!het.unknown, tensor<i1>, tensor<4x8xf32>) -> !het.unknown {
  ^bb0(%i: !het.unknown, %cin: !het.unknown, %v: !het.unknown):
    %t = het.node "MatMul" opset 13 (%v, %w) : (!het.unknown, tensor<8x8xf32>) -> !het.unknown
    het.return %cin, %t : !het.unknown, !het.unknown
  }
  // 16 x (512 + 32)
  // CHECK: het.node "Scan" {{.*}}flops = 8.704000e+03
  %fin = het.node "Scan" opset 16 (%x, %seq) attrs {num_scan_inputs = 1 : i64, scan_input_axes = array<i64: 1>} {region_names = ["body"]} : (tensor<4x8xf32>, tensor<4x16x8xf32>) -> !het.unknown {
  ^bb0(%st: !het.unknown, %xt: !het.unknown):
    %m = het.node "MatMul" opset 13 (%xt, %w) : (!het.unknown, tensor<8x8xf32>) -> !het.unknown
    %sum = het.node "Add" opset 14 (%st, %m) : (!het.unknown, !het.unknown) -> !het.unknown
    het.return %sum : !het.unknown
  }
  het.return %y, %h, %fin : !het.unknown, !het.unknown, !het.unknown
}

// An If whose condition folds (het-bind-shapes sets het.taken_branch) costs
// only the branch taken: the Relu's 32, not the MatMul's 512.
// CHECK-LABEL: het.graph @folded_if
het.graph @folded_if(%x: tensor<4x8xf32>) -> (!het.unknown) {
  %w = het.weight @w2 at <file = "", offset = 0, length = 256, encoding = "raw"> : tensor<8x8xf32>
  %false = het.constant(dense<false> : tensor<i1>) : tensor<i1>
  // CHECK: het.node "If" {{.*}}flops = 3.200000e+01
  %y = het.node "If" opset 17 (%false) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    %a = het.node "MatMul" opset 13 (%x, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> !het.unknown
    het.return %a : !het.unknown
  }, {
    %b = het.node "Relu" opset 14 (%x) : (tensor<4x8xf32>) -> !het.unknown
    het.return %b : !het.unknown
  }
  het.return %y : !het.unknown
}
