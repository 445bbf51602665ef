//===- Planner.cpp - split layers and batches across a mixed cluster ------===//

#include "passes/planner/Planner.h"
#include "runtime/include/hetplan/runtime/Checked.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <memory>
#include <tuple>
#include <numeric>

namespace hetplan::planner {

const char *strategyName(Strategy s) {
  switch (s) {
  case Strategy::Hetplan: return "hetplan";
  case Strategy::DataParallel: return "dp-even";
  case Strategy::EvenPipeline: return "pp-even";
  case Strategy::Homogeneous: return "homogeneous";
  case Strategy::Pinned: return "pinned";
  }
  return "?";
}

const char *scheduleName(Schedule s) {
  return s == Schedule::OneFOneB ? "1f1b" : "gpipe";
}

llvm::Expected<Strategy> parseStrategy(llvm::StringRef name) {
  for (Strategy s : {Strategy::Hetplan, Strategy::DataParallel, Strategy::EvenPipeline,
                     Strategy::Homogeneous})
    if (name == strategyName(s))
      return s;
  return llvm::createStringError("--strategy must be hetplan, dp-even, pp-even or "
                                 "homogeneous, not '" + name.str() + "'");
}

llvm::Expected<Schedule> parseSchedule(llvm::StringRef name) {
  for (Schedule s : {Schedule::OneFOneB, Schedule::GPipe})
    if (name == scheduleName(s))
      return s;
  return llvm::createStringError("--schedule must be 1f1b or gpipe, not '" + name.str() + "'");
}

llvm::Expected<Pin> parsePin(llvm::StringRef text) {
  Pin pin;
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    auto [key, value] = part.trim().split('=');
    int v;
    if (value.getAsInteger(10, v) || v <= 0)
      return llvm::createStringError("--pin: '" + part.str() +
                                     "' needs a positive whole number (e.g. pp=4,dp=4,mb=8)");
    if (key == "pp") pin.pp = v;
    else if (key == "dp") pin.dp = v;
    else if (key == "mb") pin.mb = v;
    else if (key == "tp") pin.tp = v;
    else
      return llvm::createStringError("--pin: unknown key '" + key.str() +
                                     "' (known: pp, dp, mb, tp)");
  }
  if (!pin.pp && !pin.dp && !pin.mb && !pin.tp)
    return llvm::createStringError("--pin: give at least one of pp, dp, mb, tp");
  return pin;
}

namespace {
/// "1.25 GiB", "3.40 MiB", "512.00 KiB", "12 B": small shortfalls (a CPU
/// test cluster, a tiny model) must not read "0.00 GiB".
std::string bytesText(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && std::fabs(b) >= 1024) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? llvm::formatv("{0:F0} B", b).str() : llvm::formatv("{0:F2} {1}", b, units[u]).str();
}
} // namespace

namespace {

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

class Search {
public:
  Search(const cost::ModelCost &model, const cluster::Cluster &cluster,
         const Options &options)
      : model(model), cluster(cluster), opt(options),
        L(int(model.layers.size())) {
    buildClasses();
    // Prefix sums of what does not depend on the device.
    paramsPrefix.assign(L + 1, 0);
    stashPrefix.assign(L + 1, 0);
    kvPrefix.assign(L + 1, 0);
    stashSplitPrefix.assign(L + 1, 0);
    layerInputPrefix.assign(L + 1, 0);
    training = opt.mode == Mode::Train;
    for (int i = 0; i < L; ++i) {
      const auto &l = model.layers[i];
      paramsPrefix[i + 1] = paramsPrefix[i] + double(l.parameters);
      stashPrefix[i + 1] = stashPrefix[i] + l.stashBytesPerSample;
      stashSplitPrefix[i + 1] = stashSplitPrefix[i] + l.stashSplitBytesPerSample;
      // Recomputation keeps each layer's input (Megatron's checkpoint of
      // every layer): the graph inputs, else what crosses the cut before it.
      layerInputPrefix[i + 1] =
          layerInputPrefix[i] +
          (i == 0 ? model.inputBytesPerSample : model.layers[i - 1].outputBytesPerSample);
      if (!l.tiedParameters.empty())
        tiedLayers.push_back(i);
      kvPrefix[i + 1] = kvPrefix[i] + l.kvCacheBytesPerSample;
    }
    elementBytes = cost::dtypeBytes(opt.dtype);
    std::vector<double> activation, parameters;
    for (const auto &l : model.layers) {
      activation.push_back(l.largestActivationBytesPerSample);
      parameters.push_back(double(l.parameters));
    }
    largestActivation = RangeMax(std::move(activation));
    largestParameters = RangeMax(std::move(parameters));
  }

  llvm::Expected<Plan> run();
  llvm::Expected<Plan> evaluate(const Layout &layout);

private:
  //===------------------------------------------------------------------===//
  // Device classes and layer timing tables
  //===------------------------------------------------------------------===//

  void buildClasses() {
    std::map<std::pair<std::string, double>, int> index;
    for (const auto &d : cluster.devices) {
      auto key = std::make_pair(d.type->name, d.speedFactor);
      auto it = index.find(key);
      if (it == index.end()) {
        it = index.emplace(key, int(classes.size())).first;
        classes.push_back({d.type, d.speedFactor, {}, d.effectiveFlops(opt.dtype),
                           double(d.type->memoryBytes()),
                           cost::defaultEfficiency(*d.type).microBatchSeconds});
      }
      classes[it->second].ranks.push_back(d.rank);
      if (classOfRank.size() <= size_t(d.rank))
        classOfRank.resize(d.rank + 1, -1);
      classOfRank[d.rank] = it->second;
    }
    timing.resize(classes.size());
  }

  /// Prefix sums over layers of forward time at `samples` samples per worker
  /// on one rank of a `tp`-way group of class `c` (compute only).
  struct Table {
    std::vector<double> all;
  };
  const Table &table(int c, int tp, int64_t samples) {
    auto &perTp = timing[c];
    if (size_t(tp) >= perTp.size())
      perTp.resize(tp + 1);
    auto &perClass = perTp[tp];
    if (size_t(samples) >= perClass.size())
      perClass.resize(samples + 1);
    auto &slot = perClass[samples];
    if (!slot) {
      slot = std::make_unique<Table>();
      slot->all.assign(L + 1, 0);
      const DeviceClass &cls = classes[c];
      for (int i = 0; i < L; ++i) {
        const auto &layer = model.layers[i];
        double t = samples ? cost::layerForwardTime(layer, double(samples), *cls.type,
                                                    opt.dtype,
                                                    cost::defaultEfficiency(*cls.type),
                                                    opt.profiles, tp) /
                                 cls.speedFactor
                           : 0;
        slot->all[i + 1] = slot->all[i] + t;
      }
    }
    return *slot;
  }

  /// Per-sample bytes and counts of a `tp`-way group's collectives, as
  /// prefix sums over layers: forward all-reduces (Megatron's row MatMuls)
  /// and all-gathers (column MatMuls without a pair), backward all-reduces
  /// (the column MatMuls' input gradients; training only).
  struct Traffic {
    std::vector<double> forwardReduce, forwardGather, backwardReduce;
    std::vector<double> forwardReduces, forwardGathers, backwardReduces;
  };
  const Traffic &traffic(int tp) {
    auto &slot = trafficByTp[tp];
    if (slot)
      return *slot;
    slot = std::make_unique<Traffic>();
    Traffic &t = *slot;
    for (auto *v : {&t.forwardReduce, &t.forwardGather, &t.backwardReduce, &t.forwardReduces,
                    &t.forwardGathers, &t.backwardReduces})
      v->assign(L + 1, 0);
    for (int i = 0; i < L; ++i) {
      const cost::LayerCost &l = model.layers[i];
      double fr = 0, fg = 0, br = 0, frn = 0, fgn = 0, brn = 0;
      if (!l.tensorParallelUnits.empty()) {
        // What the runtime runs (cost::TensorParallelUnit).
        for (const cost::TensorParallelUnit &u : l.tensorParallelUnits) {
          if (!u.fits(tp))
            continue;
          double f = u.forwardElementsPerSample * elementBytes;
          (u.pair ? fr : fg) += f;
          (u.pair ? frn : fgn) += u.forwardCollectives;
          if (training) {
            br += u.backwardElementsPerSample * elementBytes;
            brn += u.backwardCollectives;
          }
        }
      } else if (training && l.tensorParallelLossBytesPerSample > 0) {
        // Estimates for a model costed without units: the vocab-parallel
        // loss's three small all-reduces, else one per split pair
        // (Megatron: attention and MLP), as many bytes again backward.
        fr = br = l.tensorParallelLossBytesPerSample;
        frn = brn = 3;
      } else if (l.tensorParallelAllReduceBytesPerSample > 0) {
        fr = l.tensorParallelAllReduceBytesPerSample;
        br = training ? fr : 0;
        frn = l.outputBytesPerSample > 0 ? std::round(fr / l.outputBytesPerSample) : 1;
        brn = training ? frn : 0;
      }
      t.forwardReduce[i + 1] = t.forwardReduce[i] + fr;
      t.forwardGather[i + 1] = t.forwardGather[i] + fg;
      t.backwardReduce[i + 1] = t.backwardReduce[i] + br;
      t.forwardReduces[i + 1] = t.forwardReduces[i] + frn;
      t.forwardGathers[i + 1] = t.forwardGathers[i] + fgn;
      t.backwardReduces[i + 1] = t.backwardReduces[i] + brn;
    }
    return t;
  }

  /// Forward seconds of layers [l, r] for `samples` samples on one worker
  /// (a rank of its tensor-parallel group): compute, and the group's
  /// forward collectives (`comm`); `backComm`: the backward pass's
  /// collectives (the backward costs 2 x compute + backComm). Rings on the
  /// worker's node link: an all-reduce moves 2 (tp-1)/tp of the bytes, an
  /// all-gather (tp-1)/tp, each step paying the link latency.
  double forwardTime(int c, int tp, int64_t samples, int l, int r,
                     const StageDevices &sd, double *commOut = nullptr,
                     double *backCommOut = nullptr) {
    if (commOut)
      *commOut = 0;
    if (backCommOut)
      *backCommOut = 0;
    if (samples == 0)
      return 0;
    const Table &t = table(c, std::max(tp, 1), samples);
    double compute = t.all[r + 1] - t.all[l];
    if (tp <= 1)
      return compute;
    const Traffic &tr = traffic(tp);
    auto span = [&](const std::vector<double> &v) { return v[r + 1] - v[l]; };
    double bw = sd.tpGBs * 1e9, lat = sd.tpLatencyUs * 1e-6, n = double(samples);
    double share = double(tp - 1) / tp;
    auto reduce = [&](double bytes, double count) {
      return bytes == 0 && count == 0 ? 0 : 2 * share * bytes * n / bw + 2.0 * (tp - 1) * lat * count;
    };
    auto gather = [&](double bytes, double count) {
      return bytes == 0 && count == 0 ? 0 : share * bytes * n / bw + double(tp - 1) * lat * count;
    };
    double comm = reduce(span(tr.forwardReduce), span(tr.forwardReduces)) +
                  gather(span(tr.forwardGather), span(tr.forwardGathers));
    if (commOut)
      *commOut = comm;
    if (backCommOut)
      *backCommOut = reduce(span(tr.backwardReduce), span(tr.backwardReduces));
    return compute + comm;
  }

