//===- Conv.cpp - Conv, ConvTranspose, the pools, the integer convolutions -===//
//
// ConvInteger and QLinearConv keep Conv's shape and cost rules over their
// data operands (X, W at 0, 1; at 0, 3 between QLinearConv's scales and
// zero points).
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

#include <tuple>

namespace hetplan::ops {

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
  if (kernel.size() != k)
    return (why = "kernel_shape has " + std::to_string(kernel.size()) + " entries for " + std::to_string(k) +
                  " spatial dims",
            false);
  std::vector<int64_t> result{x[0], w[0]};
  for (size_t i = 0; i < k; ++i)
    result.push_back(windowOutputSize(x[i + 2], kernel[i], i < strides.size() ? strides[i] : 1,
                                      i < dilations.size() ? dilations[i] : 1, i < pads.size() ? pads[i] : 0,
                                      i + k < pads.size() ? pads[i + k] : 0, autoPad, false));
  out[0] = like(result);
  return true;
}

Cost convCost(const CostIn &in) { return convolutionCost(in, 1, 2); }

bool convTransposeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x, w;
  if (!requireShape(in, 0, x, why) || !requireShape(in, 1, w, why))
    return why.empty();
  if (x.size() < 3 || w.size() != x.size())
    return (why = "ConvTranspose needs input and weight of the same rank >= 3", false);
  const Attrs &a = in.attrs;
  size_t k = x.size() - 2;
  std::vector<int64_t> result{x[0], mulDims(w[1], a.intOr("group", 1))};
  if (auto shape = a.getInts("output_shape")) {
    result.insert(result.end(), shape->end() - long(std::min(k, shape->size())), shape->end());
  } else {
    std::vector<int64_t> kernel = a.getInts("kernel_shape").value_or(std::vector<int64_t>(w.begin() + 2, w.end()));
    std::vector<int64_t> strides = a.getInts("strides").value_or(std::vector<int64_t>(k, 1));
    std::vector<int64_t> dilations = a.getInts("dilations").value_or(std::vector<int64_t>(k, 1));
    std::vector<int64_t> pads = a.getInts("pads").value_or(std::vector<int64_t>(2 * k, 0));
    std::vector<int64_t> outPad = a.getInts("output_padding").value_or(std::vector<int64_t>(k, 0));
    std::string autoPad = a.stringOr("auto_pad", "NOTSET");
    for (auto [name, v, want] : {std::tuple{"kernel_shape", &kernel, k}, {"strides", &strides, k},
                                 {"dilations", &dilations, k}, {"output_padding", &outPad, k},
                                 {"pads", &pads, 2 * k}})
      if (v->size() != want)
        return (why = std::string(name) + " has " + std::to_string(v->size()) + " entries, not " +
                      std::to_string(want) + " (" + std::to_string(k) + " spatial dims)",
                false);
    for (size_t i = 0; i < k; ++i) {
      int64_t n = x[i + 2];
      if (isUnknown(n)) {
        result.push_back(kUnknownDim);
        continue;
      }
      if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
        result.push_back(mulDims(n, strides[i]));
      else
        result.push_back(subDims(subDims(addDims(addDims(mulDims(strides[i], n - 1), outPad[i]),
                                                 addDims(mulDims(addDims(kernel[i], -1), dilations[i]), 1)),
                                         pads[i]),
                                 pads[i + k]));
    }
  }
  out[0] = like(result);
  return true;
}

// Each input element scatters into Cout/group * prod(kernel) outputs.
Cost convTransposeCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  const auto &w = in.inputs.size() > 1 ? in.inputs[1] : std::nullopt;
  if (!w || w->size() < 2)
    return r;
  double perInput = 1;
  for (size_t i = 1; i < w->size(); ++i)
    perInput *= double((*w)[i]);
  r.flops = 2 * in.inputElems[0] * perInput + (in.present.size() > 2 && in.present[2] ? in.totalOutputElems() : 0);
  return r;
}

std::string convTransposeCheck(const CheckIn &in, const std::string &) { return checkWindowed(in, 0, 1, true, false); }

// [N, C, windows...] (Global*: [N, C, 1...]); MaxPool's indices (output 1)
// are int64 of the same shape.
bool poolShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why, bool global) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  if (x.size() < 3)
    return (why = "pooling needs rank >= 3", false);
  std::vector<int64_t> result{x[0], x[1]};
  if (global) {
    result.insert(result.end(), x.size() - 2, 1);
  } else {
    auto kernel = in.attrs.getInts("kernel_shape");
    if (!kernel || kernel->size() != x.size() - 2)
      return (why = "kernel_shape must give one size per spatial dim", false);
    size_t k = kernel->size();
    const Attrs &a = in.attrs;
    std::vector<int64_t> strides = a.getInts("strides").value_or(std::vector<int64_t>(k, 1));
    std::vector<int64_t> dilations = a.getInts("dilations").value_or(std::vector<int64_t>(k, 1));
    std::vector<int64_t> pads = a.getInts("pads").value_or(std::vector<int64_t>(2 * k, 0));
    std::string autoPad = a.stringOr("auto_pad", "NOTSET");
    bool ceilMode = a.intOr("ceil_mode", 0) != 0;
    for (size_t i = 0; i < k; ++i)
      result.push_back(windowOutputSize(x[i + 2], (*kernel)[i], i < strides.size() ? strides[i] : 1,
                                        i < dilations.size() ? dilations[i] : 1, i < pads.size() ? pads[i] : 0,
                                        i + k < pads.size() ? pads[i + k] : 0, autoPad, ceilMode));
  }
  out[0] = like(result);
  if (out.size() > 1) { // MaxPool indices
    out[1] = like(result);
    out[1].element = Element::Int64;
  }
  return true;
}
bool windowPoolShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return poolShape(in, out, why, false);
}
bool globalPoolShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return poolShape(in, out, why, true);
}

