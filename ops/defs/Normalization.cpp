//===- Normalization.cpp - the normalizations -----------------------------===//
//
// LayerNormalization, RMSNormalization, InstanceNormalization,
// GroupNormalization, MeanVarianceNormalization, and onnxruntime's contrib
// forms (com.microsoft SkipLayerNormalization, SimplifiedLayerNormalization,
// EmbedLayerNormalization). BatchNormalization and LRN are not in the table
// yet. FLOPs per element: docs/cost-model.md ("Per-op rules").
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops {

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

template <int PerElement> Cost perInputElement(const CostIn &in) {
  Cost r;
  r.flops = PerElement * (in.inputElems.empty() ? 0 : in.inputElems[0]);
  return r;
}

std::string instanceNormCheck(const CheckIn &in, const std::string &) {
  if (in.rank(0) >= 0 && in.rank(0) < 3)
    return "input rank " + std::to_string(in.rank(0)) + " needs N, C and a spatial dim";
  for (size_t i : {1, 2})
    if (in.rank(i) >= 0 && in.rank(i) != 1) return "scale and B must be 1-D";
  if (in.dim(1, 0) >= 0 && in.dim(2, 0) >= 0 && in.dim(1, 0) != in.dim(2, 0)) return "scale and B differ in length";
  if (in.dim(0, 1) >= 0 && in.dim(1, 0) >= 0 && in.dim(0, 1) != in.dim(1, 0))
    return "scale has " + std::to_string(in.dim(1, 0)) + " values for " + std::to_string(in.dim(0, 1)) + " channels";
  return "";
}

// com.microsoft SkipLayerNormalization: output and input_skip_bias_sum
// (output 3) are shaped like the input; mean and inv_std_var (1, 2) keep
// one value per row.
bool skipLayerNormShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  if (x.empty())
    return (why = "needs an input with a hidden axis", false);
  std::vector<int64_t> stat = x;
  stat.back() = 1;
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = like(i == 1 || i == 2 ? stat : x);
  return true;
}

// com.microsoft EmbedLayerNormalization: input_ids [B, S], word embedding
// [V, H] -> output [B, S, H], mask_index [B] (int32), embedding_sum [B, S, H].
bool embedLayerNormShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> ids, word;
  if (!requireShape(in, 0, ids, why) || !requireShape(in, 2, word, why))
    return why.empty();
  if (ids.size() != 2 || word.size() != 2)
    return (why = "needs input_ids [batch, sequence] and word_embedding [vocabulary, hidden]", false);
  out[0] = like({ids[0], ids[1], word[1]}, 2);
  if (out.size() > 1) {
    out[1] = like({ids[0]});
    out[1].element = Element::Int32;
  }
  if (out.size() > 2)
    out[2] = like({ids[0], ids[1], word[1]}, 2);
  return true;
}

// Two gathered rows added, then a layer normalization (about 8 FLOPs an
// element).
Cost embedLayerNormCost(const CostIn &in) {
  Cost r;
  r.flops = 10 * in.totalOutputElems();
  return r;
}

} // namespace

void addNormalizationOps(std::vector<OpDef> &out) {
  OpDef d;
  d.type = "LayerNormalization";
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

  auto norm = [&](const char *domain, const char *type, int since, int minInputs, int maxInputs,
                  const char *summary, ShapeFn shape, CostFn cost) -> OpDef & {
    out.push_back(define(domain, type, since, minInputs, maxInputs, summary, shape, cost));
    return out.back();
  };
  // square, sum, normalize, scale; its statistics are shaped as above.
  norm("", "RMSNormalization", 23, 2, 2, "x / sqrt(mean(x^2) + epsilon) over the axes from `axis` on, scaled",
       layerNormShape, perInputElement<4>);
  norm("", "InstanceNormalization", 1, 3, 3, "normalizes each channel of each sample, then scales and shifts",
       sameAsInput, perInputElement<7>)
      .check = instanceNormCheck;
  norm("", "GroupNormalization", 18, 3, 3, "normalizes each group of channels of each sample, then scales and shifts",
       sameAsInput, perInputElement<7>);
  norm("", "MeanVarianceNormalization", 9, 1, 1, "(x - mean) / sqrt(variance) over `axes`", sameAsInput,
       perInputElement<6>);
  // onnxruntime's fused forms: the residual add and bias with the
  // normalization; without the mean (Simplified).
  norm("com.microsoft", "SkipLayerNormalization", 1, 3, 5, "residual add, then layer normalization with bias",
       skipLayerNormShape, perInputElement<8>);
  norm("com.microsoft", "SimplifiedLayerNormalization", 1, 2, 2, "RMS normalization (no mean) along `axis`",
       sameAsInput, perInputElement<4>);
  norm("com.microsoft", "EmbedLayerNormalization", 1, 7, 9,
       "word + position (+ segment) embeddings gathered and added, then layer normalization", embedLayerNormShape,
       embedLayerNormCost);
}

} // namespace defs
} // namespace hetplan::ops
