//===- CudaKernels.cu - the CUDA backend's elementwise and reduction kernels ===//
//
// Simple kernels (one thread per output element, grid-stride loops, one
// block per row for row reductions), mirroring the CPU kernels' semantics
// (runtime/src/cpu/kernels). GEMMs are cuBLAS calls in CudaExecutor.cpp.
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace hetplan::runtime::cudak {
namespace {

constexpr int kThreads = 256;

unsigned blocksFor(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 30) ? (1 << 30) : b));
}

#define HP_GRID_LOOP(i, n)                                                                     \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                    \
       i += int64_t(blockDim.x) * gridDim.x)

__device__ inline void bcastOffsets(const Bcast &b, int64_t i, int nOps, int64_t *off) {
  off[0] = off[1] = off[2] = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    int64_t k = i % b.shape[d];
    i /= b.shape[d];
    for (int o = 0; o < nOps; ++o) off[o] += k * b.stride[o][d];
  }
}

int64_t numelOf(const Bcast &b) {
  int64_t n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.shape[d];
  return n;
}

__device__ inline float applyUnary(Unary op, float x, float a, float b) {
  switch (op) {
  case Unary::Neg: return -x;
  case Unary::Abs: return fabsf(x);
  case Unary::Sqrt: return sqrtf(x);
  case Unary::Exp: return expf(x);
  case Unary::Log: return logf(x);
  case Unary::Tanh: return tanhf(x);
  case Unary::Sigmoid: return 1.f / (1.f + expf(-x));
  case Unary::Ramp: return x < 0.f ? 0.f : x;
  case Unary::LeakyRelu: return x < 0.f ? a * x : x;
  case Unary::Erf: return erff(x);
  case Unary::Gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
  case Unary::GeluTanh:
    return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  case Unary::Floor: return floorf(x);
  case Unary::Ceil: return ceilf(x);
  case Unary::Reciprocal: return 1.f / x;
  case Unary::Sin: return sinf(x);
  case Unary::Cos: return cosf(x);
  case Unary::Softplus: return log1pf(expf(x));
  case Unary::Elu: return x < 0.f ? a * (expf(x) - 1.f) : x;
  case Unary::HardSigmoid: return fmaxf(0.f, fminf(1.f, a * x + b));
  case Unary::HardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
  case Unary::Clip: return x < a ? a : (x > b ? b : x);
  }
  return x;
}

__global__ void unaryKernel(Unary op, const float *x, float *y, int64_t n, float a, float b) {
  HP_GRID_LOOP(i, n) y[i] = applyUnary(op, x[i], a, b);
}

__device__ inline float applyBinary(Binary op, float x, float y) {
  switch (op) {
  case Binary::Add: return x + y;
  case Binary::Sub: return x - y;
  case Binary::Mul: return x * y;
  case Binary::Div: return x / y;
  case Binary::Pow: return powf(x, y);
  case Binary::Max: return x > y ? x : y;
  case Binary::Min: return x < y ? x : y;
  }
  return x;
}

__global__ void binaryKernel(Binary op, const float *a, const float *b, float *out, Bcast bc, int64_t n) {
  HP_GRID_LOOP(i, n) {
    int64_t off[3];
    bcastOffsets(bc, i, 2, off);
    out[i] = applyBinary(op, a[off[0]], b[off[1]]);
  }
}

__global__ void compareKernel(Compare op, const float *a, const float *b, uint8_t *out, Bcast bc, int64_t n) {
  HP_GRID_LOOP(i, n) {
    int64_t off[3];
    bcastOffsets(bc, i, 2, off);
    float x = a[off[0]], y = b[off[1]];
    bool r = false;
    switch (op) {
    case Compare::Equal: r = x == y; break;
    case Compare::Less: r = x < y; break;
    case Compare::Greater: r = x > y; break;
    case Compare::LessOrEqual: r = x <= y; break;
    case Compare::GreaterOrEqual: r = x >= y; break;
    }
    out[i] = r ? 1 : 0;
  }
}

__global__ void notKernel(const uint8_t *x, uint8_t *out, int64_t n) {
  HP_GRID_LOOP(i, n) out[i] = x[i] ? 0 : 1;
}

