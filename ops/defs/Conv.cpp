//===- Conv.cpp - Conv ----------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {
namespace names {
const char *const Conv = "Conv";
} // namespace names

namespace defs {
namespace {

bool convShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x, w;
  if (!requireShape(in, 0, x, why) || !requireShape(in, 1, w, why))
    return why.empty();
  if (x.size() < 3 || w.size() != x.size())
    return (why = "Conv needs input and weight of the same rank >= 3", false);
  const Attrs &a = in.attrs;
  int64_t group = a.intOr("group", 1);
  if (!isUnknown(x[1]) && !isUnknown(w[1]) && x[1] != mulDims(w[1], group))
    return (why = "input has " + std::to_string(x[1]) + " channels but the weight expects " + std::to_string(w[1]) +
                  " x group " + std::to_string(group),
            false);
  size_t k = x.size() - 2;
  std::vector<int64_t> kernel = a.getInts("kernel_shape").value_or(std::vector<int64_t>(w.begin() + 2, w.end()));
  std::vector<int64_t> strides = a.getInts("strides").value_or(std::vector<int64_t>(k, 1));
  std::vector<int64_t> dilations = a.getInts("dilations").value_or(std::vector<int64_t>(k, 1));
  std::vector<int64_t> pads = a.getInts("pads").value_or(std::vector<int64_t>(2 * k, 0));
  std::string autoPad = a.stringOr("auto_pad", "NOTSET");
  std::vector<int64_t> result{x[0], w[0]};
  for (size_t i = 0; i < k; ++i)
    result.push_back(windowOutputSize(x[i + 2], kernel[i], i < strides.size() ? strides[i] : 1,
                                      i < dilations.size() ? dilations[i] : 1, i < pads.size() ? pads[i] : 0,
                                      i + k < pads.size() ? pads[i + k] : 0, autoPad, false));
  out[0] = like(result);
  return true;
}

Cost convCost(const CostIn &in) { return convolutionCost(in, 1, 2); }

std::string convCheck(const CheckIn &in, const std::string &) { return checkWindowed(in, 0, 1, false, false); }

} // namespace
} // namespace defs

Cost convolutionCost(const CostIn &in, size_t weightAt, size_t biasAt) {
  Cost r;
  r.engine = Engine::Matrix;
  if (weightAt >= in.inputs.size())
    return r;
  const auto &w = in.inputs[weightAt];
  if (!w || w->size() < 2)
    return r;
  // Each output element: Cin/group * prod(kernel) multiply-adds. Dilations
  // spread the taps, they do not add any.
  double perOutput = 1;
  for (size_t i = 1; i < w->size(); ++i)
    perOutput *= double((*w)[i]);
  double out = in.totalOutputElems();
  r.flops = 2 * out * perOutput + (biasAt < in.present.size() && in.present[biasAt] ? out : 0);
  return r;
}

namespace defs {

void addConvOps(std::vector<OpDef> &out) {
  OpDef c;
  c.type = names::Conv;
  c.minInputs = 2;
  c.maxInputs = 3;
  c.summary = "N-d convolution (groups, strides, dilations, pads, auto_pad)";
  c.shape = convShape;
  c.cost = convCost;
  c.check = convCheck;
  c.keeps = Keeps::Inputs;
  out.push_back(c);
}

} // namespace defs
} // namespace hetplan::ops
