//===- Program.cpp - one rank's program: set-up and dispatch --------------===//
#include "RankProgram.h"
#include "hetplan/runtime/PlanFile.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace hetplan::runtime {

using namespace planexec;

namespace {
/// SEND_*/RECV_* instructions: a run of them is one communicator group.
bool isTransfer(plan::Instruction::Kind k) {
  return k == plan::Instruction::SEND_ACTIVATION || k == plan::Instruction::RECV_ACTIVATION ||
         k == plan::Instruction::SEND_GRADIENT || k == plan::Instruction::RECV_GRADIENT;
}
} // namespace

PlanExecutor::OutputPieces PlanExecutor::runProgram(Communicator &comm,
                                                    const std::map<std::string, Tensor> &inputs,
                                                    RankTiming *timing, TrainRun *train) const {
  OutputPieces pieces;
  if (timing) {
    timing->nodeSeconds.assign(model_->nodes.size(), 0.0);
    timing->nodeSamples.assign(model_->nodes.size(), 0);
    timing->forwardSeconds.assign(plan_.settings().micro_batches(), 0.0);
  }
  uint32_t me = uint32_t(comm.rank());
  if (isIdleRank(plan_, me)) return pieces;
  return RankProgram(*this, comm, inputs, timing, train).run();
}

PlanExecutor::RankProgram::RankProgram(const PlanExecutor &exec, Communicator &comm,
                                       const std::map<std::string, Tensor> &inputs, RankTiming *timing,
                                       TrainRun *train)
    : exec_(exec), plan_(exec.plan_), model_(exec.model_), executor_(exec.executor_), io_(exec.io_),
      graphOutputs_(exec.graphOutputs_), microBatch_(exec.microBatch_), whole_(exec.whole_),
      unbatchedInputs_(exec.unbatchedInputs_), stageParams_(exec.stageParams_), stageNodes_(exec.stageNodes_),
      sumGroups_(exec.sumGroups_), zero_(exec.zero_), sumFollowers_(exec.sumFollowers_),
      tpParams_(exec.tpParams_), vocabHeads_(exec.vocabHeads_), comm(comm), inputs(inputs), timing(timing),
      train(train), me(uint32_t(comm.rank())), rank(plan_.ranks(int(me))), j(rank.stage()),
      S(size_t(plan_.stages_size())), st(plan_.stages(int(j))), self(st.workers(int(rank.worker()))),
      splitNodes(exec.tpNodes_[j]) {
  if (auto it = exec.computes_.find(int(me)); it != exec.computes_.end()) compute = it->second.get();
  onDevice = compute && compute->deviceValues();
  off = self.sample_offset(), n = self.samples();
  who = "rank " + std::to_string(me) + " (stage " + std::to_string(j) + "): ";
  in = j > 0 ? &io_[j] : nullptr;
  out = j + 1 < S ? &io_[j + 1] : nullptr;
  tp = self.ranks_size();
  for (int k = 0; k < tp; ++k)
    if (self.ranks(k) == me) tpIndex = k;
  tpRanks.assign(self.ranks().begin(), self.ranks().end());
  tpGroup = tpRanks;
  std::sort(tpGroup.begin(), tpGroup.end());
  for (const auto &[node, tn] : splitNodes) splitNodeSet.insert(node);
  numNodes = model_->nodes.size();
  for (size_t i = st.first_node(); i <= st.last_node(); ++i) nodes.push_back(i);
  if (out) keep.insert(out->received.begin(), out->received.end());
  else keep = graphOutputs_;
  if (train) {
    // Backward reads every value the stage's nodes read or wrote.
    for (size_t i : stageNodes_[j]) {
      model_->nodes[i].forEachRead([&](const std::string &v) { keep.insert(v); });
      for (const auto &v : model_->nodes[i].outputs)
        if (!v.empty()) keep.insert(v);
    }
  }
  if (train && !out) {
    lossOutput = train->options.lossOutput.empty() ? model_->outputs.at(0).name : train->options.lossOutput;
    if (!graphOutputs_.count(lossOutput)) fail("the model has no output '" + lossOutput + "' to compute the loss on");
  }
  if (train && !out)
    for (const auto &[node, head] : vocabHeads_[j])
      if (model_->nodes[node].outputs[0] == lossOutput) vocabLossNode = node;

  recompute = train && st.recompute();
  for (const auto &ins : rank.program())
    if (ins.kind() == plan::Instruction::SEND_ACTIVATION) sendsLeft[ins.micro_batch()] += ins.peers_size();
  for (size_t g = 0; g < sumGroups_.size(); ++g)
    if (std::binary_search(sumGroups_[g].first.begin(), sumGroups_[g].first.end(), int(me))) myGroups.push_back(g);
  for (const auto &w : st.workers()) stageRanks.push_back(int(w.ranks(tpIndex)));
  std::sort(stageRanks.begin(), stageRanks.end());
}

PlanExecutor::OutputPieces PlanExecutor::RankProgram::run() {
  auto clock = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  if (timing) timing->instructionSpans.clear();
  // Each run of consecutive SEND/RECV instructions is one communicator
  // group (Communicator::groupStart): its receives complete together at
  // the run's end, so ranks whose runs send to each other first do not
  // wait on each other where sends are unbuffered (NCCL). checkPlanPrograms
  // proved the programs deadlock-free under this rule.
  const auto &program = rank.program();
  for (int pc = 0; pc < program.size(); ++pc) {
    const auto &ins = program[pc];
    bool slowed = int(me) == exec_.slowRank_ && (ins.kind() == plan::Instruction::FORWARD ||
                                                  ins.kind() == plan::Instruction::BACKWARD);
    double started = timing || slowed ? clock() : 0;
    bool transfer = isTransfer(ins.kind());
    if (transfer && (pc == 0 || !isTransfer(program[pc - 1].kind()))) comm.groupStart();
    switch (ins.kind()) {
    case plan::Instruction::RECV_ACTIVATION: onRecvActivation(ins); break;
    case plan::Instruction::FORWARD: onForward(ins); break;
    case plan::Instruction::SEND_ACTIVATION: onSendActivation(ins); break;
    case plan::Instruction::RECV_GRADIENT: onRecvGradient(ins); break;
    case plan::Instruction::BACKWARD: onBackward(ins); break;
    case plan::Instruction::SEND_GRADIENT: onSendGradient(ins); break;
    case plan::Instruction::ALLREDUCE_GRADIENTS: onAllReduceGradients(ins); break;
    case plan::Instruction::OPTIMIZER_STEP: onOptimizerStep(ins); break;
    default:
      fail(who + "unexpected instruction " + plan::Instruction::Kind_Name(ins.kind()));
    }
    // The group's wait counts in its last instruction's span.
    if (transfer && (pc + 1 == program.size() || !isTransfer(program[pc + 1].kind()))) comm.groupEnd();
    if (slowed) // test only: a straggler (PlanExecutor::setTestSlowdown)
      std::this_thread::sleep_for(std::chrono::duration<double>((clock() - started) * exec_.slowFraction_));
    if (timing) timing->instructionSpans.push_back({started, clock()});
  }
  return std::move(pieces);
}

} // namespace hetplan::runtime
