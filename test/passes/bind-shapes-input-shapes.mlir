// A model with dynamic height and width gets whole input shapes.
// RUN: hetplan-opt %s --het-bind-shapes="input-shapes=images=2x3x640x480 require-static=true" | FileCheck %s

// CHECK: het.graph @detector(%{{.*}}: tensor<2x3x640x480xf32> {het.name = "images"}) -> tensor<2x16x320x240xf32>
het.graph @detector(%x: tensor<?x3x?x?xf32, #het.dims<"N", "", "H", "W">> {het.name = "images"}) -> (!het.unknown) {
  %w = het.weight @w at <file = "", offset = 0, length = 1728, encoding = "raw"> : tensor<16x3x3x3xf32>
  // CHECK: het.node "Conv" {{.*}} -> tensor<2x16x320x240xf32>
  %c = het.node "Conv" opset 17 (%x, %w) attrs {auto_pad = "SAME_UPPER", kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>} : (tensor<?x3x?x?xf32, #het.dims<"N", "", "H", "W">>, tensor<16x3x3x3xf32>) -> !het.unknown
  het.return %c : !het.unknown
}
