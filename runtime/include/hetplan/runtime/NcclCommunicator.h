//===- NcclCommunicator.h - ranks as GPUs of an MPI job over NCCL -*- C++ -*-===//
//
// A Communicator whose transfers go through NCCL: one process per rank
// (mpirun), one GPU per rank. Bootstrapped over MPI: rank 0 calls
// ncclGetUniqueId, MPI_Bcast sends the id to every rank, each calls
// ncclCommInitRank. Built only when CMake finds CUDA, NCCL and MPI
// (target hetplan_cuda, HETPLAN_HAVE_NCCL_COMMUNICATOR=1); this header
// includes neither nccl.h nor mpi.h. docs/runtime.md, "CUDA backend".
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_NCCLCOMMUNICATOR_H
#define HETPLAN_RUNTIME_NCCLCOMMUNICATOR_H

#include "hetplan/runtime/Communicator.h"

#include <memory>
#include <string>

namespace hetplan::runtime {

#if defined(HETPLAN_HAVE_NCCL_COMMUNICATOR) && HETPLAN_HAVE_NCCL_COMMUNICATOR
/// The ranks of MPI_COMM_WORLD over NCCL. The GPU of a rank is its rank
/// among the processes of its node (MPI_COMM_TYPE_SHARED) modulo the node's
/// device count. Host tensors are staged through device buffers; device
/// tensors of the rank's GPU are sent in place, and recvDeviceInGroup
/// lands in one (docs/gpu.md, "Device-resident values").
///
/// NCCL has no tags: a message is a header over MPI (magic, tag, sequence
/// number, dtype, rank, byte count, dims; buffered, matched by tag) and its
/// bytes with ncclSend/ncclRecv. NCCL pairs a sender's and a receiver's
/// calls in order, so ranks must receive a peer's messages in the order
/// they were sent (the sequence number is checked; checkPlanPrograms
/// proves it of plans).
///
/// NCCL sends are not buffered: an ncclSend completes only once the peer
/// posts the matching ncclRecv, and every NCCL call of a rank runs in issue
/// order on one stream. send() returns once its transfer is enqueued;
/// recv() waits for it (and so for every earlier send). Inside
/// groupStart()/groupEnd() (ncclGroupStart/End) a group's sends and
/// receives progress together, so two ranks that each send to the other
/// first complete when both do it in a group -- the plan executor runs
/// every run of SEND/RECV instructions as one. barrier() and
/// allReduceSum() complete earlier sends. Waits poll the stream and
/// ncclCommGetAsyncError, so a failed peer surfaces as an error rather
/// than a hang where NCCL detects it. abort() calls ncclCommAbort and then
/// MPI_Abort: the whole job ends (as with MpiCommunicator). Throws
/// std::runtime_error ("no CUDA device: ...") without a GPU.
class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator();
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int rank() const override;
  int size() const override;
  /// The CUDA device this rank uses.
  int device() const;
  void send(int peer, int64_t tag, const Tensor &tensor) override;
  Tensor recv(int peer, int64_t tag) override;
  /// Lands the bytes in a device tensor of this rank's GPU (no staging).
  void recvDeviceInGroup(int peer, int64_t tag, Tensor *out) override;
  void groupStart() override;
  void groupEnd() override;
  void barrier() override;
  /// float32 (ncclFloat) or float64 (ncclDouble).
  void allReduceSum(Tensor &tensor) override;
  /// ncclAllReduce (ncclSum, in place) on the communicator of `group`:
  /// the world's when the group is every rank, else one made for the group
  /// at its first sum (ncclCommInitRank among its members only, the id sent
  /// from its lowest rank over MPI under `tag`) and kept. Each element is
  /// reduced once and the result broadcast by NCCL's ring and tree
  /// algorithms, so members get the same values (bit-identity across ranks
  /// is what these algorithms do, not a documented NCCL guarantee).
  void groupAllReduceSum(const std::vector<int> &group, const std::vector<Tensor *> &tensors,
                         int64_t tag) override;
  /// One NCCL group of ncclSend/ncclRecv between every pair of members
  /// (raw bytes, no header; NCCL's reduce-scatter and all-gather need
  /// equal segments and a communicator of the group); the sum is on the
  /// host in group order. The tag is unused: members call them in order.
  Tensor reduceScatterSum(const std::vector<int> &group, const Tensor &in,
                          const std::vector<int64_t> &counts, int64_t tag) override;
  Tensor allGather(const std::vector<int> &group, const Tensor &mine,
                   const std::vector<int64_t> &counts, int64_t tag) override;
  [[noreturn]] void abort(const std::string &why) override;

  struct State;

private:
  std::unique_ptr<State> state_;
};
#endif

} // namespace hetplan::runtime

#endif
