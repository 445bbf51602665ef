//===- TensorOpsGrad.cpp - backward of shape, data-movement, reductions ---===//
#include "GradUtil.h"
#include "../cpu/kernels/ViewParams.h"

#include <algorithm>
#include <numeric>

namespace hetplan::runtime::train {
namespace {

void transposeGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  std::vector<int64_t> perm = cpu::transposePerm(c.node, r);
  // dX[p] = dY[q] with q_i = p_perm[i]: X's dim perm[i] walks dY's dim i.
  auto sy = contiguousStrides(dy.shape());
  std::vector<int64_t> strides(r);
  for (int64_t i = 0; i < r; ++i) strides[perm[i]] = sy[i];
  c.inputGrads[0] = gatherStrided(dy, x.shape(), strides, 0);
}

void splitGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  if (!wants(c, 0)) return;
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", 0), x.rank());
  int64_t n = static_cast<int64_t>(c.node.outputs.size());
  std::vector<int64_t> parts = c.opset >= 13 ? (c.hasInput(1) ? c.in(1).toInt64Vector() : std::vector<int64_t>{})
                                             : c.node.getInts("split");
  if (parts.empty()) {
    int64_t each = (x.dim(axis) + n - 1) / n;
    for (int64_t i = 0; i < n; ++i) parts.push_back(std::min(each, x.dim(axis) - i * each));
  }
  int64_t outer, inner, D = x.dim(axis);
  aroundAxis(x.shape(), axis, outer, inner);
  Tensor dx(x.dtype(), x.shape()); // outputs without a gradient contribute zeros
  size_t es = dtypeSize(x.dtype());
  char *pd = static_cast<char *>(dx.raw());
  int64_t start = 0;
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(parts.size()); ++i) {
    Tensor g = outGrad(c, i, x.dtype());
    if (g.defined()) {
      int64_t row = parts[i] * inner * es;
      if (g.numel() != outer * parts[i] * inner)
        throw std::runtime_error(c.node.describe() + ": backward: gradient " + g.describe() + " for output " +
                                 std::to_string(i) + " does not match the split");
      const char *pg = static_cast<const char *>(g.raw());
      for (int64_t o = 0; o < outer; ++o) std::memcpy(pd + ((o * D + start) * inner) * es, pg + o * row, row);
    }
    start += parts[i];
  }
  c.inputGrads[0] = std::move(dx);
}

void concatGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  const Tensor *first = nullptr;
  for (size_t i = 0; i < c.inputs.size() && !first; ++i)
    if (c.hasInput(i)) first = &c.in(i);
  if (!first) return;
  Tensor dy = outGrad(c, 0, first->dtype());
  if (!dy.defined()) return;
  int64_t axis = normAxis(c.node.getInt("axis", 0), first->rank());
  int64_t outer, inner, D = dy.dim(axis);
  aroundAxis(dy.shape(), axis, outer, inner);
  size_t es = dtypeSize(dy.dtype());
  const char *pg = static_cast<const char *>(dy.raw());
  int64_t offset = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.hasInput(i)) continue;
    const Tensor &x = c.in(i);
    int64_t len = x.dim(axis);
    if (wants(c, i)) {
      Tensor g(x.dtype(), x.shape());
      char *p = static_cast<char *>(g.raw());
      int64_t row = len * inner * es;
      for (int64_t o = 0; o < outer; ++o) std::memcpy(p + o * row, pg + ((o * D + offset) * inner) * es, row);
      c.inputGrads[i] = std::move(g);
    }
    offset += len;
  }
}

void sliceGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  // the same view of X as the forward kernel takes
  cpu::SliceView v = cpu::sliceView(x.shape(), cpu::sliceArgs(c.node, c.opset, [&](size_t i) { return c.hasInput(i); },
                                                              [&](size_t i) -> const Tensor & { return c.in(i); }));
  const std::vector<int64_t> &shape = v.shape, &strides = v.strides;
  Tensor dx(x.dtype(), x.shape());
  int64_t n = shapeNumel(shape);
  if (n != dy.numel())
    throw std::runtime_error(c.node.describe() + ": backward: gradient " + dy.describe() + " does not match the slice");
  // scatter: every selected position is distinct (no step is 0)
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *pg = dy.data<T>();
    T *pd = dx.data<T>();
    std::vector<int64_t> idx(r, 0);
    int64_t off = v.base;
    for (int64_t i = 0; i < n; ++i) {
      pd[off] = pg[i];
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++idx[d] < shape[d]) { off += strides[d]; break; }
        off -= strides[d] * (shape[d] - 1); idx[d] = 0;
      }
    }
  });
  c.inputGrads[0] = std::move(dx);
}

void expandGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  c.inputGrads[0] = reduceGradToShape(dy, x.shape());
}

/// TopK: the values' gradient goes back to the positions the indices output
/// selected (along `axis`); the other inputs get none.
void topKGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0), &ind = c.out(1);
  int64_t axis = normAxis(c.node.getInt("axis", -1), x.rank());
  int64_t outer, inner, d = x.dim(axis), k = ind.dim(axis);
  aroundAxis(x.shape(), axis, outer, inner);
  auto idx = ind.toInt64Vector();
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *pg = dy.data<T>();
    T *pd = dx.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t e = 0; e < inner; ++e) {
          int64_t at = (o * k + j) * inner + e, v = idx[at];
          if (v < 0 || v >= d) throw std::runtime_error("TopK index " + std::to_string(v) + " out of range");
          pd[(o * d + v) * inner + e] += pg[at];
        }
  });
  c.inputGrads[0] = std::move(dx);
}

