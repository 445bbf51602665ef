//===- Shape.cpp - Reshape, Flatten, Transpose, Concat, Split, Slice, -----===//
//                 Squeeze, Unsqueeze, Expand, Tile, Pad, DepthToSpace,
//                 SpaceToDepth
//
// Ops that move or relabel data. Small integer tensors (the shape vectors
// exported models build with Shape/Gather/Concat chains) fold through them,
// so Reshape/Expand/Slice targets resolve at compile time. Where an op
// changed between opsets (attributes that became inputs: Slice, Squeeze,
// Split), both forms are read.
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

#include <algorithm>
#include <set>

namespace hetplan::ops::defs {
namespace {

using Dims = std::vector<int64_t>;

/// Integer values of input `i`, or of the attribute `name` for older opsets.
std::optional<Dims> intsFrom(const ShapeIn &in, size_t i, const char *name = nullptr) {
  if (i < in.inputs.size() && in.inputs[i].ints)
    return *in.inputs[i].ints;
  if (name)
    return in.attrs.getInts(name);
  return std::nullopt;
}
bool present(const ShapeIn &in, size_t i) { return i < in.inputs.size() && in.inputs[i].present; }

#define REQUIRE(var, idx)                                                      \
  Dims var;                                                                    \
  if (!requireShape(in, idx, var, why))                                        \
    return why.empty();

bool reshapeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  auto target = intsFrom(in, 1, "shape");
  if (!target) {
    // Rank is known from the shape operand's length even without values.
    if (in.inputs.size() > 1 && in.inputs[1].ranked && in.inputs[1].dims.size() == 1 &&
        !isUnknown(in.inputs[1].dims[0]))
      out[0] = like(Dims(size_t(in.inputs[1].dims[0]), kUnknownDim));
    return true;
  }
  bool allowZero = in.attrs.intOr("allowzero", 0) != 0;
  Dims result;
  int inferAt = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t d = (*target)[i];
    if (d == 0 && !allowZero)
      d = i < x.size() ? x[i] : kUnknownDim;
    if (d == -1) {
      if (inferAt >= 0)
        return (why = "the target shape has more than one -1", false);
      inferAt = int(i);
    }
    result.push_back(d);
  }
  if (inferAt >= 0) {
    int64_t total = numElements(x), known = 1;
    for (size_t i = 0; i < result.size(); ++i)
      if (int(i) != inferAt)
        known = mulDims(known, result[i]);
    result[size_t(inferAt)] = (isUnknown(total) || isUnknown(known) || known == 0) ? kUnknownDim : total / known;
  }
  int64_t before = numElements(x), after = numElements(result);
  if (!isUnknown(before) && !isUnknown(after) && before != after)
    return (why = "cannot reshape " + std::to_string(before) + " elements into " + std::to_string(after), false);
  out[0] = like(result);
  out[0].ints = in.inputs[0].ints;
  return true;
}

bool flattenShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  int64_t axis = normAxis(in.attrs.intOr("axis", 1), int64_t(x.size()));
  out[0] = like({numElements(x, 0, size_t(axis)), numElements(x, size_t(axis))});
  return true;
}

bool transposeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  Dims perm = in.attrs.getInts("perm").value_or(Dims());
  if (perm.empty())
    for (int64_t i = int64_t(x.size()) - 1; i >= 0; --i)
      perm.push_back(i);
  if (perm.size() != x.size())
    return (why = "perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(x.size()), false);
  Dims result;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(x.size()))
      return (why = "perm entry out of range", false);
    result.push_back(x[size_t(p)]);
  }
  out[0] = like(result);
  // Fold small integer matrices (torch builds Pad's pads with a Transpose).
  const auto &ints = in.inputs[0].ints;
  if (ints && std::none_of(x.begin(), x.end(), isUnknown) && int64_t(ints->size()) == numElements(x)) {
    Dims strides(x.size(), 1);
    for (size_t a = x.size(); a-- > 1;)
      strides[a - 1] = strides[a] * x[a];
    Dims values, at(x.size(), 0);
    for (int64_t k = 0, total = numElements(x); k < total; ++k) {
      int64_t flat = 0;
      for (size_t a = 0; a < x.size(); ++a)
        flat += at[a] * strides[size_t(perm[a])];
      values.push_back((*ints)[size_t(flat)]);
      for (size_t a = x.size(); a-- > 0;) {
        if (++at[a] < result[a])
          break;
        at[a] = 0;
      }
    }
    out[0].ints = values;
  }
  return true;
}

} // namespace

