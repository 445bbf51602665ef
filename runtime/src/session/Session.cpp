//===- Session.cpp - the embedding API over the Executor and PlanExecutor --===//
#include "hetplan/runtime/Session.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Json.h"
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/MpiCommunicator.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/RankBackend.h"
#include "hetplan/runtime/Rebalance.h"
#include "hetplan/runtime/RunPlan.h"
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
#include "hetplan/runtime/CudaBackend.h"
#endif
#include "../cpu/kernels/KernelUtil.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iterator>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <unistd.h>
#ifdef HETPLAN_HAVE_OPENMP
#include <omp.h>
#endif

namespace hetplan {

using runtime::DType;
using runtime::Tensor;

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok: return "Ok";
  case StatusCode::InvalidArgument: return "InvalidArgument";
  case StatusCode::NotFound: return "NotFound";
  case StatusCode::InvalidModel: return "InvalidModel";
  case StatusCode::Unsupported: return "Unsupported";
  case StatusCode::RuntimeError: return "RuntimeError";
  case StatusCode::OutOfMemory: return "OutOfMemory";
  case StatusCode::NotImplemented: return "NotImplemented";
  case StatusCode::Internal: return "Internal";
  }
  return "Unknown";
}

std::string Status::toString() const {
  return ok() ? std::string("Ok") : std::string(statusCodeName(code_)) + ": " + message_;
}

namespace detail {

using Clock = std::chrono::steady_clock;

/// What one run timed (SessionOptions::profiling), merged into the
/// session's Profiler after the run.
struct RunTrace {
  struct Event {          // a Chrome trace "X" (complete) event
    std::string name, cat, op;
    Clock::time_point start;
    double seconds;
    int tid;
  };
  struct NodeTime {
    std::string name, op;
    double seconds;
    int64_t calls;
  };
  std::vector<Event> events;
  std::vector<NodeTime> nodes;
};

/// A small id per thread that runs kernels (the trace's tid).
int traceThreadId() {
  static std::atomic<int> next{1000};
  thread_local int id = next++;
  return id;
}

/// Kernel threads of the calling thread for its lifetime (0: leave them):
/// the runtime's parallel loops (cpu::kernelThreadsOverride) and, with
/// OpenMP, the team oneDNN's GEMM/Conv use.
class ThreadSetting {
public:
  explicit ThreadSetting(int threads) : threads_(threads) {
    if (threads_ <= 0) return;
    previous_ = runtime::cpu::kernelThreadsOverride();
    runtime::cpu::kernelThreadsOverride() = threads_;
#ifdef HETPLAN_HAVE_OPENMP
    previousOmp_ = omp_get_max_threads();
    omp_set_num_threads(threads_);
#endif
  }
  ~ThreadSetting() {
    if (threads_ <= 0) return;
    runtime::cpu::kernelThreadsOverride() = previous_;
#ifdef HETPLAN_HAVE_OPENMP
    omp_set_num_threads(previousOmp_);
#endif
  }
  ThreadSetting(const ThreadSetting &) = delete;
  ThreadSetting &operator=(const ThreadSetting &) = delete;

private:
  int threads_, previous_ = 0, previousOmp_ = 0;
};

/// What a Session runs: the whole model on the CPU Executor (or one GPU),
/// or a plan's ranks on the PlanExecutor.
class SessionBackend {
public:
  virtual ~SessionBackend() = default;
  virtual const std::string &source() const = 0;
  virtual const std::vector<TensorInfo> &inputs() const = 0;
  virtual const std::vector<TensorInfo> &outputs() const = 0;
  /// Checks beyond names, types and declared shapes (a plan's batch):
  /// one line, or "" when the inputs can run.
  virtual std::string validate(const std::map<std::string, Tensor> &) const { return ""; }
  /// Inputs are already validated against inputs(). May throw. `trace`,
  /// when given, receives what the run timed.
  virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs,
                                            RunTrace *trace) const = 0;
  /// True when `t`'s bytes may belong to the model (weights) or another
  /// owner the caller must not write through.
  virtual bool sharesModelMemory(const Tensor &t) const = 0;
  virtual int ranks() const { return 1; }
  virtual int processRank() const { return -1; }
  /// The rebalancing lines so far (SessionOptions::rebalanceThreshold).
  virtual std::vector<std::string> rebalances() const { return {}; }
};