  //===------------------------------------------------------------------===//
  // Memory
  //===------------------------------------------------------------------===//

  bool isGpu(int c) const { return classes[c].type->kind == cluster::DeviceKind::GPU; }

  /// Parameters a rank of stage [l, r] holds before any sharding: the
  /// layers' own and a copy of each tied parameter whose owner is elsewhere.
  double stageParameters(int l, int r) const {
    double p = paramsPrefix[r + 1] - paramsPrefix[l];
    for (int i : tiedLayers)
      if (i >= l && i <= r)
        for (auto [owner, n] : model.layers[i].tiedParameters)
          if (owner < l || owner > r)
            p += double(n);
    return p;
  }

  /// Kept activations of layer i per sample on one rank of a tp group.
  double layerStash(int i, int tp) const {
    const cost::LayerCost &layer = model.layers[i];
    return layer.stashBytesPerSample - layer.stashSplitBytesPerSample +
           layer.stashSplitBytesPerSample / tp;
  }

  /// The largest layer's kept activations per sample on a rank of a tp group.
  const RangeMax &stashMax(int tp) {
    auto it = stashMaxByTp.find(tp);
    if (it == stashMaxByTp.end()) {
      std::vector<double> values;
      for (int i = 0; i < L; ++i)
        values.push_back(layerStash(i, tp));
      it = stashMaxByTp.emplace(tp, RangeMax(std::move(values))).first;
    }
    return it->second;
  }

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

