//===- Gemm.h - the one GEMM the CPU kernels call ---------------*- C++ -*-===//
//
// C[MxN] = alpha * op(A) * op(B) + beta * C, row-major. float32 goes to
// oneDNN's dnnl_sgemm when the build found oneDNN (HETPLAN_HAVE_DNNL: JIT
// kernels for the host ISA, OpenMP threads = OMP_NUM_THREADS), else to
// OpenBLAS's cblas_sgemm (HETPLAN_HAVE_CBLAS), else to a naive loop. float64
// goes to cblas_dgemm or the naive loop. Safe to call from many threads at
// once.
#pragma once

#include <cstdint>

namespace hetplan::runtime::cpu {

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
          const T *B, int64_t ldb, T beta, T *C, int64_t ldc);

extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t,
                                 const float *, int64_t, float, float *, int64_t);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double *, int64_t,
                                  const double *, int64_t, double, double *, int64_t);

/// Whether gemm<float> runs an M x N x K product with its own small
/// single-threaded loop (no library call; tiny products of small models).
bool isSmallGemm(int64_t M, int64_t N, int64_t K);

/// Which library runs float32 GEMM: "oneDNN", "OpenBLAS" or "naive".
const char *gemmBackend();

} // namespace hetplan::runtime::cpu
