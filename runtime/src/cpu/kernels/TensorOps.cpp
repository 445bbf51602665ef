//===- TensorOps.cpp - shape, data movement, reductions, softmax ----------===//
#include "FastMath.h"
#include "KernelUtil.h"
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
  Tensor out(src.dtype(), shape);
  const char *ps = static_cast<const char *>(src.raw());
  char *po = static_cast<char *>(out.raw());
  int64_t r = static_cast<int64_t>(sh.size());
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
  if (r >= 2 && (es == 4 || es == 8)) {
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
  return gatherStrided(src, shape, strides, 0);
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

void gather(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", 0), x.rank());
  auto idx = c.in(1).toInt64Vector();
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), c.in(1).shape().begin(), c.in(1).shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  Tensor out(x.dtype(), shape);
  int64_t outer = 1, inner = 1, d = x.dim(axis);
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  size_t row = inner * dtypeSize(x.dtype());
  int64_t n = idx.size();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      int64_t k = idx[j] < 0 ? idx[j] + d : idx[j];
      if (k < 0 || k >= d) throw std::runtime_error("Gather index " + std::to_string(idx[j]) + " out of range");
      std::memcpy(static_cast<char *>(out.raw()) + (o * n + j) * row, static_cast<const char *>(x.raw()) + (o * d + k) * row, row);
    }
  c.outputs[0] = std::move(out);
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

/// Reductions: kind selects the combine rule.
enum class Red { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

void reduce(KernelContext &c, Red kind) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  bool axesAsInput = (kind == Red::Sum && c.opset >= 13) || c.opset >= 18;
  std::vector<int64_t> axes = axesAsInput ? (c.hasInput(1) ? c.in(1).toInt64Vector() : std::vector<int64_t>{}) : c.node.getInts("axes");
  bool keep = c.node.getInt("keepdims", 1);
  if (axes.empty() && c.node.getInt("noop_with_empty_axes", 0)) { c.outputs[0] = x; return; }
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes) red[normAxis(a, r)] = true;
  std::vector<int64_t> keptShape(r), outShape;
  for (int64_t i = 0; i < r; ++i) {
    keptShape[i] = red[i] ? 1 : x.dim(i);
    if (!red[i]) outShape.push_back(x.dim(i)); else if (keep) outShape.push_back(1);
  }
  int64_t no = shapeNumel(keptShape);
  auto so = broadcastStrides(keptShape, x.shape());
  HP_DISPATCH_NUMERIC(x.dtype(), {
    double init = kind == Red::Max ? -std::numeric_limits<double>::infinity()
                : kind == Red::Min ? std::numeric_limits<double>::infinity() : kind == Red::Prod ? 1.0 : 0.0;
    std::vector<double> acc(no, init);
    std::vector<int64_t> cnt(1, 0);
    const T *px = x.data<T>();
    std::vector<int64_t> idx(r, 0);
    int64_t off = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      double v = px[i], &a = acc[off];
      switch (kind) {
      case Red::Sum: case Red::Mean: case Red::LogSum: a += v; break;
      case Red::Max: a = std::max(a, v); break;
      case Red::Min: a = std::min(a, v); break;
      case Red::Prod: a *= v; break;
      case Red::L1: a += std::fabs(v); break;
      case Red::L2: case Red::SumSquare: a += v * v; break;
      case Red::LogSumExp: a += std::exp(v); break;
      }
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++idx[d] < x.dim(d)) { off += so[d]; break; }
        off -= so[d] * (x.dim(d) - 1); idx[d] = 0;
      }
    }
    int64_t count = no ? x.numel() / no : 0;
    Tensor out(x.dtype(), outShape);
    for (int64_t i = 0; i < no; ++i) {
      double a = acc[i];
      if (kind == Red::Mean) a /= count;
      else if (kind == Red::L2) a = std::sqrt(a);
      else if (kind == Red::LogSum || kind == Red::LogSumExp) a = std::log(a);
      out.data<T>()[i] = static_cast<T>(a);
    }
    c.outputs[0] = std::move(out);
  });
}

