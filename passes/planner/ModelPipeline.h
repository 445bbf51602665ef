//===- ModelPipeline.h - from a model file to its layer costs ---*- C++ -*-===//
//
// What `hetplan compile` does before it searches: import the model (or parse
// het IR), bind the batch to one sample, the sequence and any input shapes,
// run het-bind-shapes and het-group-layers, and extract the layer costs.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_MODELPIPELINE_H
#define HETPLAN_PASSES_PLANNER_MODELPIPELINE_H

#include "passes/cost/CostModel.h"
#include "passes/planner/PlanExport.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace hetplan::planner {

struct PipelineOptions {
  std::string path;                 // .onnx, .onnxtext or .mlir
  int64_t batch = 1;                // the global batch (checked against shapes)
  int64_t sequence = 0;             // binds a sequence-like symbolic dim
  std::vector<std::string> shapes;  // NAME=D0xD1x..., leading dim = batch
  bool allowMissingWeights = false;
  cluster::DType dtype = cluster::DType::FP16;
};

struct CostedModel {
  cost::ModelCost cost;
  std::map<std::string, int64_t> boundDims;  // as the plan records them
  std::vector<IoShape> inputs, outputs;
  /// Empty when the batch may be split (samples stay apart and the batch is
  /// on dim 0 of every input and output); else why it may not.
  std::string wholeBatchReason;
};

/// One-line errors name the file (and node, for shape errors).
llvm::Expected<CostedModel> costModelFile(const PipelineOptions &options);

} // namespace hetplan::planner

#endif
