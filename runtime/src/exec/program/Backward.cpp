//===- Backward.cpp - BACKWARD instructions -------------------------------===//
#include "RankProgram.h"

#include <algorithm>

namespace hetplan::runtime {

using namespace planexec;

void PlanExecutor::RankProgram::onBackward(const plan::Instruction &ins) {
  gatherShards(ins.micro_batch(), 1);
  backwardStep(ins.micro_batch());
  dropGathered();
}

void PlanExecutor::RankProgram::backwardStep(uint32_t mb) {
  if (recompute) { // rebuild the values from the stage's kept inputs
    std::map<std::string, Tensor> values = std::move(train->stash.at(mb));
    forward(mb, &values);
    train->stash[mb] = std::move(values);
    noteStash();
  }
  auto &seeds = train->seeds[mb];
  auto &stash = train->stash.at(mb);
  for (const auto &p : stageParams_[j]) stash[p] = train->state.params.at(p);
  if (out) {
    const auto &next = plan_.stages(int(j + 1));
    for (const auto &w : next.workers())
      if (std::max(w.sample_offset(), off) < std::min(w.sample_offset() + w.samples(), off + n) &&
          !train->gradIn[mb].count(w.sample_offset()))
        receiveGradient(mb, w.ranks(0)); // the program had no RECV_GRADIENT for it
    const auto &flags = train->outFlags.at(mb);
    for (size_t i = 0; i < flags.size(); ++i) {
      if (!flags[i]) continue;
      const Tensor &value = stash.at(out->received[i]);
      Tensor g(value.dtype(), value.shape());
      for (auto &[o, parts] : train->gradIn[mb]) {
        int64_t lo = std::max(off, o);
        putRows(g, lo - off, parts[i]);
      }
      seeds[out->received[i]] = std::move(g);
    }
    train->gradIn.erase(mb);
    outbox.erase(mb);
  }
  auto lookup = [&](const std::string &v) -> const Tensor * {
    auto it = stash.find(v);
    if (it != stash.end()) return &it->second;
    auto jt = model_->initializers.find(v);
    return jt == model_->initializers.end() ? nullptr : &jt->second;
  };
  std::set<std::string> requires = std::move(train->requires.at(mb)); // found by the FORWARD
  train->requires.erase(mb);
  std::map<std::string, Tensor> grads = std::move(seeds);
  train->seeds.erase(mb);
  train::GradientHook hook = [&](size_t node, GradientContext &ctx) { return tpBackward(mb, node, ctx); };
  const train::GradientHook *tpHook = splitNodes.empty() || tp < 2 ? nullptr : &hook;
  if (compute) compute->backward(*model_, stageNodes_[j], lookup, requires, grads, tpHook, &splitNodeSet);
  else train::backward(*model_, stageNodes_[j], lookup, requires, grads, tpHook);
  for (const auto &p : stageParams_[j]) {
    auto it = grads.find(p);
    if (it != grads.end() && it->second.defined()) train::accumulate(train->state.grads[p], it->second);
  }
  if (in) {
    const auto &flags = train->inFlags.at(mb);
    auto &mine = train->gradOut[mb];
    for (size_t i = 0; i < flags.size(); ++i) {
      if (!flags[i]) continue;
      const std::string &v = in->received[i];
      auto it = grads.find(v);
      const Tensor &value = stash.at(v);
      mine[v] = it != grads.end() && it->second.defined() ? it->second : Tensor(value.dtype(), value.shape());
    }
  }
  train->stash.erase(mb);
}

} // namespace hetplan::runtime
