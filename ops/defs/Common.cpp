//===- Common.cpp - rules several op families share -----------------------===//
#include "ops/defs/Defs.h"

#include <algorithm>
#include <string>

namespace hetplan::ops {

namespace defs {
std::string listOf(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
} // namespace defs
using defs::listOf;

int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t s, int64_t d, int64_t padBegin, int64_t padEnd,
                         const std::string &autoPad, bool ceilMode) {
  if (isUnknown(in) || isUnknown(kernel) || s <= 0)
    return kUnknownDim;
  // Checked arithmetic throughout (an unknown on overflow): the attributes
  // are the model's, checked for range by checkWindowed after this runs.
  int64_t window = addDims(mulDims(subDims(kernel, 1), d), 1);
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    int64_t up = addDims(in, s - 1);
    return isUnknown(up) ? up : up / s;
  }
  int64_t padded = autoPad == "VALID" ? subDims(in, window) : subDims(addDims(addDims(in, padBegin), padEnd), window);
  if (isUnknown(padded))
    return padded;
  if (!ceilMode || autoPad == "VALID")
    return addDims(padded / s, 1);
  int64_t up = addDims(padded, s - 1);
  if (isUnknown(up))
    return up;
  int64_t size = up / s + 1;
  // ONNX drops a last window that would start inside the end padding.
  int64_t start = mulDims(size - 1, s), limit = addDims(in, padBegin);
  if (!isUnknown(start) && !isUnknown(limit) && start >= limit)
    --size;
  return size;
}

std::string checkWindowed(const CheckIn &c, size_t xIndex, int wIndex, bool transpose, bool needKernel) {
  const Attrs &n = c.attrs;
  auto ints = [&](const char *name) { return n.getInts(name).value_or(std::vector<int64_t>{}); };
  auto has = [&](const char *name) { return n.has(name); };
  for (const char *a : {"kernel_shape", "strides", "dilations"})
    for (int64_t v : ints(a))
      if (v <= 0) return std::string(a) + " " + listOf(ints(a)) + " must be positive";
  for (int64_t p : ints("pads"))
    if (p < 0) return "pads " + listOf(ints("pads")) + " must not be negative";
  if (n.has("group") && n.intOr("group", 1) <= 0)
    return "group " + std::to_string(n.intOr("group", 1)) + " must be positive";
  std::string autoPad = n.stringOr("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER" && autoPad != "VALID")
    return "auto_pad '" + autoPad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID";
  if (needKernel && !has("kernel_shape")) return "kernel_shape is required";
  // The spatial rank: from the input's rank, else the first list given.
  int64_t spatial = c.rank(xIndex) >= 0 ? c.rank(xIndex) - 2 : -1;
  std::string from = "input rank " + std::to_string(c.rank(xIndex));
  if (c.rank(xIndex) >= 0 && c.rank(xIndex) < 3 && (needKernel || wIndex >= 0))
    return "input rank " + std::to_string(c.rank(xIndex)) + " needs at least one spatial dim (N, C, D1, ...)";
  auto sameSpatial = [&](const char *name, size_t per) -> std::string {
    if (!has(name)) return "";
    int64_t len = static_cast<int64_t>(ints(name).size());
    if (spatial < 0) { spatial = len / int64_t(per); from = std::string(name); if (len % int64_t(per) == 0) return ""; }
    if (len != spatial * int64_t(per))
      return std::string(name) + " " + listOf(ints(name)) + " needs " + std::to_string(spatial * int64_t(per)) +
             " values (" + from + ")";
    return "";
  };
  for (const char *a : {"kernel_shape", "strides", "dilations"})
    if (auto e = sameSpatial(a, 1); !e.empty()) return e;
  if (auto e = sameSpatial("pads", 2); !e.empty()) return e;
  if (transpose) {
    if (auto e = sameSpatial("output_padding", 1); !e.empty()) return e;
    if (auto e = sameSpatial("output_shape", 1); !e.empty()) return e;
    for (int64_t v : ints("output_shape"))
      if (v < 0) return "output_shape " + listOf(ints("output_shape")) + " must not be negative";
    for (int64_t v : ints("output_padding"))
      if (v < 0) return "output_padding " + listOf(ints("output_padding")) + " must not be negative";
  }
  if (wIndex >= 0) {
    size_t w = size_t(wIndex);
    int64_t wr = c.rank(w);
    if (wr >= 0 && c.rank(xIndex) >= 0 && wr != c.rank(xIndex))
      return "weight rank " + std::to_string(wr) + " differs from input rank " + std::to_string(c.rank(xIndex));
    if (wr >= 0 && has("kernel_shape")) {
      auto ks = ints("kernel_shape");
      for (size_t i = 0; i < ks.size() && int64_t(i) + 2 < wr; ++i)
        if (c.dim(w, int64_t(i) + 2) >= 0 && c.dim(w, int64_t(i) + 2) != ks[i])
          return "kernel_shape " + listOf(ks) + " differs from the weight's spatial dims";
    }
    int64_t group = n.intOr("group", 1);
    int64_t ch = c.dim(xIndex, 1), wc = c.dim(w, transpose ? 0 : 1);
    if (ch >= 0 && wc >= 0) {
      int64_t need = transpose ? ch : ch / group;
      if ((!transpose && ch % group) || wc != need)
        return "weight " + std::string(transpose ? "dim 0" : "dim 1") + " " + std::to_string(wc) + " does not match " +
               std::to_string(ch) + " input channels in " + std::to_string(group) + " groups";
    }
    if (!transpose && c.dim(w, 0) >= 0 && c.dim(w, 0) % group)
      return "weight dim 0 " + std::to_string(c.dim(w, 0)) + " (output channels) is not a multiple of group " +
             std::to_string(group);
  }
  return "";
}

