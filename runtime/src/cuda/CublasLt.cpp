//===- CublasLt.cpp - GEMMs with fused epilogues (cuBLASLt) ----------------===//
//
// Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T, as in
// Device::rowGemm: cuBLASLt's A is our B (N x K after its op) and its B our
// A, D is N x M with leading dimension N, and the bias vector (length = D's
// rows, N) is broadcast over D's columns: bias[n] is added to every row-
// major row's column n, ONNX's Add of a [N] bias. Layouts describe the
// stored matrices before their op (cublasLtMatrixLayoutCreate: rows, cols,
// ld). The heuristic's choice is cached per shape and math; beta is 0 and
// C aliases D (cublasLtMatmul permits C == D with the same layout).
//
//===----------------------------------------------------------------------===//
#include "CublasLt.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace hetplan::runtime::cublaslt {

namespace {

void check(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(st));
}

struct OpDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~OpDesc() { if (d) cublasLtMatmulDescDestroy(d); }
  template <typename T> void set(cublasLtMatmulDescAttributes_t a, const T &v) {
    check(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(T)), "cublasLtMatmulDescSetAttribute");
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout(uint64_t rows, uint64_t cols, int64_t ld) {
    check(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  }
  ~Layout() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  Preference() { check(cublasLtMatmulPreferenceCreate(&d), "cublasLtMatmulPreferenceCreate"); }
  ~Preference() { if (d) cublasLtMatmulPreferenceDestroy(d); }
};

/// The most workspace a GEMM may take (cuBLAS guide recommends 32 MiB on Hopper).
constexpr uint64_t kMaxWorkspace = 32ull << 20;

bool aligned(const void *p) { return reinterpret_cast<uintptr_t>(p) % 256 == 0; }

} // namespace

Context::Context() { check(cublasLtCreate(&handle_), "cublasLtCreate"); }
Context::~Context() { cublasLtDestroy(handle_); }

bool Context::run(const GemmBias &g, cublasComputeType_t compute, cudaStream_t stream,
                  const std::function<Tensor(size_t bytes)> &scratch) {
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.lda <= 0 || g.ldb <= 0) return false;
  // cuBLASLt's default preferences assume 256-byte aligned A, B, C, D
  // (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES); the bias is read as a vector.
  if (!aligned(g.A) || !aligned(g.B) || !aligned(g.D) || !aligned(g.bias)) return false;
  OpDesc op;
  check(cublasLtMatmulDescCreate(&op.d, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  cublasOperation_t transa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, transb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  op.set(CUBLASLT_MATMUL_DESC_TRANSA, transa);
  op.set(CUBLASLT_MATMUL_DESC_TRANSB, transb);
  cublasLtEpilogue_t epi = g.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  op.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  const void *bias = g.bias;
  op.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  Layout a(g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.ldb); // our B, stored row-major = column-major transposed
  Layout b(g.ta ? g.M : g.K, g.ta ? g.K : g.M, g.lda); // our A
  Layout d(g.N, g.M, g.N);
  Key key{g.ta, g.tb, g.M, g.N, g.K, g.lda, g.ldb, g.gelu, int(compute)};
  auto it = choices_.find(key);
  if (it == choices_.end()) {
    Choice c;
    Preference pref;
    uint64_t ws = kMaxWorkspace;
    check(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
          "cublasLtMatmulPreferenceSetAttribute");
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, op.d, a.d, b.d, d.d, d.d, pref.d, 1, &c.result, &found);
    c.ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && c.result.state == CUBLAS_STATUS_SUCCESS;
    it = choices_.emplace(key, c).first;
  }
  if (!it->second.ok) return false;
  const cublasLtMatmulHeuristicResult_t &r = it->second.result;
  Tensor work;
  if (r.workspaceSize) work = scratch(r.workspaceSize);
  const float beta = 0.f;
  check(cublasLtMatmul(handle_, op.d, &g.alpha, g.B, a.d, g.A, b.d, &beta, g.D, d.d, g.D, d.d, &r.algo,
                       work.defined() ? work.raw() : nullptr, r.workspaceSize, stream),
        "cublasLtMatmul");
  return true;
}

} // namespace hetplan::runtime::cublaslt
