//===- Search.h - the planner's search, shared by its files -----*- C++ -*-===//
//
// Internal to passes/planner: the Search class and the types its decisions
// pass around. Each decision lives in its own file (docs/planner.md, "Where
// the search lives"); the class declares them all so they share the model's
// prefix sums and timing tables.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_SEARCH_H
#define HETPLAN_PASSES_PLANNER_SEARCH_H

#include "passes/planner/Planner.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace hetplan::planner::detail {
constexpr double kInf = std::numeric_limits<double>::infinity();
/// Host link of a device whose catalog entry gives none: PCIe 3.0 x16,
/// 15.75 GB/s per direction (PCI-SIG: 8 GT/s per lane, 128b/130b coding).
constexpr double kDefaultPcieGBs = 15.75;
using cost::Mode;

/// Devices that time the same: one catalog type at one speed factor.
struct DeviceClass {
  const cluster::DeviceType *type;
  double speedFactor;
  std::vector<int> ranks;  // in rank order
  double peak;             // FLOP/s at the plan dtype, speed factor applied
  double capacity;         // bytes
  double microBatchSeconds = 0;  // host time per micro-batch and pass
  cost::Efficiency eff;          // the class under the cluster's software stack
};

/// A worker kind inside a stage: `count` workers of `tp` devices of a class.
struct WorkerGroup {
  int cls;
  int count;
  std::vector<std::vector<int>> ranks;  // count x tp
};

/// The devices of one stage of a candidate.
struct StageDevices {
  std::vector<WorkerGroup> groups;
  int tp = 1;
  int workers() const {
    int n = 0;
    for (const auto &g : groups) n += g.count;
    return n;
  }
  double ringGBs = kInf;      // slowest link among one rank per worker
  double ringLatencyUs = 0;
  double tpGBs = kInf;        // intra-node link for tensor-parallel all-reduce
  double tpLatencyUs = 0;
  /// Rings that share one node's network link while the stage all-reduces
  /// its gradients: the tp ranks of a worker each run their own ring at the
  /// same time; when the rings leave the node they share its NIC.
  int ringSharers = 1;
  int ranksPerNode = 1;       // most ranks of the stage on one node
  /// The same devices grouped at other tensor-parallel degrees: the search
  /// prices every one for the stage's layer range and keeps the fastest
  /// (StageCost::variant), so each stage has its own degree.
  std::vector<StageDevices> alternatives;
};

/// The memory savers a candidate uses (docs/planner.md, "Memory").
struct Savers {
  int zero = 0;          // ZeRO stage over each stage's data-parallel workers
  bool offload = false;  // optimizer state and its step in host memory
};

/// What a candidate stage costs for a layer range.
struct StageCost {
  bool fits = false;
  bool recompute = false;     // the stage recomputes its activations
  bool capped = false;        // memory, not speed, bounded a worker's share
  bool stateFits = true;      // the model state (and the step) fits every worker
  double shortfall = 0;       // bytes missing on the worst worker when !fits
  int shortfallClass = -1;
  double forward = 0, backward = 0;  // one micro-batch, slowest worker
  llvm::SmallVector<double, 8> share;  // samples per worker, per group
  /// Which grouping of the stage's devices: 0 the stage itself, v > 0 its
  /// alternatives[v - 1] (another tensor-parallel degree).
  int variant = 0;
};

/// Maximum over a range of layers in O(1) (a sparse table).
struct RangeMax {
  std::vector<std::vector<double>> level;  // level[k][i]: max of [i, i + 2^k)
  explicit RangeMax(std::vector<double> values = {}) {
    level.push_back(std::move(values));
    for (size_t k = 1; (size_t(1) << k) <= level[0].size(); ++k) {
      const auto &prev = level[k - 1];
      std::vector<double> next(level[0].size() - (size_t(1) << k) + 1);
      for (size_t i = 0; i < next.size(); ++i)
        next[i] = std::max(prev[i], prev[i + (size_t(1) << (k - 1))]);
      level.push_back(std::move(next));
    }
  }
  double max(int l, int r) const {  // inclusive
    if (r < l)
      return 0;
    int k = 31 - __builtin_clz(unsigned(r - l + 1));
    return std::max(level[k][l], level[k][r + 1 - (1 << k)]);
  }
};