template <typename T>
__global__ void whereKernel(const uint8_t *cond, const T *x, const T *y, T *out, Bcast bc, int64_t n) {
  HP_GRID_LOOP(i, n) {
    int64_t off[3];
    bcastOffsets(bc, i, 3, off);
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}

template <typename D> struct Limits;
template <> struct Limits<int64_t> {
  static constexpr int64_t lo = INT64_MIN, hi = INT64_MAX;
};
template <> struct Limits<int32_t> {
  static constexpr int32_t lo = INT32_MIN, hi = INT32_MAX;
};

/// float -> integer saturates (out of range is UB in C++), NaN -> 0: as the CPU Cast.
template <typename D> __device__ inline D castValue(float v) {
  if (isnan(v)) return D(0);
  double d = v;
  if (d >= double(Limits<D>::hi)) return Limits<D>::hi;
  if (d <= double(Limits<D>::lo)) return Limits<D>::lo;
  return D(v);
}

template <typename S, typename D> __global__ void castKernel(const S *x, D *y, int64_t n) {
  HP_GRID_LOOP(i, n) {
    if constexpr (std::is_same_v<D, uint8_t>) y[i] = x[i] != S(0) ? 1 : 0; // to bool
    else if constexpr (std::is_same_v<S, float> && !std::is_same_v<D, float>) y[i] = castValue<D>(x[i]);
    else y[i] = D(x[i]);
  }
}

template <typename S> cudaError_t castFrom(const S *x, Elem to, void *y, int64_t n, cudaStream_t s) {
  switch (to) {
  case Elem::F32: castKernel<S, float><<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<float *>(y), n); break;
  case Elem::I64: castKernel<S, int64_t><<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<int64_t *>(y), n); break;
  case Elem::I32: castKernel<S, int32_t><<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<int32_t *>(y), n); break;
  case Elem::Bool: castKernel<S, uint8_t><<<blocksFor(n), kThreads, 0, s>>>(x, static_cast<uint8_t *>(y), n); break;
  }
  return cudaGetLastError();
}

/// The source offset of dense index i of the strided view v (its base included).
__device__ inline int64_t stridedOffset(const Strided &v, int64_t i) {
  int64_t rem = i, off = v.base;
  for (int d = v.rank - 1; d >= 0; --d) {
    off += (rem % v.shape[d]) * v.stride[d];
    rem /= v.shape[d];
  }
  return off;
}

template <typename T> __global__ void stridedKernel(const T *src, T *out, Strided v, int64_t n) {
  HP_GRID_LOOP(i, n) {
    out[i] = src[stridedOffset(v, i)];
  }
}

template <typename T, typename I>
__global__ void gatherKernel(const T *data, const I *idx, T *out, int64_t outer, int64_t nIdx, int64_t d,
                             int64_t inner) {
  int64_t n = outer * nIdx * inner;
  HP_GRID_LOOP(i, n) {
    int64_t in = i % inner, j = (i / inner) % nIdx, o = i / (inner * nIdx);
    int64_t k = int64_t(idx[j]);
    if (k < 0) k += d;
    k = k < 0 ? 0 : (k >= d ? d - 1 : k);
    out[i] = data[(o * d + k) * inner + in];
  }
}

__device__ inline float maxOf(float a, float b) { return fmaxf(a, b); }
__device__ inline double maxOf(double a, double b) { return fmax(a, b); }

/// Sum (isMax false) or max over the block (float or double); every
/// thread gets the result. `sh` holds 33 values.
template <typename T> __device__ T blockReduce(T v, bool isMax, T *sh) {
  for (int off = 16; off > 0; off >>= 1) {
    T o = __shfl_down_sync(0xffffffffu, v, off);
    v = isMax ? maxOf(v, o) : v + o;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nWarps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nWarps ? sh[lane] : (isMax ? T(-INFINITY) : T(0));
    for (int off = 16; off > 0; off >>= 1) {
      T o = __shfl_down_sync(0xffffffffu, v, off);
      v = isMax ? maxOf(v, o) : v + o;
    }
    if (lane == 0) sh[32] = v;
  }
  __syncthreads();
  T r = sh[32];
  __syncthreads(); // sh may be reused by the next call
  return r;
}

__global__ void softmaxKernel(const float *x, float *y, int64_t len, int64_t inner, bool log) {
  __shared__ float sh[33];
  int64_t row = blockIdx.x, o = row / inner, in = row % inner;
  int64_t base = o * len * inner + in;
  float mx = -INFINITY;
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) mx = fmaxf(mx, x[base + k * inner]);
  mx = blockReduce(mx, true, sh);
  float sum = 0.f;
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) sum += expf(x[base + k * inner] - mx);
  sum = blockReduce(sum, false, sh);
  float logSum = logf(sum);
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    float v = x[base + k * inner] - mx;
    y[base + k * inner] = log ? v - logSum : expf(v) / sum;
  }
}

