//===- Communicator.h - moving tensors between ranks ------------*- C++ -*-===//
//
// The plan executor talks to other ranks only through this interface: point
// to point sends and receives of tensors matched by (peer, tag), a barrier
// and a sum all-reduce. ThreadCommunicator implements it for ranks that are
// threads of one process (tests, `hetplan run`); MpiCommunicator.h for
// ranks that are MPI processes; NcclCommunicator.h (CUDA builds) for GPUs.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_COMMUNICATOR_H
#define HETPLAN_RUNTIME_COMMUNICATOR_H

#include "hetplan/runtime/Tensor.h"

#include <memory>
#include <stdexcept>
#include <string>

namespace hetplan::runtime {

/// Thrown by a blocked call when the group was aborted (another rank failed).
struct CommAborted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// How long a blocking receive or collective waits before the run fails
/// with a message naming the rank and the peer (a stuck, stopped or dead
/// peer, or a plan that waits on itself). HETPLAN_COMM_TIMEOUT in seconds,
/// 0 for no limit; default 600 s, PyTorch's default for NCCL process groups.
/// A malformed value is an error.
double commTimeoutSeconds();

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sends `tensor` to `peer` under `tag`. Does not wait for the receiver
  /// (messages are buffered); messages with the same (source, tag) arrive
  /// in the order they were sent.
  virtual void send(int peer, int64_t tag, const Tensor &tensor) = 0;
  /// Waits for the next message from `peer` under `tag` (at most
  /// commTimeoutSeconds(), then throws naming both ranks).
  virtual Tensor recv(int peer, int64_t tag) = 0;
  /// Waits until every rank of the group has called barrier().
  virtual void barrier() = 0;
  /// Every rank passes a tensor of the same shape and float type (float32
  /// or float64); each gets back the elementwise sum, in place.
  virtual void allReduceSum(Tensor &tensor) = 0;
  /// Wakes every rank blocked in recv/barrier/allReduceSum, which then throw
  /// CommAborted(why); later calls throw too. For a rank that failed.
  virtual void abort(const std::string &why) = 0;
};

/// `size` ranks that are threads of this process. Channels are queues keyed
/// by (source, destination, tag) behind one mutex and condition variable.
class ThreadCommGroup {
public:
  explicit ThreadCommGroup(int size);
  ~ThreadCommGroup();
  ThreadCommGroup(const ThreadCommGroup &) = delete;
  ThreadCommGroup &operator=(const ThreadCommGroup &) = delete;
  int size() const;
  /// The communicator of `rank`; owned by the group, valid while it lives.
  Communicator &communicator(int rank);

  struct State;

private:
  std::unique_ptr<State> state_;
};

} // namespace hetplan::runtime

#endif
