// Each verifier catches malformed IR with a message that says what is wrong.
// RUN: hetplan-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{dimension 0 is named 'batch' but has the static size 4}}
het.graph @static_named(%x: tensor<4xf32, #het.dims<"batch">>) -> () {
  het.return
}

// -----

// expected-error @+1 {{#het.dims has 1 names for a tensor of rank 2}}
het.graph @rank_mismatch(%x: tensor<?x4xf32, #het.dims<"batch">>) -> () {
  het.return
}

// -----

het.graph @weight_size() -> () {
  // expected-error @+1 {{refers to 12 bytes but 'tensor<4x2xf32>' needs 32}}
  %w = het.weight @w at <file = "", offset = 0, length = 12, encoding = "raw"> : tensor<4x2xf32>
  het.return
}

// -----

het.graph @weight_both() -> () {
  // expected-error @+1 {{needs exactly one of an inline value or an extern reference}}
  %w = het.weight @w : tensor<2xf32>
  het.return
}

// -----

het.graph @weight_dynamic() -> () {
  // expected-error @+1 {{result must be a tensor of static shape}}
  %w = het.weight @w value(dense<1.0> : tensor<2xf32>) : tensor<?xf32>
  het.return
}

// -----

het.graph @weight_value_type() -> () {
  // expected-error @+1 {{value of type 'tensor<2xf32>' does not match the result type 'tensor<3xf32>'}}
  %w = het.weight @w value(dense<1.0> : tensor<2xf32>) : tensor<3xf32>
  het.return
}

// -----

het.graph @duplicate_weight() -> () {
  %a = het.weight @w value(dense<1.0> : tensor<2xf32>) : tensor<2xf32>
  // expected-error @+1 {{redefines the weight @w of this graph}}
  %b = het.weight @w value(dense<1.0> : tensor<2xf32>) : tensor<2xf32>
  het.return
}

// -----

het.graph @bad_encoding() -> () {
  // expected-error @+1 {{#het.extern encoding must be "raw" or "varint", not "zip"}}
  %w = het.weight @w at <file = "", offset = 0, length = 8, encoding = "zip"> : tensor<2xf32>
  het.return
}

// -----

het.graph @return_count(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  // expected-error @+1 {{returns 0 values but the graph has 1 outputs}}
  het.return
}

// -----

het.graph @return_type(%x: tensor<2xf32>) -> (tensor<3xf32>) {
  // expected-error @+1 {{output #0 has type 'tensor<2xf32>' but the graph declares 'tensor<3xf32>'}}
  het.return %x : tensor<2xf32>
}

// -----

het.graph @empty_op_type(%x: tensor<2xf32>) -> () {
  // expected-error @+1 {{needs a non-empty op_type}}
  %y = het.node "" opset 17 (%x) : (tensor<2xf32>) -> tensor<2xf32>
  het.return
}

// -----

het.graph @bad_opset(%x: tensor<2xf32>) -> () {
  // expected-error @+1 {{opset must be positive, got 0}}
  %y = het.node "Relu" opset 0 (%x) : (tensor<2xf32>) -> tensor<2xf32>
  het.return
}

// -----

het.graph @region_names(%c: tensor<i1>) -> () {
  // expected-error @+1 {{has 1 subgraph regions but 0 region_names}}
  %y = het.node "If" opset 17 (%c) : (tensor<i1>) -> tensor<i1> {
    het.return %c : tensor<i1>
  }
  het.return
}

// -----

het.graph @region_and_attr(%c: tensor<i1>) -> () {
  // expected-error @+1 {{attribute 'body' is both a region and an attribute}}
  %y = het.node "Loop" opset 17 (%c) attrs {body = 1 : i64} {region_names = ["body"]} : (tensor<i1>) -> tensor<i1> {
    het.return %c : tensor<i1>
  }
  het.return
}

// -----

het.graph @constant_type() -> () {
  // expected-error @+1 {{value of type 'tensor<2xi64>' does not match the result type 'tensor<2xi32>'}}
  %c = het.constant(dense<1> : tensor<2xi64>) : tensor<2xi32>
  het.return
}


// -----

// Element counts and byte sizes must fit int64: every later size multiplies them.
het.graph @huge_weight() -> () {
  // expected-error @+1 {{the result of type 'tensor<1099511627776x1099511627776xf32>' has more elements or bytes than a 64-bit size holds}}
  %w = het.weight @w at <file = "w.bin", offset = 0, length = 0, encoding = "raw"> : tensor<1099511627776x1099511627776xf32>
  het.return
}

// -----

// expected-error @+1 {{input #0 of type 'tensor<?x4611686018427387904xf32>' has more elements or bytes than a 64-bit size holds}}
het.graph @huge_input(%x: tensor<?x4611686018427387904xf32>) -> () {
  het.return
}

// -----

het.graph @huge_result(%x: tensor<2xf32>) -> () {
  // expected-error @+1 {{result #0 of type 'tensor<4294967296x4294967296xf32>' has more elements or bytes than a 64-bit size holds}}
  %y = het.node "Expand" opset 17 (%x) : (tensor<2xf32>) -> tensor<4294967296x4294967296xf32>
  het.return
}