/// Softmax family; opset < 13 coerces to 2-D at axis, opset >= 13 works along one axis.
void softmax(KernelContext &c, int kind /*0 softmax, 1 log, 2 hardmax*/) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  bool legacy = c.opset < 13;
  int64_t axis = normAxis(c.node.getInt("axis", legacy ? 1 : -1), r);
  int64_t outer = 1, len = 1, inner = 1;
  if (legacy) {
    for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
    for (int64_t i = axis; i < r; ++i) len *= x.dim(i);
  } else {
    for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
    len = x.dim(axis);
    for (int64_t i = axis + 1; i < r; ++i) inner *= x.dim(i);
  }
  Tensor out(x.dtype(), x.shape());
  if (x.dtype() == DType::Float32 && inner == 1 && kind != 2 && len > 0) {
    // Contiguous rows: one vectorised pass per row (max, exp-sum, scale), rows in parallel.
    const float *px = x.data<float>(); float *po = out.data<float>();
    parallelFor(outer, std::max<int64_t>(1, kElementwiseGrain / len), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) fastmath::softmaxRow(px + o * len, po + o * len, len, kind == 1);
    });
    c.outputs[0] = std::move(out);
    return;
  }
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(); T *po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        int64_t base = o * len * inner + in;
        double mx = -std::numeric_limits<double>::infinity(); int64_t arg = 0;
        for (int64_t k = 0; k < len; ++k) if (px[base + k * inner] > mx) { mx = px[base + k * inner]; arg = k; }
        if (kind == 2) { for (int64_t k = 0; k < len; ++k) po[base + k * inner] = k == arg ? T(1) : T(0); continue; }
        double sum = 0;
        for (int64_t k = 0; k < len; ++k) sum += std::exp(px[base + k * inner] - mx);
        for (int64_t k = 0; k < len; ++k) {
          double v = px[base + k * inner] - mx;
          po[base + k * inner] = static_cast<T>(kind == 1 ? v - std::log(sum) : std::exp(v) / sum);
        }
      }
  });
  c.outputs[0] = std::move(out);
}

void argExtreme(KernelContext &c, bool isMax) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", 0), x.rank());
  bool keep = c.node.getInt("keepdims", 1), last = c.node.getInt("select_last_index", 0);
  int64_t outer = 1, len = x.dim(axis), inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  auto shape = x.shape();
  if (keep) shape[axis] = 1; else shape.erase(shape.begin() + axis);
  Tensor out(DType::Int64, shape);
  HP_DISPATCH_NUMERIC(x.dtype(), {
    const T *px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        int64_t best = 0;
        for (int64_t k = 1; k < len; ++k) {
          T v = px[(o * len + k) * inner + in], b = px[(o * len + best) * inner + in];
          if (isMax ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = k;
        }
        out.data<int64_t>()[o * inner + in] = best;
      }
  });
  c.outputs[0] = std::move(out);
}

void topk(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", -1), x.rank());
  if (x.rank() < 1) throw std::runtime_error("TopK input must have rank >= 1");
  if (c.opset >= 10 && c.in(1).numel() != 1) throw std::runtime_error("TopK's K must hold one value, it is " + c.in(1).describe());
  int64_t k = c.opset < 10 ? c.node.getInt("k", 1) : c.in(1).toInt64Vector()[0];
  if (k < 0 || k > x.dim(axis))
    throw std::runtime_error("TopK's K " + std::to_string(k) + " is not in [0, " + std::to_string(x.dim(axis)) +
                             "] (axis " + std::to_string(axis) + " of " + x.describe() + ")");
  bool largest = c.node.getInt("largest", 1), sorted = c.node.getInt("sorted", 1);
  (void)sorted;
  int64_t outer = 1, len = x.dim(axis), inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  auto shape = x.shape(); shape[axis] = k;
  Tensor vals(x.dtype(), shape), inds(DType::Int64, shape);
  HP_DISPATCH_NUMERIC(x.dtype(), {
    const T *px = x.data<T>();
    std::vector<int64_t> order(len);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        auto at = [&](int64_t j) { return px[(o * len + j) * inner + in]; };
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return largest ? at(a) > at(b) : at(a) < at(b); });
        for (int64_t j = 0; j < k; ++j) {
          vals.data<T>()[(o * k + j) * inner + in] = at(order[j]);
          inds.data<int64_t>()[(o * k + j) * inner + in] = order[j];
        }
      }
  });
  c.outputs[0] = std::move(vals);
  if (c.numOutputs() > 1) c.outputs[1] = std::move(inds);
}

