//===- ServingPlan.cpp - a serving plan's replicas on CPU ranks -----------===//
#include "hetplan/runtime/ServingPlan.h"

#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/PlanFile.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace hetplan {

using runtime::Tensor;

struct ServingPlan::Impl {
  struct Stage {
    std::vector<size_t> nodes;
    std::set<std::string> keep; // what later stages read, and graph outputs made so far
  };
  struct Replica {
    std::string description;
    std::vector<Stage> stages;
    int maxBatch = 1;
    double share = 0;
  };
  plan::Plan plan;
  std::unique_ptr<runtime::Model> model;
  std::unique_ptr<runtime::Executor> executor;
  std::vector<TensorInfo> inputs, outputs;
  std::vector<Replica> replicas;

  /// Values made by stage `s` from `values` (which it extends).
  void runStage(const Stage &s, std::map<std::string, Tensor> &values) const {
    std::map<std::string, Tensor> made = executor->runNodes(s.nodes, values, s.keep);
    for (auto &[name, t] : made) values[name] = std::move(t);
  }

  /// The graph outputs among `values` (those in `names`, all when empty).
  Status collect(std::map<std::string, Tensor> &values, std::map<std::string, Tensor> *out,
                 const std::vector<std::string> &names) const {
    out->clear();
    for (const TensorInfo &o : outputs)
      if (names.empty() || std::find(names.begin(), names.end(), o.name) != names.end()) {
        auto it = values.find(o.name);
        if (it == values.end())
          return {StatusCode::RuntimeError, "output '" + o.name + "' was not computed by any stage"};
        (*out)[o.name] = std::move(it->second);
      }
    return Status::OK();
  }

  /// One decode run through `r`'s stages in pipeline order, on this thread.
  Status run(const Replica &r, const std::map<std::string, Tensor> &in, std::map<std::string, Tensor> *out,
             const std::vector<std::string> &names) const {
    try {
      std::map<std::string, Tensor> values = in;
      for (const Stage &s : r.stages) runStage(s, values);
      return collect(values, out, names);
    } catch (const std::exception &e) {
      return {StatusCode::RuntimeError, e.what()};
    }
  }
};

namespace {
/// A replica's stages as a pipeline: one worker thread per stage (a rank),
/// each running its stage for whichever micro-batch group reaches it next,
/// so that while group A's step is in stage 1, group B's is in stage 0.
/// run() is called by the groups' generator threads concurrently.
class StagePipeline {
public:
  StagePipeline(const ServingPlan::Impl &impl, const ServingPlan::Impl::Replica &rep) : impl_(impl), rep_(rep) {
    queues_.resize(rep.stages.size());
    wake_ = std::vector<std::condition_variable>(rep.stages.size());
    for (size_t k = 0; k < rep.stages.size(); ++k) workers_.emplace_back([this, k] { work(k); });
  }
  ~StagePipeline() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    for (auto &w : wake_) w.notify_all();
    for (auto &t : workers_) t.join();
  }

  Status run(const std::map<std::string, Tensor> &in, std::map<std::string, Tensor> *out,
             const std::vector<std::string> &names) {
    Step step;
    step.values = in;
    push(0, &step);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return step.finished; });
    lock.unlock();
    if (!step.error.empty()) return {StatusCode::RuntimeError, step.error};
    return impl_.collect(step.values, out, names);
  }

private:
  struct Step {
    std::map<std::string, Tensor> values;
    std::string error;
    bool finished = false;
  };

  void push(size_t stage, Step *step) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queues_[stage].push_back(step);
    }
    wake_[stage].notify_one();
  }

  void work(size_t k) {
    for (;;) {
      Step *step = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_[k].wait(lock, [&] { return stopping_ || !queues_[k].empty(); });
        if (queues_[k].empty()) return; // stopping
        step = queues_[k].front();
        queues_[k].pop_front();
      }
      try {
        impl_.runStage(rep_.stages[k], step->values);
      } catch (const std::exception &e) {
        step->error = "stage " + std::to_string(k) + ": " + e.what();
      }
      if (step->error.empty() && k + 1 < rep_.stages.size()) {
        push(k + 1, step);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        step->finished = true;
      }
      done_.notify_all();
    }
  }

  const ServingPlan::Impl &impl_;
  const ServingPlan::Impl::Replica &rep_;
  std::mutex mutex_;
  std::vector<std::condition_variable> wake_; // one per stage's worker
  std::condition_variable done_;
  std::vector<std::deque<Step *>> queues_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};
} // namespace

namespace detail {
TensorInfo toInfo(const runtime::ValueInfo &v); // Session.cpp
} // namespace detail

namespace {
std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", share * 100);
  return buf;
}
} // namespace

