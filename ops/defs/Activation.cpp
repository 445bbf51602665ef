//===- Activation.cpp - Relu, onnxruntime's fused GELUs -------------------===//
#include "ops/defs/Defs.h"

#include <tuple>

namespace hetplan::ops {

namespace defs {
namespace {

Cost reluCost(const CostIn &in) {
  Cost r;
  r.flops = in.totalOutputElems(); // one compare-select per element
  return r;
}

// com.microsoft FastGelu (the tanh form, with an optional bias): 12 FLOPs
// an element; BiasGelu: the bias add, then the erf form (divide, erf, add,
// 2 multiplies).
Cost fastGeluCost(const CostIn &in) {
  Cost r;
  r.flops = 12 * in.totalOutputElems();
  return r;
}
Cost biasGeluCost(const CostIn &in) {
  Cost r;
  r.flops = (1 + 2 + kTranscendental + 2) * in.totalOutputElems();
  return r;
}

} // namespace

void addActivationOps(std::vector<OpDef> &out) {
  OpDef d;
  d.type = "Relu";
  d.minInputs = d.maxInputs = 1;
  d.summary = "max(x, 0)";
  d.shape = sameAsInput;
  d.cost = reluCost;
  // y > 0 exactly where x > 0: the backward reads the output.
  d.keeps = Keeps::Output;
  d.tp = TpRole::Elementwise;
  d.fusible = true;
  out.push_back(d);

  for (auto [type, summary, cost] : {std::make_tuple("FastGelu", "GELU's tanh form, with an optional bias", fastGeluCost),
                                     std::make_tuple("BiasGelu", "GELU's erf form of x + bias", biasGeluCost)}) {
    out.push_back(define("com.microsoft", type, 1, 1, 2, summary, sameAsInput, cost));
  }
}

} // namespace defs
} // namespace hetplan::ops
