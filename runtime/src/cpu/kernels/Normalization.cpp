//===- Normalization.cpp - LayerNormalization, Softmax family: fwd, bwd ---===//
//
// LayerNormalization (its Mean/InvStdDev outputs and their gradients too)
// and Softmax, LogSoftmax, Hardmax along an axis (before opset 13: over the
// dims from `axis` on, coerced to 2-D), float32 rows vectorised (FastMath.h).
//
//===----------------------------------------------------------------------===//
#include "FastMath.h"
#include "KernelUtil.h"
#include "OpKernels.h"
#include "../../train/GradUtil.h"

#include <cmath>
#include <limits>

namespace hetplan::runtime::cpu {
namespace {

void layerNorm(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", -1), x.rank());
  double eps = c.node.getFloat("epsilon", 1e-5f);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(i);
  Tensor out(x.dtype(), x.shape());
  std::vector<int64_t> statShape = x.shape();
  for (int64_t i = axis; i < x.rank(); ++i) statShape[i] = 1;
  DType statType = static_cast<DType>(c.node.getInt("stash_type", 1));
  Tensor meanT(statType == DType::Float64 ? DType::Float64 : x.dtype(), statShape), invT(meanT.dtype(), statShape);
  bool floatDone = false;
  HP_DISPATCH_FLOAT(x.dtype(), {
    Tensor scale = c.in(1);
    for (size_t i = 1; i < 3; ++i)
      if (c.hasInput(i) && (c.in(i).dtype() != x.dtype() ||
                            broadcastShapes(c.in(i).shape(), std::vector<int64_t>(x.shape().begin() + axis, x.shape().end())) !=
                                std::vector<int64_t>(x.shape().begin() + axis, x.shape().end())))
        throw std::runtime_error("LayerNormalization input " + std::to_string(i) + " " + c.in(i).describe() +
                                 " does not broadcast to the normalized dims of " + x.describe());
    Tensor sb = binaryBroadcast<T, T, T>(Tensor(x.dtype(), std::vector<int64_t>(x.shape().begin() + axis, x.shape().end())), scale, x.dtype(), [](T, T y) { return y; });
    Tensor bb;
    if (c.hasInput(2)) bb = binaryBroadcast<T, T, T>(Tensor(x.dtype(), sb.shape()), c.in(2), x.dtype(), [](T, T y) { return y; });
    if constexpr (std::is_same_v<T, float>) {
      if (meanT.dtype() == DType::Float32 && inner > 0) { // float statistics: vectorised rows
        const float *ps = sb.data<float>(), *pbias = bb.defined() ? bb.data<float>() : nullptr;
        float *pm = meanT.data<float>(), *pi = invT.data<float>();
        parallelFor(outer, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
          for (int64_t o = lo; o < hi; ++o)
            fastmath::layerNormRow(x.data<float>() + o * inner, out.data<float>() + o * inner, inner, ps, pbias,
                                   static_cast<float>(eps), pm + o, pi + o);
        });
        floatDone = true;
      }
    }
    if (!floatDone) parallelFor(outer, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      const T *px = x.data<T>() + o * inner; T *po = out.data<T>() + o * inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mean += px[i];
      mean /= inner;
      for (int64_t i = 0; i < inner; ++i) var += (px[i] - mean) * (px[i] - mean);
      var /= inner;
      double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < inner; ++i)
        po[i] = static_cast<T>((px[i] - mean) * inv * sb.data<T>()[i] + (bb.defined() ? bb.data<T>()[i] : T(0)));
      HP_DISPATCH_FLOAT(meanT.dtype(), { meanT.data<T>()[o] = static_cast<T>(mean); invT.data<T>()[o] = static_cast<T>(inv); });
    }
    });
  });
  c.outputs[0] = std::move(out);
  if (c.numOutputs() > 1) c.outputs[1] = std::move(meanT);
  if (c.numOutputs() > 2) c.outputs[2] = std::move(invT);
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

} // namespace

void registerNormalizationKernels() {
  registerKernel("LayerNormalization", {layerNorm, nullptr, kFloatTypes});
  registerKernel("Softmax", {[](KernelContext &c) { softmax(c, 0); }, nullptr, kFloatTypes});
  registerKernel("LogSoftmax", {[](KernelContext &c) { softmax(c, 1); }, nullptr, kFloatTypes});
  registerKernel("Hardmax", {[](KernelContext &c) { softmax(c, 2); }, nullptr, kFloatTypes});
}

} // namespace hetplan::runtime::cpu

