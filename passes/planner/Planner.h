//===- Planner.h - split layers and batches across a mixed cluster -*- C++ -*-===//
//
// The planner works on the costed layer list of a model (cost::ModelCost) and
// a cluster. A plan is a pipeline of stages; each stage owns a contiguous
// range of layers and a set of data-parallel workers (a worker is
// `tensorParallel` devices of one type in one node) that split every
// micro-batch unevenly, in proportion to their speed and capped by their
// memory. The search (docs/planner.md) enumerates pipeline depth, the order
// of device types along the pipeline, tensor-parallel degree and micro-batch
// count; for each it finds the layer split that minimises the slowest stage
// (binary search on the bottleneck with a greedy fill), prices gradient
// all-reduce and activation transfers on the real links, and finally
// simulates the GPipe/1F1B schedule of the best candidates to predict step
// time, bubble and peak memory. Same inputs give the same plan.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_PLANNER_H
#define HETPLAN_PASSES_PLANNER_PLANNER_H

#include "passes/cluster/Cluster.h"
#include "passes/cost/CostModel.h"
#include "hetplan/runtime/Optimizers.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hetplan::planner {

enum class Schedule { OneFOneB, GPipe };
enum class Strategy {
  Hetplan,      // the full search
  DataParallel, // one stage, every device a worker, even batch split
  EvenPipeline, // one device per stage (or as many as layers allow), layers split evenly by count, even batch split
  Homogeneous,  // the search over the best single device type only
  Pinned,       // a layout the user gives (pp, dp, mb, tp)
};
const char *strategyName(Strategy s);
const char *scheduleName(Schedule s);

/// A layout to evaluate as given: `pp` stages of `dp` workers of `tp`
/// devices, `mb` micro-batches. 0 means "search this one".
struct Pin {
  /// mb: the micro-batch *count*; mbs: the micro-batch *size* (samples in
  /// one micro-batch, all of a stage's workers together); makePlan turns
  /// mbs into mb = batch / mbs.
  int pp = 0, dp = 0, mb = 0, tp = 0, mbs = 0;
};
/// The one rule for tensor parallelism across hosts, as the errors and
/// docs/planner.md say it: every tensor-parallel worker's devices are in one
/// node (the search, --pin tp= and --layout all follow it).
extern const char *const kTensorParallelRule;
/// "hetplan", "dp-even", "pp-even", "homogeneous" (pinned comes from --pin).
llvm::Expected<Strategy> parseStrategy(llvm::StringRef name);
/// "1f1b" or "gpipe".
llvm::Expected<Schedule> parseSchedule(llvm::StringRef name);
/// Parses "pp=4,dp=4,mb=8[,tp=2]" (or mbs=N, the micro-batch size, for mb).
llvm::Expected<Pin> parsePin(llvm::StringRef text);

/// Activation recomputation: `Never`, `Always` (every stage), or `Search`
/// (the planner turns it on per stage where it pays or is needed to fit).
enum class RecomputePolicy { Never, Search, Always };
/// Host-memory offload of optimizer state (ZeRO-Offload style).
enum class OffloadPolicy { Never, Search, Always };

/// The most samples (or tokens) a step may hold: beyond 2^24 a step is no
/// real workload, and the planner's element and byte counts (samples x
/// elements per sample) must stay far inside int64 and double's exact range.
constexpr int64_t kMaxSamples = int64_t(1) << 24;

