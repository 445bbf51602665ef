// RUN: hetplan-opt %s -split-input-file --het-bind-shapes="dims=batch=8,sequence=128" | FileCheck %s

// Named dims are bound; every node's type follows from het's shape rules,
// including a Reshape whose target comes from a Shape/Gather/Concat chain
// (the pattern exporters write for attention heads).
// CHECK: module attributes {het.bound_dims = {batch = 8 : i64, sequence = 128 : i64}}
// CHECK-LABEL: het.graph @heads(%{{.*}}: tensor<8x128x64xf32> {het.name = "x"}) -> (tensor<8x4x128x16xf32> {het.name = "y"})
het.graph @heads(%x: tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">> {het.name = "x"})
    -> (tensor<?x4x?x16xf32, #het.dims<"batch", "", "sequence", "">> {het.name = "y"}) {
  %w = het.weight @w at <file = "", offset = 0, length = 16384, encoding = "raw"> : tensor<64x64xf32>
  %i0 = het.weight @i0 value(dense<0> : tensor<1xi64>) : tensor<1xi64>
  %i1 = het.weight @i1 value(dense<1> : tensor<1xi64>) : tensor<1xi64>
  %hd = het.weight @hd value(dense<[4, 16]> : tensor<2xi64>) : tensor<2xi64>
  // CHECK: het.node "MatMul" {{.*}} -> tensor<8x128x64xf32>
  %p = het.node "MatMul" opset 17 (%x, %w) : (tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">>, tensor<64x64xf32>) -> !het.unknown
  // CHECK: het.node "Shape" {{.*}} -> tensor<3xi64>
  %s = het.node "Shape" opset 17 (%p) : (!het.unknown) -> !het.unknown
  %b = het.node "Gather" opset 17 (%s, %i0) attrs {axis = 0 : i64} : (!het.unknown, tensor<1xi64>) -> !het.unknown
  %q = het.node "Gather" opset 17 (%s, %i1) attrs {axis = 0 : i64} : (!het.unknown, tensor<1xi64>) -> !het.unknown
  // CHECK: het.node "Concat" {{.*}} -> tensor<4xi64>
  %shape = het.node "Concat" opset 17 (%b, %q, %hd) attrs {axis = 0 : i64} : (!het.unknown, !het.unknown, tensor<2xi64>) -> !het.unknown
  // CHECK: het.node "Reshape" {{.*}} -> tensor<8x128x4x16xf32>
  %r = het.node "Reshape" opset 17 (%p, %shape) : (!het.unknown, !het.unknown) -> !het.unknown
  // CHECK: het.node "Transpose" {{.*}} -> tensor<8x4x128x16xf32>
  %t = het.node "Transpose" opset 17 (%r) attrs {perm = array<i64: 0, 2, 1, 3>} : (!het.unknown) -> tensor<?x4x?x16xf32, #het.dims<"batch", "", "sequence", "">>
  het.return %t : tensor<?x4x?x16xf32, #het.dims<"batch", "", "sequence", "">>
}

// -----

// Convolution and pooling follow ONNX's output-size formulas.
// CHECK-LABEL: het.graph @cnn
het.graph @cnn(%x: tensor<?x3x224x224xf32, #het.dims<"batch", "", "", "">>) -> (tensor<?x1000xf32, #het.dims<"batch", "">>) {
  %w = het.weight @w at <file = "", offset = 0, length = 37632, encoding = "raw"> : tensor<64x3x7x7xf32>
  %fc = het.weight @fc at <file = "", offset = 0, length = 256000, encoding = "raw"> : tensor<64x1000xf32>
  // CHECK: het.node "Conv" {{.*}} -> tensor<8x64x112x112xf32>
  %c = het.node "Conv" opset 17 (%x, %w) attrs {kernel_shape = array<i64: 7, 7>, pads = array<i64: 3, 3, 3, 3>, strides = array<i64: 2, 2>} : (tensor<?x3x224x224xf32, #het.dims<"batch", "", "", "">>, tensor<64x3x7x7xf32>) -> !het.unknown
  // CHECK: het.node "MaxPool" {{.*}} -> tensor<8x64x56x56xf32>
  %m = het.node "MaxPool" opset 17 (%c) attrs {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (!het.unknown) -> !het.unknown
  // CHECK: het.node "GlobalAveragePool" {{.*}} -> tensor<8x64x1x1xf32>
  %g = het.node "GlobalAveragePool" opset 17 (%m) : (!het.unknown) -> !het.unknown
  // CHECK: het.node "Flatten" {{.*}} -> tensor<8x64xf32>
  %f = het.node "Flatten" opset 17 (%g) : (!het.unknown) -> !het.unknown
  // CHECK: het.node "MatMul" {{.*}} -> tensor<8x1000xf32>
  %y = het.node "MatMul" opset 17 (%f, %fc) : (!het.unknown, tensor<64x1000xf32>) -> tensor<?x1000xf32, #het.dims<"batch", "">>
  het.return %y : tensor<?x1000xf32, #het.dims<"batch", "">>
}
