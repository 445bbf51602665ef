//===- Activation.cpp - Relu ----------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {
namespace names {
const char *const Relu = "Relu";
} // namespace names

namespace defs {
namespace {

Cost reluCost(const CostIn &in) {
  Cost r;
  r.flops = in.totalOutputElems(); // one compare-select per element
  return r;
}

} // namespace

void addActivationOps(std::vector<OpDef> &out) {
  OpDef d;
  d.type = names::Relu;
  d.minInputs = d.maxInputs = 1;
  d.summary = "max(x, 0)";
  d.shape = sameAsInput;
  d.cost = reluCost;
  // y > 0 exactly where x > 0: the backward reads the output.
  d.keeps = Keeps::Output;
  d.tp = TpRole::Elementwise;
  d.fusible = true;
  out.push_back(d);
}

} // namespace defs
} // namespace hetplan::ops
