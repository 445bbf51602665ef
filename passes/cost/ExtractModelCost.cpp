//===- ExtractModelCost.cpp - the planner's view of a graph ---------------===//

#include "passes/cost/ExtractModelCost.h"
#include "passes/cost/LayerGrouping.h"
#include "passes/cost/OpCosts.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <functional>
#include <numeric>

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


//===----------------------------------------------------------------------===//
// What the backward pass keeps (docs/cost-model.md, "Training and memory")
//===----------------------------------------------------------------------===//

/// What an op's gradient needs from its forward pass.
enum class Keeps {
  Nothing,  // linear in its inputs, or data-independent (Add, Transpose, x * c)
  Inputs,   // its activation inputs (MatMul, LayerNorm, GELU, Erf, Pow, x * y)
  Output,   // its output (Softmax, Tanh, Sigmoid, Exp, Sqrt, Relu)
  Mask,     // a one-byte mask per output element (Dropout in training)
};

Keeps backwardKeeps(NodeOp node, const GraphInfo &info) {
  StringRef op = node.getOpType();
  if (op == "Dropout")
    return Keeps::Mask;
  static const llvm::StringSet<> output = {
      "Softmax", "LogSoftmax", "Sigmoid", "Tanh", "Exp", "Sqrt", "Relu", "Reciprocal",
      "HardSigmoid"};
  static const llvm::StringSet<> nothing = {
      "Add", "Sub", "Neg", "Sum", "Mean", "Identity", "Reshape", "Flatten", "Squeeze",
      "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
      "GatherND", "Cast", "CastLike", "Expand", "Tile", "Pad", "ReduceSum", "ReduceMean",
      "AveragePool", "GlobalAveragePool", "DepthToSpace", "SpaceToDepth", "Shape", "Size",
      "ConstantOfShape", "Range", "Trilu", "Resize", "Upsample", "CumSum", "Equal",
      "Less", "Greater", "Not", "And", "Or", "ArgMax", "ArgMin", "OneHot"};
  if (output.contains(op))
    return Keeps::Output;
  if (nothing.contains(op))
    return Keeps::Nothing;
  // A product or quotient by a constant is linear: no data kept.
  if (op == "Mul" || op == "Div") {
    int activations = 0;
    for (Value in : node.getInputs())
      activations += info.kind(in) == ValueKind::Activation;
    if (activations < 2 && (op == "Mul" ||
                            info.kind(node.getInputs()[1]) != ValueKind::Activation))
      return Keeps::Nothing;
  }
  if (op == "Where")
    return info.kind(node.getInputs()[0]) == ValueKind::Activation ? Keeps::Inputs
                                                                    : Keeps::Nothing;
  return Keeps::Inputs;
}

/// Elementwise ops that a training framework fuses into one kernel when one
/// feeds only another (PyTorch's JIT fusers, Megatron's fused bias-GELU):
/// the fused kernel keeps the chain's inputs and recomputes its inside.
bool isElementwise(NodeOp node) {
  static const llvm::StringSet<> ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt",
      "Relu", "Neg", "Abs", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Clip",
      "LeakyRelu", "Where", "Cast", "Reciprocal", "Softplus", "Swish", "HardSwish",
      "HardSigmoid", "Elu", "Selu", "Celu", "Mish"};
  return node.getDomain().empty() || node.getDomain() == "com.microsoft"
             ? ops.contains(node.getOpType())
             : false;
}