/// A graph input or output as the public API describes it (also used by
/// ServingPlan.cpp).
TensorInfo toInfo(const runtime::ValueInfo &v) {
  TensorInfo t;
  t.name = v.name;
  t.dtype = v.dtype;
  t.hasShape = v.hasShape;
  t.shape = v.shape;
  return t;
}

namespace {

bool overlaps(const Tensor &a, const Tensor &b) {
  if (!a.raw() || !b.raw() || !a.nbytes() || !b.nbytes()) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a.raw()), b0 = reinterpret_cast<uintptr_t>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}


class ModelBackend final : public SessionBackend {
public:
  // The Executor keeps a reference to the Model: both live here, immutable.
  ModelBackend(runtime::Model model, int threads)
      : model_(std::move(model)), executor_(model_), threads_(threads) {
    for (const auto &v : model_.inputs) inputs_.push_back(toInfo(v));
    for (const auto &v : model_.outputs) outputs_.push_back(toInfo(v));
    // The model's bytes (initializers, Constant nodes' values) as sorted,
    // disjoint address ranges, so sharesModelMemory is a binary search.
    auto add = [&](const Tensor &w) {
      if (!w.raw() || !w.nbytes()) return;
      auto b = reinterpret_cast<uintptr_t>(w.raw());
      spans_.emplace_back(b, b + w.nbytes());
    };
    for (const auto &[name, w] : model_.initializers) add(w);
    for (const auto &n : model_.nodes)
      for (const auto &[name, a] : n.attrs)
        if (a.kind == runtime::Attribute::TensorKind) add(a.t);
    std::sort(spans_.begin(), spans_.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (const auto &sp : spans_)
      if (!merged.empty() && sp.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, sp.second);
      else
        merged.push_back(sp);
    spans_ = std::move(merged);
  }
  std::vector<std::string> check() const { return executor_.check(); }
  const std::string &source() const override { return model_.path; }
  const std::vector<TensorInfo> &inputs() const override { return inputs_; }
  const std::vector<TensorInfo> &outputs() const override { return outputs_; }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs,
                                    RunTrace *trace) const override {
    ThreadSetting setting(threads_);
    if (!trace) return executor_.run(inputs);
    // Each kernel call as a trace event: it ended when the observer hears of it.
    struct Observer final : runtime::ExecutionObserver {
      const runtime::Model &model;
      RunTrace &trace;
      int tid = traceThreadId();
      Observer(const runtime::Model &m, RunTrace &t) : model(m), trace(t) {}
      void nodeRan(size_t node, double seconds) override {
        auto end = Clock::now();
        const runtime::Node &n = model.nodes[node];
        std::string name = n.name.empty() ? n.opType + "#" + std::to_string(node) : n.name;
        auto start = end - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        trace.events.push_back({name, "node", n.opType, start, seconds, tid});
        trace.nodes.push_back({name, n.opType, seconds, 1});
      }
    } observer(model_, *trace);
    return executor_.run(inputs, &observer);
  }
  bool sharesModelMemory(const Tensor &t) const override {
    if (t.isView()) return true;
    if (!t.raw() || !t.nbytes()) return false;
    auto b = reinterpret_cast<uintptr_t>(t.raw()), e = b + t.nbytes();
    // The last range starting before t's end overlaps t iff it ends after t's start.
    auto it = std::lower_bound(spans_.begin(), spans_.end(), e,
                               [](const std::pair<uintptr_t, uintptr_t> &sp, uintptr_t v) { return sp.first < v; });
    return it != spans_.begin() && std::prev(it)->second > b;
  }

private:
  const runtime::Model model_;
  const runtime::Executor executor_;
  const int threads_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_; // model memory [begin, end), disjoint, sorted
};