bool concatShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(first, 0);
  int64_t axis = normAxis(in.attrs.intOr("axis", 0), int64_t(first.size()));
  if (axis < 0 || axis >= int64_t(first.size()))
    return (why = "axis out of range", false);
  Dims result = first, values;
  bool foldable = true;
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    const ValueShape &v = in.inputs[i];
    if (!v.ranked)
      return true;
    if (v.dims.size() != first.size())
      return (why = "inputs differ in rank", false);
    if (i)
      result[size_t(axis)] = addDims(result[size_t(axis)], v.dims[size_t(axis)]);
    if (v.ints)
      values.insert(values.end(), v.ints->begin(), v.ints->end());
    else
      foldable = false;
  }
  out[0] = like(result);
  if (foldable && first.size() == 1)
    out[0].ints = values;
  return true;
}

namespace {

bool splitShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  int64_t axis = normAxis(in.attrs.intOr("axis", 0), int64_t(x.size()));
  if (axis < 0 || axis >= int64_t(x.size()))
    return (why = "axis out of range", false);
  size_t a = size_t(axis);
  auto sizes = intsFrom(in, 1, "split");
  size_t parts = out.size();
  for (size_t i = 0; i < parts; ++i) {
    Dims s = x;
    if (sizes && i < sizes->size())
      s[a] = (*sizes)[i];
    else if (isUnknown(x[a]) || present(in, 1)) // sizes computed at run time
      s[a] = kUnknownDim;
    else // equal parts; the last ones smaller, empty when nothing is left
      s[a] = std::max<int64_t>(0, std::min<int64_t>((x[a] + int64_t(parts) - 1) / int64_t(parts),
                                                    x[a] - int64_t(i) * ((x[a] + int64_t(parts) - 1) / int64_t(parts))));
    out[i] = like(s);
  }
  return true;
}

/// The elements of `in` (shape `x`, row-major) at begin + i * stride per
/// axis for every index i of `result`; nullopt unless they are all known.
std::optional<Dims> foldStrided(const ValueShape &in, const Dims &x, const Dims &result, const Dims &begin,
                                const Dims &stride) {
  int64_t total = numElements(result);
  if (!in.ints || isUnknown(numElements(x)) || int64_t(in.ints->size()) != numElements(x) || isUnknown(total) ||
      total > int64_t(kMaxFoldedElements))
    return std::nullopt;
  size_t rank = x.size();
  Dims values, at(rank, 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t flat = 0;
    for (size_t a = 0; a < rank; ++a) {
      int64_t i = begin[a] + at[a] * stride[a];
      if (i < 0 || i >= x[a])
        return std::nullopt;
      flat = flat * x[a] + i;
    }
    values.push_back((*in.ints)[size_t(flat)]);
    for (size_t a = rank; a-- > 0;) {
      if (++at[a] < result[a])
        break;
      at[a] = 0;
    }
  }
  return values;
}

