//===- FuzzWorkload.cpp - serving traces and length tables ----------------===//
//
// Bytes -> parseTrace, parseServeLayout and parseLength
// (passes/planner/ServeWorkload.h), what `hetplan compile --mode serve
// --workload FILE`, `--layout FILE` and --prompt-len / --output-len read:
// requests with finite, sorted arrivals and 1..2^20 tokens, replicas whose
// stages have tensor_parallel ranks and increasing layers, a table whose
// quantiles stay within its points, or one error line each.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "passes/planner/ServeWorkload.h"

#include <cmath>
#include <cstdlib>

using namespace hetplan::planner::serve;

namespace {

void oneLine(llvm::Error e) {
  std::string message = llvm::toString(std::move(e));
  if (message.empty() || message.find('\n') != std::string::npos)
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto trace = parseTrace(text, "fuzz.jsonl", 100000);
  if (!trace) {
    oneLine(trace.takeError());
  } else {
    double last = 0;
    for (const TraceRequest &r : *trace) {
      if (!std::isfinite(r.arrival) || r.arrival < last || r.promptTokens < 1 ||
          r.outputTokens < 1 || r.promptTokens > kMaxRequestTokens ||
          r.outputTokens > kMaxRequestTokens)
        std::abort();
      last = r.arrival;
    }
    Workload w;
    w.trace = *trace;
    if (!(w.traceRate() >= 0))
      std::abort();
  }
  // The same bytes as a serving layout.
  auto layout = parseServeLayout(text, "fuzz.json");
  if (!layout) {
    oneLine(layout.takeError());
  } else {
    for (const ServeLayoutReplica &r : *layout)
      for (size_t k = 0; k < r.stages.size(); ++k)
        if (int(r.stages[k].ranks.size()) != r.tensorParallel ||
            (k > 0 && r.stages[k].lastLayer <= r.stages[k - 1].lastLayer))
          std::abort();
  }
  // The same bytes as a length flag (one line of it).
  auto length = parseLength(text.split('\n').first, "--prompt-len");
  if (!length) {
    oneLine(length.takeError());
    return 0;
  }
  double lo = length->points.front().second, hi = length->points.back().second;
  for (double u : {0.0, 0.25, 0.5, 0.9, 0.999, 1.0}) {
    int64_t t = length->at(u);
    if (double(t) < std::floor(lo) || double(t) > std::ceil(hi))
      std::abort();
  }
  double m = length->mean();
  if (!(m >= lo - 1e-6 && m <= hi + 1e-6))
    std::abort();
  return 0;
}
