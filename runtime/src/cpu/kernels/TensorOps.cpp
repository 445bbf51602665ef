//===- TensorOps.cpp - shape and data movement ----------------------------===//
//
// Reductions are in ReduceOps.cpp, Resize in Resize.cpp, RNNs in
// Recurrent.cpp; registerTensorKernels registers all four, in one fixed
// order. Gather has a file of its own (Gather.cpp).
//
//===----------------------------------------------------------------------===//
#include "FastMath.h"
#include "KernelUtil.h"
#include "OpKernels.h"
#include "ViewParams.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

namespace hetplan::runtime::cpu {
namespace {


/// Copies a strided view of `src` (element offsets) into a dense tensor of `shape`.
Tensor gatherStrided(const Tensor &src, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t base) {
  Tensor out(src.dtype(), shape);
  size_t es = dtypeSize(src.dtype());
  int64_t n = out.numel(), r = shape.size();
  const char *ps = static_cast<const char *>(src.raw());
  char *po = static_cast<char *>(out.raw());
  std::vector<int64_t> idx(r, 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(po + i * es, ps + off * es, es);
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) { off += strides[d]; break; }
      off -= strides[d] * (shape[d] - 1); idx[d] = 0;
    }
  }
  return out;
}

Tensor int64Tensor(const std::vector<int64_t> &v, std::vector<int64_t> shape) {
  Tensor t(DType::Int64, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

void reshape(KernelContext &c) {
  const Tensor &x = c.in(0);
  auto shape = c.opset < 5 ? c.node.getInts("shape") : c.in(1).toInt64Vector();
  bool allowZero = c.node.getInt("allowzero", 0);
  int64_t known = 1, neg = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if (static_cast<int64_t>(i) >= x.rank())
        throw std::runtime_error("Reshape: shape entry " + std::to_string(i) + " is 0 (copy the input's dim) but the input " +
                                 x.describe() + " has no dim " + std::to_string(i));
      shape[i] = x.dim(i);
    }
    if (shape[i] < -1 || (shape[i] == -1 && neg >= 0))
      throw std::runtime_error("Reshape: shape has a dim below -1 or more than one -1");
    if (shape[i] == -1) neg = i; else known = checkedMul(known, shape[i], "Reshape's element count");
  }
  if (neg >= 0) shape[neg] = known ? x.numel() / known : 0;
  c.outputs[0] = x.reshaped(shape);
}

void flatten(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = c.node.getInt("axis", 1);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis > x.rank())
    throw std::runtime_error("Flatten: axis " + std::to_string(c.node.getInt("axis", 1)) + " is out of range for " + x.describe());
  int64_t a = 1;
  for (int64_t i = 0; i < axis; ++i) a *= x.dim(i);
  c.outputs[0] = x.reshaped({a, a ? x.numel() / a : 0});
}


void transpose(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  std::vector<int64_t> perm = transposePerm(c.node, r);
  auto st = stridesOf(x.shape());
  std::vector<int64_t> shape(r), strides(r);
  for (int64_t i = 0; i < r; ++i) { shape[i] = x.dim(perm[i]); strides[i] = st[perm[i]]; }
  c.outputs[0] = gatherStridedFast(x, shape, strides);
}

void concat(KernelContext &c) {
  std::vector<const Tensor *> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) if (c.hasInput(i)) ins.push_back(c.inputs[i]);
  if (ins.empty()) throw std::runtime_error("Concat needs at least one input");
  int64_t axis = normAxis(c.node.getInt("axis", 0), ins[0]->rank());
  std::vector<int64_t> shape = ins[0]->shape();
  if (shape.empty()) throw std::runtime_error("Concat inputs must have rank >= 1");
  shape[axis] = 0;
  for (auto *t : ins) {
    // Same type, rank and dims (but the axis) as the first input.
    bool same = t->dtype() == ins[0]->dtype() && t->rank() == ins[0]->rank();
    for (int64_t d = 0; same && d < t->rank(); ++d) same = d == axis || t->dim(d) == ins[0]->dim(d);
    if (!same)
      throw std::runtime_error("Concat inputs " + ins[0]->describe() + " and " + t->describe() +
                               " differ in type, rank or a dim other than the axis " + std::to_string(axis));
    shape[axis] = checkedAdd(shape[axis], t->dim(axis), "Concat's output dim");
  }
  Tensor out(ins[0]->dtype(), shape);
  size_t es = dtypeSize(out.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (int64_t i = axis + 1; i < (int64_t)shape.size(); ++i) inner *= shape[i];
  char *po = static_cast<char *>(out.raw());
  int64_t rowOut = shape[axis] * inner * es;
  int64_t offset = 0;
  for (auto *t : ins) {
    int64_t row = t->dim(axis) * inner * es;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(po + o * rowOut + offset, static_cast<const char *>(t->raw()) + o * row, row);
    offset += row;
  }
  c.outputs[0] = std::move(out);
}

