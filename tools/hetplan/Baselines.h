//===- Baselines.h - baselines in compile's and explain's output -*- C++ -*-===//
#ifndef HETPLAN_TOOLS_HETPLAN_BASELINES_H
#define HETPLAN_TOOLS_HETPLAN_BASELINES_H

#include "hetplan/runtime/Plan.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace hetplan::tools {

/// Plan.baselines as JSON: [{"strategy", "fits", "step_time_s",
/// "samples_per_s", "gain", "note"}] (serving: "capacity_rps",
/// "tpot_p90_s" instead of the step figures); empty for an older plan.
llvm::json::Array baselinesJson(const plan::Plan &plan);

/// The summary's baseline lines (runtime::explainBaselines, indented).
void printBaselines(const plan::Plan &plan, llvm::raw_ostream &os);

} // namespace hetplan::tools

#endif
