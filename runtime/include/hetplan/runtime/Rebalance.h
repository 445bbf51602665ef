//===- Rebalance.h - moving data-parallel shares to measured speeds -*- C++ -*-===//
//
// Stragglers (docs/runtime.md, "Stragglers"): a plan's data-parallel shares
// come from predicted speeds. With rebalancing on, the runtime measures each
// worker's compute time per step (its FORWARD and BACKWARD instructions) and,
// when a stage's slowest worker takes more than (1 + threshold) times what
// the stage would take with shares proportional to the measured speeds, for
// `steps` consecutive steps, moves samples between the stage's workers at
// the step boundary: the whole shares (at least 1, summing to the
// micro-batch, within memory caps) that minimise the slowest worker's
// predicted time, from its measured seconds averaged over those steps
// (proportional to its speed; with a fixed cost fitted once it has been
// measured at two shares). Every rank
// computes the same shares from the same times (on threads they are shared;
// over MPI the ranks all-reduce them first), so no further agreement is
// needed. Gradients stay exact: the loss is normalised over the global
// batch and the workers' gradients are summed, so a different split gives
// the same update up to float rounding.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_REBALANCE_H
#define HETPLAN_RUNTIME_REBALANCE_H

#include "hetplan/runtime/PlanExecutor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hetplan::runtime {

struct RebalanceOptions {
  /// A stage is out of balance when its slowest worker's compute time
  /// exceeds the measured optimum by more than this fraction.
  double threshold = 0.10;
  /// ... for this many consecutive steps.
  int steps = 2;
  /// No worker gets more than this times the plan's largest share of the
  /// stage (activation memory grows with the share), nor more than its
  /// rank's recorded memory capacity allows (Rank.memory: capacity,
  /// activations and peak), when the plan records them.
  double growBound = 2.0;
};

/// One move of shares, at the boundary after step `step` (1-based).
struct RebalanceEvent {
  int step = 0;
  uint32_t stage = 0;
  std::vector<int64_t> oldShares, newShares; ///< per worker, samples per micro-batch
  std::vector<double> speeds;                ///< measured samples per compute second, per worker
  std::vector<double> seconds;               ///< the last step's compute seconds, per worker
  /// Non-empty when the shares could not move (PlanExecutor::setShares's reason).
  std::string refused;
  /// One line: "rebalance: after step 3, stage 0 shares 4,4,4 -> 5,5,2 (measured
  /// samples/s per worker: ...)", or "... shares kept at ...: <refused>".
  std::string describe() const;
};

/// Per rank: the seconds its FORWARD and BACKWARD instructions took in a
/// timed step (RankTiming::instructionSpans against its program); 0 for an
/// idle or untimed rank.
std::vector<double> rankComputeSeconds(const plan::Plan &plan, const PlanExecutor::StepTiming &timing);

/// A worker's measured cost model: a step's compute seconds for `n` samples
/// per micro-batch, fixed + perSample * n.
struct WorkerCost {
  double fixed = 0, perSample = 0;
  double seconds(int64_t n) const { return fixed + perSample * double(n); }
};
/// Integer shares >= 1 summing to `total`, none above its `caps` entry
/// (caps must allow the total), that minimise the slowest worker's
/// predicted seconds: one sample at a time to the worker that would then
/// finish first (ties to the lower index); optimal for costs that grow with
/// the share. Deterministic.
std::vector<int64_t> balancedShares(int64_t total, const std::vector<WorkerCost> &costs,
                                    const std::vector<int64_t> &caps);
/// balancedShares for costs 1 / speed per sample: shares proportional to
/// `speeds` up to whole samples.
std::vector<int64_t> proportionalShares(int64_t total, const std::vector<double> &speeds,
                                        const std::vector<int64_t> &caps);

/// Watches the measured compute times step after step and says when and how
/// a stage's shares move. Every rank runs one with the same inputs.
class Rebalancer {
public:
  Rebalancer(const plan::Plan &plan, RebalanceOptions options);
  /// After step `step`: `computeSeconds` per rank (rankComputeSeconds, the
  /// same on every rank). Returns the moves to make now (PlanExecutor::
  /// setShares with each event's newShares), at most one per stage.
  std::vector<RebalanceEvent> observe(const plan::Plan &current, const std::vector<double> &computeSeconds,
                                      int step);
  /// The most samples per micro-batch each worker of `stage` may take.
  const std::vector<int64_t> &caps(uint32_t stage) const { return caps_[stage]; }

private:
  RebalanceOptions options_;
  std::vector<std::vector<int64_t>> caps_;            // per stage, per worker
  std::vector<int> slowSteps_;                        // per stage
  std::vector<std::vector<std::vector<double>>> secondsHistory_; // per stage: slow steps x workers
  /// Per stage, per worker: (share, mean seconds) before the last move, for
  /// the fixed part of its cost; share 0 when none.
  std::vector<std::vector<std::pair<int64_t, double>>> before_;
  /// The cost models of a stage's workers from their seconds at `shares`.
  std::vector<WorkerCost> costs(size_t stage, const std::vector<int64_t> &shares,
                                const std::vector<double> &seconds) const;
};

/// After step `step`: observes `computeSeconds` (per rank, the same on
/// every rank) and moves the shares it calls for (exec.setShares). Returns
/// the events, refused ones included.
std::vector<RebalanceEvent> rebalanceStep(PlanExecutor &exec, Rebalancer &rebalancer,
                                          const std::vector<double> &computeSeconds, int step);

/// The test-only slowdown (PlanExecutor::setTestSlowdown) from "R:FRACTION"
/// (hetplan run --test-slow-rank): rank R of `ranks`, FRACTION > 0. Throws
/// one line on a bad value.
std::pair<int, double> parseSlowRank(const std::string &spec, int ranks);

} // namespace hetplan::runtime

#endif