  Need need(int c, int l, int r, int tp, int workers, int inflight, int microBatches,
            bool recompute, const Savers &sv) {
    Need n;
    n.framework = isGpu(c) ? opt.deviceContextBytes : 0;
    double params = stageParameters(l, r) / tp;
    double largest = largestActivation.max(l, r);
    double largestStash = training && recompute ? stashMax(tp).max(l, r) : 0;
    double largestLayer = training && sv.zero >= 3 ? largestParameters.max(l, r) : 0;
    // The backward pass of the largest op holds the gradients of its output
    // and of its input at once; at inference its input and output.
    n.transientPerSample = 2 * largest / tp;
    if (!training) {
      n.weights = params * elementBytes;
      n.kvPerSample = (kvPrefix[r + 1] - kvPrefix[l]) / tp * microBatches;
      return n;
    }
    int D = std::max(1, workers);
    n.weights = params * elementBytes / (sv.zero >= 3 ? D : 1);
    n.gradients = params * elementBytes / (sv.zero >= 2 ? D : 1);
    double stateBytes = std::max(0.0, opt.trainingBytesPerParameter - 2.0 * elementBytes);
    if (!sv.offload) {
      n.optimizer = params * stateBytes / (sv.zero >= 1 ? D : 1);
      // Mixed precision: the optimizer steps on an fp32 copy of the
      // gradients (DeepSpeed's FP16_Optimizer, ZeRO's fp32 partition).
      if (elementBytes < 4)
        n.step = params * 4.0 / (sv.zero >= 1 ? D : 1);
    }
    // ZeRO-3 gathers the whole parameters of the layer it computes.
    if (sv.zero >= 3)
      n.gather = largestLayer / tp * elementBytes;
    if (recompute) {
      n.keptPerSample = (layerInputPrefix[r + 1] - layerInputPrefix[l]) * inflight;
      n.transientPerSample += largestStash;
    } else {
      double stash = 0;
      if (tp == 1)
        stash = stashPrefix[r + 1] - stashPrefix[l];
      else
        stash = (stashPrefix[r + 1] - stashPrefix[l]) -
                (stashSplitPrefix[r + 1] - stashSplitPrefix[l]) * (1.0 - 1.0 / tp);
      n.keptPerSample = stash * inflight;
    }
    if (r == L - 1) {
      // The loss: its softmax kept in fp32 for the backward pass (Megatron
      // computes the cross entropy in fp32), and the gradient of the
      // model's output in the run format while the backward starts.
      const cost::LayerCost &last = model.layers[L - 1];
      double elements = last.outputBytesPerSample / elementBytes;
      if (last.tensorParallelLossBytesPerSample > 0 || vocabHeadElements(L - 1, L - 1, tp) > 0)
        elements /= tp;  // vocab-parallel: each rank holds its columns
      n.keptPerSample += 4.0 * elements * inflight;
      n.transientPerSample += elementBytes * elements;
    }
    return n;
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

  //===------------------------------------------------------------------===//
  // Stage evaluation
  //===------------------------------------------------------------------===//

  /// The grouping of the stage's devices that `sc` was priced with.
  static const StageDevices &chosen(const StageDevices &sd, const StageCost &sc) {
    return sc.variant == 0 ? sd : sd.alternatives[size_t(sc.variant - 1)];
  }

  /// Prices layers [l, r] on every tensor-parallel grouping of the stage's
  /// devices and keeps the one with the least compute per micro-batch plus
  /// its once-per-step gradient all-reduce and optimizer step spread over
  /// the micro-batches (ties: the first, the smallest degree). Each grouping
  /// decides its recomputation (evaluateRecompute).
  StageCost evaluateStage(const StageDevices &sd, int l, int r, int64_t mb,
                          int inflight, int microBatches, bool even, const Savers &sv,
                          int forceRecompute = -1) {
    StageCost best = evaluateRecompute(sd, l, r, mb, inflight, microBatches, even, sv, forceRecompute);
    if (sd.alternatives.empty())
      return best;
    auto score = [&](const StageDevices &x, const StageCost &sc) {
      return sc.forward + sc.backward +
             (allReduceTime(x, l, r, sv) + optimizerTime(x, l, r, sv)) / std::max(microBatches, 1);
    };
    double bestScore = best.fits ? score(sd, best) : kInf;
    for (size_t v = 0; v < sd.alternatives.size(); ++v) {
      const StageDevices &x = sd.alternatives[v];
      StageCost sc = evaluateRecompute(x, l, r, mb, inflight, microBatches, even, sv, forceRecompute);
      sc.variant = int(v + 1);
      if (!sc.fits) {
        if (!best.fits && sc.shortfall < best.shortfall)
          best = sc;
        continue;
      }
      double s = score(x, sc);
      if (s < bestScore * (1 - 1e-12)) {
        bestScore = s;
        best = sc;
      }
    }
    return best;
  }

  /// One grouping: whether its stage recomputes.
  /// `forceRecompute`: -1 the options' policy decides, 0 off, 1 on.
  StageCost evaluateRecompute(const StageDevices &sd, int l, int r, int64_t mb,
                              int inflight, int microBatches, bool even, const Savers &sv,
                              int forceRecompute) {
    if (!training)
      return evaluateStageWith(sd, l, r, mb, inflight, microBatches, even, sv, false);
    bool always = forceRecompute == 1 ||
                  (forceRecompute < 0 && opt.recompute == RecomputePolicy::Always);
    bool allowed = forceRecompute == 1 ||
                   (forceRecompute < 0 && opt.recompute != RecomputePolicy::Never);
    if (always)
      return evaluateStageWith(sd, l, r, mb, inflight, microBatches, even, sv, true);
    StageCost keep = evaluateStageWith(sd, l, r, mb, inflight, microBatches, even, sv, false);
    // Recomputation saves activations only: where the model state alone
    // does not fit, it cannot help.
    if (!allowed || (keep.fits && !keep.capped) || !keep.stateFits)
      return keep;
    // Recompute where the stage does not fit without, or where memory caps
    // a fast worker's share and recomputing is cheaper overall.
    StageCost again = evaluateStageWith(sd, l, r, mb, inflight, microBatches, even, sv, true);
    if (!again.fits)
      return keep.fits || keep.shortfall <= again.shortfall ? keep : again;
    if (!keep.fits)
      return again;
    return again.forward + again.backward < keep.forward + keep.backward ? again : keep;
  }

  /// Splits `mb` samples among the stage's workers in proportion to their
  /// speed (or evenly), capped by memory, and times the slowest worker.
  StageCost evaluateStageWith(const StageDevices &sd, int l, int r, int64_t mb,
                              int inflight, int microBatches, bool even, const Savers &sv,
                              bool recompute) {
    StageCost sc;
    sc.recompute = recompute;
    size_t G = sd.groups.size();
    llvm::SmallVector<double, 8> cap(G), rate(G);
    double worst = 0;
    int worstClass = -1;
    double fewest = kInf;  // bytes per sample of the group that needs the most
    for (size_t g = 0; g < G; ++g) {
      int c = sd.groups[g].cls;
      Need n = need(c, l, r, sd.tp, sd.workers(), inflight, microBatches, recompute, sv);
      double per = perSample(n);
      double room = classes[c].capacity - n.fixed();
      bool stepFits = n.fixed() + n.step <= classes[c].capacity;
      sc.stateFits &= stepFits && room >= 0;
      if (ignoreMemory) {
        cap[g] = double(mb);
      } else if (!stepFits || room < per) {
        double missing = peakBytes(n, 1) - classes[c].capacity;
        if (missing > worst) {
          worst = missing;
          worstClass = c;
        }
        cap[g] = 0;
      } else {
        cap[g] = per > 0 ? std::floor(room / per) : double(mb);
      }
      fewest = std::min(fewest, per);
      rate[g] = even ? 1.0 : classes[c].peak * sd.tp;
    }
    // Water-fill: proportional shares; a capped group keeps its cap and the
    // rest is spread over the others.
    llvm::SmallVector<double, 8> share(G, 0);
    llvm::SmallVector<bool, 8> fixed(G, false);
    double left = double(mb);
    for (size_t round = 0; round <= G && left > 1e-9; ++round) {
      double totalRate = 0;
      for (size_t g = 0; g < G; ++g)
        if (!fixed[g])
          totalRate += rate[g] * sd.groups[g].count;
      if (totalRate == 0)
        break;
      bool capped = false;
      for (size_t g = 0; g < G; ++g) {
        if (fixed[g])
          continue;
        double s = left * rate[g] / totalRate;
        if (s > cap[g]) {
          share[g] = cap[g];
          fixed[g] = true;
          capped = true;
        }
      }
      if (!capped) {
        for (size_t g = 0; g < G; ++g)
          if (!fixed[g])
            share[g] = left * rate[g] / totalRate;
        left = 0;
        break;
      }
      left = double(mb);
      for (size_t g = 0; g < G; ++g)
        if (fixed[g])
          left -= share[g] * sd.groups[g].count;
    }
    if (left > 1e-6) {
      sc.shortfall = std::max(worst, fewest == kInf ? 0.0 : fewest);
      sc.shortfallClass = worstClass >= 0 ? worstClass : sd.groups[0].cls;
      return sc;
    }
    sc.fits = true;
    sc.share = share;
    for (size_t g = 0; g < G; ++g)
      sc.capped |= fixed[g];
    for (size_t g = 0; g < G; ++g) {
      if (share[g] <= 0)
        continue;
      // Workers of a group get floor or ceil of the share; the slowest has ceil.
      int64_t samples = runtime::saturatedCount(std::ceil(share[g] - 1e-9));
      double comm = 0, backComm = 0;
      double f = forwardTime(sd.groups[g].cls, sd.tp, samples, l, r, sd, &comm, &backComm);
      double fixed = classes[sd.groups[g].cls].microBatchSeconds;
      f += fixed;
      comm += fixed;  // paid once more by the backward pass, not doubled
      if (f > sc.forward) {
        sc.forward = f;
        sc.backward = training ? 2.0 * (f - comm) + fixed + backComm : 0;
        // Recomputation runs the forward pass (its all-reduces included)
        // once more before the backward (Megatron's activation checkpoints).
        if (recompute)
          sc.backward += f - fixed;
      }
    }
    return sc;
  }

  /// Elements of the weights of the vocab-parallel heads in layers [l, r]
  /// that split `tp` ways (0: none).
  double vocabHeadElements(int l, int r, int tp) const {
    double n = 0;
    if (!training || tp <= 1)
      return 0;
    for (int i = l; i <= r; ++i)
      for (const cost::TensorParallelUnit &u : model.layers[i].tensorParallelUnits)
        if (u.vocabHead && u.fits(tp))
          n += u.stepAllReduceElements;
    return n;
  }

  double allReduceTime(const StageDevices &sd, int l, int r, const Savers &sv) const {
    if (!training)
      return 0;
    // A vocab-parallel head: the gradient of each rank's weight columns is
    // summed (fp32) over the group once per step, the runtime keeping that
    // weight whole (an embedding shares it).
    double head = 0;
    if (double n = vocabHeadElements(l, r, sd.tp); n > 0)
      head = 2.0 * (sd.tp - 1) / sd.tp * n * 4.0 / (sd.tpGBs * 1e9) +
             2.0 * (sd.tp - 1) * sd.tpLatencyUs * 1e-6;
    int D = sd.workers();
    if (D <= 1)
      return head;
    // Gradients travel in their own format (Options::gradientDType): fp32
    // in PyTorch AMP's DDP and DeepSpeed's fp32_allreduce, whatever the
    // format of the forward pass.
    double gradBytes = (paramsPrefix[r + 1] - paramsPrefix[l]) / sd.tp *
                       double(cost::dtypeBytes(opt.gradientDType.value_or(opt.dtype)));
    // ZeRO-1/2 reduce-scatter the gradients and all-gather the parameters:
    // the bytes of one all-reduce. ZeRO-3 all-gathers the parameters again
    // in the backward pass: 1.5x (ZeRO paper, section 7.2).
    double volume = sv.zero >= 3 ? 1.5 : 1.0;
    return head + volume * (2.0 * (D - 1) / D * gradBytes / (sd.ringGBs / sd.ringSharers * 1e9) +
                            2.0 * (D - 1) * sd.ringLatencyUs * 1e-6);
  }

  double optimizerTime(const StageDevices &sd, int l, int r, const Savers &sv) const {
    if (!training)
      return 0;
    // ZeRO shards the update: each worker steps its 1/D of the parameters.
    double shard = (paramsPrefix[r + 1] - paramsPrefix[l]) / sd.tp /
                   (sv.zero >= 1 ? std::max(1, sd.workers()) : 1);
    double slowest = 0;
    for (const auto &g : sd.groups) {
      const cluster::DeviceType &type = *classes[g.cls].type;
      double t;
      if (sv.offload) {
        // ZeRO-Offload: gradients down and parameters up over the device's
        // PCIe link, Adam on the host's cores (shared by its ranks).
        double pcie = type.pcie.bandwidthGBs > 0 ? type.pcie.bandwidthGBs : kDefaultPcieGBs;
        t = 2.0 * shard * elementBytes / (pcie * 1e9) +
            shard * sd.ranksPerNode / opt.hostAdamParamsPerSecond;
      } else {
        double bw = type.memoryBandwidthBytesPerSec() * cost::defaultEfficiency(type).memory;
        t = shard * opt.trainingBytesPerParameter * 2 / bw;  // read and write
      }
      slowest = std::max(slowest, t);
    }
    return slowest;
  }

  /// Activation transfer from stage a to stage b (one micro-batch).
  double sendTime(const StageDevices &a, const StageDevices &b, int lastLayer,
                  int64_t mb, double &bytesOut) {
    double perSample = model.layers[lastLayer].outputBytesPerSample;
    int wa = std::max(1, a.workers()), wb = std::max(1, b.workers());
    // Workers send their shares in parallel; the larger side's per-worker
    // share bounds the transfer.
    double samples = std::ceil(double(mb) / std::min(wa, wb));
    bytesOut = perSample * double(mb);
    int ra = a.groups[0].ranks[0][0], rb = b.groups[0].ranks[0][0];
    cluster::Link link = cluster.linkBetween(ra, rb);
    // Between nodes, every rank of the stage on one node sends through that
    // node's one network link: its worker's share, once per tensor-parallel
    // rank (DeepSpeed's pipeline engine sends the whole activation from
    // each; no scatter/gather).
    if (cluster.devices[ra].node != cluster.devices[rb].node)
      samples *= std::max(std::min(a.ranksPerNode, b.ranksPerNode), 1);
    return link.transferSeconds(perSample * samples);
  }

  //===------------------------------------------------------------------===//
  // Candidates
  //===------------------------------------------------------------------===//

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

  /// evaluateStage for stage j of `c` over layers [l, r].
  StageCost costOf(const Candidate &c, int j, int l, int r, int64_t mb, bool even) {
    int P = int(c.stagesRef().size());
    if (costCache) {
      auto key = std::make_tuple(j, l, r, mb, even);
      auto it = costCache->find(key);
      if (it != costCache->end())
        return it->second;
      StageCost sc = evaluateStage(c.stagesRef()[j], l, r, mb, inflight(j, P, c.microBatches),
                                   c.microBatches, even, c.savers, c.forced(j));
      costCache->emplace(key, sc);
      return sc;
    }
    return evaluateStage(c.stagesRef()[j], l, r, mb, inflight(j, P, c.microBatches),
                         c.microBatches, even, c.savers, c.forced(j));
  }
  /// While partition() works on one candidate (its devices, savers and
  /// micro-batches fixed), the binary search on the bottleneck prices the
  /// same stage ranges again and again: their costs are kept here.
  std::map<std::tuple<int, int, int, int64_t, bool>, StageCost> *costCache = nullptr;

  /// Groups a run of ranks (same class, in order) into TP workers within
  /// nodes; leftover ranks that cannot fill a group stay unused.
  void addWorkers(StageDevices &sd, int cls, llvm::ArrayRef<int> ranks, int tp) {
    WorkerGroup group{cls, 0, {}};
    std::vector<int> current;
    for (int rank : ranks) {
      if (!current.empty() &&
          cluster.devices[current[0]].node != cluster.devices[rank].node)
        current.clear();
      current.push_back(rank);
      if (int(current.size()) == tp) {
        group.ranks.push_back(current);
        current.clear();
      }
    }
    group.count = int(group.ranks.size());
    if (group.count)
      sd.groups.push_back(std::move(group));
  }

  /// The stage's devices grouped into workers of each degree in `tps` (as
  /// many as its runs of one class fill), for the search to choose from.
  void addAlternatives(StageDevices &sd, llvm::ArrayRef<int> tps) {
    for (int t : tps) {
      if (t == sd.tp)
        continue;
      StageDevices alt;
      alt.tp = t;
      for (const WorkerGroup &g : sd.groups) {
        std::vector<int> ranks;
        for (const auto &w : g.ranks)
          ranks.insert(ranks.end(), w.begin(), w.end());
        addWorkers(alt, g.cls, ranks, t);
      }
      if (alt.groups.empty())
        continue;
      finishStage(alt);
      sd.alternatives.push_back(std::move(alt));
    }
  }

  void finishStage(StageDevices &sd) {
    std::vector<int> ring;
    for (const auto &g : sd.groups)
      for (const auto &w : g.ranks)
        ring.push_back(w[0]);
    sd.ringGBs = ring.size() > 1 ? cluster.ringBandwidth(ring) : kInf;
    sd.ringLatencyUs = 0;
    for (size_t i = 0; i + 1 < ring.size(); ++i)
      sd.ringLatencyUs = std::max(sd.ringLatencyUs,
                                  cluster.linkBetween(ring[i], ring[i + 1]).latencyUs);
    bool crossesNodes = false;
    for (size_t i = 0; i < ring.size() && ring.size() > 1; ++i)
      crossesNodes |= cluster.devices[ring[i]].node !=
                      cluster.devices[ring[(i + 1) % ring.size()]].node;
    sd.ringSharers = crossesNodes ? std::max(sd.tp, 1) : 1;
    std::map<int, int> perNode;
    sd.ranksPerNode = 1;
    for (const auto &g : sd.groups)
      for (const auto &w : g.ranks)
        for (int rank : w)
          sd.ranksPerNode = std::max(sd.ranksPerNode, ++perNode[cluster.devices[rank].node]);
    sd.tpGBs = kInf;
    sd.tpLatencyUs = 0;
    if (sd.tp > 1)
      for (const auto &g : sd.groups)
        for (const auto &w : g.ranks) {
          sd.tpGBs = std::min(sd.tpGBs, cluster.ringBandwidth(w));
          sd.tpLatencyUs = std::max(sd.tpLatencyUs,
                                    cluster.linkBetween(w[0], w[1]).latencyUs);
        }
  }

  /// Splits `sequence` (ranks, grouped by class in pipeline order) into
  /// `P` stages of contiguous devices. `byCompute` balances peak FLOP/s
  /// instead of device counts.
  std::optional<std::vector<StageDevices>>
  chunk(const std::vector<std::pair<int, int>> &sequence, int P, int tp, bool byCompute) {
    int N = int(sequence.size());
    if (P > N / tp)
      return std::nullopt;
    std::vector<int> bounds;  // exclusive end of each stage
    if (!byCompute) {
      for (int j = 1; j <= P; ++j)
        bounds.push_back(int(int64_t(N) * j / P));
    } else {
      double total = 0;
      for (auto [cls, rank] : sequence)
        total += classes[cls].peak;
      double acc = 0;
      int j = 1;
      for (int i = 0; i < N && j < P; ++i) {
        acc += classes[sequence[i].first].peak;
        if (acc >= total * j / P - 1e-9) {
          bounds.push_back(i + 1);
          ++j;
        }
      }
      while (int(bounds.size()) < P)
        bounds.push_back(N);
      bounds.back() = N;
    }
    return chunkAt(sequence, bounds, tp);
  }

  /// The `n`-th way (in lexicographic order) to cut a sequence of N devices
  /// into P non-empty runs; `bounds` gets each run's exclusive end.
  static bool nthSplit(int N, int P, int n, std::vector<int> &bounds) {
    // Walk the combinations of P-1 cut positions among N-1.
    std::vector<int> cut(P - 1);
    for (int i = 0; i < P - 1; ++i)
      cut[i] = i + 1;
    for (int k = 0; k < n; ++k) {
      int i = P - 2;
      while (i >= 0 && cut[i] == N - (P - 1) + i)
        --i;
      if (i < 0)
        return false;
      ++cut[i];
      for (int j = i + 1; j < P - 1; ++j)
        cut[j] = cut[j - 1] + 1;
    }
    if (P - 1 > N - 1)
      return false;
    bounds = cut;
    bounds.push_back(N);
    return true;
  }

  std::optional<std::vector<StageDevices>>
  chunkAt(const std::vector<std::pair<int, int>> &sequence, const std::vector<int> &bounds,
          int tp) {
    std::vector<StageDevices> stages;
    int begin = 0;
    for (int end : bounds) {
      StageDevices sd;
      sd.tp = tp;
      int i = begin;
      while (i < end) {
        int cls = sequence[i].first;
        std::vector<int> run;
        while (i < end && sequence[i].first == cls)
          run.push_back(sequence[i++].second);
        addWorkers(sd, cls, run, tp);
      }
      if (sd.groups.empty())
        return std::nullopt;
      finishStage(sd);
      stages.push_back(std::move(sd));
      begin = end;
    }
    return stages;
  }

  /// Micro-batches in flight on stage j (stashed activations).
  int inflight(int j, int P, int M) const {
    if (!training)
      return 1;
    return opt.schedule == Schedule::GPipe ? M : std::min(M, P - j);
  }

  /// Greedy fill for a bottleneck `tau`: each stage takes as many layers as
  /// fit in time and memory. Returns the cuts or nothing.
  bool fill(Candidate &c, double tau, int64_t mb, bool even, std::vector<int> &cuts) {
    int P = int(c.stagesRef().size());
    cuts.clear();
    int l = 0;
    for (int j = 0; j < P; ++j) {
      int maxR = L - (P - j);  // leave a layer for every later stage
      if (j == P - 1)
        maxR = L - 1;
      // Time and memory grow with the layers taken: binary search for the
      // last layer that still fits.
      auto ok = [&](int r) {
        StageCost sc = costOf(c, j, l, r, mb, even);
        return sc.fits && sc.forward + sc.backward <= tau;
      };
      int best = -1;
      if (l <= maxR && ok(l)) {
        int lo = l, hi = maxR;  // ok(lo) holds
        while (lo < hi) {
          int mid = lo + (hi - lo + 1) / 2;
          if (ok(mid))
            lo = mid;
          else
            hi = mid - 1;
        }
        best = lo;
      }
      if (j == P - 1 && best != L - 1)
        return false;
      if (best < l)
        return false;
      cuts.push_back(best);
      l = best + 1;
    }
    return true;
  }

  /// One stage's share of the step-time estimate.
  struct StageTerm {
    double time = kInf;  // compute + transfers of one micro-batch
    double tail = 0;     // all-reduce + optimizer, once per step
  };

  StageTerm stageTerm(Candidate &c, int j, bool even) {
    int P = int(c.stagesRef().size());
    int64_t mb = opt.globalBatch / c.microBatches;
    int l = j ? c.cuts[j - 1] + 1 : 0, r = c.cuts[j];
    StageCost sc = costOf(c, j, l, r, mb, even);
    StageTerm term;
    if (!sc.fits)
      return term;
    term.time = sc.forward + sc.backward;
    double bytes;
    const StageDevices &sd = chosen(c.stagesRef()[j], sc);
    // The next stage's grouping is chosen by its own term; its first one
    // stands in for it here (the simulation uses the chosen ones).
    if (j + 1 < P)
      term.time += (training ? 2 : 1) * sendTime(sd, c.stagesRef()[j + 1], r, mb, bytes);
    term.tail = allReduceTime(sd, l, r, c.savers) + optimizerTime(sd, l, r, c.savers);
    return term;
  }

  /// The step-time estimate used to rank candidates (the simulation decides
  /// among the best): bottleneck stage for every micro-batch, plus filling
  /// and draining the pipeline, plus the slowest all-reduce and optimizer.
  double combine(const Candidate &c, const std::vector<StageTerm> &terms) const {
    double worst = 0, sum = 0, tail = 0;
    for (const StageTerm &t : terms) {
      if (t.time == kInf)
        return kInf;
      worst = std::max(worst, t.time);
      sum += t.time;
      tail = std::max(tail, t.tail);
    }
    return (c.microBatches - 1) * worst + sum + tail;
  }

  double estimate(Candidate &c, bool even) {
    std::vector<StageTerm> terms;
    for (size_t j = 0; j < c.stagesRef().size(); ++j)
      terms.push_back(stageTerm(c, int(j), even));
    return combine(c, terms);
  }

  /// Finds the cuts of `c` minimising the bottleneck, then nudges each cut
  /// by one layer while the estimate improves.
  bool partition(Candidate &c, bool even, bool evenLayers) {
    std::map<std::tuple<int, int, int, int64_t, bool>, StageCost> cache;
    costCache = &cache;
    bool ok = partitionWith(c, even, evenLayers);
    costCache = nullptr;
    return ok;
  }
  bool partitionWith(Candidate &c, bool even, bool evenLayers) {
    int P = int(c.stagesRef().size());
    if (P > L)
      return false;
    int64_t mb = (opt.globalBatch + c.microBatches - 1) / c.microBatches;
    if (evenLayers) {
      c.cuts.clear();
      for (int j = 1; j <= P; ++j)
        c.cuts.push_back(int(int64_t(L) * j / P) - 1);
      c.estimate = estimate(c, even);
      return c.estimate < kInf;
    }
    // An upper bound for the bottleneck: fill by memory alone (no time
    // limit); if even that fails, nothing fits.
    std::vector<int> cuts;
    if (!fill(c, kInf, mb, even, cuts))
      return false;
    double hi = 0;
    c.cuts = cuts;
    for (int j = 0; j < P; ++j) {
      int l = j ? cuts[j - 1] + 1 : 0;
      StageCost sc = costOf(c, j, l, cuts[j], mb, even);
      hi = std::max(hi, sc.forward + sc.backward);
    }
    double lo = 0;
    std::vector<int> bestCuts = cuts;
    for (int it = 0; it < 24 && hi - lo > 1e-3 * hi; ++it) {
      double mid = 0.5 * (lo + hi);
      if (fill(c, mid, mb, even, cuts)) {
        hi = mid;
        bestCuts = cuts;
      } else {
        lo = mid;
      }
    }
    c.cuts = bestCuts;
    std::vector<StageTerm> terms;
    for (int j = 0; j < P; ++j)
      terms.push_back(stageTerm(c, j, even));
    c.estimate = combine(c, terms);
    // Local refinement: move one cut by one layer while it helps; only the
    // two stages beside the cut change.
    for (int pass = 0; pass < 4 * P; ++pass) {
      bool improved = false;
      for (int j = 0; j + 1 < P; ++j)
        for (int delta : {-1, 1}) {
          int lower = j ? c.cuts[j - 1] + 1 : 0;
          int moved = c.cuts[j] + delta;
          if (moved < lower || moved >= c.cuts[j + 1])
            continue;
          int saved = c.cuts[j];
          StageTerm a = terms[j], b = terms[j + 1];
          c.cuts[j] = moved;
          terms[j] = stageTerm(c, j, even);
          terms[j + 1] = stageTerm(c, j + 1, even);
          double e = combine(c, terms);
          if (e < c.estimate * (1 - 1e-9)) {
            c.estimate = e;
            improved = true;
          } else {
            c.cuts[j] = saved;
            terms[j] = a;
            terms[j + 1] = b;
          }
        }
      if (!improved)
        break;
    }
    return c.estimate < kInf;
  }

  /// ZeRO stages to try for `c`, smallest first: the options' stage, or
  /// all four where a stage has data-parallel workers to shard over.
  std::vector<int> zeroStages(const Candidate &c) const {
    if (!training)
      return {0};
    if (opt.zeroStage >= 0)
      return {opt.zeroStage};
    bool sharded = llvm::any_of(c.stagesRef(), [](const StageDevices &sd) {
      return sd.workers() > 1;
    });
    return sharded ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0};
  }

