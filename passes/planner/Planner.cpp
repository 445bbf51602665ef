//===- Planner.cpp - split layers and batches across a mixed cluster ------===//

#include "passes/planner/Planner.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
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

constexpr double kInf = std::numeric_limits<double>::infinity();
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

/// What a candidate stage costs for a layer range.
struct StageCost {
  bool fits = false;
  double shortfall = 0;       // bytes missing on the worst worker when !fits
  int shortfallClass = -1;
  double forward = 0, backward = 0;  // one micro-batch, slowest worker
  llvm::SmallVector<double, 8> share;  // samples per worker, per group
  /// Which grouping of the stage's devices: 0 the stage itself, v > 0 its
  /// alternatives[v - 1] (another tensor-parallel degree).
  int variant = 0;
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
    training = opt.mode == Mode::Train;
    for (int i = 0; i < L; ++i) {
      const auto &l = model.layers[i];
      paramsPrefix[i + 1] = paramsPrefix[i] + double(l.parameters);
      stashPrefix[i + 1] = stashPrefix[i] + l.stashBytesPerSample;
      kvPrefix[i + 1] = kvPrefix[i] + l.kvCacheBytesPerSample;
    }
    elementBytes = cost::dtypeBytes(opt.dtype);
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

  double usableMemory(int c) const {
    return classes[c].capacity * (1.0 - opt.reservedMemoryFraction);
  }

  /// Bytes a worker of class c needs besides per-sample activations.
  double staticBytes(int l, int r, int tp, int64_t microBatches) const {
    double params = (paramsPrefix[r + 1] - paramsPrefix[l]) / tp;
    if (training)
      return params * opt.trainingBytesPerParameter;
    return params * elementBytes;
  }

