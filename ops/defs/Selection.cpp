//===- Selection.cpp - ops whose output size depends on the data ----------===//
//
// NonZero, Unique, Compress, NonMaxSuppression: each output is sized by its
// upper bound (every element, every slice, every box), with a note saying
// so, unless the input's values are known and the result folds.
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

#include <algorithm>

namespace hetplan::ops::defs {
namespace {

OutShape int64s(std::vector<int64_t> dims) {
  OutShape o = like(std::move(dims));
  o.element = Element::Int64;
  return o;
}

bool nonZeroShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  int64_t rank = int64_t(x.size());
  int64_t total = numElements(x);
  const auto &ints = in.inputs[0].ints;
  if (ints && !isUnknown(total) && int64_t(ints->size()) == total) {
    // A constant input: the indices themselves fold.
    std::vector<int64_t> nz;
    for (size_t k = 0; k < ints->size(); ++k)
      if ((*ints)[k])
        nz.push_back(int64_t(k));
    int64_t count = int64_t(nz.size());
    std::vector<int64_t> values(size_t(rank * count));
    for (int64_t j = 0; j < count; ++j) {
      int64_t flat = nz[size_t(j)];
      for (int64_t a = rank; a-- > 0;) {
        values[size_t(a * count + j)] = flat % x[size_t(a)];
        flat /= x[size_t(a)];
      }
    }
    out[0] = int64s({rank, count});
    if (values.size() <= kMaxFoldedElements)
      out[0].ints = std::move(values);
    return true;
  }
  out[0] = int64s({rank, total});
  if (!isUnknown(total))
    out[0].upperBound = upperBoundNote("the number of nonzero elements", total, "every element of the input");
  return true;
}

bool uniqueShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  std::optional<int64_t> axisAttr = in.attrs.getInt("axis");
  std::vector<int64_t> y;
  int64_t bound, inverse;
  if (axisAttr) {
    int64_t axis = normAxis(*axisAttr, int64_t(x.size()));
    if (axis < 0 || axis >= int64_t(x.size()))
      return (why = "axis out of range", false);
    bound = inverse = x[size_t(axis)];
    y = x;
    y[size_t(axis)] = bound;
  } else {
    bound = inverse = numElements(x);
    y = {bound};
  }
  out[0] = like(y);
  for (size_t i = 1; i < out.size(); ++i)
    out[i] = int64s({i == 2 ? inverse : bound});
  if (!isUnknown(bound))
    for (size_t i = 0; i < out.size(); ++i)
      if (i != 2)
        out[i].upperBound = upperBoundNote("the number of unique values", bound,
                                           axisAttr ? "every slice of the input" : "every element of the input");
  return true;
}

bool compressShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  std::optional<int64_t> axisAttr = in.attrs.getInt("axis");
  int64_t condLen = kUnknownDim;
  if (in.inputs.size() > 1 && in.inputs[1].ranked && in.inputs[1].dims.size() == 1)
    condLen = in.inputs[1].dims[0];
  std::vector<int64_t> result;
  int64_t bound;
  if (axisAttr) {
    int64_t axis = normAxis(*axisAttr, int64_t(x.size()));
    if (axis < 0 || axis >= int64_t(x.size()))
      return (why = "axis out of range", false);
    int64_t d = x[size_t(axis)];
    bound = isUnknown(condLen) ? d : isUnknown(d) ? condLen : std::min(condLen, d);
    result = x;
    result[size_t(axis)] = bound;
  } else {
    int64_t total = numElements(x);
    bound = isUnknown(condLen) ? total : isUnknown(total) ? condLen : std::min(condLen, total);
    result = {bound};
  }
  out[0] = like(result);
  if (!isUnknown(bound))
    out[0].upperBound =
        upperBoundNote("the number of selected elements", bound, "every element the condition covers");
  return true;
}

// Data movers: no FLOPs; the bytes are their inputs and outputs.
Cost selectCost(const CostIn &) { return Cost{}; }

bool nonMaxSuppressionShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> boxes, scores;
  if (!requireShape(in, 0, boxes, why) || !requireShape(in, 1, scores, why))
    return why.empty();
  if (boxes.size() != 3 || scores.size() != 3)
    return (why = "boxes must be [batch, boxes, 4] and scores [batch, classes, boxes]", false);
  int64_t spatial = boxes[1];
  bool given = in.inputs.size() > 2 && in.inputs[2].present;
  std::optional<std::vector<int64_t>> m = given ? in.inputs[2].ints : std::vector<int64_t>{0};
  if (m && m->size() == 1 && !isUnknown(spatial))
    spatial = std::min(spatial, std::max<int64_t>((*m)[0], 0));
  int64_t bound = mulDims(mulDims(scores[0], scores[1]), spatial);
  out[0] = int64s({bound, 3});
  if (!isUnknown(bound))
    out[0].upperBound = upperBoundNote("the number of selected boxes", bound,
                                       "batches x classes x max_output_boxes_per_class");
  return true;
}

} // namespace

void addSelectionOps(std::vector<OpDef> &out) {
  auto op = [&](const char *type, int since, int minInputs, int maxInputs, const char *summary,
                ShapeFn shape, CostFn cost) -> OpDef & {
    out.push_back(define("", type, since, minInputs, maxInputs, summary, shape, cost));
    return out.back();
  };
  op("NonZero", 9, 1, 1, "the indices of the nonzero elements, [rank, count]", nonZeroShape, selectCost);
  op("Unique", 11, 1, 1, "the unique values or slices, their first indices, inverse indices and counts",
     uniqueShape, selectCost);
  op("Compress", 9, 2, 2, "the elements or slices along `axis` where the condition holds", compressShape,
     selectCost)
      .check = axisZeroCheck;
  // Its cost is not in the table yet (OpCosts estimates it).
  op("NonMaxSuppression", 10, 2, 5, "the boxes kept per batch and class, [selected, 3]", nonMaxSuppressionShape,
     nullptr);
}

} // namespace hetplan::ops::defs
