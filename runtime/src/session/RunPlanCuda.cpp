//===- RunPlanCuda.cpp - a plan's GPU ranks on the CUDA executor ----------===//
//
// placeCudaRanks, hostCudaDevices and placeMpiRank (RunPlan.h): what needs
// the CUDA executor and NcclCommunicator, linked by hetplan_embed and
// libhetplan, not by hetplan_exec.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/RunPlan.h"
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
#include "hetplan/runtime/CudaBackend.h"
#endif
#if defined(HETPLAN_HAVE_NCCL_COMMUNICATOR) && HETPLAN_HAVE_NCCL_COMMUNICATOR
#include "hetplan/runtime/NcclCommunicator.h"
#endif

#include <cstdlib>

namespace hetplan::runtime {

void placeCudaRanks(PlanExecutor &exec, Placement &placement, int rank, bool uploadWeights,
                    const std::function<void(int, const std::vector<std::string> &)> &refused) {
  for (int r = 0; r < exec.ranks(); ++r) {
    if ((rank >= 0 && r != rank) || !placement.cuda[size_t(r)]) continue;
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
    const auto &st = exec.plan().stages(int(exec.plan().ranks(r).stage()));
    std::vector<size_t> nodes;
    for (size_t i = st.first_node(); i <= st.last_node(); ++i) nodes.push_back(i);
    std::vector<std::string> problems;
    auto compute = makeCudaRankCompute(exec.model(), placement.device[size_t(r)], uploadWeights,
                                       exec.plan().settings().dtype(), &nodes, &problems);
    if (!compute) {
      refused(r, problems);
      placement.cuda[size_t(r)] = false;
      placement.device[size_t(r)] = -1;
      continue;
    }
    exec.setCompute(r, std::move(compute));
#else
    (void)uploadWeights, (void)refused;
#endif
  }
}

LocalDevices hostCudaDevices() {
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
  return cudaLocalDevices();
#else
  return {};
#endif
}

namespace {
/// This process's rank among the processes of its node, from the launcher
/// (Open MPI, MPICH/Hydra, Slurm); 0 when none says.
int localRankFromEnv() {
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *v = std::getenv(var)) return std::atoi(v);
  return 0;
}
} // namespace

Communicator &placeMpiRank(PlanExecutor &exec, Communicator &mpi, const MpiRankPlacing &placing,
                           std::unique_ptr<Communicator> &holder) {
  LocalDevices local = hostCudaDevices();
  Placement placement = placeRanks(exec.plan(), placing.device, local, true, localRankFromEnv(), mpi.rank());
  placeCudaRanks(exec, placement, mpi.rank(), true, placing.refused);
  // Each process votes for its own rank: NCCL only if all are CUDA ranks.
  // HETPLAN_NCCL=0 keeps CUDA ranks on host-staged MPI (NCCL refuses two
  // ranks on one GPU; scripts/gpu-check.sh runs such a job on one device).
  bool mine = placement.cuda[size_t(mpi.rank())];
  const char *ncclEnv = std::getenv("HETPLAN_NCCL");
  bool ncclOff = ncclEnv && std::string(ncclEnv) == "0";
  Tensor votes = Tensor::scalar<float>(DType::Float32, mine && !ncclOff ? 1.f : 0.f).reshaped({1});
  mpi.allReduceSum(votes);
  placement.comm = mpiCommKind(votes.data<float>()[0] == float(mpi.size()), local);
  if (mine) { // rank 0 speaks for the job; the summary's other entries are this host's view
    placement.summary = "rank " + std::to_string(mpi.rank()) + " on CUDA (device " +
                        std::to_string(placement.device[size_t(mpi.rank())]) + "), " + commKindName(placement.comm);
  }
  if (mpi.rank() == 0 && placing.placed) placing.placed(placement);
#if defined(HETPLAN_HAVE_NCCL_COMMUNICATOR) && HETPLAN_HAVE_NCCL_COMMUNICATOR
  if (placement.comm == CommKind::Nccl) {
    holder = std::make_unique<NcclCommunicator>();
    return *holder;
  }
#endif
  (void)holder;
  return mpi;
}

} // namespace hetplan::runtime