ServingPlan::ServingPlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ServingPlan::~ServingPlan() = default;

int ServingPlan::replicas() const { return int(impl_->replicas.size()); }

std::string ServingPlan::describeReplica(int replica) const {
  return replica >= 0 && replica < replicas() ? impl_->replicas[size_t(replica)].description : "";
}

Status ServingPlan::load(const std::string &planPath, const std::string &modelPath,
                         std::unique_ptr<ServingPlan> *out) {
  if (!out) return {StatusCode::InvalidArgument, "plan is null"};
  auto impl = std::make_unique<Impl>();
  std::string error;
  if (!runtime::readPlan(planPath, impl->plan, error)) return {StatusCode::InvalidModel, error};
  const plan::Plan &p = impl->plan;
  if (p.settings().mode() != "serve" || !p.has_serving() || p.serving().replicas_size() == 0)
    return {StatusCode::InvalidArgument,
            planPath + ": not a serving plan (hetplan compile --mode serve makes one)"};
  if (!runtime::validatePlan(p, error)) return {StatusCode::InvalidModel, planPath + ": invalid plan: " + error};
  std::string path = modelPath;
  if (path.empty()) {
    path = runtime::planModelPath(planPath, p, "hetplan serve --model PATH", error);
    if (!error.empty()) return {StatusCode::NotFound, error};
  }
  try {
    impl->model = std::make_unique<runtime::Model>(runtime::loadModel(path, [&](const std::string &sha) {
      if (sha != p.model().sha256())
        throw std::runtime_error(path + ": model file changed since the plan was compiled; recompile the plan");
    }));
    impl->executor = std::make_unique<runtime::Executor>(*impl->model);
  } catch (const std::exception &e) {
    return {StatusCode::InvalidModel, e.what()};
  }
  std::vector<std::string> problems = impl->executor->check();
  if (!problems.empty()) return {StatusCode::Unsupported, path + ": " + problems.front()};
  const runtime::Model &m = *impl->model;
  size_t N = m.nodes.size();
  if (size_t(p.model().node_names_size()) != N)
    return {StatusCode::InvalidModel, path + ": the model has " + std::to_string(N) + " nodes, the plan " +
                                          std::to_string(p.model().node_names_size())};
  for (const auto &v : m.inputs) impl->inputs.push_back(detail::toInfo(v));
  for (const auto &v : m.outputs) impl->outputs.push_back(detail::toInfo(v));
  std::set<std::string> graphOutputs;
  for (const auto &o : m.outputs) graphOutputs.insert(o.name);

  for (const auto &r : p.serving().replicas()) {
    Impl::Replica rep;
    rep.maxBatch = int(std::max<uint32_t>(1, r.max_batch()));
    rep.share = r.share();
    std::string ranges;
    size_t next = 0;
    for (const auto &st : r.stages()) {
      if (st.first_node() != next || st.last_node() < st.first_node() || st.last_node() >= N)
        return {StatusCode::InvalidModel, planPath + ": replica " + std::to_string(r.index()) +
                                              ": its stages do not cover the model's nodes in order"};
      Impl::Stage s;
      for (size_t i = st.first_node(); i <= st.last_node(); ++i) s.nodes.push_back(i);
      next = st.last_node() + 1;
      ranges += (ranges.empty() ? "" : " | ") + std::to_string(st.first_node()) + "-" + std::to_string(st.last_node());
      rep.stages.push_back(std::move(s));
    }
    if (next != N)
      return {StatusCode::InvalidModel, planPath + ": replica " + std::to_string(r.index()) +
                                            ": its stages stop at node " + std::to_string(next) + " of " +
                                            std::to_string(N)};
    // What each stage hands on: values later stages read, graph outputs.
    for (size_t k = 0; k < rep.stages.size(); ++k) {
      rep.stages[k].keep = graphOutputs;
      for (size_t later = k + 1; later < rep.stages.size(); ++later)
        for (size_t i : rep.stages[later].nodes) {
          for (const auto &name : m.nodes[i].inputs)
            if (!name.empty()) rep.stages[k].keep.insert(name);
          for (const auto &name : m.nodes[i].implicitInputs) rep.stages[k].keep.insert(name);
        }
    }
    rep.description = "replica " + std::to_string(r.index()) + ": " + std::to_string(r.tensor_parallel()) + "x " +
                      r.device_type() + ", nodes " + ranges + ", max batch " + std::to_string(rep.maxBatch) +
                      ", share " + percent(rep.share);
    impl->replicas.push_back(std::move(rep));
  }
  out->reset(new ServingPlan(std::move(impl)));
  return Status::OK();
}

