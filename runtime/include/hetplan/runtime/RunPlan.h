//===- RunPlan.h - running a plan's step on its ranks ------------*- C++ -*-===//
//
// What PlanExecutor, `hetplan run` and Session share to run a plan: its
// ranks as threads of this process, putting the ranks that placeRanks
// (RankBackend.h) puts on CUDA on the CUDA executor, and, when the ranks
// are the processes of an MPI job (each runs its own rank,
// PlanExecutor::runRank), gathering the pieces of the graph outputs to where
// they are assembled (PlanExecutor::gatherOutputs).
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_RUNPLAN_H
#define HETPLAN_RUNTIME_RUNPLAN_H

#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/RankBackend.h"

#include <cstdint>
#include <functional>
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

} // namespace hetplan::runtime

#endif
