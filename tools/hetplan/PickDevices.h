//===- PickDevices.h - which GPUs to rent for a training step ---*- C++ -*-===//
#ifndef HETPLAN_TOOLS_HETPLAN_PICKDEVICES_H
#define HETPLAN_TOOLS_HETPLAN_PICKDEVICES_H

#include "passes/cluster/Cluster.h"
#include "passes/planner/Planner.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace hetplan::tools {

/// One item of an inline cluster spec: a group `[NODES x][DEVICES x]TYPE`,
/// `?` after it making its first count "up to" (--pick-devices), or an
/// option (net=, latency=) kept as written.
struct PickGroup {
  std::string text, type;
  bool option = false, optional = false;
  int max = 1;      // the first count: nodes when perNode > 0, else devices
  int perNode = 0;  // devices per node of a NODESxDEVICESxTYPE group
};

/// The groups of an inline spec (no '?' anywhere: every group optional, as
/// serving reads it); a cluster file is refused (see fileGroups).
llvm::Expected<std::vector<PickGroup>> parsePickGroups(llvm::StringRef spec);
/// Whether --cluster names a file rather than an inline spec.
bool isClusterFile(llvm::StringRef spec);
/// A cluster file's groups: one per device type (in rank order), each
/// optional up to the file's count of it; a mix keeps the first devices of
/// each type in rank order, on their nodes and links (fileSubset).
std::vector<PickGroup> fileGroups(const cluster::Cluster &cluster);
/// `cluster` with only the first counts[i] devices of groups[i]'s type.
cluster::Cluster fileSubset(const cluster::Cluster &cluster, const std::vector<PickGroup> &groups,
                            const std::vector<int> &counts);
/// The inline spec with `counts[i]` for group i (0: left out).
std::string pickSpec(const std::vector<PickGroup> &groups, const std::vector<int> &counts);

struct PickTargets {
  double stepSeconds = 0;       // --target-step-s
  double samplesPerSecond = 0;  // --target-samples-s
  double budgetPerHour = 0;     // --budget, $/h
  double timeLimitSeconds = 60; // the whole pick's search
  /// The software stack every mix is priced under (--stack; empty: the
  /// catalog's default).
  std::string stack;
  /// A cluster file's cluster (fileGroups' groups): mixes are its subsets,
  /// named "<counts> of <file>"; null for an inline spec.
  const cluster::Cluster *file = nullptr;
  std::string fileName;
  static constexpr size_t kMaxMixes = 4096;
  static constexpr size_t kShown = 5;  // the pick and its runners-up
};

struct PickedDevices {
  planner::Plan plan;
  std::optional<cluster::Cluster> cluster;  // always set
  std::string spec;    // the picked mix, an inline spec
  std::string report;  // the pick and the runners-up, for people
  /// The same for scripts (compile --json's "picked_devices"): the target,
  /// the ranked mixes shown, and how many were planned.
  llvm::json::Object json;
};

/// Plans every mix of counts (cheapest first, within the time limit) and
/// picks: with a step or throughput target the cheapest per hour meeting
/// it, under a budget the fastest, else the least $ per step.
llvm::Expected<PickedDevices> pickDevices(const cost::ModelCost &model,
                                          const std::vector<PickGroup> &groups,
                                          const cluster::DeviceCatalog &catalog,
                                          const planner::Options &options,
                                          const PickTargets &targets);

} // namespace hetplan::tools

#endif
