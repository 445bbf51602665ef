//===- PlanExecutor.cpp - runs a plan's step across ranks -----------------===//
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanFile.h"
#include "Training.h"

#include <algorithm>
#include <optional>
#include <regex>
#include <cstring>
#include <unistd.h>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <chrono>

namespace hetplan::runtime {

namespace {

/// SEND_*/RECV_* instructions: a run of them is one communicator group.
bool isTransfer(plan::Instruction::Kind k) {
  return k == plan::Instruction::SEND_ACTIVATION || k == plan::Instruction::RECV_ACTIVATION ||
         k == plan::Instruction::SEND_GRADIENT || k == plan::Instruction::RECV_GRADIENT;
}

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

/// Rows [lo, lo + count) of dim 0, viewed (no copy).
Tensor sliceRows(const Tensor &t, int64_t lo, int64_t count) {
  if (t.rank() < 1) fail("cannot slice a scalar on dim 0");
  std::vector<int64_t> shape = t.shape();
  size_t row = shape[0] ? t.nbytes() / size_t(shape[0]) : 0;
  shape[0] = count;
  const char *base = static_cast<const char *>(t.raw());
  if (t.isDevice()) // the same device memory
    return Tensor::onDevice(t.dtype(), shape, const_cast<char *>(base) + row * size_t(lo), t.deviceMemory());
  auto holder = std::make_shared<Tensor>(t);
  return Tensor::view(t.dtype(), shape, base ? base + row * size_t(lo) : nullptr, holder);
}

/// A graph input declared as a scalar (rank 0: a flag, a sample rate) has
/// no batch dim: every rank gets all of it, and it is not batched.
bool isScalarInput(const ValueInfo &in) { return in.hasShape && in.shape.empty(); }

/// Device pieces (device-resident values) are concatenated on the host.
Tensor concatRows(const std::vector<Tensor> &parts) {
  if (parts.size() == 1) return parts[0];
  for (const Tensor &p : parts)
    if (p.isDevice()) {
      std::vector<Tensor> host;
      for (const Tensor &q : parts) host.push_back(q.toHost());
      return concatRows(host);
    }
  std::vector<int64_t> shape = parts.at(0).shape();
  int64_t rows = 0;
  for (const Tensor &p : parts) {
    std::vector<int64_t> a = p.shape(), b = shape;
    a[0] = b[0] = 0;
    if (a != b || p.dtype() != parts[0].dtype())
      fail("pieces " + parts[0].describe() + " and " + p.describe() + " do not concatenate on dim 0");
    rows += p.dim(0);
  }
  shape[0] = rows;
  Tensor out(parts[0].dtype(), shape);
  char *dst = static_cast<char *>(out.raw());
  for (const Tensor &p : parts) {
    if (p.nbytes()) std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

constexpr int64_t kTagsPerMicroBatch = int64_t(1) << 20;
int64_t dataTag(uint32_t mb, size_t i) { return int64_t(mb) * kTagsPerMicroBatch + 2 * int64_t(i); }
int64_t shapeTag(uint32_t mb, size_t i) { return int64_t(mb) * kTagsPerMicroBatch + 2 * int64_t(i) + 1; }

// Training traffic: gradients of the values a stage received (and, with
// the activations, which of them carry gradients), then the gradient sums.
// All below 2^31 (MPI's usual tag bound) for micro-batches < 2^16.
constexpr int64_t kTrainTagBase = int64_t(1) << 30;
constexpr int64_t kTrainTagsPerMicroBatch = 8192;
int64_t gradTag(uint32_t mb, size_t i) { return kTrainTagBase + int64_t(mb) * kTrainTagsPerMicroBatch + int64_t(i); }
int64_t flagTag(uint32_t mb) { return kTrainTagBase + int64_t(mb) * kTrainTagsPerMicroBatch + kTrainTagsPerMicroBatch - 1; }
constexpr int64_t kSumTagBase = (int64_t(1) << 30) + (int64_t(1) << 29);
int64_t sumTag(size_t group) { return kSumTagBase + 2 * int64_t(group); }
// ZeRO's parameter all-gathers: per (micro-batch, phase: 0 FORWARD,
// 1 BACKWARD, 2 after OPTIMIZER_STEP, group); checkTraining bounds them.
constexpr int64_t kZeroTagBase = kSumTagBase + (int64_t(1) << 28);
int64_t zeroTag(uint32_t mb, int phase, size_t group, size_t groups) {
  return kZeroTagBase + (int64_t(mb) * 3 + phase) * int64_t(groups) + int64_t(group);
}
// A sum handed to a worker's other tensor-parallel ranks (sumFollowers_):
// between the sums (below 2^27 above kSumTagBase) and ZeRO's gathers.
int64_t followTag(size_t group) { return kSumTagBase + (int64_t(1) << 27) + int64_t(group); }

// Tensor-parallel traffic inside a worker: per (micro-batch, node), the
// forward sum or all-gather (phase 0), the backward sum (2), a vocab-parallel
// loss's max (4) and sums (6); a group sum uses its tag and the next. Above
// `hetplan run`'s MPI output gather (2^29), below the training tags (2^30).
constexpr int64_t kTpTagBase = (int64_t(1) << 29) + (int64_t(1) << 20);
int64_t tpTag(uint32_t mb, size_t node, size_t nodes, int phase) {
  int64_t tag = kTpTagBase + (int64_t(mb) * int64_t(nodes) + int64_t(node)) * 8 + phase;
  if (tag >= kTrainTagBase) fail("too many micro-batches x nodes for tensor-parallel message tags");
  return tag;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

/// Copies between `whole` and `part` the index ranges `ranges` of `axis`
/// (part holds them back to back): part from whole, or whole from part.
void copyRanges(const Tensor &whole, int axis, const Ranges &ranges, Tensor &part, bool toPart) {
  const auto &shape = whole.shape();
  int64_t outer = 1, inner = 1, n = shape.at(size_t(axis)), w = 0;
  for (int d = 0; d < axis; ++d) outer *= shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  for (auto [lo, hi] : ranges) w += hi - lo;
  size_t e = dtypeSize(whole.dtype()) * size_t(inner);
  char *big = static_cast<char *>(const_cast<void *>(whole.raw()));
  char *small = static_cast<char *>(part.raw());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (auto [lo, hi] : ranges) {
      char *b = big + size_t(o * n + lo) * e, *p = small + size_t(o * w + at) * e;
      if (toPart) std::memcpy(p, b, size_t(hi - lo) * e);
      else std::memcpy(b, p, size_t(hi - lo) * e);
      at += hi - lo;
    }
  }
}

/// The index ranges of `axis` in `t`, back to back (a copy).
Tensor slices(const Tensor &t, int axis, const Ranges &ranges) {
  std::vector<int64_t> shape = t.shape();
  int64_t w = 0;
  for (auto [lo, hi] : ranges) w += hi - lo;
  shape.at(size_t(axis)) = w;
  Tensor out(t.dtype(), shape);
  copyRanges(t, axis, ranges, out, true);
  return out;
}

/// Writes `part` (the ranges back to back) into `dst`'s ranges of `axis`.
void putSlices(Tensor &dst, const Tensor &part, int axis, const Ranges &ranges) {
  copyRanges(dst, axis, ranges, const_cast<Tensor &>(part), false);
}

/// A tensor of `shape` that is zero except for `part` in `ranges` of `axis`.
Tensor zerosWith(const std::vector<int64_t> &shape, const Tensor &part, int axis, const Ranges &ranges) {
  Tensor out(part.dtype(), shape);
  putSlices(out, part, axis, ranges);
  return out;
}

/// What tensor-parallel rank k of t holds of an axis of size n: the k-th
/// 1/t of each of `segments` equal parts (one part: a contiguous 1/t).
Ranges shardRanges(int64_t n, int64_t segments, int64_t k, int64_t t) {
  Ranges out;
  int64_t part = n / std::max<int64_t>(segments, 1);
  for (int64_t s = 0; s < std::max<int64_t>(segments, 1); ++s)
    out.push_back({s * part + part * k / t, s * part + part * (k + 1) / t});
  return out;
}

const char kDummy[16] = {};

} // namespace

namespace {
/// Runs `body(comm)` for ranks 0..R-1, one thread each, over a
/// ThreadCommGroup. The first rank error aborts the group (the others then
/// throw CommAborted) and is rethrown here, one line.
void onThreads(int R, const std::function<void(Communicator &)> &body) {
  ThreadCommGroup group(R);
  std::mutex mutex;
  std::string firstError, abortError;
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      Communicator &comm = group.communicator(r);
      try {
        body(comm);
      } catch (const CommAborted &e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (abortError.empty()) abortError = e.what();
      } catch (const std::exception &e) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (firstError.empty()) firstError = e.what();
        }
        comm.abort(e.what());
      }
    });
  for (auto &t : threads) t.join();
  if (!firstError.empty()) fail(firstError);
  if (!abortError.empty()) fail(abortError);
}
} // namespace

PlanExecutor::~PlanExecutor() = default;

