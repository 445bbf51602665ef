//===- Optimizer.cpp - gradient sums, the optimizers and ZeRO ------------===//
#include "RankProgram.h"

#include <algorithm>
#include <cstring>

namespace hetplan::runtime {

using namespace planexec;

namespace {
/// Bytes of distinct memory under a set of tensors: views of one buffer
/// (a Reshape's output, a sent slice) count once.
struct ByteSpans {
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  void add(const Tensor &t) {
    if (!t.defined() || t.nbytes() == 0 || !t.raw()) return;
    auto a = reinterpret_cast<uintptr_t>(t.raw());
    spans.push_back({a, a + t.nbytes()});
  }
  uint64_t total() {
    std::sort(spans.begin(), spans.end());
    uint64_t sum = 0;
    uintptr_t end = 0;
    for (auto [a, b] : spans) {
      if (b <= end) continue;
      sum += b - std::max(a, end);
      end = b;
    }
    return sum;
  }
};
/// Appends to `pieces` (element ranges relative to `base`) the rows of a
/// sparse embedding table, elements [start, start + numel) of a flat
/// space, that lie in [lo, hi) and whose gradient (`grad`, indexed from
/// `base`) is not zero anywhere: the rows the step looked up.
void nonzeroRows(const float *grad, int64_t base, int64_t start, int64_t numel, int64_t rowLength, int64_t lo,
                 int64_t hi, std::vector<std::pair<int64_t, int64_t>> &pieces) {
  rowLength = std::max<int64_t>(rowLength, 1);
  for (int64_t row = std::max<int64_t>(0, (lo - start) / rowLength); start + row * rowLength < std::min(hi, start + numel);
       ++row) {
    int64_t a = std::max(lo, start + row * rowLength), b = std::min({hi, start + (row + 1) * rowLength, start + numel});
    if (a >= b) continue;
    bool touched = false;
    for (int64_t x = a; x < b && !touched; ++x) touched = grad[x - base] != 0.0f;
    if (!touched) continue;
    if (!pieces.empty() && pieces.back().first + pieces.back().second == a - base)
      pieces.back().second += b - a;
    else
      pieces.push_back({a - base, b - a});
  }
}
} // namespace

bool PlanExecutor::RankProgram::sparseParameter(const std::string &name) const {
  const auto &list = plan_.stages(int(j)).sparse_parameters();
  return std::find(list.begin(), list.end(), name) != list.end();
}

void PlanExecutor::RankProgram::noteStash() {
  ByteSpans held;
  for (const auto &[m, values] : train->stash)
    for (const auto &[name, t] : values)
      if (!model_->initializers.count(name)) held.add(t);
  for (const auto &[m, p] : outbox)
    for (const auto &[name, t] : p.values) held.add(t);
  for (const auto &[m, values] : train->seeds)
    for (const auto &[name, t] : values) held.add(t);
  auto &peak = train->state.stats.peakStashedBytes;
  peak = std::max<uint64_t>(peak, held.total());
}

std::vector<int64_t> PlanExecutor::RankProgram::zeroCounts(size_t g) const {
  std::vector<int64_t> counts;
  for (size_t k = 0; k + 1 < zero_[g].bounds.size(); ++k) counts.push_back(zero_[g].bounds[k + 1] - zero_[g].bounds[k]);
  return counts;
}

void PlanExecutor::RankProgram::gatherShards(uint32_t mb, int phase) {
  if (!train) return;
  for (size_t g : myGroups) {
    if (g >= zero_.size() || !zero_[g].paramsSharded) continue;
    Tensor full = comm.allGather(sumGroups_[g].first, train->state.shards.at(g).param, zeroCounts(g),
                                 zeroTag(mb, phase, g, zero_.size()));
    scatterFlat(full, 0, sumGroups_[g].second, zero_[g].offsets, train->state.params, model_->initializers);
    train->state.stats.gatheredParameterBytes += full.nbytes();
  }
}

void PlanExecutor::RankProgram::dropGathered() {
  if (!train) return;
  for (size_t g : myGroups)
    if (g < zero_.size() && zero_[g].paramsSharded)
      for (const auto &p : sumGroups_[g].second) train->state.params.erase(p);
}

void PlanExecutor::RankProgram::sumGradients(const std::function<bool(const std::vector<int> &)> &select) {
  for (size_t g = 0; g < sumGroups_.size(); ++g) {
    const auto &[ranks, params] = sumGroups_[g];
    const auto &follow = sumFollowers_[g];  // tensor-parallel ranks that get the sum
    bool member = std::binary_search(ranks.begin(), ranks.end(), int(me));
    bool follower = std::any_of(follow.begin(), follow.end(), [&](const auto &f) { return f.first == int(me); });
    if (train->summed.count(g) || (!member && !follower) || !select(ranks))
      continue;
    train->summed.insert(g);
    if (g < zero_.size() && zeroStage() >= 2) {
      // ZeRO-2/3: each member keeps the sum of its own range only.
      Tensor flat = flatRange(train->state.grads, params, zero_[g].offsets, 0, zero_[g].offsets.back());
      for (const auto &p : params) train->state.grads.erase(p);
      train->state.shards[g].grad = comm.reduceScatterSum(ranks, flat, zeroCounts(g), sumTag(g));
      continue;
    }
    std::vector<Tensor *> tensors, dense;
    std::vector<std::pair<Tensor *, int64_t>> sparse; // (gradient, row length)
    for (const auto &p : params) {
      Tensor &gr = train->state.grads[p];
      if (!gr.defined()) gr = Tensor(DType::Float32, model_->initializers.at(p).shape());
      tensors.push_back(&gr);
      const auto &shape = model_->initializers.at(p).shape();
      // A sparse table's looked-up rows move, not the table.
      if (sparseParameter(p) && !gr.isDevice() && gr.dtype() == DType::Float32 && !shape.empty() && shape[0] > 0)
        sparse.push_back({&gr, gr.numel() / shape[0]});
      else
        dense.push_back(&gr);
    }
    if (member) {
      train::groupSum(comm, ranks, sumTag(g), dense);
      for (auto [gr, rowLength] : sparse) train::sparseRowSum(comm, ranks, sumTag(g), *gr, rowLength);
    }
    for (auto [to, from] : follow)
      for (Tensor *t : tensors) {
        if (from == int(me)) comm.send(to, followTag(g), *t);
        if (to == int(me)) *t = comm.recv(from, followTag(g));
      }
    train->summed.insert(g);
  }
}

void PlanExecutor::RankProgram::optimizerStep(const std::string &key, Tensor &param, const Tensor &grad,
                                             const std::vector<std::pair<int64_t, int64_t>> &pieces) {
  auto &state = train->state;
  bool offload = plan_.settings().offload_optimizer();
  const TrainOptions &o = train->options;
  OptimizerSettings settings{exec_.optimizer(), o.lr, o.beta1, o.beta2, o.eps, o.weightDecay, o.momentum};
  // SGD keeps no state, momentum one buffer (m), Adam and AdamW two.
  int buffers = optimizerStateBuffers(settings.kind);
  Tensor unused[2];
  Tensor &m = buffers >= 1 ? (offload ? state.host.adamM : state.adamM)[key] : unused[0];
  Tensor &v = buffers >= 2 ? (offload ? state.host.adamV : state.adamV)[key] : unused[1];
  Tensor hostParam = offload ? param.clone() : param, hostGrad = offload ? grad.clone() : grad;
  if (compute && !offload) compute->optimizerUpdate(hostParam, hostGrad, m, v, state.step, settings, pieces);
  else train::optimizerUpdatePieces(hostParam, hostGrad, m, v, state.step, settings, pieces);
  if (offload) {
    std::memcpy(param.raw(), hostParam.raw(), param.nbytes());
    state.stats.offloadBytes += grad.nbytes() + 2 * param.nbytes();
  }
}

void PlanExecutor::RankProgram::zeroStep(size_t g) {
  auto &state = train->state;
  const auto &[ranks, params] = sumGroups_[g];
  const ZeroGroup &z = zero_[g];
  ZeroShard mine = zeroShard(g, me);
  auto &shard = state.shards[g];
  Tensor grad = zeroStage() >= 2 ? shard.grad : flatRange(state.grads, params, z.offsets, mine.lo, mine.hi);
  Tensor param = z.paramsSharded ? shard.param : flatRange(state.params, params, z.offsets, mine.lo, mine.hi);
  std::vector<std::pair<int64_t, int64_t>> pieces; // of trained parameters
  bool all = true;
  Tensor scanned; // the gradient on the host, for sparse tables' rows
  auto hostGrad = [&]() -> const float * {
    if (!scanned.defined()) scanned = grad.isDevice() ? grad.toHost() : grad;
    return scanned.data<float>();
  };
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t a = std::max(mine.lo, z.offsets[i]), b = std::min(mine.hi, z.offsets[i + 1]);
    if (a >= b) continue;
    if (train->frozen(params[i])) {
      all = false;
    } else if (sparseParameter(params[i])) { // only the rows the step looked up
      all = false;
      const auto &shape = model_->initializers.at(params[i]).shape();
      int64_t numel = z.offsets[i + 1] - z.offsets[i];
      nonzeroRows(hostGrad(), mine.lo, z.offsets[i], numel, shape.empty() ? 1 : numel / shape[0], a, b,
                  pieces);
    } else {
      pieces.push_back({a - mine.lo, b - a});
    }
  }
  if (all || !pieces.empty()) optimizerStep("zero:" + std::to_string(g), param, grad, all ? decltype(pieces){} : pieces);
  if (z.paramsSharded) return; // `param` is the shard: updated in place
  Tensor full = comm.allGather(ranks, param, zeroCounts(g), zeroTag(0, 2, g, zero_.size()));
  scatterFlat(full, 0, params, z.offsets, state.params, model_->initializers);
}