/// Bytes (at `dtype`, the whole call) of the activations the backward pass
/// of nodes [first, last] keeps: each op keeps what its gradient needs
/// (backwardKeeps); a chain of elementwise ops in which each feeds only the
/// next is one fused kernel that keeps the chain's activation inputs when
/// any of its ops needs data; a tensor kept by several ops counts once.
/// `split[i - first]` marks the ops tensor parallelism splits; `splitBytes`
/// gets the part of the result that lies in values it shards: outputs of a
/// split product whose activation input is whole (column-parallel) or of
/// an attention product, and everything computed from them until a split
/// product with a weight reads them (row-parallel: its output is reduced).
struct Kept {
  double bytes = 0, splitBytes = 0;
};
Kept keptBytes(const GraphInfo &info, int first, int last, DType dtype,
               const std::vector<bool> &split) {
  llvm::DenseMap<Operation *, int> index;
  for (int i = first; i <= last; ++i)
    index[info.nodes[i]] = i;
  // Fusion groups: union a producer into its only consumer.
  std::vector<int> parent(last - first + 1);
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return parent[x] == x ? x : parent[x] = find(parent[x]);
  };
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (!isElementwise(node) || info.isFolded(node) || node.getNumResults() != 1)
      continue;
    Value out = node.getResult(0);
    if (!out.hasOneUse())
      continue;
    Operation *user = *out.getUsers().begin();
    auto it = index.find(user);
    if (it == index.end() || !isElementwise(cast<NodeOp>(user)))
      continue;
    parent[find(i - first)] = find(it->second - first);
  }
  // Which groups need data, and the values each group reads from outside.
  std::vector<bool> needsData(parent.size(), false);
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (!info.isFolded(node) && isElementwise(node) &&
        backwardKeeps(node, info) != Keeps::Nothing)
      needsData[find(i - first)] = true;
  }
  llvm::DenseSet<Value> sharded;
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    bool anySharded = false, hasWeight = false;
    for (Value in : node.getInputs()) {
      anySharded |= sharded.contains(in);
      hasWeight |= info.kind(in) != ValueKind::Activation;
    }
    bool out = split[i - first] && hasWeight ? !anySharded : anySharded || split[i - first];
    if (out)
      for (Value r : node.getResults())
        sharded.insert(r);
  }
  llvm::DenseSet<Value> kept;
  double maskBytes = 0, maskSplit = 0;
  auto keep = [&](Value v) {
    if (info.kind(v) == ValueKind::Activation)
      kept.insert(v);
  };
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (info.isFolded(node))
      continue;
    int group = find(i - first);
    if (isElementwise(node)) {
      if (!needsData[group])
        continue;
      for (Value in : node.getInputs()) {
        auto def = in.getDefiningOp();
        auto it = def ? index.find(def) : index.end();
        if (it == index.end() || find(it->second - first) != group)
          keep(in);
      }
      continue;
    }
    switch (backwardKeeps(node, info)) {
    case Keeps::Nothing:
      break;
    case Keeps::Inputs:
      for (Value in : node.getInputs())
        keep(in);
      break;
    case Keeps::Output:
      for (Value out : node.getResults())
        keep(out);
      break;
    case Keeps::Mask:
      for (Value out : node.getResults())
        if (info.kind(out) == ValueKind::Activation)
          if (auto t = dyn_cast<ShapedType>(out.getType()); t && t.hasStaticShape()) {
            maskBytes += double(t.getNumElements());
            if (sharded.contains(out))
              maskSplit += double(t.getNumElements());
          }
      break;
    }
  }
  Kept result{maskBytes, maskSplit};
  for (Value v : kept) {
    double b = valueBytes(v.getType(), dtype);
    result.bytes += b;
    if (sharded.contains(v))
      result.splitBytes += b;
  }
  return result;
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
        layer.largestActivationBytesPerSample =
            std::max(layer.largestActivationBytesPerSample,
                     activationBytes(node.getResults(), info, dtype) / samples);
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
    std::vector<bool> splitOps;
    for (const OpCost &op : layer.ops)
      splitOps.push_back(op.tensorParallelSplit);
    Kept kept = keptBytes(info, r.first, r.last, dtype, splitOps);
    layer.stashBytesPerSample = kept.bytes / samples;
    layer.stashSplitBytesPerSample = kept.splitBytes / samples;
    model.layers.push_back(std::move(layer));
  }

  for (const Parameter &p : info.parameters) {
    LayerCost &layer = model.layers[layerOf[p.firstUser]];
    layer.parameters += p.elements;
    layer.parameterBytes += valueBytes(p.value.getType(), dtype);
  }
  // Tied parameters: read (directly or through folded ops) by a layer that
  // does not own them.
  llvm::DenseMap<Value, size_t> paramIndex;
  for (auto [k, p] : llvm::enumerate(info.parameters))
    paramIndex[p.value] = k;
  for (auto [l, r] : llvm::enumerate(*ranges)) {
    llvm::DenseSet<size_t> seen;
    std::function<void(Value)> visit = [&](Value v) {
      if (auto it = paramIndex.find(v); it != paramIndex.end()) {
        const Parameter &p = info.parameters[it->second];
        if (layerOf[p.firstUser] != int(l) && seen.insert(it->second).second)
          model.layers[l].tiedParameters.push_back({layerOf[p.firstUser], p.elements});
        return;
      }
      auto node = dyn_cast_or_null<NodeOp>(v.getDefiningOp());
      if (node && info.kind(v) == ValueKind::Constant)
        for (Value in : node.getInputs())
          visit(in);
    };
    for (int i = r.first; i <= r.last; ++i)
      if (!info.isFolded(info.nodes[i]))
        for (Value in : info.nodes[i].getInputs())
          if (info.kind(in) == ValueKind::Constant)
            visit(in);
  }
  for (const LayerCost &layer : model.layers) {
    model.parameters += layer.parameters;
    model.parameterBytes += layer.parameterBytes;
  }
  return model;
}

} // namespace hetplan::cost