void PlanExecutor::setCompute(int rank, std::shared_ptr<RankCompute> compute) {
  if (rank < 0 || rank >= ranks()) fail("setCompute: rank " + std::to_string(rank) + " is not in the plan");
  if (compute) computes_[rank] = std::move(compute);
  else computes_.erase(rank);
}

void RankCompute::backward(const Model &model, const std::vector<size_t> &nodes,
                           const std::function<const Tensor *(const std::string &)> &value,
                           const std::set<std::string> &requires, std::map<std::string, Tensor> &grads,
                           const GradientHook *hook, const std::set<size_t> * /*hookNodes*/) {
  train::backward(model, nodes, value, requires, grads, hook);
}

void RankCompute::adamUpdate(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                             const AdamSettings &settings,
                             const std::vector<std::pair<int64_t, int64_t>> &pieces) {
  train::adamUpdatePieces(param, grad, m, v, step, settings, pieces);
}

const RankCompute *PlanExecutor::compute(int rank) const {
  auto it = computes_.find(rank);
  return it == computes_.end() ? nullptr : it->second.get();
}

std::unique_ptr<PlanExecutor> PlanExecutor::load(const std::string &planPath,
                                                 const std::string &modelPath) {
  plan::Plan p;
  std::string error;
  if (!readPlan(planPath, p, error)) fail(error);
  // A relative model path is relative to the plan file's folder, not to
  // the working directory.
  if (modelPath.empty()) {
    p.mutable_model()->set_path(planModelPath(planPath, p, "hetplan run --model PATH", error));
    if (!error.empty()) fail(error);
  }
  try {
    return std::make_unique<PlanExecutor>(std::move(p), modelPath);
  } catch (const std::exception &e) {
    fail(planPath + ": " + e.what());
  }
}

