//===- Transfers.cpp - SEND_* and RECV_* instructions ---------------------===//
#include "RankProgram.h"

#include <algorithm>

namespace hetplan::runtime {

using namespace planexec;

const plan::Worker &PlanExecutor::RankProgram::workerOf(const plan::Stage &s, uint32_t r) const {
  for (const auto &w : s.workers())
    for (uint32_t x : w.ranks())
      if (x == r) return w;
  fail(who + "rank " + std::to_string(r) + " is no worker of stage " + std::to_string(s.index()));
}

void PlanExecutor::RankProgram::receive(uint32_t mb, uint32_t peer) {
  const auto &w = workerOf(plan_.stages(int(j - 1)), peer);
  // Filled in place when the instruction's group ends (map nodes do not move).
  Received &r = pending[mb][w.sample_offset()];
  r.data.assign(in->received.size(), Tensor());
  r.shapes.assign(in->shapes.size(), Tensor());
  for (size_t i = 0; i < in->received.size(); ++i) {
    if (onDevice) comm.recvDeviceInGroup(int(peer), dataTag(mb, i), &r.data[i]);
    else comm.recvInGroup(int(peer), dataTag(mb, i), &r.data[i]);
  }
  for (size_t i = 0; i < in->shapes.size(); ++i) comm.recvInGroup(int(peer), shapeTag(mb, i), &r.shapes[i]);
  if (train) comm.recvInGroup(int(peer), flagTag(mb), &r.flags);
}

void PlanExecutor::RankProgram::send(uint32_t mb, uint32_t peer) {
  auto it = outbox.find(mb);
  if (it == outbox.end()) fail(who + "SEND_ACTIVATION for micro-batch " + std::to_string(mb) + " before its FORWARD");
  const auto &w = workerOf(plan_.stages(int(j + 1)), peer);
  int64_t lo = std::max(off, w.sample_offset());
  int64_t hi = std::min(off + n, w.sample_offset() + w.samples());
  for (size_t i = 0; i < out->received.size(); ++i)
    comm.send(int(peer), dataTag(mb, i),
              whole_ ? it->second.values.at(out->received[i])
                     : sliceRows(it->second.values.at(out->received[i]), lo - off, hi - lo));
  for (size_t i = 0; i < out->shapes.size(); ++i) {
    const auto &s = it->second.perSample.at(out->shapes[i]);
    Tensor t(DType::Int64, {int64_t(s.size())});
    std::copy(s.begin(), s.end(), t.data<int64_t>());
    comm.send(int(peer), shapeTag(mb, i), t);
  }
  if (train) {
    const auto &flags = train->outFlags.at(mb);
    Tensor t(DType::Int64, {int64_t(flags.size())});
    for (size_t i = 0; i < flags.size(); ++i) t.data<int64_t>()[i] = flags[i];
    comm.send(int(peer), flagTag(mb), t);
  }
}

// ---- training: gradients of the values that crossed the boundaries ----
void PlanExecutor::RankProgram::receiveGradient(uint32_t mb, uint32_t peer) {
  const auto &w = workerOf(plan_.stages(int(j + 1)), peer);
  const auto &flags = train->outFlags.at(mb);
  std::vector<Tensor> &parts = train->gradIn[mb][w.sample_offset()];
  parts.assign(flags.size(), Tensor());
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) comm.recvInGroup(int(peer), gradTag(mb, i), &parts[i]);
}

void PlanExecutor::RankProgram::sendGradient(uint32_t mb, uint32_t peer) {
  auto it = train->gradOut.find(mb);
  if (it == train->gradOut.end())
    fail(who + "SEND_GRADIENT for micro-batch " + std::to_string(mb) + " before its BACKWARD");
  const auto &w = workerOf(plan_.stages(int(j - 1)), peer);
  int64_t lo = std::max(off, w.sample_offset());
  int64_t hi = std::min(off + n, w.sample_offset() + w.samples());
  const auto &flags = train->inFlags.at(mb);
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i])
      comm.send(int(peer), gradTag(mb, i),
                whole_ ? it->second.at(in->received[i])
                       : sliceRows(it->second.at(in->received[i]), lo - off, hi - lo));
}

void PlanExecutor::RankProgram::onRecvActivation(const plan::Instruction &ins) { receive(ins.micro_batch(), ins.peers(0)); }

void PlanExecutor::RankProgram::onSendActivation(const plan::Instruction &ins) {
  for (uint32_t peer : ins.peers()) send(ins.micro_batch(), peer); // every rank of a tp worker
  if (train && (sendsLeft[ins.micro_batch()] -= ins.peers_size()) <= 0) outbox.erase(ins.micro_batch());
}

void PlanExecutor::RankProgram::onRecvGradient(const plan::Instruction &ins) { receiveGradient(ins.micro_batch(), ins.peers(0)); }

void PlanExecutor::RankProgram::onSendGradient(const plan::Instruction &ins) {
  for (uint32_t peer : ins.peers()) sendGradient(ins.micro_batch(), peer);
}

} // namespace hetplan::runtime