Tensor sliceAxis(const Tensor &x, int64_t axis, int64_t start, int64_t len) {
  auto shape = x.shape(); shape[axis] = len;
  auto st = stridesOf(x.shape());
  return gatherStrided(x, shape, st, start * st[axis]);
}

void split(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", 0), x.rank());
  std::vector<int64_t> parts = c.opset >= 13 ? (c.hasInput(1) ? c.in(1).toInt64Vector() : std::vector<int64_t>{}) : c.node.getInts("split");
  int64_t n = c.numOutputs();
  if (parts.empty()) {
    int64_t each = (x.dim(axis) + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) parts.push_back(std::max<int64_t>(0, std::min(each, x.dim(axis) - i * each)));
  }
  int64_t total = 0;
  for (int64_t p : parts) {
    if (p < 0) throw std::runtime_error("Split sizes must not be negative");
    total = checkedAdd(total, p, "Split sizes");
  }
  if (static_cast<int64_t>(parts.size()) != n || total != x.dim(axis))
    throw std::runtime_error("Split into " + std::to_string(parts.size()) + " parts of " + std::to_string(total) +
                             " in all: the node has " + std::to_string(n) + " outputs and axis " + std::to_string(axis) +
                             " of " + x.describe() + " has " + std::to_string(x.dim(axis)));
  int64_t start = 0;
  for (int64_t i = 0; i < n; ++i) { c.outputs[i] = sliceAxis(x, axis, start, parts[i]); start += parts[i]; }
}

void slice(KernelContext &c) {
  const Tensor &x = c.in(0);
  SliceView v = sliceView(x.shape(), sliceArgs(c.node, c.opset, [&](size_t i) { return c.hasInput(i); },
                                               [&](size_t i) -> const Tensor & { return c.in(i); }));
  c.outputs[0] = gatherStrided(x, v.shape, v.strides, shapeNumel(v.shape) ? v.base : 0);
}

std::vector<int64_t> axesArg(KernelContext &c, size_t inputIndex, int64_t newOpset) {
  if (c.opset >= newOpset) return c.hasInput(inputIndex) ? c.in(inputIndex).toInt64Vector() : std::vector<int64_t>{};
  return c.node.getInts("axes");
}

void squeeze(KernelContext &c) {
  const Tensor &x = c.in(0);
  auto axes = axesArg(c, 1, 13);
  std::vector<bool> drop(x.rank(), false);
  if (axes.empty()) for (int64_t i = 0; i < x.rank(); ++i) drop[i] = x.dim(i) == 1;
  for (int64_t a : axes) drop[normAxis(a, x.rank())] = true;
  std::vector<int64_t> shape;
  for (int64_t i = 0; i < x.rank(); ++i) if (!drop[i]) shape.push_back(x.dim(i));
  c.outputs[0] = x.reshaped(shape);
}

void unsqueeze(KernelContext &c) {
  const Tensor &x = c.in(0);
  auto axes = axesArg(c, 1, 13);
  int64_t r = x.rank() + axes.size();
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) ins[normAxis(a, r)] = true;
  std::vector<int64_t> shape;
  for (int64_t i = 0, j = 0; i < r; ++i) shape.push_back(ins[i] ? 1 : x.dim(j++));
  c.outputs[0] = x.reshaped(shape);
}

void expand(KernelContext &c) {
  const Tensor &x = c.in(0);
  auto shape = broadcastShapes(x.shape(), c.in(1).toInt64Vector());
  c.outputs[0] = gatherStrided(x, shape, broadcastStrides(x.shape(), shape), 0);
}

