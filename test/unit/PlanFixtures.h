//===- PlanFixtures.h - small plans and helpers for runtime tests -*- C++ -*-===//
#ifndef HETPLAN_TEST_UNIT_PLANFIXTURES_H
#define HETPLAN_TEST_UNIT_PLANFIXTURES_H

#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace hetplan::test {

/// The message of what `f` throws, "" when it does not.
inline std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

/// Training labels for `inputs`: the shape of the model's first output
/// without its last axis (the classes), label i being i % `classes`.
inline runtime::Tensor cyclicLabels(const runtime::Model &m, const std::map<std::string, runtime::Tensor> &inputs,
                                    int64_t classes = 50) {
  runtime::Tensor out = runtime::Executor(m).run(inputs).begin()->second;
  std::vector<int64_t> shape(out.shape().begin(), out.shape().end() - 1);
  runtime::Tensor labels(runtime::DType::Int64, shape);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.data<int64_t>()[i] = i % classes;
  return labels;
}

/// A one-rank plan of the model at `path` on a `deviceType` (mode infer or
/// train, `batch` samples, one micro-batch): what the plan executor runs,
/// without the compiler.
inline plan::Plan oneRankPlan(const std::string &path, const std::string &mode, int64_t batch,
                              const std::string &deviceType = "A100-SXM-80GB", const std::string &dtype = "fp32") {
  runtime::Model m = runtime::loadModel(path);
  plan::Plan p;
  p.set_schema_version(runtime::kPlanSchemaVersion);
  p.mutable_model()->set_path(path);
  p.mutable_model()->set_sha256(runtime::fileSha256(path));
  for (const auto &n : m.nodes) p.mutable_model()->add_node_names(n.name);
  auto *layer = p.mutable_model()->add_layers();
  layer->set_first_node(0);
  layer->set_last_node(uint32_t(m.nodes.size() - 1));
  auto *d = p.mutable_cluster()->add_devices();
  d->set_rank(0);
  d->set_type(deviceType);
  p.mutable_settings()->set_mode(mode);
  p.mutable_settings()->set_dtype(dtype);
  p.mutable_settings()->set_global_batch(batch);
  p.mutable_settings()->set_micro_batches(1);
  return runtime::PlanExecutor::singleRankPlan(p);
}

struct TwoStageLayout {
  std::string firstNodeOfStage1;            // node name: where the model is cut
  std::vector<std::vector<int64_t>> shares; // per stage: samples per micro-batch of each worker
  uint32_t micro = 2;
  std::string schedule = "gpipe";           // or "1f1b"
  std::vector<bool> recompute = {false, false};
  uint32_t zero = 0;
  bool offload = false;
};

