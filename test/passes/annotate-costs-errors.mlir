// RUN: hetplan-opt %s -split-input-file -verify-diagnostics --het-annotate-costs

// Costs need static shapes: the error names the node and what to run.
het.graph @dynamic_result(%x: tensor<4x3xf32>) -> () {
  // expected-error @+1 {{node 'r' (Relu): result #0 has no static shape (tensor<?x3xf32>); run het-bind-shapes first}}
  %y = het.node "Relu" opset 17 (%x) {name = "r"} : (tensor<4x3xf32>) -> tensor<?x3xf32>
  het.return
}

// -----

het.graph @unknown_type(%x: tensor<4x3xf32>) -> () {
  // expected-error @+1 {{node #0 (MysteryOp): result #0 has no static shape (!het.unknown); run het-bind-shapes first}}
  %y = het.node "MysteryOp" opset 17 (%x) : (tensor<4x3xf32>) -> !het.unknown
  het.return
}

// -----

// expected-error @+1 {{input 'x' has no static shape (tensor<?x3xf32, #het.dims<"batch", "">>); run het-bind-shapes first}}
het.graph @dynamic_input(%x: tensor<?x3xf32, #het.dims<"batch", "">> {het.name = "x"}) -> () {
  het.return
}

// -----

// Ops without a cost rule are priced as one FLOP per output element.
// expected-warning @+1 {{no cost rule for com.example.Frobnicate x1; priced as one FLOP per output element}}
het.graph @no_rule(%x: tensor<4x3xf32>) -> () {
  %y = het.node "Frobnicate" domain "com.example" opset 1 (%x) : (tensor<4x3xf32>) -> tensor<4x3xf32>
  het.return
}

// -----

// A Loop whose trip count is only known at run time: its body is counted once.
// expected-warning @+1 {{subgraph costs are estimates for Loop x1 (trip count or body shapes unknown: bodies counted once)}}
het.graph @loop(%n: tensor<i64>, %x: tensor<4xf32>) -> (tensor<4xf32>) {
  %true = het.weight @true value(dense<true> : tensor<i1>) : tensor<i1>
  // expected-warning @+1 {{node #0 (Loop): its trip count is known only at run time: the body is priced as one iteration}}
  %y = het.node "Loop" opset 16 (%n, %true, %x) {region_names = ["body"]} : (tensor<i64>, tensor<i1>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%i: tensor<i64>, %c: tensor<i1>, %v: tensor<4xf32>):
    %z = het.node "Relu" opset 14 (%v) : (tensor<4xf32>) -> tensor<4xf32>
    het.return %c, %z : tensor<i1>, tensor<4xf32>
  }
  het.return %y : tensor<4xf32>
}

// -----

// Body values whose shapes het could not bind are priced at 0: said per node.
// expected-warning @+1 {{subgraph costs are estimates for If x1}}
het.graph @if_unknown(%c: tensor<i1>, %x: tensor<4xf32>) -> () {
  // expected-warning @+1 {{node 'branchy' (If): 1 of the 2 nodes of its subgraphs have shapes not known at compile time and are priced at 0}}
  %y = het.node "If" opset 17 (%c) {name = "branchy", region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> tensor<4xf32> {
    %a = het.node "Relu" opset 14 (%x) : (tensor<4xf32>) -> tensor<4xf32>
    het.return %a : tensor<4xf32>
  }, {
    %b = het.node "Mystery" opset 14 (%x) : (tensor<4xf32>) -> tensor<?xf32>
    het.return %b : tensor<?xf32>
  }
  het.return
}
