//===- ExplainBaselines.cpp - the plan against its baselines, for people --===//
//
// Plan.baselines (docs/plan-format.md, "Baselines"): one line each with its
// predicted step time (serving: its capacity) and the plan's gain over it,
// or why it does not fit. Plans written before baselines were recorded have
// none: the report says so and nothing else changes.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"

#include <cstdio>
#include <string>

namespace hetplan::runtime {

double baselineGain(const plan::Plan &p, const plan::Baseline &b) {
  if (!b.fits())
    return 0;
  if (p.has_serving()) {
    double mine = p.serving().prediction().capacity_rps();
    return mine > 0 && b.capacity_rps() > 0 ? mine / b.capacity_rps() : 0;
  }
  double mine = p.prediction().step_time_s();
  return mine > 0 ? b.step_time_s() / mine : 0;
}

std::string baselineLine(const plan::Plan &p, const plan::Baseline &b) {
  char text[160];
  if (!b.fits()) {
    std::snprintf(text, sizeof(text), "%-12s ", b.strategy().c_str());
    return text + std::string("does not fit: ") + b.note();
  }
  if (p.has_serving())
    std::snprintf(text, sizeof(text), "%-12s capacity %8.2f req/s, TPOT p90 %.2f ms  x%.2f  ",
                  b.strategy().c_str(), b.capacity_rps(), b.tpot_p90_s() * 1e3,
                  baselineGain(p, b));
  else
    std::snprintf(text, sizeof(text), "%-12s %9.3f s %10.1f samples/s  x%.2f  ",
                  b.strategy().c_str(), b.step_time_s(), b.samples_per_s(),
                  baselineGain(p, b));
  return text + ("(" + b.note() + ")");
}

void explainBaselines(const plan::Plan &p, std::ostream &os, const std::string &indent) {
  bool serving = p.has_serving();
  // A section of explain's report (no indent) is headed like the others.
  const char *heading = indent.empty() ? "Baselines" : "baselines";
  if (p.baselines_size() == 0) {
    os << indent << heading
       << ": not recorded (a plan written before hetplan recorded them)\n";
    return;
  }
  os << indent << heading
     << (serving ? " (same model, cluster and workload; predicted; x = this plan's "
                   "capacity over the baseline's):\n"
                 : " (same model, cluster and settings; predicted; x = the "
                   "baseline's step time over this plan's):\n");
  for (const auto &b : p.baselines())
    os << indent << "  " << baselineLine(p, b) << "\n";
}

} // namespace hetplan::runtime
