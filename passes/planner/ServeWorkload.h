//===- ServeWorkload.h - the requests a serving plan is sized for -*- C++ -*-===//
//
// What the serving simulation replays: arrivals (Poisson, bursty gamma, or
// a recorded trace) and per-request prompt and output lengths (fixed, a
// percentile table, or the trace's own). The trace file and the length
// tables are outside input: parsed here, fuzzed by
// test/fuzz/FuzzWorkload.cpp. docs/serving.md, "Workloads".
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_SERVEWORKLOAD_H
#define HETPLAN_PASSES_PLANNER_SERVEWORKLOAD_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hetplan::planner::serve {

/// The most tokens one request's prompt or output may have.
constexpr int64_t kMaxRequestTokens = int64_t(1) << 20;

/// Token counts of requests: a piecewise-linear inverse CDF through
/// (percentile, tokens) points, percentiles in [0, 100] and tokens both
/// non-decreasing. Below the first point every request has its tokens,
/// above the last the last point's. One point: every request the same.
struct LengthDistribution {
  std::vector<std::pair<double, double>> points;

  bool empty() const { return points.empty(); }
  /// Tokens at quantile u in [0, 1], at least 1.
  int64_t at(double u) const;
  /// The mean of the distribution (exact for the piecewise-linear CDF).
  double mean() const;
  /// "760", or "p50 500, p90 1500, p99 3000 (mean 804)".
  std::string text() const;
};

/// `760`, or a percentile table `p50=500,p90=1500,p99=3000` (also `min=`
/// and `max=`, p0 and p100). Errors name `flag` and the item.
llvm::Expected<LengthDistribution> parseLength(llvm::StringRef text, llvm::StringRef flag);

struct TraceRequest {
  double arrival = 0;  // seconds from the trace's start
  int64_t promptTokens = 1, outputTokens = 1;
};

/// A request trace: JSON lines ({"arrival_s": 0.12, "prompt_tokens": 760,
/// "output_tokens": 230}, blank lines skipped) or CSV whose header names
/// the columns arrival_s, prompt_tokens and output_tokens (any order, other
/// columns ignored). Arrivals finite, non-negative and non-decreasing;
/// tokens 1..2^20; at least one request, at most `maxRequests`. Errors
/// name `name:LINE`.
llvm::Expected<std::vector<TraceRequest>> parseTrace(llvm::StringRef text, llvm::StringRef name,
                                                     size_t maxRequests = 10'000'000);

/// An exact serving layout (`--mode serve --layout FILE`): replicas, each a
/// pipeline of stages in order, each stage `tensor_parallel` ranks and the
/// last layer it holds:
///   {"replicas": [{"tensor_parallel": 1, "stages": [
///       {"ranks": [0], "last_layer": 15}, {"ranks": [1], "last_layer": 59}]}]}
/// Parsed here for shape (every count sane, layers increasing); checked
/// against the model and cluster by the planner.
struct ServeLayoutStage {
  std::vector<int> ranks;
  int lastLayer = 0;
};
struct ServeLayoutReplica {
  int tensorParallel = 1;
  std::vector<ServeLayoutStage> stages;
};
llvm::Expected<std::vector<ServeLayoutReplica>> parseServeLayout(llvm::StringRef text,
                                                                 llvm::StringRef name);

enum class Arrivals { Poisson, Gamma, Trace };

struct Workload {
  Arrivals arrivals = Arrivals::Poisson;
  /// Gamma: the gaps' coefficient of variation (1 is Poisson; 2-4 is
  /// bursty, as production LLM traces measure).
  double burstiness = 1;
  /// Empty: every request has the planner's prompt / output tokens.
  LengthDistribution prompt, output;
  /// Arrivals::Trace: replayed once, its gaps scaled to the rate planned.
  std::vector<TraceRequest> trace;
  std::string traceName;

  /// "Poisson", "gamma (CV 2.00)", "trace t.jsonl (2000 requests)".
  std::string arrivalsText() const;
  /// The trace's own rate: requests over the span of their arrivals.
  double traceRate() const;
};

} // namespace hetplan::planner::serve

#endif
