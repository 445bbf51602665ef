// RUN: hetplan-opt %s -split-input-file -verify-diagnostics --het-bind-shapes="dims=batch=2,sequence=16" | FileCheck %s

// Indexing ops of real exports: GatherND (dynamo's boolean masks), the
// Scatter family (output = data), OneHot (depth folded from a constant).
// CHECK-LABEL: het.graph @indexing
het.graph @indexing(%x: tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>,
                    %idx: tensor<?x3x2xi64, #het.dims<"batch", "", "">>,
                    %lab: tensor<?x?xi64, #het.dims<"batch", "sequence">>) -> () {
  // indices [2, 3, 2] address the first two dims: output [2, 3] + [8]
  // CHECK: het.node "GatherND" {{.*}} -> tensor<2x3x8xf32>
  %g = het.node "GatherND" opset 13 (%x, %idx) : (tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>, tensor<?x3x2xi64, #het.dims<"batch", "", "">>) -> !het.unknown
  // batch_dims = 1: indices [2, 3, 1] address dim 1 within each batch: [2, 3] + [8]
  %i1 = het.weight @i1 at <file = "", offset = 0, length = 48, encoding = "raw"> : tensor<2x3x1xi64>
  // CHECK: het.node "GatherND" {{.*}} -> tensor<2x3x8xf32>
  %gb = het.node "GatherND" opset 13 (%x, %i1) attrs {batch_dims = 1 : i64} : (tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>, tensor<2x3x1xi64>) -> !het.unknown
  // CHECK: het.node "ScatterND" {{.*}} -> tensor<2x16x8xf32>
  %u = het.weight @u at <file = "", offset = 0, length = 192, encoding = "raw"> : tensor<2x3x8xf32>
  %snd = het.node "ScatterND" opset 18 (%x, %idx, %u) : (tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>, tensor<?x3x2xi64, #het.dims<"batch", "", "">>, tensor<2x3x8xf32>) -> !het.unknown
  // CHECK: het.node "ScatterElements" {{.*}} -> tensor<2x16x8xf32>
  %se = het.node "ScatterElements" opset 18 (%x, %g, %g) attrs {axis = 1 : i64} : (tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>, !het.unknown, !het.unknown) -> !het.unknown
  // CHECK: het.node "OneHot" {{.*}} -> tensor<2x16x10xf16>
  %depth = het.constant(dense<10> : tensor<i64>) : tensor<i64>
  %vals = het.constant(dense<[0.0, 1.0]> : tensor<2xf16>) : tensor<2xf16>
  %oh = het.node "OneHot" opset 11 (%lab, %depth, %vals) : (tensor<?x?xi64, #het.dims<"batch", "sequence">>, tensor<i64>, tensor<2xf16>) -> !het.unknown
  // axis = 1 puts the depth in the middle
  // CHECK: het.node "OneHot" {{.*}} -> tensor<2x10x16xf16>
  %oh1 = het.node "OneHot" opset 11 (%lab, %depth, %vals) attrs {axis = 1 : i64} : (tensor<?x?xi64, #het.dims<"batch", "sequence">>, tensor<i64>, tensor<2xf16>) -> !het.unknown
  het.return
}

// -----

// Data-dependent sizes are planned with an upper bound, and say so.
// CHECK-LABEL: het.graph @data_dependent
het.graph @data_dependent(%x: tensor<?x?xf32, #het.dims<"batch", "sequence">>,
                          %boxes: tensor<?x100x4xf32, #het.dims<"batch", "", "">>,
                          %scores: tensor<?x3x100xf32, #het.dims<"batch", "", "">>) -> () {
  // expected-warning @+2 {{NonZero: the number of nonzero elements is known only at run time; planned with its upper bound 32 (every element of the input)}}
  // CHECK: het.node "NonZero" {{.*}} -> tensor<2x32xi64>
  %nz = het.node "NonZero" opset 13 (%x) : (tensor<?x?xf32, #het.dims<"batch", "sequence">>) -> tensor<2x?xi64>
  // What follows plans with the bound: GatherND of the transposed indices.
  // CHECK: het.node "Transpose" {{.*}} -> tensor<32x2xi64>
  %t = het.node "Transpose" opset 13 (%nz) attrs {perm = array<i64: 1, 0>} : (tensor<2x?xi64>) -> !het.unknown
  // CHECK: het.node "GatherND" {{.*}} -> tensor<32xf32>
  %sel = het.node "GatherND" opset 13 (%x, %t) : (tensor<?x?xf32, #het.dims<"batch", "sequence">>, !het.unknown) -> !het.unknown
  // A constant input folds: no bound, no warning.
  %c = het.constant(dense<[[1, 0], [0, 1], [1, 1]]> : tensor<3x2xi64>) : tensor<3x2xi64>
  // CHECK: het.node "NonZero" {{.*}} -> tensor<2x4xi64>
  %nzc = het.node "NonZero" opset 13 (%c) : (tensor<3x2xi64>) -> !het.unknown
  // expected-warning @+2 {{Unique: the number of unique values is known only at run time; planned with its upper bound 32 (every element of the input)}}
  // CHECK: het.node "Unique" {{.*}} -> (tensor<32xf32>, tensor<32xi64>, tensor<32xi64>, tensor<32xi64>)
  %u:4 = het.node "Unique" opset 11 (%x) : (tensor<?x?xf32, #het.dims<"batch", "sequence">>) -> (!het.unknown, !het.unknown, !het.unknown, !het.unknown)
  %max = het.constant(dense<10> : tensor<1xi64>) : tensor<1xi64>
  // expected-warning @+2 {{NonMaxSuppression: the number of selected boxes is known only at run time; planned with its upper bound 60 (batches x classes x max_output_boxes_per_class)}}
  // CHECK: het.node "NonMaxSuppression" {{.*}} -> tensor<60x3xi64>
  %sel3 = het.node "NonMaxSuppression" opset 11 (%boxes, %scores, %max) : (tensor<?x100x4xf32, #het.dims<"batch", "", "">>, tensor<?x3x100xf32, #het.dims<"batch", "", "">>, tensor<1xi64>) -> !het.unknown
  // A TopK whose k is computed from data: at most the axis.
  %k = het.node "ReduceMax" opset 18 (%nz) attrs {keepdims = 1 : i64} : (tensor<2x?xi64>) -> !het.unknown
  // expected-warning @+2 {{TopK: k is known only at run time; planned with its upper bound 16 (the size of the axis it selects from)}}
  // CHECK: het.node "TopK" {{.*}} -> (tensor<2x16xf32>, tensor<2x16xi64>)
  %v:2 = het.node "TopK" opset 11 (%x, %k) : (tensor<?x?xf32, #het.dims<"batch", "sequence">>, !het.unknown) -> (!het.unknown, !het.unknown)
  het.return
}

// -----

// Range: folded from constants and shape chains (YOLO's anchor grids), float
// ones included; otherwise rank 1.
// CHECK-LABEL: het.graph @range
het.graph @range(%x: tensor<?x3x20x30xf32, #het.dims<"batch", "", "", "">>, %n: tensor<i64>) -> () {
  %s = het.node "Shape" opset 17 (%x) : (tensor<?x3x20x30xf32, #het.dims<"batch", "", "", "">>) -> !het.unknown
  %i3 = het.constant(dense<3> : tensor<1xi64>) : tensor<1xi64>
  %w = het.node "Gather" opset 13 (%s, %i3) attrs {axis = 0 : i64} : (!het.unknown, tensor<1xi64>) -> !het.unknown
  %wsq = het.node "Squeeze" opset 13 (%w) : (!het.unknown) -> !het.unknown
  %zero = het.constant(dense<0> : tensor<i64>) : tensor<i64>
  %one = het.constant(dense<1> : tensor<i64>) : tensor<i64>
  // CHECK: het.node "Range" {{.*}} -> tensor<30xi64>
  %r = het.node "Range" opset 11 (%zero, %wsq, %one) : (tensor<i64>, !het.unknown, tensor<i64>) -> !het.unknown
  %f0 = het.constant(dense<0.0> : tensor<f32>) : tensor<f32>
  %f1 = het.constant(dense<2.0> : tensor<f32>) : tensor<f32>
  %fd = het.constant(dense<0.5> : tensor<f32>) : tensor<f32>
  // ceil((2 - 0) / 0.5) = 4
  // CHECK: het.node "Range" {{.*}} -> tensor<4xf32>
  %rf = het.node "Range" opset 11 (%f0, %f1, %fd) : (tensor<f32>, tensor<f32>, tensor<f32>) -> !het.unknown
  // CHECK: het.node "Range" {{.*}} -> tensor<?xi64>
  %rd = het.node "Range" opset 11 (%zero, %n, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> !het.unknown
  het.return
}

// -----

// Pad with pads computed at run time the way torch exports reflect padding:
// Size/Sub/ConstantOfShape/Concat, a [-1, 2] Reshape, a flip (Slice with step
// -1), a Transpose and a flattening Reshape. het folds the chain.
// CHECK-LABEL: het.graph @torch_pad
het.graph @torch_pad(%x: tensor<?x4x10x10xf32, #het.dims<"batch", "", "", "">>, %p: tensor<4xi64>) -> () {
  %pad = het.constant(dense<[1, 2, 3, 4]> : tensor<4xi64>) : tensor<4xi64>
  %len = het.node "Size" opset 13 (%pad) : (tensor<4xi64>) -> !het.unknown
  %eight = het.constant(dense<8> : tensor<i64>) : tensor<i64>
  %ext = het.node "Sub" opset 13 (%eight, %len) : (tensor<i64>, !het.unknown) -> !het.unknown
  %ax0 = het.constant(dense<0> : tensor<1xi64>) : tensor<1xi64>
  %extv = het.node "Unsqueeze" opset 13 (%ext, %ax0) : (!het.unknown, tensor<1xi64>) -> !het.unknown
  %zeros = het.node "ConstantOfShape" opset 9 (%extv) attrs {value = dense<0> : tensor<1xi64>} : (!het.unknown) -> !het.unknown
  %all = het.node "Concat" opset 13 (%pad, %zeros) attrs {axis = 0 : i64} : (tensor<4xi64>, !het.unknown) -> !het.unknown
  %shape2 = het.constant(dense<[-1, 2]> : tensor<2xi64>) : tensor<2xi64>
  %m = het.node "Reshape" opset 13 (%all, %shape2) : (!het.unknown, tensor<2xi64>) -> !het.unknown
  %st = het.constant(dense<-1> : tensor<1xi64>) : tensor<1xi64>
  %en = het.constant(dense<-9223372036854775807> : tensor<1xi64>) : tensor<1xi64>
  %flip = het.node "Slice" opset 13 (%m, %st, %en, %ax0, %st) : (!het.unknown, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> !het.unknown
  %tr = het.node "Transpose" opset 13 (%flip) attrs {perm = array<i64: 1, 0>} : (!het.unknown) -> !het.unknown
  %flat = het.constant(dense<-1> : tensor<1xi64>) : tensor<1xi64>
  %pads = het.node "Reshape" opset 13 (%tr, %flat) : (!het.unknown, tensor<1xi64>) -> !het.unknown
  // pads = [0, 0, 3, 1, 0, 0, 4, 2]: H + 3 + 4, W + 1 + 2
  // CHECK: het.node "Pad" {{.*}} -> tensor<2x4x17x13xf32>
  %y = het.node "Pad" opset 13 (%x, %pads) attrs {mode = "reflect"} : (tensor<?x4x10x10xf32, #het.dims<"batch", "", "", "">>, !het.unknown) -> !het.unknown
  // Pads from a graph input: only the rank is known.
  // CHECK: het.node "Pad" {{.*}} -> tensor<?x?x?x?xf32>
  %z = het.node "Pad" opset 13 (%x, %p) : (tensor<?x4x10x10xf32, #het.dims<"batch", "", "", "">>, tensor<4xi64>) -> !het.unknown
  het.return
}

// -----

// Einsum (explicit and implicit outputs, "..." broadcast), and ops whose
// output is their input's shape: Trilu, CumSum.
// CHECK-LABEL: het.graph @einsum
het.graph @einsum(%q: tensor<?x4x?x8xf32, #het.dims<"batch", "", "sequence", "">>,
                  %k: tensor<?x4x?x8xf32, #het.dims<"batch", "", "sequence", "">>) -> () {
  // CHECK: het.node "Einsum" {{.*}} -> tensor<2x4x16x16xf32>
  %s = het.node "Einsum" opset 12 (%q, %k) attrs {equation = "bhid,bhjd->bhij"} : (tensor<?x4x?x8xf32, #het.dims<"batch", "", "sequence", "">>, tensor<?x4x?x8xf32, #het.dims<"batch", "", "sequence", "">>) -> !het.unknown
  // CHECK: het.node "Einsum" {{.*}} -> tensor<2x4x16x16xf32>
  %e = het.node "Einsum" opset 12 (%q, %k) attrs {equation = "...id, ...jd -> ...ij"} : (tensor<?x4x?x8xf32, #het.dims<"batch", "", "sequence", "">>, tensor<?x4x?x8xf32, #het.dims<"batch", "", "sequence", "">>) -> !het.unknown
  %w = het.weight @w at <file = "", offset = 0, length = 128, encoding = "raw"> : tensor<8x4xf32>
  // implicit: letters seen once, alphabetical: "ij,jk" -> "ik"
  %m = het.node "Einsum" opset 12 (%s, %s) attrs {equation = "...ij,...jk"} : (!het.unknown, !het.unknown) -> !het.unknown
  // CHECK: het.node "Einsum" {{.*}} -> tensor<2x4x16x16xf32>
  // CHECK: het.node "Trilu" {{.*}} -> tensor<2x4x16x16xf32>
  %t = het.node "Trilu" opset 14 (%s) : (!het.unknown) -> !het.unknown
  %ax = het.constant(dense<2> : tensor<i64>) : tensor<i64>
  // CHECK: het.node "CumSum" {{.*}} -> tensor<2x4x16x16xf32>
  %c = het.node "CumSum" opset 14 (%t, %ax) : (!het.unknown, tensor<i64>) -> !het.unknown
  het.return
}

// -----

// If, Loop and Scan: bodies get shapes (their arguments from the node's
// inputs) and the node's outputs follow from what they return.
// CHECK-LABEL: het.graph @control_flow
het.graph @control_flow(%c: tensor<i1>, %x: tensor<?x8xf32, #het.dims<"batch", "">>,
                        %seq: tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>) -> () {
  // CHECK: het.node "If" {{.*}} -> tensor<2x8xf32>
  // CHECK: het.node "Relu" {{.*}} -> tensor<2x8xf32>
  %y = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    %a = het.node "Relu" opset 14 (%x) : (tensor<?x8xf32, #het.dims<"batch", "">>) -> !het.unknown
    het.return %a : !het.unknown
  }, {
    %b = het.node "Neg" opset 13 (%x) : (tensor<?x8xf32, #het.dims<"batch", "">>) -> !het.unknown
    het.return %b : !het.unknown
  }
  // Branches that disagree: the dims they share stay.
  // CHECK: het.node "If" {{.*}} -> tensor<2x?xf32>
  %z = het.node "If" opset 17 (%c) {region_names = ["then_branch", "else_branch"]} : (tensor<i1>) -> !het.unknown {
    het.return %x : tensor<?x8xf32, #het.dims<"batch", "">>
  }, {
    %r = het.node "Concat" opset 13 (%x, %x) attrs {axis = 1 : i64} : (tensor<?x8xf32, #het.dims<"batch", "">>, tensor<?x8xf32, #het.dims<"batch", "">>) -> !het.unknown
    het.return %r : !het.unknown
  }
  // Loop with a trip count from a shape chain: recorded, scan outputs stacked.
  %s = het.node "Shape" opset 17 (%seq) : (tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>) -> !het.unknown
  %i1 = het.constant(dense<1> : tensor<i64>) : tensor<i64>
  %n = het.node "Gather" opset 13 (%s, %i1) attrs {axis = 0 : i64} : (!het.unknown, tensor<i64>) -> !het.unknown
  %true = het.constant(dense<true> : tensor<i1>) : tensor<i1>
  // CHECK: het.node "Loop" {{.*}}het.trip_count = 16 : i64{{.*}} -> (tensor<2x8xf32>, tensor<16x2x8xf32>)
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<i64>, %{{.*}}: tensor<i1>, %{{.*}}: tensor<2x8xf32>):
  %h, %all = het.node "Loop" opset 16 (%n, %true, %x) {region_names = ["body"]} : (!het.unknown, tensor<i1>, tensor<?x8xf32, #het.dims<"batch", "">>) -> (!het.unknown, !het.unknown) {
  ^bb0(%i: !het.unknown, %cin: !het.unknown, %v: !het.unknown):
    %t = het.node "Tanh" opset 13 (%v) : (!het.unknown) -> !het.unknown
    het.return %cin, %t, %t : !het.unknown, !het.unknown, !het.unknown
  }
  // Scan over axis 1 of [2, 16, 8]: slices [2, 8]; outputs stacked on axis 0.
  // CHECK: het.node "Scan" {{.*}}het.trip_count = 16 : i64{{.*}} -> (tensor<2x8xf32>, tensor<16x2x8xf32>)
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<2x8xf32>):
  %fin, %outs = het.node "Scan" opset 16 (%x, %seq) attrs {num_scan_inputs = 1 : i64, scan_input_axes = array<i64: 1>} {region_names = ["body"]} : (tensor<?x8xf32, #het.dims<"batch", "">>, tensor<?x?x8xf32, #het.dims<"batch", "sequence", "">>) -> (!het.unknown, !het.unknown) {
  ^bb0(%st: !het.unknown, %xt: !het.unknown):
    %sum = het.node "Add" opset 14 (%st, %xt) : (!het.unknown, !het.unknown) -> !het.unknown
    het.return %sum, %sum : !het.unknown, !het.unknown
  }
  het.return
}
