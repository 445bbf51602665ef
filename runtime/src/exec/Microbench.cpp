//===- Microbench.cpp - `hetplan profile`'s measurements ------------------===//
//
// Every compute benchmark is a small in-memory model run by the Executor, as
// `hetplan run` runs a plan's nodes: the MatMul's weight is an initializer
// viewed in memory (the cached, packed oneDNN path of a model's weights), the
// outputs are allocated per run. Each case is timed for a time budget and the
// time of an unpreempted call is kept (timeCall); with several ranks every rank runs
// the same case at once (a barrier before each) and rank 0's time is the
// result, with the CPU share the process got meanwhile.
// See Microbench.h; the fits are in ProfileFit.cpp.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Microbench.h"

#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"

#include "../cpu/kernels/KernelUtil.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include <sys/mman.h>

#ifdef HETPLAN_HAVE_OPENMP
#include <omp.h>
#endif

namespace hetplan::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Kernel threads of the calling thread while it lives (0: leave them), as
/// Session's threads option sets them: the runtime's loops and oneDNN's team.
struct KernelThreads {
  explicit KernelThreads(int n) {
    if (n <= 0) return;
    cpu::kernelThreadsOverride() = n;
#ifdef HETPLAN_HAVE_OPENMP
    omp_set_num_threads(n);
#endif
  }
};

/// CPU seconds this process has used (every thread).
double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// CPU seconds the calling thread has used.
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// One call after a warm-up, repeated until `budget` seconds have passed and
/// at least `minReps` calls were timed (at most `maxReps`): the time of a
/// call that ran without being preempted (the share of the cores this
/// process gets is measured apart, MicrobenchResult::cpuShare). With one
/// kernel thread that is the median of the calling thread's CPU time per
/// call (exact: preemption is not CPU time; page faults are); with more
/// (other threads compute part of a call) the lower quartile of the wall
/// times, which calls longer than a scheduler slice on a busy machine exceed.
double timeCall(const std::function<void()> &call, double budget, int minReps, int maxReps, bool cpuClock) {
  call(); // warm-up: primitive creation, weight packing, first touch
  std::vector<double> times;
  auto start = Clock::now();
  while (int(times.size()) < maxReps && (int(times.size()) < minReps || since(start) < budget)) {
    auto t0 = Clock::now();
    double c0 = cpuClock ? threadCpuSeconds() : 0;
    call();
    times.push_back(cpuClock ? threadCpuSeconds() - c0 : since(t0));
  }
  if (cpuClock) return std::max(1e-9, median(times)); // a clock tick at least
  std::sort(times.begin(), times.end());
  return times[(times.size() - 1) / 4];
}

/// A model of nodes over float inputs; weights are views of `storage`.
struct ModelBuilder {
  Model model;
  std::vector<std::shared_ptr<std::vector<char>>> buffers;
  ModelBuilder() { model.opsets[""] = 17; }
  void input(const std::string &name, DType t, std::vector<int64_t> shape) {
    model.inputs.push_back({name, t, true, true, shape});
    model.valueTypes[name] = t;
  }
  void weight(const std::string &name, DType t, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    auto buf = std::make_shared<std::vector<char>>(size_t(n) * dtypeSize(t));
    fill(buf->data(), t, n);
    model.initializers[name] = Tensor::view(t, shape, buf->data(), buf);
    model.valueTypes[name] = t;
  }
  Node &node(const std::string &op, std::vector<std::string> in, std::vector<std::string> outs, DType t) {
    Node n;
    n.name = op + std::to_string(model.nodes.size());
    n.opType = op;
    n.inputs = std::move(in);
    n.outputs = outs;
    model.nodes.push_back(std::move(n));
    for (const auto &o : outs) model.valueTypes[o] = t;
    return model.nodes.back();
  }
  Node &node(const std::string &op, std::vector<std::string> in, const std::string &out, DType t) {
    return node(op, std::move(in), std::vector<std::string>{out}, t);
  }
  void output(const std::string &name, DType t) { model.outputs.push_back({name, t, true, false, {}}); }
  /// Small deterministic values (no denormals, no overflow in float16).
  static void fill(void *p, DType t, int64_t n) {
    if (t == DType::Float32) {
      float *f = static_cast<float *>(p);
      for (int64_t i = 0; i < n; ++i) f[i] = float((i * 7919) % 13 - 6) / 64.0f;
    } else { // float16: 0x2c00 = 1/16, 0xac00 = -1/16
      uint16_t *h = static_cast<uint16_t *>(p);
      for (int64_t i = 0; i < n; ++i) h[i] = (i % 3) ? 0x2c00 : 0xac00;
    }
  }
};

