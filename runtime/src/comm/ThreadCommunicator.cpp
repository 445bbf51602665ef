//===- ThreadCommunicator.cpp - ranks as threads of one process -----------===//
#include "hetplan/runtime/Communicator.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

namespace hetplan::runtime {

double commTimeoutSeconds() {
  const char *env = std::getenv("HETPLAN_COMM_TIMEOUT");
  if (!env || !*env) return 600;
  char *end = nullptr;
  double v = std::strtod(env, &end);
  if (*end || !std::isfinite(v) || v < 0)
    throw std::runtime_error(std::string("HETPLAN_COMM_TIMEOUT='") + env +
                             "': expected seconds (a number >= 0; 0 waits forever)");
  return v;
}

std::string commTimeoutMessage(int rank, double seconds, const std::string &what) {
  std::string t = std::to_string(seconds);
  t.erase(t.find_last_not_of('0') + 1);
  if (!t.empty() && t.back() == '.') t.pop_back();
  return "rank " + std::to_string(rank) + " waited " + t + " s for " + what +
         "; a rank is stuck or the plan waits on itself (HETPLAN_COMM_TIMEOUT sets the limit)";
}

bool commRendezvous() {
  const char *env = std::getenv("HETPLAN_COMM_RENDEZVOUS");
  if (!env || !*env || std::string(env) == "0") return false;
  if (std::string(env) == "1") return true;
  throw std::runtime_error(std::string("HETPLAN_COMM_RENDEZVOUS='") + env + "': expected 0 or 1");
}

namespace {
class ThreadComm;
} // namespace

struct ThreadCommGroup::State {
  int size = 0;
  std::mutex mutex;
  std::condition_variable cv;
  struct Message {
    Tensor tensor;
    uint64_t id;
  };
  std::map<std::tuple<int, int, int64_t>, std::deque<Message>> channels; // (src, dst, tag)
  // Rendezvous mode (commRendezvous()): ids of sent messages not yet received.
  bool rendezvous = false;
  uint64_t nextId = 0;
  std::set<uint64_t> unreceived;
  bool aborted = false;
  std::string abortReason;
  // barrier / all-reduce: a generation counter, ranks arrived in this one
  uint64_t generation = 0;
  int arrived = 0;
  Tensor sum;
  Tensor results[2];
  std::vector<std::unique_ptr<ThreadComm>> comms;

  void abortLocked(const std::string &why) {
    if (!aborted) {
      aborted = true;
      abortReason = why;
    }
    cv.notify_all();
  }

  void throwIfAborted() {
    if (aborted) throw CommAborted("communication aborted: " + abortReason);
  }
};

namespace {

void addInto(Tensor &acc, const Tensor &t) {
  if (acc.dtype() == DType::Float32) {
    float *a = acc.data<float>();
    const float *b = t.data<float>();
    for (int64_t i = 0, n = acc.numel(); i < n; ++i) a[i] += b[i];
  } else {
    double *a = acc.data<double>();
    const double *b = t.data<double>();
    for (int64_t i = 0, n = acc.numel(); i < n; ++i) a[i] += b[i];
  }
}

class ThreadComm final : public Communicator {
public:
  ThreadComm(ThreadCommGroup::State &s, int rank, double timeout)
      : s_(s), rank_(rank), timeout_(timeout) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }

  void send(int peer, int64_t tag, const Tensor &tensor) override {
    checkPeer(peer);
    // Copy: the sender may reuse or free its buffer (as with MPI_Send). A
    // device tensor goes as it is (nobody writes into one once made): a
    // device receive takes it, any other receive copies it to the host.
    Tensor copy = tensor.isDevice() ? tensor : tensor.clone();
    std::unique_lock<std::mutex> lock(s_.mutex);
    s_.throwIfAborted();
    uint64_t id = s_.nextId++;
    s_.channels[{rank_, peer, tag}].push_back({std::move(copy), id});
    s_.cv.notify_all();
    if (!s_.rendezvous) return;
    s_.unreceived.insert(id);
    if (inGroup_) {
      groupSends_.emplace_back(id, peer);
      return;
    }
    // Unbuffered, like ncclSend outside a group: wait for the receiver.
    if (!waitFor(lock, [&] { return s_.aborted || !s_.unreceived.count(id); }))
      timedOut("rank " + std::to_string(peer) + " to receive a message (tag " + std::to_string(tag) + ")");
    s_.throwIfAborted();
  }