#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
/// The whole model on one GPU (SessionOptions::device = Cuda). CudaExecutor
/// serializes its runs (one stream, one cuBLAS handle); outputs are host
/// copies, so nothing they hold belongs to the model.
class CudaModelBackend final : public SessionBackend {
public:
  explicit CudaModelBackend(runtime::Model model)
      : model_(std::move(model)), executor_(std::make_unique<runtime::CudaExecutor>(model_)) {
    for (const auto &v : model_.inputs) inputs_.push_back(toInfo(v));
    for (const auto &v : model_.outputs) outputs_.push_back(toInfo(v));
  }
  std::vector<std::string> check() const { return executor_->check(); }
  void prepare() { executor_->prepare(); }
  const std::string &source() const override { return model_.path; }
  const std::vector<TensorInfo> &inputs() const override { return inputs_; }
  const std::vector<TensorInfo> &outputs() const override { return outputs_; }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs,
                                    RunTrace *) const override {
    return executor_->run(inputs);
  }
  bool sharesModelMemory(const Tensor &t) const override { return t.isView(); }

private:
  const runtime::Model model_;
  std::unique_ptr<runtime::CudaExecutor> executor_;
  std::vector<TensorInfo> inputs_, outputs_;
};
#endif

/// A compiled inference plan on the PlanExecutor: every rank a thread of
/// this process (a fresh ThreadCommGroup per run, so runs are concurrent),
/// or this process's rank of an MPI job (runs serialized and collective).
class PlanBackend final : public SessionBackend {
public:
  PlanBackend(std::unique_ptr<runtime::PlanExecutor> exec, std::string planPath, int threads, bool mpi)
      : exec_(std::move(exec)), path_(std::move(planPath)), threads_(threads) {
    for (const auto &v : exec_->model().inputs) {
      inputs_.push_back(toInfo(v));
      // The shape the plan was compiled for (global batch, bound dims):
      // PlanExecutor::checkInputs takes no other.
      for (const auto &io : exec_->plan().settings().inputs())
        if (io.name() == v.name && !io.dims().empty()) {
          inputs_.back().hasShape = true;
          inputs_.back().shape.assign(io.dims().begin(), io.dims().end());
        }
    }
    for (const auto &v : exec_->model().outputs) outputs_.push_back(toInfo(v));
    const auto &names = exec_->plan().model().node_names();
    for (size_t i = 0; i < exec_->model().nodes.size(); ++i) {
      const runtime::Node &n = exec_->model().nodes[i];
      nodeNames_.push_back(i < size_t(names.size()) ? names[int(i)]
                                                    : (n.name.empty() ? n.opType + "#" + std::to_string(i) : n.name));
    }
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
    if (mpi) {
      comm_ = std::make_unique<runtime::MpiCommunicator>();
      if (comm_->size() != exec_->ranks())
        throw std::invalid_argument(path_ + ": the plan has " + std::to_string(exec_->ranks()) +
                                    " ranks, the MPI job has " + std::to_string(comm_->size()) +
                                    " processes (start it with mpirun -np " +
                                    std::to_string(exec_->ranks()) + ")");
    }
#else
    if (mpi)
      throw std::invalid_argument(path_ + ": MPI ranks were asked for, but this hetplan runtime was "
                                          "built without MPI (install libopenmpi-dev and rebuild)");
#endif
  }
  const std::string &source() const override { return path_; }
  const std::vector<TensorInfo> &inputs() const override { return inputs_; }
  const std::vector<TensorInfo> &outputs() const override { return outputs_; }
  int ranks() const override { return exec_->ranks(); }
  int processRank() const override {
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
    if (comm_) return comm_->rank();
#endif
    return -1;
  }
  std::string validate(const std::map<std::string, Tensor> &inputs) const override {
    try {
      exec_->checkInputs(inputs);
      return "";
    } catch (const std::exception &e) {
      return e.what();
    }
  }
  bool sharesModelMemory(const Tensor &t) const override { return t.isView(); }

  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs,
                                    RunTrace *trace) const override {
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
    if (comm_) return runMpi(inputs, trace);
#endif
    const int R = exec_->ranks();
    // A move of shares waits for the runs in flight (they read the plan).
    std::shared_lock<std::shared_mutex> shares(sharesMutex_);
    uint64_t version = version_;
    bool timed = trace || rebalancer_;
    std::vector<runtime::PlanExecutor::OutputPieces> pieces(static_cast<size_t>(R));
    std::vector<runtime::PlanExecutor::RankTiming> timing(timed ? static_cast<size_t>(R) : 0);
    std::vector<Clock::time_point> began(static_cast<size_t>(R)), ended(static_cast<size_t>(R));
    runtime::RankThreadsOutcome outcome = runtime::runRankThreads(R, [&](runtime::Communicator &comm) {
      size_t r = size_t(comm.rank());
      ThreadSetting setting(threads_);
      began[r] = Clock::now();
      pieces[r] = exec_->runRank(comm, inputs, timed ? &timing[r] : nullptr);
      ended[r] = Clock::now();
    });
    // The rank that failed first, not the ranks it aborted.
    if (outcome.firstRank >= 0)
      throw std::runtime_error("rank " + std::to_string(outcome.firstRank) + ": " + outcome.firstError);
    if (outcome.aborted) throw std::runtime_error(path_ + ": a rank was aborted");
    if (trace)
      for (int r = 0; r < R; ++r) record(*trace, r, began[size_t(r)], ended[size_t(r)], timing[size_t(r)]);
    auto outputs = exec_->gatherOutputs(pieces);
    shares.unlock();
    if (rebalancer_) rebalanceAfter(std::move(timing), version);
    return outputs;
  }

  /// SessionOptions::rebalanceThreshold > 0 (in-process ranks only).
  void enableRebalance(const runtime::RebalanceOptions &options) {
    rebalancer_ = std::make_unique<runtime::Rebalancer>(exec_->plan(), options);
  }
  std::vector<std::string> rebalances() const override {
    std::lock_guard<std::mutex> lock(rebalanceMutex_);
    return log_;
  }

