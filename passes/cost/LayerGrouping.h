//===- LayerGrouping.h - cut a graph into layers ----------------*- C++ -*-===//
//
// Finds the cut points of het-group-layers: cuts of the top-level node order
// that the fewest activations cross, grouped into the model's repeated blocks
// (transformer blocks, ResNet bottlenecks) plus what comes before (stem,
// embeddings) and after (head). The algorithm is described in
// docs/cost-model.md ("Layers").
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_LAYERGROUPING_H
#define HETPLAN_PASSES_COST_LAYERGROUPING_H

#include "passes/cost/OpCosts.h"

#include <string>
#include <vector>

namespace hetplan::cost {

/// Top-level nodes [first, last] (indices into GraphInfo::nodes).
struct LayerRange {
  std::string name;
  int first = 0;
  int last = 0;
};

struct GroupingOptions {
  /// Merge neighbouring layers (the pair with the fewest FLOPs first) until
  /// there are at most this many; 0 = keep what the structure gives.
  int maxLayers = 0;
};

/// The layers of `info`'s graph, covering every top-level node in order.
std::vector<LayerRange> groupLayers(const GraphInfo &info, const GroupingOptions &options = {});

/// Activation values that cross the cut after top-level node `cut` (defined
/// at or before it, used after it or returned by the graph).
std::vector<mlir::Value> liveAcross(const GraphInfo &info, int cut);

/// The layers recorded on a graph by het-group-layers (`het.layers`);
/// an error when absent or when they do not cover the top-level nodes in
/// order.
llvm::Expected<std::vector<LayerRange>> readLayers(const GraphInfo &info);

} // namespace hetplan::cost

#endif
