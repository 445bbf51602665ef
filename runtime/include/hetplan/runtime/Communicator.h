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
#include <tuple>
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
/// HETPLAN_COMM_RENDEZVOUS=1: the thread and MPI communicators behave like
/// NCCL's unbuffered point-to-point (a send outside a group waits until the
/// peer receives it; a group completes when its peers have matched every
/// send and receive), so tests on CPUs catch programs that would hang on
/// GPUs. Default off (buffered sends).
bool commRendezvous();

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sends `tensor` (host or device) to `peer` under `tag`. Does not wait
  /// for the receiver (messages are buffered); messages with the same
  /// (source, tag) arrive in the order they were sent.
  virtual void send(int peer, int64_t tag, const Tensor &tensor) = 0;
  /// Waits for the next message from `peer` under `tag` (at most
  /// commTimeoutSeconds(), then throws naming both ranks).
  virtual Tensor recv(int peer, int64_t tag) = 0;

  // Groups (ncclGroupStart/End's meaning, for every communicator): between
  // groupStart() and groupEnd() sends are posted without waiting and
  // recvInGroup() only posts its receive; groupEnd() returns once every
  // send and receive of the group has completed, in whatever order the
  // peers match them. So two ranks whose groups each send to the other and
  // receive from it never wait on each other, even where sends are not
  // buffered (NCCL). The plan executor runs each run of consecutive
  // SEND/RECV instructions of a program as one group; checkPlanPrograms
  // proves programs deadlock-free under exactly this rule. Groups do not
  // nest; collectives are not allowed inside one.
  virtual void groupStart();
  virtual void groupEnd();
  /// Receives the next message from `peer` under `tag` into `*out`: at
  /// once outside a group, by groupEnd() inside one (`out` must stay valid
  /// until then). Messages between a pair must be received in the order
  /// they were sent (NCCL matches by order).
  virtual void recvInGroup(int peer, int64_t tag, Tensor *out);
  /// recvInGroup for a consumer that takes device tensors (a CUDA rank's
  /// FORWARD, docs/gpu.md "Device-resident values"): a communicator that
  /// moves device memory leaves the message there -- NCCL lands it in a
  /// device buffer, threads of one process hand a device tensor over as it
  /// is -- and *out may then be a device tensor (Tensor::isDevice). Every
  /// other receive gives host tensors, and every communicator's send takes
  /// device tensors (host-staged ones copy them to the host first). The
  /// default receives to the host.
  virtual void recvDeviceInGroup(int peer, int64_t tag, Tensor *out) { recvInGroup(peer, tag, out); }
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

  /// Sum all-reduce of `tensors` (all float32 or all float64; every
  /// member passes the same sizes), in place: the gradient sums of training
  /// plans (train::groupSum). The default adds in group order at the lowest
  /// rank and sends the sum back, so every member ends with the same bits;
  /// NcclCommunicator calls ncclAllReduce.
  virtual void groupAllReduceSum(const std::vector<int> &group, const std::vector<Tensor *> &tensors, int64_t tag);

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

protected:
  /// The default groups (buffered communicators): receives posted in the
  /// open group, completed in order by groupEnd().
  bool inGroup_ = false;
  std::vector<std::tuple<int, int64_t, Tensor *>> groupRecvs_;
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
  /// Buffered sends, or rendezvous ones when HETPLAN_COMM_RENDEZVOUS=1.
  explicit ThreadCommGroup(int size);
  /// `rendezvous`: sends behave like NCCL's (see commRendezvous()).
  ThreadCommGroup(int size, bool rendezvous);
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