Tensor filled(DType t, std::vector<int64_t> shape) {
  Tensor x(t, shape);
  ModelBuilder::fill(x.raw(), t, x.numel());
  return x;
}

/// A prepared benchmark: the model, its executor and inputs, run per call.
struct Runner {
  std::unique_ptr<Model> model;
  std::unique_ptr<Executor> exec;
  std::map<std::string, Tensor> inputs;
  void operator()() const { (void)exec->run(inputs); }
};
std::shared_ptr<Runner> makeRunner(ModelBuilder &&b, std::map<std::string, Tensor> inputs) {
  auto r = std::make_shared<Runner>();
  r->model = std::make_unique<Model>(std::move(b.model));
  r->model->storage = std::make_shared<std::vector<std::shared_ptr<std::vector<char>>>>(std::move(b.buffers));
  r->exec = std::make_unique<Executor>(*r->model);
  auto problems = r->exec->check();
  if (!problems.empty()) throw std::runtime_error("profile: benchmark model refused: " + problems.front());
  r->inputs = std::move(inputs);
  return r;
}

std::shared_ptr<Runner> gemmRunner(int64_t m, int64_t k, int64_t n, DType t) {
  ModelBuilder b;
  b.input("A", t, {m, k});
  b.weight("B", t, {k, n});
  b.node("MatMul", {"A", "B"}, "Y", t);
  b.output("Y", t);
  return makeRunner(std::move(b), {{"A", filled(t, {m, k})}});
}

std::shared_ptr<Runner> addRunner(int64_t n) {
  ModelBuilder b;
  b.input("X", DType::Float32, {n});
  b.input("Z", DType::Float32, {n});
  b.node("Add", {"X", "Z"}, "Y", DType::Float32);
  b.output("Y", DType::Float32);
  return makeRunner(std::move(b), {{"X", filled(DType::Float32, {n})}, {"Z", filled(DType::Float32, {n})}});
}

/// Attention's activation products: [b, h, s, d] x [b, h, d, s].
std::shared_ptr<Runner> batchedGemmRunner(int64_t b, int64_t h, int64_t s, int64_t d) {
  ModelBuilder m;
  m.input("Q", DType::Float32, {b, h, s, d});
  m.input("K", DType::Float32, {b, h, d, s});
  m.node("MatMul", {"Q", "K"}, "Y", DType::Float32);
  m.output("Y", DType::Float32);
  return makeRunner(std::move(m), {{"Q", filled(DType::Float32, {b, h, s, d})},
                                   {"K", filled(DType::Float32, {b, h, d, s})}});
}

