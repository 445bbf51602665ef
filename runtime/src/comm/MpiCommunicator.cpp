//===- MpiCommunicator.cpp - ranks as processes of an MPI job -------------===//
#include "hetplan/runtime/MpiCommunicator.h"

// The C API only: keep Open MPI's / MPICH's C++ bindings out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <sys/prctl.h>
#include <unistd.h>
#include <cstdio>
#include <thread>
#include <list>
#include <map>
#include <vector>

namespace hetplan::runtime {

namespace {
// Bytes per payload message: below 2^31 (MPI counts are int).
constexpr size_t kChunk = size_t(1) << 30;
int gLive = 0;            // MpiCommunicators alive
bool gWeInitialized = false;

void check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + ": " + std::string(msg, size_t(len)));
}
// Polls `done` until it says true or `timeout` seconds pass (0: no limit);
// false on timeout. MPI's blocking calls cannot time out, so receives and
// collectives are started non-blocking and tested, backing off to 1 ms.
template <typename Done> bool pollUntil(double timeout, Done done) {
  auto start = std::chrono::steady_clock::now();
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    if (done()) return true;
    if (timeout > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout)
      return false;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

} // namespace

/// Sends in flight: each keeps its header and a copy of the tensor alive
/// until its requests complete.
struct MpiCommunicator::Pending {
  struct Send {
    std::vector<int64_t> header;
    Tensor data;
    std::vector<MPI_Request> requests;
  };
  std::list<Send> sends;
  /// Rendezvous mode: the sends of the open group (not reaped meanwhile).
  std::vector<std::list<Send>::iterator> groupSends;
  /// Communicators of the groups the collectives ran over, made on first
  /// use with MPI_Comm_create_group (collective over the members only).
  std::map<std::vector<int>, MPI_Comm> groups;