PlanExecutor::PlanExecutor(plan::Plan planIn, const std::string &modelPath) : plan_(std::move(planIn)) {
  std::string error;
  if (!validatePlan(plan_, error)) fail("invalid plan: " + error);
  const auto &settings = plan_.settings();
  if (settings.mode() != "infer" && settings.mode() != "train")
    fail("unknown plan mode '" + settings.mode() + "'");
  bool train = settings.mode() == "train";
  for (const auto &r : plan_.ranks())
    for (const auto &ins : r.program())
      if (!train && ins.kind() != plan::Instruction::FORWARD && ins.kind() != plan::Instruction::SEND_ACTIVATION &&
          ins.kind() != plan::Instruction::RECV_ACTIVATION)
        fail("rank " + std::to_string(r.rank()) + ": instruction " +
             plan::Instruction::Kind_Name(ins.kind()) + " in an inference plan");
  uint32_t M = settings.micro_batches();
  if (M == 0 || settings.global_batch() <= 0 || settings.global_batch() % M != 0)
    fail("global batch " + std::to_string(settings.global_batch()) + " does not split into " +
         std::to_string(M) + " micro-batches");
  microBatch_ = settings.global_batch() / M;
  whole_ = settings.whole_batch();
  if (plan_.stages_size() == 0) fail("the plan has no stages");

  // The model, and that it is the file the plan was compiled from.
  std::string path = modelPath.empty() ? plan_.model().path() : modelPath;
  // Hashed from the bytes the model is parsed from: one read of the file.
  model_ = std::make_unique<Model>(loadModel(path, [&](const std::string &sha) {
    if (sha != plan_.model().sha256())
      fail(path + ": model file changed since the plan was compiled (sha256 " + sha.substr(0, 16) +
           "..., the plan has " + plan_.model().sha256().substr(0, 16) + "...); recompile the plan");
  }));
  executor_ = std::make_unique<Executor>(*model_);
  std::vector<std::string> problems = executor_->check();
  if (!problems.empty())
    fail(problems.front() + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) +
                                                       " more problems)" : ""));
  const Model &m = *model_;
  size_t N = m.nodes.size();
  if (size_t(plan_.model().node_names_size()) != N)
    fail(path + ": the model has " + std::to_string(N) + " nodes, the plan " +
         std::to_string(plan_.model().node_names_size()));
  for (size_t i = 0; i < N; ++i) {
    const std::string &pn = plan_.model().node_names(int(i));
    // The compiler names an unnamed node by its op type (or "#index").
    if (!m.nodes[i].name.empty() && !pn.empty() && pn[0] != '#' && pn != m.nodes[i].opType &&
        pn != m.nodes[i].name)
      fail(path + ": node " + std::to_string(i) + " is '" + m.nodes[i].name + "', the plan says '" + pn + "'");
  }

  // Producers, topological file order, batched values.
  std::set<std::string> graphInputs;
  for (const auto &in : m.inputs) graphInputs.insert(in.name);
  for (const auto &o : m.outputs) graphOutputs_.insert(o.name);
  std::map<std::string, size_t> producer;
  std::set<std::string> batched;
  for (const auto &in : m.inputs) {
    // Scalars, and inputs the plan records without a batch axis, go whole
    // to every rank.
    bool noBatch = isScalarInput(in);
    for (const auto &io : plan_.settings().inputs())
      if (io.name() == in.name && io.batch_axis() < 0) noBatch = true;
    if (noBatch) unbatchedInputs_.insert(in.name);
    else batched.insert(in.name);
  }
  for (size_t i = 0; i < N; ++i) {
    const Node &n = m.nodes[i];
    bool anyBatched = false;
    // Values read inside the node's subgraphs (If/Loop/Scan) count as its
    // inputs: a subgraph reading a batched value makes the outputs batched.
    n.forEachRead([&](const std::string &s) {
      if (!producer.count(s) && !graphInputs.count(s) && !m.initializers.count(s))
        fail(path + ": " + n.describe() + " reads '" + s + "' before it is produced (the nodes are not in topological order)");
      anyBatched |= batched.count(s) != 0;
    });
    bool shapeOnly = n.opType == "Shape" || n.opType == "Size";
    for (const auto &o : n.outputs) {
      if (o.empty()) continue;
      producer[o] = i;
      if (anyBatched && !shapeOnly) batched.insert(o);
    }
  }
  std::map<std::string, size_t> lastConsumer;
  for (size_t i = 0; i < N; ++i)
    m.nodes[i].forEachRead([&](const std::string &s) { lastConsumer[s] = i; });

  // What crosses each stage boundary.
  size_t S = size_t(plan_.stages_size());
  io_.assign(S, {});
  for (size_t j = 1; j < S; ++j) {
    size_t first = plan_.stages(int(j)).first_node();
    std::set<std::string> meta;
    for (const auto &[v, p] : producer) {
      if (p >= first) continue;
      auto lc = lastConsumer.find(v);
      bool live = graphOutputs_.count(v) || (lc != lastConsumer.end() && lc->second >= first);
      if (!live) continue;
      if (batched.count(v)) io_[j].received.push_back(v);
      else meta.insert(v);
    }
    // The receiver recomputes values without a batch dim (shapes and what
    // is computed from them) by re-running the nodes that made them.
    std::set<size_t> nodes;
    std::set<std::string> shapes;
    std::vector<std::string> work(meta.begin(), meta.end());
    while (!work.empty()) {
      std::string v = work.back();
      work.pop_back();
      size_t p = producer.at(v);
      if (!nodes.insert(p).second) continue;
      m.nodes[p].forEachRead([&](const std::string &u) {
        if (m.initializers.count(u) || graphInputs.count(u)) return;
        if (batched.count(u)) shapes.insert(u); // read by Shape/Size only
        else work.push_back(u);
      });
    }
    io_[j].metaNodes.assign(nodes.begin(), nodes.end());
    io_[j].shapes.assign(shapes.begin(), shapes.end());
  }
  // Shapes a stage must pass on for later stages.
  for (size_t j = S - 1; j >= 2; --j) {
    const auto &st = plan_.stages(int(j - 1));
    std::set<std::string> need(io_[j - 1].shapes.begin(), io_[j - 1].shapes.end());
    for (const auto &v : io_[j].shapes) {
      size_t p = producer.at(v);
      if (p < st.first_node()) need.insert(v);
    }
    io_[j - 1].shapes.assign(need.begin(), need.end());
  }

  // Tensor parallelism: in a stage of tp > 1, the nodes the plan lists
  // run split over the worker's ranks as it says (Megatron's column/row
  // pairs, column MatMuls gathered; docs/runtime.md, "Tensor-parallel
  // stages"); everything else runs replicated. Checked here: the weights
  // are 2-D (1-D for a bias) initializers only that node reads.
  std::map<std::string, int> readers;
  for (const auto &n : m.nodes)
    n.forEachRead([&](const std::string &in) { readers[in]++; });
  tpNodes_.assign(S, {});
  tpParams_.assign(S, {});
  vocabHeads_.assign(S, {});
  std::map<std::string, size_t> producerOf;
  for (size_t i = 0; i < m.nodes.size(); ++i)
    for (const auto &o : m.nodes[i].outputs)
      if (!o.empty()) producerOf[o] = i;
  for (size_t j = 0; j < S; ++j) {
    const auto &st = plan_.stages(int(j));
    for (const auto &tn : st.tensor_parallel_nodes()) {
      std::string where = "stage " + std::to_string(j) + ": tensor-parallel node " + std::to_string(tn.node());
      if (st.tensor_parallel() <= 1) fail(where + " in a stage without tensor parallelism");
      if (tn.node() < st.first_node() || tn.node() > st.last_node()) fail(where + " is outside the stage");
      const Node &n = m.nodes[tn.node()];
      auto weight = [&](size_t input, int64_t rank) -> const std::string & {
        const Tensor *w = input < n.inputs.size() && m.initializers.count(n.inputs[input])
                              ? &m.initializers.at(n.inputs[input]) : nullptr;
        if (!w || w->rank() != rank || readers[n.inputs[input]] != 1)
          fail(where + " (" + n.describe() + "): input " + std::to_string(input) + " is not a " +
               std::to_string(rank) + "-D weight only it reads");
        return n.inputs[input];
      };
      auto expect = [&](const char *op) {
        if (n.opType != op) fail(where + " is " + n.describe() + ", the plan splits it as a " + op);
      };
      int segments = int(std::max<uint32_t>(tn.segments(), 1));
      switch (tn.role()) {
      case plan::TensorParallelNode::COLUMN:
      case plan::TensorParallelNode::GATHER:
        expect("MatMul");
        tpParams_[j][weight(1, 2)] = {1, segments};
        break;
      case plan::TensorParallelNode::ROW:
        expect("MatMul");
        tpParams_[j][weight(1, 2)] = {0, 1};
        break;
      case plan::TensorParallelNode::BIAS:
        expect("Add");
        tpParams_[j][weight(size_t(tn.axis()), 1)] = {0, segments};
        break;
      case plan::TensorParallelNode::VOCAB: {
        // Megatron's vocab-parallel LM head: each rank makes its columns
        // of the logits and the loss is computed on the split logits.
        expect("MatMul");
        if (!training()) fail(where + " (" + n.describe() + ") is a vocab-parallel head in an inference plan");
        if (j + 1 != S || n.outputs.size() != 1 || !graphOutputs_.count(n.outputs[0]))
          fail(where + " (" + n.describe() + ") is a vocab-parallel head but its output is not a graph output of the last stage");
        VocabHead head;
        if (n.inputs.size() == 2) {
          head.param = n.inputs[1];
          auto p = producerOf.find(head.param);
          if (!m.initializers.count(head.param) && p != producerOf.end()) {
            const Node &t = m.nodes[p->second];
            std::vector<int64_t> perm = t.getInts("perm", {1, 0});
            if (t.opType == "Transpose" && t.inputs.size() == 1 && perm == std::vector<int64_t>{1, 0}) {
              head.param = t.inputs[0];
              head.transposed = true;
            }
          }
        }
        auto w = m.initializers.find(head.param);
        if (w == m.initializers.end() || w->second.rank() != 2 || w->second.dtype() != DType::Float32)
          fail(where + " (" + n.describe() + "): input 1 is not a trained 2-D weight or its Transpose");
        int64_t vocab = w->second.dim(head.transposed ? 0 : 1);
        if (vocab % int64_t(st.tensor_parallel()) != 0)
          fail(where + " (" + n.describe() + "): " + std::to_string(vocab) + " classes do not split over " +
               std::to_string(st.tensor_parallel()) + " ranks");
        vocabHeads_[j][tn.node()] = head;
        break;
      }
      case plan::TensorParallelNode::SPLIT: expect("Split"); break;
      case plan::TensorParallelNode::RESHAPE: expect("Reshape"); break;
      default: break;
      }
      tpNodes_[j][tn.node()] = tn;
    }
  }

  // Programs: one FORWARD per micro-batch over the stage's nodes, and the
  // sends and receives the workers' sample ranges call for. In a
  // tensor-parallel worker every rank receives, the first one sends.
  for (const auto &r : plan_.ranks()) {
    if (isIdleRank(plan_, r.rank())) continue;
    const auto &st = plan_.stages(int(r.stage()));
    const auto &self = st.workers(int(r.worker()));
    std::string who = "rank " + std::to_string(r.rank()) + ": ";
    int tpIndex = 0;
    for (int k = 0; k < self.ranks_size(); ++k)
      if (self.ranks(k) == r.rank()) tpIndex = k;
    std::vector<int> forwards(M, 0), backwards(M, 0);
    int allreduces = 0, optimizerSteps = 0;
    bool afterOptimizer = false;
    std::set<std::pair<uint32_t, uint32_t>> sends, recvs, wantSends, wantRecvs, gradSends, gradRecvs;
    for (const auto &ins : r.program()) {
      if (afterOptimizer) fail(who + "instructions after OPTIMIZER_STEP (it must come last)");
      switch (ins.kind()) {
      case plan::Instruction::FORWARD:
      case plan::Instruction::BACKWARD: {
        bool fwd = ins.kind() == plan::Instruction::FORWARD;
        if (ins.first_node() != st.first_node() || ins.last_node() != st.last_node())
          fail(who + (fwd ? "FORWARD" : "BACKWARD") + " over nodes " + std::to_string(ins.first_node()) + ".." +
               std::to_string(ins.last_node()) + " is not its stage's range");
        if (!fwd && forwards[ins.micro_batch()] == 0)
          fail(who + "BACKWARD of micro-batch " + std::to_string(ins.micro_batch()) + " before its FORWARD");
        (fwd ? forwards : backwards)[ins.micro_batch()]++;
        break;
      }
      case plan::Instruction::ALLREDUCE_GRADIENTS: {
        std::set<uint32_t> peers(ins.peers().begin(), ins.peers().end()), want;
        for (const auto &w : st.workers())
          if (&w != &self) want.insert(w.ranks(std::min(tpIndex, w.ranks_size() - 1)));
        if (peers != want) fail(who + "ALLREDUCE_GRADIENTS peers are not the other workers of its stage");
        allreduces++;
        break;
      }
      case plan::Instruction::OPTIMIZER_STEP:
        optimizerSteps++;
        afterOptimizer = true;
        break;
      default: {
        if (ins.peers_size() < 1) fail(who + "transfer without a peer");
        std::pair<uint32_t, uint32_t> key{ins.micro_batch(), ins.peers(0)};
        switch (ins.kind()) {
        case plan::Instruction::SEND_ACTIVATION: sends.insert(key); break;
        case plan::Instruction::RECV_ACTIVATION: recvs.insert(key); break;
        case plan::Instruction::SEND_GRADIENT: gradSends.insert(key); break;
        case plan::Instruction::RECV_GRADIENT: gradRecvs.insert(key); break;
        default: fail(who + "unexpected instruction " + plan::Instruction::Kind_Name(ins.kind()));
        }
      }
      }
    }
    for (uint32_t mb = 0; mb < M; ++mb) {
      if (forwards[mb] != 1)
        fail(who + "the program has " + std::to_string(forwards[mb]) + " FORWARD instructions for micro-batch " +
             std::to_string(mb) + ", expected 1");
      if (train && backwards[mb] != 1)
        fail(who + "the program has " + std::to_string(backwards[mb]) + " BACKWARD instructions for micro-batch " +
             std::to_string(mb) + ", expected 1");
      auto overlap = [&](const plan::Stage &other, std::set<std::pair<uint32_t, uint32_t>> &want) {
        for (const auto &w : other.workers())
          if (std::max(w.sample_offset(), self.sample_offset()) <
              std::min(w.sample_offset() + w.samples(), self.sample_offset() + self.samples()))
            want.insert({mb, w.ranks(0)});
      };
      if (r.stage() > 0) overlap(plan_.stages(int(r.stage()) - 1), wantRecvs);
      if (r.stage() + 1 < S) overlap(plan_.stages(int(r.stage()) + 1), wantSends);
    }
    // The worker's first rank sends for it; all of its ranks receive.
    const std::set<std::pair<uint32_t, uint32_t>> none;
    if (sends != (tpIndex == 0 ? wantSends : none))
      fail(who + "its SEND_ACTIVATION instructions do not match the next stage's sample ranges");
    if (recvs != wantRecvs) fail(who + "its RECV_ACTIVATION instructions do not match the previous stage's sample ranges");
    if (train) {
      if (gradSends != (tpIndex == 0 ? wantRecvs : none))
        fail(who + "its SEND_GRADIENT instructions do not match the previous stage's sample ranges");
      if (gradRecvs != wantSends) fail(who + "its RECV_GRADIENT instructions do not match the next stage's sample ranges");
      if (optimizerSteps != 1) fail(who + "a training program needs one OPTIMIZER_STEP, it has " + std::to_string(optimizerSteps));
      if (st.workers_size() > 1 && allreduces != 1)
        fail(who + "the stage has " + std::to_string(st.workers_size()) +
             " workers but the program has " + std::to_string(allreduces) + " ALLREDUCE_GRADIENTS");
    }
  }
  if (train) checkTraining();
}

