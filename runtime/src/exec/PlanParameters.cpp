//===- PlanParameters.cpp - a training plan's parameters across ranks -----===//
//
// Which ranks sum which gradients (and ZeRO's partition of them), the
// state a rank starts from, and where each parameter's current value
// lives after a step (collected in-process or gathered over MPI).
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"
#include "PlanSupport.h"
#include "Training.h"

#include <algorithm>

namespace hetplan::runtime {

using namespace planexec;

void PlanExecutor::checkTraining() {
  const Model &m = *model_;
  size_t S = size_t(plan_.stages_size());
  trainable_ = train::trainableParameters(m);
  if (trainable_.empty()) fail(m.path + ": the model has no parameters to train (float32 initializers a gradient reaches)");
  for (size_t j = 0; j < S; ++j)
    for (const auto &[node, head] : vocabHeads_[j])
      if (!trainable_.count(head.param))
        fail("stage " + std::to_string(j) + ": vocab-parallel head " + m.nodes[node].describe() + " reads '" +
             head.param + "', which is not trained");
  std::vector<size_t> all(m.nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<std::string> problems = train::checkBackward(m, all, trainable_);
  if (!problems.empty())
    fail(problems.front() + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) +
                                                       " more problems)" : ""));
  stageNodes_.assign(S, {});
  stageParams_.assign(S, {});
  std::map<std::pair<std::string, uint32_t>, std::set<int>> holders; // (param, tp index)
  std::map<std::string, std::set<std::pair<int, int>>> followers;     // param -> (rank, its worker's first)
  std::map<std::string, std::set<uint32_t>> degrees;                  // param -> degrees of its readers
  for (size_t j = 0; j < S; ++j)
    for (size_t i : io_[j].metaNodes)
      m.nodes[i].forEachRead([&](const std::string &in) {
        if (trainable_.count(in)) degrees[in].insert(plan_.stages(int(j)).tensor_parallel());
      });
  for (size_t j = 0; j < S; ++j)
    for (size_t i = plan_.stages(int(j)).first_node(); i <= plan_.stages(int(j)).last_node(); ++i)
      m.nodes[i].forEachRead([&](const std::string &in) {
        if (trainable_.count(in)) degrees[in].insert(plan_.stages(int(j)).tensor_parallel());
      });
  for (size_t j = 0; j < S; ++j) {
    const auto &st = plan_.stages(int(j));
    if (io_[j].received.size() >= size_t(kTrainTagsPerMicroBatch - 1))
      fail("stage " + std::to_string(j) + " receives " + std::to_string(io_[j].received.size()) +
           " values; training supports fewer than " + std::to_string(kTrainTagsPerMicroBatch - 1));
    stageNodes_[j] = io_[j].metaNodes;
    for (size_t i = st.first_node(); i <= st.last_node(); ++i) stageNodes_[j].push_back(i);
    for (size_t i : stageNodes_[j])
      m.nodes[i].forEachRead([&](const std::string &in) {
        if (trainable_.count(in)) stageParams_[j].insert(in);
      });
    for (const auto &p : stageParams_[j]) {
      if (degrees[p].size() > 1) {
        // Stages of different degrees read it (a tied embedding): each
        // worker's ranks hold the same whole copy. The workers' first ranks
        // sum it; each then hands the sum to its worker's other ranks.
        for (size_t s2 = 0; s2 < S; ++s2)
          if (tpParams_[s2].count(p))
            fail("parameter '" + p + "' is split by stage " + std::to_string(s2) +
                 " and read by stages of different tensor parallelism; training such a plan is not supported");
        for (const auto &w : st.workers()) {
          holders[{p, 0}].insert(int(w.ranks(0)));
          for (int k = 1; k < w.ranks_size(); ++k) followers[p].insert({int(w.ranks(k)), int(w.ranks(0))});
        }
        continue;
      }
      // One sum per position in the tensor-parallel group: the ranks at
      // position k hold the same shard (or the same replicated copy).
      for (uint32_t k = 0; k < st.tensor_parallel(); ++k)
        for (const auto &w : st.workers()) holders[{p, k}].insert(int(w.ranks(int(k))));
    }
  }
  std::map<std::pair<std::vector<int>, std::vector<std::pair<int, int>>>, std::vector<std::string>> groups;
  for (const auto &[key, ranks] : holders) {
    auto f = followers.find(key.first);
    std::vector<std::pair<int, int>> fs;
    if (f != followers.end()) fs.assign(f->second.begin(), f->second.end());
    groups[{std::vector<int>(ranks.begin(), ranks.end()), fs}].push_back(key.first);
  }
  sumGroups_.clear();
  sumFollowers_.clear();
  for (auto &[key, params] : groups) {
    sumGroups_.push_back({key.first, params});
    sumFollowers_.push_back(key.second);
  }
  if (plan_.settings().micro_batches() >= (1u << 16))
    fail("training supports fewer than 65536 micro-batches");

