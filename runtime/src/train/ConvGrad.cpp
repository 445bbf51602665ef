//===- ConvGrad.cpp - backward of Conv, pooling, BatchNormalization, LRN --===//
//
// The window geometry (auto_pad, pads, strides, dilations, ceil_mode) is
// computed exactly as the forward kernels in cpu/kernels/Linalg.cpp do, and
// 1-D / 2-D / 3-D spatial inputs are handled as 3-D with leading size-1
// dims.
//
//===----------------------------------------------------------------------===//
#include "GradUtil.h"
#include "../cpu/kernels/Gemm.h"
#include "../cpu/kernels/Geometry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include "ops/OpTable.h" // ops::names: the spelling of op types kernels register under

namespace hetplan::runtime::train {
namespace {

using cpu::gemm;

/// Conv / pooling window over the spatial dims, padded to 3-D (leading dims
/// of size 1, kernel 1, stride 1, no padding).
struct Geo {
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
  int64_t inSize, kSize, outSize;
};

/// The forward kernels' window (Geometry.h), padded to 3-D.
Geo makeGeo(const Node &n, const std::vector<int64_t> &inSpatial, std::vector<int64_t> kernel, bool pool) {
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

void checkOutShape(const GradientContext &c, const Tensor &dy, const Geo &g, int64_t N, int64_t C) {
  bool ok = dy.rank() >= 3 && dy.dim(0) == N && dy.dim(1) == C && dy.numel() == N * C * g.outSize;
  if (!ok)
    throw std::runtime_error(c.node.describe() + ": backward: gradient " + dy.describe() +
                             " does not match the output geometry");
}

/// Output columns [lo, hi) of the innermost dim whose input column
/// ow * s + off lies in [0, in).
inline void innerRange(int64_t off, int64_t s, int64_t in, int64_t out, int64_t &lo, int64_t &hi) {
  lo = std::min<int64_t>(out, off >= 0 ? 0 : (-off + s - 1) / s);
  hi = in - off <= 0 ? 0 : std::min<int64_t>(out, (in - off + s - 1) / s);
  if (hi < lo) hi = lo;
}

/// Calls f(outRowPtrOffset, inRowOffset, owLo, owHi) for every output row
/// (od, oh) of kernel offset (kd, kh, kw) whose input row is inside; the input
/// element of output column ow is inRowOffset + ow * s[2]. `skip(o)` is
/// called for output rows that lie wholly in the padding.
template <typename F, typename S>
inline void forRows(const Geo &g, int64_t kd, int64_t kh, int64_t kw, F f, S skip) {
  int64_t offD = kd * g.d[0] - g.pb[0], offH = kh * g.d[1] - g.pb[1], offW = kw * g.d[2] - g.pb[2];
  int64_t lo, hi;
  innerRange(offW, g.s[2], g.in[2], g.out[2], lo, hi);
  for (int64_t od = 0; od < g.out[0]; ++od) {
    int64_t id = od * g.s[0] + offD;
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      int64_t ih = oh * g.s[1] + offH, o = (od * g.out[1] + oh) * g.out[2];
      if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || lo == hi) { skip(o); continue; }
      f(o, (id * g.in[1] + ih) * g.in[2] + offW, lo, hi);
    }
  }
}

/// Row ck = (c, kd, kh, kw) of the im2col matrix of one channel group.
template <typename T>
void im2col(const Geo &g, const T *px, int64_t Cg, T *col) {
  int64_t rows = Cg * g.kSize, sw = g.s[2];
  parallelFor(rows, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, g.outSize)), [&](int64_t lo, int64_t hi) {
    for (int64_t ck = lo; ck < hi; ++ck) {
      int64_t ci = ck / g.kSize, kf = ck % g.kSize;
      int64_t kw = kf % g.k[2], kh = (kf / g.k[2]) % g.k[1], kd = kf / (g.k[2] * g.k[1]);
      T *row = col + ck * g.outSize;
      const T *pc = px + ci * g.inSize;
      std::fill(row, row + g.outSize, T(0));
      forRows(g, kd, kh, kw, [&](int64_t o, int64_t src, int64_t a, int64_t b) {
        T *dst = row + o;
        const T *s = pc + src;
        for (int64_t ow = a; ow < b; ++ow) dst[ow] = s[ow * sw];
      }, [](int64_t) {});
    }
  });
}

