//===- Communicator.h - moving tensors between ranks ------------*- C++ -*-===//
//
// The plan executor talks to other ranks only through this interface: point
// to point sends and receives of tensors matched by (peer, tag), a barrier,
// a sum all-reduce over all ranks, and a reduce-scatter and an all-gather
// over a group of ranks (ZeRO's collectives). ThreadCommunicator implements it for ranks that are
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
#include <vector>

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
/// The one line a timed-out wait fails with: "rank R waited T s for WHAT;
/// a rank is stuck or the plan waits on itself (HETPLAN_COMM_TIMEOUT sets
/// the limit)".
std::string commTimeoutMessage(int rank, double seconds, const std::string &what);

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

  // Collectives over a group of ranks. `group` lists the members, sorted,
  // this rank among them; `counts[k]` is member group[k]'s segment, in
  // elements. Every member passes the same group, counts and `tag` (unused
  // by other traffic between the members), and members call a group's
  // collectives in the same order (MPI and NCCL match them by order, not
  // by tag). The defaults are point-to-point over send/recv (they rely on
  // buffered sends: ThreadCommGroup, MpiCommunicator).

  /// Sum-reduce-scatter: `in` holds sum(counts) float32 elements on every
  /// member; returns this member's segment (counts[me] elements, 1-D)
  /// summed over the members. The default adds in group order.
  virtual Tensor reduceScatterSum(const std::vector<int> &group, const Tensor &in,
                                  const std::vector<int64_t> &counts, int64_t tag);
  /// All-gather: this member passes its counts[me] elements (any element
  /// type, the same on every member); returns every member's segment
  /// concatenated in group order (1-D, sum(counts) elements).
  virtual Tensor allGather(const std::vector<int> &group, const Tensor &mine,
                           const std::vector<int64_t> &counts, int64_t tag);
  /// Wakes every rank blocked in recv/barrier/allReduceSum, which then throw
  /// CommAborted(why); later calls throw too. For a rank that failed.
  virtual void abort(const std::string &why) = 0;
};

/// For implementations of the group collectives: checks `group` (sorted,
/// holds comm.rank(), one count each) and returns the segments' element
/// offsets (counts.size() + 1 of them); `me` is this rank's index. `what`
/// names the collective in errors.
std::vector<int64_t> collectiveOffsets(const Communicator &comm, const std::vector<int> &group,
                                       const std::vector<int64_t> &counts, size_t &me, const char *what);

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
