//===- CommunicatorTest.cpp - blocking calls fail in bounded time ---------===//
//
// A stuck or dead peer must not hang a run: every receive and collective of
// the in-process communicator waits at most HETPLAN_COMM_TIMEOUT seconds,
// then fails naming the rank and what it waited for, and wakes the others.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Communicator.h"

#include "PlanFixtures.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

using namespace hetplan::runtime;
using hetplan::test::errorOf;

namespace {
struct TimeoutEnv {
  explicit TimeoutEnv(const char *value) { setenv("HETPLAN_COMM_TIMEOUT", value, 1); }
  ~TimeoutEnv() { unsetenv("HETPLAN_COMM_TIMEOUT"); }
};

} // namespace

TEST(Communicator, ReceiveFromASilentPeerTimesOutNamingBothRanks) {
  TimeoutEnv env("0.2");
  ThreadCommGroup group(3);
  auto start = std::chrono::steady_clock::now();
  std::string error = errorOf([&] { group.communicator(2).recv(0, 7); });
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(error, "rank 2 waited 0.2 s for a message from rank 0 (tag 7); a rank is stuck or "
                   "the plan waits on itself (HETPLAN_COMM_TIMEOUT sets the limit)");
  EXPECT_GE(waited, 0.2);
  EXPECT_LT(waited, 30);
  // The group is aborted: another rank's wait ends at once with the reason.
  std::string other = errorOf([&] { group.communicator(1).recv(0, 1); });
  EXPECT_NE(other.find("communication aborted: rank 2 waited 0.2 s"), std::string::npos) << other;
}

// Rank 0 alone in the all-reduce of 3 ranks: no other thread, so nothing
// depends on when a thread starts. It gives up naming how many never joined
// (2 of 3), and a rank that comes later fails at once with that reason.
TEST(Communicator, CollectiveThatARankNeverJoinsTimesOut) {
  TimeoutEnv env("0.2");
  ThreadCommGroup group(3);
  const std::string why = "rank 0 waited 0.2 s for an all-reduce that 2 of 3 ranks never joined; a rank is "
                          "stuck or the plan waits on itself (HETPLAN_COMM_TIMEOUT sets the limit)";
  Tensor x(DType::Float32, {4});
  EXPECT_EQ(errorOf([&] { group.communicator(0).allReduceSum(x); }), why);
  Tensor y(DType::Float32, {4});
  EXPECT_EQ(errorOf([&] { group.communicator(1).allReduceSum(y); }), "communication aborted: " + why);
  EXPECT_EQ(errorOf([&] { group.communicator(2).barrier(); }), "communication aborted: " + why);
}

// Two ranks wait on the third. Which gives up first, and whether the other
// had joined by then (a thread may start late on a loaded machine), is the
// scheduler's choice; what must hold either way: exactly one times out,
// counting the ranks missing at that moment (the other one too if it had
// not joined yet, which then finds the group aborted on arrival), and the
// other fails with its reason -- woken from its wait, or at once on arrival.
// The exact count is pinned by the test above.
TEST(Communicator, CollectiveTimeoutWakesTheOtherWaitingRank) {
  TimeoutEnv env("0.2");
  ThreadCommGroup group(3);
  std::string errors[2];
  std::thread t([&] {
    Tensor x(DType::Float32, {4});
    errors[1] = errorOf([&] { group.communicator(1).allReduceSum(x); });
  });
  Tensor x(DType::Float32, {4});
  errors[0] = errorOf([&] { group.communicator(0).allReduceSum(x); });
  t.join();
  const std::string aborted = "communication aborted: ";
  int gaveUp = errors[0].rfind(aborted, 0) == 0 ? 1 : 0;
  const std::string &timedOut = errors[gaveUp], &other = errors[1 - gaveUp];
  const std::string stem = "rank " + std::to_string(gaveUp) + " waited 0.2 s for an all-reduce that ";
  const std::string tail = " of 3 ranks never joined; a rank is stuck or the plan waits on itself "
                           "(HETPLAN_COMM_TIMEOUT sets the limit)";
  EXPECT_TRUE(timedOut == stem + "1" + tail || timedOut == stem + "2" + tail)
      << errors[0] << " | " << errors[1];
  EXPECT_EQ(other, aborted + timedOut);
}

// A receive already waiting gets a message sent later. The limit only
// bounds a hang: 60 s, so that no scheduler delay of the sender fails it
// (the tests that succeed below use it too).
TEST(Communicator, MessagesWithinTheLimitArrive) {
  TimeoutEnv env("60");
  ThreadCommGroup group(2);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Tensor v(DType::Float32, {2});
    v.data<float>()[0] = 3;
    group.communicator(0).send(1, 4, v);
  });
  Tensor got = group.communicator(1).recv(0, 4);
  t.join();
  EXPECT_EQ(got.data<float>()[0], 3);
}

