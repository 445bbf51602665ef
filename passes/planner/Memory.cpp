//===- Memory.cpp - what a rank of a stage holds ----------------------------===//
//
// Weights, gradients, optimizer state, kept activations and workspace of
// one rank (docs/planner.md, "Memory").
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include <algorithm>
#include <cmath>

namespace hetplan::planner::detail {

/// Parameters a rank of stage [l, r] holds before any sharding: the
/// layers' own and a copy of each tied parameter whose owner is elsewhere.
double Search::stageParameters(int l, int r) const {
  double p = paramsPrefix[r + 1] - paramsPrefix[l];
  for (int i : tiedLayers)
    if (i >= l && i <= r)
      for (auto [owner, n] : model.layers[i].tiedParameters)
        if (owner < l || owner > r)
          p += double(n);
  return p;
}

double Search::sparseRows(int l, int r, double samples) const {
  double n = 0;
  for (int i : embeddingLayers)
    if (i >= l && i <= r)
      for (const auto &e : model.layers[i].embeddings)
        n += std::min(e.elements(), std::ceil(samples * e.lookupsPerSample) * double(e.rowElements));
  return n;
}

/// The largest layer's kept activations per sample on a rank of a tp group.
const RangeMax &Search::stashMax(int tp) {
  auto it = stashMaxByTp.find(tp);
  if (it == stashMaxByTp.end()) {
    std::vector<double> values;
    for (int i = 0; i < L; ++i)
      values.push_back(layerStash(i, tp));
    it = stashMaxByTp.emplace(tp, RangeMax(std::move(values))).first;
  }
  return it->second;
}

Need Search::need(int c, int l, int r, int tp, int workers, int inflight, int microBatches,
                  bool recompute, const Savers &sv) {
  Need n;
  n.framework = isGpu(c) ? opt.deviceContextBytes : 0;
  double params = stageParameters(l, r) / tp;
  double largest = largestActivation.max(l, r);
  double largestStash = training && recompute ? stashMax(tp).max(l, r) : 0;
  double largestLayer = training && sv.zero >= 3 ? largestParameters.max(l, r) : 0;
  // The backward pass of the largest op holds the gradients of its output
  // and of its inputs at once; at inference its inputs and output.
  n.transientPerSample = largest / tp;
  if (!training) {
    n.weights = params * elementBytes;
    n.kvPerSample = (kvPrefix[r + 1] - kvPrefix[l]) / tp * microBatches;
    return n;
  }
  int D = std::max(1, workers);
  // Sparse embedding updates: the stage's D workers hold 1/D of each
  // table's rows (TorchRec's row-wise sharding; one worker holds them
  // all), and a table's gradient is the rows of its shard that the step's
  // samples looked up (the owners receive them: "Embedding tables").
  double tables = (sparsePrefix[r + 1] - sparsePrefix[l]) / tp;
  double rows = tables > 0 ? sparseRows(l, r, double(opt.globalBatch)) / tp / D : 0;
  params -= tables * (1.0 - 1.0 / D);
  tables /= D;
  n.weights = (params - tables) * elementBytes / (sv.zero >= 3 ? D : 1) + tables * elementBytes;
  n.gradients = (params - tables) * elementBytes / (sv.zero >= 2 ? D : 1) + rows * elementBytes;
  // The optimizer's fp32 buffers and, below 4 bytes, the fp32 master weights.
  double stateBytes = std::max(0.0, trainingBytesPerParameter() - 2.0 * elementBytes);
  if (!sv.offload) {
    n.optimizer = (params - tables) * stateBytes / (sv.zero >= 1 ? D : 1) + tables * stateBytes;
    // Mixed precision: the optimizer steps on an fp32 copy of the
    // gradients (DeepSpeed's FP16_Optimizer, ZeRO's fp32 partition).
    if (elementBytes < 4)
      n.step = ((params - tables) / (sv.zero >= 1 ? D : 1) + rows) * 4.0;
  }
  // ZeRO-3 gathers the whole parameters of the layer it computes (not its
  // row-sharded tables: their rows come by the exchange).
  if (sv.zero >= 3)
    n.gather = largestLayer / tp * elementBytes;
  if (recompute) {
    n.keptPerSample = (layerInputPrefix[r + 1] - layerInputPrefix[l]) * inflight;
    n.transientPerSample += largestStash;
  } else {
    double stash = 0;
    if (tp == 1)
      stash = stashPrefix[r + 1] - stashPrefix[l];
    else
      stash = (stashPrefix[r + 1] - stashPrefix[l]) -
              (stashSplitPrefix[r + 1] - stashSplitPrefix[l]) * (1.0 - 1.0 / tp);
    n.keptPerSample = stash * inflight;
  }
  if (r == L - 1) {
    const cost::LayerCost &last = model.layers[L - 1];
    double elements = last.outputBytesPerSample / elementBytes;
    if (last.tensorParallelLossBytesPerSample > 0 || vocabHeadElements(L - 1, L - 1, tp) > 0)
      elements /= tp;  // vocab-parallel: each rank holds its columns
    if (opt.fusedCrossEntropy) {
      // One loss kernel: it keeps the logits in the run format (and a
      // log-sum-exp per row) and writes their gradient, which is the head's
      // output gradient that the transient term above already holds.
      n.keptPerSample += elementBytes * elements * inflight;
    } else {
      // The loss: its softmax kept in fp32 for the backward pass (Megatron
      // computes the cross entropy in fp32), and the gradient of the
      // model's output in the run format while the backward starts.
      n.keptPerSample += 4.0 * elements * inflight;
      n.transientPerSample += elementBytes * elements;
    }
  }
  return n;
}

} // namespace hetplan::planner::detail
