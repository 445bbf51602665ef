//===- BatchShares.cpp - a micro-batch split among workers ------------------===//
//
// Each worker of a stage takes a share of every micro-batch in proportion
// to its speed (or evenly), capped by its memory (water-filling).
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include "runtime/include/hetplan/runtime/Checked.h"

#include <cmath>

namespace hetplan::planner::detail {

/// Splits `mb` samples among the stage's workers in proportion to their
/// speed (or evenly), capped by memory, and times the slowest worker.
StageCost Search::evaluateStageWith(const StageDevices &sd, int l, int r, int64_t mb,
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
    if (double x = tableExchange(sd, l, r, samples); x > 0) {
      f += x;  // the looked-up rows from their owners; their gradients back
      comm += x;
      backComm += x;
    }
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

} // namespace hetplan::planner::detail
