//===- MatMul.cpp - MatMul and Gemm ---------------------------------------===//
//
// ONNX MatMul (numpy matmul) and Gemm (Y = alpha op(A) op(B) + beta C). A
// multiply-add is 2 FLOPs (docs/cost-model.md).
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {
namespace names {
const char *const MatMul = "MatMul";
const char *const Gemm = "Gemm";
} // namespace names

namespace defs {
namespace {

bool matMulShapeRule(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> a, b;
  if (!requireShape(in, 0, a, why) || !requireShape(in, 1, b, why))
    return why.empty();
  auto result = matMulShape(a, b, why);
  if (!result)
    return false;
  out[0] = like(*result);
  return true;
}

Cost matMulCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  if (in.inputs.empty())
    return r;
  const auto &a = in.inputs[0];
  if (!a || a->empty())
    return r;
  r.flops = 2 * in.totalOutputElems() * double(a->back());
  return r;
}

std::string matMulCheck(const CheckIn &in, const std::string &) {
  if (in.rank(0) == 0 || in.rank(1) == 0) return "MatMul inputs must have rank >= 1";
  int64_t ka = in.rank(0) >= 1 ? in.dim(0, in.rank(0) - 1) : -1;
  int64_t kb = in.rank(1) >= 1 ? in.dim(1, in.rank(1) >= 2 ? in.rank(1) - 2 : 0) : -1;
  if (ka >= 0 && kb >= 0 && ka != kb)
    return "inner dims differ (" + std::to_string(ka) + " and " + std::to_string(kb) + ")";
  return "";
}

bool gemmShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> a, b;
  if (!requireShape(in, 0, a, why) || !requireShape(in, 1, b, why))
    return why.empty();
  if (a.size() != 2 || b.size() != 2)
    return (why = "Gemm operands must be matrices", false);
  bool ta = in.attrs.intOr("transA", 0), tb = in.attrs.intOr("transB", 0);
  int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (!isUnknown(ka) && !isUnknown(kb) && ka != kb)
    return (why = "contraction sizes differ: " + std::to_string(ka) + " and " + std::to_string(kb), false);
  out[0] = like({m, n});
  return true;
}

Cost gemmCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  if (in.inputs.empty())
    return r;
  const auto &a = in.inputs[0];
  if (!a || a->size() != 2)
    return r;
  double k = double(in.attrs.intOr("transA", 0) ? (*a)[0] : (*a)[1]);
  double out = in.totalOutputElems();
  r.flops = 2 * out * k + (in.present.size() > 2 && in.present[2] ? out : 0);
  return r;
}

std::string gemmCheck(const CheckIn &in, const std::string &) {
  for (size_t i : {0, 1})
    if (in.rank(i) >= 0 && in.rank(i) != 2) return "A and B must be 2-D";
  int64_t ka = in.dim(0, in.attrs.intOr("transA", 0) ? 0 : 1), kb = in.dim(1, in.attrs.intOr("transB", 0) ? 1 : 0);
  if (ka >= 0 && kb >= 0 && ka != kb)
    return "inner dims differ (" + std::to_string(ka) + " and " + std::to_string(kb) + ")";
  return "";
}

} // namespace

void addMatMulOps(std::vector<OpDef> &out) {
  OpDef m;
  m.type = names::MatMul;
  m.minInputs = m.maxInputs = 2;
  m.summary = "numpy matmul: batch dims broadcast, 1-D operands promoted";
  m.shape = matMulShapeRule;
  m.cost = matMulCost;
  m.check = matMulCheck;
  m.keeps = Keeps::Inputs;
  m.tp = TpRole::Product;
  out.push_back(m);

  OpDef g;
  g.type = names::Gemm;
  g.minInputs = 2;
  g.maxInputs = 3;
  g.summary = "Y = alpha op(A) op(B) + beta C over matrices";
  g.shape = gemmShape;
  g.cost = gemmCost;
  g.check = gemmCheck;
  g.keeps = Keeps::Inputs;
  out.push_back(g);
}

} // namespace defs
} // namespace hetplan::ops
