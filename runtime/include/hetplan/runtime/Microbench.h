//===- Microbench.h - measuring this host with the runtime's kernels -*- C++ -*-===//
//
// `hetplan profile` (docs/cost-model.md, "Profiling your cluster") measures
// the machine it runs on with the CPU runtime's own kernels and
// communicators, the way the profilers of Metis, Alpa and Sailor measure a
// cluster before planning for it:
//
//   * MatMul over a set of shapes (float32, and float16 as the runtime runs
//     it), each a one-node model run by the Executor, as a model's MatMul with
//     a weight initializer runs: time = fixed + FLOPs / rate;
//   * Add over a range of sizes (streaming: achieved bandwidth) and host
//     copies (memcpy: the bandwidth the machine reaches at all);
//   * chains of Relu on tiny tensors of 1..64 nodes: the dispatch cost per
//     node (the slope) and per run (the intercept);
//   * send/recv and the sum all-reduce between ranks over the thread
//     communicator (or MPI when an MPI launcher started the process):
//     time = latency + bytes / bandwidth.
//
// With several ranks, every rank runs the compute benchmarks at the same time
// (as the ranks of a plan run their stages at once), and rank 0's times are
// the result: each case's time of a call that ran unpreempted (the median
// thread CPU time per call with one kernel thread, else the lower quartile of
// the wall times), and the share of the cores the process got while every
// rank computed (cpuShare), by which the fits divide them. The fits
// (ProfileFit) are least squares on relative error; tests give them
// synthetic timings. No MLIR, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_MICROBENCH_H
#define HETPLAN_RUNTIME_MICROBENCH_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hetplan::runtime {

class Communicator;

/// One measurement: `x` (FLOPs, bytes or nodes) took `seconds` per call.
struct BenchPoint {
  double x = 0;
  double seconds = 0;
  std::string what; // the case, for the file's comments
};

/// seconds = intercept + slope * x.
struct LinearFit {
  double intercept = 0;
  double slope = 0;
  /// Over the points: the median and the largest |fit - measured| / measured.
  double medianRelError = 0;
  double maxRelError = 0;
  double at(double x) const { return intercept + slope * x; }
};

/// Least squares of seconds = intercept + slope * x, each point weighted by
/// 1 / seconds^2 (relative error: the points span orders of magnitude). A
/// negative intercept is clamped to 0 and the slope refitted through the
/// origin; a non-positive slope (no size effect measurable) gives slope 0 and
/// the median time as the intercept. Needs at least one point.
LinearFit fitLinear(const std::vector<BenchPoint> &points);

/// The cost model's GEMM curve (docs/cost-model.md, "Calibration"): one
/// product of W FLOPs runs at rate * W / (W + halfFlops) after a fixed
/// dispatch cost; a batched call of P products of W / P FLOPs each takes
/// fixed + (W + P * halfFlops) / rate.
struct GemmCurve {
  double rate = 0;       // FLOP/s reached by large GEMMs
  double halfFlops = 0;  // product size at which half of `rate` is reached (0: none)
  double medianRelError = 0, maxRelError = 0;
};
struct GemmPoint;
/// Fits the curve to measured calls, given the per-call fixed cost measured
/// apart (the dispatch of a tiny node and of a run): least squares on
/// relative error of t - fixed = W / rate + P * halfFlops / rate (P the
/// call's products); halfFlops is 0 when that term comes out negative.
GemmCurve fitGemmCurve(const std::vector<GemmPoint> &points, double fixedSeconds);

/// Median of `v` (0 when empty).
double median(std::vector<double> v);

struct MicrobenchOptions {
  /// Ranks on this host: threads of this process (each with its own
  /// executor), all running the compute benchmarks at once. Ignored under
  /// MPI (`comm` given): the job's size.
  int ranks = 1;
  /// Kernel threads per rank (0: what `hetplan run` uses: OMP_NUM_THREADS,
  /// else every core).
  int threads = 0;
  /// Fewer shapes and shorter timing (tests: well under 10 s in all).
  bool quick = false;
  /// Progress lines ("gemm fp32 256x256x256: 1.2 ms"), for stderr.
  std::function<void(const std::string &)> progress;
};

/// One MatMul shape measured: [m x k] times [k x n].
struct GemmPoint {
  int64_t m = 0, k = 0, n = 0;
  std::string dtype; // "fp32" or "fp16"
  double seconds = 0;
  int64_t batch = 1;  // products per call (attention's [b, h, s, d] x [b, h, d, s]: b * h)
  double flops() const { return 2.0 * double(batch) * double(m) * double(k) * double(n); }
};

/// Everything measured, raw (ProfileFit turns it into figures).
struct MicrobenchResult {
  int ranks = 1;
  int threads = 0;  // kernel threads per rank actually used
  bool mpi = false;
  std::vector<GemmPoint> gemm;
  std::vector<BenchPoint> stream;    // Add, Transpose, Softmax, Split: bytes read + written, seconds per run
  std::vector<BenchPoint> copy;      // memcpy: bytes read + written, seconds
  std::vector<BenchPoint> fresh;     // map, write, unmap fresh pages: bytes, seconds
  std::vector<BenchPoint> dispatch;  // Relu chain: nodes, seconds per run
  std::vector<BenchPoint> send;      // rank 0 -> 1, one way: bytes, seconds (threads: measured with 1 rank too)
  std::vector<BenchPoint> allReduce; // all ranks: bytes per rank, seconds
  double threadStartSeconds = 0;     // start and join `ranks` threads with a comm group
  /// The share of a core per kernel thread this process got while every
  /// rank ran MatMuls for a second (--quick: 0.2 s): CPU time / (wall x
  /// ranks here x threads), at most 1. Call times are of calls that ran unpreempted; a step of many
  /// calls also waits for the cores, so fitMicrobench divides them by this.
  /// Below 1 when ranks x threads exceed the cores or other work shares them.
  double cpuShare = 1;
};

/// Runs the benchmarks. `comm` (MPI) when an MPI launcher started the
/// process: every process calls this; the result is rank 0's. Without it the
/// point-to-point benchmark uses max(ranks, 2) threads, so a link is
/// measured even for one rank. Throws std::runtime_error on failure.
MicrobenchResult runMicrobench(const MicrobenchOptions &options, Communicator *comm = nullptr);

/// The figures the cluster file takes, fitted from a MicrobenchResult.
struct FittedHost {
  GemmCurve gemm32;              // fp32 MatMul
  double gemm16Rate = 0;         // fp16 MatMul rate at large sizes (0: not measured)
  LinearFit stream;              // Add: intercept = per-run + per-node cost, slope = 1/bandwidth
  double streamBandwidth = 0;    // bytes/s
  double copyBandwidth = 0;      // bytes/s (memcpy)
  double freshBandwidth = 0;     // bytes/s of first-touched memory (0: not measured)
  LinearFit dispatch;            // Relu chain: slope = per node, intercept = per run
  double kernelSeconds = 0;      // per node
  double runSeconds = 0;         // per run (executor entry, value maps), >= 0
  LinearFit send;                // slope = 1/bandwidth, intercept = latency
  double linkBandwidth = 0;      // bytes/s (0: not measured)
  double linkLatency = 0;        // seconds
  LinearFit allReduce;           // per byte per rank
};
FittedHost fitMicrobench(const MicrobenchResult &result);

} // namespace hetplan::runtime

#endif
