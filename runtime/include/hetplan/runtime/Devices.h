//===- Devices.h - what devices this host has -------------------*- C++ -*-===//
//
// The runtime's view of the local machine: CPUs always, CUDA GPUs when the
// runtime was built with CUDA and a driver and device are present.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_DEVICES_H
#define HETPLAN_RUNTIME_DEVICES_H

#include <cstdint>
#include <string>
#include <vector>

namespace hetplan::runtime {

enum class DeviceKind { Cpu, Cuda };

struct DeviceInfo {
  DeviceKind kind;
  int index;               // ordinal among devices of its kind
  std::string name;        // e.g. "NVIDIA H200" or the CPU model name
  int64_t memoryBytes;     // device memory (host RAM for the CPU)
  int computeUnits;        // CPU threads or CUDA SMs
};

/// True when this build of the runtime includes the CUDA backend.
bool builtWithCuda();
/// True when this build includes the NCCL communicator.
bool builtWithNccl();

/// The CPU host as one device.
DeviceInfo cpuDevice();

/// CUDA devices visible to this process. Empty when the build has no CUDA or
/// no driver/device is present; `whyNone` then says which.
std::vector<DeviceInfo> cudaDevices(std::string *whyNone = nullptr);

/// Every device: the CPU host first, then CUDA devices.
std::vector<DeviceInfo> enumerateDevices();

/// Adds `a` and `b` element-wise on CUDA device `device` (a self-test of the
/// CUDA build: kernel launch and copies). Returns false with `error` set when
/// there is no CUDA device or a CUDA call fails.
bool cudaSelfTestAdd(int device, const std::vector<float> &a,
                     const std::vector<float> &b, std::vector<float> &out,
                     std::string &error);

} // namespace hetplan::runtime

#endif
