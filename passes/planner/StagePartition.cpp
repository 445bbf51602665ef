//===- StagePartition.cpp - the layers of each stage ------------------------===//
//
// The layer cuts of a candidate: a binary search on the bottleneck with a
// greedy fill, then local moves of each cut while the estimate improves.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace hetplan::planner::detail {

/// evaluateStage for stage j of `c` over layers [l, r].
StageCost Search::costOf(const Candidate &c, int j, int l, int r, int64_t mb, bool even) {
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

/// Greedy fill for a bottleneck `tau`: each stage takes as many layers as
/// fit in time and memory. Returns the cuts or nothing.
bool Search::fill(Candidate &c, double tau, int64_t mb, bool even, std::vector<int> &cuts) {
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

StageTerm Search::stageTerm(Candidate &c, int j, bool even) {
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
double Search::combine(const Candidate &c, const std::vector<StageTerm> &terms) const {
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

double Search::estimate(Candidate &c, bool even) {
  std::vector<StageTerm> terms;
  for (size_t j = 0; j < c.stagesRef().size(); ++j)
    terms.push_back(stageTerm(c, int(j), even));
  return combine(c, terms);
}

/// Finds the cuts of `c` minimising the bottleneck, then nudges each cut
/// by one layer while the estimate improves.
bool Search::partition(Candidate &c, bool even, bool evenLayers) {
  std::map<std::tuple<int, int, int, int64_t, bool>, StageCost> cache;
  costCache = &cache;
  bool ok = partitionWith(c, even, evenLayers);
  costCache = nullptr;
  return ok;
}

bool Search::partitionWith(Candidate &c, bool even, bool evenLayers) {
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

/// For the few candidates that reach the simulation: every position of
/// each cut between its neighbours, while the estimate improves (the
/// bottleneck split is not what minimises latency when micro-batches are
/// few, and activation sizes make the landscape uneven).
void Search::refineWide(Candidate &c, bool even) {
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

} // namespace hetplan::planner::detail
