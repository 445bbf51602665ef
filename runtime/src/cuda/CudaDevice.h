//===- CudaDevice.h - one GPU's stream, cuBLAS handle and memory -*- C++ -*-===//
//
// Internal to runtime/src/cuda: what the CUDA executor (forward) and the
// training kernels of a CUDA rank (CudaTraining.cpp: backward, Adam) share
// on one device: the device index, one non-blocking stream that every
// kernel, copy and cuBLAS call runs on (cublasSetStream), the cuBLAS handle
// and its GEMM math, and stream-ordered allocation (cudaMallocAsync /
// cudaFreeAsync on that stream). A device tensor is a Tensor view of device
// memory whose holder frees it on the stream.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include "CudaKernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime::cudart {

inline void cudaCheck(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void blasCheck(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(st));
}

inline int blasInt(int64_t v, const char *what) {
  if (v < 0 || v > INT_MAX)
    throw std::runtime_error(std::string(what) + ": dimension " + std::to_string(v) + " exceeds cuBLAS's int range");
  return static_cast<int>(v);
}

/// The operands `ins` (up to 3) broadcast to `out` for the kernels.
inline cudak::Bcast makeBcast(const std::vector<int64_t> &out, const std::vector<const std::vector<int64_t> *> &ins) {
  if (out.size() > size_t(cudak::kMaxRank))
    throw std::runtime_error("rank " + std::to_string(out.size()) + " exceeds the CUDA kernels' " + std::to_string(cudak::kMaxRank));
  cudak::Bcast b;
  b.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) b.shape[d] = out[d];
  for (size_t k = 0; k < ins.size(); ++k) {
    auto st = broadcastStrides(*ins[k], out);
    for (size_t d = 0; d < out.size(); ++d) b.stride[k][d] = st[d];
  }
  return b;
}
/// The strided view (shape, element strides, base offset) for the kernels.
inline cudak::Strided makeStrided(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t base) {
  if (shape.size() > size_t(cudak::kMaxRank))
    throw std::runtime_error("rank " + std::to_string(shape.size()) + " exceeds the CUDA kernels' " + std::to_string(cudak::kMaxRank));
  cudak::Strided v;
  v.rank = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) { v.shape[d] = shape[d]; v.stride[d] = strides[d]; }
  v.base = base;
  return v;
}

struct Device {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  /// GEMM math (CudaExecutor::setPrecision): CUBLAS_COMPUTE_32F is plain
  /// FP32 (no TF32 while the handle's math mode is CUBLAS_DEFAULT_MATH);
  /// the FAST_* types round the float32 operands to TF32 / FP16 / BF16 for
  /// tensor cores and accumulate in FP32 (cuBLAS guide, cublasGemmEx,
  /// cublasComputeType_t).
  cublasComputeType_t gemmCompute = CUBLAS_COMPUTE_32F;

  Tensor alloc(DType dt, const std::vector<int64_t> &shape) {
    for (int64_t d : shape)
      if (d < 0) throw std::runtime_error("negative dimension in shape " + shapeString(shape));
    size_t bytes = std::max<size_t>(size_t(shapeNumel(shape)) * dtypeSize(dt), 1);
    void *p = nullptr;
    cudaCheck(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync");
    cudaStream_t s = stream;
    std::shared_ptr<void> holder(p, [s](void *q) { cudaFreeAsync(q, s); });
    return Tensor::view(dt, shape, p, holder);
  }
  /// alloc, then zeros (cudaMemsetAsync).
  Tensor zeros(DType dt, const std::vector<int64_t> &shape) {
    Tensor d = alloc(dt, shape);
    if (d.nbytes()) cudaCheck(cudaMemsetAsync(d.raw(), 0, d.nbytes(), stream), "cudaMemsetAsync");
    return d;
  }
  Tensor upload(const Tensor &h) {
    Tensor d = alloc(h.dtype(), h.shape());
    if (h.nbytes())
      cudaCheck(cudaMemcpyAsync(d.raw(), h.raw(), h.nbytes(), cudaMemcpyHostToDevice, stream), "upload (cudaMemcpyAsync)");
    return d;
  }
  /// A host copy; waits for the stream.
  Tensor download(const Tensor &d) {
    Tensor h(d.dtype(), d.shape());
    if (d.nbytes())
      cudaCheck(cudaMemcpyAsync(h.raw(), d.raw(), d.nbytes(), cudaMemcpyDeviceToHost, stream), "download (cudaMemcpyAsync)");
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return h;
  }
  Tensor copyDevice(const Tensor &src) {
    Tensor d = alloc(src.dtype(), src.shape());
    if (src.nbytes())
      cudaCheck(cudaMemcpyAsync(d.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    return d;
  }

  /// Column-major C = op(A) op(B) on float32 with this device's math:
  /// cublasSgemm(StridedBatched)'s arguments through cublasGemm(StridedBatched)Ex.
  void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha, const float *A,
             int lda, const float *B, int ldb, const float *beta, float *C, int ldc) {
    blasCheck(cublasGemmEx(blas, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C, CUDA_R_32F,
                           ldc, gemmCompute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  }
  void sgemmBatched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                    const float *A, int lda, long long sa, const float *B, int ldb, long long sb, const float *beta,
                    float *C, int ldc, long long sc, int batch) {
    blasCheck(cublasGemmStridedBatchedEx(blas, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb,
                                         beta, C, CUDA_R_32F, ldc, sc, batch, gemmCompute, CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
  }
  /// Row-major C[M, N] = alpha op(A) op(B) + beta C (cpu::gemm's
  /// arguments: op(A) is M x K, lda/ldb/ldc row strides): the column-major
  /// C^T = op(B)^T op(A)^T, so cuBLAS gets B first with m = N, n = M.
  void rowGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    sgemm(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, blasInt(N, "GEMM"), blasInt(M, "GEMM"),
          blasInt(K, "GEMM"), &alpha, B, blasInt(ldb, "GEMM ldb"), A, blasInt(lda, "GEMM lda"), &beta, C,
          blasInt(ldc, "GEMM ldc"));
  }
  /// rowGemm over `batch` matrices strided by sA, sB, sC elements.
  void rowGemmBatched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                      int64_t sA, const float *B, int64_t ldb, int64_t sB, float beta, float *C, int64_t ldc,
                      int64_t sC, int64_t batch) {
    sgemmBatched(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, blasInt(N, "GEMM"),
                 blasInt(M, "GEMM"), blasInt(K, "GEMM"), &alpha, B, blasInt(ldb, "GEMM ldb"), sB, A,
                 blasInt(lda, "GEMM lda"), sA, &beta, C, blasInt(ldc, "GEMM ldc"), sC, blasInt(batch, "GEMM batch"));
  }
};

} // namespace hetplan::runtime::cudart
