//===- MatMul.cpp - MatMul, Gemm and their integer forms -------------------===//
//
// ONNX MatMul (numpy matmul) and Gemm (Y = alpha op(A) op(B) + beta C), and
// the integer products that keep their shape and cost rules over their data
// operands: MatMulInteger, QLinearMatMul, com.microsoft's QGemm. A
// multiply-add is 2 FLOPs (docs/cost-model.md).
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {

std::optional<std::vector<int64_t>> matMulShape(const std::vector<int64_t> &aIn, const std::vector<int64_t> &bIn,
                                                std::string &why) {
  std::vector<int64_t> a = aIn, b = bIn;
  if (a.empty() || b.empty())
    return (why = "MatMul operands must not be scalars", std::nullopt);
  bool aVec = a.size() == 1, bVec = b.size() == 1;
  if (aVec)
    a.insert(a.begin(), 1);
  if (bVec)
    b.push_back(1);
  int64_t k1 = a.back(), k2 = b[b.size() - 2];
  if (!isUnknown(k1) && !isUnknown(k2) && k1 != k2) {
    why = "contraction sizes differ: " + std::to_string(k1) + " and " + std::to_string(k2);
    return std::nullopt;
  }
  auto batch = broadcast(std::vector<int64_t>(a.begin(), a.end() - 2), std::vector<int64_t>(b.begin(), b.end() - 2));
  if (!batch)
    return (why = "batch dimensions do not broadcast", std::nullopt);
  std::vector<int64_t> result = *batch;
  if (!aVec)
    result.push_back(a[a.size() - 2]);
  if (!bVec)
    result.push_back(b.back());
  return result;
}

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
  // Both operands batched (rank >= 3): one GEMM per batch element; with a
  // 2-D operand the runtime folds the batch into the rows of one GEMM.
  const auto &b = in.inputs.size() > 1 ? in.inputs[1] : std::nullopt;
  if (b && a->size() >= 3 && b->size() >= 3) {
    double products = 1;
    for (size_t d = 0; d + 2 < std::max(a->size(), b->size()); ++d) {
      int64_t da = d + a->size() >= b->size() ? (*a)[d + a->size() - std::max(a->size(), b->size())] : 1;
      int64_t db = d + b->size() >= a->size() ? (*b)[d + b->size() - std::max(a->size(), b->size())] : 1;
      products *= double(std::max(da, db));
    }
    r.batchedProducts = products;
  }
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

// QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp: float32 output
// without y_scale.
bool qGemmShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  if (!onPicked(gemmShape, in, {0, 3}, out, why))
    return false;
  if (in.inputs.size() > 7 && in.inputs[7].present)
    retype(out, Element::OfInput, zeroPointOr(in, 8, 0));
  else
    retype(out, Element::Float32);
  return true;
}

// Gemm's products, plus the bias and the requantization.
Cost qGemmCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  auto a = staticInput(in, 0);
  if (a && a->size() == 2) {
    double k = double(in.attrs.intOr("transA", 0) ? (*a)[0] : (*a)[1]);
    double out = in.totalOutputElems();
    r.flops = 2 * out * k + (given(in, 6) ? out : 0) + 2 * out;
  }
  return r;
}

} // namespace

void addMatMulOps(std::vector<OpDef> &out) {
  OpDef m;
  m.type = "MatMul";
  m.minInputs = m.maxInputs = 2;
  m.summary = "numpy matmul: batch dims broadcast, 1-D operands promoted";
  m.shape = matMulShapeRule;
  m.cost = matMulCost;
  m.check = matMulCheck;
  m.keeps = Keeps::Inputs;
  m.tp = TpRole::Product;
  m.weightProduct = true;
  out.push_back(m);

  // The integer products: MatMul's rules over their data operands; no
  // backward, no tensor-parallel role.
  OpDef mi = define("", "MatMulInteger", 10, 2, 4, "numpy matmul of integers less their zero points, int32 result",
                    integerProductShape<matMulShapeRule>, matMulCost);
  mi.check = matMulCheck;
  mi.weightProduct = true;
  out.push_back(mi);
  const char *qSummary = "numpy matmul of quantized tensors, requantized to the output scale and zero point";
  out.push_back(define("", "QLinearMatMul", 10, 8, 8, qSummary, qLinearProductShape<matMulShapeRule>, matMulCost));
  out.push_back(define("com.microsoft", "QLinearMatMul", 1, 8, 8, qSummary, qLinearProductShape<matMulShapeRule>, matMulCost));

  OpDef g;
  g.type = "Gemm";
  g.minInputs = 2;
  g.maxInputs = 3;
  g.summary = "Y = alpha op(A) op(B) + beta C over matrices";
  g.shape = gemmShape;
  g.cost = gemmCost;
  g.check = gemmCheck;
  g.keeps = Keeps::Inputs;
  g.weightProduct = true;
  out.push_back(g);

  out.push_back(define("com.microsoft", "QGemm", 1, 6, 9,
                      "Gemm of quantized matrices; requantized when y_scale is given, else float32", qGemmShape,
                      qGemmCost));
}

} // namespace defs
} // namespace hetplan::ops
