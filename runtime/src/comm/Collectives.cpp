//===- Collectives.cpp - group collectives over send/recv -----------------===//
//
// The default reduce-scatter and all-gather of Communicator (ZeRO's
// collectives, docs/runtime.md "ZeRO"): point to point, each member sends
// every other member its segment. Deterministic: a segment is summed in
// group order, the order train::groupSum adds in, so ZeRO-2's gradient
// shards hold the same bits as ZeRO-0's all-reduced gradients.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Communicator.h"

#include <algorithm>
#include <cstring>

namespace hetplan::runtime {

std::vector<int64_t> collectiveOffsets(const Communicator &comm, const std::vector<int> &group,
                                       const std::vector<int64_t> &counts, size_t &me, const char *what) {
  if (group.size() != counts.size())
    throw std::runtime_error(std::string(what) + ": " + std::to_string(group.size()) + " members but " +
                             std::to_string(counts.size()) + " counts");
  auto it = std::find(group.begin(), group.end(), comm.rank());
  if (it == group.end() || !std::is_sorted(group.begin(), group.end()))
    throw std::runtime_error(std::string(what) + ": rank " + std::to_string(comm.rank()) +
                             " is not in the (sorted) group");
  me = size_t(it - group.begin());
  std::vector<int64_t> offsets(1, 0);
  for (int64_t c : counts) {
    if (c < 0) throw std::runtime_error(std::string(what) + ": negative count");
    offsets.push_back(offsets.back() + c);
  }
  return offsets;
}

namespace {
/// Elements [lo, lo + n) of a 1-D view of `t`, copied.
Tensor segment(const Tensor &t, int64_t lo, int64_t n) {
  Tensor out(t.dtype(), {n});
  size_t e = dtypeSize(t.dtype());
  if (n) std::memcpy(out.raw(), static_cast<const char *>(t.raw()) + size_t(lo) * e, size_t(n) * e);
  return out;
}
} // namespace

void Communicator::groupStart() {
  if (inGroup_) throw std::runtime_error("rank " + std::to_string(rank()) + ": groups do not nest");
  inGroup_ = true;
}

void Communicator::groupEnd() {
  if (!inGroup_) throw std::runtime_error("rank " + std::to_string(rank()) + ": groupEnd without groupStart");
  inGroup_ = false;
  // Buffered sends: every peer's sends of its group are already posted, so
  // taking the receives in order cannot wait on this rank.
  auto recvs = std::move(groupRecvs_);
  groupRecvs_.clear();
  for (auto &[peer, tag, out] : recvs) *out = recv(peer, tag);
}

void Communicator::recvInGroup(int peer, int64_t tag, Tensor *out) {
  if (inGroup_) groupRecvs_.emplace_back(peer, tag, out);
  else *out = recv(peer, tag);
}

Tensor Communicator::reduceScatterSum(const std::vector<int> &group, const Tensor &in,
                                      const std::vector<int64_t> &counts, int64_t tag) {
  size_t me = 0;
  std::vector<int64_t> off = collectiveOffsets(*this, group, counts, me, "reduceScatterSum");
  if (in.dtype() != DType::Float32 || in.numel() != off.back())
    throw std::runtime_error("reduceScatterSum: " + in.describe() + " is not " + std::to_string(off.back()) +
                             " float32 elements");
  // One group: every member sends before it receives (NCCL-safe).
  std::vector<Tensor> got(group.size());
  groupStart();
  for (size_t k = 0; k < group.size(); ++k)
    if (k != me) send(group[k], tag, segment(in, off[k], counts[k]));
  for (size_t k = 0; k < group.size(); ++k)
    if (k != me) recvInGroup(group[k], tag, &got[k]);
  groupEnd();
  Tensor acc(DType::Float32, {counts[me]});
  float *a = acc.data<float>();
  for (size_t k = 0; k < group.size(); ++k) {
    Tensor part = k == me ? segment(in, off[me], counts[me]) : std::move(got[k]);
    if (part.dtype() != DType::Float32 || part.numel() != counts[me])
      throw std::runtime_error("reduceScatterSum: rank " + std::to_string(group[k]) + " sent " + part.describe() +
                               ", expected " + std::to_string(counts[me]) + " float32 elements");
    const float *b = part.data<float>();
    for (int64_t i = 0; i < counts[me]; ++i) a[i] += b[i];
  }
  return acc;
}

Tensor Communicator::allGather(const std::vector<int> &group, const Tensor &mine,
                               const std::vector<int64_t> &counts, int64_t tag) {
  size_t me = 0;
  std::vector<int64_t> off = collectiveOffsets(*this, group, counts, me, "allGather");
  if (mine.numel() != counts[me])
    throw std::runtime_error("allGather: rank " + std::to_string(rank()) + " passed " + mine.describe() + ", expected " +
                             std::to_string(counts[me]) + " elements");
  std::vector<Tensor> got(group.size());
  groupStart();
  for (size_t k = 0; k < group.size(); ++k)
    if (k != me) send(group[k], tag, mine);
  for (size_t k = 0; k < group.size(); ++k)
    if (k != me) recvInGroup(group[k], tag, &got[k]);
  groupEnd();
  Tensor out(mine.dtype(), {off.back()});
  size_t e = dtypeSize(mine.dtype());
  for (size_t k = 0; k < group.size(); ++k) {
    Tensor part = k == me ? mine : std::move(got[k]);
    if (part.dtype() != mine.dtype() || part.numel() != counts[k])
      throw std::runtime_error("allGather: rank " + std::to_string(group[k]) + " sent " + part.describe() +
                               ", expected " + std::to_string(counts[k]) + " elements");
    if (counts[k]) std::memcpy(static_cast<char *>(out.raw()) + size_t(off[k]) * e, part.raw(), part.nbytes());
  }
  return out;
}

} // namespace hetplan::runtime
