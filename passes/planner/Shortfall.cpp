//===- Shortfall.cpp - why no layout fits -----------------------------------===//
//
// When no layout fits memory: the closest one, and what each memory saver
// not yet used would save there.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

namespace hetplan::planner::detail {

/// Small shortfalls (a CPU test cluster, a tiny model) must not read
/// "0.00 GiB".
std::string bytesText(double b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && std::fabs(b) >= 1024) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? llvm::formatv("{0:F0} B", b).str() : llvm::formatv("{0:F2} {1}", b, units[u]).str();
}

void Search::noteShortfall(const Candidate &c, bool even) {
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
std::vector<std::string> Search::fixesFor(const Candidate &c, int j, int cls, bool recompute,
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

} // namespace hetplan::planner::detail