__global__ void reduceRowsKernel(Reduce op, const float *x, float *y, int64_t cols) {
  __shared__ float sh[33];
  const float *p = x + int64_t(blockIdx.x) * cols;
  bool isMax = op == Reduce::Max, isMin = op == Reduce::Min;
  float acc = isMax ? -INFINITY : (isMin ? INFINITY : 0.f);
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
    float v = p[k];
    acc = isMax ? fmaxf(acc, v) : (isMin ? fminf(acc, v) : acc + v);
  }
  // min(a, b) = -max(-a, -b)
  float r = isMin ? -blockReduce(-acc, true, sh) : blockReduce(acc, isMax, sh);
  if (threadIdx.x == 0) y[blockIdx.x] = op == Reduce::Mean ? (cols ? r / float(cols) : NAN) : r;
}

__global__ void layerNormKernel(const float *x, const float *scale, const float *bias, float *y, float *mean,
                                float *invStd, int64_t cols, float eps) {
  __shared__ float sh[33];
  int64_t row = blockIdx.x;
  const float *p = x + row * cols;
  float *q = y + row * cols;
  float sum = 0.f;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) sum += p[k];
  float m = blockReduce(sum, false, sh) / float(cols);
  float sq = 0.f;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
    float d = p[k] - m;
    sq += d * d;
  }
  float var = blockReduce(sq, false, sh) / float(cols);
  float inv = rsqrtf(var + eps);
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
    q[k] = (p[k] - m) * inv * scale[k] + (bias ? bias[k] : 0.f);
  if (threadIdx.x == 0) {
    if (mean) mean[row] = m;
    if (invStd) invStd[row] = inv;
  }
}

__global__ void batchNormKernel(const float *x, const float *scale, const float *bias, const float *mean,
                                const float *var, float *y, int64_t C, int64_t S, int64_t n, float eps) {
  HP_GRID_LOOP(i, n) {
    int64_t c = (i / S) % C;
    float k = scale[c] / sqrtf(var[c] + eps);
    y[i] = (x[i] - mean[c]) * k + bias[c];
  }
}

__device__ inline void unflatten(int64_t i, int r, const int64_t *dims, int64_t *idx) {
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = i % dims[d];
    i /= dims[d];
  }
}

__global__ void poolKernel(bool isMax, const float *x, float *y, int64_t NC, Window w, bool includePad) {
  int64_t inSize = w.in[0] * w.in[1] * w.in[2], outSize = w.out[0] * w.out[1] * w.out[2];
  int64_t kSize = w.k[0] * w.k[1] * w.k[2];
  int64_t n = NC * outSize;
  HP_GRID_LOOP(i, n) {
    int64_t nc = i / outSize, o = i % outSize;
    int64_t oidx[3] = {0, 0, 0}, kidx[3] = {0, 0, 0};
    unflatten(o, w.r, w.out, oidx);
    const float *px = x + nc * inSize;
    float acc = isMax ? -INFINITY : 0.f;
    bool found = false;
    int64_t count = 0, padCount = 0;
    for (int64_t kk = 0; kk < kSize; ++kk) {
      unflatten(kk, w.r, w.k, kidx);
      int64_t off = 0;
      bool inside = true, inPad = true;
      for (int d = 0; d < w.r; ++d) {
        int64_t p = oidx[d] * w.s[d] - w.pb[d] + kidx[d] * w.d[d];
        if (p < -w.pb[d] || p >= w.in[d] + w.pe[d]) inPad = false;
        if (p < 0 || p >= w.in[d]) inside = false;
        off = off * w.in[d] + p;
      }
      if (inPad) ++padCount;
      if (!inside) continue;
      float v = px[off];
      if (isMax) {
        if (v > acc || !found) acc = v;
        found = true;
      } else {
        acc += v;
        ++count;
      }
    }
    if (!isMax) acc = includePad ? (padCount ? acc / float(padCount) : 0.f) : (count ? acc / float(count) : 0.f);
    y[i] = acc;
  }
}

