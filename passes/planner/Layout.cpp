//===- Layout.cpp - explicit layouts ----------------------------------------===//
//
// Layouts a user or a benchmark gives (hetplan compile --layout): read from
// JSON and priced exactly as the search prices its candidates.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>

namespace hetplan::planner::detail {

llvm::Expected<Plan> Search::evaluate(const Layout &layout) {
  if (layout.stageWorkers.size() != layout.lastLayer.size() || layout.stageWorkers.empty())
    return llvm::createStringError("a layout needs one last layer per stage");
  Candidate cand;
  cand.tp = layout.tensorParallel;
  cand.microBatches = layout.microBatches;
  cand.cuts = layout.lastLayer;
  if (!layout.stageTensorParallel.empty() &&
      layout.stageTensorParallel.size() != layout.stageWorkers.size())
    return llvm::createStringError("a layout gives a tensor-parallel degree for every stage or none");
  auto built = layoutStages(layout);
  if (!built)
    return built.takeError();
  cand.stagesPtr = std::make_shared<const std::vector<StageDevices>>(std::move(*built));
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
  if (!layoutSavers(cand, layout, even))
    return overCapacity(cand, even);
  Plan p = simulate(cand, even);
  p.plansEvaluated = 1;
  return p;
}

/// The layout's stages as the search's StageDevices: each worker's ranks
/// one device type, as many as the stage's tensor-parallel degree.
llvm::Expected<std::vector<StageDevices>> Search::layoutStages(const Layout &layout) {
  std::map<int, int> classOf;
  for (size_t c = 0; c < classes.size(); ++c)
    for (int r : classes[c].ranks)
      classOf[r] = int(c);
  std::vector<StageDevices> built;
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
      for (int rank : w)
        if (cluster.devices[rank].node != cluster.devices[w[0]].node)
          return llvm::createStringError(llvm::formatv(
              "layout: stage {0} has a tensor-parallel worker across nodes (ranks {1} on {2}, "
              "{3} on {4}); {5}",
              j, w[0], cluster.nodes[cluster.devices[w[0]].node].name, rank,
              cluster.nodes[cluster.devices[rank].node].name, kTensorParallelRule));
      int c = classOf.at(w[0]);
      if (sd.groups.empty() || sd.groups.back().cls != c)
        sd.groups.push_back({c, 0, {}});
      sd.groups.back().ranks.push_back(w);
      ++sd.groups.back().count;
    }
    finishStage(sd);
    built.push_back(std::move(sd));
  }
  return built;
}

/// The layout's ZeRO stage and offload, or those the options allow: the
/// first that fits, then (as the search's fasterZero) larger ZeRO stages
/// while they price faster. False when none fits; `cand` then carries the
/// savers the over-capacity report prices.
bool Search::layoutSavers(Candidate &cand, const Layout &layout, bool even) {
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
  return fits;
}

/// A layout that does not fit, priced with memory ignored: the plan itself
/// with Options::priceOverCapacity, else an error naming its fullest rank
/// and what fills it.
llvm::Expected<Plan> Search::overCapacity(Candidate &cand, bool even) {
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

} // namespace hetplan::planner::detail

namespace hetplan::planner {

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


} // namespace hetplan::planner
