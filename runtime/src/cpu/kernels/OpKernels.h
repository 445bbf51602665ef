//===- OpKernels.h - what one op's kernel file offers the others -*- C++ -*-===//
//
// An op's CPU kernel file (MatMul.cpp, Conv.cpp, Normalization.cpp, Gather.cpp,
// Unary.cpp, ...) holds its forward kernel, its backward kernel and any
// load-time fusion keyed on it; the only place its op type is spelled. Code
// elsewhere that needs one of those kernels (the quantized variants in
// Quantize.cpp, a fused Conv's post-op) calls the functions declared here
// rather than looking the op up by name. Internal to hetplan_exec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Kernels.h"

#include <utility>
#include <vector>

namespace hetplan::runtime::cpu {

/// float32, float64 and the signed integers (Relu, Neg, PRelu).
extern const std::vector<DType> kSignedAndFloat;

/// Runs `kernel` on `inputs` with `c`'s node and opset; its output 0.
inline Tensor runKernelOn(void (*kernel)(KernelContext &), const KernelContext &c,
                          std::vector<const Tensor *> inputs) {
  KernelContext inner{c.node, c.opset, std::move(inputs), std::vector<Tensor>(1)};
  kernel(inner);
  return std::move(inner.outputs[0]);
}

/// A copy of the strided view (shape, element strides) of `src`'s bytes,
/// contiguous; a transposed innermost pair in 32x32 tiles, outer indices in
/// parallel (TensorOps.cpp: Transpose).
Tensor gatherStridedFast(const Tensor &src, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides);
/// `t` with plain bytes: a channels-last tensor (Tensor::channelsLast, made
/// by the Conv kernel) transposed back, any other as it is (Conv.cpp).
Tensor plainLayout(const Tensor &t);
/// `t` (float32, rank 3-5) with channels-last bytes.
Tensor channelsLastLayout(const Tensor &t);

// ---- forward registration, one function per kernel file (Executor.cpp
// calls them once; backward kernels register through train/GradUtil.h) ----
void registerElementwiseKernels();   // Elementwise.cpp (calls registerUnaryKernels)
void registerUnaryKernels();         // Unary.cpp
void registerElementwiseChainKernels(); // ElementwiseChain.cpp: fused elementwise chains (load-time rule, kernel)
void registerMatMulKernels();        // MatMul.cpp: MatMul, Gemm
void registerConvKernels();          // Conv.cpp: Conv and its load-time fusion (model/Fusion.h)
void registerNormalizationKernels(); // Normalization.cpp: LayerNormalization, Softmax, LogSoftmax, Hardmax
void registerLinalgKernels();        // Linalg.cpp: ConvTranspose, pooling, BatchNormalization, InstanceNormalization, LRN
void registerGatherKernels();        // Gather.cpp
void registerTensorKernels();        // TensorOps.cpp (+ Recurrent.cpp, ReduceOps.cpp, Resize.cpp)
void registerIndexingKernels();      // Indexing.cpp
void registerQuantKernels();         // Quantize.cpp
void registerSamplingKernels();      // Sampling.cpp (GridSample), Numerics.cpp (Det, DFT, MVN)
void registerContribKernels();       // Contrib.cpp: com.microsoft ops of onnxruntime-optimized models

// ---- MatMul.cpp ----
/// Throws unless `a` and `b` have rank >= 1 (the quantized MatMuls' check).
void requireMatMulOperands(const Tensor &a, const Tensor &b);
/// The float MatMul kernel on `a` and `b` (float32 or float64, one type),
/// with `c`'s node and opset.
Tensor runFloatMatMul(const KernelContext &c, const Tensor &a, const Tensor &b);

// ---- Conv.cpp ----
/// Throws unless the weight `w` has rank >= 3 (the quantized Convs' check).
void requireConvWeight(const Tensor &w);
/// The float Conv kernel on `x` and `w` (no bias), with `c`'s node (its
/// attributes) and opset.
Tensor runFloatConv(const KernelContext &c, const Tensor &x, const Tensor &w);


} // namespace hetplan::runtime::cpu
