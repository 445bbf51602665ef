// RUN: not hetplan-opt %s --het-group-layers="max-layers=-1" 2>&1 | FileCheck %s
// CHECK: error: het-group-layers: max-layers must be >= 0 (0: automatic)

het.graph @g(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  het.return %x : tensor<2xf32>
}
