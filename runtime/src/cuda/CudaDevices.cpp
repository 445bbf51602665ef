//===- CudaDevices.cpp - CUDA devices through the runtime API -------------===//

#include "hetplan/runtime/Devices.h"

#include <cuda_runtime_api.h>

namespace hetplan::runtime {

std::vector<DeviceInfo> cudaDevices(std::string *whyNone) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (whyNone)
      *whyNone = err != cudaSuccess ? std::string("CUDA: ") + cudaGetErrorString(err)
                                    : std::string("CUDA: no device found");
    cudaGetLastError(); // clear the sticky error for later calls
    return {};
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
      continue;
    devices.push_back({DeviceKind::Cuda, i, prop.name,
                       int64_t(prop.totalGlobalMem), prop.multiProcessorCount});
  }
  return devices;
}

} // namespace hetplan::runtime
