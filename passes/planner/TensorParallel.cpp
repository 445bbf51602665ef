//===- TensorParallel.cpp - tensor parallelism per stage --------------------===//
//
// The collectives a tensor-parallel group runs, and the degree each stage
// takes: every grouping of its devices is priced and the fastest kept.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include <algorithm>
#include <cmath>

namespace hetplan::planner::detail {

const Traffic &Search::traffic(int tp) {
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

/// Elements of the weights of the vocab-parallel heads in layers [l, r]
/// that split `tp` ways (0: none).
double Search::vocabHeadElements(int l, int r, int tp) const {
  double n = 0;
  if (!training || tp <= 1)
    return 0;
  for (int i = l; i <= r; ++i)
    for (const cost::TensorParallelUnit &u : model.layers[i].tensorParallelUnits)
      if (u.vocabHead && u.fits(tp))
        n += u.stepAllReduceElements;
  return n;
}

/// Prices layers [l, r] on every tensor-parallel grouping of the stage's
/// devices and keeps the one with the least compute per micro-batch plus
/// its once-per-step gradient all-reduce and optimizer step spread over
/// the micro-batches (ties: the first, the smallest degree). Each grouping
/// decides its recomputation (evaluateRecompute).
StageCost Search::evaluateStage(const StageDevices &sd, int l, int r, int64_t mb,
                                int inflight, int microBatches, bool even, const Savers &sv,
                                int forceRecompute) {
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

/// The stage's devices grouped into workers of each degree in `tps` (as
/// many as its runs of one class fill), for the search to choose from.
void Search::addAlternatives(StageDevices &sd, llvm::ArrayRef<int> tps) {
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

} // namespace hetplan::planner::detail