namespace defs {

bool requireShape(const ShapeIn &in, size_t i, std::vector<int64_t> &dims, std::string &why) {
  if (i >= in.inputs.size())
    return (why = "needs input #" + std::to_string(i), false);
  if (!in.inputs[i].ranked)
    return false;
  dims = in.inputs[i].dims;
  return true;
}

OpDef define(const char *domain, const char *type, int since, int minInputs, int maxInputs, const char *summary,
             ShapeFn shape, CostFn cost) {
  OpDef d;
  d.domain = domain;
  d.type = type;
  d.sinceVersion = since;
  d.minInputs = minInputs;
  d.maxInputs = maxInputs;
  d.summary = summary;
  d.shape = shape;
  d.cost = cost;
  return d;
}

std::optional<std::vector<int64_t>> staticInput(const CostIn &in, size_t i) {
  return i < in.inputs.size() ? in.inputs[i] : std::nullopt;
}
bool given(const CostIn &in, size_t i) { return i < in.present.size() && in.present[i]; }

int64_t numElements(const std::vector<int64_t> &shape, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, shape.size()); ++i)
    n = mulDims(n, shape[i]);
  return n;
}

OutShape like(std::vector<int64_t> dims, int of) {
  OutShape o;
  o.set = true;
  o.dims = std::move(dims);
  o.elementOf = of;
  return o;
}

bool sameAsInput(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  out[0] = like(x);
  return true;
}

bool onPicked(ShapeFn rule, const ShapeIn &in, const std::vector<size_t> &pick, std::vector<OutShape> &out,
              std::string &why) {
  std::vector<ValueShape> sub;
  for (size_t i : pick) {
    if (i >= in.inputs.size())
      return (why = "needs input #" + std::to_string(i), false);
    sub.push_back(in.inputs[i]);
  }
  std::vector<OutShape> o(1);
  if (!rule({in.attrs, sub, in.opset}, o, why))
    return false;
  if (o[0].set && !out.empty()) {
    out[0] = o[0];
    if (o[0].element == Element::OfInput)
      out[0].elementOf = int(pick[size_t(o[0].elementOf)]);
  }
  return true;
}

void retype(std::vector<OutShape> &out, Element element, int of) {
  if (out.empty() || !out[0].set)
    return;
  out[0].element = element;
  out[0].elementOf = of;
  out[0].ints.reset();
}

int zeroPointOr(const ShapeIn &in, size_t zp, size_t x) {
  return zp < in.inputs.size() && in.inputs[zp].present && in.inputs[zp].typed ? int(zp) : int(x);
}

std::string axisAttr(const CheckIn &in, const std::string &name, int64_t dflt, int64_t r, int64_t extra) {
  if (r < 0) return "";
  int64_t axis = in.attrs.intOr(name, dflt);
  int64_t hi = r + extra;
  if (axis < -hi || axis >= hi)
    return name + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(r) + " (must be in [" +
           std::to_string(-hi) + ", " + std::to_string(hi - 1) + "])";
  return "";
}

std::string axisZeroCheck(const CheckIn &in, const std::string &) { return axisAttr(in, "axis", 0, in.rank(0)); }

std::string alongFrom(const std::vector<int> &carries, int64_t first, const std::string &what) {
  int64_t rank = int64_t(carries.size());
  first = normAxis(first, rank);
  for (int64_t a = std::max<int64_t>(first, 0); a < rank; ++a)
    if (carries[size_t(a)])
      return what + " along axis " + std::to_string(a) + ", which carries the batch";
  return "";
}

} // namespace defs
} // namespace hetplan::ops