__global__ void im2colKernel(const float *x, float *col, int64_t C, Window w) {
  int64_t inSize = w.in[0] * w.in[1] * w.in[2], outSize = w.out[0] * w.out[1] * w.out[2];
  int64_t kSize = w.k[0] * w.k[1] * w.k[2];
  int64_t n = C * kSize * outSize;
  HP_GRID_LOOP(i, n) {
    int64_t ck = i / outSize, o = i % outSize, ci = ck / kSize, kk = ck % kSize;
    int64_t oidx[3] = {0, 0, 0}, kidx[3] = {0, 0, 0};
    unflatten(o, w.r, w.out, oidx);
    unflatten(kk, w.r, w.k, kidx);
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < w.r; ++d) {
      int64_t p = oidx[d] * w.s[d] - w.pb[d] + kidx[d] * w.d[d];
      if (p < 0 || p >= w.in[d]) inside = false;
      off = off * w.in[d] + p;
    }
    col[i] = inside ? x[ci * inSize + off] : 0.f;
  }
}

__global__ void addBiasKernel(float *y, const float *bias, int64_t M, int64_t S, int64_t n) {
  HP_GRID_LOOP(i, n) y[i] += bias[(i / S) % M];
}

__global__ void lrnKernel(const float *x, float *y, int64_t C, int64_t S, int64_t size, float alpha, float beta,
                          float bias, int64_t n) {
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  HP_GRID_LOOP(i, n) {
    int64_t s = i % S, ch = (i / S) % C, nb = i / (S * C);
    float sq = 0.f;
    int64_t k0 = ch - lo < 0 ? 0 : ch - lo, k1 = ch + hi > C - 1 ? C - 1 : ch + hi;
    for (int64_t k = k0; k <= k1; ++k) {
      float v = x[(nb * C + k) * S + s];
      sq += v * v;
    }
    y[i] = x[i] / powf(bias + alpha / float(size) * sq, beta);
  }
}

// --- backward and the optimizers (CudaTraining.cpp) -----------------------
// The CPU gradient kernels' formulas (runtime/src/train), in double where
// they compute in double, so results agree within float32 rounding.

/// One thread per output element: few reduced positions each.
__global__ void reduceSumThreadKernel(const float *g, float *out, Strided kept, Strided red, int64_t nOut,
                                      int64_t nRed, float scale) {
  HP_GRID_LOOP(o, nOut) {
    int64_t base = stridedOffset(kept, o);
    double acc = 0;
    for (int64_t r = 0; r < nRed; ++r) acc += g[base + stridedOffset(red, r)];
    out[o] = float(acc * scale);
  }
}

/// One block per output element: many reduced positions each.
__global__ void reduceSumBlockKernel(const float *g, float *out, Strided kept, Strided red, int64_t nRed,
                                     float scale) {
  __shared__ double sh[33];
  int64_t o = blockIdx.x, base = stridedOffset(kept, o);
  double acc = 0;
  for (int64_t r = threadIdx.x; r < nRed; r += blockDim.x) acc += g[base + stridedOffset(red, r)];
  acc = blockReduce(acc, false, sh);
  if (threadIdx.x == 0) out[o] = float(acc * scale);
}

constexpr double kPiD = 3.14159265358979323846;

