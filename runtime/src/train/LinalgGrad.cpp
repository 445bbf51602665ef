//===- LinalgGrad.cpp - backward of MatMul, Gemm, LayerNorm, Softmax ------===//
#include "GradUtil.h"
#include "../cpu/kernels/Gemm.h"

#include <cmath>
#include "ops/OpTable.h" // ops::names: the spelling of op types kernels register under

namespace hetplan::runtime::train {
namespace {

using cpu::gemm; // oneDNN / OpenBLAS / naive, as the forward kernels

// Y[batch, M, N] = A[batch_a, M, K] x B[batch_b, K, N] (batch dims broadcast):
// dA = dY B^T, dB = A^T dY, summed over the batch positions each one was
// broadcast to.
void matmulGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  bool wa = wants(c, 0), wb = wants(c, 1);
  if (!wa && !wb) return;
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor dy = outGrad(c, 0, a.dtype());
  if (!dy.defined()) return;
  auto as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  auto batch = broadcastShapes(ab, bb);
  int64_t nb = shapeNumel(batch), na = shapeNumel(ab), nB = shapeNumel(bb);
  Tensor ga, gb;
  if (wa) ga = Tensor(a.dtype(), a.shape());
  if (wb) gb = Tensor(b.dtype(), b.shape());
  HP_DISPATCH_FLOAT(a.dtype(), {
    const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = dy.data<T>();
    T *pga = wa ? ga.data<T>() : nullptr, *pgb = wb ? gb.data<T>() : nullptr;
    if (nB == 1 && na == nb) { // B shared by every batch: fold the batch into M
      if (pga) gemm<T>(false, true, nb * M, K, N, T(1), pg, N, pb, N, T(0), pga, K);
      if (pgb) gemm<T>(true, false, K, N, nb * M, T(1), pa, K, pg, N, T(0), pgb, N);
    } else {
      cpu::forEachBroadcast2(batch, broadcastStrides(ab, batch), broadcastStrides(bb, batch),
                             [&](int64_t i, int64_t oa, int64_t ob) {
                               const T *gi = pg + i * M * N;
                               if (pga) gemm<T>(false, true, M, K, N, T(1), gi, N, pb + ob * K * N, N, T(1), pga + oa * M * K, K);
                               if (pgb) gemm<T>(true, false, K, N, M, T(1), pa + oa * M * K, K, gi, N, T(1), pgb + ob * K * N, N);
                             });
    }
  });
  if (wa) c.inputGrads[0] = std::move(ga);
  if (wb) c.inputGrads[1] = std::move(gb);
}

// Y = alpha op(A) op(B) + beta C.
void gemmGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor dy = outGrad(c, 0, a.dtype());
  if (!dy.defined()) return;
  bool ta = c.node.getInt("transA", 0), tb = c.node.getInt("transB", 0);
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  double alpha = c.node.getFloat("alpha", 1.0f), beta = c.node.getFloat("beta", 1.0f);
  HP_DISPATCH_FLOAT(a.dtype(), {
    const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = dy.data<T>();
    T al = static_cast<T>(alpha);
    if (wants(c, 0)) {
      Tensor ga(a.dtype(), a.shape());
      if (!ta) gemm<T>(false, !tb, M, K, N, al, pg, N, pb, b.dim(1), T(0), ga.data<T>(), K); // dY op(B)^T
      else gemm<T>(tb, true, K, M, N, al, pb, b.dim(1), pg, N, T(0), ga.data<T>(), M);       // op(B) dY^T
      c.inputGrads[0] = std::move(ga);
    }
    if (wants(c, 1)) {
      Tensor gb(b.dtype(), b.shape());
      if (!tb) gemm<T>(!ta, false, K, N, M, al, pa, a.dim(1), pg, N, T(0), gb.data<T>(), N); // op(A)^T dY
      else gemm<T>(true, ta, N, K, M, al, pg, N, pa, a.dim(1), T(0), gb.data<T>(), K);       // dY^T op(A)
      c.inputGrads[1] = std::move(gb);
    }
    if (wants(c, 2)) {
      Tensor gc = reduceGradToShape(dy, c.in(2).shape());
      T *p = gc.data<T>();
      for (int64_t i = 0; i < gc.numel(); ++i) p[i] = static_cast<T>(beta * p[i]);
      c.inputGrads[2] = std::move(gc);
    }
  });
}

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

void registerLinalgGradients() {
  registerGradient(ops::names::MatMul, {matmulGrad, nullptr, {}});
  registerGradient(ops::names::Gemm, {gemmGrad, nullptr, {}});
  registerGradient(ops::names::LayerNormalization, {layerNormGrad, nullptr, {}});
  registerGradient(ops::names::Softmax, {[](GradientContext &c) { softmaxGrad(c, false); }, nullptr, {}});
  registerGradient(ops::names::LogSoftmax, {[](GradientContext &c) { softmaxGrad(c, true); }, nullptr, {}});
}

} // namespace hetplan::runtime::train
