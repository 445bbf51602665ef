//===- Trace.h - a step as a Chrome / Perfetto trace -----------*- C++ -*-===//
#ifndef HETPLAN_RUNTIME_TRACE_H
#define HETPLAN_RUNTIME_TRACE_H

#include "hetplan/runtime/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// One instruction of one rank as it ran: seconds from the step's start.
struct TraceSpan {
  uint32_t rank = 0;
  uint32_t instruction = 0;  // index into the rank's program
  double start = 0, end = 0;
};

/// "FORWARD mb3", "ALLREDUCE_GRADIENTS", ...
std::string instructionLabel(const plan::Instruction &ins);

/// The step in the Trace Event Format (chrome://tracing, ui.perfetto.dev):
/// nodes as processes, ranks as threads, one complete event per instruction
/// with its micro-batch, samples, bytes and peers. With `measured` empty the
/// times are the plan's predictions; else the measured spans.
std::string traceJson(const plan::Plan &plan, const std::vector<TraceSpan> &measured = {});

/// Writes traceJson atomically; `error` names the file.
bool writeTrace(const plan::Plan &plan, const std::vector<TraceSpan> &measured,
                const std::string &path, std::string &error);

} // namespace hetplan::runtime

#endif