  MPI_Comm group(const std::vector<int> &ranks) {
    auto it = groups.find(ranks);
    if (it != groups.end()) return it->second;
    MPI_Group world, sub;
    check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    check(MPI_Group_incl(world, int(ranks.size()), ranks.data(), &sub), "MPI_Group_incl");
    MPI_Comm comm = MPI_COMM_NULL;
    // The tag keeps concurrent creations of different groups apart.
    int tag = (ranks.front() * 131 + int(ranks.size())) % 32768;
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub, tag, &comm);
    MPI_Group_free(&sub);
    MPI_Group_free(&world);
    check(rc, "MPI_Comm_create_group");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    return groups[ranks] = comm;
  }

  // Drops the sends that have completed (without waiting).
  void reap() {
    for (auto it = sends.begin(); it != sends.end();) {
      int done = 0;
      check(MPI_Testall(int(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE),
            "MPI_Testall");
      it = done ? sends.erase(it) : std::next(it);
    }
  }
  void waitAll() {
    for (auto &s : sends)
      check(MPI_Waitall(int(s.requests.size()), s.requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    sends.clear();
  }
};

MpiCommunicator::MpiCommunicator() : MpiCommunicator(commRendezvous()) {}

MpiCommunicator::MpiCommunicator(bool rendezvous) : rendezvous_(rendezvous), pending_(std::make_unique<Pending>()) {
  // A rank dies with its launcher: a killed mpirun must not leave ranks
  // waiting for peers forever. (The launcher may already be gone.)
  pid_t launcher = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(1);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    check(MPI_Init(nullptr, nullptr), "MPI_Init");
    gWeInitialized = true;
  }
  // Errors come back as codes (thrown here) rather than ending the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  timeout_ = commTimeoutSeconds();
  ++gLive;
}

MpiCommunicator::~MpiCommunicator() {
  try {
    flush();
  } catch (...) {
  }
  for (auto &[ranks, comm] : pending_->groups) MPI_Comm_free(&comm);
  if (--gLive == 0 && gWeInitialized) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

static int mpiTag(int64_t tag) {
  void *ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  int64_t max = found ? int64_t(*static_cast<int *>(ub)) : 32767;
  if (tag < 0 || tag > max)
    throw std::runtime_error("MPI communicator: tag " + std::to_string(tag) + " is outside 0.." +
                             std::to_string(max));
  return int(tag);
}

void MpiCommunicator::send(int peer, int64_t tag, const Tensor &tensor) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw std::runtime_error("rank " + std::to_string(rank_) + ": bad peer " + std::to_string(peer));
  int t = mpiTag(tag);
  if (!inGroup_) pending_->reap();
  Pending::Send &s = pending_->sends.emplace_back();
  // Copy: the caller may reuse or free its buffer (the interface buffers).
  if (tensor.defined()) s.data = tensor.clone();
  s.header.push_back(int64_t(tensor.dtype()));
  s.header.push_back(tensor.defined() ? tensor.rank() : 0);
  if (tensor.defined())
    for (int64_t d : tensor.shape()) s.header.push_back(d);
  size_t bytes = tensor.defined() ? tensor.nbytes() : 0;
  s.header.push_back(int64_t(bytes));
  s.requests.emplace_back();
  // Rendezvous: the synchronous-mode header completes only once the peer
  // has matched it with a receive.
  check((rendezvous_ ? MPI_Issend : MPI_Isend)(s.header.data(), int(s.header.size()), MPI_INT64_T, peer, t,
                                                MPI_COMM_WORLD, &s.requests.back()),
        "MPI_Isend");
  const char *p = static_cast<const char *>(s.data.defined() ? s.data.raw() : nullptr);
  for (size_t off = 0; off < bytes; off += kChunk) {
    s.requests.emplace_back();
    check(MPI_Isend(const_cast<char *>(p + off), int(std::min(kChunk, bytes - off)), MPI_BYTE, peer, t,
                    MPI_COMM_WORLD, &s.requests.back()),
          "MPI_Isend");
  }
  if (!rendezvous_) return;
  if (inGroup_) {
    pending_->groupSends.push_back(std::prev(pending_->sends.end()));
    return;
  }
  MPI_Request &header = s.requests.front();
  if (!pollUntil(timeout_, [&] {
        int flag = 0;
        check(MPI_Test(&header, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        return flag != 0;
      }))
    throw std::runtime_error(commTimeoutMessage(
        rank_, timeout_, "rank " + std::to_string(peer) + " to receive a message (tag " + std::to_string(tag) + ")"));
}

void MpiCommunicator::groupEnd() {
  if (!rendezvous_) return Communicator::groupEnd();
  if (!inGroup_) throw std::runtime_error("rank " + std::to_string(rank_) + ": groupEnd without groupStart");
  inGroup_ = false;
  auto recvs = std::move(groupRecvs_);
  auto sends = std::move(pending_->groupSends);
  groupRecvs_.clear();
  pending_->groupSends.clear();
  // Every receive of the group is posted at once: take messages as they
  // arrive (a probed header's bytes were sent with it), then wait until
  // the peers have matched every send's header.
  std::vector<bool> done(recvs.size(), false);
  size_t left = recvs.size();
  if (!pollUntil(timeout_, [&] {
        for (size_t i = 0; i < recvs.size(); ++i) {
          if (done[i]) continue;
          auto &[peer, tag, out] = recvs[i];
          int flag = 0;
          check(MPI_Iprobe(peer, mpiTag(tag), MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
          if (!flag) continue;
          *out = recv(peer, tag);
          done[i] = true;
          --left;
        }
        bool sent = true;
        for (auto &it : sends) {
          int flag = 0;
          check(MPI_Test(&it->requests.front(), &flag, MPI_STATUS_IGNORE), "MPI_Test");
          sent = sent && flag;
        }
        return left == 0 && sent;
      }))
    throw std::runtime_error(commTimeoutMessage(rank_, timeout_, "the peers of a send/receive group"));
}

Tensor MpiCommunicator::recv(int peer, int64_t tag) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw std::runtime_error("rank " + std::to_string(rank_) + ": bad peer " + std::to_string(peer));
  int t = mpiTag(tag);
  MPI_Status st;
  if (!pollUntil(timeout_, [&] {
        int flag = 0;
        check(MPI_Iprobe(peer, t, MPI_COMM_WORLD, &flag, &st), "MPI_Iprobe");
        return flag != 0;
      }))
    throw std::runtime_error(commTimeoutMessage(
        rank_, timeout_, "a message from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")"));
  int count = 0;
  MPI_Get_count(&st, MPI_INT64_T, &count);
  std::vector<int64_t> h(size_t(std::max(count, 0)));
  check(MPI_Recv(h.data(), count, MPI_INT64_T, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  std::string bad = "rank " + std::to_string(rank_) + ": bad message header from rank " + std::to_string(peer);
  if (h.size() < 3 || h[1] < 0 || size_t(h[1]) + 3 != h.size()) throw std::runtime_error(bad);
  auto dtype = DType(h[0]);
  size_t bytes = size_t(h.back());
  if (dtype == DType::Undefined) {
    if (bytes != 0) throw std::runtime_error(bad);
    return Tensor();
  }
  Tensor out(dtype, std::vector<int64_t>(h.begin() + 2, h.end() - 1));
  if (out.nbytes() != bytes) throw std::runtime_error(bad + " (byte count " + std::to_string(bytes) + " for " +
                                                      out.describe() + ")");
  char *p = static_cast<char *>(out.raw());
  for (size_t off = 0; off < bytes; off += kChunk)
    check(MPI_Recv(p + off, int(std::min(kChunk, bytes - off)), MPI_BYTE, peer, t, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
  return out;
}

void MpiCommunicator::flush() { pending_->waitAll(); }

// Completes a non-blocking collective within `timeout` seconds, or throws.
static void waitFor(MPI_Request &request, const char *what, int rank, double timeout) {
  if (!pollUntil(timeout, [&] {
        int flag = 0;
        check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), what);
        return flag != 0;
      }))
    throw std::runtime_error(commTimeoutMessage(rank, timeout, std::string(what) + " with ranks that never joined"));
}

void MpiCommunicator::barrier() {
  flush();
  MPI_Request request;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  waitFor(request, "MPI_Ibarrier", rank_, timeout_);
}

void MpiCommunicator::allReduceSum(Tensor &tensor) {
  MPI_Datatype type;
  if (tensor.dtype() == DType::Float32) type = MPI_FLOAT;
  else if (tensor.dtype() == DType::Float64) type = MPI_DOUBLE;
  else throw std::runtime_error("allReduceSum: " + tensor.describe() + " is not float32 or float64");
  flush();
  size_t per = kChunk / dtypeSize(tensor.dtype());
  char *p = static_cast<char *>(tensor.raw());
  size_t n = size_t(tensor.numel());
  for (size_t off = 0; off < n; off += per) {
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, p + off * dtypeSize(tensor.dtype()), int(std::min(per, n - off)),
                         type, MPI_SUM, MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    waitFor(request, "MPI_Iallreduce", rank_, timeout_);
  }
}

namespace {
/// MPI counts and displacements are int: refuse what does not fit.
std::vector<int> intCounts(const std::vector<int64_t> &v, size_t scale, const char *what) {
  std::vector<int> out;
  for (int64_t x : v) {
    if (x < 0 || uint64_t(x) * scale > uint64_t(INT32_MAX))
      throw std::runtime_error(std::string(what) + ": " + std::to_string(x) +
                               " elements is more than one MPI call moves (2^31 - 1 units)");
    out.push_back(int(uint64_t(x) * scale));
  }
  return out;
}
} // namespace

Tensor MpiCommunicator::reduceScatterSum(const std::vector<int> &ranks, const Tensor &in,
                                         const std::vector<int64_t> &counts, int64_t /*tag*/) {
  size_t me = 0;
  std::vector<int64_t> off = collectiveOffsets(*this, ranks, counts, me, "reduceScatterSum");
  if (in.dtype() != DType::Float32 || in.numel() != off.back())
    throw std::runtime_error("reduceScatterSum: " + in.describe() + " is not " + std::to_string(off.back()) +
                             " float32 elements");
  Tensor out(DType::Float32, {counts[me]});
  if (ranks.size() == 1) {
    if (counts[me]) std::memcpy(out.raw(), in.raw(), in.nbytes());
    return out;
  }
  std::vector<int> n = intCounts(counts, 1, "reduceScatterSum");
  MPI_Request request;
  check(MPI_Ireduce_scatter(in.raw(), out.raw(), n.data(), MPI_FLOAT, MPI_SUM, pending_->group(ranks),
                            &request),
        "MPI_Ireduce_scatter");
  waitFor(request, "MPI_Ireduce_scatter", rank_, timeout_);
  return out;
}

Tensor MpiCommunicator::allGather(const std::vector<int> &ranks, const Tensor &mine,
                                  const std::vector<int64_t> &counts, int64_t /*tag*/) {
  size_t me = 0;
  std::vector<int64_t> off = collectiveOffsets(*this, ranks, counts, me, "allGather");
  if (mine.numel() != counts[me])
    throw std::runtime_error("allGather: rank " + std::to_string(rank_) + " passed " + mine.describe() +
                             ", expected " + std::to_string(counts[me]) + " elements");
  Tensor out(mine.dtype(), {off.back()});
  if (ranks.size() == 1) {
    if (counts[me]) std::memcpy(out.raw(), mine.raw(), mine.nbytes());
    return out;
  }
  size_t e = dtypeSize(mine.dtype());
  std::vector<int> n = intCounts(counts, e, "allGather"), at = intCounts(off, e, "allGather");
  MPI_Request request;
  check(MPI_Iallgatherv(mine.raw(), n[me], MPI_BYTE, out.raw(), n.data(), at.data(), MPI_BYTE,
                        pending_->group(ranks), &request),
        "MPI_Iallgatherv");
  waitFor(request, "MPI_Iallgatherv", rank_, timeout_);
  return out;
}

void MpiCommunicator::abort(const std::string &why) {
  std::fprintf(stderr, "rank %d: aborting the MPI job: %s\n", rank_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

} // namespace hetplan::runtime