/// dX of one channel group += col2im(dcol); channels in parallel (each owns
/// its kSize rows and its input plane).
template <typename T>
void col2im(const Geo &g, const T *col, int64_t Cg, T *pdx) {
  int64_t sw = g.s[2];
  parallelFor(Cg, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, g.kSize * g.outSize)),
              [&](int64_t lo, int64_t hi) {
    for (int64_t ci = lo; ci < hi; ++ci) {
      T *pc = pdx + ci * g.inSize;
      for (int64_t kf = 0; kf < g.kSize; ++kf) {
        int64_t kw = kf % g.k[2], kh = (kf / g.k[2]) % g.k[1], kd = kf / (g.k[2] * g.k[1]);
        const T *row = col + (ci * g.kSize + kf) * g.outSize;
        forRows(g, kd, kh, kw, [&](int64_t o, int64_t dst, int64_t a, int64_t b) {
          const T *s = row + o;
          T *d = pc + dst;
          for (int64_t ow = a; ow < b; ++ow) d[ow * sw] += s[ow];
        }, [](int64_t) {});
      }
    }
  });
}

// Y[n, g*Mg+m] = sum_{c,k} W[g*Mg+m, c, k] X[n, g*Cg+c, window(o, k)] + B:
// per sample and group, with col = im2col(X): dW_g += dY_g col^T,
// dX_g = col2im(W_g^T dY_g), dB = sum of dY over samples and positions.
void convGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  bool wx = wants(c, 0), ww = wants(c, 1), wb = wants(c, 2);
  if (!wx && !ww && !wb) return;
  const Tensor &x = c.in(0), &wt = c.in(1);
  Tensor dy = outGrad(c, 0, x.dtype());
  if (!dy.defined()) return;
  if (wt.dtype() != x.dtype())
    throw std::runtime_error(c.node.describe() + ": backward: weight " + wt.describe() + " and input " + x.describe() +
                             " differ in element type");
  int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0), G = c.node.getInt("group", 1);
  auto ks = c.node.getInts("kernel_shape", std::vector<int64_t>(wt.shape().begin() + 2, wt.shape().end()));
  Geo g = makeGeo(c.node, cpu::spatialOf(x), ks, false);
  if (G < 1 || C % G || M % G || wt.dim(1) != C / G)
    throw std::runtime_error(c.node.describe() + ": backward: weight " + wt.describe() + " does not match input " +
                             x.describe() + " with group " + std::to_string(G));
  int64_t Cg = C / G, Mg = M / G, K = Cg * g.kSize, inSize = g.inSize, outSize = g.outSize;
  checkOutShape(c, dy, g, N, M);
  Tensor dx, dw;
  if (wx) dx = Tensor(x.dtype(), x.shape());
  if (ww) dw = Tensor(wt.dtype(), wt.shape());
  bool pointwise = g.kSize == 1;
  for (int i = 0; i < 3; ++i) pointwise = pointwise && g.s[i] == 1 && g.pb[i] == 0 && g.out[i] == g.in[i];
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(), *pw = wt.data<T>(), *pg = dy.data<T>();
    T *pdx = wx ? dx.data<T>() : nullptr, *pdw = ww ? dw.data<T>() : nullptr;
    if (Cg == 1 && !pointwise && (wx || ww)) {
      // depthwise (one input channel per group): direct loops, groups in parallel
      int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, N * Mg * g.kSize * outSize));
      parallelFor(G, grain, [&](int64_t glo, int64_t ghi) {
        std::vector<double> acc(static_cast<size_t>(g.kSize));
        int64_t sw = g.s[2];
        for (int64_t gi = glo; gi < ghi; ++gi)
          for (int64_t m = 0; m < Mg; ++m) {
            int64_t oc = gi * Mg + m;
            const T *wrow = pw + oc * g.kSize;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t n = 0; n < N; ++n) {
              const T *gy = pg + (n * M + oc) * outSize;
              const T *xp = px + (n * C + gi) * inSize;
              T *dxp = pdx ? pdx + (n * C + gi) * inSize : nullptr;
              for (int64_t kf = 0; kf < g.kSize; ++kf) {
                int64_t kw = kf % g.k[2], kh = (kf / g.k[2]) % g.k[1], kd = kf / (g.k[2] * g.k[1]);
                T wv = wrow[kf];
                double a = 0;
                forRows(g, kd, kh, kw, [&](int64_t o, int64_t in, int64_t lo, int64_t hi) {
                  const T *gr = gy + o;
                  if (pdw) {
                    const T *xr = xp + in;
                    for (int64_t ow = lo; ow < hi; ++ow) a += static_cast<double>(gr[ow]) * xr[ow * sw];
                  }
                  if (dxp) {
                    T *dr = dxp + in;
                    for (int64_t ow = lo; ow < hi; ++ow) dr[ow * sw] += wv * gr[ow];
                  }
                }, [](int64_t) {});
                acc[kf] += a;
              }
            }
            if (pdw)
              for (int64_t kf = 0; kf < g.kSize; ++kf) pdw[oc * g.kSize + kf] = static_cast<T>(acc[kf]);
          }
      });
    } else if (wx || ww) {
      std::vector<T> col(pointwise || !ww ? 0 : static_cast<size_t>(K * outSize));
      std::vector<T> dcol(pointwise || !wx ? 0 : static_cast<size_t>(K * outSize));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t gi = 0; gi < G; ++gi) {
          const T *xg = px + (n * C + gi * Cg) * inSize;
          const T *gy = pg + (n * M + gi * Mg) * outSize;
          const T *wg = pw + gi * Mg * K;
          if (ww) {
            const T *pcol = xg;
            if (!pointwise) { im2col(g, xg, Cg, col.data()); pcol = col.data(); }
            gemm<T>(false, true, Mg, K, outSize, T(1), gy, outSize, pcol, outSize, T(1), pdw + gi * Mg * K, K);
          }
          if (wx) {
            T *dxg = pdx + (n * C + gi * Cg) * inSize;
            if (pointwise) {
              gemm<T>(true, false, K, outSize, Mg, T(1), wg, K, gy, outSize, T(0), dxg, outSize);
            } else {
              gemm<T>(true, false, K, outSize, Mg, T(1), wg, K, gy, outSize, T(0), dcol.data(), outSize);
              col2im(g, dcol.data(), Cg, dxg);
            }
          }
        }
    }
    if (wb) {
      const Tensor &b = c.in(2);
      Tensor db(b.dtype(), b.shape());
      if (b.numel() != M) throw std::runtime_error(c.node.describe() + ": backward: bias " + b.describe());
      T *pdb = db.data<T>();
      parallelFor(M, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, N * outSize)),
                  [&](int64_t lo, int64_t hi) {
        for (int64_t m = lo; m < hi; ++m) {
          double s = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T *r = pg + (n * M + m) * outSize;
            for (int64_t o = 0; o < outSize; ++o) s += r[o];
          }
          pdb[m] = static_cast<T>(s);
        }
      });
      c.inputGrads[2] = std::move(db);
    }
  });
  if (wx) c.inputGrads[0] = std::move(dx);
  if (ww) c.inputGrads[1] = std::move(dw);
}

