//===- Trace.cpp - a step as a Chrome / Perfetto trace ---------------------===//
//
// The Trace Event Format (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU,
// read by chrome://tracing and ui.perfetto.dev): one process per node of the
// cluster, one thread per rank, one complete ("ph": "X") event per
// instruction. Predicted times come from the plan; measured ones from a run.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Trace.h"
#include "hetplan/runtime/Files.h"
#include "hetplan/runtime/Json.h"

#include <cstdio>
#include <sstream>

namespace hetplan::runtime {

namespace {
using json::quoted;

std::string number(double v) { return json::number(v, "%.3f"); }

bool isCompute(plan::Instruction::Kind k) {
  return k == plan::Instruction::FORWARD || k == plan::Instruction::BACKWARD ||
         k == plan::Instruction::OPTIMIZER_STEP;
}
} // namespace

std::string instructionLabel(const plan::Instruction &ins) {
  std::string name = plan::Instruction::Kind_Name(ins.kind());
  switch (ins.kind()) {
  case plan::Instruction::ALLREDUCE_GRADIENTS:
  case plan::Instruction::OPTIMIZER_STEP:
    return name;
  default:
    return name + " mb" + std::to_string(ins.micro_batch());
  }
}

std::string traceJson(const plan::Plan &plan, const std::vector<TraceSpan> &measured) {
  std::ostringstream os;
  os << "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"producer\": " << quoted(plan.producer())
     << ", \"model\": " << quoted(plan.model().path()) << ", \"cluster\": "
     << quoted(plan.cluster().spec()) << ", \"times\": "
     << quoted(measured.empty() ? "predicted" : "measured") << "},\n\"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string &body) {
    os << (first ? "" : ",\n") << body;
    first = false;
  };
  // Names: nodes as processes, ranks as threads ordered by rank.
  for (int n = 0; n < plan.cluster().nodes_size(); ++n)
    event("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(n) +
          ", \"args\": {\"name\": " + quoted("node " + plan.cluster().nodes(n).name()) + "}}");
  auto nodeOf = [&](uint32_t rank) {
    return rank < uint32_t(plan.cluster().devices_size()) ? plan.cluster().devices(int(rank)).node() : 0u;
  };
  for (const auto &r : plan.ranks()) {
    std::string type = r.rank() < uint32_t(plan.cluster().devices_size())
                           ? plan.cluster().devices(int(r.rank())).type()
                           : "";
    std::string pid = std::to_string(nodeOf(r.rank())), tid = std::to_string(r.rank());
    event("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid + ", \"tid\": " + tid +
          ", \"args\": {\"name\": " +
          quoted("rank " + tid + " " + type + (r.program_size() ? " stage " + std::to_string(r.stage()) : " idle")) +
          "}}");
    event("{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + pid + ", \"tid\": " + tid +
          ", \"args\": {\"sort_index\": " + tid + "}}");
  }
  auto span = [&](uint32_t rank, const plan::Instruction &ins, double start, double end) {
    std::string args = "{\"micro_batch\": " + std::to_string(ins.micro_batch());
    if (ins.samples()) args += ", \"samples\": " + std::to_string(ins.samples());
    if (ins.bytes()) args += ", \"bytes\": " + std::to_string(ins.bytes());
    if (ins.peers_size()) {
      args += ", \"peers\": [";
      for (int i = 0; i < ins.peers_size(); ++i) args += (i ? ", " : "") + std::to_string(ins.peers(i));
      args += "]";
    }
    args += "}";
    event("{\"ph\": \"X\", \"name\": " + quoted(instructionLabel(ins)) + ", \"cat\": " +
          quoted(isCompute(ins.kind()) ? "compute" : "communication") + ", \"pid\": " +
          std::to_string(nodeOf(rank)) + ", \"tid\": " + std::to_string(rank) + ", \"ts\": " +
          number(start * 1e6) + ", \"dur\": " + number((end - start) * 1e6) + ", \"args\": " + args + "}");
  };
  if (measured.empty()) {
    for (const auto &r : plan.ranks())
      for (const auto &ins : r.program())
        span(r.rank(), ins, ins.predicted_start_s(), ins.predicted_end_s());
  } else {
    for (const TraceSpan &m : measured)
      if (m.rank < uint32_t(plan.ranks_size()) &&
          m.instruction < uint32_t(plan.ranks(int(m.rank)).program_size()))
        span(m.rank, plan.ranks(int(m.rank)).program(int(m.instruction)), m.start, m.end);
  }
  os << "\n]}\n";
  return os.str();
}

bool writeTrace(const plan::Plan &plan, const std::vector<TraceSpan> &measured,
                const std::string &path, std::string &error) {
  return writeFileAtomically(path, traceJson(plan, measured), error);
}

} // namespace hetplan::runtime