bool sliceShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  bool old = in.opset < 10;
  auto starts = old ? in.attrs.getInts("starts") : intsFrom(in, 1);
  auto ends = old ? in.attrs.getInts("ends") : intsFrom(in, 2);
  std::optional<Dims> axes = old ? in.attrs.getInts("axes") : (present(in, 3) ? intsFrom(in, 3) : std::optional<Dims>(Dims()));
  std::optional<Dims> steps = old ? std::optional<Dims>(Dims()) : (present(in, 4) ? intsFrom(in, 4) : std::optional<Dims>(Dims()));
  int64_t rank = int64_t(x.size());
  Dims result = x;
  if (!starts || !ends || !axes || !steps) {
    // Which axes are sliced is unknown or their bounds are: those dims are dynamic.
    if (axes && !axes->empty())
      for (int64_t a : *axes) {
        int64_t axis = normAxis(a, rank);
        if (axis < 0 || axis >= rank)
          return (why = "axis out of range", false);
        result[size_t(axis)] = kUnknownDim;
      }
    else
      for (auto &d : result)
        d = kUnknownDim;
    out[0] = like(result);
    return true;
  }
  if (axes->empty())
    for (size_t i = 0; i < starts->size(); ++i)
      axes->push_back(int64_t(i));
  Dims begin(x.size(), 0), stride(x.size(), 1);
  if (starts->size() != axes->size() || ends->size() != axes->size())
    return (why = "starts, ends and axes differ in length", false);
  for (size_t i = 0; i < axes->size(); ++i) {
    int64_t axis = normAxis((*axes)[i], rank);
    if (axis < 0 || axis >= rank)
      return (why = "axis out of range", false);
    size_t a = size_t(axis);
    int64_t dim = x[a];
    int64_t step = i < steps->size() ? (*steps)[i] : 1;
    if (isUnknown(dim) || step == 0) {
      result[a] = kUnknownDim;
      continue;
    }
    int64_t s = (*starts)[i], e = (*ends)[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      result[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      result[a] = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    begin[a] = s;
    stride[a] = step;
  }
  out[0] = like(result);
  // Small integer tensors fold, any rank and step (torch's flip of a pads
  // matrix is a Slice with step -1).
  if (auto v = foldStrided(in.inputs[0], x, result, begin, stride))
    out[0].ints = v;
  return true;
}

bool squeezeLike(const ShapeIn &in, std::vector<OutShape> &out, std::string &why, bool unsqueeze) {
  REQUIRE(x, 0);
  auto axes = intsFrom(in, 1, "axes");
  if (!axes && present(in, 1))
    return true; // axes computed at run time
  Dims result;
  if (unsqueeze) {
    if (!axes)
      return (why = "Unsqueeze needs axes", false);
    int64_t rank = int64_t(x.size() + axes->size());
    std::set<int64_t> at;
    for (int64_t a : *axes) {
      int64_t n = normAxis(a, rank);
      if (n < 0 || n >= rank || !at.insert(n).second)
        return (why = "Unsqueeze axis " + std::to_string(a) + (n < 0 || n >= rank ? " is out of range for output rank " + std::to_string(rank) : " is repeated"), false);
    }
    for (int64_t i = 0, j = 0; i < rank; ++i)
      result.push_back(at.count(i) ? 1 : x[size_t(j++)]);
  } else {
    std::set<int64_t> at;
    if (axes)
      for (int64_t a : *axes) {
        int64_t n = normAxis(a, int64_t(x.size()));
        if (n < 0 || n >= int64_t(x.size()))
          return (why = "Squeeze axis " + std::to_string(a) + " is out of range for rank " + std::to_string(x.size()), false);
        at.insert(n);
      }
    for (int64_t i = 0; i < int64_t(x.size()); ++i) {
      int64_t d = x[size_t(i)];
      bool drop = axes ? at.count(i) != 0 : d == 1;
      if (!axes && isUnknown(d))
        return true; // cannot tell which dims are 1
      if (drop && !isUnknown(d) && d != 1)
        return (why = "cannot squeeze dimension " + std::to_string(i) + " of size " + std::to_string(d), false);
      if (!drop)
        result.push_back(d);
    }
  }
  out[0] = like(result);
  out[0].ints = in.inputs[0].ints;
  return true;
}
bool squeezeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return squeezeLike(in, out, why, false);
}
bool unsqueezeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return squeezeLike(in, out, why, true);
}

bool expandShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  auto target = intsFrom(in, 1);
  if (!target)
    return true;
  auto result = broadcast(x, *target);
  if (!result)
    return (why = "input does not broadcast to the target shape", false);
  out[0] = like(*result);
  return true;
}

bool tileShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  auto repeats = intsFrom(in, 1);
  if (!repeats)
    return true;
  if (repeats->size() != x.size())
    return (why = "repeats must have one entry per dim", false);
  Dims result;
  for (size_t i = 0; i < x.size(); ++i)
    result.push_back(mulDims(x[i], (*repeats)[i]));
  out[0] = like(result);
  return true;
}