std::string convCheck(const Node &n, int64_t) {
  if (n.has("kernel_shape") && (n.getInts("kernel_shape").empty() || n.getInts("kernel_shape").size() > 3))
    return "Conv backward supports 1-D, 2-D and 3-D convolutions only";
  return "";
}

// MaxPool: each output's gradient goes to the first maximum of its window
// (the forward kernel's choice); AveragePool: spread evenly over the
// window's counted positions (count_include_pad counts the padding, not the
// part of a ceil_mode window past it).
void poolGrad(GradientContext &c, bool isMax) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  const Node &nd = c.node;
  Geo g = makeGeo(nd, cpu::spatialOf(x), nd.getInts("kernel_shape"), true);
  int64_t N = x.dim(0), C = x.dim(1), inSize = g.inSize, outSize = g.outSize;
  checkOutShape(c, dy, g, N, C);
  bool includePad = nd.getInt("count_include_pad", 0);
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *pxAll = x.data<T>(), *pgAll = dy.data<T>();
    T *pdAll = dx.data<T>();
    int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, outSize * g.kSize));
    parallelFor(N * C, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const T *px = pxAll + nc * inSize, *pg = pgAll + nc * outSize;
        T *pd = pdAll + nc * inSize;
        for (int64_t od = 0; od < g.out[0]; ++od)
          for (int64_t oh = 0; oh < g.out[1]; ++oh)
            for (int64_t ow = 0; ow < g.out[2]; ++ow) {
              int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
              int64_t base[3] = {od * g.s[0] - g.pb[0], oh * g.s[1] - g.pb[1], ow * g.s[2] - g.pb[2]};
              T best = T(0);
              int64_t bestOff = -1, count = 0, padCount = 0;
              // pass 1: the argmax, or the divisor
              for (int64_t kd = 0; kd < g.k[0]; ++kd)
                for (int64_t kh = 0; kh < g.k[1]; ++kh)
                  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                    int64_t p[3] = {base[0] + kd * g.d[0], base[1] + kh * g.d[1], base[2] + kw * g.d[2]};
                    bool inside = true, inPad = true;
                    for (int i = 0; i < 3; ++i) {
                      if (p[i] < -g.pb[i] || p[i] >= g.in[i] + g.pe[i]) inPad = false;
                      if (p[i] < 0 || p[i] >= g.in[i]) inside = false;
                    }
                    if (inPad) ++padCount;
                    if (!inside) continue;
                    int64_t off = (p[0] * g.in[1] + p[1]) * g.in[2] + p[2];
                    ++count;
                    if (isMax && (bestOff < 0 || px[off] > best)) { best = px[off]; bestOff = off; }
                  }
              if (isMax) {
                if (bestOff >= 0) pd[bestOff] += pg[o];
                continue;
              }
              int64_t div = includePad ? padCount : count;
              if (!div || !count) continue;
              T share = static_cast<T>(static_cast<double>(pg[o]) / div);
              for (int64_t kd = 0; kd < g.k[0]; ++kd)
                for (int64_t kh = 0; kh < g.k[1]; ++kh)
                  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                    int64_t p[3] = {base[0] + kd * g.d[0], base[1] + kh * g.d[1], base[2] + kw * g.d[2]};
                    if (p[0] < 0 || p[0] >= g.in[0] || p[1] < 0 || p[1] >= g.in[1] || p[2] < 0 || p[2] >= g.in[2])
                      continue;
                    pd[(p[0] * g.in[1] + p[1]) * g.in[2] + p[2]] += share;
                  }
            }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

