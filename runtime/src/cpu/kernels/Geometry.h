//===- Geometry.h - shapes of MatMul and of conv/pool windows ---*- C++ -*-===//
//
// One reading of ONNX's MatMul broadcasting and of Conv/pooling window
// attributes (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode),
// shared by the CPU kernels, their backward kernels and the CUDA executor.
//
//===----------------------------------------------------------------------===//
#pragma once
#include "hetplan/runtime/Model.h"

#include <vector>

namespace hetplan::runtime::cpu {

/// numpy matmul of shapes `a` and `b`: 1-D operands promoted (and their
/// dim dropped from `out`), batch dims broadcast. Throws on a mismatch.
struct MatMulShape {
  bool aVec = false, bVec = false;
  int64_t M = 0, K = 0, N = 0;
  std::vector<int64_t> aBatch, bBatch, batch, out;
};
MatMulShape matmulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b);

/// Geometry of a convolution or pooling window over the spatial dims.
struct Window {
  std::vector<int64_t> in, kernel, stride, dil, padBegin, padEnd, out;
};
/// The window of node `n` over `inSpatial` with `kernel` (auto_pad
/// resolved; `pool`: ceil_mode applies). Throws when the attributes do not
/// match the spatial rank.
Window makeWindow(const Node &n, const std::vector<int64_t> &inSpatial, std::vector<int64_t> kernel, bool pool);

/// The spatial dims of an [N, C, spatial...] tensor.
inline std::vector<int64_t> spatialOf(const Tensor &t) {
  return std::vector<int64_t>(t.shape().begin() + 2, t.shape().end());
}

} // namespace hetplan::runtime::cpu
