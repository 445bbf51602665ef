//===- Search.cpp - the search that drives the decisions --------------------===//
//
// The enumeration: device-type orders and counts, pipeline depths,
// tensor-parallel degrees and micro-batch counts; each candidate goes to
// the decisions in the other files, and the best few to the simulation.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

namespace hetplan::planner::detail {

Search::Search(const cost::ModelCost &model, const cluster::Cluster &cluster,
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
  sparsePrefix.assign(L + 1, 0);
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
    double tables = 0;
    if (training && opt.sparseEmbeddings)
      for (const auto &e : l.embeddings)
        tables += e.elements();
    sparsePrefix[i + 1] = sparsePrefix[i] + tables;
    if (tables > 0)
      embeddingLayers.push_back(i);
  }
  elementBytes = cost::dtypeBytes(opt.dtype);
  std::vector<double> activation, parameters;
  for (int i = 0; i < L; ++i) {
    const auto &l = model.layers[i];
    activation.push_back(l.largestInOutBytesPerSample);
    parameters.push_back(double(l.parameters) - (sparsePrefix[i + 1] - sparsePrefix[i]));
  }
  largestActivation = RangeMax(std::move(activation));
  largestParameters = RangeMax(std::move(parameters));
}

void Search::buildClasses() {
  std::map<std::pair<std::string, double>, int> index;
  for (const auto &d : cluster.devices) {
    auto key = std::make_pair(d.type->name, d.speedFactor);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, int(classes.size())).first;
      cost::Efficiency eff = cost::efficiency(*d.type, cluster.stack());
      classes.push_back({d.type, d.speedFactor, {}, d.effectiveFlops(opt.dtype),
                         double(d.type->memoryBytes()), eff.microBatchSeconds, eff});
    }
    classes[it->second].ranks.push_back(d.rank);
    if (classOfRank.size() <= size_t(d.rank))
      classOfRank.resize(d.rank + 1, -1);
    classOfRank[d.rank] = it->second;
  }
  timing.resize(classes.size());
}

llvm::Expected<Plan> Search::run() {
  auto startClock = std::chrono::steady_clock::now();
  if (L == 0)
    return llvm::createStringError("the model has no layers to place");
  if (classes.empty())
    return llvm::createStringError("the cluster has no devices");

  std::vector<std::vector<int>> orders = classOrders();
  bool even = opt.strategy == Strategy::DataParallel ||
              opt.strategy == Strategy::EvenPipeline;
  bool evenLayers = opt.strategy == Strategy::EvenPipeline;
  bool hasTP = llvm::any_of(model.layers, [](const cost::LayerCost &l) {
    return l.tensorParallelFraction > 0;
  });

  Finalists finalists;
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
    for (const auto &take : deviceCounts(classOrder))
      searchDevices(classOrder, take, even, evenLayers, hasTP, finalists);
  }
  if (opt.progress)
    opt.progress(1.0);

  std::vector<Candidate> &kept = finalists.kept;
  if (kept.empty())
    kept = std::move(finalists.keptOffload);
  if (kept.empty())
    return noLayoutFits();

  Plan bestPlan = bestOf(kept, even, evenLayers);
  bestPlan.plansEvaluated = evaluated;
  bestPlan.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - startClock).count();
  return bestPlan;
}

/// Device-type orders and subsets to try: every subset in every order for
/// the full search (up to 10 types; past 5 in a subset, fastest first and
/// slowest first only), one type at a time for the homogeneous baseline.
std::vector<std::vector<int>> Search::classOrders() const {
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
  return orders;
}

/// How many devices of each class in `classOrder` to use: all of them, and
/// on small clusters every count (a data-parallel stage of slow devices can
/// cost more in all-reduce than it brings).
std::vector<std::vector<int>> Search::deviceCounts(const std::vector<int> &classOrder) const {
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
  return takes;
}

/// Pipeline depths to try on `N` devices.
std::vector<int> Search::pipelineDepths(int N) const {
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
  return Ps;
}

