//===- CudaGemmBench.cpp - the CUDA executor's GEMMs against raw cuBLAS ----===//
//
//   hetplan-cuda-gemm-bench [--size N] [--layers L] [--min-ratio R]
//
// A GEMM-bound model (L chained MatMuls of N x N weights on N rows) run by
// CudaExecutor at each precision; its MatMul times (CUDA events, the
// executor's ExecutionObserver) against cublasGemmEx on device buffers of
// the same shapes and compute type, the best cuBLAS does here. Prints one
// line per precision: TFLOP/s of both and their ratio. Exit 1 when a ratio
// is below --min-ratio (default 0.8), 2 on error; prints "skipped: ..."
// and exits 0 without a device (scripts/gpu-check.sh).
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/CudaBackend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

using namespace hetplan::runtime;

namespace {

void cuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void blas(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(s));
}

/// x -> MatMul(w0) -> ... -> MatMul(w{L-1}) -> y, x [n, n], weights [n, n].
Model chain(int64_t n, int layers) {
  Model m;
  m.path = "gemm-bench";
  m.opsets[""] = 17;
  m.inputs.push_back({});
  m.inputs.back().name = "x";
  m.inputs.back().dtype = DType::Float32;
  m.inputs.back().shape = {n, n};
  m.inputs.back().hasShape = true;
  m.valueTypes["x"] = DType::Float32;
  std::string prev = "x";
  for (int l = 0; l < layers; ++l) {
    std::string w = "w" + std::to_string(l), y = l + 1 == layers ? "y" : "h" + std::to_string(l);
    Tensor t(DType::Float32, {n, n});
    float *p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = float((i * 7919) % 13 - 6) / (6.f * float(n));
    m.initializers[w] = t;
    Node node;
    node.opType = "MatMul";
    node.name = "matmul" + std::to_string(l);
    node.inputs = {prev, w};
    node.outputs = {y};
    m.nodes.push_back(node);
    m.valueTypes[y] = DType::Float32;
    prev = y;
  }
  m.outputs.push_back({});
  m.outputs.back().name = "y";
  m.outputs.back().dtype = DType::Float32;
  return m;
}

struct NodeTimes : ExecutionObserver {
  double seconds = 0;
  void nodeRan(size_t, double s) override { seconds += s; }
};

/// Seconds of `reps` cublasGemmEx calls of n x n x n at `compute`, best of 3.
double cublasSeconds(int n, cublasComputeType_t compute, int reps) {
  cublasHandle_t h;
  blas(cublasCreate(&h), "cublasCreate");
  size_t bytes = size_t(n) * size_t(n) * sizeof(float);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cuda(cudaMalloc(&a, bytes), "cudaMalloc");
  cuda(cudaMalloc(&b, bytes), "cudaMalloc");
  cuda(cudaMalloc(&c, bytes), "cudaMalloc");
  cuda(cudaMemset(a, 0, bytes), "cudaMemset");
  cuda(cudaMemset(b, 0, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  cuda(cudaEventCreate(&e0), "cudaEventCreate");
  cuda(cudaEventCreate(&e1), "cudaEventCreate");
  const float one = 1.f, zero = 0.f;
  double best = 1e30;
  for (int round = 0; round < 4; ++round) { // the first warms up
    cuda(cudaEventRecord(e0), "cudaEventRecord");
    for (int i = 0; i < reps; ++i)
      blas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, CUDA_R_32F, n, a, CUDA_R_32F, n, &zero, c,
                        CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT),
           "cublasGemmEx");
    cuda(cudaEventRecord(e1), "cudaEventRecord");
    cuda(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (round > 0) best = std::min(best, double(ms) * 1e-3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cublasDestroy(h);
  return best;
}

} // namespace

int main(int argc, char **argv) {
  int n = 8192, layers = 8;
  double minRatio = 0.8;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) n = std::atoi(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) layers = std::atoi(argv[++i]);
    else if (a == "--min-ratio" && i + 1 < argc) minRatio = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--size N] [--layers L] [--min-ratio R]\n", argv[0]);
      return 2;
    }
  }
  std::string why;
  if (!cudaDeviceAvailable(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 0;
  }
  try {
    Model m = chain(n, layers);
    Tensor x(DType::Float32, {int64_t(n), int64_t(n)});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 17) / 17.f;
    std::vector<size_t> nodes;
    for (size_t i = 0; i < m.nodes.size(); ++i) nodes.push_back(i);
    const double flops = 2.0 * double(n) * double(n) * double(n) * layers;
    struct Row {
      const char *name;
      cublasComputeType_t compute;
    };
    const Row rows[] = {{"fp32", CUBLAS_COMPUTE_32F},
                        {"tf32", CUBLAS_COMPUTE_32F_FAST_TF32},
                        {"fp16", CUBLAS_COMPUTE_32F_FAST_16F},
                        {"bf16", CUBLAS_COMPUTE_32F_FAST_16BF}};
    bool ok = true;
    std::printf("%-6s %12s %12s %8s\n", "math", "hetplan_TF/s", "cublas_TF/s", "ratio");
    for (const Row &r : rows) {
      CudaExecutor exec(m);
      exec.setPrecision(r.name);
      exec.prepare();
      double best = 1e30;
      for (int round = 0; round < 4; ++round) { // the first warms up
        NodeTimes t;
        exec.runNodes(nodes, {{"x", x}}, {"y"}, nullptr, &t);
        if (round > 0) best = std::min(best, t.seconds);
      }
      double ours = flops / best * 1e-12;
      double ref = 2.0 * double(n) * n * n * layers / cublasSeconds(n, r.compute, layers) * 1e-12;
      double ratio = ours / ref;
      std::printf("%-6s %12.1f %12.1f %8.2f\n", r.name, ours, ref, ratio);
      ok = ok && ratio >= minRatio;
    }
    return ok ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "hetplan-cuda-gemm-bench: %s\n", e.what());
    return 2;
  }
}