  /// Bytes per sample of the worker's share: stashed activations for every
  /// micro-batch in flight (training), or KV cache of all micro-batches
  /// resident plus one micro-batch of activations (inference).
  double perSampleBytes(int l, int r, int tp, int inflight, int microBatches) const {
    double stash = stashPrefix[r + 1] - stashPrefix[l];
    if (tp > 1)
      stash /= tp;  // Megatron splits the large activations across the group
    if (training)
      return stash * inflight;
    double kv = (kvPrefix[r + 1] - kvPrefix[l]) / tp;
    double largest = 0;
    for (int i = l; i <= r; ++i)
      largest = std::max(largest, model.layers[i].stashBytesPerSample / tp);
    return kv * microBatches + largest;
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
  /// the micro-batches (ties: the first, the smallest degree).
  StageCost evaluateStage(const StageDevices &sd, int l, int r, int64_t mb,
                          int inflight, int microBatches, bool even) {
    StageCost best = evaluateGrouping(sd, l, r, mb, inflight, microBatches, even);
    if (sd.alternatives.empty())
      return best;
    auto score = [&](const StageDevices &x, const StageCost &sc) {
      return sc.forward + sc.backward +
             (allReduceTime(x, l, r) + optimizerTime(x, l, r)) / std::max(microBatches, 1);
    };
    double bestScore = best.fits ? score(sd, best) : kInf;
    for (size_t v = 0; v < sd.alternatives.size(); ++v) {
      const StageDevices &x = sd.alternatives[v];
      StageCost sc = evaluateGrouping(x, l, r, mb, inflight, microBatches, even);
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

  /// Splits `mb` samples among the stage's workers in proportion to their
  /// speed (or evenly), capped by memory, and times the slowest worker.
  StageCost evaluateGrouping(const StageDevices &sd, int l, int r, int64_t mb,
                             int inflight, int microBatches, bool even) {
    StageCost sc;
    size_t G = sd.groups.size();
    llvm::SmallVector<double, 8> cap(G), rate(G);
    double need0 = staticBytes(l, r, sd.tp, microBatches);
    double perSample = perSampleBytes(l, r, sd.tp, inflight, microBatches);
    double worst = 0;
    int worstClass = -1;
    for (size_t g = 0; g < G; ++g) {
      int c = sd.groups[g].cls;
      double room = usableMemory(c) - need0;
      if (room < 0 || (perSample > 0 && room < perSample)) {
        double missing = need0 + perSample - usableMemory(c);
        if (missing > worst) {
          worst = missing;
          worstClass = c;
        }
        cap[g] = 0;
      } else {
        cap[g] = perSample > 0 ? std::floor(room / perSample) : double(mb);
      }
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
      sc.shortfall = std::max(worst, perSample);
      sc.shortfallClass = worstClass >= 0 ? worstClass : sd.groups[0].cls;
      return sc;
    }
    sc.fits = true;
    sc.share = share;
    for (size_t g = 0; g < G; ++g) {
      if (share[g] <= 0)
        continue;
      // Workers of a group get floor or ceil of the share; the slowest has ceil.
      int64_t samples = int64_t(std::ceil(share[g] - 1e-9));
      double comm = 0, backComm = 0;
      double f = forwardTime(sd.groups[g].cls, sd.tp, samples, l, r, sd, &comm, &backComm);
      double fixed = classes[sd.groups[g].cls].microBatchSeconds;
      f += fixed;
      comm += fixed;  // paid once more by the backward pass, not doubled
      if (f > sc.forward) {
        sc.forward = f;
        sc.backward = training ? 2.0 * (f - comm) + fixed + backComm : 0;
      }
    }
    return sc;
  }

  double allReduceTime(const StageDevices &sd, int l, int r) const {
    int D = sd.workers();
    if (!training || D <= 1)
      return 0;
    // Gradients travel in their own format (Options::gradientDType): fp32
    // in PyTorch AMP's DDP and DeepSpeed's fp32_allreduce, whatever the
    // format of the forward pass.
    double gradBytes = (paramsPrefix[r + 1] - paramsPrefix[l]) / sd.tp *
                       double(cost::dtypeBytes(opt.gradientDType.value_or(opt.dtype)));
    return 2.0 * (D - 1) / D * gradBytes / (sd.ringGBs / sd.ringSharers * 1e9) +
           2.0 * (D - 1) * sd.ringLatencyUs * 1e-6;
  }

  double optimizerTime(const StageDevices &sd, int l, int r) const {
    if (!training)
      return 0;
    double slowest = 0;
    for (const auto &g : sd.groups) {
      const cluster::DeviceType &type = *classes[g.cls].type;
      double bw = type.memoryBandwidthBytesPerSec() * cost::defaultEfficiency(type).memory;
      double bytes = (paramsPrefix[r + 1] - paramsPrefix[l]) / sd.tp *
                     opt.trainingBytesPerParameter * 2;  // read and write
      slowest = std::max(slowest, bytes / bw);
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
  };

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
        StageCost sc = evaluateStage(c.stagesRef()[j], l, r, mb, inflight(j, P, c.microBatches),
                                     c.microBatches, even);
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
    StageCost sc = evaluateStage(c.stagesRef()[j], l, r, mb, inflight(j, P, c.microBatches),
                                 c.microBatches, even);
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
    term.tail = allReduceTime(sd, l, r) + optimizerTime(sd, l, r);
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
      StageCost sc = evaluateStage(c.stagesRef()[j], l, cuts[j], mb,
                                   inflight(j, P, c.microBatches), c.microBatches, even);
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
    for (int j = 0; j < P; ++j) {
      int l = int(int64_t(L) * j / P), r = int(int64_t(L) * (j + 1) / P) - 1;
      if (r < l)
        continue;
      StageCost sc = evaluateStage(c.stagesRef()[j], l, r, 1, inflight(j, P, c.microBatches),
                                   c.microBatches, even);
      if (!sc.fits && sc.shortfall > worst) {
        worst = sc.shortfall;
        worstStage = j;
        worstClass = sc.shortfallClass;
        worstTp = chosen(c.stagesRef()[j], sc).tp;
      }
    }
    if (worst > 0 && (best.bytes == 0 || worst < best.bytes)) {
      best.bytes = worst;
      best.where = llvm::formatv("stage {0} of {1} on {2} (tensor parallel {3})",
                                 worstStage, P,
                                 worstClass >= 0 ? classes[worstClass].type->name
                                                 : std::string("?"),
                                 worstTp)
                       .str();
    }
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
    costs.push_back(evaluateStage(c.stagesRef()[j], l, c.cuts[j], mb, inflight(j, P, M), M, even));
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
    st.allReduceSeconds = allReduceTime(sd, l, r);
    st.optimizerSeconds = optimizerTime(sd, l, r);
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
        int64_t whole = int64_t(std::floor(s + 1e-9));
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
  plan.memory.resize(cluster.devices.size());
  for (const auto &d : cluster.devices) {
    RankMemory &mem = plan.memory[d.rank];
    mem.capacity = double(d.type->memoryBytes());
    mem.workspace = mem.capacity * opt.reservedMemoryFraction;
  }
  for (int j = 0; j < P; ++j) {
    const Stage &st = plan.stages[j];
    double params = (paramsPrefix[st.lastLayer + 1] - paramsPrefix[st.firstLayer]) /
                    st.tensorParallel;
    int depth = training ? std::max(1, peakStash[j]) : 1;
    double perSample = perSampleBytes(st.firstLayer, st.lastLayer, st.tensorParallel,
                                      depth, M);
    for (const Worker &w : st.workers)
      for (int rank : w.ranks) {
        RankMemory &mem = plan.memory[rank];
        if (training) {
          double weightBytes = elementBytes;
          mem.parameters = params * weightBytes;
          mem.gradients = params * weightBytes;
          mem.optimizerState = params * std::max(0.0, opt.trainingBytesPerParameter -
                                                           2 * weightBytes);
          mem.activations = perSample * double(w.samples);
        } else {
          mem.parameters = params * elementBytes;
          double kv = (kvPrefix[st.lastLayer + 1] - kvPrefix[st.firstLayer]) /
                      st.tensorParallel;
          mem.kvCache = kv * M * double(w.samples);
          mem.activations = (perSample - kv * M) * double(w.samples);
        }
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
            if (!partition(c, even, evenLayers)) {
              noteShortfall(c, even);
              continue;  // more micro-batches may fit where fewer do not
            }
            worse = c.estimate > lastEstimate ? worse + 1 : 0;
            lastEstimate = c.estimate;
            kept.push_back(std::move(c));
            std::stable_sort(kept.begin(), kept.end(), [](const Candidate &a, const Candidate &b) {
              return a.estimate < b.estimate ||
                     (a.estimate == b.estimate && a.order < b.order);
            });
            if (kept.size() > keep)
              kept.pop_back();
          }
        }
    }
  }
  if (opt.progress)
    opt.progress(1.0);

  if (kept.empty()) {
    std::string msg = "no layout fits in memory";
    if (best.bytes > 0) {
      msg += llvm::formatv(": the closest needs {0:F2} GiB more on {1}", best.bytes / (1 << 30),
                           best.where)
                 .str();
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
  cand.estimate = estimate(cand, even);
  if (cand.estimate == kInf)
    return llvm::createStringError("the layout does not fit in memory");
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
          kv.first != "shares" && kv.first != "stages" && kv.first != "name")
        return fail(where + "unknown field '" + kv.first.str() +
                    "' (expected micro_batches, tensor_parallel, shares, stages, name)");
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
      l.stageWorkers.push_back(std::move(ws));
      l.lastLayer.push_back(int(*last));
    }
    out.push_back(std::move(l));
  }
  return out;
}

llvm::Expected<Plan> evaluateLayout(const cost::ModelCost &model,
                                    const cluster::Cluster &cluster,
                                    const Options &options, const Layout &layout) {
  if (options.globalBatch % std::max(1, layout.microBatches))
    return llvm::createStringError("micro-batches must divide the batch");
  Search search(model, cluster, options);
  return search.evaluate(layout);
}

llvm::Expected<Plan> makePlan(const cost::ModelCost &model,
                              const cluster::Cluster &cluster,
                              const Options &options) {
  if (options.globalBatch <= 0)
    return llvm::createStringError("the batch must be at least 1");
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