void tile(KernelContext &c) {
  const Tensor &x = c.in(0);
  auto reps = c.in(1).toInt64Vector();
  if (static_cast<int64_t>(reps.size()) != x.rank())
    throw std::runtime_error("Tile repeats has " + std::to_string(reps.size()) + " values for " + x.describe());
  for (int64_t r : reps)
    if (r < 0) throw std::runtime_error("Tile repeats must not be negative");
  // view as [r0, d0, r1, d1, ...] with stride 0 on the repeats
  std::vector<int64_t> shape, strides, outShape;
  auto st = stridesOf(x.shape());
  for (int64_t i = 0; i < x.rank(); ++i) {
    shape.push_back(reps[i]); strides.push_back(0);
    shape.push_back(x.dim(i)); strides.push_back(st[i]);
    outShape.push_back(checkedMul(reps[i], x.dim(i), "Tile's output dim"));
  }
  c.outputs[0] = gatherStrided(x, shape, strides, 0).reshaped(outShape);
}

void gatherElements(KernelContext &c) {
  const Tensor &x = c.in(0), &it = c.in(1);
  int64_t axis = normAxis(c.node.getInt("axis", 0), x.rank());
  auto idx = it.toInt64Vector();
  if (it.rank() != x.rank())
    throw std::runtime_error("GatherElements indices " + it.describe() + " and data " + x.describe() + " differ in rank");
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != axis && it.dim(d) > x.dim(d))
      throw std::runtime_error("GatherElements indices " + it.describe() + " exceed data " + x.describe() + " on dim " +
                               std::to_string(d));
  for (int64_t &k : idx) {
    if (k < -x.dim(axis) || k >= x.dim(axis))
      throw std::runtime_error("GatherElements index " + std::to_string(k) + " out of range for axis " +
                               std::to_string(axis) + " of " + x.describe());
  }
  Tensor out(x.dtype(), it.shape());
  auto sx = stridesOf(x.shape()), si = stridesOf(it.shape());
  size_t es = dtypeSize(x.dtype());
  for (int64_t i = 0; i < it.numel(); ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = 0; d < it.rank(); ++d) {
      int64_t k = rem / si[d]; rem %= si[d];
      if (d == axis) { k = idx[i] < 0 ? idx[i] + x.dim(d) : idx[i]; }
      off += k * sx[d];
    }
    std::memcpy(static_cast<char *>(out.raw()) + i * es, static_cast<const char *>(x.raw()) + off * es, es);
  }
  c.outputs[0] = std::move(out);
}

void constantKernel(KernelContext &c) {
  const Node &n = c.node;
  if (n.has("value")) c.outputs[0] = n.attrs.at("value").t;
  else if (n.has("value_float")) c.outputs[0] = Tensor::scalar<float>(DType::Float32, n.getFloat("value_float", 0));
  else if (n.has("value_int")) c.outputs[0] = Tensor::scalar<int64_t>(DType::Int64, n.getInt("value_int", 0));
  else if (n.has("value_floats")) {
    auto v = n.getFloats("value_floats");
    Tensor t(DType::Float32, {(int64_t)v.size()}); std::copy(v.begin(), v.end(), t.data<float>()); c.outputs[0] = t;
  } else if (n.has("value_ints")) { auto v = n.getInts("value_ints"); c.outputs[0] = int64Tensor(v, {(int64_t)v.size()}); }
  else throw std::runtime_error("Constant without a supported value");
}

