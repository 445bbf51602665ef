//===- RebalanceTest.cpp - shares from measured speeds (Rebalance.h) ------===//
#include "hetplan/runtime/Rebalance.h"

#include <gtest/gtest.h>

using namespace hetplan::runtime;

namespace {
/// One stage of `shares.size()` one-rank workers, one micro-batch.
hetplan::plan::Plan dataParallel(const std::vector<int64_t> &shares) {
  hetplan::plan::Plan p;
  int64_t total = 0;
  auto *st = p.add_stages();
  for (size_t w = 0; w < shares.size(); ++w) {
    auto *wk = st->add_workers();
    wk->add_ranks(uint32_t(w));
    wk->set_samples(shares[w]);
    wk->set_sample_offset(total);
    total += shares[w];
    auto *r = p.add_ranks();
    r->set_rank(uint32_t(w));
    r->set_worker(uint32_t(w));
    r->add_program()->set_kind(hetplan::plan::Instruction::FORWARD);
  }
  p.mutable_settings()->set_global_batch(total);
  p.mutable_settings()->set_micro_batches(1);
  return p;
}
} // namespace

TEST(Rebalance, ProportionalSharesAreIntegersSummingToTheTotal) {
  EXPECT_EQ(proportionalShares(12, {4, 4, 2}, {24, 24, 24}), (std::vector<int64_t>{5, 5, 2}));
  EXPECT_EQ(proportionalShares(12, {1, 1, 1}, {24, 24, 24}), (std::vector<int64_t>{4, 4, 4}));
  // Ties go to the lower index; every worker keeps one sample.
  EXPECT_EQ(proportionalShares(5, {1, 1}, {10, 10}), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(proportionalShares(6, {1000, 1, 1}, {10, 10, 10}), (std::vector<int64_t>{4, 1, 1}));
  // Caps: what a capped worker cannot take goes to the others.
  EXPECT_EQ(proportionalShares(12, {10, 1, 1}, {6, 24, 24}), (std::vector<int64_t>{6, 3, 3}));
}

TEST(Rebalance, MovesAfterConsecutiveSlowSteps) {
  auto plan = dataParallel({4, 4, 4});
  Rebalancer rb(plan, {});
  // Rank 2 takes twice as long for the same share: 2 s against an optimum
  // of 12 / (4 + 4 + 2) = 1.2 s.
  EXPECT_TRUE(rb.observe(plan, {1, 1, 2}, 1).empty()); // one slow step: not yet
  auto events = rb.observe(plan, {1, 1, 2}, 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].stage, 0u);
  EXPECT_EQ(events[0].oldShares, (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(events[0].newShares, (std::vector<int64_t>{5, 5, 2}));
  EXPECT_DOUBLE_EQ(events[0].speeds[2], 2.0);
  EXPECT_EQ(events[0].describe(),
            "rebalance: after step 2, stage 0 shares 4,4,4 -> 5,5,2 (measured samples/s per worker: 4, 4, 2)");
  // Within the threshold nothing moves, and a fast step resets the count.
  EXPECT_TRUE(rb.observe(plan, {1, 1, 1.05}, 3).empty());
  EXPECT_TRUE(rb.observe(plan, {1, 1, 2}, 4).empty());
  EXPECT_TRUE(rb.observe(plan, {1, 1, 1}, 5).empty());
  EXPECT_TRUE(rb.observe(plan, {1, 1, 2}, 6).empty());
}

TEST(Rebalance, CapsBoundTheGrowth) {
  auto plan = dataParallel({4, 4, 4});
  RebalanceOptions opts;
  opts.steps = 1;
  opts.growBound = 1.25; // at most 5 samples each
  Rebalancer rb(plan, opts);
  auto events = rb.observe(plan, {1, 1, 100}, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].newShares, (std::vector<int64_t>{5, 5, 2}));
  // The rank's recorded memory: 100 bytes of activations for 4 samples,
  // 50 fixed, capacity 200: at most 4 * 150 / 100 = 6 samples.
  auto mem = dataParallel({4, 4, 4});
  for (auto &r : *mem.mutable_ranks()) {
    r.mutable_memory()->set_capacity(200);
    r.mutable_memory()->set_activations(100);
    r.mutable_memory()->set_peak(150);
  }
  opts.growBound = 10;
  EXPECT_EQ(Rebalancer(mem, opts).caps(0), (std::vector<int64_t>{6, 6, 6}));
}

TEST(Rebalance, ParsesTheTestSlowdown) {
  EXPECT_EQ(parseSlowRank("1:0.5", 3), (std::pair<int, double>{1, 0.5}));
  EXPECT_THROW(parseSlowRank("3:0.5", 3), std::runtime_error);
  EXPECT_THROW(parseSlowRank("1:-1", 3), std::runtime_error);
  EXPECT_THROW(parseSlowRank("1", 3), std::runtime_error);
}