// Shape: the dims [start, end) as a 1-D int64 tensor; Size: the element
// count as a scalar. Their values fold when the dims are known.
bool shapeOfShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  int64_t rank = int64_t(x.size());
  int64_t start = std::clamp<int64_t>(normAxis(in.attrs.intOr("start", 0), rank), 0, rank);
  int64_t end = std::clamp<int64_t>(normAxis(in.attrs.intOr("end", rank), rank), 0, rank);
  Dims dims(x.begin() + start, x.begin() + std::max(start, end));
  out[0] = like({int64_t(dims.size())});
  out[0].element = Element::Int64;
  if (std::none_of(dims.begin(), dims.end(), isUnknown))
    out[0].ints = dims;
  return true;
}
bool sizeShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  int64_t total = numElements(x);
  out[0] = like({});
  out[0].element = Element::Int64;
  if (!isUnknown(total))
    out[0].ints = Dims{total};
  return true;
}

bool padShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  REQUIRE(x, 0);
  int64_t rank = int64_t(x.size());
  auto pads = in.opset < 11 ? in.attrs.getInts("pads") : intsFrom(in, 1);
  std::optional<Dims> given = present(in, 3) ? intsFrom(in, 3) : std::nullopt;
  if (!pads) {
    // Pads computed at run time (and not from a shape chain het folds): the
    // rank is known; the padded dims are not.
    Dims result = x;
    if (given)
      for (int64_t a : *given)
        result[size_t(normAxis(a, rank))] = kUnknownDim;
    else
      for (auto &d : result)
        d = kUnknownDim;
    out[0] = like(result);
    return true;
  }
  Dims axes;
  if (given)
    axes = *given;
  else
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (pads->size() != 2 * axes.size())
    return (why = "pads must have two entries per padded axis", false);
  Dims result = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t a = size_t(normAxis(axes[i], rank));
    result[a] = addDims(result[a], addDims((*pads)[i], (*pads)[i + axes.size()]));
  }
  out[0] = like(result);
  return true;
}

bool depthSpaceShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why, bool toSpace) {
  REQUIRE(x, 0);
  if (x.size() != 4)
    return (why = "needs a rank-4 input", false);
  int64_t b = in.attrs.intOr("blocksize", 1);
  // The runtime's range (DepthToSpace's kernel): b * b cannot overflow.
  if (b < 1 || b > (int64_t(1) << 20))
    return (why = "blocksize " + std::to_string(b) + " is out of range (1 .. 2^20)", false);
  auto div = [](int64_t a, int64_t d) { return isUnknown(a) ? a : a / d; };
  out[0] = like(toSpace ? Dims{x[0], div(x[1], b * b), mulDims(x[2], b), mulDims(x[3], b)}
                        : Dims{x[0], mulDims(x[1], b * b), div(x[2], b), div(x[3], b)});
  return true;
}
bool depthToSpaceShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return depthSpaceShape(in, out, why, true);
}
bool spaceToDepthShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return depthSpaceShape(in, out, why, false);
}
std::string depthSpaceCheck(const CheckIn &in, const std::string &op) {
  if (in.attrs.intOr("blocksize", 0) <= 0) return "blocksize must be positive";
  if (in.rank(0) >= 0 && in.rank(0) != 4)
    return "input must be 4-D (N, C, H, W), it has rank " + std::to_string(in.rank(0));
  std::string mode = in.attrs.stringOr("mode", "DCR");
  if (op == "DepthToSpace" && mode != "DCR" && mode != "CRD") return "mode '" + mode + "' is not DCR or CRD";
  return "";
}

// Views alias their input: no kernel, no traffic.
Cost viewCost(const CostIn &) {
  Cost c;
  c.view = true;
  return c;
}
// Data movers: no FLOPs; the bytes are their inputs and outputs.
Cost moveCost(const CostIn &) { return Cost{}; }
// Slice reads only what it outputs from input 0.
Cost sliceCost(const CostIn &) {
  Cost c;
  c.readsOutput = true;
  return c;
}

// The load-time checks (ModelVerifier) over attributes and declared ranks.
std::string transposeCheck(const CheckIn &in, const std::string &) {
  auto perm = in.attrs.getInts("perm");
  if (!perm) return "";
  std::vector<char> seen(perm->size(), 0);
  for (int64_t p : *perm) {
    if (p < 0 || p >= int64_t(perm->size()) || seen[size_t(p)])
      return "perm " + listOf(*perm) + " is not a permutation of 0.." + std::to_string(int64_t(perm->size()) - 1);
    seen[size_t(p)] = 1;
  }
  if (in.rank(0) >= 0 && int64_t(perm->size()) != in.rank(0))
    return "perm " + listOf(*perm) + " has " + std::to_string(perm->size()) + " entries for a rank-" +
           std::to_string(in.rank(0)) + " input";
  return "";
}

