//===- RankBackend.cpp - which device and communicator each rank gets ------===//
#include "hetplan/runtime/RankBackend.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace hetplan::runtime {

DeviceChoice parseDeviceChoice(const std::string &text) {
  if (text == "auto" || text.empty()) return DeviceChoice::Auto;
  if (text == "cpu") return DeviceChoice::Cpu;
  if (text == "cuda" || text == "gpu") return DeviceChoice::Cuda;
  throw std::runtime_error("--device " + text + ": expected auto, cpu or cuda");
}

const char *commKindName(CommKind kind) {
  switch (kind) {
  case CommKind::Threads: return "threads";
  case CommKind::Mpi: return "MPI";
  case CommKind::Nccl: return "NCCL";
  }
  return "?";
}

PlannedDevice plannedDevice(const plan::Plan &plan, uint32_t rank) {
  PlannedDevice d;
  d.type = "CPU";
  for (const auto &dev : plan.cluster().devices())
    if (dev.rank() == rank) d.type = dev.type();
  std::string upper;
  for (char c : d.type) upper += char(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("CPU", 0) == 0) d.vendor = Vendor::Cpu;
  // The catalog's AMD parts (MI300X, MI250X, MI250X-GCD): "MI" and a digit.
  else if (upper.size() > 2 && upper.rfind("MI", 0) == 0 && std::isdigit(static_cast<unsigned char>(upper[2])))
    d.vendor = Vendor::Amd;
  else d.vendor = Vendor::Nvidia;
  return d;
}

CommKind mpiCommKind(bool allCudaEverywhere, const LocalDevices &local) {
  return allCudaEverywhere && local.ncclBuilt ? CommKind::Nccl : CommKind::Mpi;
}

namespace {
/// "0-3", "0, 2": sorted ranks as ranges.
std::string rankList(const std::vector<int> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}
} // namespace

Placement placeRanks(const plan::Plan &plan, DeviceChoice choice, const LocalDevices &local, bool mpi,
                     int localRank, int mpiRank) {
  const int R = plan.ranks_size();
  Placement p;
  p.cuda.assign(size_t(R), false);
  p.device.assign(size_t(R), -1);
  int cudaOrdinal = 0; // threads: CUDA ranks take the visible GPUs in turn
  std::vector<int> onCuda, onCpu;
  for (int r = 0; r < R; ++r) {
    // Under MPI a process uses its own rank's entry (its peers decide
    // theirs on their hosts); the others only feed the summary.
    PlannedDevice d = plannedDevice(plan, uint32_t(r));
    bool gpu = d.vendor != Vendor::Cpu;
    bool want = gpu && choice != DeviceChoice::Cpu;
    if (want && choice == DeviceChoice::Cuda && (!mpi || mpiRank < 0 || r == mpiRank)) {
      std::string at = "rank " + std::to_string(r) + " is planned on a " + d.type;
      if (d.vendor == Vendor::Amd)
        throw std::runtime_error(at + " (AMD): this runtime has no ROCm backend; run it on CPUs with --device cpu");
      if (!local.cudaBuilt)
        throw std::runtime_error(at + ", but this hetplan was built without CUDA; run it on CPUs with --device cpu");
      if (local.cudaDevices < 1)
        throw std::runtime_error(at + ", but " + (local.whyNoCuda.empty() ? "no CUDA device is present" : local.whyNoCuda) +
                                 "; run it on CPUs with --device cpu");
    }
    // auto: a GPU rank this process cannot serve runs on the CPU.
    bool cuda = want && d.vendor == Vendor::Nvidia && local.cudaBuilt && local.cudaDevices > 0;
    if (cuda) {
      p.cuda[size_t(r)] = true;
      p.device[size_t(r)] = (mpi ? localRank : cudaOrdinal++) % local.cudaDevices;
      onCuda.push_back(r);
    } else {
      onCpu.push_back(r);
    }
  }
  if (!mpi) p.comm = CommKind::Threads;
  else p.comm = mpiCommKind(onCpu.empty(), local);
  std::string devices;
  if (!onCuda.empty()) {
    int lo = p.device[size_t(onCuda.front())], hi = lo;
    for (int r : onCuda) {
      lo = std::min(lo, p.device[size_t(r)]);
      hi = std::max(hi, p.device[size_t(r)]);
    }
    devices = lo == hi ? " (device " + std::to_string(lo) + ")"
                       : " (devices " + std::to_string(lo) + "-" + std::to_string(hi) + ")";
  }
  if (!onCuda.empty()) p.summary = "ranks " + rankList(onCuda) + " on CUDA" + devices;
  if (!onCpu.empty()) p.summary += (p.summary.empty() ? "" : ", ") + std::string("ranks ") + rankList(onCpu) + " on CPU";
  p.summary += std::string(", ") + commKindName(p.comm);
  return p;
}

} // namespace hetplan::runtime
