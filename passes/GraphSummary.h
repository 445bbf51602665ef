//===- GraphSummary.h - what a het.graph holds ------------------*- C++ -*-===//
#ifndef HETPLAN_PASSES_GRAPHSUMMARY_H
#define HETPLAN_PASSES_GRAPHSUMMARY_H

#include "dialects/het/IR/HetOps.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

namespace hetplan::het {

struct GraphSummary {
  struct Port {
    std::string name;
    std::string type; // e.g. "batch x 3 x 224 x 224 x f32"
  };
  std::string graphName;
  std::string source;             // model file, from the module
  int64_t numNodes = 0;           // het.node + het.constant, subgraphs included
  int64_t numSubgraphs = 0;       // regions of If/Loop/Scan nodes
  /// het.weight ops, and het.constant ops (ONNX Constant nodes) holding a
  /// float tensor of at least 2 elements: Paddle and TorchScript exports
  /// store weights as Constant nodes. Scalars and integer constants (shape
  /// vectors, axes) are not parameters; the cost model uses the same rule.
  int64_t numWeights = 0;
  int64_t numConstantWeights = 0; // of numWeights, the het.constant ones
  // Parameters by the cost model's rule (passes/cost, "parameters"): float
  // weights of two or more elements, not BatchNormalization running
  // statistics. The rest are buffers: integer/bool tensors, scalars, stats.
  int64_t numParameters = 0;      // elements of the parameter weights
  int64_t parameterBytes = 0;     // bytes of the parameter weights
  int64_t numBuffers = 0;         // weights that are not parameters
  int64_t bufferElements = 0;
  std::map<std::string, int64_t> opCounts; // sorted for stable output
  std::vector<Port> inputs, outputs;
  std::vector<std::string> symbolicDims; // distinct dim names, first-seen order
  std::string shapeInference;
};

/// Counts what `graph` holds.
GraphSummary summarizeGraph(GraphOp graph);

/// Writes a tensor type for people: symbolic dims by name, `?` for unnamed.
std::string formatType(mlir::Type type);

void printSummaryText(const GraphSummary &s, llvm::raw_ostream &os);
void printSummaryJson(const GraphSummary &s, llvm::raw_ostream &os);

} // namespace hetplan::het

#endif
