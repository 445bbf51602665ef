//===- RunPlan.h - running a plan's step on its ranks ------------*- C++ -*-===//
//
// What PlanExecutor, `hetplan run` and Session share to run a plan: its
// ranks as threads of this process, putting the ranks that placeRanks
// (RankBackend.h) puts on CUDA on the CUDA executor, and, when the ranks
// are the processes of an MPI job (each runs its own rank,
// PlanExecutor::runRank), gathering the pieces of the graph outputs to where
// they are assembled (PlanExecutor::gatherOutputs); and a training plan's
// optimizer steps, on threads or on the processes of an MPI job
// (trainPlanSteps). `hetplan run` only parses, reads, calls these and
// writes; what it prints comes through the callbacks.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_RUNPLAN_H
#define HETPLAN_RUNTIME_RUNPLAN_H

#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/RankBackend.h"
#include "hetplan/runtime/Rebalance.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// How the threads of runRankThreads ended: the message of the first rank
/// that failed (and the rank), else that of a rank the failure aborted
/// (CommAborted, `aborted`); all empty when every rank finished.
struct RankThreadsOutcome {
  std::string firstError;
  int firstRank = -1;
  std::string abortError;
  bool aborted = false;
};
/// Runs `body(comm)` for ranks 0..ranks-1, one thread each, over a fresh
/// ThreadCommGroup. A rank's error aborts the group (the others then throw
/// CommAborted); nothing is rethrown: the outcome says what happened.
RankThreadsOutcome runRankThreads(int ranks, const std::function<void(Communicator &)> &body);

/// Message tags for gathering after a step: above the pipeline's tags
/// (below 2^29) and below the tensor-parallel ones (2^29 + 2^20).
constexpr int64_t kGatherTagBase = int64_t(1) << 29;

/// Moves every rank's pieces of the graph outputs (`mine`: what
/// PlanExecutor::runRank returned on this rank) to rank `root`, or to every
/// rank when `root` < 0, under message tag `tag`. Returns one entry per
/// rank where the pieces arrive (assemble them with
/// PlanExecutor::gatherOutputs), an empty list on the other ranks. Every
/// rank of `comm` must call it. The all-gather ends with a barrier, so the
/// next call may reuse the tag; a rank that only sends should flush its
/// communicator before it exits.
std::vector<PlanExecutor::OutputPieces> gatherOutputPieces(Communicator &comm, PlanExecutor::OutputPieces mine,
                                                           int root, int64_t tag);

/// Gives each rank that `placement` puts on CUDA (only `rank` when >= 0:
/// an MPI process's own) the CUDA executor, computing at the plan's dtype
/// (makeCudaRankCompute, CudaBackend.h; `uploadWeights`: now, else on first
/// use). A rank whose stage it cannot run goes to `refused` with the
/// problems found (one line each, at least one): `refused` throws to stop,
/// or returns to leave the rank on the CPU (its placement entries then say
/// so). Nothing to do in a build without the CUDA executor. Defined in
/// hetplan_embed (RunPlanCuda.cpp), which links the CUDA executor.
void placeCudaRanks(PlanExecutor &exec, Placement &placement, int rank, bool uploadWeights,
                    const std::function<void(int rank, const std::vector<std::string> &problems)> &refused);


/// placeCudaRanks's `refused`.
using CudaRefusedFn = std::function<void(int rank, const std::vector<std::string> &problems)>;

/// This host's CUDA devices (cudaLocalDevices, CudaBackend.h); none in a
/// build without the CUDA executor. Defined in hetplan_embed.
LocalDevices hostCudaDevices();

/// How an MPI process places its own rank (placeMpiRank): the device
/// choice, placeCudaRanks's `refused`, and `placed`, called on rank 0 with
/// the job's placement once the processes agreed on the communicator.
struct MpiRankPlacing {
  DeviceChoice device = DeviceChoice::Auto;
  CudaRefusedFn refused;
  std::function<void(const Placement &)> placed;
};