struct Options {
  cost::Mode mode = cost::Mode::Train;
  int64_t globalBatch = 1;       // samples per step
  cost::DType dtype = cost::DType::FP16;
  Schedule schedule = Schedule::OneFOneB;
  Strategy strategy = Strategy::Hetplan;
  Pin pin;
  /// The training optimizer: its fp32 state buffers per parameter
  /// (runtime::optimizerStateBuffers) set the model state,
  /// cost::trainingBytesPerParam (16 bytes for mixed-precision Adam, ZeRO
  /// paper, section 3), and the bytes its step streams.
  runtime::Optimizer optimizer = runtime::Optimizer::Adam;
  /// Training: embedding tables (cost::LayerCost::embeddings) take sparse
  /// row updates (`--sparse-embeddings`; PyTorch's nn.Embedding(sparse=True),
  /// TorchRec's fused row-wise updates): a step's gradient of a table is the
  /// rows its samples looked up, the data-parallel sync all-gathers those
  /// rows instead of all-reducing the table, and the optimizer updates only
  /// them (its state stays per row of the whole table).
  bool sparseEmbeddings = false;
  /// Format of the gradients the data-parallel all-reduce moves; unset: the
  /// run format (`dtype`). Mixed-precision stacks usually reduce in fp32
  /// (PyTorch AMP + DDP, DeepSpeed `fp32_allreduce`).
  std::optional<cost::DType> gradientDType;
  /// GPU memory the process holds before any tensor: the CUDA context with
  /// the framework's and libraries' kernels loaded, cuBLAS/NCCL handles
  /// (docs/cost-model.md, "Training and memory"). CPU devices pay none.
  double deviceContextBytes = 512.0 * (1 << 20);
  /// The caching allocator's fragmentation: bytes reserved but not usable,
  /// as a share of the memory allocated and freed every micro-batch
  /// (activations and transient buffers). docs/cost-model.md.
  double allocatorFragmentation = 0.2;
  /// Host Adam throughput for an offloaded optimizer step, parameters per
  /// second per host (ZeRO-Offload's CPU-Adam; docs/cost-model.md). Other
  /// optimizers scale it by the bytes their step streams (memory-bound).
  double hostAdamParamsPerSecond = 1e9 / 0.22;
  /// False when the batch may not be split (samples are combined, or the
  /// batch is off dim 0): one worker per stage and one micro-batch.
  bool splitBatch = true;
  /// evaluateLayout: price a layout even when it does not fit (no share is
  /// capped by memory; Plan::fitsMemory tells), to report how far over it is.
  bool priceOverCapacity = false;
  RecomputePolicy recompute = RecomputePolicy::Search;
  /// ZeRO stage over each stage's data-parallel workers: 0..3, or -1 to let
  /// the search choose (the smallest stage that fits).
  int zeroStage = -1;
  OffloadPolicy offload = OffloadPolicy::Search;
  int maxPipelineStages = 64;
  int maxTensorParallel = 8;
  /// How a tensor-parallel worker sends its activation to the next stage.
  /// False (hetplan's runtime): the worker's first rank sends the whole
  /// activation to every rank of the receiving worker. True (Megatron-LM's
  /// scatter/gather, Narayanan et al. SC'21 section 4.1): each rank sends its
  /// 1/tp slice, the receivers all-gather it over their intra-node link.
  bool scatterGatherSends = false;
  /// The stack's loss is one fused kernel (cluster::Stack::fusedCrossEntropy):
  /// the last stage keeps the logits in the run format for it, not an fp32
  /// softmax, and no separate output-gradient buffer (docs/cost-model.md,
  /// "Training and memory").
  bool fusedCrossEntropy = false;
  /// Measured op times that replace the roofline on their device type.
  std::vector<cost::Profile> profiles;
  /// Called now and then with the share of the search done (0..1).
  std::function<void(double)> progress;
};

struct Worker {
  std::vector<int> ranks;    // tensorParallel ranks, one device type, one node
  int64_t samples = 0;       // per micro-batch
  int64_t sampleOffset = 0;
};

struct RankMemory {
  double capacity = 0, parameters = 0, gradients = 0, optimizerState = 0,
         activations = 0, kvCache = 0;
  /// The CUDA context and libraries (0 on a CPU), and the buffers that live
  /// only while an op runs or the optimizer steps: the largest op's
  /// gradients, a ZeRO-3 gather buffer, the allocator's fragmentation.
  double framework = 0, workspace = 0;
  /// Held only during the optimizer step, when no activations are: the fp32
  /// gradient copy of a mixed-precision optimizer.
  double optimizerStep = 0;
  /// What recomputation and optimizer offload took off peak() (0 where the
  /// rank's stage does not use them): the same stage and schedule priced
  /// without each.
  double recomputeSaved = 0, offloadSaved = 0;
  double peak() const {
    return parameters + gradients + optimizerState + kvCache + framework +
           std::max(activations + workspace, optimizerStep);
  }
};

struct Stage {
  int firstLayer = 0, lastLayer = 0;  // inclusive
  int tensorParallel = 1;
  /// Activations are not stashed: the stage keeps its input per micro-batch
  /// and runs its forward again before the backward.
  bool recompute = false;
  std::vector<Worker> workers;
  double forwardSeconds = 0;    // one micro-batch, slowest worker
  double backwardSeconds = 0;
  double allReduceSeconds = 0;  // gradients, once per step
  double optimizerSeconds = 0;
  double sendSeconds = 0;       // activations to the next stage, one micro-batch
  double sendBytes = 0;
};