std::string concatCheck(const CheckIn &in, const std::string &) {
  if (in.opset >= 4 && !in.attrs.has("axis")) return "axis is required";
  int64_t r = -1;
  for (size_t i = 0; i < in.shapes.size(); ++i) {
    if (in.rank(i) < 0) continue;
    if (r >= 0 && in.rank(i) != r)
      return "inputs have different ranks (" + std::to_string(r) + " and " + std::to_string(in.rank(i)) + ")";
    r = in.rank(i);
  }
  if (r == 0) return "inputs must have rank >= 1";
  return axisAttr(in, "axis", 0, r);
}

// Flatten's axis may be the rank (everything in the first dim).
std::string flattenCheck(const CheckIn &in, const std::string &) {
  int64_t a = in.attrs.intOr("axis", 1), r = in.rank(0);
  if (r >= 0 && (a < -r || a > r))
    return "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(r) + " (must be in [" +
           std::to_string(-r) + ", " + std::to_string(r) + "])";
  return "";
}

OpDef shapeOp(const char *type, int minInputs, int maxInputs, const char *summary, ShapeFn shape, CostFn cost) {
  OpDef d = define("", type, 1, minInputs, maxInputs, summary, shape, cost);
  d.keeps = Keeps::Nothing; // their backward moves dY back: shapes only
  return d;
}

} // namespace

void addShapeOps(std::vector<OpDef> &out) {
  constexpr int kMany = std::numeric_limits<int>::max();
  out.push_back(shapeOp("Reshape", 1, 2, "the same elements under a new shape (-1 inferred, 0 kept)", reshapeShape, viewCost));
  OpDef flatten = shapeOp("Flatten", 1, 1, "[d0 x ... x d(axis-1), the rest] (a view)", flattenShape, viewCost);
  flatten.check = flattenCheck;
  out.push_back(flatten);
  out.push_back(shapeOp("Squeeze", 1, 2, "drops size-1 dims (a view)", squeezeShape, viewCost));
  out.push_back(shapeOp("Unsqueeze", 1, 2, "inserts size-1 dims (a view)", unsqueezeShape, viewCost));
  OpDef transpose = shapeOp("Transpose", 1, 1, "permutes the dims (`perm`, reversed by default)", transposeShape,
                            moveCost);
  transpose.check = transposeCheck;
  out.push_back(transpose);
  OpDef concat = shapeOp("Concat", 1, kMany, "joins inputs along `axis`", concatShape, moveCost);
  concat.check = concatCheck;
  out.push_back(concat);
  out.push_back(shapeOp("Split", 1, 2, "cuts the input along `axis` (sizes given or equal)", splitShape, moveCost));
  out.push_back(shapeOp("Slice", 1, 5, "start:end:step along the given axes", sliceShape, sliceCost));
  out.push_back(shapeOp("Expand", 2, 2, "broadcasts the input to a shape", expandShape, moveCost));
  out.push_back(shapeOp("Tile", 2, 2, "repeats the input along each dim", tileShape, moveCost));
  out.push_back(shapeOp("Shape", 1, 1, "the input's dims [start, end) as int64", shapeOfShape, viewCost));
  out.push_back(shapeOp("Size", 1, 1, "the input's element count as int64", sizeShape, viewCost));
  out.push_back(shapeOp("Pad", 1, 4, "pads the given axes (constant, reflect, edge, wrap)", padShape, moveCost));
  OpDef d2s = shapeOp("DepthToSpace", 1, 1, "moves channel blocks into space", depthToSpaceShape, moveCost);
  d2s.check = depthSpaceCheck;
  out.push_back(d2s);
  OpDef s2d = shapeOp("SpaceToDepth", 1, 1, "moves space blocks into channels", spaceToDepthShape, moveCost);
  s2d.check = depthSpaceCheck;
  out.push_back(s2d);
}

} // namespace hetplan::ops::defs