/// The memory-bound ops of a transformer block on [rows, cols] floats:
/// "transpose" ([rows/64, 4, 16, cols/4] -> perm 0,2,1,3, as heads are
/// split), "softmax" (last axis), "split" (three equal parts of the last
/// axis, as Q|K|V), "bias-add" (a row of `cols` added to every row),
/// "scale-div" (divided by a scalar, as attention scores are).
std::shared_ptr<Runner> streamOpRunner(const std::string &op, int64_t rows, int64_t cols) {
  ModelBuilder m;
  Attribute ints;
  ints.kind = Attribute::Ints;
  std::vector<int64_t> shape = {rows, cols};
  if (op == "transpose") {
    shape = {rows / 64, 4, 16, cols / 4};
    m.input("X", DType::Float32, shape);
    ints.ints = {0, 2, 1, 3};
    m.node("Transpose", {"X"}, "Y", DType::Float32).attrs["perm"] = ints;
    m.output("Y", DType::Float32);
  } else if (op == "softmax") {
    m.input("X", DType::Float32, shape);
    m.node("Softmax", {"X"}, "Y", DType::Float32);
    m.output("Y", DType::Float32);
  } else if (op == "bias-add" || op == "scale-div") {
    // Broadcast forms: a bias row over every row, a scalar over everything.
    m.input("X", DType::Float32, shape);
    bool bias = op == "bias-add";
    m.weight("b", DType::Float32, bias ? std::vector<int64_t>{cols} : std::vector<int64_t>{});
    m.node(bias ? "Add" : "Div", {"X", "b"}, "Y", DType::Float32);
    m.output("Y", DType::Float32);
  } else if (op == "block") {
    // A block's elementwise tail, as a model runs it: every intermediate a
    // fresh tensor, freed after its last use (the allocator's reuse, trims
    // and page faults included): bias, scale, Relu, residual, twice.
    m.input("X", DType::Float32, shape);
    m.weight("b", DType::Float32, {cols});
    m.weight("s", DType::Float32, {});
    std::string x = "X";
    for (int i = 0; i < 2; ++i) {
      std::string p = "t" + std::to_string(i) + "_";
      m.node("Add", {x, "b"}, p + "a", DType::Float32);
      m.node("Div", {p + "a", "s"}, p + "d", DType::Float32);
      m.node("Relu", {p + "d"}, p + "r", DType::Float32);
      m.node("Add", {p + "r", x}, p + "y", DType::Float32);
      x = p + "y";
    }
    m.output(x, DType::Float32);
  } else { // split
    m.input("X", DType::Float32, shape);
    Attribute axis;
    axis.kind = Attribute::Int;
    axis.i = 1;
    m.node("Split", {"X"}, std::vector<std::string>{"A", "B", "C"}, DType::Float32).attrs["axis"] = axis;
    for (const char *o : {"A", "B", "C"}) m.output(o, DType::Float32);
  }
  return makeRunner(std::move(m), {{"X", filled(DType::Float32, shape)}});
}

std::shared_ptr<Runner> chainRunner(int nodes) {
  ModelBuilder b;
  b.input("x0", DType::Float32, {16});
  for (int i = 0; i < nodes; ++i)
    b.node("Relu", {"x" + std::to_string(i)}, "x" + std::to_string(i + 1), DType::Float32);
  b.output("x" + std::to_string(nodes), DType::Float32);
  return makeRunner(std::move(b), {{"x0", filled(DType::Float32, {16})}});
}

/// A rendezvous of the rank threads of this process.
class Barrier {
public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0, ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen != gen_; });
    }
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

/// One compute case: what to prepare on each rank, what its size is.
struct Case {
  std::string what;   // for progress
  std::string kind;   // gemm32, gemm16, stream, copy, dispatch
  double x = 0;
  GemmPoint gemm;
  std::function<std::function<void()>()> prepare;
};

