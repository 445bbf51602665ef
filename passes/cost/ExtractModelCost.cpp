//===- ExtractModelCost.cpp - the planner's view of a graph ---------------===//

#include "passes/cost/ExtractModelCost.h"
#include "passes/cost/LayerGrouping.h"
#include "passes/cost/OpCosts.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace hetplan::het;

namespace hetplan::cost {

namespace {

llvm::Error failure(GraphOp graph, const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 ("graph @" + graph.getSymName() + ": " + why).str());
}

bool isMatMul(NodeOp node) {
  return node.getDomain().empty() && node.getOpType() == "MatMul";
}

/// A MatMul of two activations: the Q K^T or P V product of an attention
/// written out in ops.
bool isActivationProduct(NodeOp node, const GraphInfo &info) {
  return isMatMul(node) && node.getInputs().size() == 2 &&
         info.kind(node.getInputs()[0]) == ValueKind::Activation &&
         info.kind(node.getInputs()[1]) == ValueKind::Activation;
}

/// Whether `v` reaches a Softmax through at most a few elementwise ops (scale,
/// mask): then the MatMul producing it computes attention scores.
bool feedsSoftmax(Value v, int depth = 4) {
  for (Operation *user : v.getUsers()) {
    auto node = dyn_cast<NodeOp>(user);
    if (!node || !node.getDomain().empty())
      continue;
    StringRef op = node.getOpType();
    if (op == "Softmax")
      return true;
    if (depth > 0 && (op == "Div" || op == "Mul" || op == "Add" || op == "Sub" ||
                      op == "Where" || op == "Cast" || op == "Reshape"))
      for (Value r : node.getResults())
        if (feedsSoftmax(r, depth - 1))
          return true;
  }
  return false;
}

double activationBytes(ValueRange values, const GraphInfo &info, DType dtype) {
  double total = 0;
  for (Value v : values)
    if (info.kind(v) == ValueKind::Activation)
      total += valueBytes(v.getType(), dtype);
  return total;
}

} // namespace

llvm::Expected<ModelCost> extractModelCost(GraphOp graph, const ExtractOptions &options) {
  GraphInfo info(graph, options.samples);
  if (auto bad = info.findNonStatic())
    return failure(graph, bad->second);
  auto ranges = readLayers(info);
  if (!ranges)
    return ranges.takeError();
  DType dtype = options.dtype.value_or(graphDType(info));
  double samples = double(std::max<int64_t>(info.samples, 1));

  ModelCost model;
  model.graphName = graph.getSymName().str();
  model.dtype = dtype;
  model.boundSamples = info.samples;
  std::vector<OpCost> costs;
  for (NodeOp node : info.nodes) {
    costs.push_back(computeOpCost(node, info, dtype));
    model.nodeNames.push_back(costs.back().name);
  }
  model.inputBytesPerSample =
      activationBytes(graph.getBody().front().getArguments(), info, dtype) /
      samples;

  std::vector<int> layerOf(info.nodes.size(), 0);
  for (auto [l, r] : llvm::enumerate(*ranges))
    for (int i = r.first; i <= r.last; ++i)
      layerOf[i] = int(l);

  for (const LayerRange &r : *ranges) {
    LayerCost layer;
    layer.name = r.name;
    layer.firstNode = r.first;
    layer.lastNode = r.last;
    double bigFlops = 0, attentionFlops = 0;
    bool hasAttention = false;
    std::vector<size_t> splitAttention;  // split only when the MatMuls are
    for (int i = r.first; i <= r.last; ++i) {
      NodeOp node = info.nodes[i];
      const OpCost &cost = costs[i];
      layer.ops.push_back(cost);
      if (cost.launches > 0)
        layer.stashBytesPerSample +=
            activationBytes(node.getResults(), info, dtype) / samples;
      if (auto w = matmulWeightBytes(node, info, dtype);
          w && *w >= options.tensorParallelMinWeightBytes) {
        bigFlops += cost.flopsPerSample;
        layer.ops.back().tensorParallelSplit = true;
      }
      bool fused = node.getDomain().empty() && node.getOpType() == "Attention";
      if (fused || isActivationProduct(node, info)) {
        hasAttention = true;
        attentionFlops += cost.flopsPerSample;
        splitAttention.push_back(layer.ops.size() - 1);
      }
      // KV cache: the keys and values an attention reads.
      if (fused && node.getInputs().size() >= 3) {
        if (node.getNumResults() >= 3)
          layer.kvCacheBytesPerSample +=
              (valueBytes(node.getResult(1).getType(), dtype) +
               valueBytes(node.getResult(2).getType(), dtype)) / samples;
        else
          layer.kvCacheBytesPerSample +=
              (valueBytes(node.getInputs()[1].getType(), dtype) +
               valueBytes(node.getInputs()[2].getType(), dtype)) / samples;
      } else if (isActivationProduct(node, info) && feedsSoftmax(node.getResult(0))) {
        // Q K^T: K is the second operand; V has as many elements.
        layer.kvCacheBytesPerSample +=
            2 * valueBytes(node.getInputs()[1].getType(), dtype) / samples;
      }
    }
    double flops = layer.flopsPerSample();
    double split = bigFlops + (bigFlops > 0 ? attentionFlops : 0);
    layer.tensorParallelFraction = flops > 0 ? std::min(1.0, split / flops) : 0;
    double out = activationBytes(liveAcross(info, r.last), info, dtype) / samples;
    layer.outputBytesPerSample = out;
    if (bigFlops > 0) {
      for (size_t k : splitAttention)
        layer.ops[k].tensorParallelSplit = true;
      layer.tensorParallelAllReduceBytesPerSample = (hasAttention ? 2 : 1) * out;
      // The model's output (an LM head): in training, Megatron's
      // vocab-parallel cross entropy (mpu/cross_entropy.py) reduces the
      // row max, the target logit and the sum of exponentials, three fp32
      // values per row of the split logits, never the logits themselves.
      std::vector<Value> live = liveAcross(info, r.last);
      if (r.last + 1 == int(info.nodes.size()) && live.size() == 1)
        if (auto t = dyn_cast<ShapedType>(live[0].getType());
            t && t.hasStaticShape() && t.getRank() >= 2 && t.getShape().back() > 0)
          layer.tensorParallelLossBytesPerSample =
              3.0 * 4.0 * double(t.getNumElements() / t.getShape().back()) / samples;
    }
    model.layers.push_back(std::move(layer));
  }

  for (const Parameter &p : info.parameters) {
    LayerCost &layer = model.layers[layerOf[p.firstUser]];
    layer.parameters += p.elements;
    layer.parameterBytes += valueBytes(p.value.getType(), dtype);
  }
  for (const LayerCost &layer : model.layers) {
    model.parameters += layer.parameters;
    model.parameterBytes += layer.parameterBytes;
  }
  return model;
}

} // namespace hetplan::cost
