// Bad pass options and unknown inputs are errors that say what to write.
// RUN: not hetplan-opt %s --het-bind-shapes="dims=batch" 2>&1 | FileCheck %s --check-prefix=DIMS
// DIMS: error: bad dims entry 'batch': expected NAME=SIZE with SIZE >= 0
// RUN: not hetplan-opt %s --het-bind-shapes="input-shapes=y=2x3" 2>&1 | FileCheck %s --check-prefix=NAME
// NAME: error: input-shapes names 'y', which is not an input of @g
// RUN: not hetplan-opt %s --het-bind-shapes="input-shapes=x=2x3x4" 2>&1 | FileCheck %s --check-prefix=RANK
// RANK: error: input 'x' has rank 2 but input-shapes gives 3 dims
// RUN: not hetplan-opt %s --het-bind-shapes="require-static=true" 2>&1 | FileCheck %s --check-prefix=STATIC
// STATIC: error: shape of this value is still not known: 'tensor<?x3xf32>'
// STATIC-SAME: (ops without a shape rule: MysteryOp x1)

het.graph @g(%x: tensor<?x3xf32, #het.dims<"batch", "">> {het.name = "x"}) -> () {
  %y = het.node "MysteryOp" opset 17 (%x) : (tensor<?x3xf32, #het.dims<"batch", "">>) -> tensor<?x3xf32>
  het.return
}