/// Prefix sums over layers of forward time at `samples` samples per worker
/// on one rank of a `tp`-way group of class `c` (compute only).
struct Table {
  std::vector<double> all;
};

/// Per-sample bytes and counts of a `tp`-way group's collectives, as
/// prefix sums over layers: forward all-reduces (Megatron's row MatMuls)
/// and all-gathers (column MatMuls without a pair), backward all-reduces
/// (the column MatMuls' input gradients; training only).
struct Traffic {
  std::vector<double> forwardReduce, forwardGather, backwardReduce;
  std::vector<double> forwardReduces, forwardGathers, backwardReduces;
};

/// Memory of one rank of a worker of stage [l, r] (docs/planner.md,
/// "Memory"): what does not depend on its samples, and what each adds.
struct Need {
  double weights = 0, gradients = 0, optimizer = 0, framework = 0, gather = 0;
  double step = 0;               // the optimizer step's transient copy
  double keptPerSample = 0;      // activations kept over all micro-batches in flight
  double transientPerSample = 0; // the largest op's gradients; a recomputed layer
  double kvPerSample = 0;        // inference: KV cache of all resident micro-batches
  double fixed() const { return weights + gradients + optimizer + framework + gather; }
};

/// One layout the search prices: its stages' devices, layer cuts,
/// micro-batches and memory savers.
struct Candidate {
  /// Shared by the candidates that differ only in micro-batches.
  std::shared_ptr<const std::vector<StageDevices>> stagesPtr;
  const std::vector<StageDevices> &stagesRef() const { return *stagesPtr; }
  int tp = 1;
  int microBatches = 1;
  std::vector<int> cuts;  // last layer of each stage
  double estimate = kInf;
  uint64_t order = 0;     // enumeration index: deterministic ties
  Savers savers;
  /// Per stage: -1 the recomputation policy decides, 0 off, 1 on (layouts).
  std::vector<int> forceRecompute;
  int forced(int j) const {
    return size_t(j) < forceRecompute.size() ? forceRecompute[j] : -1;
  }
};

/// One stage's share of the step-time estimate.
struct StageTerm {
  double time = kInf;  // compute + transfers of one micro-batch
  double tail = 0;     // all-reduce + optimizer, once per step
};

/// What the enumeration keeps: the best few candidates by estimate.
struct Finalists {
  static constexpr size_t kKept = 24;
  std::vector<Candidate> kept;
  std::vector<Candidate> keptOffload;  // the same among those that offload
  uint64_t order = 0;                  // candidates enumerated so far
};

/// "1.25 GiB", "3.40 MiB", "512.00 KiB", "12 B".
std::string bytesText(double b);

// Internal linkage, as when the search was one file: its files are compiled
// as one unit (UNITY_GROUP search in CMakeLists.txt; no other file includes
// this header), so GCC inlines the helpers of the inner loops again; the two
// it still kept apart are marked always_inline (bench/planner_ab.py measured
// 9-13% more search time on 1,024 GPUs without these, 0.98x with them).
namespace {

class Search {
public:
  Search(const cost::ModelCost &model, const cluster::Cluster &cluster,
         const Options &options);

  llvm::Expected<Plan> run();
  llvm::Expected<Plan> evaluate(const Layout &layout);

private:
  // Search.cpp: the enumeration that drives the others
  void buildClasses();
  std::vector<std::vector<int>> classOrders() const;
  std::vector<std::vector<int>> deviceCounts(const std::vector<int> &classOrder) const;
  std::vector<int> pipelineDepths(int N) const;
  void searchDevices(const std::vector<int> &classOrder, const std::vector<int> &take,
                     bool even, bool evenLayers, bool hasTP, Finalists &finalists);
  std::vector<int> microBatchCounts(int P) const;
  void tryMicroBatches(const std::shared_ptr<const std::vector<StageDevices>> &stages, int tp,
                       int P, bool even, bool evenLayers, Finalists &finalists);
  void keep(Candidate c, Finalists &finalists);
  llvm::Error noLayoutFits() const;
  Plan bestOf(std::vector<Candidate> &kept, bool even, bool evenLayers);

