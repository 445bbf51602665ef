//===- Baselines.h - the plan against the usual baselines -------*- C++ -*-===//
//
// Every train and infer plan records what the same model, cluster and
// settings give under the baseline strategies (`--strategy homogeneous`,
// `dp-even`, `pp-even`): the same planner, run once per strategy, so the
// plan's gain over them is printed beside it (docs/planner.md, "Baselines").
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_BASELINES_H
#define HETPLAN_PASSES_PLANNER_BASELINES_H

#include "hetplan/runtime/Plan.h"
#include "passes/planner/Planner.h"
#include "passes/planner/ServePlanner.h"

#include <string>
#include <vector>

namespace hetplan::planner {

struct BaselineResult {
  Strategy strategy = Strategy::Homogeneous;
  bool fits = false;
  double stepSeconds = 0, samplesPerSecond = 0;
  double capacityRps = 0, tpotP90 = 0;  // serving baselines
  /// Fits: the devices and stages it uses; else why it does not fit.
  std::string note;
};

/// The baseline strategies, in the order they are shown.
const std::vector<Strategy> &baselineStrategies();

/// Plans `model` on `cluster` with each baseline strategy and `options`'
/// other settings (dtype, schedule, memory savers; no pin, no progress).
/// `self` is the plan being compared when it came from one of the
/// strategies: it is reused instead of searched again.
std::vector<BaselineResult> planBaselines(const cost::ModelCost &model,
                                          const cluster::Cluster &cluster,
                                          const Options &options, const Plan *self = nullptr);

/// The serving baselines of a serving plan: "homogeneous" (the serving
/// planner on each device type's devices alone, the one of most capacity)
/// and "dp-even" (replicas of one pipeline stage each, the rate routed to
/// them evenly, simulated). Same options (rate, targets, picking).
/// A cluster of one type has the plan itself (`self`) as its homogeneous
/// baseline. Baselines simulate kServeBaselineRequests arrivals (the plan:
/// rate x 120 s, at least 2,000) to bound their cost.
constexpr uint64_t kServeBaselineRequests = 200;
std::vector<BaselineResult> planServeBaselines(const cost::ModelCost &prefill,
                                               const cost::ModelCost &decode,
                                               const cluster::Cluster &cluster,
                                               const serve::Options &options,
                                               const serve::ServePlan &self);

/// What a planner error says, short: "the closest needs 3.1 GiB more on
/// stage 0 of 1 on L4" from "no layout fits in memory: the closest needs
/// ... (fixes). What would fix it: ...".
std::string shortReason(const std::string &error);

/// "2 stage(s) on 2x H100-SXM + 4x A100-SXM-40GB": the devices a plan gives
/// work, by type, and its stages.
std::string planDevicesText(const Plan &plan, const cluster::Cluster &cluster);

/// Appends `baselines` to the plan file (Plan.baselines).
void exportBaselines(const std::vector<BaselineResult> &baselines, plan::Plan &out);

} // namespace hetplan::planner

#endif