namespace hetplan::runtime::train {
namespace {

/// Per-row values of a statistics-output gradient ([outer] elements), as double.
std::vector<double> rowValues(const Tensor &t, int64_t outer) {
  std::vector<double> v(static_cast<size_t>(outer), 0.0);
  if (!t.defined()) return v;
  if (t.numel() != outer) throw std::runtime_error("LayerNormalization backward: statistics gradient " + t.describe());
  HP_DISPATCH_FLOAT(t.dtype(), for (int64_t i = 0; i < outer; ++i) v[i] = t.data<T>()[i]);
  return v;
}

// Y = (X - mean) * inv * scale + B per row of the normalized dims; outputs 1
// and 2 (Mean, InvStdDev) may have gradients of their own.
void layerNormGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", -1), x.rank());
  double eps = c.node.getFloat("epsilon", 1e-5f);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(i);
  std::vector<int64_t> innerShape(x.shape().begin() + axis, x.shape().end());
  Tensor dy = outGrad(c, 0, x.dtype());
  std::vector<double> dMean = rowValues(c.hasOutputGrad(1) ? c.outputGrads[1] : Tensor(), outer);
  std::vector<double> dInv = rowValues(c.hasOutputGrad(2) ? c.outputGrads[2] : Tensor(), outer);
  bool wx = wants(c, 0), ws = wants(c, 1) && dy.defined(), wb = wants(c, 2) && dy.defined();
  if (!wx && !ws && !wb) return;
  std::vector<double> mean(outer), inv(outer);
  double n = static_cast<double>(inner);
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>();
    const T *pg = dy.defined() ? dy.data<T>() : nullptr;
    int64_t rowGrain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
    parallelFor(outer, rowGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T *r = px + o * inner;
        double m = 0, v = 0;
        for (int64_t i = 0; i < inner; ++i) m += r[i];
        m /= n;
        for (int64_t i = 0; i < inner; ++i) v += (r[i] - m) * (r[i] - m);
        v /= n;
        mean[o] = m;
        inv[o] = 1.0 / std::sqrt(v + eps);
      }
    });
    if (wx) {
      Tensor scale = broadcastTo(c.in(1), innerShape);
      const T *ps = scale.data<T>();
      Tensor dx(x.dtype(), x.shape());
      T *pd = dx.data<T>();
      parallelFor(outer, rowGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          const T *r = px + o * inner;
          T *d = pd + o * inner;
          double m = mean[o], iv = inv[o], sg = 0, sgx = 0;
          if (pg) {
            const T *g = pg + o * inner;
            for (int64_t i = 0; i < inner; ++i) {
              double gi = static_cast<double>(g[i]) * ps[i];
              sg += gi;
              sgx += gi * (r[i] - m) * iv;
            }
          }
          double cm = dMean[o] / n, ci = -dInv[o] * iv * iv / n;
          for (int64_t i = 0; i < inner; ++i) {
            double xh = (r[i] - m) * iv;
            double gi = pg ? static_cast<double>(pg[o * inner + i]) * ps[i] : 0.0;
            d[i] = static_cast<T>(iv * (gi - sg / n - xh * sgx / n) + cm + ci * xh);
          }
        }
      });
      c.inputGrads[0] = std::move(dx);
    }
    if (ws || wb) {
      // column sums over the rows: dScale = sum dY * xhat, dB = sum dY
      std::vector<double> accS(ws ? inner : 0), accB(wb ? inner : 0);
      int64_t colGrain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(outer, 1));
      parallelFor(inner, colGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t o = 0; o < outer; ++o) {
          const T *r = px + o * inner, *g = pg + o * inner;
          double m = mean[o], iv = inv[o];
          for (int64_t j = lo; j < hi; ++j) {
            if (ws) accS[j] += static_cast<double>(g[j]) * (r[j] - m) * iv;
            if (wb) accB[j] += g[j];
          }
        }
      });
      auto finish = [&](const std::vector<double> &acc, size_t input) {
        Tensor t(x.dtype(), innerShape);
        for (int64_t j = 0; j < inner; ++j) t.data<T>()[j] = static_cast<T>(acc[j]);
        const auto &shape = c.in(input).shape();
        c.inputGrads[input] = shape == innerShape ? std::move(t) : reduceGradToShape(t, shape);
      };
      if (ws) finish(accS, 1);
      if (wb) finish(accB, 2);
    }
  });
}

/// Softmax (log = false) and LogSoftmax (log = true) along an axis, or over
/// the dims from `axis` on, coerced to 2-D, before opset 13.
void softmaxGrad(GradientContext &c, bool log) {
  c.inputGrads.resize(c.inputs.size());
  if (!wants(c, 0)) return;
  const Tensor &x = c.in(0), &y = c.out(0);
  Tensor dy = outGrad(c, 0, x.dtype());
  if (!dy.defined()) return;
  int64_t outer, len, inner;
  softmaxDims(c.node, c.opset, x.shape(), outer, len, inner);
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *py = y.data<T>(), *pg = dy.data<T>();
    T *pd = dx.data<T>();
    int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(len, 1));
    parallelFor(outer * inner, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        int64_t o = row / inner, in = row % inner, base = o * len * inner + in;
        double s = 0;
        for (int64_t k = 0; k < len; ++k) {
          int64_t e = base + k * inner;
          s += log ? static_cast<double>(pg[e]) : static_cast<double>(pg[e]) * py[e];
        }
        for (int64_t k = 0; k < len; ++k) {
          int64_t e = base + k * inner;
          pd[e] = static_cast<T>(log ? pg[e] - std::exp(static_cast<double>(py[e])) * s
                                     : py[e] * (static_cast<double>(pg[e]) - s));
        }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

} // namespace

void registerNormalizationGradients() {
  registerGradient("LayerNormalization", {layerNormGrad, nullptr, {}});
  registerGradient("Softmax", {[](GradientContext &c) { softmaxGrad(c, false); }, nullptr, {}});
  registerGradient("LogSoftmax", {[](GradientContext &c) { softmaxGrad(c, true); }, nullptr, {}});
}

} // namespace hetplan::runtime::train
