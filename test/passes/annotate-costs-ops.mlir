// RUN: hetplan-opt %s --het-annotate-costs | FileCheck %s

// One check per cost rule (docs/cost-model.md, "Per-op rules"); FLOPs are
// for the whole call at these shapes.
het.graph @ops(%x4: tensor<1x4x8x8xf32>, %x2: tensor<1x2x16x16xf32>, %t: tensor<2x4x8xf32>,
               %r: tensor<1x2x8x8xf32>, %b3: tensor<2x8x3xf32>, %m: tensor<2x3x4x5xf32>,
               %g: tensor<3x2x4xf32>, %p: tensor<2x8xf32>) -> () {
  %none = het.none
  %wt = het.weight @wt at <file = "", offset = 0, length = 288, encoding = "raw"> : tensor<4x2x3x3xf32>
  %s8 = het.weight @s8 value(dense<1.0> : tensor<8xf32>) : tensor<8xf32>
  %axes = het.weight @axes value(dense<-1> : tensor<1xi64>) : tensor<1xi64>
  %sizes = het.weight @sizes value(dense<[1, 2, 16, 16]> : tensor<4xi64>) : tensor<4xi64>
  %pads = het.weight @pads value(dense<[0, 0, 1, 0, 0, 1]> : tensor<6xi64>) : tensor<6xi64>
  %cond = het.weight @cond value(dense<true> : tensor<2x4x8xi1>) : tensor<2x4x8xi1>
  %zero = het.weight @zero value(dense<0.0> : tensor<f32>) : tensor<f32>
  %w56 = het.weight @w56 value(dense<1.0> : tensor<5x6xf32>) : tensor<5x6xf32>
  %gw = het.weight @gw value(dense<1.0> : tensor<1x15x4xf32>) : tensor<1x15x4xf32>
  %gr = het.weight @gr at <file = "", offset = 0, length = 300, encoding = "raw"> : tensor<1x15x5xf32>
  %gb = het.weight @gb value(dense<1.0> : tensor<8x4xf32>) : tensor<8x4xf32>
  %gc = het.weight @gc value(dense<1.0> : tensor<4xf32>) : tensor<4xf32>

  // ConvTranspose: each input element scatters into Cout/group x kernel
  // outputs: 2 * 256 * 2 * 9.
  // CHECK: het.node "ConvTranspose" {{.*}}flops = 9.216000e+03
  %ct = het.node "ConvTranspose" opset 17 (%x4, %wt) attrs {strides = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x17x17xf32>
  // Pools: one op per window element and output; global pools one per input.
  // CHECK: het.node "AveragePool" {{.*}}flops = 5.120000e+02
  %ap = het.node "AveragePool" opset 17 (%x2) attrs {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x2x16x16xf32>) -> tensor<1x2x8x8xf32>
  // CHECK: het.node "GlobalAveragePool" {{.*}}flops = 5.120000e+02
  %gp = het.node "GlobalAveragePool" opset 17 (%x2) : (tensor<1x2x16x16xf32>) -> tensor<1x2x1x1xf32>
  // Normalizations per element: LayerNorm 7 (6 without bias), RMSNorm 4.
  // CHECK: het.node "LayerNormalization" {{.*}}flops = 4.480000e+02
  %ln = het.node "LayerNormalization" opset 17 (%t, %s8, %s8) : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: het.node "LayerNormalization" {{.*}}flops = 3.840000e+02
  %ln2 = het.node "LayerNormalization" opset 17 (%t, %s8) : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // CHECK: het.node "RMSNormalization" {{.*}}flops = 2.560000e+02
  %rms = het.node "RMSNormalization" opset 23 (%t, %s8) : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // ReduceMean: a sum per input element, a divide per output.
  // CHECK: het.node "ReduceMean" {{.*}}flops = 7.200000e+01
  %rm = het.node "ReduceMean" opset 18 (%t, %axes) : (tensor<2x4x8xf32>, tensor<1xi64>) -> tensor<2x4x1xf32>
  // Resize, linear: 3 FLOPs per output element and resized axis.
  // CHECK: het.node "Resize" {{.*}}flops = 3.072000e+03
  %rs = het.node "Resize" opset 19 (%r, %none, %none, %sizes) attrs {mode = "linear"} : (tensor<1x2x8x8xf32>, none, none, tensor<4xi64>) -> tensor<1x2x16x16xf32>
  // Pad moves data: activations in (256 B) and out (320 B), pads as a weight.
  // CHECK: het.node "Pad" {{.*}}het.cost = {bytes = 5.760000e+02 : f64, {{.*}}flops = 0.000000e+00 : f64, {{.*}}weight_bytes = 4.800000e+01 : f64}
  %pd = het.node "Pad" opset 19 (%t, %pads) : (tensor<2x4x8xf32>, tensor<6xi64>) -> tensor<2x4x10xf32>
  // Where: one select per element; the constant condition is read once.
  // CHECK: het.node "Where" {{.*}}flops = 6.400000e+01 : f64, {{.*}}weight_bytes = 6.800000e+01 : f64
  %wh = het.node "Where" opset 16 (%cond, %t, %zero) : (tensor<2x4x8xi1>, tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  // Einsum: 2 x the product of every index size for two operands.
  // CHECK: het.node "Einsum" {{.*}}flops = 3.840000e+02 : f64, {{.*}}matrix
  %es = het.node "Einsum" opset 12 (%t, %b3) attrs {equation = "bij,bjk->bik"} : (tensor<2x4x8xf32>, tensor<2x8x3xf32>) -> tensor<2x4x3xf32>
  // Batched, broadcasting MatMul: 2 * out * K.
  // CHECK: het.node "MatMul" {{.*}}flops = 1.440000e+03 : f64, {{.*}}matrix
  %mm = het.node "MatMul" opset 13 (%m, %w56) : (tensor<2x3x4x5xf32>, tensor<5x6xf32>) -> tensor<2x3x4x6xf32>
  // Gemm with a bias: 2 * M * N * K + M * N.
  // CHECK: het.node "Gemm" {{.*}}flops = 1.360000e+02 : f64, {{.*}}matrix
  %gm = het.node "Gemm" opset 13 (%p, %gb, %gc) : (tensor<2x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // GRU, per step: 2*B*3H*(I+H) + 22*B*H: 3 * (2*2*15*9 + 22*2*5).
  // CHECK: het.node "GRU" {{.*}}flops = 2.280000e+03 : f64, {{.*}}matrix
  %gru = het.node "GRU" opset 14 (%g, %gw, %gr) attrs {hidden_size = 5 : i64} : (tensor<3x2x4xf32>, tensor<1x15x4xf32>, tensor<1x15x5xf32>) -> tensor<3x1x2x5xf32>
  // Erf is a transcendental (4 per element); Gelu (opset 20) 8 per element.
  // CHECK: het.node "Erf" {{.*}}flops = 2.560000e+02
  %erf = het.node "Erf" opset 13 (%t) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: het.node "Gelu" {{.*}}flops = 5.120000e+02
  %gelu = het.node "Gelu" opset 20 (%t) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // Cast, Concat, Slice, Expand: bytes only.
  // CHECK: het.node "Cast" {{.*}}het.cost = {bytes = 7.680000e+02 : f64, {{.*}}flops = 0.000000e+00
  %cast = het.node "Cast" opset 19 (%t) attrs {to = 7 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xi64>
  // CHECK: het.node "Concat" {{.*}}het.cost = {bytes = 1.024000e+03 : f64, {{.*}}flops = 0.000000e+00
  %cat = het.node "Concat" opset 13 (%t, %t) attrs {axis = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<4x4x8xf32>
  het.return
}