void constantOfShape(KernelContext &c) {
  auto shape = c.in(0).toInt64Vector();
  Tensor value = c.node.has("value") ? c.node.attrs.at("value").t : Tensor::scalar<float>(DType::Float32, 0.f);
  if (value.numel() != 1 || !value.raw())
    throw std::runtime_error("ConstantOfShape value " + value.describe() + " is not one element with its data");
  Tensor out(value.dtype(), shape);
  size_t es = dtypeSize(value.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(static_cast<char *>(out.raw()) + i * es, value.raw(), es);
  c.outputs[0] = std::move(out);
}

void range(KernelContext &c) {
  const Tensor &s = c.in(0);
  HP_DISPATCH_NUMERIC(s.dtype(), {
    if (s.numel() != 1 || c.in(1).numel() != 1 || c.in(2).numel() != 1 || c.in(1).dtype() != s.dtype() ||
        c.in(2).dtype() != s.dtype())
      throw std::runtime_error("Range's start, limit and delta must be scalars of one type");
    T start = s.data<T>()[0], limit = c.in(1).data<T>()[0], delta = c.in(2).data<T>()[0];
    double count = std::ceil((static_cast<double>(limit) - start) / static_cast<double>(delta));
    if (!(static_cast<double>(delta) != 0) || !std::isfinite(count) || count > 9.0e15)
      throw std::runtime_error("Range with start " + std::to_string(double(start)) + ", limit " +
                               std::to_string(double(limit)) + " and delta " + std::to_string(double(delta)) +
                               " has no finite length");
    int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
    Tensor out(s.dtype(), {n});
    for (int64_t i = 0; i < n; ++i) out.data<T>()[i] = static_cast<T>(start + i * delta);
    c.outputs[0] = std::move(out);
  });
}

void pad(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  std::vector<int64_t> pads = c.opset < 11 ? c.node.getInts("pads") : c.in(1).toInt64Vector();
  std::string mode = c.node.getString("mode", "constant");
  if (c.opset >= 18 && c.hasInput(3)) {
    auto axes = c.in(3).toInt64Vector();
    if (pads.size() != 2 * axes.size())
      throw std::runtime_error("Pad has " + std::to_string(pads.size()) + " pads for " + std::to_string(axes.size()) + " axes");
    std::vector<int64_t> full(2 * r, 0);
    for (size_t i = 0; i < axes.size(); ++i) { int64_t a = normAxis(axes[i], r); full[a] = pads[i]; full[a + r] = pads[i + axes.size()]; }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * r)
    throw std::runtime_error("Pad has " + std::to_string(pads.size()) + " pads for " + x.describe() + " (needs " +
                             std::to_string(2 * r) + ")");
  std::vector<int64_t> shape(r);
  for (int64_t i = 0; i < r; ++i)
    shape[i] = checkedAdd(checkedAdd(x.dim(i), pads[i], "Pad's output dim"), pads[i + r], "Pad's output dim");
  if (mode != "constant")
    for (int64_t d = 0; d < r; ++d)
      if (x.dim(d) == 0 && shape[d] > 0)
        throw std::runtime_error("Pad mode '" + mode + "' cannot pad axis " + std::to_string(d) + " of " + x.describe() +
                                 ": it is empty");
  Tensor out(x.dtype(), shape);
  size_t es = dtypeSize(x.dtype());
  if (c.opset >= 11 && c.hasInput(2) && (c.in(2).dtype() != x.dtype() || c.in(2).numel() < 1))
    throw std::runtime_error("Pad's constant_value " + c.in(2).describe() + " is not one " + dtypeName(x.dtype()));
  Tensor value = Tensor(x.dtype(), {});
  if (c.opset < 11) {
    float v = c.node.getFloat("value", 0.f);
    HP_DISPATCH_ALL(x.dtype(), *value.data<T>() = static_cast<T>(v));
  } else if (c.hasInput(2)) std::memcpy(value.raw(), c.in(2).raw(), es);
  auto sx = stridesOf(x.shape());
  // Per dim, the source offset of each output index (-1: the constant).
  std::vector<std::vector<int64_t>> tab(r);
  for (int64_t d = 0; d < r; ++d) {
    tab[d].resize(shape[d]);
    for (int64_t o = 0; o < shape[d]; ++o) {
      int64_t p = o - pads[d], n = x.dim(d);
      if (p < 0 || p >= n) {
        if (mode == "constant") { tab[d][o] = -1; continue; }
        if (mode == "edge") p = std::clamp<int64_t>(p, 0, n - 1);
        else { // reflect
          if (n == 1) p = 0;
          else { int64_t period = 2 * (n - 1); p = ((p % period) + period) % period; if (p >= n) p = period - p; }
        }
      }
      tab[d][o] = p * sx[d];
    }
  }
  // Rows (every dim but the last) in parallel, elements moved as unsigned
  // integers of the element's size.
  auto run = [&](auto tag) {
    using U = decltype(tag);
    const U *px = static_cast<const U *>(x.raw());
    U *po = static_cast<U *>(out.raw());
    U v;
    std::memcpy(&v, value.raw(), sizeof(U));
    int64_t W = r ? shape[r - 1] : 1, rows = W ? out.numel() / W : 0;
    parallelFor(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, W)), [&](int64_t rlo, int64_t rhi) {
      for (int64_t row = rlo; row < rhi; ++row) {
        U *dst = po + row * W;
        if (r == 0) { dst[0] = px[0]; continue; }
        int64_t f = row, base = 0;
        bool inside = true;
        for (int64_t d = r - 2; d >= 0; --d) {
          int64_t t = tab[d][f % shape[d]];
          f /= shape[d];
          if (t < 0) inside = false;
          base += t;
        }
        if (!inside) { std::fill(dst, dst + W, v); continue; }
        const int64_t *tl = tab[r - 1].data();
        for (int64_t j = 0; j < W; ++j) dst[j] = tl[j] < 0 ? v : px[base + tl[j]];
      }
    });
  };
  switch (es) {
  case 1: run(uint8_t()); break;
  case 2: run(uint16_t()); break;
  case 4: run(uint32_t()); break;
  case 8: run(uint64_t()); break;
  default: throw std::runtime_error("Pad: unsupported element size");
  }
  c.outputs[0] = std::move(out);
}

