// RUN: hetplan-opt %s -split-input-file --het-group-layers | FileCheck %s
// RUN: hetplan-opt %s -split-input-file --het-group-layers="max-layers=3" | FileCheck %s --check-prefix=MAX

// Three pre-norm residual blocks between an embedding and a head. The cuts
// that one activation crosses fall between the blocks (inside a block the
// residual input stays live); the three blocks repeat, so each is a layer,
// named by the prefix its nodes share.
// CHECK-LABEL: het.graph @blocks
// CHECK-SAME: het.layers = [{first = 0 : i64, last = 0 : i64, name = "embed"}, {first = 1 : i64, last = 5 : i64, name = "blocks.0"}, {first = 6 : i64, last = 10 : i64, name = "blocks.1"}, {first = 11 : i64, last = 15 : i64, name = "blocks.2"}, {first = 16 : i64, last = 17 : i64, name = "head"}]
// CHECK: het.node "MatMul" {{.*}}het.layer = 0 : i64, name = "embed"
// CHECK: het.node "LayerNormalization" {{.*}}het.layer = 1 : i64, name = "blocks.0.ln"
// CHECK: het.node "Add" {{.*}}het.layer = 1 : i64, name = "blocks.0.residual"
// CHECK: het.node "LayerNormalization" {{.*}}het.layer = 2 : i64, name = "blocks.1.ln"
// CHECK: het.node "Add" {{.*}}het.layer = 3 : i64, name = "blocks.2.residual"
// CHECK: het.node "Softmax" {{.*}}het.layer = 4 : i64, name = "head.softmax"
// MAX-LABEL: het.graph @blocks
// MAX-SAME: het.layers = [{first = 0 : i64, last = 5 : i64, name = "embed+blocks.0"}, {first = 6 : i64, last = 10 : i64, name = "blocks.1"}, {first = 11 : i64, last = 17 : i64, name = "blocks.2+head"}]
het.graph @blocks(%x: tensor<2x8x16xf32>) -> (tensor<2x8x10xf32>) {
  %win = het.weight @win at <file = "", offset = 0, length = 1024, encoding = "raw"> : tensor<16x16xf32>
  %s = het.weight @s value(dense<1.0> : tensor<16xf32>) : tensor<16xf32>
  %w1 = het.weight @w1 at <file = "", offset = 0, length = 2048, encoding = "raw"> : tensor<16x32xf32>
  %w2 = het.weight @w2 at <file = "", offset = 0, length = 2048, encoding = "raw"> : tensor<32x16xf32>
  %wout = het.weight @wout at <file = "", offset = 0, length = 640, encoding = "raw"> : tensor<16x10xf32>
  %h0 = het.node "MatMul" opset 17 (%x, %win) {name = "embed"} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %ln0 = het.node "LayerNormalization" opset 17 (%h0, %s) {name = "blocks.0.ln"} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %a0 = het.node "MatMul" opset 17 (%ln0, %w1) {name = "blocks.0.fc1"} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %r0 = het.node "Relu" opset 17 (%a0) {name = "blocks.0.act"} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %b0 = het.node "MatMul" opset 17 (%r0, %w2) {name = "blocks.0.fc2"} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %h1 = het.node "Add" opset 17 (%h0, %b0) {name = "blocks.0.residual"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %ln1 = het.node "LayerNormalization" opset 17 (%h1, %s) {name = "blocks.1.ln"} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %a1 = het.node "MatMul" opset 17 (%ln1, %w1) {name = "blocks.1.fc1"} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %r1 = het.node "Relu" opset 17 (%a1) {name = "blocks.1.act"} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %b1 = het.node "MatMul" opset 17 (%r1, %w2) {name = "blocks.1.fc2"} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %h2 = het.node "Add" opset 17 (%h1, %b1) {name = "blocks.1.residual"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %ln2 = het.node "LayerNormalization" opset 17 (%h2, %s) {name = "blocks.2.ln"} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %a2 = het.node "MatMul" opset 17 (%ln2, %w1) {name = "blocks.2.fc1"} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %r2 = het.node "Relu" opset 17 (%a2) {name = "blocks.2.act"} : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %b2 = het.node "MatMul" opset 17 (%r2, %w2) {name = "blocks.2.fc2"} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %h3 = het.node "Add" opset 17 (%h2, %b2) {name = "blocks.2.residual"} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %o = het.node "MatMul" opset 17 (%h3, %wout) {name = "head.proj"} : (tensor<2x8x16xf32>, tensor<16x10xf32>) -> tensor<2x8x10xf32>
  %y = het.node "Softmax" opset 17 (%o) attrs {axis = -1 : i64} {name = "head.softmax"} : (tensor<2x8x10xf32>) -> tensor<2x8x10xf32>
  het.return %y : tensor<2x8x10xf32>
}

// -----

// Unnamed nodes get stem / block<k> / head. A mask that every block reads
// crosses every cut: it does not mark where blocks end, so the cuts ignore it.
// A node with subgraphs (the If) is one unit; its region's use of %o counts
// as a use by the If.
// CHECK-LABEL: het.graph @masked
// CHECK-SAME: het.layers = [{first = 0 : i64, last = 1 : i64, name = "stem"}, {first = 2 : i64, last = 5 : i64, name = "block0"}, {first = 6 : i64, last = 9 : i64, name = "block1"}, {first = 10 : i64, last = 13 : i64, name = "block2"}, {first = 14 : i64, last = 15 : i64, name = "head"}]
// CHECK: het.node "If" {{.*}}het.layer = 4 : i64
// MAX-LABEL: het.graph @masked
// MAX-SAME: het.layers = [{first = 0 : i64, last = 5 : i64, name = "stem+block0"}, {first = 6 : i64, last = 9 : i64, name = "block1"}, {first = 10 : i64, last = 15 : i64, name = "block2+head"}]
het.graph @masked(%x: tensor<2x8x16xf32>, %m: tensor<2x8x16xf32>) -> (tensor<2x8x10xf32>) {
  %c = het.weight @c value(dense<-1.0e4> : tensor<f32>) : tensor<f32>
  %true = het.weight @true value(dense<true> : tensor<i1>) : tensor<i1>
  %win = het.weight @win at <file = "", offset = 0, length = 1024, encoding = "raw"> : tensor<16x16xf32>
  %w1 = het.weight @w1 at <file = "", offset = 0, length = 1024, encoding = "raw"> : tensor<16x16xf32>
  %wout = het.weight @wout at <file = "", offset = 0, length = 640, encoding = "raw"> : tensor<16x10xf32>
  %mask = het.node "Mul" opset 17 (%m, %c) : (tensor<2x8x16xf32>, tensor<f32>) -> tensor<2x8x16xf32>
  %h0 = het.node "MatMul" opset 17 (%x, %win) : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %a0 = het.node "MatMul" opset 17 (%h0, %w1) : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %s0 = het.node "Add" opset 17 (%a0, %mask) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %r0 = het.node "Relu" opset 17 (%s0) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %h1 = het.node "Add" opset 17 (%h0, %r0) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %a1 = het.node "MatMul" opset 17 (%h1, %w1) : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %s1 = het.node "Add" opset 17 (%a1, %mask) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %r1 = het.node "Relu" opset 17 (%s1) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %h2 = het.node "Add" opset 17 (%h1, %r1) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %a2 = het.node "MatMul" opset 17 (%h2, %w1) : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %s2 = het.node "Add" opset 17 (%a2, %mask) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %r2 = het.node "Relu" opset 17 (%s2) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %h3 = het.node "Add" opset 17 (%h2, %r2) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %o = het.node "MatMul" opset 17 (%h3, %wout) : (tensor<2x8x16xf32>, tensor<16x10xf32>) -> tensor<2x8x10xf32>
  %y = het.node "If" opset 17 (%true) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> tensor<2x8x10xf32> {
    %z = het.node "Relu" opset 17 (%o) : (tensor<2x8x10xf32>) -> tensor<2x8x10xf32>
    het.return %z : tensor<2x8x10xf32>
  }, {
    het.return %o : tensor<2x8x10xf32>
  }
  het.return %y : tensor<2x8x10xf32>
}

// -----

// An empty graph has no layers.
// CHECK-LABEL: het.graph @empty
// CHECK-SAME: het.layers = []
het.graph @empty(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  het.return %x : tensor<2xf32>
}
