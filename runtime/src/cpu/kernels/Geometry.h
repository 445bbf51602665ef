//===- Geometry.h - shapes of MatMul and of conv/pool windows ---*- C++ -*-===//
//
// One reading of ONNX's MatMul broadcasting and of Conv/pooling window
// attributes (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode),
// shared by the CPU kernels, their backward kernels and the CUDA executor.
//
//===----------------------------------------------------------------------===//
#pragma once
#include "hetplan/runtime/Model.h"

#include <stdexcept>
#include <utility>
#include <vector>

namespace hetplan::runtime::cpu {

/// numpy matmul of shapes `a` and `b`: 1-D operands promoted (and their
/// dim dropped from `out`), batch dims broadcast. Throws on a mismatch.
struct MatMulShape {
  bool aVec = false, bVec = false;
  int64_t M = 0, K = 0, N = 0;
  std::vector<int64_t> aBatch, bBatch, batch, out;
};
MatMulShape matmulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b); // MatMul.cpp

/// The offsets (in whole matrices) into A and B of batch position `i` of
/// `batch`, given their broadcast strides over it (one GEMM per position).
inline std::pair<int64_t, int64_t> batchOffsets(int64_t i, const std::vector<int64_t> &batch,
                                                const std::vector<int64_t> &stA, const std::vector<int64_t> &stB) {
  int64_t rem = i, oa = 0, ob = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    int64_t x = rem % batch[d];
    rem /= batch[d];
    oa += x * stA[d];
    ob += x * stB[d];
  }
  return {oa, ob};
}

/// Geometry of a convolution or pooling window over the spatial dims.
struct Window {
  std::vector<int64_t> in, kernel, stride, dil, padBegin, padEnd, out;
};
/// The window of node `n` over `inSpatial` with `kernel` (auto_pad
/// resolved; `pool`: ceil_mode applies). Throws when the attributes do not
/// match the spatial rank.
Window makeWindow(const Node &n, const std::vector<int64_t> &inSpatial, std::vector<int64_t> kernel, bool pool);

/// The spatial dims of an [N, C, spatial...] tensor; throws below rank 2.
inline std::vector<int64_t> spatialOf(const Tensor &t) {
  if (t.rank() < 2) throw std::runtime_error("input " + t.describe() + " is not [N, C, spatial...]");
  return std::vector<int64_t>(t.shape().begin() + 2, t.shape().end());
}

/// The shapes a Conv (or, with `transpose`, a ConvTranspose) kernel indexes
/// with, checked before it does: x is [N, C, spatial...] with at least one
/// spatial dim, w has x's rank and element type, group divides the
/// channels, w's channel dims fit, `kernel` equals w's spatial dims, and a
/// bias (when given) holds one value per output channel. `op` names the op.
void checkConvOperands(const char *op, const Tensor &x, const Tensor &w, int64_t group,
                       const std::vector<int64_t> &kernel, bool transpose, const Tensor *bias);

} // namespace hetplan::runtime::cpu