void depthSpace(KernelContext &c, bool toSpace) {
  const Tensor &x = c.in(0);
  // The verifier checks these where the input's shape is declared; here
  // for the shape met at run time.
  int64_t b = c.node.getInt("blocksize", 1);
  if (x.rank() != 4 || b <= 0 || b > (int64_t(1) << 20))
    throw std::runtime_error(c.node.opType + " needs a 4-D input and a blocksize in 1..2^20, not " + x.describe() +
                             " and " + std::to_string(b));
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (toSpace ? C % (b * b) != 0 : (H % b != 0 || W % b != 0))
    throw std::runtime_error(c.node.opType + ": " + x.describe() + " does not divide by blocksize " +
                             std::to_string(b));
  Tensor tmp;
  if (toSpace) {
    bool crd = c.node.getString("mode", "DCR") == "CRD";
    std::vector<int64_t> shape = crd ? std::vector<int64_t>{N, C / (b * b), b, b, H, W} : std::vector<int64_t>{N, b, b, C / (b * b), H, W};
    std::vector<int64_t> perm = crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
    Tensor v = x.reshaped(shape);
    auto st = stridesOf(shape);
    std::vector<int64_t> s2(6), st2(6);
    for (int i = 0; i < 6; ++i) { s2[i] = shape[perm[i]]; st2[i] = st[perm[i]]; }
    c.outputs[0] = gatherStrided(v, s2, st2, 0).reshaped({N, C / (b * b), H * b, W * b});
  } else {
    std::vector<int64_t> shape = {N, C, H / b, b, W / b, b}, perm = {0, 3, 5, 1, 2, 4};
    Tensor v = x.reshaped(shape);
    auto st = stridesOf(shape);
    std::vector<int64_t> s2(6), st2(6);
    for (int i = 0; i < 6; ++i) { s2[i] = shape[perm[i]]; st2[i] = st[perm[i]]; }
    c.outputs[0] = gatherStrided(v, s2, st2, 0).reshaped({N, C * b * b, H / b, W / b});
  }
}

} // namespace

/// Copies a strided view like gatherStrided, faster: dims of extent 1
/// dropped, adjacent dims that are contiguous in the source merged; then a
/// contiguous innermost run is copied with memcpy, and an innermost pair
/// whose source is transposed (a 2-D transpose) in 32x32 tiles (4- and
/// 8-byte elements); outer indices in parallel.
Tensor gatherStridedFast(const Tensor &src, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides) {
  std::vector<int64_t> sh, st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!sh.empty() && st.back() == strides[i] * shape[i]) { sh.back() *= shape[i]; st.back() = strides[i]; continue; }
    sh.push_back(shape[i]); st.push_back(strides[i]);
  }
  size_t es = dtypeSize(src.dtype());
  int64_t n = shapeNumel(shape);
  if (sh.empty() || n == 0) return src.reshaped(shape).clone();
  int64_t r = static_cast<int64_t>(sh.size());
  if (st[r - 1] != 1 && !(r >= 2 && (es == 4 || es == 8))) return gatherStrided(src, shape, strides, 0);
  // Both paths below write every element: no zero fill first.
  Tensor out = Tensor::uninitialized(src.dtype(), shape);
  const char *ps = static_cast<const char *>(src.raw());
  char *po = static_cast<char *>(out.raw());
  // Element offset in the source of the outer index `o` over dims [0, k).
  auto outerOffset = [&](int64_t o, int64_t k) {
    int64_t off = 0;
    for (int64_t d = k; d-- > 0;) { off += (o % sh[d]) * st[d]; o /= sh[d]; }
    return off;
  };
  if (st[r - 1] == 1) { // contiguous runs of sh[r-1] elements
    int64_t run = sh[r - 1], outer = n / run;
    size_t bytes = static_cast<size_t>(run) * es;
    parallelFor(outer, std::max<int64_t>(1, kElementwiseGrain / run), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) std::memcpy(po + o * bytes, ps + outerOffset(o, r - 1) * es, bytes);
    });
    return out;
  }
  // Else 4- or 8-byte elements, a transposed innermost pair (the guard above).
  // Output [.., A, B] from source stride (sa, sb): tiles of 32x32.
  int64_t A = sh[r - 2], B = sh[r - 1], sa = st[r - 2], sb = st[r - 1], outer = n / (A * B);
  constexpr int64_t kT = 32;
  int64_t tilesA = (A + kT - 1) / kT;
  auto body = [&](auto tag) {
    using E = decltype(tag);
    const E *s = reinterpret_cast<const E *>(ps);
    E *d = reinterpret_cast<E *>(po);
    parallelFor(outer * tilesA, std::max<int64_t>(1, kElementwiseGrain / (kT * B)), [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        int64_t o = t / tilesA, a0 = (t % tilesA) * kT, a1 = std::min(A, a0 + kT);
        const E *so = s + outerOffset(o, r - 2);
        E *dout = d + o * A * B;
        for (int64_t b0 = 0; b0 < B; b0 += kT) {
          int64_t b1 = std::min(B, b0 + kT);
          for (int64_t a = a0; a < a1; ++a)
            for (int64_t b = b0; b < b1; ++b) dout[a * B + b] = so[a * sa + b * sb];
        }
      }
    });
  };
  if (es == 4) body(uint32_t()); else body(uint64_t());
  return out;
}

