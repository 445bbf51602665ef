//===- WindowGeo.h - the window of a Conv/pooling backward ------*- C++ -*-===//
//
// The window geometry (auto_pad, pads, strides, dilations, ceil_mode) as the
// forward kernels compute it (cpu/kernels/Geometry.h), with 1-D / 2-D / 3-D
// spatial inputs handled as 3-D with leading size-1 dims. Shared by the
// backward of Conv (cpu/kernels/Conv.cpp) and of pooling (cpu/kernels/Linalg.cpp).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "GradUtil.h"
#include "../cpu/kernels/Geometry.h"

namespace hetplan::runtime::train {


/// Conv / pooling window over the spatial dims, padded to 3-D (leading dims
/// of size 1, kernel 1, stride 1, no padding).
struct Geo {
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
  int64_t inSize, kSize, outSize;
};

/// The forward kernels' window (Geometry.h), padded to 3-D.
inline Geo makeGeo(const Node &n, const std::vector<int64_t> &inSpatial, std::vector<int64_t> kernel, bool pool) {
  size_t r = inSpatial.size();
  if (r < 1 || r > 3)
    throw std::runtime_error(n.describe() + ": backward supports 1-D, 2-D and 3-D spatial inputs, not " +
                             std::to_string(r) + "-D");
  cpu::Window w = cpu::makeWindow(n, inSpatial, std::move(kernel), pool);
  Geo g;
  size_t off = 3 - r;
  for (size_t i = 0; i < 3; ++i) {
    g.in[i] = g.k[i] = g.s[i] = g.d[i] = g.out[i] = 1;
    g.pb[i] = g.pe[i] = 0;
  }
  for (size_t i = 0; i < r; ++i) {
    size_t j = off + i;
    g.in[j] = w.in[i]; g.k[j] = w.kernel[i]; g.s[j] = w.stride[i]; g.d[j] = w.dil[i];
    g.pb[j] = w.padBegin[i]; g.pe[j] = w.padEnd[i]; g.out[j] = w.out[i];
  }
  g.inSize = g.in[0] * g.in[1] * g.in[2];
  g.kSize = g.k[0] * g.k[1] * g.k[2];
  g.outSize = g.out[0] * g.out[1] * g.out[2];
  return g;
}

inline void checkOutShape(const GradientContext &c, const Tensor &dy, const Geo &g, int64_t N, int64_t C) {
  bool ok = dy.rank() >= 3 && dy.dim(0) == N && dy.dim(1) == C && dy.numel() == N * C * g.outSize;
  if (!ok)
    throw std::runtime_error(c.node.describe() + ": backward: gradient " + dy.describe() +
                             " does not match the output geometry");
}

} // namespace hetplan::runtime::train
