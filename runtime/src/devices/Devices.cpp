//===- Devices.cpp - what devices this host has ---------------------------===//

#include "hetplan/runtime/Devices.h"

namespace hetplan::runtime {

bool builtWithCuda() {
#ifdef HETPLAN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool builtWithNccl() {
#ifdef HETPLAN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

#ifndef HETPLAN_HAVE_CUDA
std::vector<DeviceInfo> cudaDevices(std::string *whyNone) {
  if (whyNone)
    *whyNone = "this runtime was built without CUDA";
  return {};
}

bool cudaSelfTestAdd(int, const std::vector<float> &, const std::vector<float> &,
                     std::vector<float> &, std::string &error) {
  error = "this runtime was built without CUDA";
  return false;
}
#endif

std::vector<DeviceInfo> enumerateDevices() {
  std::vector<DeviceInfo> devices{cpuDevice()};
  for (DeviceInfo &d : cudaDevices())
    devices.push_back(std::move(d));
  return devices;
}

} // namespace hetplan::runtime