std::vector<Case> computeCases(bool quick) {
  std::vector<Case> cases;
  auto gemm = [&](int64_t m, int64_t k, int64_t n, DType t) {
    Case c;
    c.kind = t == DType::Float32 ? "gemm32" : "gemm16";
    c.gemm = {m, k, n, t == DType::Float32 ? "fp32" : "fp16", 0};
    c.x = c.gemm.flops();
    c.what = "gemm " + c.gemm.dtype + " " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    c.prepare = [=] {
      auto r = gemmRunner(m, k, n, t);
      return std::function<void()>([r] { (*r)(); });
    };
    cases.push_back(c);
  };
  // Calls short enough (a few ms) to run mostly between two preemptions
  // on a shared machine.
  std::vector<int64_t> squares = quick ? std::vector<int64_t>{32, 128, 256, 384}
                                       : std::vector<int64_t>{32, 64, 96, 128, 192, 256, 384, 512};
  for (int64_t s : squares) gemm(s, s, s, DType::Float32);
  // Transformer-like shapes: tokens x hidden x 4*hidden, and skinny ones.
  gemm(64, 512, 2048, DType::Float32);
  gemm(256, 1024, 256, DType::Float32);
  if (!quick) {
    gemm(8, 1024, 1024, DType::Float32);
    gemm(1024, 64, 1024, DType::Float32);
    gemm(256, 768, 1024, DType::Float32);
    gemm(1024, 256, 256, DType::Float32);
  }
  for (int64_t s : quick ? std::vector<int64_t>{32, 128} : std::vector<int64_t>{32, 64, 128, 256}) {
    int64_t b = 8, h = 4, d = 64;
    Case c;
    c.kind = "gemm32";
    c.gemm = {s, d, s, "fp32", 0, b * h};
    c.x = c.gemm.flops();
    c.what = "gemm fp32 batched " + std::to_string(b * h) + " x " + std::to_string(s) + "x" + std::to_string(d) +
             "x" + std::to_string(s);
    c.prepare = [=] {
      auto r = batchedGemmRunner(b, h, s, d);
      return std::function<void()>([r] { (*r)(); });
    };
    cases.push_back(c);
  }
  for (int64_t s : quick ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{128, 256, 512})
    gemm(s, s, s, DType::Float16);
  for (const char *op : {"transpose", "softmax", "split", "bias-add", "scale-div", "block"})
    for (int64_t rows : quick ? std::vector<int64_t>{256} : std::vector<int64_t>{64, 256, 1024}) {
      int64_t cols = 768;
      std::string name = op;
      // Bytes read + written, as the cost model counts them (block: per element and pass,
      // 8 + 8 + 8 + 12 for the bias, scale, Relu and residual ops).
      double bytes = (name == "block" ? 2 * 36.0 : 8.0) * double(rows * cols);
      Case c{name + " " + std::to_string(rows) + "x" + std::to_string(cols) + " floats", "stream", bytes, {},
             nullptr};
      c.prepare = [name, rows, cols] {
        auto r = streamOpRunner(name, rows, cols);
        return std::function<void()>([r] { (*r)(); });
      };
      cases.push_back(c);
    }
  for (int64_t n : quick ? std::vector<int64_t>{1 << 12, 1 << 16, 1 << 20}
                         : std::vector<int64_t>{1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22}) {
    Case c{"add " + std::to_string(n) + " floats", "stream", 12.0 * double(n), {}, nullptr};
    c.prepare = [n] {
      auto r = addRunner(n);
      return std::function<void()>([r] { (*r)(); });
    };
    cases.push_back(c);
  }
  for (int64_t mb : quick ? std::vector<int64_t>{1, 16} : std::vector<int64_t>{1, 4, 16, 64}) {
    size_t bytes = size_t(mb) << 20;
    Case c{"memcpy " + std::to_string(mb) + " MiB", "copy", 2.0 * double(bytes), {}, nullptr};
    c.prepare = [bytes] {
      auto src = std::make_shared<std::vector<char>>(bytes, 1), dst = std::make_shared<std::vector<char>>(bytes, 0);
      return std::function<void()>([src, dst] { std::memcpy(dst->data(), src->data(), src->size()); });
    };
    cases.push_back(c);
  }
  // First touch of fresh memory: what an output costs when the allocator
  // hands out pages the kernel must map and zero (a model's outputs above
  // the allocator's mmap/trim thresholds): map, write, unmap.
  for (int64_t mb : quick ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{1, 2, 4, 8}) {
    size_t bytes = size_t(mb) << 20;
    Case c{"fresh " + std::to_string(mb) + " MiB", "fresh", double(bytes), {}, nullptr};
    c.prepare = [bytes] {
      return std::function<void()>([bytes] {
        void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::runtime_error("profile: mmap failed");
        std::memset(p, 1, bytes);
        munmap(p, bytes);
      });
    };
    cases.push_back(c);
  }
  for (int nodes : quick ? std::vector<int>{1, 16, 64} : std::vector<int>{1, 4, 16, 64, 128}) {
    Case c{"relu chain of " + std::to_string(nodes), "dispatch", double(nodes), {}, nullptr};
    c.prepare = [nodes] {
      auto r = chainRunner(nodes);
      return std::function<void()>([r] { (*r)(); });
    };
    cases.push_back(c);
  }
  return cases;
}