  // ZeRO: each group's parameters flattened in name order and cut into
  // equal contiguous element ranges (all float32, so equal bytes), member
  // k of the sorted ranks taking the k-th (docs/runtime.md, "ZeRO").
  uint32_t zero = plan_.settings().zero_stage();
  for (size_t g = 0; zero && g < sumFollowers_.size(); ++g)
    if (!sumFollowers_[g].empty())
      fail("ZeRO-" + std::to_string(zero) + " with parameter '" + sumGroups_[g].second.front() +
           "' read by stages of different tensor parallelism is not supported: use ZeRO 0 or one "
           "tensor-parallel degree for the stages that share it");
  zero_.assign(zero ? sumGroups_.size() : 0, {});
  for (size_t g = 0; g < zero_.size(); ++g) {
    const auto &[ranks, params] = sumGroups_[g];
    ZeroGroup &z = zero_[g];
    z.offsets.push_back(0);
    for (const auto &p : params) z.offsets.push_back(z.offsets.back() + m.initializers.at(p).numel());
    int64_t total = z.offsets.back(), G = int64_t(ranks.size());
    for (int64_t k = 0; k <= G; ++k) z.bounds.push_back(total * k / G);
    std::set<uint32_t> stages;
    for (int r : ranks) stages.insert(plan_.ranks(r).stage());
    z.paramsSharded = zero == 3 && G > 1 && stages.size() == 1;
    // The members all-gather before every FORWARD and BACKWARD, so they
    // must run them in one order: validatePlan's checkPlanPrograms has
    // refused plans where they do not (they would wait on each other).
  }
  if (!zero_.empty() && int64_t(plan_.settings().micro_batches()) * 3 * int64_t(zero_.size()) >= (int64_t(1) << 28))
    fail("settings.zero_stage: too many micro-batches x parameter groups for ZeRO's message tags");
}

PlanExecutor::ZeroShard PlanExecutor::zeroShard(size_t g, uint32_t r) const {
  ZeroShard out;
  const auto &[ranks, params] = sumGroups_.at(g);
  const ZeroGroup &z = zero_.at(g);
  out.ranks = ranks;
  out.params = params;
  out.offsets = z.offsets;
  out.bounds = z.bounds;
  out.paramsSharded = z.paramsSharded;
  size_t k = size_t(std::find(ranks.begin(), ranks.end(), int(r)) - ranks.begin());
  if (k < ranks.size()) {
    out.lo = z.bounds[k];
    out.hi = z.bounds[k + 1];
  }
  return out;
}

std::map<size_t, PlanExecutor::ZeroShard> PlanExecutor::zeroShards(uint32_t r) const {
  std::map<size_t, ZeroShard> out;
  for (size_t g = 0; g < zero_.size(); ++g)
    if (std::binary_search(sumGroups_[g].first.begin(), sumGroups_[g].first.end(), int(r)))
      out[g] = zeroShard(g, r);
  return out;
}

PlanExecutor::RankTrainState PlanExecutor::initialTrainState(uint32_t r) const {
  RankTrainState state;
  if (!training() || isIdleRank(plan_, r)) return state;
  for (const auto &p : stageParams_[plan_.ranks(int(r)).stage()])
    state.params[p] = model_->initializers.at(p).clone();
  // ZeRO-3: of a sharded group's parameters only this rank's range.
  for (const auto &[g, z] : zeroShards(r)) {
    if (!z.paramsSharded) continue;
    state.shards[g].param = flatRange(state.params, z.params, z.offsets, z.lo, z.hi);
    for (const auto &p : z.params) state.params.erase(p);
  }
  return state;
}

