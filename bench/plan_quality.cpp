//===- plan_quality.cpp - hetplan's plan against every plan ---------------===//
//
// On clusters small enough to enumerate, prices every layout hetplan could
// produce -- every ordered subset of devices, every split of it into
// contiguous stages, every layer split, every micro-batch count dividing the
// batch -- with the same cost model and schedule simulation, and compares the
// best of them with the plan hetplan's search returns.
//
//   hetplan-bench-plan-quality MODEL CLUSTER BATCH [SEQ] [train|infer] [tp]
//
// With `tp`, every stage also takes every tensor-parallel degree (1, 2, 4,
// 8) whose workers its devices fill (runs of one type in one node), each
// stage its own, and hetplan's search chooses its degrees per stage too;
// without it both use tensor parallelism 1.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/ModelPipeline.h"
#include "passes/planner/Planner.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>

using namespace hetplan;

namespace {

std::string describe(const cluster::Cluster &cl, const std::vector<std::vector<int>> &stageRanks,
                     const std::vector<int> &lastLayers, int M, const std::vector<int> &tps) {
  std::string out;
  for (size_t j = 0; j < stageRanks.size(); ++j) {
    out += "[";
    for (int r : stageRanks[j])
      out += cl.devices[r].type->name.substr(0, 4) + " ";
    out += "L.." + std::to_string(lastLayers[j]) +
           (j < tps.size() && tps[j] > 1 ? " tp" + std::to_string(tps[j]) : "") + "] ";
  }
  return out + "M=" + std::to_string(M);
}

/// Prices every layout (the file comment) and keeps the fastest.
struct Enumeration {
  const cost::ModelCost &cost;
  const cluster::Cluster &cl;
  const planner::Options &opt;
  bool perStageTp;
  int N, L;
  std::vector<int> Ms;             // micro-batch counts dividing the batch
  std::vector<std::string> key;    // each device's (type, node) class

  double bestEnumerated = 1e300;
  planner::Layout bestLayout;
  uint64_t layouts = 0, feasible = 0;

  Enumeration(const cost::ModelCost &cost, const cluster::Cluster &cl,
              const planner::Options &opt, bool perStageTp, int64_t batch)
      : cost(cost), cl(cl), opt(opt), perStageTp(perStageTp), N(int(cl.devices.size())),
        L(int(cost.layers.size())) {
    for (int m = 1; m <= batch; ++m)
      if (batch % m == 0)
        Ms.push_back(m);
    // Devices of one type in one node are interchangeable, so only the
    // sequence of (type, node) classes matters.
    key.resize(N);
    for (int r = 0; r < N; ++r)
      key[r] = cl.devices[r].type->name + "@" + std::to_string(cl.devices[r].node);
  }

  /// Every ordered subset of devices.
  void run() {
    std::vector<int> seq;
    std::vector<bool> used(N, false);
    visitSequence(seq, used);
  }

  void visitSequence(std::vector<int> &seq, std::vector<bool> &used) {
    if (!seq.empty()) {
      int n = int(seq.size());
      // Every composition of the sequence into P contiguous stages.
      for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
        std::vector<std::vector<std::vector<int>>> stages(1);
        for (int i = 0; i < n; ++i) {
          stages.back().push_back({seq[i]});
          if (i + 1 < n && (mask >> i & 1))
            stages.emplace_back();
        }
        if (int(stages.size()) > L)
          continue;
        visitStages(stages);
      }
    }
    // Extend with the first unused device of each class not tried yet here.
    std::vector<std::string> tried;
    for (int r = 0; r < N; ++r) {
      if (used[r] || std::find(tried.begin(), tried.end(), key[r]) != tried.end())
        continue;
      tried.push_back(key[r]);
      used[r] = true;
      seq.push_back(r);
      visitSequence(seq, used);
      seq.pop_back();
      used[r] = false;
    }
  }

  /// One split of the devices into stages: every layer split, degree per
  /// stage and micro-batch count.
  void visitStages(const std::vector<std::vector<std::vector<int>>> &stages) {
    int P = int(stages.size());
    // The degrees each stage's devices can be grouped into: runs of
    // `t` devices of one type in one node.
    std::vector<std::vector<int>> degrees(P);
    for (int j = 0; j < P; ++j)
      for (int t = 1; t <= (perStageTp ? opt.maxTensorParallel : 1); t *= 2) {
        const auto &st = stages[j];
        bool ok = st.size() % size_t(t) == 0;
        for (size_t i = 0; ok && i < st.size(); ++i)
          ok = key[st[i][0]] == key[st[i - i % t][0]];
        if (ok)
          degrees[j].push_back(t);
      }
    std::vector<int> tps(P, 1);
    // Every layer split into P non-empty ranges.
    std::vector<int> cuts(P);
    std::function<void(int, int)> split = [&](int j, int from) {
      if (j == P - 1) {
        cuts[j] = L - 1;
        // Every degree per stage, every micro-batch count.
        std::function<void(int)> chooseTp = [&](int s) {
          if (s < P) {
            for (int t : degrees[s]) {
              tps[s] = t;
              chooseTp(s + 1);
            }
            return;
          }
          priceLayout(stages, cuts, tps);
        };
        chooseTp(0);
        return;
      }
      for (int c = from; c <= L - (P - j); ++c) {
        cuts[j] = c;
        split(j + 1, c + 1);
      }
    };
    split(0, 0);
  }

