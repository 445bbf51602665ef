// RUN: hetplan-opt %s -split-input-file --het-bind-shapes="dims=batch=9973,sequence=8" --het-check-samples="batch=9973" | FileCheck %s

// A transformer block keeps samples apart: the Reshape keeps the batch in
// front, Softmax works on the last axis.
// CHECK-LABEL: het.graph @apart
// CHECK-SAME: het.batch_axes = {inputs = array<i64: 0>, outputs = array<i64: 0>}
// CHECK-NOT: het.samples_mixed
het.graph @apart(%x: tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">> {het.name = "x"})
    -> (tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">> {het.name = "y"}) {
  %w = het.weight @w at <file = "", offset = 0, length = 16384, encoding = "raw"> : tensor<64x64xf32>
  %flat = het.weight @flat value(dense<[-1, 64]> : tensor<2xi64>) : tensor<2xi64>
  %p = het.node "MatMul" opset 17 (%x, %w) : (tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">>, tensor<64x64xf32>) -> !het.unknown
  %s = het.node "Softmax" opset 17 (%p) attrs {axis = -1 : i64} : (!het.unknown) -> !het.unknown
  %sh = het.node "Shape" opset 17 (%x) : (tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">>) -> !het.unknown
  %r = het.node "Reshape" opset 17 (%s, %flat) : (!het.unknown, tensor<2xi64>) -> !het.unknown
  %y = het.node "Reshape" opset 17 (%r, %sh) : (!het.unknown, !het.unknown) -> tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">>
  het.return %y : tensor<?x?x64xf32, #het.dims<"batch", "sequence", "">>
}

// -----

// CLIP's logits pair every image with every text: the batch must not split.
// CHECK-LABEL: het.graph @clip
// CHECK-SAME: het.batch_axes = {inputs = array<i64: 0, 0>, outputs = array<i64: 0>}
// CHECK-SAME: het.samples_mixed = "node 'logits' (MatMul): output #0 (tensor<9973x9973xf32>) holds the batch twice: it pairs every sample with every other"
het.graph @clip(%img: tensor<?x32xf32, #het.dims<"batch", "">> {het.name = "img"},
                %txt: tensor<?x32xf32, #het.dims<"batch", "">> {het.name = "txt"}) -> (!het.unknown {het.name = "logits"}) {
  %t = het.node "Transpose" opset 17 (%txt) attrs {perm = array<i64: 1, 0>} : (tensor<?x32xf32, #het.dims<"batch", "">>) -> !het.unknown
  %l = het.node "MatMul" opset 17 (%img, %t) {name = "logits"} : (tensor<?x32xf32, #het.dims<"batch", "">>, !het.unknown) -> !het.unknown
  het.return %l : !het.unknown
}

// -----

// A mean over the batch reduces across samples.
// CHECK-LABEL: het.graph @mean
// CHECK-SAME: het.samples_mixed = "node 'm' (ReduceMean): its outputs lose the batch dim: it reduces over the samples or picks some of them"
het.graph @mean(%x: tensor<?x4xf32, #het.dims<"batch", "">>) -> (!het.unknown) {
  %m = het.node "ReduceMean" opset 17 (%x) attrs {axes = array<i64: 0>, keepdims = 1 : i64} {name = "m"} : (tensor<?x4xf32, #het.dims<"batch", "">>) -> !het.unknown
  het.return %m : !het.unknown
}

// -----

// Softmax over the batch axis keeps the shape but mixes samples.
// CHECK-LABEL: het.graph @softmax0
// CHECK-SAME: het.samples_mixed = "node 's' (Softmax): Softmax along axis 0, which carries the batch"
het.graph @softmax0(%x: tensor<?x4xf32, #het.dims<"batch", "">>) -> (!het.unknown) {
  %s = het.node "Softmax" opset 17 (%x) attrs {axis = 0 : i64} {name = "s"} : (tensor<?x4xf32, #het.dims<"batch", "">>) -> !het.unknown
  het.return %s : !het.unknown
}

// -----

// Recurrent state with the batch on axis 1 ([layers, batch, hidden]): the
// samples stay apart, the axes say where the batch is.
// CHECK-LABEL: het.graph @state
// CHECK-SAME: het.batch_axes = {inputs = array<i64: 1>, outputs = array<i64: 1>}
// CHECK-NOT: het.samples_mixed
het.graph @state(%h: tensor<2x?x16xf32, #het.dims<"", "batch", "">>) -> (!het.unknown) {
  %t = het.node "Tanh" opset 17 (%h) : (tensor<2x?x16xf32, #het.dims<"", "batch", "">>) -> !het.unknown
  het.return %t : !het.unknown
}
