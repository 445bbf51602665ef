//===- ReduceOps.cpp - reductions, arg-extremes, top-k, cumsum, trilu ----===//
//
// Registered by registerTensorKernels (TensorOps.cpp), at the place these
// kernels always had in its list.
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"
#include "ViewParams.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

namespace hetplan::runtime::cpu {
namespace {

/// A double accumulator as an element of T. Integer types saturate (an
/// empty ReduceMax is -inf, a product can overflow; converting either is
/// undefined behaviour) and NaN becomes 0.
template <typename T> T toElement(double a) {
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(a))
      return T(0);
    if (a <= double(std::numeric_limits<T>::lowest()))
      return std::numeric_limits<T>::lowest();
    if (a >= double(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
  }
  return static_cast<T>(a);
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
      out.data<T>()[i] = toElement<T>(a);
    }
    c.outputs[0] = std::move(out);
  });
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
  int64_t k = 0;
  if (c.hasInput(1)) {
    std::vector<int64_t> kv = c.in(1).toInt64Vector();
    if (kv.size() != 1)
      throw std::runtime_error("Trilu: k must be one value, not " + c.in(1).describe());
    k = kv[0];
  }
  bool upper = c.node.getInt("upper", 1);
  Tensor out = x.clone();
  if (x.numel() == 0) { // (its other dims may be huge: R * C below would overflow)
    c.outputs[0] = std::move(out);
    return;
  }
  int64_t R = x.dim(-2), C = x.dim(-1), B = R * C ? x.numel() / (R * C) : 0;
  size_t es = dtypeSize(x.dtype());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j)
        if (upper ? (j - i < k) : (j - i > k)) std::memset(static_cast<char *>(out.raw()) + ((b * R + i) * C + j) * es, 0, es);
  c.outputs[0] = std::move(out);
}

} // namespace

void registerReductionKernels() {
  const std::pair<const char *, Red> reds[] = {{"ReduceSum", Red::Sum}, {"ReduceMean", Red::Mean}, {"ReduceMax", Red::Max},
                                               {"ReduceMin", Red::Min}, {"ReduceProd", Red::Prod}, {"ReduceL1", Red::L1},
                                               {"ReduceL2", Red::L2}, {"ReduceLogSum", Red::LogSum},
                                               {"ReduceLogSumExp", Red::LogSumExp}, {"ReduceSumSquare", Red::SumSquare}};
  for (auto [name, kind] : reds) registerKernel(name, {[kind = kind](KernelContext &c) { reduce(c, kind); }, nullptr, kNumericTypes});
  registerKernel("ArgMax", {[](KernelContext &c) { argExtreme(c, true); }, nullptr, kNumericTypes});
  registerKernel("ArgMin", {[](KernelContext &c) { argExtreme(c, false); }, nullptr, kNumericTypes});
  registerKernel("TopK", {topk, nullptr, kNumericTypes});
  registerKernel("CumSum", {cumsum, nullptr, kNumericTypes});
  registerKernel("Trilu", {trilu, nullptr, {}});
}

} // namespace hetplan::runtime::cpu