__device__ inline double unaryDerivative(UnaryGrad op, double x, double y, double a) {
  switch (op) {
  case UnaryGrad::Neg: return -1.0;
  case UnaryGrad::Sqrt: return 0.5 / y;
  case UnaryGrad::Exp: return y;
  case UnaryGrad::Log: return 1.0 / x;
  case UnaryGrad::Tanh: return 1.0 - y * y;
  case UnaryGrad::Sigmoid: return y * (1.0 - y);
  case UnaryGrad::Erf: return 2.0 / sqrt(kPiD) * exp(-x * x);
  case UnaryGrad::Ramp: return y > 0 ? 1.0 : 0.0; // y = max(x, 0) > 0 exactly when x > 0
  case UnaryGrad::Reciprocal: return -y * y;
  case UnaryGrad::Abs: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
  case UnaryGrad::Sin: return cos(x);
  case UnaryGrad::Cos: return -sin(x);
  case UnaryGrad::Softplus: return 1.0 / (1.0 + exp(-x));
  case UnaryGrad::LeakyRelu: return x < 0 ? a : 1.0;
  case UnaryGrad::Elu: return x < 0 ? y + a : 1.0;
  case UnaryGrad::Gelu: {
    double cdf = 0.5 * (1.0 + erf(x / sqrt(2.0)));
    double pdf = exp(-0.5 * x * x) / sqrt(2.0 * kPiD);
    return cdf + x * pdf;
  }
  case UnaryGrad::GeluTanh: {
    double k = sqrt(2.0 / kPiD), x2 = x * x;
    double t = tanh(k * (x + 0.044715 * x2 * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x2);
  }
  }
  return 0.0;
}

__global__ void unaryGradKernel(UnaryGrad op, const float *x, const float *y, const float *dy, float *dx, int64_t n,
                                double a) {
  HP_GRID_LOOP(i, n) {
    double xi = x ? double(x[i]) : 0.0, yi = y ? double(y[i]) : xi;
    dx[i] = float(double(dy[i]) * unaryDerivative(op, xi, yi, a));
  }
}

__global__ void addInPlaceKernel(float *a, const float *b, int64_t n) {
  HP_GRID_LOOP(i, n) a[i] += b[i];
}

/// One block per (outer, inner) row along `len`.
__global__ void softmaxGradKernel(const float *y, const float *dy, float *dx, int64_t len, int64_t inner, bool log) {
  __shared__ double sh[33];
  int64_t row = blockIdx.x, o = row / inner, in = row % inner, base = o * len * inner + in;
  double acc = 0;
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    int64_t e = base + k * inner;
    acc += log ? double(dy[e]) : double(dy[e]) * y[e];
  }
  double sum = blockReduce(acc, false, sh);
  for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
    int64_t e = base + k * inner;
    dx[e] = float(log ? dy[e] - exp(double(y[e])) * sum : y[e] * (double(dy[e]) - sum));
  }
}

/// One block per row: the row's mean and 1/std (double, as the CPU
/// backward recomputes them), then dX when `dx` is given.
__global__ void layerNormGradKernel(const float *x, const float *scale, const float *dy, const float *dMean,
                                    const float *dInv, float *dx, double *mean, double *invStd, int64_t cols,
                                    double eps) {
  __shared__ double sh[33];
  int64_t row = blockIdx.x;
  const float *r = x + row * cols;
  const float *g = dy ? dy + row * cols : nullptr;
  double n = double(cols), acc = 0;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) acc += r[k];
  double m = blockReduce(acc, false, sh) / n;
  acc = 0;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) acc += (r[k] - m) * (r[k] - m);
  double iv = 1.0 / sqrt(blockReduce(acc, false, sh) / n + eps);
  if (threadIdx.x == 0) {
    mean[row] = m;
    invStd[row] = iv;
  }
  if (!dx) return;
  double sg = 0, sgx = 0;
  if (g) {
    double a = 0, b = 0;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      double gi = double(g[k]) * scale[k];
      a += gi;
      b += gi * (r[k] - m) * iv;
    }
    sg = blockReduce(a, false, sh);
    sgx = blockReduce(b, false, sh);
  }
  double cm = (dMean ? double(dMean[row]) : 0.0) / n, ci = -(dInv ? double(dInv[row]) : 0.0) * iv * iv / n;
  float *d = dx + row * cols;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
    double xh = (r[k] - m) * iv;
    double gi = g ? double(g[k]) * scale[k] : 0.0;
    d[k] = float(iv * (gi - sg / n - xh * sgx / n) + cm + ci * xh);
  }
}

/// One thread per column: sums over the rows.
__global__ void layerNormParamGradKernel(const float *x, const float *dy, const double *mean, const double *invStd,
                                         float *dScale, float *dBias, int64_t rows, int64_t cols) {
  HP_GRID_LOOP(j, cols) {
    double s = 0, b = 0;
    for (int64_t o = 0; o < rows; ++o) {
      double g = dy[o * cols + j];
      s += g * (x[o * cols + j] - mean[o]) * invStd[o];
      b += g;
    }
    if (dScale) dScale[j] = float(s);
    if (dBias) dBias[j] = float(b);
  }
}

__global__ void gatherGradKernel(const float *dy, const int64_t *idx, float *dx, int64_t nIdx, int64_t d,
                                 int64_t inner, int64_t n) {
  HP_GRID_LOOP(i, n) {
    int64_t e = i % inner, j = (i / inner) % nIdx, o = i / (inner * nIdx);
    atomicAdd(dx + (o * d + idx[j]) * inner + e, dy[i]);
  }
}