  // StageTiming.cpp: what a stage's work and transfers take on its devices
  const Table &table(int c, int tp, int64_t samples);
  double forwardTime(int c, int tp, int64_t samples, int l, int r,
                     const StageDevices &sd, double *commOut = nullptr,
                     double *backCommOut = nullptr);
  [[gnu::always_inline]] inline double allReduceTime(const StageDevices &sd, int l, int r, const Savers &sv) const;
  double optimizerTime(const StageDevices &sd, int l, int r, const Savers &sv) const;
  double sendTime(const StageDevices &a, const StageDevices &b, int lastLayer,
                  int64_t mb, double &bytesOut);

  // TensorParallel.cpp: tensor-parallel collectives and the degree of each stage
  const Traffic &traffic(int tp);
  double vocabHeadElements(int l, int r, int tp) const;
  StageCost evaluateStage(const StageDevices &sd, int l, int r, int64_t mb,
                          int inflight, int microBatches, bool even, const Savers &sv,
                          int forceRecompute = -1);
  void addAlternatives(StageDevices &sd, llvm::ArrayRef<int> tps);

  // Memory.cpp: what a rank holds
  double stageParameters(int l, int r) const;
  const RangeMax &stashMax(int tp);
  Need need(int c, int l, int r, int tp, int workers, int inflight, int microBatches,
            bool recompute, const Savers &sv);

  // MemorySavers.cpp: recomputation, ZeRO and optimizer offload
  [[gnu::always_inline]] inline StageCost evaluateRecompute(const StageDevices &sd, int l, int r, int64_t mb,
                              int inflight, int microBatches, bool even, const Savers &sv,
                              int forceRecompute);
  std::vector<int> zeroStages(const Candidate &c) const;
  bool choosePartition(Candidate &c, bool even, bool evenLayers);
  void fasterZero(Candidate &c, bool even, bool evenLayers);
  bool tiedAcrossDegrees(const Candidate &c, bool even);

  // Shortfall.cpp: why nothing fits, and what would fix it
  void noteShortfall(const Candidate &c, bool even);
  std::vector<std::string> fixesFor(const Candidate &c, int j, int cls, bool recompute,
                                    const StageDevices &sd, double &missingOut);

  // BatchShares.cpp: a micro-batch split among a stage's workers
  StageCost evaluateStageWith(const StageDevices &sd, int l, int r, int64_t mb,
                              int inflight, int microBatches, bool even, const Savers &sv,
                              bool recompute);

  // StageDevices.cpp: the devices of each stage, grouped into workers
  void addWorkers(StageDevices &sd, int cls, llvm::ArrayRef<int> ranks, int tp);
  void finishStage(StageDevices &sd);
  std::optional<std::vector<StageDevices>>
  chunk(const std::vector<std::pair<int, int>> &sequence, int P, int tp, bool byCompute);
  static bool nthSplit(int N, int P, int n, std::vector<int> &bounds);
  std::optional<std::vector<StageDevices>>
  chunkAt(const std::vector<std::pair<int, int>> &sequence, const std::vector<int> &bounds,
          int tp);

  // StagePartition.cpp: the layers of each stage
  StageCost costOf(const Candidate &c, int j, int l, int r, int64_t mb, bool even);
  bool fill(Candidate &c, double tau, int64_t mb, bool even, std::vector<int> &cuts);
  StageTerm stageTerm(Candidate &c, int j, bool even);
  double combine(const Candidate &c, const std::vector<StageTerm> &terms) const;
  double estimate(Candidate &c, bool even);
  bool partition(Candidate &c, bool even, bool evenLayers);
  bool partitionWith(Candidate &c, bool even, bool evenLayers);
  void refineWide(Candidate &c, bool even);

  // Layout.cpp: explicit layouts (evaluate)
  llvm::Expected<std::vector<StageDevices>> layoutStages(const Layout &layout);
  bool layoutSavers(Candidate &cand, const Layout &layout, bool even);
  llvm::Expected<Plan> overCapacity(Candidate &cand, bool even);

