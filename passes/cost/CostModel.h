//===- CostModel.h - what each op costs on each device type -----*- C++ -*-===//
//
// The contract between the cost annotation / layer grouping passes and the
// planner: per-op costs per sample, grouped into layers (cut points), and the
// roofline that turns a cost into a time on a device type. Equations and
// their sources are in docs/cost-model.md.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_COSTMODEL_H
#define HETPLAN_PASSES_COST_COSTMODEL_H

#include "passes/cluster/DeviceCatalog.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hetplan::cost {

enum class Mode { Train, Infer };

/// The numeric format the model runs in (cluster::DType: fp32, tf32, fp16,
/// bf16) selects the device's peak rate and the bytes per element.
using cluster::DType;
/// Bytes of one element in this format (TF32 is stored as fp32, int8 as 1).
int dtypeBytes(DType d);

/// The forward cost of one op. Per-sample figures scale with the samples
/// processed; weight bytes are read once per call whatever the batch.
struct OpCost {
  std::string name;             // ONNX node name or op type
  std::string opType;
  double flopsPerSample = 0;    // multiply-add = 2 FLOPs
  double bytesPerSample = 0;    // activations read + written
  double weightBytes = 0;       // parameters read (once per call)
  bool matrixEngine = false;    // runs on tensor cores (MatMul/Gemm/Conv/attention)
  /// A batched MatMul of two activations (attention's scores and context)
  /// runs this many separate products per sample, each its own small GEMM:
  /// the size curve (Efficiency::matrixHalfFlops) applies to one product.
  /// 0: the call is one product (a weight MatMul, Gemm, Conv).
  double productsPerSample = 0;
  /// Split across a tensor-parallel group (Megatron: the large weight
  /// MatMuls and the attention products); every rank runs 1/tp of it as its
  /// own, smaller kernel. The other ops run whole on every rank.
  bool tensorParallelSplit = false;
  /// The LayerCost::tensorParallelUnits entry this op belongs to (-1: none):
  /// then it runs at 1/tp of its size exactly when that unit fits tp.
  int tensorParallelUnit = -1;
  /// Kernel launches per call: 0 for ops that cost nothing at run time
  /// (views such as Reshape/Squeeze, and ops whose inputs are all weights,
  /// constants or shapes: folded at plan time), 1 otherwise.
  double launches = 1;
  /// No cost rule for this op type: priced as one FLOP per output element
  /// plus its inputs and outputs moved once.
  bool estimated = false;
  /// For a node with subgraphs (If, Loop, Scan) whose price rests on an
  /// assumption (a trip count or body shapes unknown at compile time): one
  /// line saying which, for a compile warning. Empty otherwise.
  std::string note;

  /// FLOPs and bytes of one call processing `samples` samples.
  double flops(double samples) const { return flopsPerSample * samples; }
  double bytes(double samples) const { return bytesPerSample * samples + weightBytes; }
};

/// How a node runs on each rank of a tensor-parallel group (the runtime
/// executes what the plan lists: docs/runtime.md, "Tensor-parallel stages").
enum class TensorParallelRole : uint8_t {
  Local,    // runs unchanged on its rank's slice of split values
  Column,   // MatMul: this rank's columns of the weight; output stays split
  Row,      // MatMul: this rank's rows of the weight on a split input, then all-reduce
  Bias,     // Add of a 1-D weight (input `axis`) sliced like the split value
  Split,    // Split on the split axis: each output keeps its rank's slice
  Reshape,  // target dim `axis` divided by tp
  AllGather, // MatMul: this rank's columns, then all-gather (no pair; the plan's GATHER)
  Vocab,    // MatMul making the loss output: this rank's vocabulary columns,
            // the loss vocab-parallel (training; plan::TensorParallelNode::VOCAB)
};
struct TensorParallelNode {
  int node = 0;        // top-level node index
  TensorParallelRole role = TensorParallelRole::Local;
  int axis = 0;        // Reshape: output dim split; Bias: which input is the bias
  int segments = 1;    // Column/Bias: the weight's columns are this many
                       // equal parts (fused Q|K|V), each split over the group
};
/// Nodes split together: a Megatron region (column-parallel MatMuls, what
/// runs on their split outputs, the row-parallel MatMuls that end it, one
/// all-reduce per row MatMul forward and one per column MatMul backward) or
/// a lone column-split MatMul whose output is all-gathered.
struct TensorParallelUnit {
  bool pair = false;
  /// The split dims' greatest common divisor: degrees dividing it split
  /// every dim evenly; others run the unit's nodes whole.
  int64_t divisor = 0;
  std::vector<TensorParallelNode> nodes;
  /// Elements per sample all-reduced (pairs: the row MatMuls' outputs) or
  /// all-gathered (lone: the output) in forward, and all-reduced in
  /// backward (the column MatMuls' input gradients; training only).
  double forwardElementsPerSample = 0, backwardElementsPerSample = 0;
  int forwardCollectives = 0, backwardCollectives = 0;
  /// A vocab-parallel LM head (Role::Vocab; training only): its forward
  /// collectives are the loss's (the row maxima, then the sums of
  /// exponentials and the labels' logits: 3 values per row), and once per
  /// step the gradient of its weight's columns, `stepAllReduceElements`,
  /// is summed over the group (the runtime keeps that weight whole).
  bool vocabHead = false;
  double stepAllReduceElements = 0;
  bool fits(int tp) const { return tp > 1 && divisor > 0 && divisor % tp == 0; }
};