private:
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
  std::map<std::string, Tensor> runMpi(const std::map<std::string, Tensor> &inputs, RunTrace *trace) const {
    std::lock_guard<std::mutex> lock(mpiMutex_); // one collective step at a time
    ThreadSetting setting(threads_);
    runtime::PlanExecutor::RankTiming timing;
    auto began = Clock::now();
    try {
      auto mine = exec_->runRank(*comm_, inputs, trace ? &timing : nullptr);
      auto ended = Clock::now();
      // Every process assembles the whole outputs (under its own tag: the
      // session's runs only use this communicator).
      auto all = runtime::gatherOutputPieces(*comm_, std::move(mine), -1, runtime::kGatherTagBase + 7);
      if (trace) record(*trace, comm_->rank(), began, ended, timing);
      return exec_->gatherOutputs(all);
    } catch (const std::exception &e) {
      // The other processes may wait on this one forever: end the job, as
      // `hetplan run` under mpirun does (inputs were checked alike on every rank).
      std::fprintf(stderr, "hetplan: error: %s: rank %d: %s\n", path_.c_str(), comm_->rank(), e.what());
      comm_->abort(e.what());
    }
  }
  std::unique_ptr<runtime::MpiCommunicator> comm_;
  mutable std::mutex mpiMutex_;
#endif

  /// One event per rank (its step) and its nodes' summed times.
  void record(RunTrace &trace, int rank, Clock::time_point began, Clock::time_point ended,
              const runtime::PlanExecutor::RankTiming &t) const {
    double seconds = std::chrono::duration<double>(ended - began).count();
    trace.events.push_back({"rank " + std::to_string(rank) + " step", "rank", "", began, seconds, rank});
    for (size_t i = 0; i < t.nodeSeconds.size() && i < nodeNames_.size(); ++i)
      if (t.nodeSamples[i] > 0)
        trace.nodes.push_back({nodeNames_[i], exec_->model().nodes[i].opType, t.nodeSeconds[i], 1});
  }

  /// Stragglers (docs/runtime.md): a run's measured compute times, unless
  /// the shares moved since it started; moves take the shares exclusively.
  void rebalanceAfter(std::vector<runtime::PlanExecutor::RankTiming> timing, uint64_t version) const {
    runtime::PlanExecutor::StepTiming step;
    step.ranks = std::move(timing);
    std::lock_guard<std::mutex> lock(rebalanceMutex_);
    if (version != version_) return;
    auto events = rebalancer_->observe(exec_->plan(), runtime::rankComputeSeconds(exec_->plan(), step), ++runs_);
    if (events.empty()) return;
    std::unique_lock<std::shared_mutex> exclusive(sharesMutex_);
    for (auto &e : events) {
      e.refused = exec_->setShares(e.stage, e.newShares);
      log_.push_back(e.describe());
      std::fprintf(stderr, "hetplan: %s: %s\n", path_.c_str(), log_.back().c_str());
    }
    ++version_;
  }
  std::unique_ptr<runtime::Rebalancer> rebalancer_;
  mutable std::shared_mutex sharesMutex_;
  mutable std::mutex rebalanceMutex_;
  mutable uint64_t version_ = 0;
  mutable int runs_ = 0;
  mutable std::vector<std::string> log_;

  std::unique_ptr<runtime::PlanExecutor> exec_;
  std::string path_;
  int threads_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<std::string> nodeNames_;
};

