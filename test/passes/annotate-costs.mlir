// RUN: hetplan-opt %s -split-input-file --het-annotate-costs="devices=A100-80GB,T4" | FileCheck %s

// FLOPs follow the ONNX definitions (a multiply-add is 2 FLOPs), bytes are
// the activations read and written, weights are counted apart. The leading
// dim of the first input (4) is the samples per call.
// CHECK-LABEL: het.graph @mlp
// CHECK-SAME: het.samples = 4 : i64
// CHECK-SAME: het.total_flops = 3.153920e+05 : f64
// CHECK-SAME: het.total_flops_per_sample = 7.884800e+04 : f64
// CHECK-SAME: het.total_params = 2112 : i64
// CHECK-SAME: het.total_time = {"A100-SXM-80GB" = {{.*}} : f64, T4 = {{.*}} : f64}
het.graph @mlp(%x: tensor<4x16x32xf32> {het.name = "x"}) -> (tensor<4x16x64xf32> {het.name = "y"}) {
  %w = het.weight @w at <file = "", offset = 0, length = 8192, encoding = "raw"> : tensor<32x64xf32>
  %b = het.weight @b at <file = "", offset = 8192, length = 256, encoding = "raw"> : tensor<64xf32>
  %shape = het.weight @shape value(dense<[64, 64]> : tensor<2xi64>) : tensor<2xi64>
  // MatMul [4,16,32] x [32,64]: 2 * 4*16*64 * 32 FLOPs; x + y = 8 KiB + 16 KiB.
  // Roofline on the A100: 4 us per kernel (the default software stack,
  // hetplan's runtime) + max(262144 / (19.5e12 * 0.6),
  // 24576 / (2039e9 * 0.8)) = 4.022405e-06 s, printed 4.022410e-06.
  // CHECK: het.node "MatMul"
  // CHECK-SAME: het.cost = {bytes = 2.457600e+04 : f64, bytes_per_sample = 6.144000e+03 : f64, flops = 2.621440e+05 : f64, flops_per_sample = 6.553600e+04 : f64, matrix, weight_bytes = 8.192000e+03 : f64}
  // CHECK-SAME: het.time = {"A100-SXM-80GB" = 4.022410e-06 : f64, T4 = {{.*}} : f64}
  %mm = het.node "MatMul" opset 17 (%x, %w) {name = "mm"} : (tensor<4x16x32xf32>, tensor<32x64xf32>) -> tensor<4x16x64xf32>
  // Elementwise: one FLOP per output element; the bias is a weight.
  // CHECK: het.node "Add"
  // CHECK-SAME: het.cost = {bytes = 3.276800e+04 : f64, bytes_per_sample = 8.192000e+03 : f64, flops = 4.096000e+03 : f64, flops_per_sample = 1.024000e+03 : f64, weight_bytes = 2.560000e+02 : f64}
  %add = het.node "Add" opset 17 (%mm, %b) : (tensor<4x16x64xf32>, tensor<64xf32>) -> tensor<4x16x64xf32>
  // Transcendentals cost 4 FLOPs per element.
  // CHECK: het.node "Tanh"
  // CHECK-SAME: flops = 1.638400e+04 : f64
  %t = het.node "Tanh" opset 17 (%add) : (tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
  // Softmax: max, subtract, exp, sum, divide = 8 FLOPs per element.
  // CHECK: het.node "Softmax"
  // CHECK-SAME: flops = 3.276800e+04 : f64
  %s = het.node "Softmax" opset 17 (%t) attrs {axis = -1 : i64} : (tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
  // A view is free; so is an op on weights only (folded at plan time).
  // CHECK: het.node "Reshape"
  // CHECK-SAME: het.cost = {bytes = 0.000000e+00 : f64, bytes_per_sample = 0.000000e+00 : f64, flops = 0.000000e+00 : f64, flops_per_sample = 0.000000e+00 : f64, weight_bytes = 0.000000e+00 : f64}
  // CHECK-SAME: het.time = {"A100-SXM-80GB" = 0.000000e+00 : f64, T4 = 0.000000e+00 : f64}
  %r = het.node "Reshape" opset 17 (%s, %shape) : (tensor<4x16x64xf32>, tensor<2xi64>) -> tensor<64x64xf32>
  // CHECK: het.node "Transpose"
  // CHECK-SAME: flops = 0.000000e+00
  // CHECK-SAME: weight_bytes = 0.000000e+00
  %wt = het.node "Transpose" opset 17 (%w) attrs {perm = array<i64: 1, 0>} : (tensor<32x64xf32>) -> tensor<64x32xf32>
  // Moving data: bytes only.
  // CHECK: het.node "Transpose"
  // CHECK-SAME: het.cost = {bytes = 3.276800e+04 : f64, bytes_per_sample = 8.192000e+03 : f64, flops = 0.000000e+00 : f64, flops_per_sample = 0.000000e+00 : f64, weight_bytes = 0.000000e+00 : f64}
  %y = het.node "Transpose" opset 17 (%s) attrs {perm = array<i64: 0, 1, 2>} : (tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
  het.return %y : tensor<4x16x64xf32>
}

// -----

// Conv: 2 * out * (Cin/group * kh * kw), + out for the bias. Groups and
// dilations: a depthwise 3x3 with dilation 2 reads 9 taps per output.
// CHECK-LABEL: het.graph @conv
het.graph @conv(%x: tensor<2x3x32x32xf32>) -> (tensor<2x8x32x32xf32>) {
  %w = het.weight @w at <file = "", offset = 0, length = 864, encoding = "raw"> : tensor<8x3x3x3xf32>
  %b = het.weight @b value(dense<0.0> : tensor<8xf32>) : tensor<8xf32>
  %dw = het.weight @dw at <file = "", offset = 864, length = 288, encoding = "raw"> : tensor<8x1x3x3xf32>
  // CHECK: het.node "Conv"
  // CHECK-SAME: flops = 9.011200e+05 : f64, flops_per_sample = 4.505600e+05 : f64, matrix, weight_bytes = 8.960000e+02 : f64
  %c = het.node "Conv" opset 17 (%x, %w, %b) attrs {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x32x32xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<2x8x32x32xf32>
  // CHECK: het.node "Conv"
  // CHECK-SAME: flops = 2.949120e+05 : f64
  %d = het.node "Conv" opset 17 (%c, %dw) attrs {group = 8 : i64, dilations = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>} : (tensor<2x8x32x32xf32>, tensor<8x1x3x3xf32>) -> tensor<2x8x32x32xf32>
  // Inference BatchNormalization: a folded scale and shift, 2 FLOPs per element.
  // CHECK: het.node "BatchNormalization"
  // CHECK-SAME: flops = 3.276800e+04 : f64
  %bn = het.node "BatchNormalization" opset 15 (%d, %b, %b, %b, %b) : (tensor<2x8x32x32xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x32x32xf32>
  // MaxPool: one comparison per window element and output.
  // CHECK: het.node "MaxPool"
  // CHECK-SAME: flops = 1.638400e+04 : f64
  %p = het.node "MaxPool" opset 17 (%bn) attrs {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x8x32x32xf32>) -> tensor<2x8x16x16xf32>
  het.return %bn : tensor<2x8x32x32xf32>
}

// -----

// Attention (opset 23), Q/K/V [B, H, S, D]: 2*B*H*S*T*(D + Dv) for the two
// products (4*B*H*S*T*D) plus scale and softmax, 9 per score.
// 4*2*4*16*16*8 + 9*2*4*16*16 = 65536 + 18432.
// CHECK-LABEL: het.graph @attention
// CHECK: het.node "Attention"
// CHECK-SAME: flops = 8.396800e+04 : f64
het.graph @attention(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xf32>, %v: tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>) {
  %y = het.node "Attention" opset 23 (%q, %k, %v) : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  het.return %y : tensor<2x4x16x8xf32>
}

// -----

// LSTM, per step and direction: 2*B*4H*(I+H) for the gate products + 32*B*H
// for the gate math. S=5, B=2, I=8, H=16: 5*(2*2*64*24 + 32*2*16) = 35840.
// CHECK-LABEL: het.graph @lstm
// CHECK: het.node "LSTM"
// CHECK-SAME: flops = 3.584000e+04 : f64
// CHECK-SAME: matrix
het.graph @lstm(%x: tensor<5x2x8xf32>) -> (tensor<5x1x2x16xf32>) {
  %w = het.weight @w at <file = "", offset = 0, length = 2048, encoding = "raw"> : tensor<1x64x8xf32>
  %r = het.weight @r at <file = "", offset = 2048, length = 4096, encoding = "raw"> : tensor<1x64x16xf32>
  %y = het.node "LSTM" opset 14 (%x, %w, %r) attrs {hidden_size = 16 : i64} : (tensor<5x2x8xf32>, tensor<1x64x8xf32>, tensor<1x64x16xf32>) -> tensor<5x1x2x16xf32>
  het.return %y : tensor<5x1x2x16xf32>
}

// -----

// The format sets the bytes of float elements; integers keep their width.
// An embedding Gather reads only the rows it outputs (bytes, no FLOPs).
// RUN: hetplan-opt %s -split-input-file --het-annotate-costs="dtype=bf16" | FileCheck %s --check-prefix=BF16
// BF16-LABEL: het.graph @embedding
// BF16: het.node "Gather"
// BF16-SAME: het.cost = {bytes = 2.176000e+03 : f64, bytes_per_sample = 1.088000e+03 : f64, flops = 0.000000e+00 : f64, flops_per_sample = 0.000000e+00 : f64, weight_bytes = 0.000000e+00 : f64}
het.graph @embedding(%ids: tensor<2x8xi64>) -> (tensor<2x8x32xf32>) {
  %table = het.weight @table at <file = "", offset = 0, length = 128000, encoding = "raw"> : tensor<1000x32xf32>
  %e = het.node "Gather" opset 17 (%table, %ids) attrs {axis = 0 : i64} : (tensor<1000x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  het.return %e : tensor<2x8x32xf32>
}
