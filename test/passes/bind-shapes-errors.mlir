// RUN: hetplan-opt %s -split-input-file -verify-diagnostics --het-bind-shapes="dims=batch=4"

het.graph @bad_reshape(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  %s = het.weight @s value(dense<[5, 2]> : tensor<2xi64>) : tensor<2xi64>
  // expected-error @+1 {{Reshape: cannot reshape 12 elements into 10}}
  %r = het.node "Reshape" opset 17 (%x, %s) : (tensor<?x3xf32, #het.dims<"batch", "">>, tensor<2xi64>) -> !het.unknown
  het.return
}

// -----

het.graph @bad_matmul(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  %w = het.weight @w value(dense<1.0> : tensor<4x2xf32>) : tensor<4x2xf32>
  // expected-error @+1 {{MatMul: contraction sizes differ: 3 and 4}}
  %r = het.node "MatMul" opset 17 (%x, %w) : (tensor<?x3xf32, #het.dims<"batch", "">>, tensor<4x2xf32>) -> !het.unknown
  het.return
}

// -----

// A declared element type that the graph contradicts is an error (onnxruntime
// refuses it too); declared sizes and ranks are hints (bind-shapes-declared.mlir).
het.graph @declared_differently(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  // expected-error @+1 {{Relu output #0 is 'tensor<4x3xf32>' by het's shape rules but the model declares 'tensor<4x3xi64>'}}
  %r = het.node "Relu" opset 17 (%x) : (tensor<?x3xf32, #het.dims<"batch", "">>) -> tensor<?x3xi64, #het.dims<"batch", "">>
  het.return
}

// -----

// A size the user bound (batch = 4) that the graph contradicts stays an error.
het.graph @binding_contradicted(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  %s = het.constant(dense<[2, 6]> : tensor<2xi64>) : tensor<2xi64>
  // expected-error @+1 {{Reshape output #0 is 'tensor<2x6xf32>' by het's shape rules but the model declares 'tensor<4x6xf32>'}}
  %r = het.node "Reshape" opset 17 (%x, %s) : (tensor<?x3xf32, #het.dims<"batch", "">>, tensor<2xi64>) -> tensor<?x6xf32, #het.dims<"batch", "">>
  het.return
}

// -----

// Where needs its three inputs (a mutated model once crashed the binder here).
het.graph @where_short(%c: tensor<4xi1>, %x: tensor<4xf32>) -> () {
  // expected-error @+1 {{Where: needs 3 inputs (condition, X, Y), not 2}}
  %w = het.node "Where" opset 16 (%c, %x) : (tensor<4xi1>, tensor<4xf32>) -> !het.unknown
  het.return
}

// -----

het.graph @bad_conv(%x: tensor<?x3x8x8xf32, #het.dims<"batch", "", "", "">>) -> () {
  %w = het.weight @w at <file = "", offset = 0, length = 1152, encoding = "raw"> : tensor<8x4x3x3xf32>
  // expected-error @+1 {{Conv: input has 3 channels but the weight expects 4}}
  %c = het.node "Conv" opset 17 (%x, %w) : (tensor<?x3x8x8xf32, #het.dims<"batch", "", "", "">>, tensor<8x4x3x3xf32>) -> !het.unknown
  het.return
}

// -----

// The op table's rules read their required inputs: too few is an error.
het.graph @too_few_inputs(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  // expected-error @+1 {{MatMul: needs at least 2 inputs, not 1}}
  %m = het.node "MatMul" opset 17 (%x) : (tensor<?x3xf32, #het.dims<"batch", "">>) -> !het.unknown
  het.return
}

// -----

het.graph @constant_of_no_shape() -> () {
  // expected-error @+1 {{ConstantOfShape: needs 1 input (the shape), not 0}}
  %c = het.node "ConstantOfShape" opset 17 () : () -> !het.unknown
  het.return
}

// -----

// Found by the compile fuzzer (test/fuzz/corpus/compile/finding-*): a
// repeated Unsqueeze axis read past the input's dims; a Squeeze axis out of
// range was dropped silently; a one-input Div passed for an identity and the
// cost rules read its missing second input.
het.graph @unsqueeze_repeated_axis(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  %a = het.constant(dense<[1, 1]> : tensor<2xi64>) : tensor<2xi64>
  // expected-error @+1 {{Unsqueeze axis 1 is repeated}}
  %r = het.node "Unsqueeze" opset 17 (%x, %a) : (tensor<?x3xf32, #het.dims<"batch", "">>, tensor<2xi64>) -> !het.unknown
  het.return
}

// -----

het.graph @unsqueeze_axis_out_of_range(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  %a = het.constant(dense<[5]> : tensor<1xi64>) : tensor<1xi64>
  // expected-error @+1 {{Unsqueeze axis 5 is out of range for output rank 3}}
  %r = het.node "Unsqueeze" opset 17 (%x, %a) : (tensor<?x3xf32, #het.dims<"batch", "">>, tensor<1xi64>) -> !het.unknown
  het.return
}

// -----

het.graph @squeeze_axis_out_of_range(%x: tensor<?x1xf32, #het.dims<"batch", "">>) -> () {
  %a = het.constant(dense<[-3]> : tensor<1xi64>) : tensor<1xi64>
  // expected-error @+1 {{Squeeze axis -3 is out of range for rank 2}}
  %r = het.node "Squeeze" opset 17 (%x, %a) : (tensor<?x1xf32, #het.dims<"batch", "">>, tensor<1xi64>) -> !het.unknown
  het.return
}

// -----

het.graph @div_one_input(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  // expected-error @+1 {{Div: needs 2 inputs, not 1}}
  %r = het.node "Div" opset 17 (%x) : (tensor<?x3xf32, #het.dims<"batch", "">>) -> !het.unknown
  het.return
}

// -----

// ConstantOfShape with a negative dim (the compile fuzzer: its folded fill
// was sized 2^64 - 1 and LLVM aborted).
het.graph @constant_of_shape_negative(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  %s = het.constant(dense<[2, -1]> : tensor<2xi64>) : tensor<2xi64>
  // expected-error @+1 {{ConstantOfShape: shape has a negative dim (-1)}}
  %r = het.node "ConstantOfShape" opset 17 (%s) {value = dense<1> : tensor<1xi64>} : (tensor<2xi64>) -> !het.unknown
  het.return
}

// -----

// A Slice whose bounds are known only at run time, with an axis the input
// does not have (the compile fuzzer: the rule indexed past the dims).
het.graph @slice_unknown_bounds_bad_axis(%x: tensor<?x3xf32, #het.dims<"batch", "">>, %s: tensor<1xi64>) -> () {
  %a = het.constant(dense<[5]> : tensor<1xi64>) : tensor<1xi64>
  // expected-error @+1 {{Slice: axis out of range}}
  %r = het.node "Slice" opset 17 (%x, %s, %s, %a) : (tensor<?x3xf32, #het.dims<"batch", "">>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> !het.unknown
  het.return
}
