//===- Gather.cpp - Gather: forward, backward -----------------------------===//
//
// Rows of the data along `axis`, picked by index (negative indices count from
// the end), copied as bytes (any element type); backward adds each row of dY
// back to the row it came from (float types).
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"
#include "OpKernels.h"
#include "../../train/GradUtil.h"

#include <cstring>

namespace hetplan::runtime::cpu {
namespace {

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

} // namespace

void registerGatherKernels() { registerKernel("Gather", {gather, nullptr, {}}); }

} // namespace hetplan::runtime::cpu

namespace hetplan::runtime::train {
namespace {

// Gather along `axis`: rows of dY are added back to the rows they came from.
void gatherGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", 0), x.rank());
  auto idx = c.in(1).toInt64Vector();
  int64_t outer, inner, d = x.dim(axis), n = static_cast<int64_t>(idx.size());
  aroundAxis(x.shape(), axis, outer, inner);
  for (auto &k : idx) {
    int64_t v = k < 0 ? k + d : k;
    if (v < 0 || v >= d) throw std::runtime_error("Gather index " + std::to_string(k) + " out of range");
    k = v;
  }
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *pg = dy.data<T>();
    T *pd = dx.data<T>();
    // threads own column ranges of a row, so repeated indices never race
    int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(outer * n, 1));
    parallelFor(inner, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n; ++j) {
          const T *src = pg + (o * n + j) * inner;
          T *dst = pd + (o * d + idx[j]) * inner;
          for (int64_t e = lo; e < hi; ++e) dst[e] += src[e];
        }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

} // namespace

void registerGatherGradients() { registerGradient("Gather", {gatherGrad, nullptr, {1}}); }

} // namespace hetplan::runtime::train
