//===- RankBackend.h - which device and communicator each rank gets -*- C++ -*-===//
//
// `hetplan run` and Session place every rank of a plan before it runs
// (docs/gpu.md): a rank the plan puts on an NVIDIA GPU computes on the CUDA
// executor when this build has it and a device is present, every other rank
// on the CPU Executor. Ranks talk over NCCL when each is a CUDA rank of its
// own MPI process and the build has NCCL; over MPI, host-staged, when a job
// mixes CPU and CUDA ranks (or GPU vendors); over threads within one
// process (one thread per rank; CUDA ranks share the visible GPUs). The
// decision is pure (no CUDA call), so it is tested without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_RANKBACKEND_H
#define HETPLAN_RUNTIME_RANKBACKEND_H

#include "hetplan/runtime/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// `hetplan run --device`: as the plan says where possible (auto), the CPU
/// for every rank (cpu), or the plan's GPU ranks on CUDA or an error (cuda).
enum class DeviceChoice { Auto, Cpu, Cuda };
/// "auto", "cpu" or "cuda"; anything else throws one line.
DeviceChoice parseDeviceChoice(const std::string &text);

/// What a rank's planned device is, from the plan's cluster (catalog names:
/// "CPU-..." hosts, AMD "MI..." parts, NVIDIA otherwise).
enum class Vendor { Cpu, Nvidia, Amd };
struct PlannedDevice {
  std::string type; // the catalog name, "CPU" when the plan lists none
  Vendor vendor = Vendor::Cpu;
};
PlannedDevice plannedDevice(const plan::Plan &plan, uint32_t rank);

/// What this process can run on.
struct LocalDevices {
  bool cudaBuilt = false; // the CUDA executor is compiled in
  bool ncclBuilt = false; // so is NcclCommunicator (CUDA, NCCL and MPI)
  int cudaDevices = 0;    // visible CUDA devices
  std::string whyNoCuda;  // "no CUDA device: ..." when none
};

enum class CommKind { Threads, Mpi, Nccl };
const char *commKindName(CommKind kind); // "threads", "MPI", "NCCL"

struct Placement {
  std::vector<bool> cuda;   // per rank: computes on the CUDA executor
  std::vector<int> device;  // per rank: its CUDA device, -1 on the CPU
  CommKind comm = CommKind::Threads;
  /// One line for the run log: "ranks 0-3 on CUDA (devices 0-1), NCCL".
  std::string summary;
};

/// Places every rank. `mpi`: one process per rank, this one running rank
/// `mpiRank` (only its entry counts, and only its errors are raised), on
/// GPU `localRank` modulo the node's devices; otherwise every rank is a
/// thread of this process and CUDA ranks take the visible GPUs in turn.
/// Throws one line when `choice` is cuda and a GPU rank cannot run on CUDA
/// here (no CUDA build, no device, an AMD part), naming the rank and
/// `--device cpu`. `comm` says NCCL when all ranks placed here are CUDA
/// ranks; an MPI job must then agree over its processes (mpiCommKind).
Placement placeRanks(const plan::Plan &plan, DeviceChoice choice, const LocalDevices &local, bool mpi,
                     int localRank = 0, int mpiRank = -1);
/// The communicator of an MPI job once its processes agreed: NCCL when
/// every process's rank is a CUDA rank and NCCL is built, else MPI.
CommKind mpiCommKind(bool allCudaEverywhere, const LocalDevices &local);

} // namespace hetplan::runtime

#endif
