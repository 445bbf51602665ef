//===- Session.h - the embedding API: one model, many concurrent runs -*- C++ -*-===//
//
// A Session is what a service embeds: it loads a model once (graph and
// weights, immutable and shared by every call) and runs it on the CPU from
// any number of threads at once. Each run has its own value store; nothing a
// run writes is visible to another. Errors are a Status (code + one message),
// never exceptions. The C API (hetplan/hetplan.h) is a thin layer over this.
//
//   std::unique_ptr<hetplan::Session> s;
//   hetplan::Status st = hetplan::Session::fromModel("gpt2-tiny.onnx", &s);
//   std::map<std::string, hetplan::runtime::Tensor> out;
//   st = s->run({{"input_ids", ids}}, &out);   // out["logits"]
//
// A session runs an ONNX model (one rank: the CPU Executor, or one GPU with
// SessionOptions::device = Cuda in CUDA builds) or a compiled inference plan
// (Session::fromPlan: all ranks as threads of this process over the
// ThreadCommunicator, or this process's rank of an MPI job), behind the same
// run() interface. SessionOptions set threads, device, profiling and how a
// plan's ranks run, as onnxruntime's SessionOptions do.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

// libhetplan.so is built with hidden visibility; what this header declares
// is exported (runtime/src/session/libhetplan.map) for C++ users of the
// installed package (find_package(hetplan) -> hetplan::hetplan).
#if defined(_WIN32)
#define HETPLAN_CXX_API
#else
#define HETPLAN_CXX_API __attribute__((visibility("default")))
#endif

namespace hetplan {

/// Numbered as the C API's hetplan_status (hetplan/hetplan.h).
enum class StatusCode : int {
  Ok = 0,
  InvalidArgument = 1, // a bad call: unknown/missing input, wrong dtype/shape, null pointer
  NotFound = 2,        // the model/plan file does not exist or cannot be read
  InvalidModel = 3,    // the file is not a valid model (parse error, broken graph)
  Unsupported = 4,     // the model uses ops/types/attributes the runtime cannot run
  RuntimeError = 5,    // a kernel failed while running
  OutOfMemory = 6,
  NotImplemented = 7,  // not used by this runtime any more (kept for the numbering)
  Internal = 8,
};

HETPLAN_CXX_API const char *statusCodeName(StatusCode code);

class HETPLAN_CXX_API Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return {}; }
  bool ok() const { return code_ == StatusCode::Ok; }
  StatusCode code() const { return code_; }
  /// One line per problem; empty when ok().
  const std::string &message() const { return message_; }
  /// "InvalidArgument: message" (or "Ok").
  std::string toString() const;

private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

/// A graph input or output as the model declares it.
struct TensorInfo {
  std::string name;
  runtime::DType dtype = runtime::DType::Undefined;
  bool hasShape = false;
  std::vector<int64_t> shape; // -1 for a dynamic (symbolic or unknown) dimension
};

/// Where a session's kernels run.
enum class Device : int {
  Cpu = 0,
  /// Model sessions: CudaExecutor on GPU 0. Plan sessions: the plan's GPU
  /// ranks on the CUDA executor (RankBackend.h). Unsupported without a CUDA
  /// build or device.
  Cuda = 1,
};

/// How a plan session runs the plan's ranks.
enum class PlanRanks : int {
  /// Mpi when an MPI launcher started this process (launchedByMpi()), else InProcess.
  Auto = 0,
  /// Every rank is a thread of this process (ThreadCommGroup), one per rank and run.
  InProcess = 1,
  /// This process is one rank of MPI_COMM_WORLD (its size must be the plan's
  /// rank count). run() is collective: every process calls it, in the same
  /// order, with the same inputs; every process gets the whole outputs.
  Mpi = 2,
};

