//===- ServingPlan.h - running a serving plan's replicas on CPU ranks -*- C++ -*-===//
//
// A serving plan (`hetplan compile --mode serve`, docs/serving.md) places
// replicas of a decoder on devices: each replica a pipeline of stages (node
// ranges of the model) and a share of the requests. ServingPlan runs it on
// the CPU: requests are routed to replicas by their shares (smooth weighted
// round robin, deterministic), every replica generates on its own thread
// with continuous batching up to its planned max batch (Generate.h), and
// each decode step runs the replica's stages in pipeline order, handing on
// only the values later stages read. A replica of several stages keeps one
// group of requests per stage in flight (GenerateOptions::pipelineGroups),
// each stage on its own thread, so stages work on different groups at the
// same time as the ranks of a pipeline do. Greedy outputs equal one rank's.
//
// Not yet: splitting a stage over its tensor-parallel ranks (a stage runs
// whole on one thread), and ranks in separate processes (MPI).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Generate.h"

#include <memory>
#include <string>
#include <vector>

namespace hetplan {

class HETPLAN_CXX_API ServingPlan {
public:
  /// Reads a serving plan and the model it names (relative to the plan's
  /// folder, or `modelPath`), checking the model's SHA-256 and node order
  /// and that every replica's stages cover the model's nodes in order.
  static Status load(const std::string &planPath, const std::string &modelPath,
                     std::unique_ptr<ServingPlan> *plan);
  ~ServingPlan();

  int replicas() const;
  /// "replica 0: 1x T4, stages 0-20 | 21-38, max batch 256, share 25.1%".
  std::string describeReplica(int replica) const;

  /// Generates every request on the replica routing gives it; results[i]
  /// answers requests[i] and replicaOf[i] (when not null) names its replica.
  /// options.maxBatch caps each replica's planned max batch.
  Status generate(const std::vector<GenerateRequest> &requests, const GenerateOptions &options,
                  std::vector<GenerateResult> *results, std::vector<int> *replicaOf = nullptr,
                  const std::function<void(size_t, const GenerateResult &)> &onDone = {}) const;

  struct Impl;

private:
  explicit ServingPlan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace hetplan