void cumsum(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.in(1).toInt64Vector()[0], x.rank());
  bool exclusive = c.node.getInt("exclusive", 0), reverse = c.node.getInt("reverse", 0);
  int64_t outer = 1, len = x.dim(axis), inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  Tensor out(x.dtype(), x.shape());
  HP_DISPATCH_NUMERIC(x.dtype(), {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        T acc = 0;
        for (int64_t j = 0; j < len; ++j) {
          int64_t k = reverse ? len - 1 - j : j, i = (o * len + k) * inner + in;
          if (exclusive) { out.data<T>()[i] = acc; acc += x.data<T>()[i]; }
          else { acc += x.data<T>()[i]; out.data<T>()[i] = acc; }
        }
      }
  });
  c.outputs[0] = std::move(out);
}

void trilu(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t k = c.hasInput(1) ? c.in(1).toInt64Vector()[0] : 0;
  bool upper = c.node.getInt("upper", 1);
  Tensor out = x.clone();
  int64_t R = x.dim(-2), C = x.dim(-1), B = R * C ? x.numel() / (R * C) : 0;
  size_t es = dtypeSize(x.dtype());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j)
        if (upper ? (j - i < k) : (j - i > k)) std::memset(static_cast<char *>(out.raw()) + ((b * R + i) * C + j) * es, 0, es);
  c.outputs[0] = std::move(out);
}

/// floor(length * scale) for a finite, positive scale (else a one-line error).
int64_t resizedLength(int64_t length, double scale, int64_t axis) {
  double v = std::floor(double(length) * scale);
  if (!(scale > 0) || !std::isfinite(scale) || !(v < 9.0e15))
    throw std::runtime_error("Resize scale " + std::to_string(scale) + " for axis " + std::to_string(axis) +
                             " must be finite and positive");
  return static_cast<int64_t>(v);
}