void PlanExecutor::checkInputs(const std::map<std::string, Tensor> &inputs) const {
  int64_t B = plan_.settings().global_batch();
  for (const auto &in : model_->inputs) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) fail("input '" + in.name + "' is missing (the model's inputs: " + [&] {
      std::string s;
      for (const auto &i : model_->inputs) s += (s.empty() ? "" : ", ") + i.name;
      return s;
    }() + ")");
    const Tensor &t = it->second;
    if (in.dtype != DType::Undefined && t.dtype() != in.dtype)
      fail("input '" + in.name + "' is " + dtypeName(t.dtype()) + ", the model wants " + dtypeName(in.dtype));
    // The shape the plan was compiled for, when it records one: the whole
    // shape must match (a plan priced for 16 tokens does not run 4096).
    const plan::IoShape *compiled = nullptr;
    for (const auto &io : plan_.settings().inputs())
      if (io.name() == in.name) compiled = &io;
    if (compiled) {
      std::vector<int64_t> want(compiled->dims().begin(), compiled->dims().end());
      bool ok = want.size() == t.shape().size();
      for (size_t d = 0; ok && d < want.size(); ++d) ok = want[d] < 0 || want[d] == t.shape()[d];
      if (!ok)
        fail("input '" + in.name + "' has shape " + shapeString(t.shape()) + ", the plan was compiled for " +
             shapeString(want) + (compiled->batch_axis() >= 0
                                      ? " (batch " + std::to_string(B) + " on axis " +
                                            std::to_string(compiled->batch_axis()) + ")"
                                      : std::string()) +
             "; recompile the plan for other shapes");
      continue;
    }
    if (isScalarInput(in)) {
      if (t.rank() != 0)
        fail("input '" + in.name + "' has shape " + shapeString(t.shape()) + ", the model wants a scalar");
      continue;
    }
    if (t.rank() < 1 || t.dim(0) != B)
      fail("input '" + in.name + "' has shape " + shapeString(t.shape()) + "; dim 0 must be the plan's global batch " +
           std::to_string(B));
    if (in.hasShape) {
      bool ok = in.shape.size() == t.shape().size();
      for (size_t d = 1; ok && d < in.shape.size(); ++d)
        ok = in.shape[d] < 0 || in.shape[d] == t.shape()[d];
      if (!ok) {
        std::vector<int64_t> want = in.shape;
        want[0] = B;
        fail("input '" + in.name + "' has shape " + shapeString(t.shape()) + ", the model wants " +
             shapeString(want) + " (-1: any)");
      }
    }
  }
  for (const auto &input : inputs) {
    const std::string &name = input.first; // (clang < 16 cannot capture a structured binding)
    bool known = std::any_of(model_->inputs.begin(), model_->inputs.end(),
                             [&](const ValueInfo &v) { return v.name == name; });
    if (!known) fail("the model has no input '" + name + "'");
  }
}

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

namespace {
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

/// Elements [lo, hi) of the tensors `names` (in `values`; offsets[i]: where
/// names[i] starts in the list laid end to end) as one float32 tensor; a
/// missing tensor reads as zeros (a gradient no micro-batch reached).
Tensor flatRange(const std::map<std::string, Tensor> &values, const std::vector<std::string> &names,
                 const std::vector<int64_t> &offsets, int64_t lo, int64_t hi) {
  Tensor out(DType::Float32, {hi - lo});
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t a = std::max(lo, offsets[i]), b = std::min(hi, offsets[i + 1]);
    if (a >= b) continue;
    auto it = values.find(names[i]);
    if (it == values.end() || !it->second.defined()) continue;
    if (it->second.dtype() != DType::Float32 || it->second.numel() != offsets[i + 1] - offsets[i])
      fail("'" + names[i] + "' is " + it->second.describe() + ", not the parameter's float32 size");
    std::memcpy(out.data<float>() + (a - lo), it->second.data<float>() + (a - offsets[i]), size_t(b - a) * sizeof(float));
  }
  return out;
}

/// Writes `flat`, elements [lo, lo + flat.numel()) of that list, into the
/// tensors of `values`; a missing one is made (zeros) with `shapes`' shape.
void scatterFlat(const Tensor &flat, int64_t lo, const std::vector<std::string> &names,
                 const std::vector<int64_t> &offsets, std::map<std::string, Tensor> &values,
                 const std::map<std::string, Tensor> &shapes) {
  int64_t hi = lo + flat.numel();
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t a = std::max(lo, offsets[i]), b = std::min(hi, offsets[i + 1]);
    if (a >= b) continue;
    Tensor &t = values[names[i]];
    if (!t.defined()) t = Tensor(DType::Float32, shapes.at(names[i]).shape());
    std::memcpy(t.data<float>() + (a - offsets[i]), flat.data<float>() + (a - lo), size_t(b - a) * sizeof(float));
  }
}

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

/// Writes rows [0, part.dim(0)) of `part` at row `at` of `dst`.
void putRows(Tensor &dst, int64_t at, const Tensor &part) {
  if (part.numel() == 0) return;
  size_t row = dst.dim(0) ? dst.nbytes() / size_t(dst.dim(0)) : 0;
  if (part.nbytes() != row * size_t(part.dim(0)) || part.dtype() != dst.dtype())
    fail("gradient piece " + part.describe() + " does not fit " + dst.describe());
  std::memcpy(static_cast<char *>(dst.raw()) + row * size_t(at), part.raw(), part.nbytes());
}
} // namespace

/// The training side of one rank's step (null for inference).
struct PlanExecutor::TrainRun {
  const Tensor &labels;
  RankTrainState &state;
  const TrainOptions &options;
  double denominator = 0;
  double lossPiece = 0;
  std::map<uint32_t, std::map<std::string, Tensor>> stash;  // mb -> forward values
  std::map<uint32_t, std::set<std::string>> requires;       // mb -> values carrying gradients
  std::map<uint32_t, std::map<std::string, Tensor>> seeds;  // mb -> loss/received gradients
  std::map<uint32_t, std::vector<bool>> inFlags;            // mb -> received values carrying gradients
  std::map<uint32_t, std::vector<bool>> outFlags;           // mb -> sent values carrying gradients
  std::map<uint32_t, std::map<std::string, Tensor>> gradOut; // mb -> gradients of received values
  std::map<uint32_t, std::map<int64_t, std::vector<Tensor>>> gradIn; // mb -> sender offset -> pieces
  std::set<size_t> summed;                                   // sumGroups_ done
  std::vector<std::regex> freeze;                            // options.freeze, compiled
  bool frozen(const std::string &p) const {
    for (const auto &re : freeze)
      if (std::regex_search(p, re)) return true;
    return false;
  }
};

PlanExecutor::OutputPieces PlanExecutor::runRank(Communicator &comm,
                                                 const std::map<std::string, Tensor> &inputs,
                                                 RankTiming *timing) const {
  if (training()) fail("runRank runs inference plans; use trainRank for a training plan");
  return runProgram(comm, inputs, timing, nullptr);
}

