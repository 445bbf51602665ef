//===- CudaKernels.h - launch wrappers of the CUDA backend's kernels -*- C++ -*-===//
//
// Internal to runtime/src/cuda: plain functions over raw device pointers,
// each launching one kernel on `stream` and returning cudaGetLastError().
// CudaExecutor.cpp (host C++) calls them; CudaKernels.cu defines them. Shapes
// are row-major; element counts are int64; ranks are at most kMaxRank.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hetplan::runtime::cudak {

constexpr int kMaxRank = 8;

/// Up to three operands viewed (broadcast) as an output of `shape`:
/// element strides per operand, 0 on broadcast dimensions.
struct Bcast {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[3][kMaxRank] = {};
};

/// A strided view of a source: out[i] = src[base + sum(idx_d * stride_d)].
struct Strided {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t base = 0;
};

/// The window of a convolution or pooling over up to 3 spatial dims.
struct Window {
  int r = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
          d[3] = {1, 1, 1}, pb[3] = {}, pe[3] = {};
};

/// Ramp: max(x, 0) (the rectifier).
enum class Unary {
  Neg, Abs, Sqrt, Exp, Log, Tanh, Sigmoid, Ramp, LeakyRelu, Erf, Gelu, GeluTanh, Floor, Ceil,
  Reciprocal, Sin, Cos, Softplus, Elu, HardSigmoid, HardSwish, Clip
};
enum class Binary { Add, Sub, Mul, Div, Pow, Max, Min };
enum class Compare { Equal, Less, Greater, LessOrEqual, GreaterOrEqual };
enum class Reduce { Sum, Mean, Max, Min };
/// Element types the device kernels convert between (Cast).
enum class Elem { F32, I64, I32, Bool };

/// y = f(x); `a`, `b`: alpha/beta (LeakyRelu/Elu alpha, HardSigmoid alpha
/// and beta, Clip min and max).
cudaError_t unary(Unary op, const float *x, float *y, int64_t n, float a, float b, cudaStream_t s);
/// out = a op b (float32), broadcast by `bc` (operands 0 and 1).
cudaError_t binary(Binary op, const float *a, const float *b, float *out, const Bcast &bc, cudaStream_t s);
/// out = a cmp b as bool bytes (0/1).
cudaError_t compare(Compare op, const float *a, const float *b, uint8_t *out, const Bcast &bc, cudaStream_t s);
/// out = !x on bool bytes.
cudaError_t logicalNot(const uint8_t *x, uint8_t *out, int64_t n, cudaStream_t s);
/// out = cond ? x : y for elements of `elemSize` bytes (1, 2, 4 or 8).
cudaError_t where(const uint8_t *cond, const void *x, const void *y, void *out, int elemSize,
                  const Bcast &bc, cudaStream_t s);
/// Cast between float32, int64, int32 and bool (float -> int saturates, NaN -> 0).
cudaError_t cast(Elem from, const void *x, Elem to, void *y, int64_t n, cudaStream_t s);
/// out[i] = src at the strided position of dense index i; elemSize 1, 2, 4 or 8.
cudaError_t stridedCopy(const void *src, void *out, int elemSize, const Strided &v, cudaStream_t s);
/// ONNX Gather along an axis: data viewed as [outer, d, inner], indices
/// (int64 or int32, negative counts from the end, clamped into range) of
/// count nIdx; out is [outer, nIdx, inner].
cudaError_t gather(const void *data, int elemSize, const void *idx, bool idx64, void *out, int64_t outer,
                   int64_t nIdx, int64_t d, int64_t inner, cudaStream_t s);
/// Softmax (or log-softmax) of x viewed as [outer, len, inner] along len.
cudaError_t softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, bool log,
                    cudaStream_t s);
/// Row reduction of x viewed as [rows, cols] into y[rows].
cudaError_t reduceRows(Reduce op, const float *x, float *y, int64_t rows, int64_t cols, cudaStream_t s);
/// LayerNormalization over rows of `cols`; scale/bias have `cols` elements
/// (bias may be null); mean/invStd (may be null) get one value per row.
cudaError_t layerNorm(const float *x, const float *scale, const float *bias, float *y, float *mean,
                      float *invStd, int64_t rows, int64_t cols, float eps, cudaStream_t s);
/// BatchNormalization (inference) of x viewed as [N, C, S].
cudaError_t batchNorm(const float *x, const float *scale, const float *bias, const float *mean,
                      const float *var, float *y, int64_t N, int64_t C, int64_t S, float eps, cudaStream_t s);
