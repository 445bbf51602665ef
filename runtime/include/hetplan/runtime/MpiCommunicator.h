//===- MpiCommunicator.h - ranks as processes of an MPI job -----*- C++ -*-===//
//
// A Communicator over MPI_COMM_WORLD, for `mpirun -np N hetplan run ...`
// (docs/runtime.md, "Running plans"): one process per rank. Built only when
// CMake finds MPI (HETPLAN_HAVE_MPI=1); this header does not include mpi.h.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_MPICOMMUNICATOR_H
#define HETPLAN_RUNTIME_MPICOMMUNICATOR_H

#include "hetplan/runtime/Communicator.h"

#include <cstdlib>
#include <memory>

namespace hetplan::runtime {

/// True when this process was started by an MPI launcher (Open MPI's
/// OMPI_COMM_WORLD_SIZE or a PMI launcher's PMI_SIZE is set). Needs no MPI.
inline bool launchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
/// The ranks of MPI_COMM_WORLD. The first communicator created calls
/// MPI_Init (unless the program already did) and the last one destroyed
/// calls MPI_Finalize (when it was the one that initialized). A tensor
/// travels as a header message (dtype, rank, dims, byte count; int64) then
/// its bytes in chunks below 2^31, all under the caller's tag (MPI keeps
/// messages of one (source, tag) in order). Sends are non-blocking
/// (MPI_Isend of a copy); they complete in barrier(), allReduceSum() and
/// the destructor (see groupEnd() for the rendezvous mode). abort() calls
/// MPI_Abort: the whole job ends.
class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator();
  /// `rendezvous` as commRendezvous() would say (NcclCommunicator passes
  /// false: its headers travel buffered over MPI).
  explicit MpiCommunicator(bool rendezvous);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator &) = delete;
  MpiCommunicator &operator=(const MpiCommunicator &) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int peer, int64_t tag, const Tensor &tensor) override;
  Tensor recv(int peer, int64_t tag) override;
  void barrier() override;
  void allReduceSum(Tensor &tensor) override;
  /// MPI_Reduce_scatter / MPI_Allgatherv over a communicator of the group
  /// (MPI_Comm_create_group on first use, kept until destruction); the tag
  /// is unused. Unlike barrier() they do not wait for pending sends.
  Tensor reduceScatterSum(const std::vector<int> &group, const Tensor &in,
                          const std::vector<int64_t> &counts, int64_t tag) override;
  Tensor allGather(const std::vector<int> &group, const Tensor &mine,
                   const std::vector<int64_t> &counts, int64_t tag) override;
  [[noreturn]] void abort(const std::string &why) override;
  /// Waits until every send of this rank has completed.
  void flush();
  /// Rendezvous mode (HETPLAN_COMM_RENDEZVOUS=1, commRendezvous()): a
  /// header goes with MPI_Issend, a send outside a group waits until the
  /// peer has received it, and groupEnd() takes the group's messages in
  /// arrival order and waits for its sends: NCCL's rules, on CPUs.
  void groupEnd() override;

  struct Pending;

private:
  int rank_ = 0;
  int size_ = 1;
  double timeout_ = 0;
  bool rendezvous_ = false;
  std::unique_ptr<Pending> pending_;
};
#endif

} // namespace hetplan::runtime

#endif
