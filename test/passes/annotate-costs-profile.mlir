// A measured profile replaces the roofline for its device type and format:
// the A100 time of "mm" is fixed + per_sample * 4 samples = 1e-3 + 4 * 2.5e-4;
// the T4 and the unprofiled Relu keep their roofline times (on the T4, the
// per-kernel host overhead of the default stack, 4 us, dominates, on the
// A100 too).
// RUN: echo '{"device": "a100_80gb", "dtype": "fp32", "ops": {"mm": {"fixed": 1.0e-3, "per_sample": 2.5e-4}, "gone": 1.0}}' > %t.json
// RUN: hetplan-opt %s --het-annotate-costs="devices=A100-80GB,T4 profile=%t.json" | FileCheck %s
// CHECK: het.node "MatMul"
// CHECK-SAME: het.time = {"A100-SXM-80GB" = 2.000000e-03 : f64, T4 = 4.{{[0-9]+}}e-06 : f64}
// CHECK: het.node "Relu"
// CHECK-SAME: het.time = {"A100-SXM-80GB" = 4.{{[0-9]+}}e-06 : f64, T4 = 4.{{[0-9]+}}e-06 : f64}

// A profile measured in another format does not apply.
// RUN: hetplan-opt %s --het-annotate-costs="dtype=fp16 devices=A100-80GB profile=%t.json" 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN
// WARN: warning: profile {{.*}}.json was measured in fp32, the model is priced in fp16: ignored
// RUN: hetplan-opt %s --het-annotate-costs="dtype=fp16 devices=A100-80GB profile=%t.json" 2>/dev/null | FileCheck %s --check-prefix=FP16
// FP16: het.node "MatMul"
// FP16-SAME: het.time = {"A100-SXM-80GB" = 4.{{[0-9]+}}e-06 : f64}

het.graph @g(%x: tensor<4x16x32xf32>) -> (tensor<4x16x64xf32>) {
  %w = het.weight @w at <file = "", offset = 0, length = 8192, encoding = "raw"> : tensor<32x64xf32>
  %mm = het.node "MatMul" opset 17 (%x, %w) {name = "mm"} : (tensor<4x16x32xf32>, tensor<32x64xf32>) -> tensor<4x16x64xf32>
  %r = het.node "Relu" opset 17 (%mm) {name = "relu"} : (tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
  het.return %r : tensor<4x16x64xf32>
}
