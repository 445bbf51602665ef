//===- GradUtil.h - helpers shared by the backward kernels ------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Gradients.h"
#include "../cpu/kernels/KernelUtil.h"

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime::train {

using cpu::kElementwiseGrain;
using cpu::normAxis;
using cpu::parallelFor;

// The backward-kernel registrations (Gradients.cpp calls them once). Most
// sit in the op's CPU kernel file, next to its forward kernel.
void registerElementwiseGradients();   // ElementwiseGrad.cpp (calls registerUnaryGradients)
void registerUnaryGradients();         // cpu/kernels/Unary.cpp
void registerMatMulGradients();        // cpu/kernels/MatMul.cpp
void registerNormalizationGradients(); // cpu/kernels/Normalization.cpp
void registerLinalgGradients();        // cpu/kernels/Linalg.cpp: pooling, BatchNormalization, LRN
void registerTensorGradients();        // TensorOpsGrad.cpp
void registerGatherGradients();        // cpu/kernels/Gather.cpp
void registerConvGradients();          // cpu/kernels/Conv.cpp

/// Registers an op whose backward is dX = dY reshaped to X's shape
/// (Identity, Reshape, Squeeze, ...); inputs in `nonDiff` get no gradient.
void regPassThrough(const std::string &name, std::vector<size_t> nonDiff,
                    std::function<std::string(const Node &, int64_t)> check = nullptr);

inline std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

/// The gradient of output `i` as element type `dt` (a cast copy when the
/// executor handed another float type); undefined when the output has none.
inline Tensor outGrad(const GradientContext &c, size_t i, DType dt) {
  if (!c.hasOutputGrad(i)) return Tensor();
  const Tensor &g = c.outputGrads[i];
  if (g.dtype() == dt) return g;
  return cpu::castTensor(g, dt);
}

/// Whether input i's gradient is wanted (and the input exists).
inline bool wants(const GradientContext &c, size_t i) {
  return i < c.wantGrad.size() && c.wantGrad[i] && c.hasInput(i);
}

/// The start of a backward that gives input 0 a gradient from output 0's:
/// sizes `c.inputGrads`, and returns dY as input 0's element type; undefined
/// (nothing to do) when input 0 wants no gradient or output 0 has none.
inline Tensor firstOutGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  if (!wants(c, 0)) return Tensor();
  return outGrad(c, 0, c.in(0).dtype());
}

/// A dense copy of the strided view of `src` (element offsets from `base`);
/// whole rows are copied when the innermost stride is 1.
inline Tensor gatherStrided(const Tensor &src, const std::vector<int64_t> &shape,
                            const std::vector<int64_t> &strides, int64_t base) {
  Tensor out(src.dtype(), shape);
  size_t es = dtypeSize(src.dtype());
  int64_t n = out.numel(), r = static_cast<int64_t>(shape.size());
  if (n == 0) return out;
  const char *ps = static_cast<const char *>(src.raw());
  char *po = static_cast<char *>(out.raw());
  int64_t inner = 1, rOuter = r;
  if (r > 0 && strides[r - 1] == 1) { inner = shape[r - 1]; rOuter = r - 1; }
  std::vector<int64_t> idx(rOuter, 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; i += inner) {
    std::memcpy(po + i * es, ps + off * es, inner * es);
    for (int64_t d = rOuter - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) { off += strides[d]; break; }
      off -= strides[d] * (shape[d] - 1); idx[d] = 0;
    }
  }
  return out;
}

/// Softmax/LogSoftmax's [outer, len, inner] view of a `shape` input: along
/// `axis`, or over the dims from `axis` on, coerced to 2-D, before opset 13.
inline void softmaxDims(const Node &n, int64_t opset, const std::vector<int64_t> &shape, int64_t &outer, int64_t &len,
                        int64_t &inner) {
  int64_t r = static_cast<int64_t>(shape.size());
  bool legacy = opset < 13;
  int64_t axis = normAxis(n.getInt("axis", legacy ? 1 : -1), r);
  outer = len = inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  if (legacy) {
    for (int64_t i = axis; i < r; ++i) len *= shape[i];
  } else {
    len = shape[axis];
    for (int64_t i = axis + 1; i < r; ++i) inner *= shape[i];
  }
}

/// `t` broadcast (numpy rules) to `shape`, as a dense owned tensor.
inline Tensor broadcastTo(const Tensor &t, const std::vector<int64_t> &shape) {
  if (t.shape() == shape) return t.clone();
  return gatherStrided(t, shape, broadcastStrides(t.shape(), shape), 0);
}

/// A dense owned copy of `t` with another shape (same element count).
inline Tensor reshapedCopy(const Tensor &t, const std::vector<int64_t> &shape) {
  return t.clone().reshaped(shape);
}

/// outer/inner sizes around `axis`.
inline void aroundAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (int64_t i = axis + 1; i < static_cast<int64_t>(shape.size()); ++i) inner *= shape[i];
}

} // namespace hetplan::runtime::train
