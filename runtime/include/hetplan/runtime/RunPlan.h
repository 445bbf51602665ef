//===- RunPlan.h - running a plan's step on its ranks ------------*- C++ -*-===//
//
// What `hetplan run` and Session share when a plan's ranks are the
// processes of an MPI job: each process runs its own rank
// (PlanExecutor::runRank) and the pieces of the graph outputs are then
// gathered to where they are assembled (PlanExecutor::gatherOutputs).
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_RUNPLAN_H
#define HETPLAN_RUNTIME_RUNPLAN_H

#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/PlanExecutor.h"

#include <cstdint>
#include <vector>

namespace hetplan::runtime {

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

} // namespace hetplan::runtime

#endif
