//===- CommunicatorTest.cpp - blocking calls fail in bounded time ---------===//
//
// A stuck or dead peer must not hang a run: every receive and collective of
// the in-process communicator waits at most HETPLAN_COMM_TIMEOUT seconds,
// then fails naming the rank and what it waited for, and wakes the others.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

using namespace hetplan::runtime;

namespace {
struct TimeoutEnv {
  explicit TimeoutEnv(const char *value) { setenv("HETPLAN_COMM_TIMEOUT", value, 1); }
  ~TimeoutEnv() { unsetenv("HETPLAN_COMM_TIMEOUT"); }
};

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}
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

TEST(Communicator, CollectiveThatARankNeverJoinsTimesOut) {
  TimeoutEnv env("0.2");
  ThreadCommGroup group(3);
  std::string first, second;
  std::thread t([&] {
    Tensor x(DType::Float32, {4});
    second = errorOf([&] { group.communicator(1).allReduceSum(x); });
  });
  Tensor x(DType::Float32, {4});
  first = errorOf([&] { group.communicator(0).allReduceSum(x); });
  t.join();
  // Whichever of the two waiting ranks gives up first names the missing one.
  std::string timedOut = first.find("communication aborted") == 0 ? second : first;
  EXPECT_NE(timedOut.find("s for an all-reduce that 1 of 3 ranks never joined"), std::string::npos)
      << first << " | " << second;
}

TEST(Communicator, MessagesWithinTheLimitArrive) {
  TimeoutEnv env("5");
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
