// The software stack prices the kernels: its host time per kernel, and
// whether fp32 products run as TF32 (docs/cost-model.md, "Software stacks").
// RUN: hetplan-opt %s --het-annotate-costs="devices=A100-80GB,V100" | FileCheck %s --check-prefix=OWN
// RUN: hetplan-opt %s --het-annotate-costs="devices=A100-80GB,V100 stack=deepspeed-2021" | FileCheck %s --check-prefix=DS
// RUN: hetplan-opt %s --het-annotate-costs="devices=A100-80GB,V100 stack=Megatron-LM" | FileCheck %s --check-prefix=MEG
// RUN: not hetplan-opt %s --het-annotate-costs="stack=megatron" 2>&1 | FileCheck %s --check-prefix=BAD

// MatMul [1,1024,4096] x [4096,4096] in fp32: 2 * 1024 * 4096 * 4096 =
// 3.436e10 FLOPs, compute bound on both GPUs.
//   hetplan (4 us, plain FP32):  A100 4e-6 + 3.436e10 / (19.5e12 * 0.6) = 2.940730e-03 s;
//                                V100 4e-6 + 3.436e10 / (15.7e12 * 0.175) = 1.250980e-02 s
//   deepspeed-2021 (61 us):      A100 6.1e-5 + 2.936730e-3 = 2.997730e-03 s
//   megatron-lm (10 us, TF32, its fitted GEMM share 0.8):
//                                A100 1e-5 + 3.436e10 / (156e12 * 0.8) = 2.853180e-04 s;
//                                the V100 has no TF32 path: 1e-5 + 1.250582e-02
// OWN: het.node "MatMul"
// OWN-SAME: het.time = {"A100-SXM-80GB" = 2.940730e-03 : f64, "V100-SXM2-16GB" = 1.250980e-02 : f64}
// DS: het.node "MatMul"
// DS-SAME: het.time = {"A100-SXM-80GB" = 2.997730e-03 : f64, "V100-SXM2-16GB" = 1.256680e-02 : f64}
// MEG: het.node "MatMul"
// MEG-SAME: het.time = {"A100-SXM-80GB" = 2.853180e-04 : f64, "V100-SXM2-16GB" = 1.251580e-02 : f64}
// The vector ops keep the FP32 rate under a TF32 stack (memory bound here:
// 2 x 16 MiB at 0.8 x 2039 GB/s = 2.057e-5 s + the kernel's host time).
// OWN: het.node "Relu"
// OWN-SAME: het.time = {"A100-SXM-80GB" = 2.457040e-05
// MEG: het.node "Relu"
// MEG-SAME: het.time = {"A100-SXM-80GB" = 3.057040e-05
// BAD: het-annotate-costs: unknown software stack 'megatron'; closest: megatron-lm, hetplan, vllm

het.graph @g(%x: tensor<1x1024x4096xf32>) -> (tensor<1x1024x4096xf32>) {
  %w = het.weight @w at <file = "", offset = 0, length = 67108864, encoding = "raw"> : tensor<4096x4096xf32>
  %mm = het.node "MatMul" opset 17 (%x, %w) {name = "mm"} : (tensor<1x1024x4096xf32>, tensor<4096x4096xf32>) -> tensor<1x1024x4096xf32>
  %r = het.node "Relu" opset 17 (%mm) {name = "relu"} : (tensor<1x1024x4096xf32>) -> tensor<1x1024x4096xf32>
  het.return %r : tensor<1x1024x4096xf32>
}
