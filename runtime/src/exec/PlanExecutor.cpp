//===- PlanExecutor.cpp - runs a plan's step across ranks -----------------===//
//
// Loading and checking a plan, and running a step on threads. One rank's
// program is interpreted by PlanExecutor::RankProgram (program/); the
// training state's parameters and ZeRO partition are in PlanParameters.cpp.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/RunPlan.h"
#include "PlanSupport.h"
#include "Training.h"
#include "program/RankProgram.h"

#include <algorithm>
#include <chrono>
#include <regex>
#include <stdexcept>

namespace hetplan::runtime {

using namespace planexec;

namespace {
/// Ranks as threads (runRankThreads); the first rank error is rethrown as
/// it is, one line.
void onThreads(int R, const std::function<void(Communicator &)> &body) {
  RankThreadsOutcome outcome = runRankThreads(R, body);
  if (!outcome.firstError.empty()) fail(outcome.firstError);
  if (!outcome.abortError.empty()) fail(outcome.abortError);
}

/// A graph input declared as a scalar (rank 0: a flag, a sample rate) has
/// no batch dim: every rank gets all of it, and it is not batched.
bool isScalarInput(const ValueInfo &in) { return in.hasShape && in.shape.empty(); }
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

void RankCompute::optimizerUpdate(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                                  const OptimizerSettings &settings,
                                  const std::vector<std::pair<int64_t, int64_t>> &pieces) {
  train::optimizerUpdatePieces(param, grad, m, v, step, settings, pieces);
}

Optimizer PlanExecutor::optimizer() const {
  const std::string &name = plan_.settings().optimizer();
  // validatePlan refused any other name.
  return name.empty() ? Optimizer::Adam : parseOptimizer(name).value_or(Optimizer::Adam);
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

  findStageIO(path);
  checkTensorParallelNodes();
  checkPrograms();
  if (train) checkTraining();
}

void PlanExecutor::findStageIO(const std::string &path) {
  const Model &m = *model_;
  size_t N = m.nodes.size();
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
}

void PlanExecutor::checkTensorParallelNodes() {
  const Model &m = *model_;
  size_t S = size_t(plan_.stages_size());
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
        expect(tpProductOp());
        tpParams_[j][weight(1, 2)] = {1, segments};
        break;
      case plan::TensorParallelNode::ROW:
        expect(tpProductOp());
        tpParams_[j][weight(1, 2)] = {0, 1};
        break;
      case plan::TensorParallelNode::BIAS:
        expect(kAddOp);
        tpParams_[j][weight(size_t(tn.axis()), 1)] = {0, segments};
        break;
      case plan::TensorParallelNode::VOCAB: {
        // Megatron's vocab-parallel LM head: each rank makes its columns
        // of the logits and the loss is computed on the split logits.
        expect(tpProductOp());
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
            if (t.opType == kTransposeOp && t.inputs.size() == 1 && perm == std::vector<int64_t>{1, 0}) {
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
      case plan::TensorParallelNode::SPLIT: expect(kSplitOp); break;
      case plan::TensorParallelNode::RESHAPE: expect(kReshapeOp); break;
      default: break;
      }
      tpNodes_[j][tn.node()] = tn;
    }
  }
}

void PlanExecutor::checkPrograms() {
  uint32_t M = plan_.settings().micro_batches();
  bool train = training();
  size_t S = size_t(plan_.stages_size());
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
}

std::string PlanExecutor::setShares(uint32_t stage, const std::vector<int64_t> &samples) {
  if (stage >= uint32_t(plan_.stages_size())) return "no stage " + std::to_string(stage);
  plan::Stage &st = *plan_.mutable_stages(int(stage));
  if (samples.size() != size_t(st.workers_size()))
    return "stage " + std::to_string(stage) + " has " + std::to_string(st.workers_size()) + " workers, not " +
           std::to_string(samples.size());
  int64_t sum = 0;
  for (int64_t n : samples) {
    if (n < 1) return "every worker keeps at least one sample";
    sum += n;
  }
  if (sum != microBatch_)
    return "the shares sum to " + std::to_string(sum) + ", the micro-batch is " + std::to_string(microBatch_);
  plan::Plan saved = plan_;
  std::vector<int> order(size_t(st.workers_size()));
  for (size_t w = 0; w < order.size(); ++w) order[w] = int(w);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return st.workers(a).sample_offset() < st.workers(b).sample_offset();
  });
  int64_t offset = 0;
  for (int w : order) {
    st.mutable_workers(w)->set_samples(samples[size_t(w)]);
    st.mutable_workers(w)->set_sample_offset(offset);
    offset += samples[size_t(w)];
  }
  for (auto &r : *plan_.mutable_ranks()) {
    if (r.stage() != stage || isIdleRank(plan_, r.rank())) continue;
    for (auto &ins : *r.mutable_program())
      if (ins.kind() == plan::Instruction::FORWARD || ins.kind() == plan::Instruction::BACKWARD)
        ins.set_samples(samples[r.worker()]);
  }
  try {
    checkPrograms();
  } catch (const std::exception &e) {
    plan_ = std::move(saved);
    return std::string("the programs would not match the new shares (") + e.what() + ")";
  }
  return "";
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
      // The values it was compiled for (--value: an If on it took one branch).
      if (compiled->values_size() > 0) {
        std::vector<int64_t> want(compiled->values().begin(), compiled->values().end());
        if (t.toInt64Vector() != want) {
          std::string got, w;
          for (int64_t v : t.toInt64Vector()) got += (got.empty() ? "" : ",") + std::to_string(v);
          for (int64_t v : want) w += (w.empty() ? "" : ",") + std::to_string(v);
          fail("input '" + in.name + "' is " + got + ", the plan was compiled for --value " + in.name + "=" + w +
               "; recompile the plan for other values");
        }
      }
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

PlanExecutor::OutputPieces PlanExecutor::runRank(Communicator &comm,
                                                 const std::map<std::string, Tensor> &inputs,
                                                 RankTiming *timing) const {
  if (training()) fail("runRank runs inference plans; use trainRank for a training plan");
  return runProgram(comm, inputs, timing, nullptr);
}

double PlanExecutor::trainRank(Communicator &comm, const std::map<std::string, Tensor> &inputs,
                               const Tensor &labels, RankTrainState &state,
                               const TrainOptions &options, RankTiming *timing) const {
  if (!training()) fail("trainRank needs a training plan (this one is for inference)");
  if (labels.rank() < 1 || labels.dim(0) != plan_.settings().global_batch())
    fail("labels " + labels.describe() + ": dim 0 must be the plan's global batch " +
         std::to_string(plan_.settings().global_batch()));
  bool binary = labels.dtype() == DType::Float32 || labels.dtype() == DType::Float64;
  if (labels.dtype() != DType::Int64 && labels.dtype() != DType::Int32 && !binary)
    fail(std::string("labels must be int64 or int32 class indices (softmax cross-entropy) or float32/float64 "
                     "targets in [0, 1] (binary cross-entropy), not ") + dtypeName(labels.dtype()));
  TrainRun run{labels, state, options};
  for (const auto &pattern : options.freeze) {
    try {
      run.freeze.emplace_back(pattern);
    } catch (const std::regex_error &e) {
      fail("--freeze '" + pattern + "' is not a regular expression: " + e.what());
    }
  }
  if (binary) // every target counts: the mean over the global batch's labels
    run.denominator = double(labels.numel());
  else
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