/// One process per rank: places this process's rank (`mpi`.rank(); the
/// launcher's environment says its rank on the node), gives it the CUDA
/// executor where the placement says so, and agrees with the other
/// processes on the program's communicator: NCCL only when every rank
/// everywhere is a CUDA rank and HETPLAN_NCCL is not 0. Returns `mpi`
/// itself or a NcclCommunicator made in `holder` (reset it before moving
/// results over `mpi`: its pending transfers complete). Every rank calls it.
/// Defined in hetplan_embed.
Communicator &placeMpiRank(PlanExecutor &exec, Communicator &mpi, const MpiRankPlacing &placing,
                           std::unique_ptr<Communicator> &holder);

/// Moves every rank's measured times (`mine`, and its wall time `wall`) to
/// rank 0, which fills `all` (one entry per rank; the wall time is the
/// slowest rank's). Every rank of `comm` calls it, under message tag `tag`.
void gatherRankTiming(Communicator &comm, const PlanExecutor::RankTiming &mine, double wall,
                      PlanExecutor::StepTiming &all, int64_t tag);

/// One MPI process's rank of an inference plan's step (`mpi`: the job's
/// world): placed by placeMpiRank, run, and the graph outputs gathered to
/// rank 0 (and, with `timing`, the measured times: gatherRankTiming).
/// Returns the outputs on rank 0, nothing on the others (flush `mpi` there
/// before exiting). Throws on this rank's error: abort `mpi` then.
/// Defined in hetplan_embed.
std::map<std::string, Tensor> runPlanRank(PlanExecutor &exec, Communicator &mpi,
                                          const std::map<std::string, Tensor> &inputs,
                                          const MpiRankPlacing &placing, PlanExecutor::StepTiming *timing);

/// A training plan's optimizer steps on one batch (trainPlanSteps).
struct TrainPlanOptions {
  int steps = 1;
  PlanExecutor::TrainOptions train;
  /// The last step is timed into it (under MPI: gathered on rank 0).
  PlanExecutor::StepTiming *timing = nullptr;
  /// Under MPI: gather the trained parameters to rank 0 (a collective step
  /// of its own; on threads they are always collected).
  bool gatherParameters = true;
  /// After each step with its loss, on the process that reports (rank 0
  /// under MPI).
  std::function<void(int step, double loss)> onStep;
  /// Under MPI: how this process places its rank.
  MpiRankPlacing placing;
  /// Stragglers (Rebalance.h): with this on, every step is timed and the
  /// data-parallel shares move to the measured speeds at step boundaries.
  bool rebalance = false;
  RebalanceOptions rebalanceOptions;
  /// Each time shares move (or could not), on the process that reports.
  std::function<void(const RebalanceEvent &)> onRebalance;
};
struct TrainPlanResult {
  std::vector<double> losses;              ///< one per step
  std::map<std::string, Tensor> parameters; ///< the trained ones (see gatherParameters)
  /// On threads: every rank's state after the last step (its memory stats).
  std::vector<PlanExecutor::RankTrainState> states;
  /// Wall seconds of each step (under MPI: this process's).
  std::vector<double> stepSeconds;
  /// Every move of shares (rebalance on), in order.
  std::vector<RebalanceEvent> rebalances;
};

/// Runs `options.steps` steps of a training plan with one thread per rank.
/// Throws on the first error.
TrainPlanResult trainPlanSteps(PlanExecutor &exec, const std::map<std::string, Tensor> &inputs,
                               const Tensor &labels, const TrainPlanOptions &options);

/// The same for one MPI process's rank (`mpi`: the job's world; it must
/// have as many processes as the plan has ranks): placed by placeMpiRank,
/// trained, then parameters and timing gathered to rank 0. The result's
/// parameters are rank 0's; flush `mpi` before exiting. Throws on this
/// rank's error: abort `mpi` then. Defined in hetplan_embed.
TrainPlanResult trainPlanSteps(PlanExecutor &exec, Communicator &mpi, const std::map<std::string, Tensor> &inputs,
                               const Tensor &labels, const TrainPlanOptions &options);

} // namespace hetplan::runtime

#endif
