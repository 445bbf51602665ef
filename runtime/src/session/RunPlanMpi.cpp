//===- RunPlanMpi.cpp - a plan's step on the processes of an MPI job ------===//
//
// runPlanRank and trainPlanSteps for one MPI process's rank (RunPlan.h):
// here, beside placeMpiRank (RunPlanCuda.cpp), because placing a rank may
// give it the CUDA executor and NCCL, which hetplan_exec does not link.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/RunPlan.h"

#include <chrono>

namespace hetplan::runtime {

namespace {
double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace

std::map<std::string, Tensor> runPlanRank(PlanExecutor &exec, Communicator &mpi,
                                          const std::map<std::string, Tensor> &inputs,
                                          const MpiRankPlacing &placing, PlanExecutor::StepTiming *timing) {
  std::unique_ptr<Communicator> nccl;
  Communicator &program = placeMpiRank(exec, mpi, placing, nccl);
  PlanExecutor::RankTiming mineTiming;
  auto t0 = std::chrono::steady_clock::now();
  PlanExecutor::OutputPieces mine = exec.runRank(program, inputs, timing ? &mineTiming : nullptr);
  double wall = secondsSince(t0);
  nccl.reset(); // its pending transfers complete before the pieces move
  if (timing) gatherRankTiming(mpi, mineTiming, wall, *timing, kGatherTagBase + 1);
  auto all = gatherOutputPieces(mpi, std::move(mine), 0, kGatherTagBase);
  if (mpi.rank() != 0) return {};
  return exec.gatherOutputs(all);
}

TrainPlanResult trainPlanSteps(PlanExecutor &exec, Communicator &mpi, const std::map<std::string, Tensor> &inputs,
                               const Tensor &labels, const TrainPlanOptions &options) {
  TrainPlanResult result;
  std::unique_ptr<Communicator> nccl;
  Communicator &program = placeMpiRank(exec, mpi, options.placing, nccl);
  PlanExecutor::RankTrainState state;
  PlanExecutor::RankTiming timing; // the last step's
  double wall = 0;
  std::unique_ptr<Rebalancer> rebalancer;
  if (options.rebalance) rebalancer = std::make_unique<Rebalancer>(exec.plan(), options.rebalanceOptions);
  for (int s = 1; s <= options.steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    bool timed = (options.timing && s == options.steps) || rebalancer;
    result.losses.push_back(exec.trainRank(program, inputs, labels, state, options.train, timed ? &timing : nullptr));
    wall = secondsSince(t0);
    result.stepSeconds.push_back(wall);
    if (mpi.rank() == 0 && options.onStep) options.onStep(s, result.losses.back());
    if (!rebalancer || s == options.steps) continue;
    // Every rank learns every rank's compute seconds (its own entry, zeros
    // elsewhere, summed: exact), then all compute the same shares.
    PlanExecutor::StepTiming mine;
    mine.ranks.resize(size_t(exec.ranks()));
    mine.ranks[size_t(mpi.rank())] = timing;
    std::vector<double> seconds = rankComputeSeconds(exec.plan(), mine);
    Tensor all(DType::Float64, {int64_t(seconds.size())});
    std::copy(seconds.begin(), seconds.end(), all.data<double>());
    mpi.allReduceSum(all);
    seconds.assign(all.data<double>(), all.data<double>() + all.numel());
    for (auto &e : rebalanceStep(exec, *rebalancer, seconds, s)) {
      if (mpi.rank() == 0 && options.onRebalance) options.onRebalance(e);
      result.rebalances.push_back(std::move(e));
    }
  }
  if (options.gatherParameters) result.parameters = exec.gatherParameters(program, state);
  nccl.reset();
  if (options.timing) gatherRankTiming(mpi, timing, wall, *options.timing, kGatherTagBase + 1);
  return result;
}

} // namespace hetplan::runtime