  /// Partitions `c` with the smallest ZeRO stage that fits and without
  /// optimizer offload, else (policy Search) with offload; the options'
  /// fixed choices otherwise (docs/planner.md, "Memory").
  bool choosePartition(Candidate &c, bool even, bool evenLayers) {
    std::vector<bool> offloads{opt.offload == OffloadPolicy::Always};
    if (training && opt.offload == OffloadPolicy::Search)
      offloads.push_back(true);
    std::vector<int> zeros = zeroStages(c);
    if (!evenLayers && zeros.size() * offloads.size() > 1) {
      // What does not fit with the most memory saved does not fit at all:
      // one memory-only fill spares the other savers' partitions.
      Candidate probe = c;
      probe.savers = {zeros.back(), training && bool(offloads.back())};
      std::vector<int> cuts;
      int64_t mb = (opt.globalBatch + c.microBatches - 1) / c.microBatches;
      if (!fill(probe, kInf, mb, even, cuts)) {
        c.savers = probe.savers;
        return false;
      }
    }
    for (bool offload : offloads)
      for (int z : zeros) {
        c.savers = {z, training && offload};
        if (partition(c, even, evenLayers))
          return true;
      }
    return false;
  }

  /// For a candidate the search kept: the next ZeRO stages while they
  /// price faster (the stage that first fits is not always the fastest:
  /// ZeRO-1 moves the same bytes and steps 1/D of the parameters, and the
  /// memory a stage frees can buy a faster grouping or larger shares).
  /// Only the few kept candidates pay for these partitions.
  void fasterZero(Candidate &c, bool even, bool evenLayers) {
    for (int z : zeroStages(c)) {
      if (z <= c.savers.zero)
        continue;
      Candidate next = c;
      next.savers.zero = z;
      if (!partition(next, even, evenLayers) || !(next.estimate < c.estimate * (1 - 1e-9)) ||
          tiedAcrossDegrees(next, even))
        break;
      c = std::move(next);
    }
  }