TEST(Communicator, TimeoutSettingIsChecked) {
  {
    TimeoutEnv env("soon");
    EXPECT_EQ(errorOf([] { commTimeoutSeconds(); }),
              "HETPLAN_COMM_TIMEOUT='soon': expected seconds (a number >= 0; 0 waits forever)");
  }
  {
    TimeoutEnv env("nan");
    EXPECT_NE(errorOf([] { commTimeoutSeconds(); }), "");
  }
  {
    TimeoutEnv env("0");
    EXPECT_EQ(commTimeoutSeconds(), 0);
  }
  EXPECT_EQ(commTimeoutSeconds(), 600);
}

// Unbuffered sends (NCCL's point-to-point; the thread and MPI communicators
// with HETPLAN_COMM_RENDEZVOUS=1): two ranks that each send to the other
// first wait on each other forever -- unless both do it inside a group,
// which completes once every send and receive of it has met its peer.
namespace {
/// Runs `body(comm)` on every rank of a rendezvous group; the errors.
std::vector<std::string> onRanks(int n, const std::function<void(Communicator &)> &body) {
  ThreadCommGroup group(n, /*rendezvous=*/true);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { errors[size_t(r)] = errorOf([&] { body(group.communicator(r)); }); });
  for (auto &t : threads) t.join();
  return errors;
}

Tensor scalar(float v) {
  Tensor t(DType::Float32, {1});
  t.data<float>()[0] = v;
  return t;
}
} // namespace

TEST(Communicator, RendezvousSendsToEachOtherFirstDeadlock) {
  TimeoutEnv env("0.3");
  auto errors = onRanks(2, [](Communicator &c) {
    int peer = 1 - c.rank();
    c.send(peer, 1, scalar(float(c.rank())));
    c.recv(peer, 1);
  });
  // The first to give up names what it waited for; the other is woken.
  std::string all = errors[0] + " | " + errors[1];
  EXPECT_NE(all.find("to receive a message (tag 1)"), std::string::npos) << all;
}

TEST(Communicator, RendezvousSendsToEachOtherInAGroupComplete) {
  TimeoutEnv env("60");
  std::vector<float> got(2, -1);
  auto errors = onRanks(2, [&](Communicator &c) {
    int peer = 1 - c.rank();
    Tensor in;
    c.groupStart();
    c.send(peer, 1, scalar(float(c.rank() + 10)));
    c.recvInGroup(peer, 1, &in);
    EXPECT_FALSE(in.defined()); // completed by groupEnd, not before
    c.groupEnd();
    got[size_t(c.rank())] = in.data<float>()[0];
  });
  EXPECT_EQ(errors[0] + errors[1], "");
  EXPECT_EQ(got[0], 11);
  EXPECT_EQ(got[1], 10);
}

// A group takes its messages in arrival order across peers: rank 0's group
// receives from 1 and 2, where 2 sends only after 1's send was received.
TEST(Communicator, RendezvousGroupTakesMessagesAsTheyArrive) {
  TimeoutEnv env("60");
  auto errors = onRanks(3, [&](Communicator &c) {
    if (c.rank() == 0) {
      Tensor a, b;
      c.groupStart();
      c.recvInGroup(2, 5, &a);
      c.recvInGroup(1, 5, &b);
      c.groupEnd();
      EXPECT_EQ(a.data<float>()[0], 2);
      EXPECT_EQ(b.data<float>()[0], 1);
    } else if (c.rank() == 1) {
      c.send(0, 5, scalar(1)); // waits until rank 0 takes it
      c.send(2, 6, scalar(0));
    } else {
      c.recv(1, 6);
      c.send(0, 5, scalar(2));
    }
  });
  EXPECT_EQ(errors[0] + errors[1] + errors[2], "");
}

// Buffered communicators run the same groups (receives complete in order).
TEST(Communicator, BufferedGroupsComplete) {
  ThreadCommGroup group(2, /*rendezvous=*/false);
  Communicator &a = group.communicator(0), &b = group.communicator(1);
  Tensor fromB, fromA;
  a.groupStart();
  a.send(1, 3, scalar(7));
  a.recvInGroup(1, 3, &fromB);
  b.groupStart();
  b.send(0, 3, scalar(8));
  b.recvInGroup(0, 3, &fromA);
  b.groupEnd();
  a.groupEnd();
  EXPECT_EQ(fromB.data<float>()[0], 8);
  EXPECT_EQ(fromA.data<float>()[0], 7);
  EXPECT_THROW(a.groupEnd(), std::runtime_error);
}

TEST(Communicator, RendezvousSettingIsChecked) {
  setenv("HETPLAN_COMM_RENDEZVOUS", "yes", 1);
  EXPECT_EQ(errorOf([] { commRendezvous(); }), "HETPLAN_COMM_RENDEZVOUS='yes': expected 0 or 1");
  setenv("HETPLAN_COMM_RENDEZVOUS", "1", 1);
  EXPECT_TRUE(commRendezvous());
  unsetenv("HETPLAN_COMM_RENDEZVOUS");
  EXPECT_FALSE(commRendezvous());
}