struct SessionOptions {
  /// Run Executor::check() at creation and refuse the model with every
  /// problem listed (Unsupported). Only turn off to probe a partial model.
  bool checkAtLoad = true;
  /// Kernel threads per run (per rank for plans): the OpenMP team of oneDNN's
  /// GEMM/Conv and the runtime's parallel loops. 0: OMP_NUM_THREADS when set,
  /// else every hardware thread.
  int threads = 0;
  Device device = Device::Cpu;
  /// Plans only.
  PlanRanks ranks = PlanRanks::Auto;
  /// Plans only: the ONNX model to run instead of the plan's model.path
  /// (which is relative to the plan's folder). Its SHA-256 must still match.
  std::string modelPath;
  /// Time every node of every run (model sessions) or every rank's step and
  /// its nodes (plan sessions); endProfiling() writes the trace.
  bool profiling = false;
  /// endProfiling() writes PREFIX_<pid>_<YYYY-MM-DD_HH-MM-SS>.json.
  std::string profilePrefix = "hetplan_profile";
  /// Plan sessions with in-process ranks: > 0 times every run and moves a
  /// stage's data-parallel shares to the measured speeds between runs when
  /// its slowest worker is more than this fraction slower than that optimum
  /// for `rebalanceSteps` runs in a row (stragglers; docs/runtime.md,
  /// "Stragglers"). Outputs are unchanged. 0: off. The environment variable
  /// HETPLAN_TEST_SLOW_RANK=R:FRACTION (test only) slows rank R on purpose.
  double rebalanceThreshold = 0;
  int rebalanceSteps = 2;
};

namespace detail {
class SessionBackend;
}

class HETPLAN_CXX_API Session {
public:
  /// Loads an ONNX model and prepares it for running on the CPU.
  static Status fromModel(const std::string &path, std::unique_ptr<Session> *session,
                          const SessionOptions &options = {});
  /// A compiled inference plan file (docs/plan-format.md) and the model it
  /// names: every check PlanExecutor makes at load (NotFound for a missing
  /// plan or model file, InvalidModel for a corrupt or inconsistent plan,
  /// Unsupported for a training plan, or device Cuda without CUDA here).
  static Status fromPlan(const std::string &path, std::unique_ptr<Session> *session,
                         const SessionOptions &options = {});
  /// fromPlan when the file starts with a plan file's header, else fromModel.
  static Status create(const std::string &path, std::unique_ptr<Session> *session,
                       const SessionOptions &options = {});

  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// The file the session was created from.
  const std::string &source() const;
  const std::vector<TensorInfo> &inputs() const;
  const std::vector<TensorInfo> &outputs() const;
  /// True for a session created from a plan file.
  bool isPlan() const;
  /// The plan's rank count (1 for a model session).
  int ranks() const;
  /// This process's rank in an MPI plan session, else -1.
  int processRank() const;
  /// Each move of shares so far (SessionOptions::rebalanceThreshold), one
  /// line each as printed on stderr.
  std::vector<std::string> rebalances() const;

  /// With SessionOptions::profiling: writes what was timed since creation
  /// (or the last endProfiling) as a Chrome/Perfetto trace (JSON object
  /// format: "traceEvents" plus a "hetplan" summary per node), puts its
  /// path in *path and starts a new recording. InvalidArgument when the
  /// session was created without profiling; RuntimeError when the file
  /// cannot be written.
  /// Not concurrent with run() on the same session.
  Status endProfiling(std::string *path);

  /// Runs once. Thread-safe: any number of concurrent calls on one Session.
  /// `inputs` must name every graph input exactly once with the declared
  /// element type and rank (fixed dimensions must match). Input bytes are
  /// only read, and only during the call (views of caller memory are fine).
  /// `outputs` receives every graph output by name (or only those in
  /// `outputNames` when it is not empty); output tensors own their bytes or
  /// share them with nothing the caller or other runs can see.
  Status run(const std::map<std::string, runtime::Tensor> &inputs,
             std::map<std::string, runtime::Tensor> *outputs,
             const std::vector<std::string> &outputNames = {}) const;

  struct Profiler;

private:
  Session(std::unique_ptr<detail::SessionBackend> backend, const SessionOptions &options);
  std::unique_ptr<detail::SessionBackend> backend_;
  std::unique_ptr<Profiler> profiler_; // null unless SessionOptions::profiling
};

} // namespace hetplan