  /// Whether a tied parameter (an embedding the LM head reads) is read by
  /// stages of different tensor-parallel degrees in `c`: the runtime keeps
  /// such a parameter whole and cannot shard it with ZeRO.
  bool tiedAcrossDegrees(const Candidate &c, bool even) {
    int P = int(c.cuts.size());
    if (P < 2 || tiedLayers.empty())
      return false;
    int64_t mb = (opt.globalBatch + c.microBatches - 1) / c.microBatches;
    auto stageOf = [&](int layer) {
      int j = 0;
      while (j + 1 < P && layer > c.cuts[j])
        ++j;
      return j;
    };
    auto tpOf = [&](int j) {
      int l = j == 0 ? 0 : c.cuts[j - 1] + 1;
      StageCost sc = costOf(c, j, l, c.cuts[j], mb, even);
      return chosen(c.stagesRef()[j], sc).tp;
    };
    for (int i : tiedLayers)
      for (auto [owner, n] : model.layers[i].tiedParameters) {
        int a = stageOf(i), b = stageOf(owner);
        if (a != b && tpOf(a) != tpOf(b))
          return true;
      }
    return false;
  }

  /// For the few candidates that reach the simulation: every position of
  /// each cut between its neighbours, while the estimate improves (the
  /// bottleneck split is not what minimises latency when micro-batches are
  /// few, and activation sizes make the landscape uneven).
  void refineWide(Candidate &c, bool even) {
    int P = int(c.stagesRef().size());
    std::vector<StageTerm> terms;
    for (int j = 0; j < P; ++j)
      terms.push_back(stageTerm(c, j, even));
    c.estimate = combine(c, terms);
    // Small pipelines are judged by the simulation itself: the estimate
    // does not see a stage's all-reduce overlapping another's backward.
    bool simulated = int64_t(P) * c.microBatches <= 64;
    auto judge = [&]() {
      if (!simulated)
        return combine(c, terms);
      for (const StageTerm &t : terms)
        if (t.time == kInf)
          return kInf;
      return simulate(c, even).stepSeconds;
    };
    if (simulated)
      c.estimate = judge();
    for (int pass = 0; pass < 8; ++pass) {
      bool improved = false;
      for (int j = 0; j + 1 < P; ++j) {
        int lower = j ? c.cuts[j - 1] + 1 : 0;
        int bestCut = c.cuts[j];
        StageTerm bestA = terms[j], bestB = terms[j + 1];
        for (int cut = lower; cut < c.cuts[j + 1]; ++cut) {
          if (cut == bestCut)
            continue;
          int saved = c.cuts[j];
          c.cuts[j] = cut;
          StageTerm a = stageTerm(c, j, even), b = stageTerm(c, j + 1, even);
          std::swap(terms[j], a);
          std::swap(terms[j + 1], b);
          double e = judge();
          if (e < c.estimate * (1 - 1e-9)) {
            c.estimate = e;
            bestCut = cut;
            bestA = terms[j];
            bestB = terms[j + 1];
            improved = true;
          }
          terms[j] = a;
          terms[j + 1] = b;
          c.cuts[j] = saved;
        }
        c.cuts[j] = bestCut;
        terms[j] = bestA;
        terms[j + 1] = bestB;
      }
      if (!improved)
        break;
    }
  }

  //===------------------------------------------------------------------===//
  // Simulation and the final plan
  //===------------------------------------------------------------------===//

  Plan simulate(const Candidate &c, bool even);

  void noteShortfall(const Candidate &c, bool even) {
    // The smallest layout that cannot fit: an even layer split with one
    // sample per worker shows how far memory is from enough.
    int P = int(c.stagesRef().size());
    double worst = 0;
    int worstStage = 0, worstClass = -1, worstTp = c.tp;
    bool worstRecompute = false;
    const StageDevices *worstDevices = nullptr;
    for (int j = 0; j < P; ++j) {
      int l = int(int64_t(L) * j / P), r = int(int64_t(L) * (j + 1) / P) - 1;
      if (r < l)
        continue;
      StageCost sc = evaluateStage(c.stagesRef()[j], l, r, 1, inflight(j, P, c.microBatches),
                                   c.microBatches, even, c.savers, c.forced(j));
      if (!sc.fits && sc.shortfall > worst) {
        worst = sc.shortfall;
        worstStage = j;
        worstClass = sc.shortfallClass;
        worstRecompute = sc.recompute;
        worstDevices = &chosen(c.stagesRef()[j], sc);
        worstTp = worstDevices->tp;
      }
    }
    if (worst > 0 && (best.rank == 0 || worst < best.rank)) {
      best.rank = best.bytes = worst;
      best.where = llvm::formatv("stage {0} of {1} on {2} (tensor parallel {3})",
                                 worstStage, P,
                                 worstClass >= 0 ? classes[worstClass].type->name
                                                 : std::string("?"),
                                 worstTp)
                       .str();
      // The bytes the message names are the ones the savers are measured
      // against: what one sample per worker misses there.
      double missing = 0;
      best.fixes = fixesFor(c, worstStage, worstClass >= 0 ? worstClass : 0, worstRecompute,
                            *worstDevices, missing);
      if (missing > 0)
        best.bytes = missing;
    }
  }

  /// What each memory saver not yet used would save on stage j of `c` (its
  /// even layer share, one sample per worker, on the grouping `sd` that
  /// came closest), and whether that is enough; `missingOut`: the bytes
  /// missing there without them.
  std::vector<std::string> fixesFor(const Candidate &c, int j, int cls, bool recompute,
                                    const StageDevices &sd, double &missingOut) {
    int P = int(c.stagesRef().size());
    int l = int(int64_t(L) * j / P), r = int(int64_t(L) * (j + 1) / P) - 1;
    int in = inflight(j, P, c.microBatches);
    double capacity = classes[cls].capacity;
    auto missing = [&](int ll, int rr, bool re, const Savers &sv) {
      Need n = need(cls, ll, rr, sd.tp, sd.workers(), in, c.microBatches, re, sv);
      return peakBytes(n, 1) - capacity;
    };
    double now = missing(l, r, recompute, c.savers);
    missingOut = now;
    std::vector<std::string> fixes, applied;
    auto say = [&](const std::string &what, double after) {
      double saved = now - after;
      if (saved <= 0)
        return;
      fixes.push_back(after <= 0
                          ? llvm::formatv("{0} saves {1} there: enough", what, bytesText(saved)).str()
                          : llvm::formatv("{0} saves {1} there, {2} short still", what,
                                          bytesText(saved), bytesText(after)).str());
    };
    if (!training)
      return fixes;
    if (recompute)
      applied.push_back("recomputation");
    else
      say(opt.recompute == RecomputePolicy::Never
              ? "activation recomputation (--recompute auto)"
              : "activation recomputation",
          missing(l, r, true, c.savers));
    if (sd.workers() > 1)
      for (int z = c.savers.zero + 1; z <= 3; ++z) {
        Savers sv = c.savers;
        sv.zero = z;
        say(llvm::formatv("ZeRO-{0} over the stage's {1} workers{2}", z, sd.workers(),
                          opt.zeroStage >= 0 ? llvm::formatv(" (--zero {0})", z).str()
                                             : std::string())
                .str(),
            missing(l, r, recompute, sv));
      }
    if (c.savers.zero > 0)
      applied.push_back(llvm::formatv("ZeRO-{0}", c.savers.zero).str());
    if (c.savers.offload) {
      applied.push_back("optimizer offload");
    } else {
      Savers sv = c.savers;
      sv.offload = true;
      say(opt.offload == OffloadPolicy::Never
              ? "optimizer offload to host memory (--offload auto)"
              : "optimizer offload to host memory",
          missing(l, r, recompute, sv));
    }
    if (r > l)
      say(llvm::formatv("a pipeline twice as deep on twice the devices ({0} stages "
                        "instead of {1}, half the layers each)", 2 * P, P).str(),
          missing(l, l + (r - l) / 2, recompute, c.savers));
    if (!applied.empty())
      fixes.push_back("already applied there: " + llvm::join(applied, ", "));
    return fixes;
  }

