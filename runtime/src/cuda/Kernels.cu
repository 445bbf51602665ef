//===- Kernels.cu - CUDA self-test kernel ---------------------------------===//
//
// The smallest real use of the CUDA build: a kernel launch with copies, so a
// GPU test can show that the toolchain, driver and device work together.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Devices.h"

#include <cuda_runtime.h>

namespace hetplan::runtime {
namespace {

__global__ void addKernel(const float *a, const float *b, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = a[i] + b[i];
}

bool check(cudaError_t err, const char *what, std::string &error) {
  if (err == cudaSuccess)
    return true;
  error = std::string(what) + ": " + cudaGetErrorString(err);
  return false;
}

} // namespace

bool cudaSelfTestAdd(int device, const std::vector<float> &a,
                     const std::vector<float> &b, std::vector<float> &out,
                     std::string &error) {
  if (a.size() != b.size()) {
    error = "inputs differ in size";
    return false;
  }
  int n = int(a.size());
  size_t bytes = size_t(n) * sizeof(float);
  float *da = nullptr, *db = nullptr, *dout = nullptr;
  bool ok = check(cudaSetDevice(device), "cudaSetDevice", error) &&
            check(cudaMalloc(&da, bytes), "cudaMalloc", error) &&
            check(cudaMalloc(&db, bytes), "cudaMalloc", error) &&
            check(cudaMalloc(&dout, bytes), "cudaMalloc", error) &&
            check(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), "copy a", error) &&
            check(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), "copy b", error);
  if (ok) {
    addKernel<<<(n + 255) / 256, 256>>>(da, db, dout, n);
    out.resize(n);
    ok = check(cudaGetLastError(), "kernel launch", error) &&
         check(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost), "copy out", error);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
  return ok;
}

} // namespace hetplan::runtime
