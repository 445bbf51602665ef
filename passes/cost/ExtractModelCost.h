//===- ExtractModelCost.h - the planner's view of a graph -------*- C++ -*-===//
//
// Reads a het.graph that went through het-bind-shapes (the batch and other
// dims bound, every shape static) and het-group-layers (het.layers) and
// returns its ModelCost: per layer the ops' per-sample costs, the parameters
// it owns, what it stashes for backward, what crosses the cut after it, and
// its tensor-parallel and KV-cache figures. Definitions: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_EXTRACTMODELCOST_H
#define HETPLAN_PASSES_COST_EXTRACTMODELCOST_H

#include "dialects/het/IR/HetOps.h"
#include "passes/cost/CostModel.h"

#include "llvm/Support/Error.h"

#include <optional>

namespace hetplan::cost {

struct ExtractOptions {
  /// The format the model runs in (bytes per float element, parameterBytes);
  /// unset: the format the graph's parameters are stored in.
  std::optional<DType> dtype;
  /// Samples per call the graph's shapes describe; 0: the size bound to
  /// "batch" (het.bound_dims), else the leading dim of the first input.
  int64_t samples = 0;
  /// A MatMul/Gemm whose weight has at least this many bytes (at the run
  /// format) is split by tensor parallelism.
  double tensorParallelMinWeightBytes = 1 << 20;
  /// Training: an LM head (a MatMul by a weight or its Transpose making the
  /// graph's first output, the one the loss is computed on) splits by
  /// vocabulary with the loss (Megatron's vocab-parallel cross entropy).
  bool training = false;
  /// Attention written out in ops runs as one fused kernel (the software
  /// stack's cluster::Stack::fusedAttention): priced as one kernel moving Q,
  /// K, V and O, and no S x S value is kept for backward (FusedAttention.h).
  bool fusedAttention = false;
  /// Chains of elementwise ops, each feeding only the next, run as one
  /// kernel (the stack's cluster::Stack::fusedElementwise: torch.compile /
  /// Inductor, a serving engine's fused norms and activations): one launch
  /// per chain, and the values inside a chain are never written or read.
  bool fusedElementwise = false;
};

/// The graph's costs, layer by layer. Fails (one line naming the graph or
/// node) when a shape is not static or the graph has no het.layers.
llvm::Expected<ModelCost> extractModelCost(het::GraphOp graph,
                                           const ExtractOptions &options = {});

} // namespace hetplan::cost

#endif