  const cost::ModelCost &model;
  const cluster::Cluster &cluster;
  Options opt;
  int L;
  bool training = true;
  int elementBytes = 2;
  std::vector<DeviceClass> classes;
  std::vector<std::vector<std::vector<std::unique_ptr<Table>>>> timing;  // [class][tp][samples]
  std::vector<double> paramsPrefix, stashPrefix, kvPrefix;
  std::map<int, std::unique_ptr<Traffic>> trafficByTp;
  std::vector<double> stashSplitPrefix, layerInputPrefix;
  std::vector<int> tiedLayers;  // layers that read tied parameters
  std::vector<int> classOfRank;
  RangeMax largestActivation, largestParameters;
  std::map<int, RangeMax> stashMaxByTp;
  /// evaluateLayout's report of a layout that does not fit: shares are not
  /// capped by memory, and the plan shows how far over each rank is.
  bool ignoreMemory = false;
  Shortfall best;
  uint64_t evaluated = 0;
};

Plan Search::simulate(const Candidate &c, bool even) {
  Plan plan;
  plan.strategy = opt.strategy;
  plan.schedule = opt.schedule;
  plan.microBatches = c.microBatches;
  int P = int(c.stagesRef().size());
  int M = c.microBatches;
  int64_t mb = (opt.globalBatch + M - 1) / M;

  // Stage timings and integer shares per worker.
  plan.stageOfRank.assign(cluster.devices.size(), -1);
  // Each stage's grouping (tensor-parallel degree) first: a transfer's
  // price depends on both ends.
  std::vector<StageCost> costs;
  for (int j = 0, l = 0; j < P; l = c.cuts[j] + 1, ++j)
    costs.push_back(costOf(c, j, l, c.cuts[j], mb, even));
  int l = 0;
  for (int j = 0; j < P; ++j) {
    const StageCost &sc = costs[j];
    const StageDevices &sd = chosen(c.stagesRef()[j], sc);
    int r = c.cuts[j];
    Stage st;
    st.firstLayer = l;
    st.lastLayer = r;
    st.tensorParallel = sd.tp;
    st.forwardSeconds = sc.forward;
    st.backwardSeconds = sc.backward;
    st.recompute = sc.recompute;
    st.allReduceSeconds = allReduceTime(sd, l, r, c.savers);
    st.optimizerSeconds = optimizerTime(sd, l, r, c.savers);
    if (j + 1 < P)
      st.sendSeconds = sendTime(sd, chosen(c.stagesRef()[j + 1], costs[j + 1]), r, mb,
                                st.sendBytes);
    // Integer shares: floor of each worker's share, the remainder to the
    // workers with the largest fractional parts (ties by position).
    struct Slot { size_t g; int w; double frac; };
    std::vector<Slot> slots;
    int64_t assigned = 0;
    std::vector<std::vector<int64_t>> samples(sd.groups.size());
    for (size_t g = 0; g < sd.groups.size(); ++g)
      for (int w = 0; w < sd.groups[g].count; ++w) {
        double s = sc.share.empty() ? 0 : sc.share[g];
        int64_t whole = runtime::saturatedCount(std::floor(s + 1e-9));
        samples[g].push_back(whole);
        assigned += whole;
        slots.push_back({g, w, s - double(whole)});
      }
    std::stable_sort(slots.begin(), slots.end(),
                     [](const Slot &a, const Slot &b) { return a.frac > b.frac; });
    for (size_t i = 0; assigned < mb && i < slots.size(); ++i, ++assigned)
      ++samples[slots[i].g][slots[i].w];
    int64_t offset = 0;
    for (size_t g = 0; g < sd.groups.size(); ++g)
      for (int w = 0; w < sd.groups[g].count; ++w) {
        if (samples[g][w] == 0)
          continue;  // a worker with nothing to do stays out of the plan
        Worker worker{sd.groups[g].ranks[w], samples[g][w], offset};
        offset += samples[g][w];
        for (int rank : worker.ranks)
          plan.stageOfRank[rank] = j;
        st.workers.push_back(std::move(worker));
      }
    plan.stages.push_back(std::move(st));
    l = r + 1;
  }

  // Event simulation of one step. Transfers delay the dependent compute but
  // do not occupy the sender.
  std::vector<std::vector<std::pair<Event::Kind, int>>> program(P);
  for (int j = 0; j < P; ++j) {
    auto &prog = program[j];
    if (!training) {
      for (int m = 0; m < M; ++m)
        prog.push_back({Event::Forward, m});
      continue;
    }
    if (opt.schedule == Schedule::GPipe) {
      for (int m = 0; m < M; ++m) prog.push_back({Event::Forward, m});
      for (int m = 0; m < M; ++m) prog.push_back({Event::Backward, m});
      continue;
    }
    int warm = std::min(P - 1 - j, M);
    for (int m = 0; m < warm; ++m)
      prog.push_back({Event::Forward, m});
    for (int m = 0; m + warm < M; ++m) {
      prog.push_back({Event::Forward, m + warm});
      prog.push_back({Event::Backward, m});
    }
    for (int m = M - warm; m < M; ++m)
      prog.push_back({Event::Backward, m});
  }
  std::vector<std::vector<double>> fEnd(P, std::vector<double>(M, -1)),
      bEnd(P, std::vector<double>(M, -1));
  std::vector<size_t> next(P, 0);
  std::vector<double> free(P, 0);
  std::vector<double> busy(P, 0);
  std::vector<int> stashed(P, 0), peakStash(P, 0);
  size_t remaining = 0;
  for (auto &p : program)
    remaining += p.size();
  while (remaining) {
    bool progressed = false;
    for (int j = 0; j < P; ++j) {
      while (next[j] < program[j].size()) {
        auto [kind, m] = program[j][next[j]];
        double ready = 0;
        if (kind == Event::Forward) {
          if (j > 0) {
            if (fEnd[j - 1][m] < 0) break;
            ready = fEnd[j - 1][m] + plan.stages[j - 1].sendSeconds;
          }
        } else {
          if (fEnd[j][m] < 0) break;
          ready = fEnd[j][m];
          if (j + 1 < P) {
            if (bEnd[j + 1][m] < 0) break;
            ready = std::max(ready, bEnd[j + 1][m] + plan.stages[j].sendSeconds);
          }
        }
        double start = std::max(free[j], ready);
        double dur = kind == Event::Forward ? plan.stages[j].forwardSeconds
                                            : plan.stages[j].backwardSeconds;
        double end = start + dur;
        free[j] = end;
        busy[j] += dur;
        (kind == Event::Forward ? fEnd : bEnd)[j][m] = end;
        plan.timeline.push_back({kind, j, m, start, end});
        if (kind == Event::Forward && j + 1 < P)
          plan.timeline.push_back({Event::SendActivation, j, m, end,
                                   end + plan.stages[j].sendSeconds});
        if (kind == Event::Backward && j > 0)
          plan.timeline.push_back({Event::SendGradient, j, m, end,
                                   end + plan.stages[j - 1].sendSeconds});
        if (training) {
          stashed[j] += kind == Event::Forward ? 1 : -1;
          peakStash[j] = std::max(peakStash[j], stashed[j]);
        }
        ++next[j];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed)
      break;  // cannot happen for these schedules; guards against a hang
  }
  double computeEnd = 0;
  for (int j = 0; j < P; ++j)
    computeEnd = std::max(computeEnd, free[j]);
  double step = computeEnd;
  for (int j = 0; j < P; ++j) {
    if (!training)
      continue;
    const Stage &st = plan.stages[j];
    double t = free[j];
    if (st.allReduceSeconds > 0) {
      plan.timeline.push_back({Event::AllReduce, j, -1, t, t + st.allReduceSeconds});
      t += st.allReduceSeconds;
    }
    plan.timeline.push_back({Event::Optimizer, j, -1, t, t + st.optimizerSeconds});
    t += st.optimizerSeconds;
    step = std::max(step, t);
  }
  plan.stepSeconds = step;
  plan.samplesPerSecond = double(opt.globalBatch) / step;
  double busiest = *std::max_element(busy.begin(), busy.end());
  plan.bubbleFraction = computeEnd > 0 ? 1.0 - busiest / computeEnd : 0;
  plan.modelFlopsPerStep = (training ? 3.0 : 1.0) * model.forwardFlopsPerSample() *
                           double(opt.globalBatch);
  double peak = cluster.totalPeakFlops(opt.dtype);
  plan.modelFlopsUtilization = peak > 0 ? plan.modelFlopsPerStep / (step * peak) : 0;

  // Memory per rank from the simulated stash depth.
  plan.zeroStage = training ? c.savers.zero : 0;
  plan.offloadOptimizer = training && c.savers.offload;
  plan.memory.resize(cluster.devices.size());
  for (const auto &d : cluster.devices)
    plan.memory[d.rank].capacity = double(d.type->memoryBytes());
  for (int j = 0; j < P; ++j) {
    const Stage &st = plan.stages[j];
    int depth = training ? std::max(1, peakStash[j]) : 1;
    for (const Worker &w : st.workers)
      for (int rank : w.ranks) {
        RankMemory &mem = plan.memory[rank];
        Need n = need(classOfRank[rank], st.firstLayer, st.lastLayer, st.tensorParallel,
                      int(c.stagesRef()[j].workers()), depth, M, st.recompute, c.savers);
        double samples = double(w.samples);
        mem.parameters = n.weights;
        mem.gradients = n.gradients;
        mem.optimizerState = n.optimizer;
        mem.framework = n.framework;
        mem.optimizerStep = n.step;
        mem.kvCache = n.kvPerSample * samples;
        mem.activations = n.keptPerSample * samples;
        mem.workspace = n.gather + n.transientPerSample * samples +
                        (n.keptPerSample + n.transientPerSample) * samples *
                            opt.allocatorFragmentation;
        if (mem.peak() > mem.capacity)
          plan.fitsMemory = false;
      }
  }
  return plan;
}

llvm::Expected<Plan> Search::run() {
  auto startClock = std::chrono::steady_clock::now();
  if (L == 0)
    return llvm::createStringError("the model has no layers to place");
  if (classes.empty())
    return llvm::createStringError("the cluster has no devices");

  // Device-type orders and subsets to try.
  int K = int(classes.size());
  std::vector<std::vector<int>> orders;
  auto addPermutations = [&](std::vector<int> subset) {
    std::sort(subset.begin(), subset.end());
    if (subset.size() <= 5) {
      do orders.push_back(subset);
      while (std::next_permutation(subset.begin(), subset.end()));
    } else {
      std::sort(subset.begin(), subset.end(), [&](int a, int b) {
        return classes[a].peak > classes[b].peak ||
               (classes[a].peak == classes[b].peak && a < b);
      });
      orders.push_back(subset);
      std::reverse(subset.begin(), subset.end());
      orders.push_back(subset);
    }
  };
  switch (opt.strategy) {
  case Strategy::Hetplan:
    for (int mask = 1; mask < (1 << std::min(K, 10)); ++mask) {
      std::vector<int> subset;
      for (int c = 0; c < K; ++c)
        if (mask & (1 << c))
          subset.push_back(c);
      addPermutations(subset);
    }
    break;
  case Strategy::Homogeneous:
    for (int c = 0; c < K; ++c)
      orders.push_back({c});
    break;
  case Strategy::Pinned:
  case Strategy::DataParallel:
  case Strategy::EvenPipeline: {
    std::vector<int> all(K);
    std::iota(all.begin(), all.end(), 0);
    if (opt.strategy == Strategy::Pinned)
      addPermutations(all);
    else
      orders.push_back(all);  // rank order of classes as in the cluster
    break;
  }
  }

  bool even = opt.strategy == Strategy::DataParallel ||
              opt.strategy == Strategy::EvenPipeline;
  bool evenLayers = opt.strategy == Strategy::EvenPipeline;
  bool hasTP = llvm::any_of(model.layers, [](const cost::LayerCost &l) {
    return l.tensorParallelFraction > 0;
  });

  std::vector<Candidate> kept;  // best few by estimate
  std::vector<Candidate> keptOffload;  // the same among those that offload
  const size_t keep = 24;
  uint64_t order = 0;
  size_t totalOrders = orders.size();
  auto lastProgress = std::chrono::steady_clock::now();
  for (size_t oi = 0; oi < orders.size(); ++oi) {
    const auto &classOrder = orders[oi];
    if (opt.progress) {
      auto now = std::chrono::steady_clock::now();
      if (now - lastProgress > std::chrono::milliseconds(500)) {
        opt.progress(double(oi) / totalOrders);
        lastProgress = now;
      }
    }
    // How many devices of each class to use: all of them, and on small
    // clusters every count (a data-parallel stage of slow devices can cost
    // more in all-reduce than it brings).
    std::vector<std::vector<int>> takes{{}};
    for (int c : classOrder) {
      int count = int(classes[c].ranks.size());
      std::vector<std::vector<int>> next;
      for (const auto &t : takes) {
        int from = opt.strategy == Strategy::Hetplan && cluster.devices.size() <= 12 ? 1 : count;
        for (int k = from; k <= count; ++k) {
          next.push_back(t);
          next.back().push_back(k);
        }
      }
      takes = std::move(next);
    }
    for (const auto &take : takes) {
    std::vector<std::pair<int, int>> sequence;
    for (auto [k, c] : llvm::enumerate(classOrder))
      for (int i = 0; i < take[k]; ++i)
        sequence.push_back({c, classes[c].ranks[i]});
    int N = int(sequence.size());

    // Tensor-parallel degrees: one for every stage when pinned, else each
    // stage picks its own among 1, 2, 4, 8 (StageDevices::alternatives).
    std::vector<int> tps{1}, stageTps;
    if (opt.strategy == Strategy::Pinned && opt.pin.tp)
      tps = {opt.pin.tp};
    else if (hasTP && !even)
      for (int t = 2; t <= opt.maxTensorParallel; t *= 2)
        (opt.strategy == Strategy::Pinned ? tps : stageTps).push_back(t);

    std::vector<int> Ps;
    if (opt.strategy == Strategy::DataParallel) {
      Ps = {1};
    } else if (opt.strategy == Strategy::EvenPipeline) {
      Ps = {std::min(N, L)};
    } else if (opt.strategy == Strategy::Pinned && opt.pin.pp) {
      Ps = {opt.pin.pp};
    } else {
      int maxP = std::min({L, N, opt.maxPipelineStages});
      for (int p = 1; p <= maxP; ++p)
        if (p <= 8 || (p & (p - 1)) == 0 || N % p == 0)
          Ps.push_back(p);
    }

    // Stage boundaries: equal device counts and equal compute always; on
    // small clusters (up to 12 devices) every split of the sequence.
    bool allSplits = N <= 12 && !even && opt.strategy != Strategy::Pinned && opt.splitBatch;
    // Without a batch split every stage is one worker: use tp x P devices.
    int workersPerStage = !opt.splitBatch ? 1 : opt.strategy == Strategy::Pinned ? opt.pin.dp : 0;
    for (int tp : tps)
      for (int P : Ps)
        for (int variant = 0;; ++variant) {
          std::optional<std::vector<StageDevices>> stages;
          std::vector<std::pair<int, int>> seq = sequence;
          if (allSplits) {
            // variant enumerates the (N-1 choose P-1) boundary sets.
            if (P > N)
              break;
            std::vector<int> bounds;
            if (!nthSplit(N, P, variant, bounds))
              break;
            stages = chunkAt(seq, bounds, tp);
          } else {
            if (variant > 1)
              break;
            bool byCompute = variant == 1;
            if (byCompute && (even || classOrder.size() == 1))
              continue;
            if (workersPerStage) {
              int want = workersPerStage * tp * P;
              if (want > N)
                continue;
              seq.resize(want);
            }
            stages = chunk(seq, P, tp, byCompute);
          }
          if (!stages)
            continue;
          for (StageDevices &sd : *stages)
            addAlternatives(sd, stageTps);
          auto stagesShared = std::make_shared<const std::vector<StageDevices>>(std::move(*stages));
          if (workersPerStage && llvm::any_of(*stagesShared, [&](const StageDevices &s) {
                return s.workers() != workersPerStage;
              }))
            continue;
          // Micro-batch counts divide the batch, so every micro-batch has
          // the same size: powers of two, and small multiples of the depth.
          std::vector<int> Ms;
          auto divides = [&](int64_t m) { return m >= 1 && opt.globalBatch % m == 0; };
          if (!opt.splitBatch) {
            Ms = {1};
          } else if (opt.strategy == Strategy::Pinned && opt.pin.mb) {
            Ms = {opt.pin.mb};
          } else {
            for (int64_t m = 1; m <= opt.globalBatch; m *= 2)
              if (divides(m))
                Ms.push_back(int(m));
            for (int k : {1, 2, 3, 4, 6, 8})
              if (divides(int64_t(P) * k))
                Ms.push_back(P * k);
            if (Ms.size() < 4 && opt.globalBatch <= 4096)
              for (int64_t m = 1; m <= opt.globalBatch; ++m)
                if (divides(m))
                  Ms.push_back(int(m));
          }
          std::sort(Ms.begin(), Ms.end());
          Ms.erase(std::unique(Ms.begin(), Ms.end()), Ms.end());
          // The estimate is near unimodal in M (fewer bubbles against
          // smaller, less efficient micro-batches): stop after it has
          // worsened twice in a row.
          double lastEstimate = kInf;
          int worse = 0;
          for (int M : Ms) {
            if (M > opt.globalBatch || opt.globalBatch % M)
              continue;
            if (worse >= 2)
              break;
            Candidate c;
            c.stagesPtr = stagesShared;
            c.tp = tp;
            c.microBatches = M;
            c.order = order++;
            ++evaluated;
            if (!choosePartition(c, even, evenLayers)) {
              noteShortfall(c, even);
              continue;  // more micro-batches may fit where fewer do not
            }
            worse = c.estimate > lastEstimate ? worse + 1 : 0;
            lastEstimate = c.estimate;
            // Offloaded candidates only count when nothing fits without.
            auto &into = c.savers.offload && opt.offload == OffloadPolicy::Search ? keptOffload
                                                                                 : kept;
            into.push_back(std::move(c));
            std::stable_sort(into.begin(), into.end(), [](const Candidate &a, const Candidate &b) {
              return a.estimate < b.estimate ||
                     (a.estimate == b.estimate && a.order < b.order);
            });
            if (into.size() > keep)
              into.pop_back();
          }
        }
    }
  }
  if (opt.progress)
    opt.progress(1.0);

  if (kept.empty())
    kept = std::move(keptOffload);
  if (kept.empty()) {
    std::string msg = "no layout fits in memory";
    if (best.bytes > 0) {
      msg += llvm::formatv(": the closest needs {0} more on {1}", bytesText(best.bytes), best.where)
                 .str();
      if (!best.fixes.empty())
        msg += " (" + llvm::join(best.fixes, "; ") + ")";
    }
    msg += ". What would fix it: devices with more memory, more devices, "
           "--dtype fp16 or bf16, a smaller --batch";
    if (training)
      msg += ", inference instead of training (no gradients or optimizer state)";
    return llvm::createStringError(msg);
  }

  Plan bestPlan;
  bool first = true;
  for (Candidate &c : kept) {
    if (opt.zeroStage < 0)
      fasterZero(c, even, evenLayers);
    if (!evenLayers)
      refineWide(c, even);
    Plan p = simulate(c, even);
    if (first || p.stepSeconds < bestPlan.stepSeconds * (1 - 1e-12)) {
      bestPlan = std::move(p);
      first = false;
    }
  }
  bestPlan.plansEvaluated = evaluated;
  bestPlan.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - startClock).count();
  return bestPlan;
}

llvm::Expected<Plan> Search::evaluate(const Layout &layout) {
  if (layout.stageWorkers.size() != layout.lastLayer.size() || layout.stageWorkers.empty())
    return llvm::createStringError("a layout needs one last layer per stage");
  std::map<int, int> classOf;
  for (size_t c = 0; c < classes.size(); ++c)
    for (int r : classes[c].ranks)
      classOf[r] = int(c);
  Candidate cand;
  std::vector<StageDevices> built;
  cand.tp = layout.tensorParallel;
  cand.microBatches = layout.microBatches;
  cand.cuts = layout.lastLayer;
  if (!layout.stageTensorParallel.empty() &&
      layout.stageTensorParallel.size() != layout.stageWorkers.size())
    return llvm::createStringError("a layout gives a tensor-parallel degree for every stage or none");
  for (const auto &[j, workers] : llvm::enumerate(layout.stageWorkers)) {
    StageDevices sd;
    sd.tp = layout.stageTensorParallel.empty() ? layout.tensorParallel
                                               : layout.stageTensorParallel[j];
    for (const auto &w : workers) {
      if (int(w.size()) != sd.tp)
        return llvm::createStringError(llvm::formatv(
            "layout: stage {0} has tensor parallelism {1}, so each of its workers needs {1} "
            "ranks (one has {2})",
            j, sd.tp, w.size()));
      for (int rank : w)
        if (!classOf.count(rank))
          return llvm::createStringError(
              llvm::formatv("layout: rank {0} is not in the cluster", rank));
      for (int rank : w)
        if (classOf.at(rank) != classOf.at(w[0]))
          return llvm::createStringError(llvm::formatv(
              "layout: stage {0} mixes device types in one worker (ranks {1} and {2})", j, w[0],
              rank));
      int c = classOf.at(w[0]);
      if (sd.groups.empty() || sd.groups.back().cls != c)
        sd.groups.push_back({c, 0, {}});
      sd.groups.back().ranks.push_back(w);
      ++sd.groups.back().count;
    }
    finishStage(sd);
    built.push_back(std::move(sd));
  }
  cand.stagesPtr = std::make_shared<const std::vector<StageDevices>>(std::move(built));
  bool even = layout.evenShares || opt.strategy == Strategy::DataParallel ||
              opt.strategy == Strategy::EvenPipeline;
  for (size_t j = 0; j < layout.lastLayer.size(); ++j)
    if (layout.lastLayer[j] < (j ? layout.lastLayer[j - 1] + 1 : 0) || layout.lastLayer[j] >= L)
      return llvm::createStringError(
          llvm::formatv("layout: stage {0} ends at layer {1}, outside {2}..{3}", j,
                        layout.lastLayer[j], j ? layout.lastLayer[j - 1] + 1 : 0, L - 1));
  if (layout.lastLayer.back() != L - 1)
    return llvm::createStringError(llvm::formatv(
        "layout: the last stage ends at layer {0}, not at the model's last layer {1}",
        layout.lastLayer.back(), L - 1));
  if (!layout.recompute.empty()) {
    if (layout.recompute.size() != layout.stageWorkers.size())
      return llvm::createStringError("layout: recompute needs one entry per stage");
    for (bool on : layout.recompute)
      cand.forceRecompute.push_back(on ? 1 : 0);
  }
  if (layout.zeroStage > 3)
    return llvm::createStringError("layout: zero_stage must be 0, 1, 2 or 3");
  std::vector<int> zeros =
      layout.zeroStage >= 0 ? std::vector<int>{layout.zeroStage} : zeroStages(cand);
  std::vector<bool> offloads;
  if (layout.offloadOptimizer >= 0)
    offloads = {layout.offloadOptimizer == 1};
  else if (opt.offload == OffloadPolicy::Search)
    offloads = {false, true};
  else
    offloads = {opt.offload == OffloadPolicy::Always};
  bool fits = false;
  for (bool offload : offloads) {
    for (int z : zeros) {
      Candidate next = cand;
      next.savers = {training ? z : 0, training && offload};
      next.estimate = estimate(next, even);
      if (next.estimate == kInf) {
        if (!fits)
          cand.savers = next.savers;  // what the over-capacity report prices
        continue;
      }
      // As the search (fasterZero): larger ZeRO stages while they price faster.
      if (fits && (!(next.estimate < cand.estimate * (1 - 1e-9)) || tiedAcrossDegrees(next, even)))
        break;
      cand = std::move(next);
      fits = true;
    }
    if (fits)
      break;
  }
  if (!fits) {
    // Price it with memory ignored to say how far over it is.
    ignoreMemory = true;
    cand.estimate = estimate(cand, even);
    Plan p = simulate(cand, even);
    ignoreMemory = false;
    p.fitsMemory = false;
    p.plansEvaluated = 1;
    if (opt.priceOverCapacity)
      return p;
    int fullest = -1;
    for (size_t r = 0; r < p.memory.size(); ++r)
      if (p.stageOfRank[r] >= 0 &&
          (fullest < 0 || p.memory[r].peak() / p.memory[r].capacity >
                              p.memory[fullest].peak() / p.memory[fullest].capacity))
        fullest = int(r);
    if (fullest < 0)
      return llvm::createStringError("the layout does not fit in memory");
    const RankMemory &m = p.memory[fullest];
    auto gib = [](double b) { return b / double(1 << 30); };
    return llvm::createStringError(llvm::formatv(
        "the layout does not fit in memory: rank {0} ({1}, stage {2}) needs {3:F2} GiB of "
        "{4:F2} GiB (weights {5:F2}, gradients {6:F2}, optimizer {7:F2}, activations {8:F2}, "
        "workspace {9:F2}, framework {10:F2}, optimizer step {11:F2})",
        fullest, cluster.devices[fullest].type->name, p.stageOfRank[fullest], gib(m.peak()),
        gib(m.capacity), gib(m.parameters), gib(m.gradients), gib(m.optimizerState),
        gib(m.activations + m.kvCache), gib(m.workspace), gib(m.framework),
        gib(m.optimizerStep)));
  }
  Plan p = simulate(cand, even);
  p.plansEvaluated = 1;
  return p;
}

} // namespace

