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

het.graph @declared_differently(%x: tensor<?x3xf32, #het.dims<"batch", "">>) -> () {
  // expected-error @+1 {{Relu output #0 is 'tensor<4x3xf32>' by het's shape rules but the model declares 'tensor<4x5xf32>'}}
  %r = het.node "Relu" opset 17 (%x) : (tensor<?x3xf32, #het.dims<"batch", "">>) -> tensor<?x5xf32, #het.dims<"batch", "">>
  het.return
}

// -----

het.graph @bad_conv(%x: tensor<?x3x8x8xf32, #het.dims<"batch", "", "", "">>) -> () {
  %w = het.weight @w at <file = "", offset = 0, length = 1152, encoding = "raw"> : tensor<8x4x3x3xf32>
  // expected-error @+1 {{Conv: input has 3 channels but the weight expects 4}}
  %c = het.node "Conv" opset 17 (%x, %w) : (tensor<?x3x8x8xf32, #het.dims<"batch", "", "", "">>, tensor<8x4x3x3xf32>) -> !het.unknown
  het.return
}