std::string poolCheck(const Node &n, int64_t) {
  if (!n.has("kernel_shape")) return "kernel_shape is required";
  if (n.getInts("kernel_shape").empty() || n.getInts("kernel_shape").size() > 3)
    return "pooling backward supports 1-D, 2-D and 3-D windows only";
  return "";
}

void globalPoolGrad(GradientContext &c, bool isMax) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t NC = x.dim(0) * x.dim(1), S = x.numel() / std::max<int64_t>(NC, 1);
  if (dy.numel() != NC)
    throw std::runtime_error(c.node.describe() + ": backward: gradient " + dy.describe() + " does not match " +
                             x.describe());
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(), *pg = dy.data<T>();
    T *pd = dx.data<T>();
    parallelFor(NC, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(S, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T *p = px + i * S;
        T *d = pd + i * S;
        if (isMax) {
          int64_t best = 0; // the first maximum, as the forward's std::max keeps
          for (int64_t j = 1; j < S; ++j)
            if (p[j] > p[best]) best = j;
          if (S) d[best] = pg[i];
        } else {
          T share = static_cast<T>(static_cast<double>(pg[i]) / S);
          for (int64_t j = 0; j < S; ++j) d[j] = share;
        }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

// Inference-mode BatchNormalization: Y = (X - mean) * k + B per channel with
// k = scale / sqrt(var + eps); mean and var (inputs 3, 4) are constants.
void batchNormGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  bool wx = wants(c, 0), ws = wants(c, 1), wb = wants(c, 2);
  if (!wx && !ws && !wb) return;
  const Tensor &x = c.in(0);
  Tensor dy = outGrad(c, 0, x.dtype());
  if (!dy.defined()) return;
  int64_t N = x.dim(0), C = x.rank() > 1 ? x.dim(1) : 1, S = x.numel() / std::max<int64_t>(N * C, 1);
  double eps = c.node.getFloat("epsilon", 1e-5f);
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *sc = c.in(1).data<T>(), *mean = c.in(3).data<T>(), *var = c.in(4).data<T>();
    const T *px = x.data<T>(), *pg = dy.data<T>();
    std::vector<double> inv(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) inv[ch] = 1.0 / std::sqrt(static_cast<double>(var[ch]) + eps);
    if (wx) {
      Tensor dx(x.dtype(), x.shape());
      T *pd = dx.data<T>();
      parallelFor(N * C, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(S, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t nc = lo; nc < hi; ++nc) {
          int64_t ch = nc % C;
          const T k = static_cast<T>(sc[ch] * inv[ch]);
          const T *g = pg + nc * S;
          T *d = pd + nc * S;
          for (int64_t s = 0; s < S; ++s) d[s] = g[s] * k;
        }
      });
      c.inputGrads[0] = std::move(dx);
    }
    if (ws || wb) {
      std::vector<double> accS(static_cast<size_t>(C), 0.0), accB(static_cast<size_t>(C), 0.0);
      parallelFor(C, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(N * S, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t ch = lo; ch < hi; ++ch) {
          double m = mean[ch], sS = 0, sB = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T *g = pg + (n * C + ch) * S, *xr = px + (n * C + ch) * S;
            for (int64_t s = 0; s < S; ++s) {
              sB += g[s];
              sS += static_cast<double>(g[s]) * (xr[s] - m);
            }
          }
          accS[ch] = sS * inv[ch];
          accB[ch] = sB;
        }
      });
      auto finish = [&](const std::vector<double> &acc, size_t input) {
        Tensor t(c.in(input).dtype(), c.in(input).shape());
        if (t.numel() != C) throw std::runtime_error(c.node.describe() + ": backward: input " + c.in(input).describe());
        HP_DISPATCH_FLOAT(t.dtype(), for (int64_t ch = 0; ch < C; ++ch) t.data<T>()[ch] = static_cast<T>(acc[ch]));
        c.inputGrads[input] = std::move(t);
      };
      if (ws) finish(accS, 1);
      if (wb) finish(accB, 2);
    }
  });
}