llvm::Expected<std::vector<Layout>> parseLayouts(llvm::StringRef text,
                                                 llvm::StringRef bufferName) {
  auto fail = [&](const llvm::Twine &msg) {
    return llvm::createStringError((bufferName + ": " + msg).str());
  };
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return fail("not JSON: " + llvm::toString(parsed.takeError()));
  std::vector<const llvm::json::Object *> objects;
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return fail("expected a JSON object (a layout, or {\"layouts\": [...]})");
  if (const llvm::json::Array *list = root->getArray("layouts")) {
    for (const llvm::json::Value &v : *list) {
      if (!v.getAsObject())
        return fail("each entry of \"layouts\" must be an object");
      objects.push_back(v.getAsObject());
    }
  } else {
    objects.push_back(root);
  }
  std::vector<Layout> out;
  for (size_t i = 0; i < objects.size(); ++i) {
    const llvm::json::Object &o = *objects[i];
    std::string where = objects.size() > 1 ? llvm::formatv("layout {0}: ", i).str() : "";
    for (const auto &kv : o)
      if (kv.first != "micro_batches" && kv.first != "tensor_parallel" &&
          kv.first != "shares" && kv.first != "stages" && kv.first != "name" &&
          kv.first != "zero_stage" && kv.first != "offload_optimizer")
        return fail(where + "unknown field '" + kv.first.str() +
                    "' (expected micro_batches, tensor_parallel, shares, stages, name, "
                    "zero_stage, offload_optimizer)");
    Layout l;
    l.microBatches = int(o.getInteger("micro_batches").value_or(1));
    l.tensorParallel = int(o.getInteger("tensor_parallel").value_or(1));
    if (l.microBatches < 1 || l.tensorParallel < 1)
      return fail(where + "micro_batches and tensor_parallel must be at least 1");
    if (auto shares = o.getString("shares")) {
      if (*shares == "even")
        l.evenShares = true;
      else if (*shares != "speed")
        return fail(where + "shares must be \"even\" or \"speed\"");
    }
    if (const llvm::json::Value *z = o.get("zero_stage")) {
      auto v = z->getAsInteger();
      if (!v || *v < 0 || *v > 3)
        return fail(where + "zero_stage must be 0, 1, 2 or 3");
      l.zeroStage = int(*v);
    }
    if (const llvm::json::Value *off = o.get("offload_optimizer")) {
      auto v = off->getAsBoolean();
      if (!v)
        return fail(where + "offload_optimizer must be true or false");
      l.offloadOptimizer = *v ? 1 : 0;
    }
    bool anyRecompute = false;
    std::vector<bool> recompute;
    const llvm::json::Array *stages = o.getArray("stages");
    if (!stages || stages->empty())
      return fail(where + "missing \"stages\" (a list of {workers, last_layer})");
    for (const llvm::json::Value &sv : *stages) {
      const llvm::json::Object *so = sv.getAsObject();
      const llvm::json::Array *workers = so ? so->getArray("workers") : nullptr;
      auto last = so ? so->getInteger("last_layer") : std::nullopt;
      if (!workers || workers->empty() || !last)
        return fail(where + "each stage needs \"workers\" (lists of ranks) and \"last_layer\"");
      // A stage's own tensor-parallel degree; the layout's otherwise.
      if (so->get("tensor_parallel")) {
        auto t = so->getInteger("tensor_parallel");
        if (!t || *t < 1)
          return fail(where + "a stage's tensor_parallel must be a whole number, at least 1");
        if (l.stageTensorParallel.empty())
          l.stageTensorParallel.assign(l.stageWorkers.size(), l.tensorParallel);
        l.stageTensorParallel.push_back(int(*t));
      } else if (!l.stageTensorParallel.empty()) {
        l.stageTensorParallel.push_back(l.tensorParallel);
      }
      std::vector<std::vector<int>> ws;
      for (const llvm::json::Value &wv : *workers) {
        const llvm::json::Array *ranks = wv.getAsArray();
        if (!ranks || ranks->empty())
          return fail(where + "a worker is a non-empty list of ranks");
        std::vector<int> w;
        for (const llvm::json::Value &rv : *ranks) {
          auto rank = rv.getAsInteger();
          if (!rank || *rank < 0)
            return fail(where + "ranks are non-negative integers");
          w.push_back(int(*rank));
        }
        ws.push_back(std::move(w));
      }
      if (const llvm::json::Value *rv = so->get("recompute")) {
        auto v = rv->getAsBoolean();
        if (!v)
          return fail(where + "a stage's recompute must be true or false");
        anyRecompute = true;
        recompute.push_back(*v);
      } else {
        recompute.push_back(false);
      }
      l.stageWorkers.push_back(std::move(ws));
      l.lastLayer.push_back(int(*last));
    }
    // Given on any stage: every stage's is fixed (absent: off).
    if (anyRecompute)
      l.recompute = std::move(recompute);
    out.push_back(std::move(l));
  }
  return out;
}

