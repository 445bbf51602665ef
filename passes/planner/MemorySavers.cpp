//===- MemorySavers.cpp - recomputation, ZeRO and offload -------------------===//
//
// Which memory savers a stage or candidate uses: recomputation per stage,
// the ZeRO stage and optimizer offload per candidate (docs/planner.md,
// "Memory").
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include "llvm/ADT/STLExtras.h"

namespace hetplan::planner::detail {

/// One grouping: whether its stage recomputes.
/// `forceRecompute`: -1 the options' policy decides, 0 off, 1 on.
StageCost Search::evaluateRecompute(const StageDevices &sd, int l, int r, int64_t mb,
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

/// ZeRO stages to try for `c`, smallest first: the options' stage, or
/// all four where a stage has data-parallel workers to shard over.
std::vector<int> Search::zeroStages(const Candidate &c) const {
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
bool Search::choosePartition(Candidate &c, bool even, bool evenLayers) {
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
void Search::fasterZero(Candidate &c, bool even, bool evenLayers) {
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
bool Search::tiedAcrossDegrees(const Candidate &c, bool even) {
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

} // namespace hetplan::planner::detail
