//===- Gemm.cpp - GEMM through oneDNN, OpenBLAS or a naive loop -----------===//
#include "Gemm.h"

#include <stdexcept>
#include <string>
#include <type_traits>

#ifdef HETPLAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef HETPLAN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace hetplan::runtime::cpu {

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
          const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) { // C = beta * C (libraries differ on K = 0)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
#ifdef HETPLAN_HAVE_DNNL
  if constexpr (std::is_same_v<T, float>) {
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
      throw std::runtime_error("dnnl_sgemm failed (status " + std::to_string(static_cast<int>(st)) + ")");
    return;
  }
#endif
#ifdef HETPLAN_HAVE_CBLAS
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  } else if constexpr (std::is_same_v<T, double>) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(ta ? A[k * lda + i] : A[i * lda + k]) *
               static_cast<double>(tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0 : static_cast<double>(beta) * C[i * ldc + j]));
    }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                          int64_t, float, float *, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double *, int64_t,
                           const double *, int64_t, double, double *, int64_t);

const char *gemmBackend() {
#if defined(HETPLAN_HAVE_DNNL)
  return "oneDNN";
#elif defined(HETPLAN_HAVE_CBLAS)
  return "OpenBLAS";
#else
  return "naive";
#endif
}

} // namespace hetplan::runtime::cpu
