//===- Normalization.cpp - LayerNormalization -----------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {
namespace names {
const char *const LayerNormalization = "LayerNormalization";
} // namespace names

namespace defs {
namespace {

// Y like X; Mean and InvStdDev (outputs 1, 2) keep one float32 per row:
// X's shape with the normalized axes (from `axis` on) set to 1.
bool layerNormShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  out[0] = like(x);
  if (out.size() > 1) {
    int64_t axis = normAxis(in.attrs.intOr("axis", -1), int64_t(x.size()));
    std::vector<int64_t> stat = x;
    for (size_t i = size_t(axis); i < stat.size(); ++i)
      stat[i] = 1;
    for (size_t i = 1; i < out.size(); ++i) {
      out[i] = like(stat);
      out[i].element = Element::Float32;
    }
  }
  return true;
}

// mean 1, centre 1, variance 2, normalize 1, scale 1 (+ bias 1) per element.
Cost layerNormCost(const CostIn &in) {
  Cost r;
  double x = in.inputElems.empty() ? 0 : in.inputElems[0];
  r.flops = (in.present.size() > 2 && in.present[2] ? 7 : 6) * x;
  return r;
}

std::string layerNormCheck(const CheckIn &in, const std::string &) { return axisAttr(in, "axis", -1, in.rank(0)); }

std::string layerNormMixes(const Attrs &a, int64_t, const std::vector<int> &carries, const std::string &) {
  return alongFrom(carries, a.intOr("axis", -1), "it normalizes");
}

} // namespace

void addNormalizationOps(std::vector<OpDef> &out) {
  OpDef d;
  d.type = names::LayerNormalization;
  d.sinceVersion = 17;
  d.minInputs = 2;
  d.maxInputs = 3;
  d.summary = "normalizes over the axes from `axis` on, then scales and shifts";
  d.shape = layerNormShape;
  d.cost = layerNormCost;
  d.check = layerNormCheck;
  d.mixesSamples = layerNormMixes;
  d.keeps = Keeps::Inputs;
  out.push_back(d);
}

} // namespace defs
} // namespace hetplan::ops
