//===- PlanExecutor.cpp - runs an inference plan across ranks -------------===//
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanFile.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <chrono>

namespace hetplan::runtime {

namespace {

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

/// Rows [lo, lo + count) of dim 0, viewed (no copy).
Tensor sliceRows(const Tensor &t, int64_t lo, int64_t count) {
  if (t.rank() < 1) fail("cannot slice a scalar on dim 0");
  std::vector<int64_t> shape = t.shape();
  size_t row = shape[0] ? t.nbytes() / size_t(shape[0]) : 0;
  shape[0] = count;
  auto holder = std::make_shared<Tensor>(t);
  const char *base = static_cast<const char *>(t.raw());
  return Tensor::view(t.dtype(), shape, base ? base + row * size_t(lo) : nullptr, holder);
}

Tensor concatRows(const std::vector<Tensor> &parts) {
  if (parts.size() == 1) return parts[0];
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

const char kDummy[16] = {};

} // namespace

PlanExecutor::~PlanExecutor() = default;

std::unique_ptr<PlanExecutor> PlanExecutor::load(const std::string &planPath,
                                                 const std::string &modelPath) {
  plan::Plan p;
  std::string error;
  if (!readPlan(planPath, p, error)) fail(error);
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
  if (settings.mode() == "train")
    fail("executing training plans (backward, optimizer) is not supported yet; compile with --mode infer");
  if (settings.mode() != "infer") fail("unknown plan mode '" + settings.mode() + "'");
  for (const auto &st : plan_.stages())
    if (st.tensor_parallel() != 1)
      fail("stage " + std::to_string(st.index()) + " uses tensor parallelism (tp=" +
           std::to_string(st.tensor_parallel()) + "); executing tensor-parallel plans is not supported yet");
  for (const auto &r : plan_.ranks())
    for (const auto &ins : r.program())
      if (ins.kind() != plan::Instruction::FORWARD && ins.kind() != plan::Instruction::SEND_ACTIVATION &&
          ins.kind() != plan::Instruction::RECV_ACTIVATION)
        fail("rank " + std::to_string(r.rank()) + ": instruction " +
             plan::Instruction::Kind_Name(ins.kind()) + " in an inference plan");
  uint32_t M = settings.micro_batches();
  if (M == 0 || settings.global_batch() <= 0 || settings.global_batch() % M != 0)
    fail("global batch " + std::to_string(settings.global_batch()) + " does not split into " +
         std::to_string(M) + " micro-batches");
  microBatch_ = settings.global_batch() / M;
  if (plan_.stages_size() == 0) fail("the plan has no stages");

  // The model, and that it is the file the plan was compiled from.
  std::string path = modelPath.empty() ? plan_.model().path() : modelPath;
  std::string sha = fileSha256(path);
  if (sha != plan_.model().sha256())
    fail(path + ": model file changed since the plan was compiled (sha256 " + sha.substr(0, 16) +
         "..., the plan has " + plan_.model().sha256().substr(0, 16) + "...); recompile the plan");
  model_ = std::make_unique<Model>(loadModel(path));
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
  std::set<std::string> batched = graphInputs;
  for (size_t i = 0; i < N; ++i) {
    const Node &n = m.nodes[i];
    bool anyBatched = false;
    for (const auto &s : n.inputs) {
      if (s.empty()) continue;
      if (!producer.count(s) && !graphInputs.count(s) && !m.initializers.count(s))
        fail(path + ": " + n.describe() + " reads '" + s + "' before it is produced (the nodes are not in topological order)");
      anyBatched |= batched.count(s) != 0;
    }
    bool shapeOnly = n.opType == "Shape" || n.opType == "Size";
    for (const auto &o : n.outputs) {
      if (o.empty()) continue;
      producer[o] = i;
      if (anyBatched && !shapeOnly) batched.insert(o);
    }
  }
  std::map<std::string, size_t> lastConsumer;
  for (size_t i = 0; i < N; ++i)
    for (const auto &s : m.nodes[i].inputs)
      if (!s.empty()) lastConsumer[s] = i;

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
      for (const auto &u : m.nodes[p].inputs) {
        if (u.empty() || m.initializers.count(u) || graphInputs.count(u)) continue;
        if (batched.count(u)) shapes.insert(u); // read by Shape/Size only
        else work.push_back(u);
      }
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

  // Programs: one FORWARD per micro-batch over the stage's nodes, and the
  // sends and receives the workers' sample ranges call for.
  for (const auto &r : plan_.ranks()) {
    if (isIdleRank(plan_, r.rank())) continue;
    const auto &st = plan_.stages(int(r.stage()));
    const auto &self = st.workers(int(r.worker()));
    std::string who = "rank " + std::to_string(r.rank()) + ": ";
    std::vector<int> forwards(M, 0);
    std::set<std::pair<uint32_t, uint32_t>> sends, recvs, wantSends, wantRecvs;
    for (const auto &ins : r.program()) {
      if (ins.kind() == plan::Instruction::FORWARD) {
        if (ins.first_node() != st.first_node() || ins.last_node() != st.last_node())
          fail(who + "FORWARD over nodes " + std::to_string(ins.first_node()) + ".." +
               std::to_string(ins.last_node()) + " is not its stage's range");
        forwards[ins.micro_batch()]++;
      } else {
        if (ins.peers_size() < 1) fail(who + "transfer without a peer");
        (ins.kind() == plan::Instruction::SEND_ACTIVATION ? sends : recvs).insert({ins.micro_batch(), ins.peers(0)});
      }
    }
    for (uint32_t mb = 0; mb < M; ++mb) {
      if (forwards[mb] != 1)
        fail(who + "the program has " + std::to_string(forwards[mb]) + " FORWARD instructions for micro-batch " +
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
    if (sends != wantSends) fail(who + "its SEND_ACTIVATION instructions do not match the next stage's sample ranges");
    if (recvs != wantRecvs) fail(who + "its RECV_ACTIVATION instructions do not match the previous stage's sample ranges");
  }
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
  for (const auto &[name, t] : inputs) {
    bool known = std::any_of(model_->inputs.begin(), model_->inputs.end(),
                             [&](const ValueInfo &v) { return v.name == name; });
    if (!known) fail("the model has no input '" + name + "'");
  }
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
} // namespace

PlanExecutor::OutputPieces PlanExecutor::runRank(Communicator &comm,
                                                 const std::map<std::string, Tensor> &inputs,
                                                 RankTiming *timing) const {
  OutputPieces pieces;
  if (timing) {
    timing->nodeSeconds.assign(model_->nodes.size(), 0.0);
    timing->nodeSamples.assign(model_->nodes.size(), 0);
    timing->forwardSeconds.assign(plan_.settings().micro_batches(), 0.0);
  }
  uint32_t me = uint32_t(comm.rank());
  if (isIdleRank(plan_, me)) return pieces;
  const auto &rank = plan_.ranks(int(me));
  size_t j = rank.stage(), S = size_t(plan_.stages_size());
  const auto &st = plan_.stages(int(j));
  const auto &self = st.workers(int(rank.worker()));
  int64_t off = self.sample_offset(), n = self.samples();
  std::string who = "rank " + std::to_string(me) + " (stage " + std::to_string(j) + "): ";
  const StageIO *in = j > 0 ? &io_[j] : nullptr;
  const StageIO *out = j + 1 < S ? &io_[j + 1] : nullptr;

  std::vector<size_t> nodes;
  for (size_t i = st.first_node(); i <= st.last_node(); ++i) nodes.push_back(i);
  std::set<std::string> keep;
  if (out) keep.insert(out->received.begin(), out->received.end());
  else keep = graphOutputs_;

  auto workerOf = [&](const plan::Stage &s, uint32_t r) -> const plan::Worker & {
    for (const auto &w : s.workers())
      if (w.ranks(0) == r) return w;
    fail(who + "rank " + std::to_string(r) + " is no worker of stage " + std::to_string(s.index()));
  };
  struct Received { std::vector<Tensor> data, shapes; };
  std::map<uint32_t, std::map<int64_t, Received>> pending; // mb -> sender offset -> data
  struct Produced {
    std::map<std::string, Tensor> values;
    std::map<std::string, std::vector<int64_t>> perSample; // shapes to pass on
  };
  std::map<uint32_t, Produced> outbox;

  auto receive = [&](uint32_t mb, uint32_t peer) {
    const auto &w = workerOf(plan_.stages(int(j - 1)), peer);
    Received r;
    for (size_t i = 0; i < in->received.size(); ++i) r.data.push_back(comm.recv(int(peer), dataTag(mb, i)));
    for (size_t i = 0; i < in->shapes.size(); ++i) r.shapes.push_back(comm.recv(int(peer), shapeTag(mb, i)));
    pending[mb][w.sample_offset()] = std::move(r);
  };

  auto forward = [&](uint32_t mb) {
    std::map<std::string, Tensor> values;
    int64_t base = int64_t(mb) * microBatch_ + off;
    for (const auto &gi : model_->inputs) values[gi.name] = sliceRows(inputs.at(gi.name), base, n);
    std::map<std::string, std::vector<int64_t>> perSample;
    if (in) {
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
        if (t.rank() < 1 || t.dim(0) != n)
          fail(who + "received '" + in->received[i] + "' " + t.describe() + ", expected " + std::to_string(n) + " samples");
        values[in->received[i]] = std::move(t);
      }
      const Received &first = got.begin()->second;
      std::vector<std::string> fakes;
      for (size_t i = 0; i < in->shapes.size(); ++i) {
        std::vector<int64_t> s = first.shapes[i].toInt64Vector();
        perSample[in->shapes[i]] = s;
        if (!values.count(in->shapes[i])) {
          std::vector<int64_t> full = {n};
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
        auto meta = executor_->runNodes(in->metaNodes, values, metaKeep);
        for (auto &[k, v] : meta) values[k] = std::move(v);
      }
      for (const auto &f : fakes) values.erase(f);
    }
    std::map<std::string, std::vector<int64_t>> shapes;
    std::set<std::string> keepAll = keep;
    if (out)
      for (const auto &s : out->shapes) keepAll.insert(s);
    std::map<std::string, Tensor> result;
    if (timing) {
      TimingObserver observer(*timing, n);
      auto t0 = std::chrono::steady_clock::now();
      result = executor_->runNodes(nodes, std::move(values), keepAll, &shapes, &observer);
      auto t1 = std::chrono::steady_clock::now();
      if (mb < timing->forwardSeconds.size())
        timing->forwardSeconds[mb] += std::chrono::duration<double>(t1 - t0).count();
    } else {
      result = executor_->runNodes(nodes, std::move(values), keepAll, &shapes);
    }
    Produced p;
    if (out) {
      for (const auto &s : out->shapes) {
        auto it = shapes.find(s);
        std::vector<int64_t> full;
        if (it != shapes.end()) full = it->second;
        else if (perSample.count(s)) { full = {n}; full.insert(full.end(), perSample[s].begin(), perSample[s].end()); }
        else if (result.count(s)) full = result[s].shape();
        else fail(who + "does not know the shape of '" + s + "'");
        if (full.empty() || full[0] != n)
          fail(who + "value '" + s + "' has shape " + shapeString(full) + ": dim 0 is not the batch (" +
               std::to_string(n) + " samples); plans cannot cut the graph there");
        p.perSample[s] = std::vector<int64_t>(full.begin() + 1, full.end());
      }
      for (const auto &v : out->received) {
        auto it = result.find(v);
        if (it == result.end()) fail(who + "value '" + v + "' was not produced");
        if (it->second.rank() < 1 || it->second.dim(0) != n)
          fail(who + "value '" + v + "' is " + it->second.describe() + ": dim 0 is not the batch (" +
               std::to_string(n) + " samples); plans cannot cut the graph there");
        p.values[v] = it->second;
      }
      outbox[mb] = std::move(p);
    } else {
      auto &mine = pieces[{mb, rank.worker()}];
      for (const auto &o : graphOutputs_) {
        auto it = result.find(o);
        if (it == result.end()) fail(who + "graph output '" + o + "' was not produced");
        mine[o] = it->second;
      }
    }
  };

  auto send = [&](uint32_t mb, uint32_t peer) {
    auto it = outbox.find(mb);
    if (it == outbox.end()) fail(who + "SEND_ACTIVATION for micro-batch " + std::to_string(mb) + " before its FORWARD");
    const auto &w = workerOf(plan_.stages(int(j + 1)), peer);
    int64_t lo = std::max(off, w.sample_offset());
    int64_t hi = std::min(off + n, w.sample_offset() + w.samples());
    for (size_t i = 0; i < out->received.size(); ++i)
      comm.send(int(peer), dataTag(mb, i), sliceRows(it->second.values.at(out->received[i]), lo - off, hi - lo));
    for (size_t i = 0; i < out->shapes.size(); ++i) {
      const auto &s = it->second.perSample.at(out->shapes[i]);
      Tensor t(DType::Int64, {int64_t(s.size())});
      std::copy(s.begin(), s.end(), t.data<int64_t>());
      comm.send(int(peer), shapeTag(mb, i), t);
    }
  };

  for (const auto &ins : rank.program()) {
    switch (ins.kind()) {
    case plan::Instruction::RECV_ACTIVATION:
      receive(ins.micro_batch(), ins.peers(0));
      break;
    case plan::Instruction::FORWARD:
      forward(ins.micro_batch());
      break;
    case plan::Instruction::SEND_ACTIVATION:
      send(ins.micro_batch(), ins.peers(0));
      break;
    default:
      fail(who + "unexpected instruction " + plan::Instruction::Kind_Name(ins.kind()));
    }
  }
  return pieces;
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
        if (t->rank() < 1 || t->dim(0) != last.workers(int(w)).samples())
          fail("output '" + name + "' is " + t->describe() + ": dim 0 is not the batch; outputs without a batch dim are not supported");
        parts.push_back(*t);
      }
    out[name] = concatRows(parts);
  }
  return out;
}

std::map<std::string, Tensor> PlanExecutor::run(const std::map<std::string, Tensor> &inputs,
                                                StepTiming *timing) const {
  checkInputs(inputs);
  int R = ranks();
  if (timing) timing->ranks.assign(size_t(R), RankTiming{});
  auto start = std::chrono::steady_clock::now();
  ThreadCommGroup group(R);
  std::vector<OutputPieces> pieces(R);
  std::mutex mutex;
  std::string firstError, abortError;
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      Communicator &comm = group.communicator(r);
      try {
        pieces[r] = runRank(comm, inputs, timing ? &timing->ranks[size_t(r)] : nullptr);
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
  if (timing)
    timing->wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!firstError.empty()) fail(firstError);
  if (!abortError.empty()) fail(abortError);
  return gatherOutputs(pieces);
}

} // namespace hetplan::runtime
