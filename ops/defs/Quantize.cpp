//===- Quantize.cpp - the quantized (QOperator) ops -----------------------===//
//
// ONNX's DynamicQuantizeLinear and the com.microsoft contrib ops
// onnxruntime's quantizer emits (onnxruntime/docs/ContribOperators.md):
// QLinearConcat, QLinearGlobalAveragePool and the QLinear activations.
// Quantized outputs take the element type of the output zero point, else
// of the quantized input. Each is priced as dequantize its operands, the
// op, requantize (FLOPs per output element). The integer products are with
// their float forms (MatMul.cpp, Conv.cpp).
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops::defs {
namespace {

// x, x_scale, x_zp -> y (uint8), y_scale (float32 scalar), y_zp (uint8 scalar).
bool dynamicQuantizeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  out[0] = like(x);
  out[0].element = Element::UInt8;
  if (out.size() > 1) {
    out[1] = like({});
    out[1].element = Element::Float32;
  }
  if (out.size() > 2) {
    out[2] = like({});
    out[2].element = Element::UInt8;
  }
  return true;
}

// X, X_scale, X_zp, Y_scale, Y_zp.
bool qLinearUnaryShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  out[0] = like(x, zeroPointOr(in, 4, 0));
  return true;
}

bool qLinearGlobalPoolShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  if (x.size() < 3)
    return (why = "pooling needs rank >= 3", false);
  std::vector<int64_t> result(x);
  if (in.attrs.intOr("channels_last", 0))
    std::fill(result.begin() + 1, result.end() - 1, 1);
  else
    std::fill(result.begin() + 2, result.end(), 1);
  out[0] = like(result, zeroPointOr(in, 4, 0));
  return true;
}

// Y_scale, Y_zp, then (X, X_scale, X_zp) per operand.
bool qLinearConcatShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<size_t> pick;
  for (size_t i = 2; i < in.inputs.size(); i += 3)
    pick.push_back(i);
  if (!onPicked(concatShape, in, pick, out, why))
    return false;
  retype(out, Element::OfInput, zeroPointOr(in, 1, 2));
  return true;
}

template <int PerOutput> Cost perOutput(const CostIn &in) {
  Cost r;
  r.flops = PerOutput * in.totalOutputElems();
  return r;
}
Cost qLinearSigmoidCost(const CostIn &in) {
  Cost r;
  r.flops = (kTranscendental + 5) * in.totalOutputElems();
  return r;
}
Cost qLinearSoftmaxCost(const CostIn &in) {
  Cost r;
  r.flops = (kTranscendental + 8) * in.totalOutputElems();
  return r;
}
// Sums each channel's window, then one division and the requantization.
Cost qLinearGlobalPoolCost(const CostIn &in) {
  Cost r;
  double x = in.inputElems.empty() ? 0 : in.inputElems[0];
  r.flops = x + 4 * in.totalOutputElems();
  return r;
}

} // namespace

void addQuantizeOps(std::vector<OpDef> &out) {
  // (x - zero_point) * scale, its inverse with rounding
  out.push_back(define("", "DynamicQuantizeLinear", 11, 1, 1,
                       "uint8 quantization with the scale and zero point of the input's range", dynamicQuantizeShape,
                       perOutput<4>));
  auto contrib = [&](const char *type, const char *summary, int minInputs, int maxInputs, ShapeFn shape,
                     CostFn cost) {
    out.push_back(define("com.microsoft", type, 1, minInputs, maxInputs, summary, shape, cost));
  };
  contrib("QLinearConcat", "Concat of quantized tensors, requantized", 5, std::numeric_limits<int>::max(),
          qLinearConcatShape, perOutput<4>);
  contrib("QLinearGlobalAveragePool", "GlobalAveragePool of a quantized tensor (channels_last)", 5, 5,
          qLinearGlobalPoolShape, qLinearGlobalPoolCost);
  contrib("QLinearLeakyRelu", "LeakyRelu of a quantized tensor", 4, 5, qLinearUnaryShape, perOutput<6>);
  contrib("QLinearSigmoid", "Sigmoid of a quantized tensor", 4, 5, qLinearUnaryShape, qLinearSigmoidCost);
  contrib("QLinearSoftmax", "exp(x) / sum(exp(x)) along `axis` of a quantized tensor", 4, 5, qLinearUnaryShape,
          qLinearSoftmaxCost);
}

} // namespace hetplan::ops::defs