std::string batchNormCheck(const Node &n, int64_t opset) {
  size_t outs = 0;
  for (const auto &o : n.outputs) outs += !o.empty();
  (void)opset;
  if (n.getInt("training_mode", 0) || outs > 1)
    return "BatchNormalization backward: training mode (batch statistics) is not supported, inference mode only";
  return "";
}

// LRN across channels: Y_i = X_i d_i^-beta with d_i = bias + alpha/size *
// sum_{k in [i-lo, i+hi]} X_k^2, so dX_j = dY_j d_j^-beta
// - 2 beta alpha/size X_j sum_{i in [j-hi, j+lo]} dY_i X_i d_i^(-beta-1).
void lrnGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1), size = c.node.getInt("size", 1);
  double alpha = c.node.getFloat("alpha", 1e-4f), beta = c.node.getFloat("beta", 0.75f),
         bias = c.node.getFloat("bias", 1.0f);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  double a = alpha / size;
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(), *pg = dy.data<T>();
    T *pd = dx.data<T>();
    parallelFor(N * S, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(C * size, 1)), [&](int64_t b, int64_t e) {
      std::vector<double> t(static_cast<size_t>(C)), dpow(static_cast<size_t>(C));
      for (int64_t ns = b; ns < e; ++ns) {
        int64_t n = ns / S, s = ns % S;
        auto at = [&](int64_t ch) { return (n * C + ch) * S + s; };
        for (int64_t i = 0; i < C; ++i) {
          double sq = 0;
          for (int64_t k = std::max<int64_t>(0, i - lo); k <= std::min(C - 1, i + hi); ++k) {
            double v = px[at(k)];
            sq += v * v;
          }
          double d = bias + a * sq;
          dpow[i] = std::pow(d, -beta);
          t[i] = static_cast<double>(pg[at(i)]) * px[at(i)] * dpow[i] / d;
        }
        for (int64_t j = 0; j < C; ++j) {
          double sum = 0;
          for (int64_t i = std::max<int64_t>(0, j - hi); i <= std::min(C - 1, j + lo); ++i) sum += t[i];
          pd[at(j)] = static_cast<T>(pg[at(j)] * dpow[j] - 2.0 * beta * a * px[at(j)] * sum);
        }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

} // namespace

void registerConvGradients() {
  registerGradient(ops::names::Conv, {convGrad, convCheck, {}});
  registerGradient("MaxPool", {[](GradientContext &c) { poolGrad(c, true); }, poolCheck, {}});
  registerGradient("AveragePool", {[](GradientContext &c) { poolGrad(c, false); }, poolCheck, {}});
  registerGradient("GlobalMaxPool", {[](GradientContext &c) { globalPoolGrad(c, true); }, nullptr, {}});
  registerGradient("GlobalAveragePool", {[](GradientContext &c) { globalPoolGrad(c, false); }, nullptr, {}});
  registerGradient("BatchNormalization", {batchNormGrad, batchNormCheck, {3, 4}});
  registerGradient("LRN", {lrnGrad, nullptr, {}});
}

} // namespace hetplan::runtime::train