  void recvDeviceInGroup(int peer, int64_t tag, Tensor *out) override {
    if (!inGroup_) {
      *out = take(peer, tag);
      return;
    }
    deviceOuts_.insert(out);
    groupRecvs_.emplace_back(peer, tag, out);
  }

  void groupEnd() override {
    std::set<Tensor *> device = std::move(deviceOuts_);
    deviceOuts_.clear();
    if (!inGroup_) throw std::runtime_error("rank " + std::to_string(rank_) + ": groupEnd without groupStart");
    auto outs = groupRecvs_;
    if (s_.rendezvous) rendezvousGroupEnd();
    else {
      inGroup_ = false;
      auto recvs = std::move(groupRecvs_);
      groupRecvs_.clear();
      // Buffered sends: every peer's sends of its group are already posted
      // (Communicator::groupEnd's order).
      for (auto &[peer, tag, out] : recvs) *out = take(peer, tag);
    }
    for (auto &[peer, tag, out] : outs)
      if (!device.count(out)) *out = out->toHost();
  }

  Tensor recv(int peer, int64_t tag) override { return take(peer, tag).toHost(); }

private:
  std::set<Tensor *> deviceOuts_; // the open group's device receives

  /// groupEnd under HETPLAN_COMM_RENDEZVOUS (NCCL's rules).
  void rendezvousGroupEnd() {
    inGroup_ = false;
    auto recvs = std::move(groupRecvs_);
    auto sends = std::move(groupSends_);
    groupRecvs_.clear();
    groupSends_.clear();
    // The group's receives are all posted at once: take each message as it
    // arrives, in any order across peers (NCCL progresses a group's
    // operations together), then wait until the peers took every send.
    std::unique_lock<std::mutex> lock(s_.mutex);
    std::vector<bool> done(recvs.size(), false);
    size_t left = recvs.size();
    auto progress = [&] {
      for (size_t i = 0; i < recvs.size(); ++i) {
        if (done[i]) continue;
        auto &[peer, tag, out] = recvs[i];
        if (takeLocked(peer, tag, *out)) {
          done[i] = true;
          --left;
        }
      }
      bool sent = true;
      for (const auto &[id, peer] : sends) sent = sent && !s_.unreceived.count(id);
      return s_.aborted || (left == 0 && sent);
    };
    if (!waitFor(lock, progress)) timedOut("the peers of a send/receive group");
    s_.throwIfAborted();
  }


  /// The next message from `peer` under `tag`, as sent (maybe a device tensor).
  Tensor take(int peer, int64_t tag) {
    checkPeer(peer);
    std::unique_lock<std::mutex> lock(s_.mutex);
    auto key = std::make_tuple(peer, rank_, tag);
    if (!waitFor(lock, [&] {
          if (s_.aborted) return true;
          auto it = s_.channels.find(key);
          return it != s_.channels.end() && !it->second.empty();
        }))
      timedOut("a message from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")");
    s_.throwIfAborted();
    Tensor t;
    takeLocked(peer, tag, t);
    return t;
  }

public:
  void barrier() override {
    collective(nullptr);
  }

  void allReduceSum(Tensor &tensor) override {
    if (tensor.dtype() != DType::Float32 && tensor.dtype() != DType::Float64)
      throw std::runtime_error("allReduceSum: " + tensor.describe() + " is not float32 or float64");
    collective(&tensor);
  }