/// The first `take[k]` devices of each class of `classOrder`, in that
/// order: every tensor-parallel degree, pipeline depth and cut of them into
/// stages, each with every micro-batch count (tryMicroBatches).
void Search::searchDevices(const std::vector<int> &classOrder, const std::vector<int> &take,
                           bool even, bool evenLayers, bool hasTP, Finalists &finalists) {
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

  std::vector<int> Ps = pipelineDepths(N);

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
        tryMicroBatches(stagesShared, tp, P, even, evenLayers, finalists);
      }
}

/// Micro-batch counts divide the batch, so every micro-batch has the same
/// size: powers of two, and small multiples of the depth `P`.
std::vector<int> Search::microBatchCounts(int P) const {
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
  return Ms;
}

/// Partitions the stages `stages` (tensor-parallel degree `tp`, depth `P`)
/// at each micro-batch count and keeps the candidates that fit.
void Search::tryMicroBatches(const std::shared_ptr<const std::vector<StageDevices>> &stages,
                             int tp, int P, bool even, bool evenLayers, Finalists &finalists) {
  // The estimate is near unimodal in M (fewer bubbles against smaller, less
  // efficient micro-batches): stop after it has worsened twice in a row.
  double lastEstimate = kInf;
  int worse = 0;
  for (int M : microBatchCounts(P)) {
    if (M > opt.globalBatch || opt.globalBatch % M)
      continue;
    if (worse >= 2)
      break;
    Candidate c;
    c.stagesPtr = stages;
    c.tp = tp;
    c.microBatches = M;
    c.order = finalists.order++;
    ++evaluated;
    if (!choosePartition(c, even, evenLayers)) {
      noteShortfall(c, even);
      continue;  // more micro-batches may fit where fewer do not
    }
    worse = c.estimate > lastEstimate ? worse + 1 : 0;
    lastEstimate = c.estimate;
    keep(std::move(c), finalists);
  }
}

/// Adds `c` to the best few by estimate (ties: the earlier enumerated).
/// Offloaded candidates only count when nothing fits without.
void Search::keep(Candidate c, Finalists &finalists) {
  auto &into = c.savers.offload && opt.offload == OffloadPolicy::Search ? finalists.keptOffload
                                                                       : finalists.kept;
  into.push_back(std::move(c));
  std::stable_sort(into.begin(), into.end(), [](const Candidate &a, const Candidate &b) {
    return a.estimate < b.estimate || (a.estimate == b.estimate && a.order < b.order);
  });
  if (into.size() > Finalists::kKept)
    into.pop_back();
}

/// The error when no candidate fits: the closest one and what would fix it.
llvm::Error Search::noLayoutFits() const {
  std::string msg = "no layout fits in memory";
  if (best.bytes > 0) {
    msg += llvm::formatv(": the closest needs {0} more on {1}", bytesText(best.bytes), best.where)
               .str();
    if (!best.fixes.empty())
      msg += " (" + llvm::join(best.fixes, "; ") + ")";
  }
  msg += ". What would fix it: devices with more memory, more devices, ";
  // Only a 4-byte dtype halves by switching: never suggest the one in use.
  if (opt.dtype == cost::DType::FP32 || opt.dtype == cost::DType::TF32)
    msg += "--dtype fp16 or bf16, ";
  msg += "a smaller --batch";
  if (training && !opt.sparseEmbeddings) {
    size_t tables = 0;
    double bytes = 0;
    for (const auto &l : model.layers)
      for (const auto &e : l.embeddings) {
        ++tables;
        bytes += e.elements() * elementBytes;
      }
    if (tables > 0)
      msg += llvm::formatv(", --sparse-embeddings (the model's {0} embedding table(s), {1}: row-sharded "
                           "over a stage's workers, gradients of the rows looked up only)",
                           tables, bytesText(bytes)).str();
  }
  if (training)
    msg += ", inference instead of training (no gradients or optimizer state)";
  return llvm::createStringError(msg);
}

/// The kept candidates, each given its faster ZeRO stages and a wide
/// refinement of its cuts, simulated: the fastest (ties: the first).
Plan Search::bestOf(std::vector<Candidate> &kept, bool even, bool evenLayers) {
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
  return bestPlan;
}

} // namespace hetplan::planner::detail
