//===- FusedAttention.h - attention as one fused kernel ---------*- C++ -*-===//
//
// Attention written out in ops (Q·Kᵀ, scale, mask, Softmax, Dropout, P·V)
// runs under a fusing stack (cluster::Stack::fusedAttention: cuDNN SDPA in
// hetplan's CUDA runtime, FlashAttention in Megatron-LM) as one kernel that
// reads Q, K, V and writes O and the softmax statistics (one fp32 value per
// row: the log-sum-exp its backward recomputes the probabilities from). No
// S x S value is written to memory or kept for the backward pass.
// docs/cost-model.md, "Fused attention".
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_FUSEDATTENTION_H
#define HETPLAN_PASSES_COST_FUSEDATTENTION_H

#include "passes/cost/CostModel.h"
#include "passes/cost/OpCosts.h"

#include "llvm/ADT/DenseSet.h"

#include <vector>

namespace hetplan::cost {

/// One attention core among the top-level nodes [first, last].
struct AttentionChain {
  int scores = 0;              // Q·Kᵀ: a MatMul of two activations feeding a Softmax
  int output = 0;              // P·V: the MatMul that reads the probabilities
  std::vector<int> inside;     // the nodes between them (scale, mask, Softmax, Dropout)
  mlir::Value scoresValue;     // Q·Kᵀ's result
  double statisticsElements = 0;  // rows of the scores: one fp32 each
};

/// The attention cores of nodes [first, last], in order. A chain is found
/// only when every value between the two products has one user.
std::vector<AttentionChain> findAttentionChains(const GraphInfo &info, int first, int last);

/// The values of the chains that a fused kernel never writes (the scores
/// and every value computed from them before P·V).
llvm::DenseSet<mlir::Value> fusedAwayValues(const GraphInfo &info,
                                            const std::vector<AttentionChain> &chains);

/// The nodes whose outputs a fused kernel never writes (Q·Kᵀ and the nodes
/// between it and P·V).
llvm::DenseSet<int> fusedAwayNodes(const std::vector<AttentionChain> &chains);

/// Prices each chain as one kernel in `layerOps` (the layer's ops, node
/// `layerFirst` first): P·V's entry gets the chain's FLOPs on the matrix
/// engine, Q, K, V and O read or written once plus the statistics, and one
/// launch; the other nodes of the chain cost nothing.
void fuseAttentionCosts(const GraphInfo &info, const std::vector<AttentionChain> &chains,
                        int layerFirst, std::vector<OpCost> &layerOps, DType dtype);

} // namespace hetplan::cost

#endif