Status ServingPlan::generate(const std::vector<GenerateRequest> &requests, const GenerateOptions &options,
                             std::vector<GenerateResult> *results, std::vector<int> *replicaOf,
                             const std::function<void(size_t, const GenerateResult &)> &onDone) const {
  if (!results) return {StatusCode::InvalidArgument, "results is null"};
  if (options.maxBatch < 1) return {StatusCode::InvalidArgument, "maxBatch must be at least 1"};
  if (options.pipelineGroups < 0) return {StatusCode::InvalidArgument, "pipelineGroups must be 0 (one per stage) or more"};
  const Impl &impl = *impl_;
  size_t R = impl.replicas.size();
  // Smooth weighted round robin: each request goes to the replica furthest
  // behind its share (deterministic; shares of 0 get nothing while others
  // have a share).
  std::vector<std::vector<size_t>> routed(R);
  std::vector<double> credit(R, 0);
  double total = 0;
  for (const auto &r : impl.replicas) total += std::max(0.0, r.share);
  for (size_t i = 0; i < requests.size(); ++i) {
    size_t best = 0;
    for (size_t k = 0; k < R; ++k) {
      credit[k] += total > 0 ? std::max(0.0, impl.replicas[k].share) : 1.0;
      if (credit[k] > credit[best]) best = k;
    }
    credit[best] -= total > 0 ? total : double(R);
    routed[best].push_back(i);
  }
  results->assign(requests.size(), {});
  if (replicaOf) replicaOf->assign(requests.size(), -1);
  std::vector<Status> status(R);
  std::mutex doneMutex;
  std::vector<std::thread> threads;
  for (size_t k = 0; k < R; ++k) {
    if (routed[k].empty()) continue;
    threads.emplace_back([&, k] {
      const Impl::Replica &rep = impl.replicas[k];
      // Micro-batch groups in flight: one per stage unless asked otherwise
      // (a single stage has nothing to overlap), never more than requests.
      size_t S = rep.stages.size();
      // The planned max batch bounds the replica's KV cache: the groups
      // share it (and --max-batch caps it), so there are never more groups
      // than it allows requests.
      int cap = std::min(options.maxBatch, rep.maxBatch);
      size_t G = S < 2 ? 1 : options.pipelineGroups > 0 ? size_t(options.pipelineGroups) : S;
      G = std::max<size_t>(1, std::min({G, routed[k].size(), size_t(cap)}));
      std::unique_ptr<StagePipeline> pipeline;
      if (G > 1) pipeline = std::make_unique<StagePipeline>(impl, rep);
      Generator::RunFunction runOnce = [&impl, &rep, p = pipeline.get()](const std::map<std::string, Tensor> &in,
                                                                         std::map<std::string, Tensor> *out,
                                                                         const std::vector<std::string> &names) {
        return p ? p->run(in, out, names) : impl.run(rep, in, out, names);
      };
      std::unique_ptr<Generator> g;
      Status st = Generator::create(runOnce, impl.inputs, impl.outputs, &g);
      if (!st.ok()) {
        status[k] = st;
        return;
      }
      // Requests go to groups in turn.
      GenerateOptions o = options;
      o.maxBatch = std::max(1, cap / int(G));
      std::vector<std::vector<size_t>> mine(G); // indices into routed[k]
      for (size_t j = 0; j < routed[k].size(); ++j) mine[j % G].push_back(j);
      std::vector<Status> groupStatus(G);
      auto runGroup = [&](size_t q) {
        std::vector<GenerateRequest> reqs;
        for (size_t j : mine[q]) reqs.push_back(requests[routed[k][j]]);
        std::vector<GenerateResult> got;
        groupStatus[q] = g->generate(reqs, o, &got, [&](size_t j, const GenerateResult &r) {
          std::lock_guard<std::mutex> lock(doneMutex);
          if (onDone) onDone(routed[k][mine[q][j]], r);
        });
        if (!groupStatus[q].ok()) return;
        for (size_t j = 0; j < got.size(); ++j) {
          size_t i = routed[k][mine[q][j]];
          (*results)[i] = std::move(got[j]);
          if (replicaOf) (*replicaOf)[i] = int(k);
        }
      };
      std::vector<std::thread> groups;
      for (size_t q = 1; q < G; ++q) groups.emplace_back(runGroup, q);
      runGroup(0);
      for (auto &t : groups) t.join();
      for (const Status &gs : groupStatus)
        if (!gs.ok()) {
          status[k] = gs;
          return;
        }
    });
  }
  for (auto &t : threads) t.join();
  for (size_t k = 0; k < R; ++k)
    if (!status[k].ok()) return {status[k].code(), "replica " + std::to_string(k) + ": " + status[k].message()};
  return Status::OK();
}

} // namespace hetplan