/// GatherND: each gathered slice's gradient adds back where it came from
/// (indices may repeat). batch_dims as in the forward (Indexing.cpp).
void gatherNDGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0), &it = c.in(1);
  int64_t b = c.node.getInt("batch_dims", 0), r = x.rank(), q = it.rank();
  int64_t k = it.dim(-1);
  if (q < 1 || b < 0 || b >= std::min(r, q) || k < 1 || k > r - b)
    throw std::runtime_error("GatherND: batch_dims/indices do not fit the data");
  int64_t batch = 1, slice = 1, outer = 1, perBatch = 1;
  for (int64_t d = 0; d < b; ++d) batch *= x.dim(d);
  for (int64_t d = b + k; d < r; ++d) slice *= x.dim(d);
  for (int64_t d = b; d < q - 1; ++d) outer *= it.dim(d);
  for (int64_t d = b; d < r; ++d) perBatch *= x.dim(d);
  std::vector<int64_t> st(k);
  for (int64_t t = k; t-- > 0;) st[t] = t == k - 1 ? slice : st[t + 1] * x.dim(b + t + 1);
  auto idx = it.toInt64Vector();
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *pg = dy.data<T>();
    T *pd = dx.data<T>();
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t j = 0; j < outer; ++j) {
        const int64_t *ix = idx.data() + (bi * outer + j) * k;
        int64_t off = bi * perBatch;
        for (int64_t t = 0; t < k; ++t) {
          int64_t dim = x.dim(b + t), v = ix[t] < 0 ? ix[t] + dim : ix[t];
          if (v < 0 || v >= dim) throw std::runtime_error("GatherND index " + std::to_string(ix[t]) + " out of range");
          off += v * st[t];
        }
        const T *src = pg + (bi * outer + j) * slice;
        for (int64_t e = 0; e < slice; ++e) pd[off + e] += src[e];
      }
  });
  c.inputGrads[0] = std::move(dx);
}

void tileGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  auto reps = c.in(1).toInt64Vector();
  // dY viewed as [r0, d0, r1, d1, ...]: sum over the repeats
  std::vector<int64_t> view, target;
  for (int64_t i = 0; i < x.rank(); ++i) {
    view.push_back(reps[i]); view.push_back(x.dim(i));
    target.push_back(1); target.push_back(x.dim(i));
  }
  c.inputGrads[0] = reduceGradToShape(dy.reshaped(view), target).reshaped(x.shape());
}

void reduceGrad(GradientContext &c, bool mean) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  bool axesAsInput = (!mean && c.opset >= 13) || c.opset >= 18;
  std::vector<int64_t> axes = axesAsInput ? (c.hasInput(1) ? c.in(1).toInt64Vector() : std::vector<int64_t>{})
                                          : c.node.getInts("axes");
  if (axes.empty() && c.node.getInt("noop_with_empty_axes", 0)) {
    c.inputGrads[0] = reshapedCopy(dy, x.shape());
    return;
  }
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes) red[normAxis(a, r)] = true;
  std::vector<int64_t> kept(r);
  for (int64_t i = 0; i < r; ++i) kept[i] = red[i] ? 1 : x.dim(i);
  Tensor g = broadcastTo(dy.reshaped(kept), x.shape());
  if (mean) {
    int64_t no = shapeNumel(kept);
    double k = no && x.numel() ? static_cast<double>(no) / static_cast<double>(x.numel()) : 0.0;
    HP_DISPATCH_FLOAT(g.dtype(), {
      T *p = g.data<T>();
      for (int64_t i = 0; i < g.numel(); ++i) p[i] = static_cast<T>(p[i] * k);
    });
  }
  c.inputGrads[0] = std::move(g);
}

} // namespace

void registerTensorGradients() {
  regPassThrough("Reshape", {1});
  regPassThrough("Flatten", {});
  regPassThrough("Squeeze", {1});
  regPassThrough("Unsqueeze", {1});
  registerGradient("Transpose", {transposeGrad, nullptr, {}});
  registerGradient("Split", {splitGrad, nullptr, {1}});
  registerGradient("Concat", {concatGrad, nullptr, {}});
  registerGradient("Slice", {sliceGrad, nullptr, {1, 2, 3, 4}});
  registerGradient("Expand", {expandGrad, nullptr, {1}});
  registerGradient("Tile", {tileGrad, nullptr, {1}});
  registerGradient("TopK", {topKGrad, nullptr, {1}});
  registerGradient("GatherND", {gatherNDGrad, nullptr, {1}});
  registerGradient("ReduceSum", {[](GradientContext &c) { reduceGrad(c, false); }, nullptr, {1}});
  registerGradient("ReduceMean", {[](GradientContext &c) { reduceGrad(c, true); }, nullptr, {1}});
}

} // namespace hetplan::runtime::train
