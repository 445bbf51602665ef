// RUN: hetplan-opt %s -split-input-file --het-bind-shapes="dims=batch=2,height=6,width=10 require-static=true" | FileCheck %s

// Shape arithmetic folds once dims are bound (issue 22: a Swin export's pad
// amounts, Shape -> Slice -> Mod -> Sub -> Mod, were "still not known").
// CHECK-LABEL: het.graph @swin_pad
het.graph @swin_pad(%x: tensor<?x4x?x?xf32, #het.dims<"batch", "", "height", "width">>) -> () {
  %win = het.constant(dense<4> : tensor<1xi64>) : tensor<1xi64>
  %zero = het.constant(dense<0> : tensor<1xi64>) : tensor<1xi64>
  %three = het.constant(dense<3> : tensor<1xi64>) : tensor<1xi64>
  %s2 = het.constant(dense<2> : tensor<1xi64>) : tensor<1xi64>
  %s4 = het.constant(dense<4> : tensor<1xi64>) : tensor<1xi64>
  %zeros6 = het.constant(dense<0> : tensor<6xi64>) : tensor<6xi64>
  %shape = het.node "Shape" opset 17 (%x) : (tensor<?x4x?x?xf32, #het.dims<"batch", "", "height", "width">>) -> tensor<4xi64>
  %hw = het.node "Slice" opset 17 (%shape, %s2, %s4) : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %rem = het.node "Mod" opset 17 (%hw, %win) : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %short = het.node "Sub" opset 17 (%win, %rem) : (tensor<1xi64>, tensor<2xi64>) -> tensor<2xi64>
  %pad0 = het.node "Mod" opset 17 (%short, %win) : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %fits = het.node "Equal" opset 17 (%rem, %zero) : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi1>
  %pad1 = het.node "Where" opset 17 (%fits, %zero, %pad0) : (tensor<2xi1>, tensor<1xi64>, tensor<2xi64>) -> tensor<2xi64>
  %pad2 = het.node "Max" opset 17 (%pad1, %zero) : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %pad = het.node "Min" opset 17 (%pad2, %three) : (tensor<2xi64>, tensor<1xi64>) -> tensor<2xi64>
  %pads = het.node "Concat" opset 17 (%zeros6, %pad) attrs {axis = 0 : i64} : (tensor<6xi64>, tensor<2xi64>) -> tensor<8xi64>
  // 6 and 10 pad to 8 and 12.
  // CHECK: het.node "Pad" {{.*}} -> tensor<2x4x8x12xf32>
  %p = het.node "Pad" opset 17 (%x, %pads) : (tensor<?x4x?x?xf32, #het.dims<"batch", "", "height", "width">>, tensor<8xi64>) -> tensor<?x?x?x?xf32>
  het.return
}

// -----

// Sizes computed in floats: Cast, Div, Ceil, Cast back (a Resize's sizes,
// an interpolation's output), and Range over a folded count.
// CHECK-LABEL: het.graph @float_sizes
het.graph @float_sizes(%x: tensor<?x3x?x?xf32, #het.dims<"batch", "", "height", "width">>) -> () {
  %s2 = het.constant(dense<2> : tensor<1xi64>) : tensor<1xi64>
  %s4 = het.constant(dense<4> : tensor<1xi64>) : tensor<1xi64>
  %s0 = het.constant(dense<0> : tensor<1xi64>) : tensor<1xi64>
  %four = het.constant(dense<4.0> : tensor<f32>) : tensor<f32>
  %shape = het.node "Shape" opset 17 (%x) : (tensor<?x3x?x?xf32, #het.dims<"batch", "", "height", "width">>) -> tensor<4xi64>
  %hw = het.node "Slice" opset 17 (%shape, %s2, %s4) : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %hwf = het.node "Cast" opset 17 (%hw) attrs {to = 1 : i64} : (tensor<2xi64>) -> tensor<2xf32>
  %q = het.node "Div" opset 17 (%hwf, %four) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  %c = het.node "Ceil" opset 17 (%q) : (tensor<2xf32>) -> tensor<2xf32>
  %ci = het.node "Cast" opset 17 (%c) attrs {to = 7 : i64} : (tensor<2xf32>) -> tensor<2xi64>
  %nc = het.node "Slice" opset 17 (%shape, %s0, %s2) : (tensor<4xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %sizes = het.node "Concat" opset 17 (%nc, %ci) attrs {axis = 0 : i64} : (tensor<2xi64>, tensor<2xi64>) -> tensor<4xi64>
  %none = het.none
  // ceil(6 / 4) = 2, ceil(10 / 4) = 3
  // CHECK: het.node "Resize" {{.*}} -> tensor<2x3x2x3xf32>
  %r = het.node "Resize" opset 17 (%x, %none, %none, %sizes) : (tensor<?x3x?x?xf32, #het.dims<"batch", "", "height", "width">>, none, none, tensor<4xi64>) -> !het.unknown
  // The count of windows, 2 * 3, then Range(0, 6, 1).
  %i0 = het.constant(dense<0> : tensor<i64>) : tensor<i64>
  %i1 = het.constant(dense<1> : tensor<i64>) : tensor<i64>
  %ax = het.constant(dense<0> : tensor<1xi64>) : tensor<1xi64>
  %nh = het.node "Gather" opset 17 (%ci, %i0) attrs {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %nw = het.node "Gather" opset 17 (%ci, %i1) attrs {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %n = het.node "Mul" opset 17 (%nh, %nw) : (tensor<i64>, tensor<i64>) -> tensor<i64>
  // CHECK: het.node "Range" {{.*}} -> tensor<6xi64>
  %range = het.node "Range" opset 17 (%i0, %n, %i1) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  het.return
}
