//===- FusedAttention.cpp - attention as one fused kernel -----------------===//

#include "passes/cost/FusedAttention.h"
#include "passes/cost/OpTableAdapter.h"

using namespace mlir;
using namespace hetplan::het;

namespace hetplan::cost {

namespace {

bool isActivationMatMul(NodeOp node, const GraphInfo &info) {
  const ops::OpDef *def = opDefOf(node);
  return node.getDomain().empty() && def && def->tp == ops::TpRole::Product &&
         node.getInputs().size() == 2 &&
         info.kind(node.getInputs()[0]) == ValueKind::Activation &&
         info.kind(node.getInputs()[1]) == ValueKind::Activation;
}

/// Ops a fused attention kernel absorbs between Q·Kᵀ and P·V.
bool absorbs(NodeOp node) {
  if (!node.getDomain().empty())
    return false;
  StringRef op = node.getOpType();
  const ops::OpDef *def = opDefOf(node);
  return (def && def->tp == ops::TpRole::AttentionNormalizer) || op == "Div" || op == "Mul" ||
         op == "Add" || op == "Sub" || op == "Where" || op == "Cast" || op == "Dropout" ||
         op == "Reshape";
}

} // namespace

std::vector<AttentionChain> findAttentionChains(const GraphInfo &info, int first, int last) {
  std::vector<AttentionChain> chains;
  for (int i = first; i <= last; ++i) {
    NodeOp qk = info.nodes[i];
    if (!isActivationMatMul(qk, info))
      continue;
    AttentionChain chain;
    chain.scores = i;
    chain.scoresValue = qk.getResult(0);
    bool softmax = false;
    Value v = chain.scoresValue;
    for (int step = 0; step < 8; ++step) {
      if (!v.hasOneUse())
        break;
      auto user = dyn_cast<NodeOp>(*v.getUsers().begin());
      int k = user ? info.indexOf(user) : -1;
      if (k <= i || k > last)
        break;
      if (isActivationMatMul(user, info) && user.getInputs()[0] == v) {
        if (softmax)
          chain.output = k;
        break;
      }
      if (!absorbs(user) || info.isFolded(user))
        break;
      const ops::OpDef *def = opDefOf(user);
      softmax |= def && def->tp == ops::TpRole::AttentionNormalizer;
      chain.inside.push_back(k);
      v = user.getResult(0);
    }
    if (chain.output == 0)
      continue;
    if (auto t = dyn_cast<ShapedType>(chain.scoresValue.getType());
        t && t.hasStaticShape() && t.getRank() >= 1 && t.getShape().back() > 0)
      chain.statisticsElements = double(t.getNumElements() / t.getShape().back());
    chains.push_back(std::move(chain));
  }
  return chains;
}

llvm::DenseSet<Value> fusedAwayValues(const GraphInfo &info,
                                      const std::vector<AttentionChain> &chains) {
  llvm::DenseSet<Value> away;
  for (const AttentionChain &c : chains) {
    away.insert(c.scoresValue);
    for (int k : c.inside)
      for (Value r : NodeOp(info.nodes[k]).getResults())
        away.insert(r);
  }
  return away;
}

llvm::DenseSet<int> fusedAwayNodes(const std::vector<AttentionChain> &chains) {
  llvm::DenseSet<int> nodes;
  for (const AttentionChain &c : chains) {
    nodes.insert(c.scores);
    nodes.insert(c.inside.begin(), c.inside.end());
  }
  return nodes;
}

void fuseAttentionCosts(const GraphInfo &info, const std::vector<AttentionChain> &chains,
                        int layerFirst, std::vector<OpCost> &layerOps, DType dtype) {
  double samples = double(std::max<int64_t>(info.samples, 1));
  for (const AttentionChain &c : chains) {
    OpCost &fused = layerOps[size_t(c.output - layerFirst)];
    std::vector<int> absorbed = c.inside;
    absorbed.push_back(c.scores);
    for (int k : absorbed) {
      OpCost &op = layerOps[size_t(k - layerFirst)];
      fused.flopsPerSample += op.flopsPerSample;
      fused.weightBytes += op.weightBytes;  // a mask read once per call
      op.flopsPerSample = op.bytesPerSample = op.weightBytes = op.launches = 0;
    }
    NodeOp qk = info.nodes[c.scores], pv = info.nodes[c.output];  // copies: ops are not const-correct
    double bytes = valueBytes(qk.getInputs()[0].getType(), dtype) +
                   valueBytes(qk.getInputs()[1].getType(), dtype) +
                   valueBytes(pv.getInputs()[1].getType(), dtype) +
                   valueBytes(pv.getResult(0).getType(), dtype) + 4 * c.statisticsElements;
    fused.bytesPerSample = bytes / samples;
    fused.matrixEngine = true;
    fused.launches = 1;
  }
}

} // namespace hetplan::cost
