// RUN: hetplan-opt %s -split-input-file -verify-diagnostics --het-bind-shapes="dims=batch=2 input-values=rate=16000" | FileCheck %s

// If on a value the user gives (input-values): the condition folds, only the
// branch taken is bound (the else branch, a Squeeze of a dim of 2, would not
// bind), and the node records it as het.taken_branch.
// CHECK-LABEL: het.graph @by_rate
het.graph @by_rate(%audio: tensor<?x320xf32, #het.dims<"batch", "">>, %rate: tensor<i64> {het.name = "rate"}) -> () {
  %wide = het.constant(dense<16000> : tensor<i64>) : tensor<i64>
  %c = het.node "Equal" opset 17 (%rate, %wide) : (tensor<i64>, tensor<i64>) -> tensor<i1>
  // CHECK: het.node "If" {{.*}}het.taken_branch = 0 : i64{{.*}} -> tensor<2x2x160xf32>
  %f = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    %s = het.constant(dense<[0, 2, 160]> : tensor<3xi64>) : tensor<3xi64>
    %r = het.node "Reshape" opset 17 (%audio, %s) : (tensor<?x320xf32, #het.dims<"batch", "">>, tensor<3xi64>) -> !het.unknown
    het.return %r : !het.unknown
  }, {
    %s = het.constant(dense<[0, -1, 160]> : tensor<3xi64>) : tensor<3xi64>
    %a = het.constant(dense<1> : tensor<1xi64>) : tensor<1xi64>
    %r = het.node "Reshape" opset 17 (%audio, %s) : (tensor<?x320xf32, #het.dims<"batch", "">>, tensor<3xi64>) -> !het.unknown
    %q = het.node "Squeeze" opset 17 (%r, %a) : (!het.unknown, tensor<1xi64>) -> !het.unknown
    het.return %q : !het.unknown
  }
  het.return
}

// -----

// A condition known only at run time whose branch does not bind: one error
// at the If node, naming the inner node.
het.graph @unknown_rate(%audio: tensor<?x320xf32, #het.dims<"batch", "">>, %rate: tensor<i64> {het.name = "rate"}, %other: tensor<i64>) -> () {
  %c = het.node "Equal" opset 17 (%other, %other) : (tensor<i64>, tensor<i64>) -> tensor<i1>
  // expected-error @+1 {{If: its else branch does not bind at these sizes (Squeeze: cannot squeeze dimension 1 of size 2) and its condition is known only at run time; bind the scalar inputs the condition depends on (hetplan compile --value NAME=VALUE)}}
  %f = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    %s = het.constant(dense<[0, 2, 160]> : tensor<3xi64>) : tensor<3xi64>
    %r = het.node "Reshape" opset 17 (%audio, %s) : (tensor<?x320xf32, #het.dims<"batch", "">>, tensor<3xi64>) -> !het.unknown
    het.return %r : !het.unknown
  }, {
    %s = het.constant(dense<[0, -1, 160]> : tensor<3xi64>) : tensor<3xi64>
    %a = het.constant(dense<1> : tensor<1xi64>) : tensor<1xi64>
    %r = het.node "Reshape" opset 17 (%audio, %s) : (tensor<?x320xf32, #het.dims<"batch", "">>, tensor<3xi64>) -> !het.unknown
    %q = het.node "Squeeze" opset 17 (%r, %a) : (!het.unknown, tensor<1xi64>) -> !het.unknown
    het.return %q : !het.unknown
  }
  het.return
}

// -----

// Regions come in the node's attribute order; onnx.helper sorts attributes,
// so else_branch may be region 0: region_names says which branch is taken.
// CHECK-LABEL: het.graph @sorted_branches
het.graph @sorted_branches(%x: tensor<?x4xf32, #het.dims<"batch", "">>, %rate: tensor<i64> {het.name = "rate"}) -> () {
  %wide = het.constant(dense<16000> : tensor<i64>) : tensor<i64>
  %c = het.node "Equal" opset 17 (%rate, %wide) : (tensor<i64>, tensor<i64>) -> tensor<i1>
  // CHECK: het.node "If" {{.*}}het.taken_branch = 1 : i64{{.*}} -> tensor<2x8xf32>
  %f = het.node "If" opset 17 (%c) {region_names = ["else_branch", "then_branch"]} : (tensor<i1>) -> !het.unknown {
    het.return %x : tensor<?x4xf32, #het.dims<"batch", "">>
  }, {
    %y = het.node "Concat" opset 17 (%x, %x) attrs {axis = 1 : i64} : (tensor<?x4xf32, #het.dims<"batch", "">>, tensor<?x4xf32, #het.dims<"batch", "">>) -> !het.unknown
    het.return %y : !het.unknown
  }
  het.return
}
