//===- Softmax.cpp - Softmax, LogSoftmax, Hardmax -------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {

namespace defs {
namespace {

Cost perElement(const CostIn &in, double flops) {
  Cost r;
  r.flops = flops * in.totalOutputElems();
  return r;
}
// max, subtract, exp, sum, divide per element
Cost softmaxCost(const CostIn &in) { return perElement(in, kTranscendental + 4); }
Cost hardmaxCost(const CostIn &in) { return perElement(in, 2); }

// The axis defaulted to 1 (and flattened the dims from it on) before opset 13.
std::string axisCheck(const CheckIn &in, const std::string &) {
  return axisAttr(in, "axis", in.opset < 13 ? 1 : -1, in.rank(0));
}

std::string axisMixes(const Attrs &attrs, int64_t opset, const std::vector<int> &carries, const std::string &op) {
  int64_t rank = int64_t(carries.size());
  if (opset >= 13) {
    int64_t a = normAxis(attrs.intOr("axis", -1), rank);
    return a >= 0 && a < rank && carries[size_t(a)] ? alongFrom(carries, a, op) : "";
  }
  return alongFrom(carries, attrs.intOr("axis", 1), op);
}

OpDef axisOp(const char *type, const char *summary, CostFn cost) {
  OpDef d = define("", type, 1, 1, 1, summary, sameAsInput, cost);
  d.check = axisCheck;
  d.mixesSamples = axisMixes;
  return d;
}

} // namespace

void addSoftmaxOps(std::vector<OpDef> &out) {
  OpDef s = axisOp("Softmax", "exp(x) / sum(exp(x)) along `axis`", softmaxCost);
  s.keeps = Keeps::Output;
  s.tp = TpRole::AttentionNormalizer;
  out.push_back(s);
  OpDef l = axisOp("LogSoftmax", "log of Softmax along `axis`", softmaxCost);
  l.keeps = Keeps::Output;
  l.tp = TpRole::AxisNormalizer;
  out.push_back(l);
  out.push_back(axisOp("Hardmax", "one-hot of the first maximum along `axis`", hardmaxCost));
}

} // namespace defs
} // namespace hetplan::ops
