//===- Sampling.cpp - GridSample ------------------------------------------===//
//
// GridSample as ONNX defines it (opset 16: 4-D input, modes bilinear/
// nearest/bicubic; opset 20+: N-D, modes linear/nearest/cubic), following
// the reference implementation step by step:
//   - grid values (x, y[, z]: the last spatial dim first) are denormalized
//     in float32: align_corners ? (g + 1) / 2 * (len - 1)
//                               : ((g + 1) * len - 1) / 2;
//   - nearest rounds half to even (rint) first;
//   - a coordinate outside the border ([-0.5, len - 0.5], or [0, len - 1]
//     with align_corners) is clamped to [0, len - 1] (border) or reflected
//     into the border (reflection); zeros leaves it;
//   - each tap (1 for nearest, 2 linear, 4 cubic with Keys' A = -0.75) reads
//     the input through the padding again: zeros -> 0 outside, border ->
//     clamped index, reflection -> reflected index (truncated);
//   - the interpolation is separable: the product of the per-dim weights.
// Taps and weights are computed once per output point and reused for all
// channels; (batch, output point) ranges run in parallel.
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"

#include <array>
#include <cmath>

namespace hetplan::runtime::cpu {
namespace {

enum class GsMode { Nearest, Linear, Cubic };
enum class GsPad { Zeros, Border, Reflection };

// Reflects x by the nearer border until it lies within [lo, hi].
float gsReflect(float x, float lo, float hi) {
  float rng = hi - lo;
  if (!(rng > 0)) return lo;
  if (x < lo) {
    float dx = lo - x;
    int64_t n = static_cast<int64_t>(dx / rng);
    float r = dx - n * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    float dx = x - hi;
    int64_t n = static_cast<int64_t>(dx / rng);
    float r = dx - n * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

std::array<float, 4> gsCubic(float x) {
  const float A = -0.75f;
  x = std::fabs(x);
  return {((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A,
          ((A + 2) * x - (A + 3)) * x * x + 1,
          ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1,
          ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A};
}

bool gsParse(const Node &n, int64_t opset, GsMode &mode, GsPad &pad, std::string &why) {
  bool v20 = opset >= 20;
  std::string m = n.getString("mode", v20 ? "linear" : "bilinear");
  if (m == "nearest") mode = GsMode::Nearest;
  else if (m == (v20 ? "linear" : "bilinear")) mode = GsMode::Linear;
  else if (m == (v20 ? "cubic" : "bicubic")) mode = GsMode::Cubic;
  else {
    why = "GridSample mode '" + m + "' is not valid at opset " + std::to_string(opset);
    return false;
  }
  std::string p = n.getString("padding_mode", "zeros");
  if (p == "zeros") pad = GsPad::Zeros;
  else if (p == "border") pad = GsPad::Border;
  else if (p == "reflection") pad = GsPad::Reflection;
  else {
    why = "GridSample padding_mode '" + p + "' is not supported";
    return false;
  }
  return true;
}

void gridSample(KernelContext &c) {
  const Tensor &x = c.in(0);
  Tensor grid = c.in(1).dtype() == DType::Float32 ? c.in(1) : castTensor(c.in(1), DType::Float32);
  GsMode mode;
  GsPad pad;
  std::string why;
  if (!gsParse(c.node, c.opset, mode, pad, why)) throw std::runtime_error(why);
  const bool align = c.node.getInt("align_corners", 0) != 0;
  const int64_t R = x.rank() - 2;
  if (R < 1) throw std::runtime_error("GridSample input must have rank >= 3, got " + shapeString(x.shape()));
  if (c.opset < 20 && R != 2) throw std::runtime_error("GridSample before opset 20 takes a 4-D input, got " + shapeString(x.shape()));
  if (grid.rank() != R + 2 || grid.dim(0) != x.dim(0) || grid.dim(-1) != R)
    throw std::runtime_error("GridSample grid " + shapeString(grid.shape()) + " does not match input " + shapeString(x.shape()));
  const int64_t N = x.dim(0), C = x.dim(1);
  std::vector<int64_t> dims(x.shape().begin() + 2, x.shape().end());
  std::vector<int64_t> outShape = {N, C};
  outShape.insert(outShape.end(), grid.shape().begin() + 1, grid.shape().end() - 1);
  Tensor out(x.dtype(), outShape);
  int64_t P = 1; // output points per image
  for (int64_t d = 0; d < R; ++d) P *= grid.dim(1 + d);
  int64_t S = shapeNumel(dims); // input points per channel
  std::vector<int64_t> sx(R, 1);
  for (int64_t d = R - 1; d > 0; --d) sx[d - 1] = sx[d] * dims[d];
  const int K = mode == GsMode::Nearest ? 1 : mode == GsMode::Linear ? 2 : 4;
  if (out.numel() == 0) { c.outputs[0] = std::move(out); return; }
  const float *pg = grid.data<float>();
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>();
    T *po = out.data<T>();
    parallelFor(N * P, std::max<int64_t>(1, 1024 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
      // Per dim: K taps (element offset along that dim, weight; weight 0
      // for a zeros-padded tap).
      std::vector<std::array<int64_t, 4>> off(R);
      std::vector<std::array<double, 4>> wt(R);
      std::vector<int> k(R);
      for (int64_t np = lo; np < hi; ++np) {
        int64_t n = np / P, p = np % P;
        const float *g = pg + np * R;
        for (int64_t d = 0; d < R; ++d) {
          float len = static_cast<float>(dims[d]);
          float gv = g[R - 1 - d];
          float v = align ? (gv + 1) / 2.0f * (len - 1) : ((gv + 1) * len - 1) / 2.0f;
          if (mode == GsMode::Nearest) v = std::nearbyint(v);
          float bmin = align ? 0.0f : -0.5f, bmax = align ? len - 1 : len - 0.5f;
          if (v < bmin || v > bmax) {
            if (pad == GsPad::Border) v = std::clamp(v, 0.0f, len - 1);
            else if (pad == GsPad::Reflection) v = gsReflect(v, bmin, bmax);
          }
          std::array<int64_t, 4> idx{};
          std::array<float, 4> w{};
          if (mode == GsMode::Nearest) {
            idx[0] = static_cast<int64_t>(v);
            w[0] = 1;
          } else {
            int64_t x0 = static_cast<int64_t>(std::floor(v));
            float t = v - static_cast<float>(x0);
            if (mode == GsMode::Linear) {
              idx = {x0, x0 + 1, 0, 0};
              w = {1 - t, t, 0, 0};
            } else {
              idx = {x0 - 1, x0, x0 + 1, x0 + 2};
              w = gsCubic(t);
            }
          }
          for (int j = 0; j < K; ++j) {
            int64_t i = idx[j];
            double wj = w[j];
            if (pad == GsPad::Zeros) {
              if (i < 0 || i >= dims[d]) { wj = 0; i = 0; }
            } else if (pad == GsPad::Border) {
              i = std::clamp<int64_t>(i, 0, dims[d] - 1);
            } else {
              i = static_cast<int64_t>(gsReflect(static_cast<float>(i), bmin, bmax));
              i = std::clamp<int64_t>(i, 0, dims[d] - 1);
            }
            off[d][j] = i * sx[d];
            wt[d][j] = wj;
          }
        }
        for (int64_t ch = 0; ch < C; ++ch) {
          const T *src = px + (n * C + ch) * S;
          double acc = 0;
          // Every combination of one tap per dim (K^R of them).
          std::fill(k.begin(), k.end(), 0);
          while (true) {
            double w = 1;
            int64_t o = 0;
            for (int64_t d = 0; d < R; ++d) { w *= wt[d][k[d]]; o += off[d][k[d]]; }
            if (w != 0) acc += w * static_cast<double>(src[o]);
            int64_t d = R - 1;
            while (d >= 0 && ++k[d] == K) k[d--] = 0;
            if (d < 0) break;
          }
          po[(n * C + ch) * P + p] = static_cast<T>(acc);
        }
      }
    });
  });
  c.outputs[0] = std::move(out);
}

std::string gridSampleCheck(const CheckContext &c) {
  GsMode mode;
  GsPad pad;
  std::string why;
  if (!gsParse(c.node, c.opset, mode, pad, why)) return why;
  if (DType t = c.in(1); t != DType::Undefined && !isFloatType(t))
    return std::string("GridSample grid of element type ") + typeLabel(t) + " is not supported";
  return "";
}

} // namespace

void registerNumericsKernels(); // Numerics.cpp (Det, DFT, MeanVarianceNormalization)

void registerSamplingKernels() {
  registerKernel("GridSample", {gridSample, gridSampleCheck, kFloatTypes, HalfPolicy::Upcast});
  registerNumericsKernels();
}

} // namespace hetplan::runtime::cpu