PlanExecutor::OutputPieces PlanExecutor::runProgram(Communicator &comm,
                                                    const std::map<std::string, Tensor> &inputs,
                                                    RankTiming *timing, TrainRun *train) const {
  OutputPieces pieces;
  if (timing) {
    timing->nodeSeconds.assign(model_->nodes.size(), 0.0);
    timing->nodeSamples.assign(model_->nodes.size(), 0);
    timing->forwardSeconds.assign(plan_.settings().micro_batches(), 0.0);
  }
  uint32_t me = uint32_t(comm.rank());
  if (isIdleRank(plan_, me)) return pieces;
  RankCompute *compute = nullptr;
  if (auto it = computes_.find(int(me)); it != computes_.end()) compute = it->second.get();
  // Device-resident values (docs/gpu.md): what this rank's FORWARDs make
  // stays where its compute left it, host copies only for host consumers.
  const bool onDevice = compute && compute->deviceValues();
  const auto &rank = plan_.ranks(int(me));
  size_t j = rank.stage(), S = size_t(plan_.stages_size());
  const auto &st = plan_.stages(int(j));
  const auto &self = st.workers(int(rank.worker()));
  int64_t off = self.sample_offset(), n = self.samples();
  std::string who = "rank " + std::to_string(me) + " (stage " + std::to_string(j) + "): ";
  const StageIO *in = j > 0 ? &io_[j] : nullptr;
  const StageIO *out = j + 1 < S ? &io_[j + 1] : nullptr;
  int tp = self.ranks_size(), tpIndex = 0;
  for (int k = 0; k < tp; ++k)
    if (self.ranks(k) == me) tpIndex = k;
  std::vector<int> tpRanks(self.ranks().begin(), self.ranks().end());
  std::vector<int> tpGroup = tpRanks;  // sorted: groupSum's order
  std::sort(tpGroup.begin(), tpGroup.end());
  const auto &splitNodes = tpNodes_[j];
  std::set<size_t> splitNodeSet; // the nodes the backward hook claims
  for (const auto &[node, tn] : splitNodes) splitNodeSet.insert(node);
  size_t numNodes = model_->nodes.size();
  // This rank's part of the weight a split node reads as input `input`
  // (tpParams_): where it lies along which axis, and a copy.
  struct Part {
    int axis;
    Ranges ranges;
    Tensor value;
    /// `inputs` with input `i` replaced by this part.
    std::vector<const Tensor *> in(std::vector<const Tensor *> inputs, size_t i) const {
      inputs[i] = &value;
      return inputs;
    }
  };
  auto mineOf = [&](const Node &n, size_t input, const Tensor &w) {
    auto [axis, segments] = tpParams_[j].at(n.inputs[input]);
    Ranges ranges = shardRanges(w.dim(axis), segments, tpIndex, tp);
    Tensor value = slices(w, axis, ranges);
    return Part{axis, std::move(ranges), std::move(value)};
  };

  std::vector<size_t> nodes;
  for (size_t i = st.first_node(); i <= st.last_node(); ++i) nodes.push_back(i);
  std::set<std::string> keep;
  if (out) keep.insert(out->received.begin(), out->received.end());
  else keep = graphOutputs_;
  if (train) {
    // Backward reads every value the stage's nodes read or wrote.
    for (size_t i : stageNodes_[j]) {
      model_->nodes[i].forEachRead([&](const std::string &v) { keep.insert(v); });
      for (const auto &v : model_->nodes[i].outputs)
        if (!v.empty()) keep.insert(v);
    }
  }
  std::string lossOutput;
  if (train && !out) {
    lossOutput = train->options.lossOutput.empty() ? model_->outputs.at(0).name : train->options.lossOutput;
    if (!graphOutputs_.count(lossOutput)) fail("the model has no output '" + lossOutput + "' to compute the loss on");
  }
  // A vocab-parallel head's columns on this rank (of the [hidden, vocab]
  // matrix it multiplies by).
  auto vocabRanges = [&](const Tensor &w) {
    if (w.rank() != 2) fail(who + "a vocab-parallel head multiplies by " + w.describe() + ", not a matrix");
    return shardRanges(w.dim(1), 1, tpIndex, tp);
  };
  // The gradient of a VOCAB head's columns, summed over micro-batches;
  // summed over the worker (whole on every rank) before the gradient sums.
  std::map<size_t, Tensor> vocabGrads;
  bool vocabGradsDone = false;
  auto finishVocabGrads = [&] {
    if (vocabGradsDone) return;
    vocabGradsDone = true;
    for (auto &[node, g] : vocabGrads) {
      const VocabHead &head = vocabHeads_[j].at(node);
      train::groupSum(comm, tpGroup, tpTag(plan_.settings().micro_batches(), node, numNodes, 0), {&g});
      Tensor add = g;
      if (head.transposed) {
        // The head read Transpose(param): the gradient goes back transposed.
        int64_t a = g.dim(0), b = g.dim(1);
        add = Tensor(DType::Float32, {b, a});
        const float *src = g.data<float>();
        float *dst = add.data<float>();
        for (int64_t r = 0; r < a; ++r)
          for (int64_t c = 0; c < b; ++c) dst[c * a + r] = src[r * b + c];
      }
      train::accumulate(train->state.grads[head.param], add);
    }
  };
  // The VOCAB node making the loss output, if any (its logits are split).
  std::optional<size_t> vocabLossNode;
  if (train && !out)
    for (const auto &[node, head] : vocabHeads_[j])
      if (model_->nodes[node].outputs[0] == lossOutput) vocabLossNode = node;

  auto workerOf = [&](const plan::Stage &s, uint32_t r) -> const plan::Worker & {
    for (const auto &w : s.workers())
      for (uint32_t x : w.ranks())
        if (x == r) return w;
    fail(who + "rank " + std::to_string(r) + " is no worker of stage " + std::to_string(s.index()));
  };
  struct Received { std::vector<Tensor> data, shapes; Tensor flags; };
  std::map<uint32_t, std::map<int64_t, Received>> pending; // mb -> sender offset -> data
  struct Produced {
    std::map<std::string, Tensor> values;
    std::map<std::string, std::vector<int64_t>> perSample; // shapes to pass on
  };
  std::map<uint32_t, Produced> outbox;

  // ---- training memory: recomputation, ZeRO-3's gathered parameters ----
  const bool recompute = train && st.recompute();
  // SEND_ACTIVATIONs still to run per micro-batch: a training rank drops
  // the values it sends once they are sent (the stash keeps what BACKWARD needs).
  std::map<uint32_t, int> sendsLeft;
  for (const auto &ins : rank.program())
    if (ins.kind() == plan::Instruction::SEND_ACTIVATION) sendsLeft[ins.micro_batch()] += ins.peers_size();
  auto noteStash = [&] {
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
  };
  std::vector<size_t> myGroups; // the sumGroups_ this rank is in
  for (size_t g = 0; g < sumGroups_.size(); ++g)
    if (std::binary_search(sumGroups_[g].first.begin(), sumGroups_[g].first.end(), int(me))) myGroups.push_back(g);
  auto zeroCounts = [&](size_t g) {
    std::vector<int64_t> counts;
    for (size_t k = 0; k + 1 < zero_[g].bounds.size(); ++k) counts.push_back(zero_[g].bounds[k + 1] - zero_[g].bounds[k]);
    return counts;
  };
  // ZeRO-3: the whole parameters of the sharded groups exist only while a
  // FORWARD or BACKWARD (phase 0 / 1) runs.
  auto gatherShards = [&](uint32_t mb, int phase) {
    if (!train) return;
    for (size_t g : myGroups) {
      if (g >= zero_.size() || !zero_[g].paramsSharded) continue;
      Tensor full = comm.allGather(sumGroups_[g].first, train->state.shards.at(g).param, zeroCounts(g),
                                   zeroTag(mb, phase, g, zero_.size()));
      scatterFlat(full, 0, sumGroups_[g].second, zero_[g].offsets, train->state.params, model_->initializers);
      train->state.stats.gatheredParameterBytes += full.nbytes();
    }
  };
  auto dropGathered = [&] {
    if (!train) return;
    for (size_t g : myGroups)
      if (g < zero_.size() && zero_[g].paramsSharded)
        for (const auto &p : sumGroups_[g].second) train->state.params.erase(p);
  };

  auto receive = [&](uint32_t mb, uint32_t peer) {
    const auto &w = workerOf(plan_.stages(int(j - 1)), peer);
    // Filled in place when the instruction's group ends (map nodes do not move).
    Received &r = pending[mb][w.sample_offset()];
    r.data.assign(in->received.size(), Tensor());
    r.shapes.assign(in->shapes.size(), Tensor());
    for (size_t i = 0; i < in->received.size(); ++i) {
      if (onDevice) comm.recvDeviceInGroup(int(peer), dataTag(mb, i), &r.data[i]);
      else comm.recvInGroup(int(peer), dataTag(mb, i), &r.data[i]);
    }
    for (size_t i = 0; i < in->shapes.size(); ++i) comm.recvInGroup(int(peer), shapeTag(mb, i), &r.shapes[i]);
    if (train) comm.recvInGroup(int(peer), flagTag(mb), &r.flags);
  };

  // With `replay` (recomputation, before a BACKWARD): runs the nodes again
  // from the kept inputs in *replay and leaves every value there.
  auto forward = [&](uint32_t mb, std::map<std::string, Tensor> *replay = nullptr) {
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
    if (in && !replay) {
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
    Executor::NodeHook hook = [&](size_t node, KernelContext &ctx) {
      auto it = splitNodes.find(node);
      if (it == splitNodes.end()) return false;
      const plan::TensorParallelNode &tn = it->second;
      const Node &n = model_->nodes[node];
      auto run = [&](const char *op, std::vector<const Tensor *> in) {
        KernelContext part{ctx.node, ctx.opset, std::move(in), std::vector<Tensor>(ctx.outputs.size())};
        findKernel(op)->run(part);
        return std::move(part.outputs);
      };
      switch (tn.role()) {
      case plan::TensorParallelNode::COLUMN: {
        Part w = mineOf(n, 1, ctx.in(1));
        ctx.outputs[0] = std::move(run("MatMul", {ctx.inputs[0], &w.value})[0]);
        return true;
      }
      case plan::TensorParallelNode::ROW: {
        Part w = mineOf(n, 1, ctx.in(1));
        Tensor y = std::move(run("MatMul", {ctx.inputs[0], &w.value})[0]);
        train::groupSum(comm, tpGroup, tpTag(mb, node, numNodes, 0), {&y});
        if (timing) {
          timing->forwardAllReduces++;
          timing->forwardAllReduceElements += double(y.numel());
        }
        ctx.outputs[0] = std::move(y);
        return true;
      }
      case plan::TensorParallelNode::BIAS: {
        size_t b = size_t(tn.axis());
        Part bias = mineOf(n, b, ctx.in(b));
        ctx.outputs[0] = std::move(run("Add", bias.in(ctx.inputs, b))[0]);
        return true;
      }
      case plan::TensorParallelNode::VOCAB: {
        // This rank's columns (vocabulary entries) of the logits; the loss
        // below works on them.
        if (!train || n.outputs[0] != lossOutput)
          fail(who + n.describe() + " is a vocab-parallel head; its output must be the loss output");
        Tensor w = slices(ctx.in(1), 1, vocabRanges(ctx.in(1)));
        ctx.outputs[0] = std::move(run("MatMul", {ctx.inputs[0], &w})[0]);
        return true;
      }
      case plan::TensorParallelNode::SPLIT: {
        const Tensor &x = ctx.in(0);
        int axis = int(tn.axis()), parts = int(ctx.outputs.size());
        int64_t width = x.dim(axis) / parts;
        if (width * parts != x.dim(axis))
          fail(who + n.describe() + ": " + x.describe() + " does not split into " + std::to_string(parts) + " equal parts");
        for (int i = 0; i < parts; ++i) ctx.outputs[size_t(i)] = slices(x, axis, {{i * width, (i + 1) * width}});
        return true;
      }
      case plan::TensorParallelNode::RESHAPE: {
        // The whole tensor's target (0 copies a dim, -1 takes the rest),
        // then its split dim divided among the ranks.
        const Tensor &x = ctx.in(0);
        std::vector<int64_t> target = ctx.in(1).toInt64Vector();
        int64_t whole = x.numel() * tp, known = 1;
        int rest = -1;
        for (size_t d = 0; d < target.size(); ++d) {
          if (target[d] == 0 && !n.getInt("allowzero", 0) && int64_t(d) < x.rank()) target[d] = x.dim(int64_t(d));
          if (target[d] == -1) rest = int(d);
          else known *= target[d];
        }
        if (rest >= 0 && known > 0) target[size_t(rest)] = whole / known;
        size_t axis = size_t(tn.axis());
        if (axis >= target.size() || target[axis] % tp != 0 || shapeNumel(target) != whole)
          fail(who + n.describe() + ": cannot split the reshape of " + x.describe() + " to " +
               shapeString(target) + " on dim " + std::to_string(axis) + " over " + std::to_string(tp) + " ranks");
        target[axis] /= tp;
        ctx.outputs[0] = x.reshaped(target);
        return true;
      }
      case plan::TensorParallelNode::GATHER: {
        const Tensor &w = ctx.in(1);
        Part mine = mineOf(n, 1, w);
        Tensor piece = std::move(run("MatMul", {ctx.inputs[0], &mine.value})[0]);
        int64_t tag = tpTag(mb, node, numNodes, 0);
        // One group: every rank sends before it receives (NCCL-safe).
        std::vector<Tensor> pieces(static_cast<size_t>(tp));
        comm.groupStart();
        for (int k = 0; k < tp; ++k)
          if (k != tpIndex) comm.send(tpRanks[size_t(k)], tag, piece);
        for (int k = 0; k < tp; ++k)
          if (k != tpIndex) comm.recvInGroup(tpRanks[size_t(k)], tag, &pieces[size_t(k)]);
        comm.groupEnd();
        std::vector<int64_t> shape = piece.shape();
        shape.back() = w.dim(1);
        Tensor full(piece.dtype(), shape);
        for (int k = 0; k < tp; ++k) {
          Tensor got = k == tpIndex ? piece : std::move(pieces[size_t(k)]);
          Ranges theirs = shardRanges(w.dim(1), tpParams_[j].at(n.inputs[1]).second, k, tp);
          int64_t width = 0;
          for (auto [lo, hi] : theirs) width += hi - lo;
          if (got.shape().back() != width || got.numel() / std::max<int64_t>(width, 1) != full.numel() / w.dim(1))
            fail(who + "tensor-parallel piece " + got.describe() + " from rank " +
                 std::to_string(tpRanks[size_t(k)]) + " does not fit " + full.describe());
          putSlices(full, got, int(full.rank()) - 1, theirs);
        }
        if (timing) {
          timing->forwardAllGathers++;
          timing->forwardAllGatherElements += double(full.numel());
        }
        ctx.outputs[0] = std::move(full);
        return true;
      }
      default:
        return false;  // LOCAL: the kernel runs on the slices as they are
      }
    };
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
    auto stageRun = [&](std::map<std::string, Tensor> vals, const std::set<std::string> &keeping,
                        std::map<std::string, std::vector<int64_t>> *shp, ExecutionObserver *obs,
                        const Executor::NodeHook *h) {
      if (!compute) return executor_->runNodes(nodes, std::move(vals), keeping, shp, obs, h);
      std::set<size_t> hooked;
      for (const auto &[node, tn] : splitNodes) hooked.insert(node);
      return compute->runNodes(nodes, std::move(vals), keeping, shp, obs, h, &hooked, onDevice ? &resident : nullptr);
    };
    std::map<std::string, Tensor> result;
    if (timing && !replay) { // a profile times each node once per micro-batch
      TimingObserver observer(*timing, n);
      auto t0 = std::chrono::steady_clock::now();
      result = stageRun(std::move(values), keepAll, &shapes, &observer, hookPtr);
      auto t1 = std::chrono::steady_clock::now();
      if (mb < timing->forwardSeconds.size())
        timing->forwardSeconds[mb] += std::chrono::duration<double>(t1 - t0).count();
    } else {
      result = stageRun(std::move(values), keepAll, &shapes, nullptr, hookPtr);
    }
    std::set<std::string> requires;
    if (train && !replay) {
      auto lookup = [&](const std::string &v) -> const Tensor * {
        auto it = result.find(v);
        return it == result.end() ? nullptr : &it->second;
      };
      requires = train::requiresGrad(*model_, stageNodes_[j], seeds, lookup);
    }
    Produced p;
    if (out && !replay) {
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
    } else if (train && !out) {
      // The loss on this worker's samples; its gradient seeds BACKWARD (a
      // recomputing stage makes it again from the rebuilt logits).
      const Tensor &logits = result.at(lossOutput);
      if (train->labels.rank() < 1) fail("the labels must have a batch dim");
      Tensor labels = whole_ ? train->labels : sliceRows(train->labels, base, n);
      Tensor grad;
      try {
        Tensor *want = recompute && !replay ? nullptr : &grad;
        double piece = 0;
        if (vocabLossNode) {
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
  };

  auto send = [&](uint32_t mb, uint32_t peer) { // to one rank of a next-stage worker
    auto it = outbox.find(mb);
    if (it == outbox.end()) fail(who + "SEND_ACTIVATION for micro-batch " + std::to_string(mb) + " before its FORWARD");
    const auto &w = workerOf(plan_.stages(int(j + 1)), peer);
    int64_t lo = std::max(off, w.sample_offset());
    int64_t hi = std::min(off + n, w.sample_offset() + w.samples());
    for (size_t i = 0; i < out->received.size(); ++i)
      comm.send(int(peer), dataTag(mb, i),
                whole_ ? it->second.values.at(out->received[i])
                       : sliceRows(it->second.values.at(out->received[i]), lo - off, hi - lo));
    for (size_t i = 0; i < out->shapes.size(); ++i) {
      const auto &s = it->second.perSample.at(out->shapes[i]);
      Tensor t(DType::Int64, {int64_t(s.size())});
      std::copy(s.begin(), s.end(), t.data<int64_t>());
      comm.send(int(peer), shapeTag(mb, i), t);
    }
    if (train) {
      const auto &flags = train->outFlags.at(mb);
      Tensor t(DType::Int64, {int64_t(flags.size())});
      for (size_t i = 0; i < flags.size(); ++i) t.data<int64_t>()[i] = flags[i];
      comm.send(int(peer), flagTag(mb), t);
    }
  };

  // ---- training: gradients of the values that crossed the boundaries ----
  auto receiveGradient = [&](uint32_t mb, uint32_t peer) {
    const auto &w = workerOf(plan_.stages(int(j + 1)), peer);
    const auto &flags = train->outFlags.at(mb);
    std::vector<Tensor> &parts = train->gradIn[mb][w.sample_offset()];
    parts.assign(flags.size(), Tensor());
    for (size_t i = 0; i < flags.size(); ++i)
      if (flags[i]) comm.recvInGroup(int(peer), gradTag(mb, i), &parts[i]);
  };

  auto backwardStep = [&](uint32_t mb) {
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
    // Split nodes backward: a column MatMul's slice of dY gives its weight
    // columns' gradient and a partial dX, summed over the worker's ranks
    // (Megatron's backward all-reduce); a row MatMul's whole dY gives its
    // rows' gradient and the slice of dX; a sliced bias or Split puts its
    // slice's gradient back in place. Parameter gradients are zero outside
    // this rank's part.
    train::GradientHook hook = [&](size_t node, GradientContext &ctx) {
      auto it = splitNodes.find(node);
      if (it == splitNodes.end()) return false;
      const plan::TensorParallelNode &tn = it->second;
      const Node &n = model_->nodes[node];
      auto run = [&](const char *op, std::vector<const Tensor *> in, std::vector<Tensor> dy) {
        GradientContext part{ctx.node, ctx.opset, std::move(in), ctx.outputs, std::move(dy),
                             ctx.wantGrad, std::vector<Tensor>(ctx.inputs.size())};
        findGradient(op)->run(part);
        part.inputGrads.resize(ctx.inputs.size());
        return std::move(part.inputGrads);
      };
      auto sumDx = [&](Tensor &dx) {
        train::groupSum(comm, tpGroup, tpTag(mb, node, numNodes, 2), {&dx});
        if (timing) {
          timing->backwardAllReduces++;
          timing->backwardAllReduceElements += double(dx.numel());
        }
      };
      switch (tn.role()) {
      case plan::TensorParallelNode::COLUMN:
      case plan::TensorParallelNode::ROW:
      case plan::TensorParallelNode::GATHER: {
        const Tensor &w = ctx.in(1);
        Part mine = mineOf(n, 1, w);
        Tensor dy = ctx.outputGrads.at(0);
        if (tn.role() == plan::TensorParallelNode::GATHER) dy = slices(dy, int(dy.rank()) - 1, mine.ranges);
        auto g = run("MatMul", {ctx.inputs[0], &mine.value}, {dy});
        ctx.inputGrads.assign(2, Tensor());
        if (ctx.wantGrad[0]) {
          Tensor dx = g[0].defined() ? g[0] : Tensor(DType::Float32, ctx.in(0).shape());
          if (tn.role() != plan::TensorParallelNode::ROW) sumDx(dx);
          ctx.inputGrads[0] = std::move(dx);
        }
        if (ctx.wantGrad[1] && g[1].defined()) ctx.inputGrads[1] = zerosWith(w.shape(), g[1], mine.axis, mine.ranges);
        return true;
      }
      case plan::TensorParallelNode::VOCAB: {
        // dY is this rank's columns: dX is a partial sum over the worker;
        // the weight's columns gradient waits for finishVocabGrads (not
        // back through the sweep: the rest of the weight's gradient, an
        // embedding's, is the same on every rank and must not be summed).
        const Tensor &w = ctx.in(1);
        Ranges cols = vocabRanges(w);
        Tensor mine = slices(w, 1, cols);
        auto g = run("MatMul", {ctx.inputs[0], &mine}, {ctx.outputGrads.at(0)});
        ctx.inputGrads.assign(2, Tensor());
        if (ctx.wantGrad[0]) {
          Tensor dx = g[0].defined() ? g[0] : Tensor(DType::Float32, ctx.in(0).shape());
          sumDx(dx);
          ctx.inputGrads[0] = std::move(dx);
        }
        if (g[1].defined()) train::accumulate(vocabGrads[node], zerosWith(w.shape(), g[1], 1, cols));
        return true;
      }
      case plan::TensorParallelNode::BIAS: {
        size_t b = size_t(tn.axis());
        Part bias = mineOf(n, b, ctx.in(b));
        auto g = run("Add", bias.in(ctx.inputs, b), ctx.outputGrads);
        if (g[b].defined()) g[b] = zerosWith(ctx.in(b).shape(), g[b], bias.axis, bias.ranges);
        ctx.inputGrads = std::move(g);
        return true;
      }
      case plan::TensorParallelNode::SPLIT: {
        const Tensor &x = ctx.in(0);
        int axis = int(tn.axis());
        int64_t width = x.dim(axis) / int64_t(ctx.outputGrads.size());
        Tensor dx(x.dtype(), x.shape());
        for (size_t i = 0; i < ctx.outputGrads.size(); ++i)
          if (ctx.outputGrads[i].defined())
            putSlices(dx, ctx.outputGrads[i], axis, {{int64_t(i) * width, int64_t(i + 1) * width}});
        ctx.inputGrads.assign(ctx.inputs.size(), Tensor());
        if (ctx.wantGrad[0]) ctx.inputGrads[0] = std::move(dx);
        return true;
      }
      default:
        return false;  // LOCAL and RESHAPE: the usual gradient on the slices
      }
    };
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
  };

  auto sendGradient = [&](uint32_t mb, uint32_t peer) {
    auto it = train->gradOut.find(mb);
    if (it == train->gradOut.end())
      fail(who + "SEND_GRADIENT for micro-batch " + std::to_string(mb) + " before its BACKWARD");
    const auto &w = workerOf(plan_.stages(int(j - 1)), peer);
    int64_t lo = std::max(off, w.sample_offset());
    int64_t hi = std::min(off + n, w.sample_offset() + w.samples());
    const auto &flags = train->inFlags.at(mb);
    for (size_t i = 0; i < flags.size(); ++i)
      if (flags[i])
        comm.send(int(peer), gradTag(mb, i),
                  whole_ ? it->second.at(in->received[i])
                         : sliceRows(it->second.at(in->received[i]), lo - off, hi - lo));
  };

  // Sums every group of parameter gradients this rank belongs to that
  // `select` picks, in sumGroups_ order (the same on every rank).
  auto sumGradients = [&](const std::function<bool(const std::vector<int> &)> &select) {
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
      std::vector<Tensor *> tensors;
      for (const auto &p : params) {
        Tensor &gr = train->state.grads[p];
        if (!gr.defined()) gr = Tensor(DType::Float32, model_->initializers.at(p).shape());
        tensors.push_back(&gr);
      }
      if (member) train::groupSum(comm, ranks, sumTag(g), tensors);
      for (auto [to, from] : follow)
        for (Tensor *t : tensors) {
          if (from == int(me)) comm.send(to, followTag(g), *t);
          if (to == int(me)) *t = comm.recv(from, followTag(g));
        }
      train->summed.insert(g);
    }
  };

  // One Adam update of `param` (its element ranges `pieces`, all when
  // empty) with the moments under `key`. With optimizer offload the
  // moments live in the host store and the update runs there on copies of
  // the gradient and the parameter; the parameter is copied back.
  auto adamStep = [&](const std::string &key, Tensor &param, const Tensor &grad,
                      const std::vector<std::pair<int64_t, int64_t>> &pieces) {
    auto &state = train->state;
    bool offload = plan_.settings().offload_optimizer();
    Tensor &m = (offload ? state.host.adamM : state.adamM)[key];
    Tensor &v = (offload ? state.host.adamV : state.adamV)[key];
    Tensor hostParam = offload ? param.clone() : param, hostGrad = offload ? grad.clone() : grad;
    train::AdamSettings adam{train->options.lr, train->options.beta1, train->options.beta2,
                             train->options.eps, train->options.weightDecay};
    if (compute && !offload) compute->adamUpdate(hostParam, hostGrad, m, v, state.step, adam, pieces);
    else train::adamUpdatePieces(hostParam, hostGrad, m, v, state.step, adam, pieces);
    if (offload) {
      std::memcpy(param.raw(), hostParam.raw(), param.nbytes());
      state.stats.offloadBytes += grad.nbytes() + 2 * param.nbytes();
    }
  };
  // ZeRO: the update of this rank's range of group g, then (unless the
  // group keeps its parameters sharded) the all-gather of the new values.
  auto zeroStep = [&](size_t g) {
    auto &state = train->state;
    const auto &[ranks, params] = sumGroups_[g];
    const ZeroGroup &z = zero_[g];
    ZeroShard mine = zeroShard(g, me);
    auto &shard = state.shards[g];
    Tensor grad = zeroStage() >= 2 ? shard.grad : flatRange(state.grads, params, z.offsets, mine.lo, mine.hi);
    Tensor param = z.paramsSharded ? shard.param : flatRange(state.params, params, z.offsets, mine.lo, mine.hi);
    std::vector<std::pair<int64_t, int64_t>> pieces; // of trained parameters
    bool all = true;
    for (size_t i = 0; i < params.size(); ++i) {
      int64_t a = std::max(mine.lo, z.offsets[i]), b = std::min(mine.hi, z.offsets[i + 1]);
      if (a >= b) continue;
      if (train->frozen(params[i])) all = false;
      else pieces.push_back({a - mine.lo, b - a});
    }
    if (all || !pieces.empty()) adamStep("zero:" + std::to_string(g), param, grad, all ? decltype(pieces){} : pieces);
    if (z.paramsSharded) return; // `param` is the shard: updated in place
    Tensor full = comm.allGather(ranks, param, zeroCounts(g), zeroTag(0, 2, g, zero_.size()));
    scatterFlat(full, 0, params, z.offsets, state.params, model_->initializers);
  };
  std::vector<int> stageRanks; // the stage's ranks at this rank's tensor-parallel position
  for (const auto &w : st.workers()) stageRanks.push_back(int(w.ranks(tpIndex)));
  std::sort(stageRanks.begin(), stageRanks.end());

  auto clock = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  if (timing) timing->instructionSpans.clear();
  // Each run of consecutive SEND/RECV instructions is one communicator
  // group (Communicator::groupStart): its receives complete together at
  // the run's end, so ranks whose runs send to each other first do not
  // wait on each other where sends are unbuffered (NCCL). checkPlanPrograms
  // proved the programs deadlock-free under this rule.
  const auto &program = rank.program();
  for (int pc = 0; pc < program.size(); ++pc) {
    const auto &ins = program[pc];
    double started = timing ? clock() : 0;
    bool transfer = isTransfer(ins.kind());
    if (transfer && (pc == 0 || !isTransfer(program[pc - 1].kind()))) comm.groupStart();
    switch (ins.kind()) {
    case plan::Instruction::RECV_ACTIVATION:
      receive(ins.micro_batch(), ins.peers(0));
      break;
    case plan::Instruction::FORWARD:
      gatherShards(ins.micro_batch(), 0);
      forward(ins.micro_batch());
      dropGathered();
      break;
    case plan::Instruction::SEND_ACTIVATION:
      for (uint32_t peer : ins.peers()) send(ins.micro_batch(), peer); // every rank of a tp worker
      if (train && (sendsLeft[ins.micro_batch()] -= ins.peers_size()) <= 0) outbox.erase(ins.micro_batch());
      break;
    case plan::Instruction::RECV_GRADIENT:
      receiveGradient(ins.micro_batch(), ins.peers(0));
      break;
    case plan::Instruction::BACKWARD:
      gatherShards(ins.micro_batch(), 1);
      backwardStep(ins.micro_batch());
      dropGathered();
      break;
    case plan::Instruction::SEND_GRADIENT:
      for (uint32_t peer : ins.peers()) sendGradient(ins.micro_batch(), peer);
      break;
    case plan::Instruction::ALLREDUCE_GRADIENTS:
      if (train) finishVocabGrads();
      // The parameters only this stage reads, over its workers.
      sumGradients([&](const std::vector<int> &ranks) { return ranks == stageRanks; });
      break;
    case plan::Instruction::OPTIMIZER_STEP: {
      finishVocabGrads();
      // Parameters several stages read (tied embeddings) last: every sender
      // of those groups has finished its backward by now.
      sumGradients([](const std::vector<int> &) { return true; });
      auto &state = train->state;
      state.step++;
      if (!zero_.empty()) {
        for (size_t g : myGroups) zeroStep(g);
        break;
      }
      for (const auto &p : stageParams_[j]) {
        if (train->frozen(p)) continue;
        Tensor &g = state.grads[p];
        if (!g.defined()) g = Tensor(DType::Float32, state.params.at(p).shape());
        adamStep(p, state.params.at(p), g, {});
      }
      break;
    }
    default:
      fail(who + "unexpected instruction " + plan::Instruction::Kind_Name(ins.kind()));
    }
    // The group's wait counts in its last instruction's span.
    if (transfer && (pc + 1 == program.size() || !isTransfer(program[pc + 1].kind()))) comm.groupEnd();
    if (timing) timing->instructionSpans.push_back({started, clock()});
  }
  return pieces;
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

double PlanExecutor::trainRank(Communicator &comm, const std::map<std::string, Tensor> &inputs,
                               const Tensor &labels, RankTrainState &state,
                               const TrainOptions &options, RankTiming *timing) const {
  if (!training()) fail("trainRank needs a training plan (this one is for inference)");
  if (labels.rank() < 1 || labels.dim(0) != plan_.settings().global_batch())
    fail("labels " + labels.describe() + ": dim 0 must be the plan's global batch " +
         std::to_string(plan_.settings().global_batch()));
  if (labels.dtype() != DType::Int64 && labels.dtype() != DType::Int32)
    fail(std::string("labels must be int64 or int32 class indices, not ") + dtypeName(labels.dtype()));
  TrainRun run{labels, state, options};
  for (const auto &pattern : options.freeze) {
    try {
      run.freeze.emplace_back(pattern);
    } catch (const std::regex_error &e) {
      fail("--freeze '" + pattern + "' is not a regular expression: " + e.what());
    }
  }
  for (int64_t i = 0, e = labels.numel(); i < e; ++i)
    run.denominator += (labels.dtype() == DType::Int64 ? labels.data<int64_t>()[i]
                                                       : int64_t(labels.data<int32_t>()[i])) != options.ignoreIndex;
  if (run.denominator == 0) fail("every label is the ignore index " + std::to_string(options.ignoreIndex));
  uint32_t me = uint32_t(comm.rank());
  if (!isIdleRank(plan_, me) && state.params.empty() && state.shards.empty()) state = initialTrainState(me);
  state.grads.clear();
  state.stats = {};
  runProgram(comm, inputs, timing, &run);
  Tensor loss = Tensor::scalar<double>(DType::Float64, run.lossPiece).reshaped({1});
  comm.allReduceSum(loss);
  return loss.data<double>()[0];
}

double PlanExecutor::train(const std::map<std::string, Tensor> &inputs, const Tensor &labels,
                           std::vector<RankTrainState> &states, const TrainOptions &options,
                           StepTiming *timing) const {
  checkInputs(inputs);
  int R = ranks();
  if (states.empty()) {
    states.resize(size_t(R));
    for (int r = 0; r < R; ++r) states[size_t(r)] = initialTrainState(uint32_t(r));
  }
  if (int(states.size()) != R) fail("train: one state per rank is needed");
  if (timing) timing->ranks.assign(size_t(R), RankTiming{});
  auto start = std::chrono::steady_clock::now();
  std::vector<double> losses(size_t(R), 0);
  onThreads(R, [&](Communicator &comm) {
    size_t r = size_t(comm.rank());
    losses[r] = trainRank(comm, inputs, labels, states[r], options, timing ? &timing->ranks[r] : nullptr);
  });
  if (timing)
    timing->wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return losses[0];
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

plan::Plan PlanExecutor::singleRankPlan(const plan::Plan &in) {
  plan::Plan p = in;
  const auto &dev0 = in.cluster().devices(0);
  auto *cluster = p.mutable_cluster();
  cluster->clear_devices();
  auto *d = cluster->add_devices();
  *d = dev0;
  d->set_node(0);
  d->set_local_index(0);
  cluster->clear_nodes();
  auto *node = cluster->add_nodes();
  if (in.cluster().nodes_size() > int(dev0.node())) *node = in.cluster().nodes(int(dev0.node()));
  node->clear_ranks();
  node->add_ranks(0);
  auto *settings = p.mutable_settings();
  settings->set_micro_batches(1);
  settings->set_zero_stage(0); // the plain reference: whole state on the one rank
  settings->set_offload_optimizer(false);
  p.clear_stages();
  auto *stage = p.add_stages();
  stage->set_index(0);
  stage->set_first_layer(0);
  stage->set_last_layer(uint32_t(in.model().layers_size() - 1));
  stage->set_first_node(0);
  stage->set_last_node(uint32_t(in.model().node_names_size() - 1));
  stage->set_tensor_parallel(1);
  auto *w = stage->add_workers();
  w->add_ranks(0);
  w->set_samples(in.settings().global_batch());
  w->set_sample_offset(0);
  p.clear_ranks();
  auto *r = p.add_ranks();
  r->set_rank(0);
  auto add = [&](plan::Instruction::Kind kind) {
    auto *ins = r->add_program();
    ins->set_kind(kind);
    ins->set_micro_batch(0);
    if (kind == plan::Instruction::FORWARD || kind == plan::Instruction::BACKWARD) {
      ins->set_first_node(0);
      ins->set_last_node(stage->last_node());
      ins->set_samples(in.settings().global_batch());
    }
  };
  add(plan::Instruction::FORWARD);
  if (in.settings().mode() == "train") {
    add(plan::Instruction::BACKWARD);
    add(plan::Instruction::OPTIMIZER_STEP);
  }
  return p;
}

std::map<std::string, Tensor> PlanExecutor::gatherOutputs(const std::vector<OutputPieces> &all) const {
  const auto &last = plan_.stages(plan_.stages_size() - 1);
  std::map<std::string, Tensor> out;
  for (const auto &name : graphOutputs_) {
    std::vector<Tensor> parts;
    std::vector<uint32_t> byOffset;
    for (uint32_t w = 0; w < uint32_t(last.workers_size()); ++w) byOffset.push_back(w);
    std::sort(byOffset.begin(), byOffset.end(), [&](uint32_t a, uint32_t b) {
      return last.workers(int(a)).sample_offset() < last.workers(int(b)).sample_offset();
    });
    for (uint32_t mb = 0; mb < plan_.settings().micro_batches(); ++mb)
      for (uint32_t w : byOffset) {
        const Tensor *t = nullptr;
        for (const auto &p : all) {
          auto it = p.find({mb, w});
          if (it != p.end() && it->second.count(name)) t = &it->second.at(name);
        }
        if (!t) fail("output '" + name + "' of micro-batch " + std::to_string(mb) + " worker " + std::to_string(w) + " is missing");
        if (!whole_ && (t->rank() < 1 || t->dim(0) != last.workers(int(w)).samples()))
          fail("output '" + name + "' is " + t->describe() + ": dim 0 is not the batch; outputs without a batch dim are not supported");
        parts.push_back(*t);
      }
    out[name] = concatRows(parts);
  }
  return out;
}

std::map<std::string, Tensor> PlanExecutor::run(const std::map<std::string, Tensor> &inputs,
                                                StepTiming *timing) const {
  if (training()) fail("this is a training plan: run it with train() (hetplan run --labels FILE.npy)");
  checkInputs(inputs);
  int R = ranks();
  if (timing) timing->ranks.assign(size_t(R), RankTiming{});
  auto start = std::chrono::steady_clock::now();
  std::vector<OutputPieces> pieces(R);
  onThreads(R, [&](Communicator &comm) {
    size_t r = size_t(comm.rank());
    pieces[r] = runRank(comm, inputs, timing ? &timing->ranks[r] : nullptr);
  });
  if (timing)
    timing->wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return gatherOutputs(pieces);
}

} // namespace hetplan::runtime