/// A contiguous range of top-level nodes that the planner may place as a unit
/// (a transformer block, a ResNet stage, ...).
struct LayerCost {
  std::string name;
  int firstNode = 0;            // index among the graph's top-level nodes
  int lastNode = 0;             // inclusive
  std::vector<OpCost> ops;
  int64_t parameters = 0;       // elements of the weights the layer owns
  double parameterBytes = 0;    // at the model dtype
  double stashBytesPerSample = 0;   // activations kept for backward
  /// The largest activation one op of the layer writes (per sample).
  double largestActivationBytesPerSample = 0;
  /// The largest activation inputs plus outputs of one op of the layer (per
  /// sample): its backward holds its output's gradient and writes its
  /// inputs' at once (at inference it reads the one and writes the other).
  /// A fused attention core counts Q, K, V and O, never its scores. An LM
  /// head holds a logits-sized and a hidden-sized gradient, not two logits.
  double largestInOutBytesPerSample = 0;
  /// The part of stashBytesPerSample that Megatron-style tensor
  /// parallelism splits across the group (values between a column-parallel
  /// product and its row-parallel partner, attention heads).
  double stashSplitBytesPerSample = 0;
  /// Parameters the layer reads that another layer owns (a tied LM head
  /// reads the embedding table), as (owner layer, elements): a stage without
  /// the owner keeps a copy (DeepSpeed's TiedLayerSpec).
  std::vector<std::pair<int, int64_t>> tiedParameters;
  double outputBytesPerSample = 0;  // what crosses the cut after this layer
  /// Tensor parallelism (Megatron style): the share of FLOPs it splits and
  /// the activation bytes all-reduced per sample when it does (0 = none).
  double tensorParallelFraction = 0;
  double tensorParallelAllReduceBytesPerSample = 0;
  /// Training only: when the layer's split output is the model's output (an
  /// LM head), Megatron's vocab-parallel cross entropy all-reduces three
  /// fp32 values per row instead of the logits (0 = not such a layer).
  double tensorParallelLossBytesPerSample = 0;
  /// What a tensor-parallel group splits (when not empty, it replaces the
  /// two estimates above: ops split by their unit, traffic by the units).
  std::vector<TensorParallelUnit> tensorParallelUnits;
  /// Whether op `k` runs at 1/tp of its size on a `tp`-way group.
  bool splitAt(size_t k, int tp) const {
    const OpCost &op = ops[k];
    if (tp <= 1)
      return false;
    if (op.tensorParallelUnit >= 0)
      return tensorParallelUnits[size_t(op.tensorParallelUnit)].fits(tp);
    return op.tensorParallelSplit;
  }
  /// Inference with a KV cache: bytes per sample of cached keys and values.
  double kvCacheBytesPerSample = 0;
  /// Embedding tables the layer owns: float weights of rank >= 2 read only
  /// by Gathers along axis 0 with activation indices (DLRM's sparse
  /// features, a vocabulary's rows). With sparse updates
  /// (planner::Options::sparseEmbeddings) a step's gradient of a table is
  /// the rows its samples looked up, and only those rows are updated.
  struct Embedding {
    std::string name;       // the initializer
    int64_t rows = 0;
    int64_t rowElements = 0;
    double lookupsPerSample = 0;  // rows one sample reads, over all its Gathers
    double elements() const { return double(rows) * double(rowElements); }
  };
  std::vector<Embedding> embeddings;

  double flopsPerSample() const;
  /// Weight bytes read per call, summed over the layer's ops.
  double weightBytesPerCall() const;
};

