// RUN: not hetplan-opt %s --het-bind-shapes="dims=batch=2 require-static=true" 2>&1 | FileCheck %s

// An If whose condition is known only at run time and whose branches give
// outputs of different shapes: refused at the If node, with the flag that
// folds the condition.
// CHECK: error: shape of this value is still not known: 'tensor<2x?xf32>' (If: its branches give different shapes and its condition is known only at run time; bind the scalar inputs the condition depends on: hetplan compile --value NAME=VALUE)
het.graph @unknown_rate(%x: tensor<?x4xf32, #het.dims<"batch", "">>, %rate: tensor<i64> {het.name = "rate"}) -> () {
  %wide = het.constant(dense<16000> : tensor<i64>) : tensor<i64>
  %c = het.node "Equal" opset 17 (%rate, %wide) : (tensor<i64>, tensor<i64>) -> tensor<i1>
  %f = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    het.return %x : tensor<?x4xf32, #het.dims<"batch", "">>
  }, {
    %y = het.node "Concat" opset 17 (%x, %x) attrs {axis = 1 : i64} : (tensor<?x4xf32, #het.dims<"batch", "">>, tensor<?x4xf32, #het.dims<"batch", "">>) -> !het.unknown
    het.return %y : !het.unknown
  }
  het.return
}