void resize(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  std::string mode = c.node.getString("mode", "nearest");
  std::string ctm = c.node.getString("coordinate_transformation_mode", "half_pixel");
  std::string nearestMode = c.node.getString("nearest_mode", "round_prefer_floor");
  std::vector<double> scales(r, 1.0);
  std::vector<int64_t> outShape = x.shape();
  bool upsample = c.node.opType == "Upsample", sizesGiven = false;
  if (upsample) {
    ctm = "asymmetric"; nearestMode = "floor";
    std::vector<float> s = c.opset < 9 ? c.node.getFloats("scales") : std::vector<float>{};
    if (c.opset >= 9) { Tensor st = castTensor(c.in(1), DType::Float32); s.assign(st.data<float>(), st.data<float>() + st.numel()); }
    if (static_cast<int64_t>(s.size()) != r)
      throw std::runtime_error("Upsample has " + std::to_string(s.size()) + " scales for " + x.describe());
    for (int64_t i = 0; i < r; ++i) { scales[i] = s[i]; outShape[i] = resizedLength(x.dim(i), s[i], i); }
  } else {
    size_t scalesIdx = c.opset >= 11 ? 2 : 1, sizesIdx = 3;
    if (c.hasInput(sizesIdx) && c.in(sizesIdx).numel() > 0) {
      sizesGiven = true;
      auto sz = c.in(sizesIdx).toInt64Vector();
      if (static_cast<int64_t>(sz.size()) != r)
        throw std::runtime_error("Resize has " + std::to_string(sz.size()) + " sizes for " + x.describe());
      for (int64_t i = 0; i < r; ++i) { outShape[i] = sz[i]; scales[i] = double(sz[i]) / x.dim(i); }
    } else if (c.hasInput(scalesIdx) && c.in(scalesIdx).numel() > 0) {
      Tensor st = castTensor(c.in(scalesIdx), DType::Float32);
      if (st.numel() != r) throw std::runtime_error("Resize has " + std::to_string(st.numel()) + " scales for " + x.describe());
      for (int64_t i = 0; i < r; ++i) { scales[i] = st.data<float>()[i]; outShape[i] = resizedLength(x.dim(i), scales[i], i); }
    }
  }
  // Scales finite and positive, sizes representable, and no output index
  // that would read an empty input dim.
  for (int64_t d = 0; d < r; ++d) {
    if (!sizesGiven && (!(scales[d] > 0) || !std::isfinite(scales[d]) || double(x.dim(d)) * scales[d] > 9.0e15))
      throw std::runtime_error("Resize scale " + std::to_string(scales[d]) + " for axis " + std::to_string(d) +
                               " must be finite and positive");
    if (outShape[d] < 0 || (outShape[d] > 0 && x.dim(d) == 0))
      throw std::runtime_error("Resize cannot make axis " + std::to_string(d) + " of " + x.describe() + " " +
                               std::to_string(outShape[d]) + " long");
  }
  if (mode == "linear" && ctm == "half_pixel" && c.opset < 11 && !upsample) ctm = "asymmetric";
  // The resized length as ONNX's reference defines it: scale * length, not
  // necessarily an integer (it matters to align_corners, pytorch_half_pixel
  // and tf_crop_and_resize); the given size when sizes are given.
  std::vector<double> outLen(r);
  for (int64_t d = 0; d < r; ++d) outLen[d] = sizesGiven ? double(outShape[d]) : scales[d] * double(x.dim(d));
  const bool crop = ctm == "tf_crop_and_resize";
  std::vector<double> roi;
  if (crop) {
    if (c.hasInput(1) && c.in(1).numel() == 2 * r) {
      Tensor rt = castTensor(c.in(1), DType::Float64);
      roi.assign(rt.data<double>(), rt.data<double>() + 2 * r);
    } else {
      roi.assign(2 * r, 0.0);
      for (int64_t d = 0; d < r; ++d) roi[r + d] = 1.0;
    }
  }
  auto src = [&](int64_t d, int64_t o) -> double {
    double s = scales[d], L = outLen[d], in = double(x.dim(d));
    if (ctm == "asymmetric") return o / s;
    if (ctm == "tf_half_pixel_for_nn") return (o + 0.5) / s;
    if (ctm == "align_corners") return L == 1 ? 0.0 : o * (in - 1) / (L - 1);
    if (ctm == "pytorch_half_pixel") return L == 1 ? -0.5 : (o + 0.5) / s - 0.5;
    if (crop) {
      double a = roi[d], b = roi[r + d];
      return (L == 1 ? (b - a) * (in - 1) / 2 : o * (b - a) * (in - 1) / (L - 1)) + a * (in - 1);
    }
    return (o + 0.5) / s - 0.5; // half_pixel
  };
  Tensor out(x.dtype(), outShape);
  auto sx = stridesOf(x.shape());
  // Per-dim tables, computed once (the coordinate transformation and the
  // rounding as ONNX defines them, in double): nearest, the source index of
  // each output index; linear, the two neighbours and the fraction; cubic,
  // four taps and their weights. tf_crop_and_resize: which output indices
  // fall outside the input (extrapolation_value there).
  const bool nearest = mode == "nearest", cubic = mode == "cubic";
  std::vector<std::vector<int64_t>> lo(r), hi(r);
  std::vector<std::vector<double>> fr(r);
  std::vector<std::vector<char>> outside(r);
  std::vector<std::vector<std::array<int64_t, 4>>> ctap(r);
  std::vector<std::vector<std::array<double, 4>>> cw(r);
  const double A = c.node.getFloat("cubic_coeff_a", -0.75f);
  const bool excludeOutside = c.node.getInt("exclude_outside", 0) != 0;
  const double extrapolation = c.node.getFloat("extrapolation_value", 0.0f);
  for (int64_t d = 0; d < r; ++d) {
    if (crop) outside[d].assign(outShape[d], 0);
    if (cubic) {
      ctap[d].resize(outShape[d]), cw[d].resize(outShape[d]);
    } else {
      lo[d].resize(outShape[d]);
      if (!nearest) hi[d].resize(outShape[d]), fr[d].resize(outShape[d]);
    }
    for (int64_t o = 0; o < outShape[d]; ++o) {
      if (crop) {
        double p = src(d, o);
        if (p < 0 || p > x.dim(d) - 1) outside[d][o] = 1;
      }
      if (cubic) {
        // Keys' cubic convolution over the four inputs nearest p (ties to
        // the lower ones): ceil(p)-2 .. ceil(p)+1, t = p - (ceil(p)-1) in
        // (0, 1]; edge-padded, or with exclude_outside the weights of
        // outside taps dropped and the rest renormalized.
        double p = src(d, o);
        int64_t base = (int64_t)std::ceil(p) - 2;
        double t = p - double(base + 1);
        std::array<double, 4> w = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                                   ((A + 2) * t - (A + 3)) * t * t + 1,
                                   ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
                                   ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A};
        if (excludeOutside) {
          double sum = 0;
          for (int k = 0; k < 4; ++k) {
            int64_t i = base + k;
            if (i < 0 || i >= x.dim(d)) w[k] = 0;
            sum += w[k];
          }
          for (int k = 0; k < 4; ++k) w[k] = sum != 0 ? w[k] / sum : 0;
        }
        for (int k = 0; k < 4; ++k) {
          ctap[d][o][k] = std::clamp<int64_t>(base + k, 0, x.dim(d) - 1) * sx[d];
          cw[d][o][k] = w[k];
        }
      } else if (nearest) {
        double p = src(d, o);
        int64_t q;
        if (nearestMode == "floor") q = (int64_t)std::floor(p);
        else if (nearestMode == "ceil") q = (int64_t)std::ceil(p);
        else if (nearestMode == "round_prefer_ceil") q = (int64_t)std::floor(p + 0.5);
        else q = (p - std::floor(p) == 0.5) ? (int64_t)std::floor(p) : (int64_t)std::round(p);
        lo[d][o] = std::clamp<int64_t>(q, 0, x.dim(d) - 1) * sx[d];
      } else {
        double p = x.dim(d) == outShape[d] && scales[d] == 1.0 && !crop ? o : src(d, o);
        p = std::clamp<double>(p, 0, x.dim(d) - 1);
        int64_t l = (int64_t)std::floor(p);
        lo[d][o] = l * sx[d];
        hi[d][o] = std::min(l + 1, x.dim(d) - 1) * sx[d];
        fr[d][o] = p - l;
      }
    }
  }
  if (cubic || crop) {
    // Cubic (and tf_crop_and_resize in any mode): output rows in parallel;
    // the leading dims give up to 4^(r-1) weighted source rows (zero
    // weights dropped), the last dim its four taps.
    int64_t W = r ? outShape[r - 1] : 1, rows = W ? out.numel() / W : 0;
    HP_DISPATCH_FLOAT(x.dtype(), {
      const T *px = x.data<T>();
      T *po = out.data<T>();
      parallelFor(rows, std::max<int64_t>(1, 1024 / std::max<int64_t>(1, W)), [&](int64_t rlo, int64_t rhi) {
        std::vector<int64_t> idx(r > 0 ? r - 1 : 0);
        std::vector<std::pair<int64_t, double>> corners, next;
        auto taps = [&](int64_t d, int64_t o, auto &&emit) {
          if (cubic) {
            for (int k = 0; k < 4; ++k) emit(ctap[d][o][k], cw[d][o][k]);
          } else if (nearest) {
            emit(lo[d][o], 1.0);
          } else {
            emit(lo[d][o], 1 - fr[d][o]);
            emit(hi[d][o], fr[d][o]);
          }
        };
        for (int64_t row = rlo; row < rhi; ++row) {
          int64_t f = row;
          for (int64_t d = r - 2; d >= 0; --d) { idx[d] = f % outShape[d]; f /= outShape[d]; }
          T *dst = po + row * W;
          if (r == 0) { dst[0] = px[0]; continue; }
          bool rowOutside = false;
          for (int64_t d = 0; d + 1 < r; ++d) rowOutside = rowOutside || (crop && outside[d][idx[d]]);
          if (rowOutside) {
            for (int64_t j = 0; j < W; ++j) dst[j] = static_cast<T>(extrapolation);
            continue;
          }
          corners.assign(1, {0, 1.0});
          for (int64_t d = 0; d + 1 < r; ++d) {
            next.clear();
            for (const auto &corner : corners) // (no structured binding: clang < 16 cannot capture one)
              taps(d, idx[d], [&, off = corner.first, wgt = corner.second](int64_t toff, double tw) {
                if (wgt * tw != 0) next.push_back({off + toff, wgt * tw});
              });
            corners.swap(next);
          }
          for (int64_t j = 0; j < W; ++j) {
            if (crop && outside[r - 1][j]) { dst[j] = static_cast<T>(extrapolation); continue; }
            double acc = 0;
            for (const auto &corner : corners)
              taps(r - 1, j, [&, off = corner.first, wgt = corner.second](int64_t toff, double tw) {
                acc += wgt * tw * double(px[off + toff]);
              });
            dst[j] = static_cast<T>(acc);
          }
        }
      });
    });
    c.outputs[0] = std::move(out);
    return;
  }
  // Output rows (every dim but the last) in parallel; within a row, the
  // leading dims give a base offset (nearest) or up to 2^(r-1) weighted
  // source rows (linear, zero weights dropped), the last dim its table.
  int64_t W = r ? outShape[r - 1] : 1, rows = W ? out.numel() / W : 0;
  // Quantized (int8/uint8) images round and saturate; floats store as is.
  auto body = [&](auto tag) {
    using T = decltype(tag);
    auto store = [](double v) -> T {
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(std::clamp<double>(std::nearbyint(v), std::numeric_limits<T>::lowest(),
                                                 std::numeric_limits<T>::max()));
      else
        return static_cast<T>(v);
    };
    const T *px = x.data<T>();
    T *po = out.data<T>();
    parallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, W)), [&](int64_t rlo, int64_t rhi) {
      std::vector<int64_t> idx(r > 0 ? r - 1 : 0);
      std::vector<std::pair<int64_t, double>> corners, next;
      for (int64_t row = rlo; row < rhi; ++row) {
        int64_t f = row;
        for (int64_t d = r - 2; d >= 0; --d) { idx[d] = f % outShape[d]; f /= outShape[d]; }
        T *dst = po + row * W;
        if (r == 0) { dst[0] = px[0]; continue; }
        if (nearest) {
          int64_t base = 0;
          for (int64_t d = 0; d + 1 < r; ++d) base += lo[d][idx[d]];
          const int64_t *tab = lo[r - 1].data();
          for (int64_t j = 0; j < W; ++j) dst[j] = px[base + tab[j]];
          continue;
        }
        corners.assign(1, {0, 1.0});
        for (int64_t d = 0; d + 1 < r; ++d) {
          double fd = fr[d][idx[d]];
          next.clear();
          for (auto [off, wgt] : corners) {
            if (wgt * (1 - fd) != 0) next.push_back({off + lo[d][idx[d]], wgt * (1 - fd)});
            if (wgt * fd != 0) next.push_back({off + hi[d][idx[d]], wgt * fd});
          }
          corners.swap(next);
        }
        const int64_t *tl = lo[r - 1].data(), *th = hi[r - 1].data();
        const double *tf = fr[r - 1].data();
        if (corners.size() == 1) {
          const T *s0 = px + corners[0].first;
          double w0 = corners[0].second;
          for (int64_t j = 0; j < W; ++j) {
            double a = s0[tl[j]], b = s0[th[j]];
            dst[j] = store(w0 * ((1 - tf[j]) * a + tf[j] * b));
          }
        } else if (corners.size() == 2) {
          const T *s0 = px + corners[0].first, *s1 = px + corners[1].first;
          double w0 = corners[0].second, w1 = corners[1].second;
          for (int64_t j = 0; j < W; ++j) {
            double f1 = tf[j], f0 = 1 - f1;
            dst[j] = store(w0 * (f0 * s0[tl[j]] + f1 * s0[th[j]]) + w1 * (f0 * s1[tl[j]] + f1 * s1[th[j]]));
          }
        } else {
          for (int64_t j = 0; j < W; ++j) {
            double f1 = tf[j], f0 = 1 - f1, acc = 0;
            for (auto [off, wgt] : corners) acc += wgt * (f0 * px[off + tl[j]] + f1 * px[off + th[j]]);
            dst[j] = store(acc);
          }
        }
      }
    });
  };
  switch (x.dtype()) {
  case DType::Float32: body(float()); break;
  case DType::Float64: body(double()); break;
  case DType::UInt8: body(uint8_t()); break;
  case DType::Int8: body(int8_t()); break;
  default: throw std::runtime_error(std::string("Resize of ") + dtypeName(x.dtype()) + " is not supported");
  }
  c.outputs[0] = std::move(out);
}