/// The batch every entry point checks first (the CLI's check is not the
/// only one: the Python package and the C++ API call in here directly).
static llvm::Error checkBatch(int64_t batch) {
  if (batch <= 0)
    return llvm::createStringError("the batch must be at least 1");
  if (batch > kMaxSamples)
    return llvm::createStringError(llvm::formatv(
        "a batch of {0} is too large (at most {1} samples per step)", batch, kMaxSamples));
  return llvm::Error::success();
}

llvm::Expected<Plan> evaluateLayout(const cost::ModelCost &model,
                                    const cluster::Cluster &cluster,
                                    const Options &options, const Layout &layout) {
  if (auto err = checkBatch(options.globalBatch))
    return std::move(err);
  if (layout.microBatches < 1 || layout.microBatches > options.globalBatch)
    return llvm::createStringError(llvm::formatv(
        "{0} micro-batches for a batch of {1}", layout.microBatches, options.globalBatch));
  if (options.globalBatch % std::max(1, layout.microBatches))
    return llvm::createStringError("micro-batches must divide the batch");
  Search search(model, cluster, options);
  return search.evaluate(layout);
}

llvm::Expected<Plan> makePlan(const cost::ModelCost &model,
                              const cluster::Cluster &cluster,
                              const Options &options) {
  if (auto err = checkBatch(options.globalBatch))
    return std::move(err);
  if (!options.splitBatch && options.strategy == Strategy::Pinned &&
      (options.pin.dp > 1 || options.pin.mb > 1))
    return llvm::createStringError(
        "--pin dp or mb above 1 splits the batch, which this model does not allow");
  if (options.strategy == Strategy::Pinned) {
    const Pin &pin = options.pin;
    if (pin.mb && options.globalBatch % pin.mb)
      return llvm::createStringError(
          llvm::formatv("--pin mb={0} does not divide the batch of {1}", pin.mb,
                        options.globalBatch));
    if (pin.pp > int(model.layers.size()))
      return llvm::createStringError(
          llvm::formatv("--pin pp={0} asks for more stages than the model's {1} layers",
                        pin.pp, model.layers.size()));
    int64_t need = int64_t(std::max(pin.pp, 1)) * std::max(pin.dp, 1) * std::max(pin.tp, 1);
    if (need > int64_t(cluster.devices.size()))
      return llvm::createStringError(
          llvm::formatv("--pin needs {0} devices (pp x dp x tp) but the cluster has {1}",
                        need, cluster.devices.size()));
  }
  Search search(model, cluster, options);
  return search.run();
}

} // namespace hetplan::planner