void registerRecurrentKernels(); // Recurrent.cpp (RNN, GRU, LSTM)
void registerReductionKernels(); // ReduceOps.cpp
void registerResizeKernels();    // Resize.cpp

void registerTensorKernels() {
  registerRecurrentKernels();
  registerKernel("Reshape", {reshape, nullptr, {}});
  registerKernel("Flatten", {flatten, nullptr, {}});
  registerKernel("Transpose", {transpose, nullptr, {}});
  registerKernel("Concat", {concat, nullptr, {}});
  registerKernel("Split", {split, nullptr, {}});
  registerKernel("Slice", {slice, nullptr, {}});
  registerKernel("Squeeze", {squeeze, nullptr, {}});
  registerKernel("Unsqueeze", {unsqueeze, nullptr, {}});
  registerKernel("Expand", {expand, nullptr, {}});
  registerKernel("Tile", {tile, nullptr, {}});
  registerKernel("GatherElements", {gatherElements, nullptr, {}});
  registerKernel("Shape", {[](KernelContext &c) {
                             auto s = c.in(0).shape();
                             int64_t r = s.size(), start = c.node.getInt("start", 0), end = c.node.getInt("end", r);
                             if (start < 0) start += r;
                             if (end < 0) end += r;
                             start = std::clamp<int64_t>(start, 0, r); end = std::clamp<int64_t>(end, start, r);
                             std::vector<int64_t> v(s.begin() + start, s.begin() + end);
                             c.outputs[0] = int64Tensor(v, {(int64_t)v.size()});
                           },
                           nullptr, {}});
  registerKernel("Size", {[](KernelContext &c) { c.outputs[0] = Tensor::scalar<int64_t>(DType::Int64, c.in(0).numel()); }, nullptr, {}});
  registerKernel("Constant", {constantKernel, [](const CheckContext &c) -> std::string {
                                for (const char *a : {"value", "value_float", "value_int", "value_floats", "value_ints"})
                                  if (c.node.has(a)) return "";
                                return "Constant without a value/value_float(s)/value_int(s) attribute is not supported";
                              },
                              {}});
  registerKernel("ConstantOfShape", {constantOfShape, nullptr, {}});
  registerKernel("Range", {range, nullptr, kNumericTypes});
  registerKernel("Pad", {pad, [](const CheckContext &c) -> std::string {
                           std::string m = c.node.getString("mode", "constant");
                           if (m != "constant" && m != "reflect" && m != "edge") return "Pad mode '" + m + "' is not supported";
                           return "";
                         },
                         {}});
  registerReductionKernels();
  registerResizeKernels();
  registerKernel("DepthToSpace", {[](KernelContext &c) { depthSpace(c, true); }, nullptr, {}});
  registerKernel("SpaceToDepth", {[](KernelContext &c) { depthSpace(c, false); }, nullptr, {}});
}

} // namespace hetplan::runtime::cpu