__global__ void optimizerKernel(float *p, const float *g, float *m, float *v, int64_t n, OptimizerStep s) {
  HP_GRID_LOOP(i, n) {
    double pi = double(p[i]), gi = double(g[i]);
    if (s.kind == OptimizerStep::AdamW) pi *= 1 - s.lr * s.weightDecay;
    else gi += s.weightDecay * pi;
    if (s.kind == OptimizerStep::SGD || s.kind == OptimizerStep::Momentum) {
      if (s.kind == OptimizerStep::Momentum) {
        gi = s.momentum * double(m[i]) + gi;
        m[i] = float(gi);
      }
      p[i] = float(pi - s.lr * gi);
      continue;
    }
    double mi = s.beta1 * m[i] + (1 - s.beta1) * gi;
    double vi = s.beta2 * v[i] + (1 - s.beta2) * gi * gi;
    m[i] = float(mi);
    v[i] = float(vi);
    p[i] = float(pi - s.lr * (mi / s.c1) / (sqrt(vi / s.c2) + s.eps));
  }
}

int rowThreads(int64_t cols) { return cols >= 256 ? 256 : (cols >= 128 ? 128 : (cols >= 64 ? 64 : 32)); }

} // namespace

cudaError_t unary(Unary op, const float *x, float *y, int64_t n, float a, float b, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  unaryKernel<<<blocksFor(n), kThreads, 0, s>>>(op, x, y, n, a, b);
  return cudaGetLastError();
}

cudaError_t binary(Binary op, const float *a, const float *b, float *out, const Bcast &bc, cudaStream_t s) {
  int64_t n = numelOf(bc);
  if (n <= 0) return cudaSuccess;
  binaryKernel<<<blocksFor(n), kThreads, 0, s>>>(op, a, b, out, bc, n);
  return cudaGetLastError();
}

cudaError_t compare(Compare op, const float *a, const float *b, uint8_t *out, const Bcast &bc, cudaStream_t s) {
  int64_t n = numelOf(bc);
  if (n <= 0) return cudaSuccess;
  compareKernel<<<blocksFor(n), kThreads, 0, s>>>(op, a, b, out, bc, n);
  return cudaGetLastError();
}