  // ScheduleSimulation.cpp: the step of one candidate, and its plan
  Plan simulate(const Candidate &c, bool even);
  void placeStages(const Candidate &c, bool even, int64_t mb, Plan &plan);
  static std::vector<std::vector<int64_t>> integerShares(const StageDevices &sd,
                                                         const StageCost &sc, int64_t mb);
  /// Per stage, its forward and backward boxes in order: (kind, micro-batch).
  using Program = std::vector<std::vector<std::pair<Event::Kind, int>>>;
  Program scheduleProgram(int P, int M) const;
  void runSchedule(const Program &program, Plan &plan, std::vector<double> &free,
                   std::vector<double> &busy, std::vector<int> &peakStash);
  void rankMemory(const Candidate &c, const std::vector<int> &peakStash, Plan &plan);

  bool isGpu(int c) const { return classes[c].type->kind == cluster::DeviceKind::GPU; }

  /// Kept activations of layer i per sample on one rank of a tp group.
  double layerStash(int i, int tp) const {
    const cost::LayerCost &layer = model.layers[i];
    return layer.stashBytesPerSample - layer.stashSplitBytesPerSample +
           layer.stashSplitBytesPerSample / tp;
  }

  /// Bytes per sample that grow with a worker's share, fragmentation included.
  double perSample(const Need &n) const {
    return (n.keptPerSample + n.transientPerSample) * (1.0 + opt.allocatorFragmentation) +
           n.kvPerSample;
  }

  /// Bytes a rank needs at its peak with `samples` samples.
  double peakBytes(const Need &n, double samples) const {
    return n.fixed() + std::max(perSample(n) * samples, n.step);
  }

  /// The grouping of the stage's devices that `sc` was priced with.
  static const StageDevices &chosen(const StageDevices &sd, const StageCost &sc) {
    return sc.variant == 0 ? sd : sd.alternatives[size_t(sc.variant - 1)];
  }

  /// Model-state bytes per parameter for the chosen optimizer and format
  /// (cost::trainingBytesPerParam): weights, gradients, master copy, state.
  double trainingBytesPerParameter() const {
    return cost::trainingBytesPerParam(runtime::optimizerStateBuffers(opt.optimizer), opt.dtype);
  }

  /// Micro-batches in flight on stage j (stashed activations).
  int inflight(int j, int P, int M) const {
    if (!training)
      return 1;
    return opt.schedule == Schedule::GPipe ? M : std::min(M, P - j);
  }

  /// While partition() works on one candidate (its devices, savers and
  /// micro-batches fixed), the binary search on the bottleneck prices the
  /// same stage ranges again and again: their costs are kept here.
  std::map<std::tuple<int, int, int, int64_t, bool>, StageCost> *costCache = nullptr;

  const cost::ModelCost &model;
  const cluster::Cluster &cluster;
  Options opt;
  int L;
  bool training = true;
  int elementBytes = 2;
  std::vector<DeviceClass> classes;
  std::vector<std::vector<std::vector<std::unique_ptr<Table>>>> timing;  // [class][tp][samples]
  std::vector<double> paramsPrefix, stashPrefix, kvPrefix;
  /// Sparse embedding updates (Options::sparseEmbeddings): elements of the
  /// layers' tables, and the layers that own one.
  std::vector<double> sparsePrefix;
  std::vector<int> embeddingLayers;
  /// Elements of the rows of layers [l, r]'s tables that `samples` samples
  /// look up, each table at most its size; 0 without sparse updates.
  double sparseRows(int l, int r, double samples) const;
  /// Seconds a worker of `sd` spends exchanging the looked-up rows of
  /// layers [l, r]'s row-sharded tables for `samples` samples (all-to-all
  /// on the workers' ring); 0 on one worker or without sparse updates.
  double tableExchange(const StageDevices &sd, int l, int r, int64_t samples) const;
  std::map<int, std::unique_ptr<Traffic>> trafficByTp;
  std::vector<double> stashSplitPrefix, layerInputPrefix;
  std::vector<int> tiedLayers;  // layers that read tied parameters
  std::vector<int> classOfRank;
  // largestActivation: the largest inputs + outputs of one op
  // (cost::LayerCost::largestInOutBytesPerSample).
  RangeMax largestActivation, largestParameters;
  std::map<int, RangeMax> stashMaxByTp;
  /// evaluateLayout's report of a layout that does not fit: shares are not
  /// capped by memory, and the plan shows how far over each rank is.
  bool ignoreMemory = false;
  Shortfall best;
  uint64_t evaluated = 0;
};

} // namespace
} // namespace hetplan::planner::detail

#endif