bool fileReadable(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return f.good();
}

std::string joinLines(const std::vector<std::string> &lines) {
  std::string out;
  for (const auto &l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

} // namespace
} // namespace detail

/// What a profiling session timed since creation or the last endProfiling.
struct Session::Profiler {
  std::string prefix;
  std::mutex mutex;
  detail::Clock::time_point origin = detail::Clock::now();
  std::vector<detail::RunTrace::Event> events;
  struct Total {
    std::string op;
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Total> nodes;
  int64_t runs = 0;

  void merge(detail::RunTrace &trace, detail::Clock::time_point start, detail::Clock::time_point end) {
    std::lock_guard<std::mutex> lock(mutex);
    ++runs;
    events.push_back({"run", "session", "", start, std::chrono::duration<double>(end - start).count(),
                      detail::traceThreadId()});
    for (auto &e : trace.events) events.push_back(std::move(e));
    for (const auto &n : trace.nodes) {
      Total &t = nodes[n.name];
      t.op = n.op;
      t.seconds += n.seconds;
      t.calls += n.calls;
    }
  }
};

namespace json = runtime::json;

Session::Session(std::unique_ptr<detail::SessionBackend> backend, const SessionOptions &options)
    : backend_(std::move(backend)) {
  if (options.profiling) {
    profiler_ = std::make_unique<Profiler>();
    profiler_->prefix = options.profilePrefix.empty() ? "hetplan_profile" : options.profilePrefix;
  }
}
Session::~Session() = default;

const std::string &Session::source() const { return backend_->source(); }
const std::vector<TensorInfo> &Session::inputs() const { return backend_->inputs(); }
const std::vector<TensorInfo> &Session::outputs() const { return backend_->outputs(); }
bool Session::isPlan() const { return dynamic_cast<const detail::PlanBackend *>(backend_.get()) != nullptr; }
int Session::ranks() const { return backend_->ranks(); }
std::vector<std::string> Session::rebalances() const { return backend_->rebalances(); }
int Session::processRank() const { return backend_->processRank(); }

Status Session::endProfiling(std::string *path) {
  if (!path) return {StatusCode::InvalidArgument, "endProfiling: null path pointer"};
  path->clear();
  if (!profiler_)
    return {StatusCode::InvalidArgument,
            backend_->source() + ": profiling is off (create the session with SessionOptions::profiling)"};
  Profiler &p = *profiler_;
  std::lock_guard<std::mutex> lock(p.mutex);
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &tm);
  std::string file = p.prefix + "_" + std::to_string(::getpid()) + "_" + stamp + ".json";
  std::ostringstream os;
  const int pid = ::getpid();
  os << "{\"traceEvents\":[";
  bool first = true;
  for (const auto &e : p.events) {
    double ts = std::chrono::duration<double, std::micro>(e.start - p.origin).count();
    os << (first ? "\n" : ",\n") << "{\"name\":" << json::quoted(e.name) << ",\"cat\":" << json::quoted(e.cat)
       << ",\"ph\":\"X\",\"ts\":" << json::number(ts, "%.9g") << ",\"dur\":" << json::number(e.seconds * 1e6, "%.9g")
       << ",\"pid\":" << pid << ",\"tid\":" << e.tid;
    if (!e.op.empty()) os << ",\"args\":{\"op_type\":" << json::quoted(e.op) << "}";
    os << "}";
    first = false;
  }
  os << "\n],\n\"displayTimeUnit\":\"ms\",\n\"hetplan\":{\"source\":" << json::quoted(backend_->source())
     << ",\"plan\":" << (isPlan() ? "true" : "false") << ",\"ranks\":" << ranks()
     << ",\"runs\":" << p.runs << ",\"nodes\":[";
  // Slowest first: where the time went.
  std::vector<std::pair<std::string, Profiler::Total>> nodes(p.nodes.begin(), p.nodes.end());
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const auto &a, const auto &b) { return a.second.seconds > b.second.seconds; });
  first = true;
  for (const auto &[name, t] : nodes) {
    os << (first ? "\n" : ",\n") << "{\"name\":" << json::quoted(name) << ",\"op_type\":" << json::quoted(t.op)
       << ",\"calls\":" << t.calls << ",\"total_s\":" << json::number(t.seconds, "%.9g") << "}";
    first = false;
  }
  os << "\n]}}\n";
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << os.str();
  out.close();
  if (!out) return {StatusCode::RuntimeError, file + ": cannot write the profile"};
  p.events.clear();
  p.nodes.clear();
  p.runs = 0;
  p.origin = detail::Clock::now();
  *path = file;
  return Status::OK();
}