/// Max or average pooling of x [NC, in...] into y [NC, out...].
cudaError_t pool(bool isMax, const float *x, float *y, int64_t NC, const Window &w, bool countIncludePad,
                 cudaStream_t s);
/// im2col of one image x [C, in...] into col [C * prod(k), prod(out)].
cudaError_t im2col(const float *x, float *col, int64_t C, const Window &w, cudaStream_t s);
/// y[(n * M + m) * S + i] += bias[m].
cudaError_t addBias(float *y, const float *bias, int64_t N, int64_t M, int64_t S, cudaStream_t s);
/// LRN across channels of x viewed as [N, C, S].
cudaError_t lrn(const float *x, float *y, int64_t N, int64_t C, int64_t S, int64_t size, float alpha,
                float beta, float bias, cudaStream_t s);

// --- fused attention (CudaExecutor, cuDNN SDPA): float32 <-> half ---

/// out[i] = half (bf16: bfloat16) of src at the strided position of dense
/// index i, rounded to nearest and clamped to [-clamp, clamp] (masks of
/// -FLT_MAX stay finite).
cudaError_t toHalf(const float *src, void *out, bool bf16, const Strided &v, float clamp, cudaStream_t s);
/// out[i] = float of the half (bf16: bfloat16) src[i].
cudaError_t fromHalf(const void *src, float *out, bool bf16, int64_t n, cudaStream_t s);

// --- backward and the optimizers (CudaTraining.cpp), the CPU formulas -----

/// out[o] = scale * (sum of g over the positions of `red` from o's
/// position in `kept`): a gradient summed down to an input's shape. `kept`
/// walks the output (its dims, g's strides), `red` the summed dims (g's
/// strides; 1 elsewhere). Sums in double.
cudaError_t reduceSum(const float *g, float *out, const Strided &kept, const Strided &red, float scale,
                      cudaStream_t s);
enum class UnaryGrad {
  Neg, Sqrt, Exp, Log, Tanh, Sigmoid, Erf, Ramp, Reciprocal, Abs, Sin, Cos, Softplus, LeakyRelu, Elu, Gelu, GeluTanh
};
/// dx = dy * f'(x, y) in double; `x` or `y` may be null when f' does not
/// read it; `alpha`: LeakyRelu's and Elu's.
cudaError_t unaryGrad(UnaryGrad op, const float *x, const float *y, const float *dy, float *dx, int64_t n,
                      double alpha, cudaStream_t s);
/// a += b over n elements.
cudaError_t addInPlace(float *a, const float *b, int64_t n, cudaStream_t s);
/// Softmax (log: LogSoftmax) backward from the output y, [outer, len, inner] along len.
cudaError_t softmaxGrad(const float *y, const float *dy, float *dx, int64_t outer, int64_t len, int64_t inner,
                        bool log, cudaStream_t s);
/// LayerNormalization backward over rows of `cols`: each row's mean and
/// 1/std into mean/invStd (double, `rows` each); dX into `dx` when given
/// (`dy`, `dMean`, `dInv` may be null: no gradient there).
cudaError_t layerNormGrad(const float *x, const float *scale, const float *dy, const float *dMean, const float *dInv,
                          float *dx, double *mean, double *invStd, int64_t rows, int64_t cols, double eps,
                          cudaStream_t s);
/// dScale[j] = sum over rows of dy * xhat, dBias[j] = sum of dy (either may be null).
cudaError_t layerNormParamGrad(const float *x, const float *dy, const double *mean, const double *invStd,
                               float *dScale, float *dBias, int64_t rows, int64_t cols, cudaStream_t s);
/// Gather backward: dx [outer, d, inner] += dy [outer, nIdx, inner] at rows
/// idx[j] (int64, already in [0, d)), with atomicAdd (indices may repeat).
cudaError_t gatherGrad(const float *dy, const int64_t *idx, float *dx, int64_t outer, int64_t nIdx, int64_t d,
                       int64_t inner, cudaStream_t s);
/// One optimizer step's kind (runtime::Optimizer's order) and settings;
/// c1, c2: Adam's bias corrections 1 - beta^step.
struct OptimizerStep {
  enum Kind : int { SGD, Momentum, Adam, AdamW } kind = Adam;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0, momentum = 0, c1 = 1, c2 = 1;
};
/// One fused optimizer step over n elements in place (train::
/// optimizerUpdate's formulas, in double): `m` is the momentum buffer or
/// Adam's first moment (unused by SGD), `v` Adam's second moment (used by
/// Adam and AdamW only).
cudaError_t optimizer(float *param, const float *grad, float *m, float *v, int64_t n, const OptimizerStep &step,
                      cudaStream_t s);

} // namespace hetplan::runtime::cudak