void PlanExecutor::RankProgram::onAllReduceGradients(const plan::Instruction &) {
  if (train) finishVocabGrads();
  // The parameters only this stage reads, over its workers.
  sumGradients([&](const std::vector<int> &ranks) { return ranks == stageRanks; });
}

void PlanExecutor::RankProgram::onOptimizerStep(const plan::Instruction &) {
  finishVocabGrads();
  // Parameters several stages read (tied embeddings) last: every sender
  // of those groups has finished its backward by now.
  sumGradients([](const std::vector<int> &) { return true; });
  auto &state = train->state;
  state.step++;
  if (!zero_.empty()) {
    for (size_t g : myGroups) zeroStep(g);
    return;
  }
  for (const auto &p : stageParams_[j]) {
    if (train->frozen(p)) continue;
    Tensor &g = state.grads[p];
    if (!g.defined()) g = Tensor(DType::Float32, state.params.at(p).shape());
    if (sparseParameter(p)) {
      // Sparse embedding updates: the rows the step looked up (a nonzero
      // gradient row), the other rows and their state untouched.
      Tensor hostGrad = g.isDevice() ? g.toHost() : g;
      std::vector<std::pair<int64_t, int64_t>> rows;
      const auto &shape = state.params.at(p).shape();
      int64_t numel = hostGrad.numel();
      nonzeroRows(hostGrad.data<float>(), 0, 0, numel, shape.empty() ? 1 : numel / std::max<int64_t>(shape[0], 1), 0,
                  numel, rows);
      if (!rows.empty()) optimizerStep(p, state.params.at(p), g, rows);
      continue;
    }
    optimizerStep(p, state.params.at(p), g, {});
  }
}

} // namespace hetplan::runtime