Status Session::fromModel(const std::string &path, std::unique_ptr<Session> *session,
                          const SessionOptions &options) {
  if (!session) return {StatusCode::InvalidArgument, "Session::fromModel: null session pointer"};
  session->reset();
  if (options.threads < 0)
    return {StatusCode::InvalidArgument, "SessionOptions::threads is " + std::to_string(options.threads) +
                                             " (0 for the default, else the threads per run)"};
  if (!detail::fileReadable(path)) return {StatusCode::NotFound, path + ": cannot open the model file"};
  try {
    std::unique_ptr<detail::SessionBackend> backend;
    std::vector<std::string> problems;
    if (options.device == Device::Cuda) {
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
      auto cuda = std::make_unique<detail::CudaModelBackend>(runtime::loadModel(path));
      if (options.checkAtLoad) problems = cuda->check();
      if (problems.empty()) {
        try {
          cuda->prepare();
        } catch (const std::exception &e) {
          return {StatusCode::Unsupported, path + ": device cuda: " + e.what()};
        }
      }
      backend = std::move(cuda);
#else
      return {StatusCode::Unsupported, path + ": device cuda: this hetplan runtime was built without "
                                              "CUDA (configure with a CUDA toolkit in /usr/local/cuda)"};
#endif
    } else {
      auto cpu = std::make_unique<detail::ModelBackend>(runtime::loadModel(path), options.threads);
      if (options.checkAtLoad) problems = cpu->check();
      backend = std::move(cpu);
    }
    if (!problems.empty()) return {StatusCode::Unsupported, detail::joinLines(problems)};
    session->reset(new Session(std::move(backend), options));
    return Status::OK();
  } catch (const std::bad_alloc &) {
    return {StatusCode::OutOfMemory, path + ": out of memory while loading the model"};
  } catch (const std::exception &e) {
    return {StatusCode::InvalidModel, e.what()};
  }
}

