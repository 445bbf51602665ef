// Bad options are errors that say what to write.
// RUN: not hetplan-opt %s --het-annotate-costs="devices=A100-80,T4" 2>&1 | FileCheck %s --check-prefix=DEVICE
// DEVICE: error: het-annotate-costs: unknown device type 'A100-80'; closest: A100-80GB
// RUN: not hetplan-opt %s --het-annotate-costs="dtype=fp8" 2>&1 | FileCheck %s --check-prefix=DTYPE
// DTYPE: error: het-annotate-costs: unknown dtype 'fp8' (expected fp32, tf32, fp16, bf16, int8 or auto)
// RUN: not hetplan-opt %s --het-annotate-costs="profile=%t.missing.json" 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: het-annotate-costs: {{.*}}missing.json: cannot read profile
// RUN: echo '{"device": "B300", "dtype": "fp32", "ops": {}}' > %t.unknown.json
// RUN: not hetplan-opt %s --het-annotate-costs="profile=%t.unknown.json" 2>&1 | FileCheck %s --check-prefix=PDEVICE
// PDEVICE: error: het-annotate-costs: {{.*}}unknown.json: unknown device type 'B300'; closest:
// RUN: echo '{"device": "T4", "dtype": "fp32", "ops": {"mm": "fast"}}' > %t.bad.json
// RUN: not hetplan-opt %s --het-annotate-costs="profile=%t.bad.json" 2>&1 | FileCheck %s --check-prefix=PBAD
// PBAD: error: het-annotate-costs: {{.*}}bad.json: op 'mm': expected seconds per sample or {"fixed": s, "per_sample": s}

het.graph @g(%x: tensor<4x3xf32>) -> () {
  %y = het.node "Relu" opset 17 (%x) {name = "mm"} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  het.return
}
