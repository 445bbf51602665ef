//===- Passes.td - het passes ------------------------------*- tablegen -*-===//

#ifndef HET_PASSES
#define HET_PASSES

include "mlir/Pass/PassBase.td"

def HetPrintSummary : Pass<"het-print-summary", "::mlir::ModuleOp"> {
  let summary = "Print a short summary of each het.graph";
  let description = [{
    For every `het.graph`: node counts per op type, parameter count and bytes
    (from `het.weight` ops), inputs and outputs with their symbolic dims. The
    IR is left unchanged. This is what `hetplan summary` prints.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print the summary as JSON instead of text">
  ];
}

def HetBindShapes : Pass<"het-bind-shapes", "::mlir::ModuleOp"> {
  let summary = "Bind symbolic dims to sizes and give every value its shape";
  let description = [{
    Replaces the named dims of graph inputs (`#het.dims<"batch", ...>`) by the
    sizes given in `dims`, or whole input shapes by `input-shapes`, then walks
    the graph in order and computes each node's output types with het's own
    shape rules (the op table, `ops/defs/`, and `passes/ShapeRules.cpp`),
    folding small integer tensors so chains of shape ops (Shape, indexing,
    Concat) resolve Reshape and Expand targets. This works for any opset,
    unlike libonnx's inference (opset <= 17). A rule that finds the model
    inconsistent (a Reshape of 12 elements into 10, a matrix product whose
    contraction sizes differ) is an error at that node. Ops without a rule keep
    the types the model declared. Where a rule's rank or sizes contradict the
    model's declaration (value_info, graph outputs), the declaration is a
    hint, as in onnxruntime: the rule's type is used, with one warning per
    graph naming the first such output; a contradicted element type, or a
    contradicted size the user bound in `dims`, is an error.

    Subgraphs are bound too: If branches, Loop and Scan bodies get their
    argument types from the node's inputs, and the node's outputs follow from
    what the bodies return (If: when the condition folds, from constants or
    the `input-values` the user gives, only the taken branch is bound, and
    the node gets `het.taken_branch` (that branch's region index), which the
    cost model prices alone; else both branches, and the dims both agree on; Loop: scan outputs
    stacked on the trip count; Scan: on the sequence length). A Loop whose
    trip count folds (a constant or a Shape chain) and a Scan whose sequence
    length is known get `het.trip_count`, which the cost model multiplies
    the body by.

    Sizes only the data decides (NonZero's count, Unique's values, the
    selections of Compress and NonMaxSuppression, a TopK whose k is
    computed) get their upper bound (NonZero: every element of its input),
    with a warning at the node that says so, so planning goes on.

    ```
    hetplan-opt m.mlir --het-bind-shapes="dims=batch=8,sequence=128"
    hetplan-opt m.mlir --het-bind-shapes="input-shapes=x=8x3x640x640 require-static=true"
    ```
  }];
  let options = [
    ListOption<"dims", "dims", "std::string",
               "Symbolic dims to bind, NAME=SIZE with SIZE >= 0 (e.g. "
               "batch=8,sequence=128,past_sequence_length=0)">,
    ListOption<"inputShapes", "input-shapes", "std::string",
               "Whole input shapes, NAME=D0xD1x... (e.g. x=8x3x640x640)">,
    Option<"requireStatic", "require-static", "bool", /*default=*/"false",
           "Fail unless every tensor's shape ends up fully known">,
    ListOption<"inputValues", "input-values", "std::string",
               "Values of integer scalar inputs, NAME=VALUE (e.g. rate=16000): "
               "they fold like constants (an If on them takes one branch)">
  ];
}

def HetAnnotateCosts : Pass<"het-annotate-costs", "::mlir::ModuleOp"> {
  let summary = "Attach each node's forward cost and its time on device types";
  let description = [{
    Prices every top-level `het.node` of every `het.graph` with het's cost
    rules (`passes/cost/OpCosts.cpp`, equations and sources in
    `docs/cost-model.md`). Needs static shapes: run `het-bind-shapes` first;
    a value without a static shape is an error naming its node.

    Each node gets `het.cost`, its forward cost at the graph's shapes:
    `flops` (a multiply-add is 2), `bytes` (activations read and written),
    `weight_bytes` (weights and other plan-time constants read once per
    call), `flops_per_sample` and `bytes_per_sample` (the same divided by the
    samples per call: the size bound to `batch`, else the leading dim of the
    first input), and the unit attribute `matrix` for ops on matrix
    engines; values are rounded to six significant digits. Ops that
    cost nothing at run time (views such as Reshape, ops on weights and
    shapes only, which are folded at plan time) get zeros. Ops without a
    cost rule are priced as one FLOP per output element, with a warning.
    Nodes with subgraphs are priced from their bodies: If at its dearest
    branch, Loop at its body times the trip count (`het.trip_count` or a
    constant M), Scan at its body times the sequence length. When the trip
    count is not known (the body is priced once) or body values have no
    static shape (they are priced at 0), the node gets a warning that says
    which.

    With `devices`, each node also gets `het.time`, a dictionary from device
    type (the catalog's name) to its roofline time in seconds at the graph's
    shapes: launch + max(FLOPs / (peak x efficiency), bytes / (bandwidth x
    efficiency)). A `profile` entry measured on a device type in the same
    format replaces the roofline for that node and type.

    The graph gets `het.total_flops` and `het.total_flops_per_sample` (f64),
    `het.total_params` (i64: the float weights of two or more elements that
    ops on activations read, directly or through folded ops, each counted
    once; BatchNormalization statistics are buffers, not parameters),
    `het.samples` (i64) and, with `devices`, `het.total_time`.

    ```
    hetplan-opt m.mlir --het-bind-shapes="dims=batch=8,sequence=1024" \
      --het-annotate-costs="dtype=bf16 devices=A100-80GB,T4 profile=a100.json"
    ```

    A profile is JSON: `{"device": "A100-80GB", "dtype": "bf16", "ops":
    {"h.0.attn.qkv": 1.5e-6, "h.0.mlp.c_fc": {"fixed": 4e-6, "per_sample":
    2e-6}}}`, seconds per sample or a fixed part plus a per-sample part,
    keyed by ONNX node name.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"auto\"",
           "Format the model runs in: fp32, tf32, fp16, bf16, int8, or auto "
           "(the format its weights are stored in)">,
    ListOption<"devices", "devices", "std::string",
               "Device types to price on (catalog names or aliases, e.g. "
               "A100-80GB,T4)">,
    ListOption<"profiles", "profile", "std::string",
               "Measured profiles (JSON files) whose times replace the "
               "roofline">,
    Option<"samples", "samples", "int64_t", /*default=*/"0",
           "Samples per call the shapes describe (0: the size bound to "
           "batch, else the leading dim of the first input)">,
    Option<"stack", "stack", "std::string", /*default=*/"\"hetplan\"",
           "Software stack the times are for (the catalog's stacks: hetplan, "
           "deepspeed-2021, megatron-lm): its per-kernel host time and "
           "whether fp32 products run as TF32">
  ];
}

def HetGroupLayers : Pass<"het-group-layers", "::mlir::ModuleOp"> {
  let summary = "Cut each graph into layers the planner places as units";
  let description = [{
    Finds the cuts of the top-level node order that the fewest activation
    values cross (weights, constants, shape computations and graph inputs do
    not count, nor values such as an attention mask that every block reads),
    splits the graph there into segments, and recognizes the model's
    repeated blocks: the period of segments (1 for a ResNet bottleneck, 2
    for a pre-LN transformer block, 4 for a post-LN one) whose op sequences
    repeat over the longest run. Each repetition becomes one layer; what
    comes before is the `stem` (embeddings), what comes after the `head`.
    A layer whose nodes share a name prefix is named by it (`h.3`,
    `encoder.layer.7`), else `block<k>`. Nodes with subgraph regions stay
    whole. GPT-2 small gets 14 layers (embeddings, 12 blocks, head),
    ResNet-50 18 (stem, 16 bottlenecks, head).

    Each top-level `het.node` gets `het.layer = <index> : i64`; the graph
    gets `het.layers = [{name = "h.0", first = 12, last = 40}, ...]`, node
    indices counting top-level `het.node` ops from 0, both ends inclusive.
    Shapes need not be static.

    ```
    hetplan-opt m.mlir --het-group-layers
    hetplan-opt m.mlir --het-group-layers="max-layers=8"
    ```
  }];
  let options = [
    Option<"maxLayers", "max-layers", "int64_t", /*default=*/"0",
           "At most this many layers: neighbours with the fewest FLOPs are "
           "merged (0: as the structure gives)">
  ];
}

def HetPlan : Pass<"het-plan", "::mlir::ModuleOp"> {
  let summary = "Partition layers, split batches, price communication and "
                "simulate the schedule over a cluster (the planner's search)";
  let description = [{
    Runs hetplan's planner (docs/planner.md) on a graph that went through
    `het-bind-shapes` (with the batch bound to one sample: costs are per
    sample) and `het-group-layers`, and records the plan in the IR:

    - stage partition: each top-level `het.node` gets `het.stage = <j> : i64`;
    - batch split and devices: `het.plan.stages[j]` lists the stage's layers,
      its workers' ranks, device types and samples per micro-batch (uneven,
      in proportion to speed, capped by memory) and its tensor-parallel
      degree;
    - communication: per stage the gradient all-reduce and activation
      transfer times on the cluster's real links;
    - schedule: the simulated GPipe/1F1B step time, bubble, model FLOPs
      utilization, micro-batches and each used device's peak memory.

    The four are one pass because the search evaluates them together: a
    layer split is only good for a given device split, batch split and
    schedule. `strategy` forces the baselines and `pin` a layout, as
    `hetplan compile` does. A model that fits nowhere is an error naming the
    smallest shortfall.

    ```
    hetplan-opt m.mlir --het-bind-shapes="dims=batch=1,sequence=128" \
        --het-group-layers --het-plan="cluster=2xA100-80G,4xT4 batch=256"
    ```
  }];
  let options = [
    Option<"clusterSpec", "cluster", "std::string", /*default=*/"\"\"",
           "Cluster: inline spec (4xA100-80G,12xT4) or a YAML/JSON file">,
    Option<"batch", "batch", "int64_t", /*default=*/"1", "Samples per step">,
    Option<"mode", "mode", "std::string", /*default=*/"\"train\"", "train or infer">,
    Option<"dtype", "dtype", "std::string", /*default=*/"\"fp16\"",
           "fp32, tf32, fp16 or bf16">,
    Option<"strategy", "strategy", "std::string", /*default=*/"\"hetplan\"",
           "hetplan, dp-even, pp-even or homogeneous">,
    Option<"pin", "pin", "std::string", /*default=*/"\"\"",
           "Evaluate this layout: pp=4,dp=4,mb=8[,tp=2]">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"", "1f1b or gpipe">
  ];
}

def HetCheckSamples : Pass<"het-check-samples", "::mlir::ModuleOp"> {
  let summary = "Decide whether the batch may be split, and on which axis";
  let description = [{
    Splitting a batch across data-parallel workers or micro-batches is only
    right when the graph keeps samples apart: CLIP's image x text logits, a
    batch-wide mean or an indexing op that picks samples combine them. Run on a
    graph whose batch dim is bound to an unusual size `batch` (a prime no
    model uses, e.g. 9973), every dim that size divides carries the batch.
    A node combines samples when an output holds the batch twice (an outer
    product), when a batch-carrying input leads to outputs without it (a
    reduction or a pick; Shape and Size excepted), when NonZero, Unique,
    Compress or NonMaxSuppression list entries of the whole batch, when
    a softmax or a
    normalization works along a batch-carrying axis, when a Reshape moves the
    batch off its place in row-major order, or when Concat joins batches.

    Each graph gets `het.batch_axes = {inputs = [...], outputs = [...]}`
    (the axis of each graph input and output that carries the batch, -1 for
    none) and, when some node combines samples, `het.samples_mixed`, a string
    naming the first such node and why. The planner never splits the batch of
    such a graph, nor of one whose batch is not on dim 0 everywhere.

    ```
    hetplan-opt m.mlir --het-bind-shapes="dims=batch=9973" --het-check-samples="batch=9973"
    ```
  }];
  let options = [
    Option<"batch", "batch", "int64_t", /*default=*/"9973",
           "The size the batch dim was bound to">
  ];
}

#endif // HET_PASSES