Status Session::fromPlan(const std::string &path, std::unique_ptr<Session> *session,
                         const SessionOptions &options) {
  if (!session) return {StatusCode::InvalidArgument, "Session::fromPlan: null session pointer"};
  session->reset();
  if (options.threads < 0)
    return {StatusCode::InvalidArgument, "SessionOptions::threads is " + std::to_string(options.threads) +
                                             " (0 for the default, else the threads per rank)"};
  if (!detail::fileReadable(path)) return {StatusCode::NotFound, path + ": cannot open the plan file"};
  if (options.device == Device::Cuda) {
    // Refused before loading where no GPU can serve it.
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
    runtime::LocalDevices local = runtime::cudaLocalDevices();
    if (local.cudaDevices < 1) return {StatusCode::Unsupported, path + ": device cuda: " + local.whyNoCuda};
#else
    return {StatusCode::Unsupported, path + ": device cuda: this hetplan runtime was built without "
                                            "CUDA (configure with a CUDA toolkit in /usr/local/cuda)"};
#endif
  }
  try {
    hetplan::plan::Plan plan;
    std::string error;
    if (!runtime::readPlan(path, plan, error)) return {StatusCode::InvalidModel, error};
    if (plan.settings().mode() == "train")
      return {StatusCode::Unsupported, path + ": a training plan; a session runs inference plans (train "
                                              "with `hetplan run PLAN --labels FILE.npy`)"};
    // The model: the option, else the plan's path (relative to the plan's folder).
    std::string model = options.modelPath;
    if (model.empty()) {
      model = plan.model().path();
      auto slash = path.find_last_of('/');
      if (!model.empty() && model[0] != '/' && slash != std::string::npos) model = path.substr(0, slash + 1) + model;
    }
    if (!detail::fileReadable(model))
      return {StatusCode::NotFound,
              path + ": cannot open the plan's model '" + model + "'" +
                  (options.modelPath.empty() ? "; give the ONNX file the plan was compiled from as the "
                                               "session's model path (SessionOptions::modelPath, "
                                               "hetplan_session_options_set_model_path)"
                                             : "")};
    bool mpi = options.ranks == PlanRanks::Mpi ||
               (options.ranks == PlanRanks::Auto && runtime::launchedByMpi());
    auto exec = runtime::PlanExecutor::load(path, options.modelPath);
    if (options.device == Device::Cuda) {
      // The plan's GPU ranks on the CUDA executor (RankBackend.h); CPU
      // ranks stay on the CPU, values cross on the host.
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
      runtime::Placement placement;
      try {
        placement = runtime::placeRanks(exec->plan(), runtime::DeviceChoice::Cuda, runtime::cudaLocalDevices(), mpi);
      } catch (const std::exception &e) {
        return {StatusCode::Unsupported, path + ": device cuda: " + e.what()};
      }
      // Under MPI only this process's rank runs: its executor uploads the
      // weights on first use, the others never.
      std::string refusal;
      struct Refused {};
      try {
        runtime::placeCudaRanks(*exec, placement, -1, !mpi, [&](int r, const std::vector<std::string> &problems) {
          refusal = path + ": device cuda: rank " + std::to_string(r) +
                    ": the CUDA executor cannot run its stage: " + problems.front();
          throw Refused{};
        });
      } catch (const Refused &) {
        return {StatusCode::Unsupported, refusal};
      }
#endif
    }
    try {
      if (const char *slow = std::getenv("HETPLAN_TEST_SLOW_RANK"); slow && *slow) { // test only
        auto [rank, fraction] = runtime::parseSlowRank(slow, exec->ranks());
        exec->setTestSlowdown(rank, fraction);
      }
      if (options.rebalanceThreshold < 0 || options.rebalanceSteps < 1)
        throw std::invalid_argument(path + ": rebalanceThreshold must be >= 0 and rebalanceSteps >= 1");
      if (options.rebalanceThreshold > 0 && mpi)
        throw std::invalid_argument(path + ": rebalancing shares runs on in-process ranks only, not MPI "
                                           "sessions (hetplan run --rebalance does both for training)");
      auto backend = std::make_unique<detail::PlanBackend>(std::move(exec), path, options.threads, mpi);
      if (options.rebalanceThreshold > 0) {
        runtime::RebalanceOptions ro;
        ro.threshold = options.rebalanceThreshold;
        ro.steps = options.rebalanceSteps;
        backend->enableRebalance(ro);
      }
      session->reset(new Session(std::move(backend), options));
    } catch (const std::invalid_argument &e) {
      return {StatusCode::InvalidArgument, e.what()};
    }
    return Status::OK();
  } catch (const std::bad_alloc &) {
    return {StatusCode::OutOfMemory, path + ": out of memory while loading the plan"};
  } catch (const std::exception &e) {
    std::string what = e.what();
    // PlanExecutor refuses what it cannot run (a node without a CPU kernel, tp > 1).
    bool unsupported = what.find("no CPU kernel") != std::string::npos ||
                       what.find("not supported") != std::string::npos;
    return {unsupported ? StatusCode::Unsupported : StatusCode::InvalidModel,
            what.rfind(path, 0) == 0 ? what : path + ": " + what};
  }
}

Status Session::create(const std::string &path, std::unique_ptr<Session> *session,
                       const SessionOptions &options) {
  if (!session) return {StatusCode::InvalidArgument, "Session::create: null session pointer"};
  session->reset();
  if (!detail::fileReadable(path))
    return {StatusCode::NotFound, path + ": cannot open the file (an ONNX model or a hetplan plan)"};
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, sizeof magic);
  bool plan = f.gcount() == 8 && std::string(magic, 8) == "HETPLAN\n";
  return plan ? fromPlan(path, session, options) : fromModel(path, session, options);
}