/// A two-stage plan of `layout` for the model at `path` (`mode` train or
/// infer), with the programs `hetplan compile` writes for it (GPipe or
/// 1F1B; a worker receives from and sends to every worker of the
/// neighbouring stage whose samples overlap its own; inference programs
/// have the FORWARDs and activation transfers only).
inline plan::Plan twoStagePlan(const std::string &path, const TwoStageLayout &l, const std::string &mode = "train") {
  using namespace runtime;
  const bool train = mode == "train";
  Model m = loadModel(path);
  uint32_t N = uint32_t(m.nodes.size()), cut = 0;
  for (uint32_t i = 0; i < N; ++i)
    if (m.nodes[i].name == l.firstNodeOfStage1) cut = i;
  if (cut == 0) throw std::runtime_error("no node " + l.firstNodeOfStage1);
  plan::Plan p;
  p.set_schema_version(kPlanSchemaVersion);
  auto *model = p.mutable_model();
  model->set_path(path);
  model->set_sha256(fileSha256(path));
  for (const auto &n : m.nodes) model->add_node_names(n.name);
  const uint32_t S = 2, M = l.micro;
  uint32_t bounds[3] = {0, cut, N};
  for (uint32_t s = 0; s < S; ++s) {
    auto *layer = model->add_layers();
    layer->set_name("stage" + std::to_string(s));
    layer->set_first_node(bounds[s]);
    layer->set_last_node(bounds[s + 1] - 1);
  }
  int64_t microBatch = 0;
  for (int64_t x : l.shares[0]) microBatch += x;
  auto *settings = p.mutable_settings();
  settings->set_mode(mode);
  settings->set_global_batch(microBatch * M);
  settings->set_micro_batches(M);
  settings->set_schedule(l.schedule);
  if (train) settings->set_optimizer("adam");
  settings->set_dtype("fp32");
  settings->set_zero_stage(l.zero);
  settings->set_offload_optimizer(l.offload);
  auto *node = p.mutable_cluster()->add_nodes();
  node->set_name("cpus");
  uint32_t rank = 0;
  std::vector<std::vector<uint32_t>> ranksOf(S);
  for (uint32_t s = 0; s < S; ++s) {
    auto *st = p.add_stages();
    st->set_index(s);
    st->set_first_layer(s);
    st->set_last_layer(s);
    st->set_first_node(bounds[s]);
    st->set_last_node(bounds[s + 1] - 1);
    st->set_tensor_parallel(1);
    st->set_recompute(l.recompute[s]);
    int64_t offset = 0;
    for (int64_t samples : l.shares[s]) {
      auto *w = st->add_workers();
      w->add_ranks(rank);
      w->set_samples(samples);
      w->set_sample_offset(offset);
      offset += samples;
      auto *d = p.mutable_cluster()->add_devices();
      d->set_rank(rank);
      d->set_type("CPU");
      node->add_ranks(rank);
      ranksOf[s].push_back(rank++);
    }
  }
  for (uint32_t s = 0; s < S; ++s)
    for (int w = 0; w < p.stages(int(s)).workers_size(); ++w) {
      const auto &self = p.stages(int(s)).workers(w);
      auto *r = p.add_ranks();
      r->set_rank(self.ranks(0));
      r->set_stage(s);
      r->set_worker(uint32_t(w));
      auto overlapping = [&](uint32_t other) {
        std::vector<uint32_t> out;
        for (const auto &o : p.stages(int(other)).workers())
          if (std::max(o.sample_offset(), self.sample_offset()) <
              std::min(o.sample_offset() + o.samples(), self.sample_offset() + self.samples()))
            out.push_back(o.ranks(0));
        return out;
      };
      auto add = [&](plan::Instruction::Kind kind, uint32_t mb, std::vector<uint32_t> peers = {}) {
        auto *ins = r->add_program();
        ins->set_kind(kind);
        ins->set_micro_batch(mb);
        for (uint32_t x : peers) ins->add_peers(x);
        if (kind == plan::Instruction::FORWARD || kind == plan::Instruction::BACKWARD) {
          ins->set_first_node(bounds[s]);
          ins->set_last_node(bounds[s + 1] - 1);
          ins->set_samples(self.samples());
        }
      };
      auto fwd = [&](uint32_t mb) {
        if (s > 0)
          for (uint32_t x : overlapping(s - 1)) add(plan::Instruction::RECV_ACTIVATION, mb, {x});
        add(plan::Instruction::FORWARD, mb);
        if (s + 1 < S)
          for (uint32_t x : overlapping(s + 1)) add(plan::Instruction::SEND_ACTIVATION, mb, {x});
      };
      auto bwd = [&](uint32_t mb) {
        if (!train) return;
        if (s + 1 < S)
          for (uint32_t x : overlapping(s + 1)) add(plan::Instruction::RECV_GRADIENT, mb, {x});
        add(plan::Instruction::BACKWARD, mb);
        if (s > 0)
          for (uint32_t x : overlapping(s - 1)) add(plan::Instruction::SEND_GRADIENT, mb, {x});
      };
      if (l.schedule == "1f1b") {
        uint32_t warm = std::min(S - 1 - s, M);
        for (uint32_t mb = 0; mb < warm; ++mb) fwd(mb);
        for (uint32_t mb = warm; mb < M; ++mb) {
          fwd(mb);
          bwd(mb - warm);
        }
        for (uint32_t mb = M - warm; mb < M; ++mb) bwd(mb);
      } else {
        for (uint32_t mb = 0; mb < M; ++mb) fwd(mb);
        for (uint32_t mb = 0; mb < M; ++mb) bwd(mb);
      }
      std::vector<uint32_t> others;
      for (uint32_t x : ranksOf[s])
        if (x != self.ranks(0)) others.push_back(x);
      if (train && !others.empty()) add(plan::Instruction::ALLREDUCE_GRADIENTS, 0, others);
      if (train) add(plan::Instruction::OPTIMIZER_STEP, 0);
    }
  // Ranks are listed by rank: stage 0's workers came first.
  return p;
}

/// The host defaults of RankCompute (the CPU gradient registry,
/// train::optimizerUpdate); runNodes is not used.
class HostCompute final : public runtime::RankCompute {
public:
  std::map<std::string, runtime::Tensor>
  runNodes(const std::vector<size_t> &, std::map<std::string, runtime::Tensor>, const std::set<std::string> &,
           std::map<std::string, std::vector<int64_t>> *, runtime::ExecutionObserver *,
           const runtime::Executor::NodeHook *, const std::set<size_t> *, const std::set<std::string> *) override {
    throw std::logic_error("not used");
  }
  std::string describe() const override { return "host"; }
};

} // namespace hetplan::test

#endif