/// Where the current value of each parameter lives: the ranks of the first
/// worker of the first stage reading it, each with the part it holds (all
/// of it unless the stage splits the weight over its ranks).
std::vector<PlanExecutor::ParamSource> PlanExecutor::parameterSources() const {
  std::vector<ParamSource> out;
  std::set<std::string> seen;
  for (const auto &st : plan_.stages())
    for (const auto &p : stageParams_[st.index()]) {
      if (!seen.insert(p).second) continue;
      const auto &w = st.workers(0);
      if (!tpParams_[st.index()].count(p)) {
        out.push_back({p, w.ranks(0), Held{}});
        continue;
      }
      for (int k = 0; k < w.ranks_size(); ++k) out.push_back({p, w.ranks(k), held(w.ranks(k), p)});
    }
  return out;
}

PlanExecutor::Held PlanExecutor::held(uint32_t r, const std::string &param) const {
  if (isIdleRank(plan_, r)) return Held{0, {}};
  const auto &rank = plan_.ranks(int(r));
  const auto &w = plan_.stages(int(rank.stage())).workers(int(rank.worker()));
  auto it = tpParams_[rank.stage()].find(param);
  if (it == tpParams_[rank.stage()].end()) return Held{};
  auto [axis, segments] = it->second;
  for (int k = 0; k < w.ranks_size(); ++k)
    if (w.ranks(k) == r)
      return Held{axis, shardRanges(model_->initializers.at(param).dim(axis), segments, k, w.ranks_size())};
  return Held{};
}

Tensor PlanExecutor::heldPart(const Tensor &t, const Held &h) {
  return h.whole() ? t : slices(t, h.axis, h.ranges);
}

std::map<std::string, Tensor> PlanExecutor::collectParameters(const std::vector<RankTrainState> &states) const {
  // ZeRO-3: the sharded groups' parameters put together from their members' ranges.
  std::map<uint32_t, std::map<std::string, Tensor>> assembled;
  for (uint32_t r = 0; r < states.size(); ++r)
    for (const auto &[g, z] : zeroShards(r)) {
      if (!z.paramsSharded) continue;
      for (size_t k = 0; k < z.ranks.size(); ++k) {
        const auto &shards = states.at(size_t(z.ranks[k])).shards;
        if (shards.count(g))
          scatterFlat(shards.at(g).param, z.bounds[k], z.params, z.offsets, assembled[r], model_->initializers);
      }
    }
  std::map<std::string, Tensor> out;
  for (const auto &src : parameterSources()) {
    if (src.rank >= states.size()) continue;
    const auto &held = states[src.rank].params.count(src.name) ? states[src.rank].params : assembled[src.rank];
    if (!held.count(src.name)) continue;
    const Tensor &t = held.at(src.name);
    if (src.held.whole()) {
      out[src.name] = t;
      continue;
    }
    auto [it, fresh] = out.try_emplace(src.name, t.dtype(), t.shape());
    putSlices(it->second, heldPart(t, src.held), src.held.axis, src.held.ranges);
  }
  return out;
}

std::map<std::string, Tensor> PlanExecutor::gatherParameters(Communicator &comm, const RankTrainState &state) const {
  // Rank 0 receives every piece; tags count the pieces in order.
  std::map<std::string, Tensor> out;
  // ZeRO-3: every member of a sharded group gathers its parameters first.
  std::map<std::string, Tensor> params = state.params;
  for (const auto &[g, z] : zeroShards(uint32_t(comm.rank()))) {
    if (!z.paramsSharded) continue;
    std::vector<int64_t> counts;
    for (size_t k = 0; k < z.ranks.size(); ++k) counts.push_back(z.bounds[k + 1] - z.bounds[k]);
    Tensor full = comm.allGather(z.ranks, state.shards.at(g).param, counts, zeroTag(0, 2, g, zero_.size()));
    scatterFlat(full, 0, z.params, z.offsets, params, model_->initializers);
  }
  int64_t k = 0;
  for (const auto &src : parameterSources()) {
    int64_t tag = kSumTagBase - 1 - k++;
    if (comm.rank() == 0) {
      Tensor piece = src.rank == 0 ? heldPart(params.at(src.name), src.held) : comm.recv(int(src.rank), tag);
      const Tensor &init = model_->initializers.at(src.name);
      if (src.held.whole()) {
        out[src.name] = piece;
        continue;
      }
      auto [it, fresh] = out.try_emplace(src.name, init.dtype(), init.shape());
      putSlices(it->second, piece, src.held.axis, src.held.ranges);
    } else if (uint32_t(comm.rank()) == src.rank) {
      comm.send(0, tag, heldPart(params.at(src.name), src.held));
    }
  }
  return out;
}

} // namespace hetplan::runtime