void record(MicrobenchResult &out, const Case &c, double seconds) {
  if (c.kind == "gemm32" || c.kind == "gemm16") {
    GemmPoint g = c.gemm;
    g.seconds = seconds;
    out.gemm.push_back(g);
  } else if (c.kind == "stream") {
    out.stream.push_back({c.x, seconds, c.what});
  } else if (c.kind == "copy") {
    out.copy.push_back({c.x, seconds, c.what});
  } else if (c.kind == "fresh") {
    out.fresh.push_back({c.x, seconds, c.what});
  } else {
    out.dispatch.push_back({c.x, seconds});
  }
}

std::string formatSeconds(double s) {
  char buf[64];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

/// The share of a core each kernel thread of this process gets while every
/// rank computes: all ranks run MatMuls for `window` seconds of wall time
/// (no barrier inside, so none waits for another); rank 0 divides the
/// process's CPU time over its window by wall x ranks here x threads.
double measureCpuShare(const MicrobenchResult &out, int rank, double window) {
  auto gemm = gemmRunner(192, 192, 192, DType::Float32);
  (*gemm)();
  double cpu0 = processCpuSeconds();
  auto start = Clock::now();
  double last = 0;
  // The others run a little longer, so that rank 0's window is all busy.
  double until = rank == 0 ? window : window * 1.1;
  while ((last = since(start)) < until) (*gemm)();
  double cpu = processCpuSeconds() - cpu0;
  int perProcess = out.mpi ? 1 : out.ranks;
  return std::min(1.0, cpu / (last * perProcess * std::max(1, out.threads)));
}

/// The compute cases on this rank; `sync` before each (all ranks run it at
/// once), then the CPU share. Rank 0 records into `out`.
void runComputeCases(const MicrobenchOptions &o, int rank, const std::function<void()> &sync,
                     MicrobenchResult &out) {
  double budget = o.quick ? 0.03 : 0.25;
  int minReps = o.quick ? 4 : 8, maxReps = o.quick ? 200 : 2000;
  for (const Case &c : computeCases(o.quick)) {
    auto call = c.prepare();
    sync();
    double s = timeCall(call, budget, minReps, maxReps, out.threads == 1);
    if (rank != 0) continue;
    record(out, c, s);
    if (o.progress) o.progress(c.what + ": " + formatSeconds(s));
  }
  sync();
  double share = measureCpuShare(out, rank, o.quick ? 0.2 : 1.0);
  sync();
  if (rank == 0) {
    out.cpuShare = share;
    if (o.progress)
      o.progress("cpu share: " + std::to_string(share) + " (process CPU time / (wall x ranks x threads))");
  }
}

/// Ping-pong between ranks 0 and 1 and the all-reduce over every rank, on
/// `comm`; rank 0 records. Every rank calls this.
void runCommCases(const MicrobenchOptions &o, Communicator &comm, MicrobenchResult &out) {
  int rank = comm.rank(), size = comm.size();
  std::vector<int64_t> sizes = o.quick ? std::vector<int64_t>{1 << 10, 1 << 20, 8 << 20}
                                       : std::vector<int64_t>{1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 16 << 20};
  int reps = o.quick ? 5 : 20;
  int64_t tag = 1;
  for (int64_t bytes : sizes) {
    Tensor t = filled(DType::Float32, {bytes / 4});
    std::vector<double> times;
    comm.barrier();
    for (int i = 0; i <= reps; ++i) {
      auto t0 = Clock::now();
      if (rank == 0) {
        comm.send(1, tag, t);
        (void)comm.recv(1, tag + 1);
      } else if (rank == 1) {
        Tensor back = comm.recv(0, tag);
        comm.send(0, tag + 1, back);
      }
      if (i > 0) times.push_back(since(t0) / 2); // one way
      tag += 2;
    }
    if (rank == 0) {
      out.send.push_back({double(bytes), median(times)});
      if (o.progress) o.progress("send " + std::to_string(bytes) + " bytes: " + formatSeconds(median(times)));
    }
  }
  comm.barrier();
  if (size < 2 || out.ranks < 2) return;
  for (int64_t bytes : sizes) {
    Tensor t = filled(DType::Float32, {bytes / 4});
    std::vector<double> times;
    for (int i = 0; i <= reps; ++i) {
      comm.barrier();
      auto t0 = Clock::now();
      comm.allReduceSum(t);
      if (i > 0) times.push_back(since(t0));
      ModelBuilder::fill(t.raw(), DType::Float32, t.numel()); // keep values finite
    }
    if (rank == 0) {
      out.allReduce.push_back({double(bytes), median(times)});
      if (o.progress)
        o.progress("all-reduce " + std::to_string(bytes) + " bytes over " + std::to_string(size) +
                   " ranks: " + formatSeconds(median(times)));
    }
  }
  comm.barrier();
}

/// Runs f(rank) on `n` threads and rethrows the first error.
void onThreads(int n, int threads, const std::function<void(int)> &f) {
  std::vector<std::thread> pool;
  std::mutex mu;
  std::exception_ptr error;
  for (int r = 0; r < n; ++r)
    pool.emplace_back([&, r] {
      KernelThreads kt(threads);
      try {
        f(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  for (auto &t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

/// What a plan step pays to start its rank threads: a comm group, `n`
/// threads that meet at a barrier, joined.
double threadStartSeconds(int n, bool quick) {
  return timeCall(
      [n] {
        ThreadCommGroup group(n);
        onThreads(n, 0, [&](int r) { group.communicator(r).barrier(); });
      },
      quick ? 0.02 : 0.1, 5, 200, false);
}

} // namespace

MicrobenchResult runMicrobench(const MicrobenchOptions &o, Communicator *comm) {
  MicrobenchResult out;
  out.mpi = comm != nullptr;
  out.ranks = comm ? comm->size() : std::max(1, o.ranks);
  out.threads = o.threads > 0 ? o.threads : cpu::kernelThreads();
  if (comm) { // one process per rank: this process is one of them
    KernelThreads kt(o.threads);
    runComputeCases(o, comm->rank(), [comm] { comm->barrier(); }, out);
    if (comm->size() >= 2) runCommCases(o, *comm, out);
    return out;
  }
  Barrier barrier(out.ranks);
  if (o.progress) o.progress("compute on " + std::to_string(out.ranks) + " rank(s) at once, " +
                             std::to_string(out.threads) + " kernel thread(s) each");
  onThreads(out.ranks, o.threads, [&](int r) { runComputeCases(o, r, [&] { barrier.wait(); }, out); });
  int commRanks = std::max(2, out.ranks);
  ThreadCommGroup group(commRanks);
  onThreads(commRanks, o.threads, [&](int r) { runCommCases(o, group.communicator(r), out); });
  out.threadStartSeconds = threadStartSeconds(out.ranks, o.quick);
  return out;
}

} // namespace hetplan::runtime
