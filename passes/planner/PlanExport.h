//===- PlanExport.h - a planner result as a plan file -----------*- C++ -*-===//
//
// Turns the planner's result into the runtime's plan schema: the model
// reference, the cluster, stages with their workers, and one instruction
// program per rank (receive, compute, send, all-reduce, optimizer step) in
// the order the schedule simulation ran them.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_PLANEXPORT_H
#define HETPLAN_PASSES_PLANNER_PLANEXPORT_H

#include "hetplan/runtime/Plan.h"
#include "passes/planner/Planner.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hetplan::planner {

/// A graph input or output as compiled: its shape with the batch dim at one
/// sample, and the axis that carries the batch (-1: none).
struct IoShape {
  std::string name;
  std::vector<int64_t> dims;
  int64_t batchAxis = -1;
  std::vector<int64_t> values; // inputs: the values compiled for (--value), else empty
};

struct ExportInfo {
  std::string modelPath;
  std::string modelSha256;
  uint64_t modelBytes = 0;
  std::string clusterSpec;
  int64_t sequence = 0;
  std::map<std::string, int64_t> boundDims;
  std::string costModel = "roofline";
  /// Graph inputs and outputs at one sample with their batch axes, and why
  /// the batch may not be split ("" when it may).
  std::vector<IoShape> inputs, outputs;
  std::string wholeBatchReason;
};

/// The parts every plan shares: schema version, producer, the model
/// reference with its layers, and the cluster.
plan::Plan exportPlanHeader(const cost::ModelCost &model, const cluster::Cluster &cluster,
                            cost::DType dtype, const ExportInfo &info);

plan::Plan exportPlan(const Plan &result, const cost::ModelCost &model,
                      const cluster::Cluster &cluster, const Options &options,
                      const ExportInfo &info);

} // namespace hetplan::planner

#endif