std::string resizeCheck(const CheckContext &c) {
  std::string mode = c.node.getString("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") return "Resize mode '" + mode + "' is not supported";
  std::string ctm = c.node.getString("coordinate_transformation_mode", "half_pixel");
  if (ctm != "half_pixel" && ctm != "asymmetric" && ctm != "align_corners" && ctm != "pytorch_half_pixel" &&
      ctm != "tf_crop_and_resize" && ctm != "tf_half_pixel_for_nn")
    return "coordinate_transformation_mode '" + ctm + "' is not supported";
  if (ctm == "tf_crop_and_resize" && c.opset < 11) return "tf_crop_and_resize needs the roi input (opset 11+)";
  if (c.node.has("antialias") && c.node.getInt("antialias", 0)) return "antialias is not supported";
  if (c.node.has("axes")) return "Resize axes are not supported";
  if (c.node.getString("keep_aspect_ratio_policy", "stretch") != "stretch") return "keep_aspect_ratio_policy is not supported";
  return "";
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

void registerRecurrentKernels(); // Recurrent.cpp (RNN, GRU, LSTM)

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
  registerKernel("Gather", {gather, nullptr, {}});
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
  const std::pair<const char *, Red> reds[] = {{"ReduceSum", Red::Sum}, {"ReduceMean", Red::Mean}, {"ReduceMax", Red::Max},
                                               {"ReduceMin", Red::Min}, {"ReduceProd", Red::Prod}, {"ReduceL1", Red::L1},
                                               {"ReduceL2", Red::L2}, {"ReduceLogSum", Red::LogSum},
                                               {"ReduceLogSumExp", Red::LogSumExp}, {"ReduceSumSquare", Red::SumSquare}};
  for (auto [name, kind] : reds) registerKernel(name, {[kind = kind](KernelContext &c) { reduce(c, kind); }, nullptr, kNumericTypes});
  registerKernel("Softmax", {[](KernelContext &c) { softmax(c, 0); }, nullptr, kFloatTypes});
  registerKernel("LogSoftmax", {[](KernelContext &c) { softmax(c, 1); }, nullptr, kFloatTypes});
  registerKernel("Hardmax", {[](KernelContext &c) { softmax(c, 2); }, nullptr, kFloatTypes});
  registerKernel("ArgMax", {[](KernelContext &c) { argExtreme(c, true); }, nullptr, kNumericTypes});
  registerKernel("ArgMin", {[](KernelContext &c) { argExtreme(c, false); }, nullptr, kNumericTypes});
  registerKernel("TopK", {topk, nullptr, kNumericTypes});
  registerKernel("CumSum", {cumsum, nullptr, kNumericTypes});
  registerKernel("Trilu", {trilu, nullptr, {}});
  registerKernel("Resize", {resize, resizeCheck, {DType::Float32, DType::Float64, DType::UInt8, DType::Int8}, HalfPolicy::Upcast});
  registerKernel("Upsample", {resize, resizeCheck, kFloatTypes});
  registerKernel("DepthToSpace", {[](KernelContext &c) { depthSpace(c, true); }, nullptr, {}});
  registerKernel("SpaceToDepth", {[](KernelContext &c) { depthSpace(c, false); }, nullptr, {}});
}

} // namespace hetplan::runtime::cpu