// One operation per window element (Lp: two), per output (global: per input).
Cost poolCost(const CostIn &in, double perWindowElem, bool global) {
  Cost r;
  if (global) {
    r.flops = perWindowElem * (in.inputElems.empty() ? 0 : in.inputElems[0]);
    return r;
  }
  double kernel = 1;
  for (int64_t d : in.attrs.getInts("kernel_shape").value_or(std::vector<int64_t>{}))
    kernel *= double(d);
  r.flops = perWindowElem * (in.outputElems.empty() ? 0 : in.outputElems[0]) * kernel;
  return r;
}
Cost windowPoolCost(const CostIn &in) { return poolCost(in, 1, false); }
Cost lpPoolCost(const CostIn &in) { return poolCost(in, 2, false); }
Cost globalPoolCost(const CostIn &in) { return poolCost(in, 1, true); }
Cost globalLpPoolCost(const CostIn &in) { return poolCost(in, 2, true); }

std::string windowPoolCheck(const CheckIn &in, const std::string &) {
  if (auto e = checkWindowed(in, 0, -1, false, true); !e.empty()) return e;
  int64_t order = in.attrs.intOr("storage_order", 0);
  if (order != 0 && order != 1) return "storage_order must be 0 or 1";
  return "";
}

std::string convCheck(const CheckIn &in, const std::string &) { return checkWindowed(in, 0, 1, false, false); }

Cost qLinearConvCost(const CostIn &in) { return convolutionCost(in, 3, 8); }

std::string qLinearConvCheck(const CheckIn &in, const std::string &) { return checkWindowed(in, 0, 3, false, false); }

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
  c.type = "Conv";
  c.minInputs = 2;
  c.maxInputs = 3;
  c.summary = "N-d convolution (groups, strides, dilations, pads, auto_pad)";
  c.shape = convShape;
  c.cost = convCost;
  c.check = convCheck;
  c.keeps = Keeps::Inputs;
  out.push_back(c);

  OpDef t = c;
  t.type = "ConvTranspose";
  t.summary = "the gradient of Conv with respect to its input (output_shape/output_padding)";
  t.shape = convTransposeShape;
  t.cost = convTransposeCost;
  t.check = convTransposeCheck;
  out.push_back(t);

  // The integer convolutions: no backward.
  OpDef ci = define("", "ConvInteger", 10, 2, 4, "convolution of integers less their zero points, int32 result",
                    integerProductShape<convShape>, convCost);
  ci.check = convCheck;
  out.push_back(ci);
  const char *qSummary = "convolution of quantized tensors, requantized to the output scale and zero point";
  OpDef q = define("", "QLinearConv", 10, 8, 9, qSummary, qLinearProductShape<convShape>, qLinearConvCost);
  q.check = qLinearConvCheck;
  out.push_back(q);
  // ModelVerifier checks the default domain only.
  out.push_back(define("com.microsoft", "QLinearConv", 1, 8, 9, qSummary, qLinearProductShape<convShape>, qLinearConvCost));

  auto pool = [&](const char *type, const char *summary, ShapeFn shape, CostFn cost, CheckFn check, Keeps keeps) {
    OpDef p;
    p.type = type;
    p.minInputs = p.maxInputs = 1;
    p.summary = summary;
    p.shape = shape;
    p.cost = cost;
    p.check = check;
    p.keeps = keeps;
    out.push_back(p);
  };
  // Max pools' backward finds the maxima again in the input; averages need
  // shapes only.
  pool("MaxPool", "the maximum of each window", windowPoolShape, windowPoolCost, windowPoolCheck, Keeps::Inputs);
  pool("AveragePool", "the mean of each window", windowPoolShape, windowPoolCost, windowPoolCheck, Keeps::Nothing);
  pool("LpPool", "the p-norm of each window", windowPoolShape, lpPoolCost, windowPoolCheck, Keeps::Inputs);
  pool("GlobalMaxPool", "the maximum over the spatial dims", globalPoolShape, globalPoolCost, nullptr, Keeps::Inputs);
  pool("GlobalAveragePool", "the mean over the spatial dims", globalPoolShape, globalPoolCost, nullptr,
       Keeps::Nothing);
  pool("GlobalLpPool", "the p-norm over the spatial dims", globalPoolShape, globalLpPoolCost, nullptr,
       Keeps::Inputs);
}

} // namespace defs
} // namespace hetplan::ops
