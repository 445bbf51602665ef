//===- Gemm.cpp - GEMM through oneDNN, OpenBLAS or a naive loop -----------===//
#include "Gemm.h"

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#ifdef HETPLAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef HETPLAN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace hetplan::runtime::cpu {

namespace {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define HP_GEMM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HP_GEMM_CLONES
#endif

/// Small float32 GEMM in one thread, no library call: for the many tiny
/// products of small models (a [24, 32] x [32, 32] projection costs ~1 us of
/// arithmetic, several us of oneDNN call overhead). Row i of C is
/// accumulated as sum_k A(i,k) * B(k, :) (vectorised over the columns);
/// a transposed B is first transposed into `bt` (K x N).
HP_GEMM_CLONES void smallSgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                               float *acc, float *bt) {
  if (N < 16 && !ta) {
    // Few columns (matrix-vector products, e.g. MoE experts): dot products
    // of A's rows with B's columns (transposed into `bt` as N x K unless B
    // is already transposed), 16 independent partial sums per dot.
    const float *bc = B;
    int64_t ldbc = ldb;
    if (!tb) {
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) bt[j * K + k] = B[k * ldb + j];
      bc = bt;
      ldbc = K;
    }
    for (int64_t i = 0; i < M; ++i) {
      const float *a = A + i * lda;
      for (int64_t j = 0; j < N; ++j) {
        const float *b = bc + j * ldbc;
        float part[16] = {0.f};
        int64_t k = 0;
        for (; k + 16 <= K; k += 16)
          for (int l = 0; l < 16; ++l) part[l] += a[k + l] * b[k + l];
        float sum = 0.f;
        for (; k < K; ++k) sum += a[k] * b[k];
        for (int l = 0; l < 16; ++l) sum += part[l];
        float *c = C + i * ldc + j;
        *c = beta == 0.f ? alpha * sum : alpha * sum + beta * *c;
      }
    }
    return;
  }
  if (tb) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) bt[k * N + j] = B[j * ldb + k];
    B = bt;
    ldb = N;
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) acc[j] = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      float a = ta ? A[k * lda + i] : A[i * lda + k];
      const float *b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) acc[j] += a * b[j];
    }
    float *c = C + i * ldc;
    if (beta == 0.f)
      for (int64_t j = 0; j < N; ++j) c[j] = alpha * acc[j];
    else
      for (int64_t j = 0; j < N; ++j) c[j] = alpha * acc[j] + beta * c[j];
  }
}
} // namespace

bool isSmallGemm(int64_t M, int64_t N, int64_t K) {
  return M > 0 && N > 0 && K > 0 && N <= 4096 && K * N <= (int64_t(1) << 16) && M * N * K <= (int64_t(1) << 17);
}

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda,
          const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) { // C = beta * C (libraries differ on K = 0)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (isSmallGemm(M, N, K)) {
      thread_local std::vector<float> acc, bt;
      if (acc.size() < static_cast<size_t>(N)) acc.resize(N);
      if (bt.size() < static_cast<size_t>(K * N)) bt.resize(K * N);
      smallSgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, acc.data(), bt.data());
      return;
    }
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
