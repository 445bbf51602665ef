//===- Forward.cpp - FORWARD instructions and the loss --------------------===//
#include "RankProgram.h"

#include <algorithm>
#include <chrono>

namespace hetplan::runtime {

using namespace planexec;

namespace {
const char kDummy[16] = {};

/// Adds kernel times to a RankTiming; `samples` is the rank's share.
struct TimingObserver : ExecutionObserver {
  PlanExecutor::RankTiming &timing;
  int64_t samples;
  TimingObserver(PlanExecutor::RankTiming &t, int64_t n) : timing(t), samples(n) {}
  void nodeRan(size_t node, double seconds) override {
    timing.nodeSeconds[node] += seconds;
    timing.nodeSamples[node] += samples;
  }
};
} // namespace

void PlanExecutor::RankProgram::onForward(const plan::Instruction &ins) {
  gatherShards(ins.micro_batch(), 0);
  forward(ins.micro_batch());
  dropGathered();
}

void PlanExecutor::RankProgram::forward(uint32_t mb, std::map<std::string, Tensor> *replay) {
  std::map<std::string, Tensor> values;
  int64_t base = int64_t(mb) * microBatch_ + off;
  for (const auto &gi : model_->inputs)
    values[gi.name] = whole_ || unbatchedInputs_.count(gi.name) ? inputs.at(gi.name)
                                                                : sliceRows(inputs.at(gi.name), base, n);
  if (train)
    for (const auto &p : stageParams_[j]) values[p] = train->state.params.at(p);
  std::map<std::string, std::vector<int64_t>> perSample;
  std::set<std::string> seeds;
  if (train) seeds = stageParams_[j];
  if (replay)
    for (auto &[k, v] : *replay) values[k] = v;
  if (in && !replay) takeReceived(mb, values, perSample, seeds);
  // Recomputation keeps only what the stage's nodes start from.
  std::map<std::string, Tensor> inputsKept;
  if (recompute && !replay)
    for (const auto &[k, v] : values)
      if (!stageParams_[j].count(k)) inputsKept.emplace(k, v);
  std::map<std::string, std::vector<int64_t>> shapes;
  std::set<std::string> keepAll = keep;
  if (out)
    for (const auto &s : out->shapes) keepAll.insert(s);
  if (train)
    for (const auto &[k, v] : values) keepAll.insert(k); // received, re-run and parameters
  // Split nodes (the plan's tensor_parallel_nodes): column MatMuls keep
  // their columns of the output, row MatMuls all-reduce their partial
  // sums, gathered ones all-gather; biases, Splits and Reshapes work on
  // this rank's slice; the rest runs unchanged on the slices.
  Executor::NodeHook hook = [&](size_t node, KernelContext &ctx) { return tpForward(mb, node, ctx); };
  const Executor::NodeHook *hookPtr = splitNodes.empty() || tp < 2 ? nullptr : &hook;
  // The stage's nodes on this rank's compute (the CUDA executor on a
  // CUDA rank); its split nodes may go to the hook.
  // Results stay on its device where the rank sends them, stashes them
  // or feeds them to a FORWARD again; the loss and an inference plan's
  // graph outputs come to the host.
  std::set<std::string> resident;
  if (onDevice && (out || train)) {
    resident = keepAll;
    resident.erase(lossOutput);
  }
  std::map<std::string, Tensor> result;
  if (timing && !replay) { // a profile times each node once per micro-batch
    TimingObserver observer(*timing, n);
    auto t0 = std::chrono::steady_clock::now();
    result = runStage(std::move(values), keepAll, &shapes, &observer, hookPtr, resident);
    auto t1 = std::chrono::steady_clock::now();
    if (mb < timing->forwardSeconds.size())
      timing->forwardSeconds[mb] += std::chrono::duration<double>(t1 - t0).count();
  } else {
    result = runStage(std::move(values), keepAll, &shapes, nullptr, hookPtr, resident);
  }
  std::set<std::string> requires;
  if (train && !replay) {
    auto lookup = [&](const std::string &v) -> const Tensor * {
      auto it = result.find(v);
      return it == result.end() ? nullptr : &it->second;
    };
    requires = train::requiresGrad(*model_, stageNodes_[j], seeds, lookup);
  }
  if (out && !replay) {
    passOn(mb, result, shapes, perSample, requires);
  } else if (train && !out) {
    loss(mb, base, result, requires, replay);
  } else if (!train && tpIndex == 0) {
    auto &mine = pieces[{mb, rank.worker()}];
    for (const auto &o : graphOutputs_) {
      auto it = result.find(o);
      if (it == result.end()) fail(who + "graph output '" + o + "' was not produced");
      mine[o] = it->second;
    }
  }
  if (train) {
    result.erase(""); // never a value
    // Parameters are no activations: BACKWARD takes them from the state
    // (ZeRO-3 gathers them again for it).
    for (const auto &prm : stageParams_[j]) result.erase(prm);
    if (replay) {
      *replay = std::move(result);
      return;
    }
    train->stash[mb] = recompute ? std::move(inputsKept) : std::move(result);
    train->requires[mb] = std::move(requires);
    if (out && !sendsLeft[mb]) outbox.erase(mb);
    noteStash();
  }
}

void PlanExecutor::RankProgram::takeReceived(uint32_t mb, std::map<std::string, Tensor> &values,
                      std::map<std::string, std::vector<int64_t>> &perSample, std::set<std::string> &seeds) {
  const auto &prev = plan_.stages(int(j - 1));
  for (const auto &w : prev.workers())
    if (std::max(w.sample_offset(), off) < std::min(w.sample_offset() + w.samples(), off + n) &&
        !pending[mb].count(w.sample_offset()))
      receive(mb, w.ranks(0)); // the program had no RECV for it: receive now
  auto &got = pending[mb];
  for (size_t i = 0; i < in->received.size(); ++i) {
    std::vector<Tensor> parts;
    for (auto &[o, r] : got) parts.push_back(std::move(r.data[i]));
    Tensor t = concatRows(parts);
    if (!whole_ && (t.rank() < 1 || t.dim(0) != n))
      fail(who + "received '" + in->received[i] + "' " + t.describe() + ", expected " + std::to_string(n) + " samples");
    values[in->received[i]] = std::move(t);
  }
  const Received &first = got.begin()->second;
  if (train) {
    std::vector<bool> flags(in->received.size(), false);
    if (first.flags.numel() != int64_t(flags.size())) fail(who + "received gradient flags of the wrong size");
    for (size_t i = 0; i < flags.size(); ++i) {
      flags[i] = first.flags.data<int64_t>()[i] != 0;
      if (flags[i]) seeds.insert(in->received[i]);
    }
    train->inFlags[mb] = flags;
  }
  std::vector<std::string> fakes;
  for (size_t i = 0; i < in->shapes.size(); ++i) {
    std::vector<int64_t> s = first.shapes[i].toInt64Vector();
    perSample[in->shapes[i]] = s;
    if (!values.count(in->shapes[i])) {
      std::vector<int64_t> full = {n};
      if (whole_) full.clear(); // whole plans pass whole shapes
      full.insert(full.end(), s.begin(), s.end());
      // Read only by Shape/Size (of the nodes re-run below): a shape
      // without bytes.
      values[in->shapes[i]] = Tensor::view(DType::Float32, full, kDummy, nullptr);
      fakes.push_back(in->shapes[i]);
    }
  }
  pending.erase(mb);
  // Values without a batch dim: recompute with this rank's sample count.
  if (!in->metaNodes.empty()) {
    std::set<std::string> metaKeep;
    for (size_t p : in->metaNodes)
      for (const auto &o : model_->nodes[p].outputs)
        if (!o.empty()) metaKeep.insert(o);
    std::map<std::string, Tensor> metaValues = values;
    for (size_t p : in->metaNodes) // the CPU executor reads host bytes
      model_->nodes[p].forEachRead([&](const std::string &v) {
        auto it = metaValues.find(v);
        if (it != metaValues.end() && it->second.isDevice()) it->second = it->second.toHost();
      });
    auto meta = executor_->runNodes(in->metaNodes, std::move(metaValues), metaKeep);
    for (auto &[k, v] : meta) values[k] = std::move(v);
  }
  for (const auto &f : fakes) values.erase(f);
}

std::map<std::string, Tensor> PlanExecutor::RankProgram::runStage(std::map<std::string, Tensor> vals, const std::set<std::string> &keeping,
                                           std::map<std::string, std::vector<int64_t>> *shp,
                                           ExecutionObserver *obs, const Executor::NodeHook *h,
                                           const std::set<std::string> &resident) {
  if (!compute) return executor_->runNodes(nodes, std::move(vals), keeping, shp, obs, h);
  std::set<size_t> hooked;
  for (const auto &[node, tn] : splitNodes) hooked.insert(node);
  return compute->runNodes(nodes, std::move(vals), keeping, shp, obs, h, &hooked, onDevice ? &resident : nullptr);
}

void PlanExecutor::RankProgram::passOn(uint32_t mb, std::map<std::string, Tensor> &result,
                const std::map<std::string, std::vector<int64_t>> &shapes,
                std::map<std::string, std::vector<int64_t>> &perSample, const std::set<std::string> &requires) {
  Produced p;
  for (const auto &s : out->shapes) {
    auto it = shapes.find(s);
    std::vector<int64_t> full;
    if (it != shapes.end()) full = it->second;
    else if (perSample.count(s)) { full = {n}; full.insert(full.end(), perSample[s].begin(), perSample[s].end()); }
    else if (result.count(s)) full = result[s].shape();
    else fail(who + "does not know the shape of '" + s + "'");
    if (whole_) {
      p.perSample[s] = full;
      continue;
    }
    if (full.empty() || full[0] != n)
      fail(who + "value '" + s + "' has shape " + shapeString(full) + ": dim 0 is not the batch (" +
           std::to_string(n) + " samples); plans cannot cut the graph there");
    p.perSample[s] = std::vector<int64_t>(full.begin() + 1, full.end());
  }
  std::vector<bool> flags;
  for (const auto &v : out->received) {
    auto it = result.find(v);
    if (it == result.end()) fail(who + "value '" + v + "' was not produced");
    if (!whole_ && (it->second.rank() < 1 || it->second.dim(0) != n))
      fail(who + "value '" + v + "' is " + it->second.describe() + ": dim 0 is not the batch (" +
           std::to_string(n) + " samples); plans cannot cut the graph there");
    p.values[v] = it->second;
    flags.push_back(requires.count(v) != 0);
  }
  outbox[mb] = std::move(p);
  if (train) train->outFlags[mb] = flags;
}

void PlanExecutor::RankProgram::loss(uint32_t mb, int64_t base, std::map<std::string, Tensor> &result,
              const std::set<std::string> &requires, const std::map<std::string, Tensor> *replay) {
  // The loss on this worker's samples; its gradient seeds BACKWARD (a
  // recomputing stage makes it again from the rebuilt logits).
  const Tensor &logits = result.at(lossOutput);
  if (train->labels.rank() < 1) fail("the labels must have a batch dim");
  Tensor labels = whole_ ? train->labels : sliceRows(train->labels, base, n);
  Tensor grad;
  try {
    Tensor *want = recompute && !replay ? nullptr : &grad;
    double piece = 0;
    bool binary = labels.dtype() == DType::Float32 || labels.dtype() == DType::Float64;
    if (binary) {
      if (vocabLossNode) fail("float labels (binary cross-entropy) with a vocab-parallel head");
      piece = binaryCrossEntropy(logits, labels, train->denominator, want);
    } else if (vocabLossNode) {
      // The logits are this rank's columns (a VOCAB head).
      int64_t vocab = logits.dim(-1) * tp, lo = shardRanges(vocab, 1, tpIndex, tp).front().first;
      size_t head = *vocabLossNode;
      piece = train::vocabParallelCrossEntropy(comm, tpGroup, tpTag(mb, head, numNodes, 4),
                                               tpTag(mb, head, numNodes, 6), logits, labels, lo, vocab,
                                               train->denominator, train->options.ignoreIndex, want);
      if (timing) {
        timing->forwardAllReduces += 2;
        timing->forwardAllReduceElements += 3.0 * double(labels.numel());
      }
    } else {
      piece = softmaxCrossEntropy(logits, labels, train->denominator, train->options.ignoreIndex, want);
    }
    if (tpIndex == 0 && !replay) train->lossPiece += piece; // the worker's other ranks computed the same
  } catch (const std::exception &e) {
    fail("loss on output '" + lossOutput + "' " + logits.describe() + " with labels " +
         labels.describe() + ": " + e.what());
  }
  if (!replay && !requires.count(lossOutput))
    fail("output '" + lossOutput + "' does not depend on any parameter: nothing to train");
  if (!recompute || replay) train->seeds[mb][lossOutput] = std::move(grad);
}

} // namespace hetplan::runtime