/// One box of the simulated schedule.
struct Event {
  enum Kind { Forward, Backward, SendActivation, SendGradient, AllReduce, Optimizer };
  Kind kind;
  int stage;
  int microBatch;  // -1 for all-reduce and optimizer
  double start, end;
};

struct Plan {
  Strategy strategy = Strategy::Hetplan;
  Schedule schedule = Schedule::OneFOneB;
  int microBatches = 1;
  /// ZeRO stage 0..3: 1 shards optimizer state, 2 also gradients, 3 also
  /// parameters, over each stage's data-parallel workers.
  int zeroStage = 0;
  /// Optimizer state (and its update) lives in host memory.
  bool offloadOptimizer = false;
  /// False only for a layout priced with Options::priceOverCapacity that
  /// needs more memory than some device has (RankMemory shows how much).
  bool fitsMemory = true;
  std::vector<Stage> stages;
  std::vector<RankMemory> memory;  // by rank; capacity only for unused ranks
  std::vector<int> stageOfRank;    // -1 when a rank is unused
  std::vector<Event> timeline;
  double stepSeconds = 0;
  double samplesPerSecond = 0;
  double bubbleFraction = 0;
  double modelFlopsPerStep = 0;
  double modelFlopsUtilization = 0;
  uint64_t plansEvaluated = 0;
  double searchSeconds = 0;
};

/// Why nothing fits, and what would fix it.
struct Shortfall {
  double bytes = 0;           // what the closest layout misses there (one sample per worker)
  double rank = 0;            // how candidates compare (the search's shortfall; smallest wins)
  std::string where;          // "stage 2 of 4 on T4 (tensor parallel 1)"
  /// For that closest layout: what recomputation, a ZeRO stage, optimizer
  /// offload or more pipeline stages would save there, and whether enough.
  std::vector<std::string> fixes;
};

/// An explicit layout: for each stage its workers (each a list of `tp` ranks
/// of one device type in one node) and its last layer; `microBatches`.
struct Layout {
  std::vector<std::vector<std::vector<int>>> stageWorkers;
  std::vector<int> lastLayer;
  int tensorParallel = 1;
  int microBatches = 1;
  /// Split each micro-batch evenly among a stage's workers (as DeepSpeed and
  /// Megatron do) instead of in proportion to their speed.
  bool evenShares = false;
  /// Per stage, overriding `tensorParallel` where given (same length as
  /// stageWorkers when not empty).
  std::vector<int> stageTensorParallel;
  /// Per stage recomputation, on or off (empty: the options' policy decides
  /// for every stage).
  std::vector<bool> recompute;
  int zeroStage = -1;          // -1: the options decide
  int offloadOptimizer = -1;   // -1: the options decide, 0 no, 1 yes
};

/// Reads layouts from JSON (`hetplan compile --layout FILE`): one layout
///   {"micro_batches": 16, "tensor_parallel": 1, "shares": "even"|"speed",
///    "zero_stage": 0..3, "offload_optimizer": true|false,
///    "stages": [{"workers": [[0], [1]], "last_layer": 12, "recompute": true}, ...]}
/// (zero_stage, offload_optimizer absent: the options decide; "recompute"
/// given on any stage fixes every stage's, absent meaning off)
/// or {"layouts": [layout, ...]}. Ranks are cluster ranks, layers the
/// model's layer indices (inclusive last layer of each stage). A stage may
/// give its own "tensor_parallel" (its workers then have that many ranks).
llvm::Expected<std::vector<Layout>> parseLayouts(llvm::StringRef json,
                                                 llvm::StringRef bufferName);

/// Prices and simulates one layout exactly as the search does its
/// candidates (speed-proportional batch split, memory caps); an error when
/// it does not fit. Used by benchmarks that enumerate layouts.
llvm::Expected<Plan> evaluateLayout(const cost::ModelCost &model,
                                    const cluster::Cluster &cluster,
                                    const Options &options, const Layout &layout);

/// Finds the best plan, or an error; when no layout fits memory the error
/// text names the smallest shortfall and what would fix it.
llvm::Expected<Plan> makePlan(const cost::ModelCost &model,
                              const cluster::Cluster &cluster,
                              const Options &options);

} // namespace hetplan::planner

#endif
