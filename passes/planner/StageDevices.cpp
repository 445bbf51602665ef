//===- StageDevices.cpp - the devices of each stage -------------------------===//
//
// A sequence of devices cut into pipeline stages, each grouped into
// tensor-parallel workers within nodes, and the links they talk over.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include <map>

namespace hetplan::planner::detail {

/// Groups a run of ranks (same class, in order) into TP workers within
/// nodes; leftover ranks that cannot fill a group stay unused.
void Search::addWorkers(StageDevices &sd, int cls, llvm::ArrayRef<int> ranks, int tp) {
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

void Search::finishStage(StageDevices &sd) {
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
Search::chunk(const std::vector<std::pair<int, int>> &sequence, int P, int tp, bool byCompute) {
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
bool Search::nthSplit(int N, int P, int n, std::vector<int> &bounds) {
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
Search::chunkAt(const std::vector<std::pair<int, int>> &sequence, const std::vector<int> &bounds,
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

} // namespace hetplan::planner::detail