  /// The layout of `stages` with these layer cuts and degrees, at every
  /// micro-batch count.
  void priceLayout(const std::vector<std::vector<std::vector<int>>> &stages,
                   const std::vector<int> &cuts, const std::vector<int> &tps) {
    int P = int(stages.size());
    planner::Layout layout{{}, cuts, 1, 1};
    for (int q = 0; q < P; ++q) {
      layout.stageWorkers.emplace_back();
      for (size_t i = 0; i < stages[q].size(); i += size_t(tps[q])) {
        layout.stageWorkers.back().emplace_back();
        for (int k = 0; k < tps[q]; ++k)
          layout.stageWorkers.back().back().push_back(stages[q][i + size_t(k)][0]);
      }
    }
    layout.stageTensorParallel = tps;
    for (int M : Ms) {
      layout.microBatches = M;
      ++layouts;
      auto p = planner::evaluateLayout(cost, cl, opt, layout);
      if (!p) {
        llvm::consumeError(p.takeError());
        continue;
      }
      ++feasible;
      if (p->stepSeconds < bestEnumerated) {
        bestEnumerated = p->stepSeconds;
        bestLayout = layout;
      }
    }
  }
};

/// HETPLAN_BENCH_VERBOSE: hetplan's layout and the best enumerated one.
void printLayouts(const cluster::Cluster &cl, const planner::Plan &best,
                  const planner::Layout &bestLayout) {
  std::vector<std::vector<int>> ranks;
  std::vector<int> last, tps;
  for (const auto &st : best.stages) {
    ranks.emplace_back();
    for (const auto &w : st.workers)
      ranks.back().insert(ranks.back().end(), w.ranks.begin(), w.ranks.end());
    last.push_back(st.lastLayer);
    tps.push_back(st.tensorParallel);
  }
  llvm::outs() << "  hetplan:    " << describe(cl, ranks, last, best.microBatches, tps) << "\n";
  ranks.clear();
  for (const auto &st : bestLayout.stageWorkers) {
    ranks.emplace_back();
    for (const auto &w : st)
      ranks.back().insert(ranks.back().end(), w.begin(), w.end());
  }
  llvm::outs() << "  enumerated: "
               << describe(cl, ranks, bestLayout.lastLayer, bestLayout.microBatches,
                           bestLayout.stageTensorParallel)
               << "\n";
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    llvm::errs() << "usage: " << argv[0] << " MODEL CLUSTER BATCH [SEQ] [train|infer]\n";
    return 2;
  }
  planner::PipelineOptions po;
  po.path = argv[1];
  po.batch = std::stoll(argv[3]);
  po.sequence = argc > 4 ? std::stoll(argv[4]) : 0;
  po.allowMissingWeights = true;
  po.training = !(argc > 5 && std::string(argv[5]) == "infer");
  auto costed = planner::costModelFile(po);
  if (!costed) {
    llvm::errs() << "error: " << llvm::toString(costed.takeError()) << "\n";
    return 1;
  }
  auto cl = cluster::parseClusterSpec(argv[2], cluster::DeviceCatalog::builtin());
  if (!cl) {
    llvm::errs() << "error: " << llvm::toString(cl.takeError()) << "\n";
    return 1;
  }
  planner::Options opt;
  opt.globalBatch = po.batch;
  opt.mode = argc > 5 && std::string(argv[5]) == "infer" ? cost::Mode::Infer : cost::Mode::Train;
  bool perStageTp = argc > 6 && std::string(argv[6]) == "tp";
  if (!perStageTp)
    opt.maxTensorParallel = 1;  // the enumeration below covers tp = 1

  auto t0 = std::chrono::steady_clock::now();
  auto best = planner::makePlan(costed->cost, *cl, opt);
  double searchSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!best) {
    llvm::errs() << "error: " << llvm::toString(best.takeError()) << "\n";
    return 1;
  }

  Enumeration e(costed->cost, *cl, opt, perStageTp, po.batch);
  auto t1 = std::chrono::steady_clock::now();
  e.run();
  double enumSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();

  double ratio = best->stepSeconds / e.bestEnumerated;
  llvm::outs() << llvm::formatv(
      "{0} | {1} | {2} layers | batch {3} | hetplan {4:F4} s in {5:F3} s | best of {6} "
      "layouts ({7} fit) {8:F4} s in {9:F1} s | ratio {10:F4}\n",
      costed->cost.graphName, argv[2], e.L, po.batch, best->stepSeconds, searchSeconds, e.layouts,
      e.feasible, e.bestEnumerated, enumSeconds, ratio);
  if (getenv("HETPLAN_BENCH_VERBOSE"))
    printLayouts(*cl, *best, e.bestLayout);
  return ratio <= 1.02 ? 0 : 3;
}