cudaError_t logicalNot(const uint8_t *x, uint8_t *out, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  notKernel<<<blocksFor(n), kThreads, 0, s>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t where(const uint8_t *cond, const void *x, const void *y, void *out, int elemSize, const Bcast &bc,
                  cudaStream_t s) {
  int64_t n = numelOf(bc);
  if (n <= 0) return cudaSuccess;
  switch (elemSize) {
#define HP_WHERE(SZ, T)                                                                                   \
  case SZ:                                                                                                 \
    whereKernel<T><<<blocksFor(n), kThreads, 0, s>>>(cond, static_cast<const T *>(x),                      \
                                                     static_cast<const T *>(y), static_cast<T *>(out), bc, n); \
    break;
    HP_WHERE(1, uint8_t) HP_WHERE(2, uint16_t) HP_WHERE(4, uint32_t) HP_WHERE(8, uint64_t)
#undef HP_WHERE
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t cast(Elem from, const void *x, Elem to, void *y, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  switch (from) {
  case Elem::F32: return castFrom(static_cast<const float *>(x), to, y, n, s);
  case Elem::I64: return castFrom(static_cast<const int64_t *>(x), to, y, n, s);
  case Elem::I32: return castFrom(static_cast<const int32_t *>(x), to, y, n, s);
  case Elem::Bool: return castFrom(static_cast<const uint8_t *>(x), to, y, n, s);
  }
  return cudaErrorInvalidValue;
}

cudaError_t stridedCopy(const void *src, void *out, int elemSize, const Strided &v, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  if (n <= 0) return cudaSuccess;
  switch (elemSize) {
#define HP_STRIDED(SZ, T)                                                                                 \
  case SZ:                                                                                                 \
    stridedKernel<T><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(src), static_cast<T *>(out), v, n); \
    break;
    HP_STRIDED(1, uint8_t) HP_STRIDED(2, uint16_t) HP_STRIDED(4, uint32_t) HP_STRIDED(8, uint64_t)
#undef HP_STRIDED
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename H> __device__ H toH(float x);
template <> __device__ __half toH<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 toH<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename H> __global__ void toHalfKernel(const float *src, H *out, Strided v, float clamp, int64_t n) {
  HP_GRID_LOOP(i, n) {
    out[i] = toH<H>(fminf(fmaxf(src[stridedOffset(v, i)], -clamp), clamp));
  }
}
__global__ void fromHalfKernel(const __half *src, float *out, int64_t n) {
  HP_GRID_LOOP(i, n) out[i] = __half2float(src[i]);
}
__global__ void fromBf16Kernel(const __nv_bfloat16 *src, float *out, int64_t n) {
  HP_GRID_LOOP(i, n) out[i] = __bfloat162float(src[i]);
}

cudaError_t toHalf(const float *src, void *out, bool bf16, const Strided &v, float clamp, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  if (n <= 0) return cudaSuccess;
  if (bf16) toHalfKernel<<<blocksFor(n), kThreads, 0, s>>>(src, static_cast<__nv_bfloat16 *>(out), v, clamp, n);
  else toHalfKernel<<<blocksFor(n), kThreads, 0, s>>>(src, static_cast<__half *>(out), v, clamp, n);
  return cudaGetLastError();
}

cudaError_t fromHalf(const void *src, float *out, bool bf16, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (bf16) fromBf16Kernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const __nv_bfloat16 *>(src), out, n);
  else fromHalfKernel<<<blocksFor(n), kThreads, 0, s>>>(static_cast<const __half *>(src), out, n);
  return cudaGetLastError();
}

cudaError_t gather(const void *data, int elemSize, const void *idx, bool idx64, void *out, int64_t outer,
                   int64_t nIdx, int64_t d, int64_t inner, cudaStream_t s) {
  int64_t n = outer * nIdx * inner;
  if (n <= 0) return cudaSuccess;
  if (d <= 0) return cudaErrorInvalidValue;
  switch (elemSize) {
#define HP_GATHER(SZ, T)                                                                                  \
  case SZ:                                                                                                 \
    if (idx64)                                                                                             \
      gatherKernel<T, int64_t><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(data),             \
          static_cast<const int64_t *>(idx), static_cast<T *>(out), outer, nIdx, d, inner);               \
    else                                                                                                   \
      gatherKernel<T, int32_t><<<blocksFor(n), kThreads, 0, s>>>(static_cast<const T *>(data),             \
          static_cast<const int32_t *>(idx), static_cast<T *>(out), outer, nIdx, d, inner);               \
    break;
    HP_GATHER(1, uint8_t) HP_GATHER(2, uint16_t) HP_GATHER(4, uint32_t) HP_GATHER(8, uint64_t)
#undef HP_GATHER
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, bool log,
                    cudaStream_t s) {
  int64_t rows = outer * inner;
  if (rows <= 0 || len <= 0) return cudaSuccess;
  if (rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  softmaxKernel<<<unsigned(rows), rowThreads(len), 0, s>>>(x, y, len, inner, log);
  return cudaGetLastError();
}

cudaError_t reduceRows(Reduce op, const float *x, float *y, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  reduceRowsKernel<<<unsigned(rows), rowThreads(cols), 0, s>>>(op, x, y, cols);
  return cudaGetLastError();
}

cudaError_t layerNorm(const float *x, const float *scale, const float *bias, float *y, float *mean,
                      float *invStd, int64_t rows, int64_t cols, float eps, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  layerNormKernel<<<unsigned(rows), rowThreads(cols), 0, s>>>(x, scale, bias, y, mean, invStd, cols, eps);
  return cudaGetLastError();
}

cudaError_t batchNorm(const float *x, const float *scale, const float *bias, const float *mean,
                      const float *var, float *y, int64_t N, int64_t C, int64_t S, float eps, cudaStream_t s) {
  int64_t n = N * C * S;
  if (n <= 0) return cudaSuccess;
  batchNormKernel<<<blocksFor(n), kThreads, 0, s>>>(x, scale, bias, mean, var, y, C, S, n, eps);
  return cudaGetLastError();
}

cudaError_t pool(bool isMax, const float *x, float *y, int64_t NC, const Window &w, bool countIncludePad,
                 cudaStream_t s) {
  int64_t n = NC * w.out[0] * w.out[1] * w.out[2];
  if (n <= 0) return cudaSuccess;
  poolKernel<<<blocksFor(n), kThreads, 0, s>>>(isMax, x, y, NC, w, countIncludePad);
  return cudaGetLastError();
}

cudaError_t im2col(const float *x, float *col, int64_t C, const Window &w, cudaStream_t s) {
  int64_t n = C * w.k[0] * w.k[1] * w.k[2] * w.out[0] * w.out[1] * w.out[2];
  if (n <= 0) return cudaSuccess;
  im2colKernel<<<blocksFor(n), kThreads, 0, s>>>(x, col, C, w);
  return cudaGetLastError();
}

cudaError_t addBias(float *y, const float *bias, int64_t N, int64_t M, int64_t S, cudaStream_t s) {
  int64_t n = N * M * S;
  if (n <= 0) return cudaSuccess;
  addBiasKernel<<<blocksFor(n), kThreads, 0, s>>>(y, bias, M, S, n);
  return cudaGetLastError();
}

cudaError_t lrn(const float *x, float *y, int64_t N, int64_t C, int64_t S, int64_t size, float alpha,
                float beta, float bias, cudaStream_t s) {
  int64_t n = N * C * S;
  if (n <= 0) return cudaSuccess;
  lrnKernel<<<blocksFor(n), kThreads, 0, s>>>(x, y, C, S, size, alpha, beta, bias, n);
  return cudaGetLastError();
}

cudaError_t reduceSum(const float *g, float *out, const Strided &kept, const Strided &red, float scale,
                      cudaStream_t s) {
  int64_t nOut = 1, nRed = 1;
  for (int d = 0; d < kept.rank; ++d) nOut *= kept.shape[d];
  for (int d = 0; d < red.rank; ++d) nRed *= red.shape[d];
  if (nOut <= 0) return cudaSuccess;
  if (nRed >= 256 && nOut <= int64_t(INT32_MAX))
    reduceSumBlockKernel<<<unsigned(nOut), kThreads, 0, s>>>(g, out, kept, red, nRed, scale);
  else
    reduceSumThreadKernel<<<blocksFor(nOut), kThreads, 0, s>>>(g, out, kept, red, nOut, nRed, scale);
  return cudaGetLastError();
}

cudaError_t unaryGrad(UnaryGrad op, const float *x, const float *y, const float *dy, float *dx, int64_t n,
                      double alpha, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  unaryGradKernel<<<blocksFor(n), kThreads, 0, s>>>(op, x, y, dy, dx, n, alpha);
  return cudaGetLastError();
}

cudaError_t addInPlace(float *a, const float *b, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  addInPlaceKernel<<<blocksFor(n), kThreads, 0, s>>>(a, b, n);
  return cudaGetLastError();
}

cudaError_t softmaxGrad(const float *y, const float *dy, float *dx, int64_t outer, int64_t len, int64_t inner,
                        bool log, cudaStream_t s) {
  int64_t rows = outer * inner;
  if (rows <= 0 || len <= 0) return cudaSuccess;
  if (rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  softmaxGradKernel<<<unsigned(rows), rowThreads(len), 0, s>>>(y, dy, dx, len, inner, log);
  return cudaGetLastError();
}

cudaError_t layerNormGrad(const float *x, const float *scale, const float *dy, const float *dMean, const float *dInv,
                          float *dx, double *mean, double *invStd, int64_t rows, int64_t cols, double eps,
                          cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  layerNormGradKernel<<<unsigned(rows), rowThreads(cols), 0, s>>>(x, scale, dy, dMean, dInv, dx, mean, invStd, cols,
                                                                  eps);
  return cudaGetLastError();
}

cudaError_t layerNormParamGrad(const float *x, const float *dy, const double *mean, const double *invStd,
                               float *dScale, float *dBias, int64_t rows, int64_t cols, cudaStream_t s) {
  if (cols <= 0) return cudaSuccess;
  layerNormParamGradKernel<<<blocksFor(cols), kThreads, 0, s>>>(x, dy, mean, invStd, dScale, dBias, rows, cols);
  return cudaGetLastError();
}

cudaError_t gatherGrad(const float *dy, const int64_t *idx, float *dx, int64_t outer, int64_t nIdx, int64_t d,
                       int64_t inner, cudaStream_t s) {
  int64_t n = outer * nIdx * inner;
  if (n <= 0) return cudaSuccess;
  gatherGradKernel<<<blocksFor(n), kThreads, 0, s>>>(dy, idx, dx, nIdx, d, inner, n);
  return cudaGetLastError();
}

cudaError_t optimizer(float *param, const float *grad, float *m, float *v, int64_t n, const OptimizerStep &step,
                      cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  optimizerKernel<<<blocksFor(n), kThreads, 0, s>>>(param, grad, m, v, n, step);
  return cudaGetLastError();
}

} // namespace hetplan::runtime::cudak