struct ModelCost {
  std::string graphName;
  std::vector<std::string> nodeNames;  // top-level nodes in order
  std::vector<LayerCost> layers;
  double inputBytesPerSample = 0;      // graph inputs, per sample
  int64_t parameters = 0;
  double forwardFlopsPerSample() const;

  /// The format bytes were counted in, and the samples per call the graph's
  /// (bound) shapes describe; per-sample figures are the graph's divided by it.
  DType dtype = DType::FP32;
  int64_t boundSamples = 1;
  double parameterBytes = 0;           // sum over layers
};

/// Per-device efficiency: the share of the datasheet peak a real kernel
/// reaches. Defaults documented in docs/cost-model.md; a profile replaces
/// the roofline with measured times.
struct Efficiency {
  double matrix = 0.6;     // MatMul/Conv on tensor cores or SIMD FMA (large problems)
  double vector = 0.3;     // elementwise/reductions: of peak FLOP/s
  double memory = 0.8;     // of peak memory bandwidth
  double launchSeconds = 5e-6;  // fixed cost per op (kernel launch + dispatch)
  /// fp32 matrix-engine ops run as TF32 where the device has a tf32 peak
  /// (the software stack's choice: cluster::Stack::tf32).
  bool tf32 = false;
  /// Size dependence of matrix efficiency: a matrix op of W FLOPs per call
  /// reaches matrix * W / (W + matrixHalfFlops) of the peak (small GEMMs
  /// leave SMs idle: too few tiles, wave quantization). 0: no dependence.
  double matrixHalfFlops = 0;
  /// Fixed host time per micro-batch and pass of a stage (the training
  /// engine's per-micro-batch instructions: DeepSpeed's pipeline schedule,
  /// loss scaling, buffer handling); the planner adds it to a stage's forward
  /// and to its backward. 0 by default; the catalog's achieved.micro_batch_us.
  double microBatchSeconds = 0;
  /// Fixed seconds per collective call of a tensor-parallel group (the
  /// stack's collective_us: dispatch, NCCL launch and synchronisation), and
  /// the share of the link's peak bandwidth its rings reach. 0 and 1 by
  /// default: a collective costs the link's latency per hop and its bytes at
  /// the peak.
  double collectiveSeconds = 0;
  double link = 1.0;

  /// The matrix-engine share of peak reached by one product of `flops` FLOPs.
  double matrixAt(double flops) const {
    if (matrixHalfFlops <= 0 || flops <= 0)
      return matrix;
    return matrix * flops / (flops + matrixHalfFlops);
  }
};

/// The documented defaults for a kind of device: a default-constructed
/// Efficiency is the GPU one; CPUs get {0.5, 0.2, 0.6, 2e-6}.
Efficiency defaultEfficiency(cluster::DeviceKind kind);
/// What `device` reaches under the software stack `stack`: the kind's
/// defaults, the stack's host figures on a GPU (kernel_us, micro_batch_us,
/// tf32), then the device's measured `achieved` figures in place of the
/// ones it gives. One rule for catalog and cluster-defined types.
Efficiency efficiency(const cluster::DeviceType &device, const cluster::Stack &stack);
/// As above under the built-in catalog's default stack (`hetplan`).
Efficiency defaultEfficiency(const cluster::DeviceType &device);

/// Peak FLOP/s an op of this kind can use on `device` in `dtype`: the
/// catalog's peak for `dtype` for matrix-engine ops; for everything else the
/// FP32 (vector unit) peak, doubled for fp16/bf16 on GPUs that support them
/// natively (packed half2 arithmetic). See docs/cost-model.md.
double peakFlopsFor(const OpCost &op, const cluster::DeviceType &device, DType dtype);

//===----------------------------------------------------------------------===//
// Measured profiles
//===----------------------------------------------------------------------===//

/// Measured time of one op: fixed + perSample * samples seconds.
struct ProfileEntry {
  double fixedSeconds = 0;
  double perSampleSeconds = 0;
  double at(double samples) const { return fixedSeconds + perSampleSeconds * samples; }
};

/// Measured op times on one device type in one format, read from JSON:
///
///   {"device": "A100-80GB", "dtype": "fp16",
///    "ops": {"h.0.attn.qkv": 1.2e-6,                        // s per sample
///            "h.0.mlp.c_fc": {"fixed": 4e-6, "per_sample": 2.1e-6}},
///    "ranks": {"0": 1.0, "2": 0.34}}                        // optional
///
/// Keys of `ops` are ONNX node names (OpCost::name). The device is any
/// spelling the catalog resolves (aliases, case and '-' do not matter).
struct Profile {
  std::string device;
  DType dtype = DType::FP32;
  std::map<std::string, ProfileEntry> ops;
  /// Measured speed of each rank of this device type that ran (`hetplan run
  /// --profile`: its FORWARD/BACKWARD time against what `ops` predicts for
  /// its work, relative to the type's fastest rank): the speed factor
  /// `hetplan compile --profile` gives that rank of the cluster, so a
  /// straggler gets less work (docs/runtime.md, "Stragglers").
  std::map<int, double> rankSpeeds;

