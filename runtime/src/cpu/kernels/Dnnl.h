//===- Dnnl.h - oneDNN primitives for the CPU kernels -----------*- C++ -*-===//
//
// Only with HETPLAN_HAVE_DNNL (oneDNN found at configure time). One shared
// CPU engine; each call makes its own stream and scratchpad (user scratchpad
// mode), so primitives, which are cached by shape and attributes, run
// concurrently from any number of threads. Threads: oneDNN's OpenMP runtime,
// OMP_NUM_THREADS.
#pragma once

#include <cstdint>
#include <vector>

namespace hetplan::runtime::cpu::onednn {

/// Weights of at most this many values are compared value for value against
/// their cached reordered copy, so a key may be passed for them even when
/// they are mutable (the model loader copies initializers under 4 KiB).
constexpr int64_t kExactWeights = 1024;

/// Convolution geometry (ONNX Conv after auto_pad resolution). Spatial rank
/// 1 to 3. x: [N, C, spatial...], w: [M, C/group, kernel...], y: [N, M, out...].
struct ConvShape {
  std::vector<int64_t> x, w, y, stride, dil, padBegin, padEnd;
  int64_t group = 1;
  /// Post-ops (load-time fusion, Executor): y = relu?(conv + bias (+ sum)).
  bool postSum = false, postRelu = false;
  /// Then one eltwise function (an EwEltwise::Kind of ElementwiseChain.h,
  /// 0: none) with its alpha and beta.
  int64_t postEltwise = 0;
  float postAlpha = 0, postBeta = 0;
  /// x (and sum) / y bytes channels-last (N, spatial..., C) instead of plain.
  bool xChannelsLast = false, yChannelsLast = false;
};

/// y = conv(x, w) + bias (bias may be null), float32, plain NC... layouts;
/// with s.postSum, + sum (same shape and layout as y); with s.postRelu,
/// max(0, .) last.
/// Returns false (and writes nothing) when oneDNN takes no such convolution.
/// `weightsKey` identifies immutable weights across calls (the node; the
/// weights are a view of the model file): their reordered (blocked) copy is
/// cached for it, and checked against a sample of the weight values on every
/// call (against all of them when there are at most kExactWeights). Null for
/// larger weights that may change in place (trained parameters): reordered
/// on every call.
bool conv(const ConvShape &s, const float *x, const float *w, const float *bias, float *y, const void *weightsKey,
          const float *sum = nullptr);

/// ConvTranspose: y = deconv(x, w) + bias (bias may be null), float32, plain
/// layouts. s.w is ONNX's ConvTranspose weight shape [C, M/group, k...];
/// s.padBegin/padEnd are what oneDNN takes: y's spatial size is
/// stride*(x-1) + (k-1)*dil + 1 - padBegin - padEnd (ONNX's output_padding
/// and output_shape folded into padEnd by the caller; negative pads are
/// refused). Weights cached per `weightsKey` as for conv(). Returns false
/// (and writes nothing) when oneDNN takes no such deconvolution.
bool deconv(const ConvShape &s, const float *x, const float *w, const float *bias, float *y,
            const void *weightsKey);

/// y[M, N] = x[M, K] * w[K, N], float32, row-major, for immutable weights
/// (a view of the model file): a matmul primitive cached by (M, K, N), and w
/// reordered once into the primitive's preferred (packed) layout, cached per
/// `weightsKey` (the node) and checked against w's address and a sample of
/// its values on every call. Returns false (and writes nothing) when oneDNN
/// takes no such matmul.
bool matmulConstWeights(int64_t M, int64_t K, int64_t N, const float *x, const float *w, float *y,
                        const void *weightsKey);

/// Pooling geometry: x [N, C, spatial...] (spatial rank 1 to 3), y [N, C, out...].
struct PoolShape {
  std::vector<int64_t> x, y, kernel, stride, padBegin, padEnd;
  bool channelsLast = false; // x and y bytes channels-last (Tensor::channelsLast)
};
enum class PoolKind { Max, AvgIncludePad, AvgExcludePad };

/// y = pool(x), float32, plain layouts. Returns false when oneDNN takes no
/// such pooling (the caller then runs its own loop).
bool pool(const PoolShape &s, PoolKind kind, const float *x, float *y);

} // namespace hetplan::runtime::cpu::onednn