  void abort(const std::string &why) override {
    std::lock_guard<std::mutex> lock(s_.mutex);
    s_.abortLocked(why);
  }

private:
  // Takes the next message from `peer` under `tag` into `out` if there is
  // one (the mutex held); a rendezvous sender waiting for it wakes.
  bool takeLocked(int peer, int64_t tag, Tensor &out) {
    auto it = s_.channels.find(std::make_tuple(peer, rank_, tag));
    if (it == s_.channels.end() || it->second.empty()) return false;
    out = std::move(it->second.front().tensor);
    if (s_.unreceived.erase(it->second.front().id)) s_.cv.notify_all();
    it->second.pop_front();
    if (it->second.empty()) s_.channels.erase(it);
    return true;
  }

  // Waits for `ready` at most timeout_ seconds (forever when 0); false on timeout.
  template <typename Pred> bool waitFor(std::unique_lock<std::mutex> &lock, Pred ready) {
    if (timeout_ <= 0) {
      s_.cv.wait(lock, ready);
      return true;
    }
    return s_.cv.wait_for(lock, std::chrono::duration<double>(timeout_), ready);
  }
  // Fails the whole group: the others wake with CommAborted naming this rank.
  [[noreturn]] void timedOut(const std::string &what) {
    std::string why = commTimeoutMessage(rank_, timeout_, what);
    s_.abortLocked(why);
    throw std::runtime_error(why);
  }

  void checkPeer(int peer) const {
    if (peer < 0 || peer >= s_.size || peer == rank_)
      throw std::runtime_error("rank " + std::to_string(rank_) + ": bad peer " + std::to_string(peer));
  }

  // The last rank to arrive finishes the sum, stores it as the result of
  // its generation and wakes the others. Results alternate between two
  // slots: generation g+2 cannot finish before every rank has left g.
  void collective(Tensor *t) {
    std::unique_lock<std::mutex> lock(s_.mutex);
    s_.throwIfAborted();
    uint64_t gen = s_.generation;
    if (t) {
      if (s_.arrived == 0 || !s_.sum.defined()) s_.sum = t->clone();
      else if (s_.sum.dtype() != t->dtype() || s_.sum.shape() != t->shape())
        s_.abortLocked("allReduceSum: ranks passed different tensors (" + s_.sum.describe() +
                       " and " + t->describe() + ")");
      else addInto(s_.sum, *t);
    }
    s_.throwIfAborted();
    if (++s_.arrived == s_.size) {
      s_.arrived = 0;
      s_.results[gen % 2] = std::move(s_.sum);
      s_.sum = Tensor();
      ++s_.generation;
      s_.cv.notify_all();
    } else {
      if (!waitFor(lock, [&] { return s_.aborted || s_.generation != gen; }))
        timedOut(std::string(t ? "an all-reduce" : "a barrier") + " that " +
                 std::to_string(s_.size - s_.arrived) + " of " + std::to_string(s_.size) +
                 " ranks never joined");
      s_.throwIfAborted();
    }
    if (t) {
      const Tensor &r = s_.results[gen % 2];
      std::memcpy(t->raw(), r.raw(), r.nbytes());
    }
  }

  ThreadCommGroup::State &s_;
  int rank_;
  double timeout_;
  std::vector<std::pair<uint64_t, int>> groupSends_; // rendezvous: (id, peer) of the open group
};

} // namespace

ThreadCommGroup::ThreadCommGroup(int size) : ThreadCommGroup(size, commRendezvous()) {}

ThreadCommGroup::ThreadCommGroup(int size, bool rendezvous) : state_(std::make_unique<State>()) {
  if (size < 1) throw std::runtime_error("a communicator group needs at least one rank");
  state_->size = size;
  state_->rendezvous = rendezvous;
  double timeout = commTimeoutSeconds();
  for (int r = 0; r < size; ++r) state_->comms.push_back(std::make_unique<ThreadComm>(*state_, r, timeout));
}
ThreadCommGroup::~ThreadCommGroup() = default;
int ThreadCommGroup::size() const { return state_->size; }
Communicator &ThreadCommGroup::communicator(int rank) { return *state_->comms.at(rank); }

} // namespace hetplan::runtime