  /// Errors read `bufferName: message`.
  static llvm::Expected<Profile> parse(llvm::StringRef json, llvm::StringRef bufferName);
  static llvm::Expected<Profile> load(llvm::StringRef path);
  llvm::json::Value toJSON() const;

  /// Whether this profile was measured on `device` (any of its spellings)
  /// in `dtype`.
  bool appliesTo(const cluster::DeviceType &device, DType dtype) const;
  /// Whether this profile was measured on `device` (any of its spellings).
  bool measuredOn(const cluster::DeviceType &device) const;
  const ProfileEntry *find(llvm::StringRef opName) const;
};

/// The measured time of `op` from the first profile that applies and has it.
std::optional<double> profiledTime(const OpCost &op, double samples,
                                   const cluster::DeviceType &device, DType dtype,
                                   llvm::ArrayRef<Profile> profiles);

//===----------------------------------------------------------------------===//
// Times
//===----------------------------------------------------------------------===//

/// Roofline time of `op` processing `samples` samples on `device`:
///   launches * launchSeconds
///     + max(flops / (peakFlopsFor(op) * (matrix ? eff.matrixAt(flops) : eff.vector)),
///           (bytes + weightBytes) / (bandwidth * eff.memory))
double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype, const Efficiency &eff);
/// As above with defaultEfficiency(device) (GPU or CPU defaults).
double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype);
/// As above, but a measured profile entry for this op on this device type
/// and format replaces the roofline.
double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype, const Efficiency &eff, llvm::ArrayRef<Profile> profiles);

/// Forward time of a layer for `samples` samples; backward is taken as twice
/// the forward (two matrix products per forward one), see docs.
double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff);
/// As above with defaultEfficiency(device) (GPU or CPU defaults).
double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype);
double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff, llvm::ArrayRef<Profile> profiles);
/// Forward seconds on one rank of a `tp`-way tensor-parallel group (compute
/// only, no collective): ops marked tensorParallelSplit run with 1/tp of
/// their FLOPs, bytes and weights (so at the size efficiency of the smaller
/// GEMM; a profiled time is divided by tp); every op keeps its whole launch
/// and dispatch cost, which does not shrink with the split.
double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff, llvm::ArrayRef<Profile> profiles, int tp);

/// Training step FLOPs per forward FLOP: forward + backward (backward = 2x
/// forward: gradients w.r.t. inputs and w.r.t. weights), Narayanan et al. SC'21.
constexpr double kTrainFlopsPerForwardFlop = 3.0;
/// Model-state bytes per parameter when training at `dtype` with an
/// optimizer that keeps `stateBuffers` fp32 buffers per parameter (SGD 0,
/// momentum SGD 1, Adam and AdamW 2: runtime::optimizerStateBuffers):
/// weights and gradients at `dtype`, an fp32 master copy of the weights
/// when `dtype` is narrower than 4 bytes, and 4 bytes per buffer
/// (Rajbhandari et al. SC'20, ZeRO, section 3: mixed-precision Adam holds
/// 2 + 2 + 12 = 16). FP32: SGD 8, momentum 12, Adam 16.
inline double trainingBytesPerParam(int stateBuffers, DType dtype) {
  double element = double(dtypeBytes(dtype));
  return 2 * element + (element < 4 ? 4.0 : 0.0) + 4.0 * stateBuffers;
}
/// Mixed-precision Adam's 16 (trainingBytesPerParam(2, FP16)).
constexpr double kAdamBytesPerParam = 16.0;

/// Time of one step of `layer` for `samples` samples: the forward time for
/// inference, kTrainFlopsPerForwardFlop times it for training.
double layerStepTime(const LayerCost &layer, double samples,
                     const cluster::DeviceType &device, DType dtype, Mode mode,
                     const Efficiency &eff, llvm::ArrayRef<Profile> profiles = {});

/// Bytes of model state the layer holds: parameters at `dtype` for
/// inference, trainingBytesPerParam(stateBuffers, dtype) per parameter for
/// training (2 buffers: Adam).
double modelStateBytes(const LayerCost &layer, Mode mode, DType dtype, int stateBuffers = 2);

} // namespace hetplan::cost

#endif