Status Session::run(const std::map<std::string, Tensor> &inputs,
                    std::map<std::string, Tensor> *outputs,
                    const std::vector<std::string> &outputNames) const {
  if (!outputs) return {StatusCode::InvalidArgument, "run: null outputs pointer"};
  outputs->clear();
  const std::string &src = backend_->source();
  const auto &declared = backend_->inputs();
  // Every given name is a graph input...
  for (const auto &[name, t] : inputs) {
    // Named, not captured: C++17 lambdas cannot capture structured bindings.
    const std::string &given = name;
    auto it = std::find_if(declared.begin(), declared.end(),
                           [&given](const TensorInfo &i) { return i.name == given; });
    if (it == declared.end()) {
      std::string names;
      for (const auto &d : declared) names += (names.empty() ? "'" : ", '") + d.name + "'";
      return {StatusCode::InvalidArgument,
              src + ": unknown input '" + name + "' (the model's inputs: " + names + ")"};
    }
    if (!t.defined())
      return {StatusCode::InvalidArgument, src + ": input '" + name + "' is an empty tensor"};
    if (it->dtype != DType::Undefined && t.dtype() != it->dtype)
      return {StatusCode::InvalidArgument, src + ": input '" + name + "' has element type " +
                                               runtime::dtypeName(t.dtype()) + ", the model wants " +
                                               runtime::dtypeName(it->dtype)};
    if (it->hasShape) {
      bool okShape = t.rank() == static_cast<int64_t>(it->shape.size());
      for (size_t d = 0; okShape && d < it->shape.size(); ++d)
        okShape = it->shape[d] < 0 || it->shape[d] == t.shape()[d];
      if (!okShape)
        return {StatusCode::InvalidArgument, src + ": input '" + name + "' has shape " +
                                                 runtime::shapeString(t.shape()) +
                                                 ", the model wants " +
                                                 runtime::shapeString(it->shape) + " (-1: any)"};
    }
    for (int64_t d : t.shape())
      if (d < 0)
        return {StatusCode::InvalidArgument, src + ": input '" + name + "' has a negative dimension"};
    if (t.numel() > 0 && !t.raw())
      return {StatusCode::InvalidArgument, src + ": input '" + name + "' has no data"};
  }
  // ...and every graph input is given.
  for (const auto &d : declared)
    if (!inputs.count(d.name))
      return {StatusCode::InvalidArgument, src + ": input '" + d.name + "' was not given"};
  for (const auto &n : outputNames)
    if (std::none_of(backend_->outputs().begin(), backend_->outputs().end(),
                     [&](const TensorInfo &o) { return o.name == n; }))
      return {StatusCode::InvalidArgument, src + ": unknown output '" + n + "'"};
  std::string invalid = backend_->validate(inputs);
  if (!invalid.empty())
    return {StatusCode::InvalidArgument, invalid.rfind(src, 0) == 0 ? invalid : src + ": " + invalid};

  std::map<std::string, Tensor> produced;
  try {
    if (profiler_) {
      detail::RunTrace trace;
      auto start = detail::Clock::now();
      produced = backend_->run(inputs, &trace);
      profiler_->merge(trace, start, detail::Clock::now());
    } else {
      produced = backend_->run(inputs, nullptr);
    }
    for (auto &[name, t] : produced) {
      if (!outputNames.empty() &&
          std::find(outputNames.begin(), outputNames.end(), name) == outputNames.end())
        continue;
      // An output may be a weight or an input passed through (Identity,
      // Reshape): give the caller its own bytes.
      bool aliased = backend_->sharesModelMemory(t);
      for (const auto &[iname, in] : inputs)
        aliased = aliased || detail::overlaps(t, in);
      (*outputs)[name] = aliased ? t.clone() : std::move(t);
    }
  } catch (const std::bad_alloc &) {
    outputs->clear();
    return {StatusCode::OutOfMemory, src + ": out of memory while running"};
  } catch (const std::exception &e) {
    outputs->clear();
    return {StatusCode::RuntimeError, e.what()};
  }
  return Status::OK();
}

} // namespace hetplan
