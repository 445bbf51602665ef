//===- CublasLt.h - GEMMs with fused epilogues (cuBLASLt) --------*- C++ -*-===//
//
// Internal to runtime/src/cuda: the CUDA executor's MatMul/Gemm + bias
// (+ tanh-GELU) groups (CudaFusion.h) as one cublasLtMatmul with
// CUBLASLT_EPILOGUE_BIAS / CUBLASLT_EPILOGUE_GELU_BIAS (cuBLAS guide,
// "cuBLASLt API": cublasLtMatmul, cublasLtEpilogue_t). float32 A, B, bias
// and D; the compute type is the executor's GEMM math (CUBLAS_COMPUTE_32F
// is plain FP32 in cuBLASLt, the FAST_* types tensor cores).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <tuple>

namespace hetplan::runtime::cublaslt {

/// Row-major D[M, N] = epilogue(alpha op(A) op(B) + bias[N]), cpu::gemm's
/// arguments: op(A) is M x K, lda/ldb the stored matrices' row strides.
struct GemmBias {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.f;
  const float *A = nullptr;
  int64_t lda = 0;
  const float *B = nullptr;
  int64_t ldb = 0;
  const float *bias = nullptr; // N elements
  bool gelu = false;           // GELU (tanh approximation) after the bias
  float *D = nullptr;          // M x N, row stride N
};

/// A cuBLASLt handle and the algorithm heuristics chose per shape.
class Context {
public:
  Context();
  ~Context();
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;

  /// Runs `g` on `stream` with `compute`; `scratch` allocates the
  /// stream-ordered workspace. False, launching nothing, when cuBLASLt has
  /// no algorithm for it (heuristics return none, pointers not 256-byte
  /// aligned, sizes out of range); throws on other cuBLASLt errors.
  bool run(const GemmBias &g, cublasComputeType_t compute, cudaStream_t stream,
           const std::function<Tensor(size_t bytes)> &scratch);

private:
  cublasLtHandle_t handle_ = nullptr;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;
  struct Choice {
    bool ok = false;
    cublasLtMatmulHeuristicResult_t result{};
  };
  std::map<Key, Choice> choices_;
};

} // namespace hetplan::runtime::cublaslt
