//===- CpuDevices.cpp - the CPU host as a device --------------------------===//

#include "hetplan/runtime/Devices.h"

#include <fstream>
#include <thread>
#include <unistd.h>

namespace hetplan::runtime {

DeviceInfo cpuDevice() {
  DeviceInfo d{DeviceKind::Cpu, 0, "CPU", 0,
               int(std::thread::hardware_concurrency())};
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size())
        d.name = line.substr(colon + 2);
      break;
    }
  }
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0)
    d.memoryBytes = int64_t(pages) * pageSize;
  return d;
}

} // namespace hetplan::runtime
