//===- RebalanceTest.cpp - shares from measured speeds (Rebalance.h) ------===//
#include "hetplan/runtime/Rebalance.h"
#include "hetplan/hetplan.h"
#include "hetplan/runtime/Session.h"
#include "PlanFixtures.h"

#include <cstdio>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

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

TEST(Rebalance, BalancedSharesMinimiseTheSlowestWorker) {
  // Worker 1 has a fixed cost of 2 s: 12 + 4 samples finish together (3 s).
  EXPECT_EQ(balancedShares(16, {{0, 0.25}, {2, 0.25}}, {32, 32}), (std::vector<int64_t>{12, 4}));
  EXPECT_EQ(balancedShares(16, {{0, 0.25}, {0, 0.25}}, {32, 32}), (std::vector<int64_t>{8, 8}));
  EXPECT_THROW(balancedShares(2, {{0, 1}, {0, 1}, {0, 1}}, {2, 2, 2}), std::runtime_error);
}

TEST(Rebalance, FitsAFixedCostOnceTwoSharesWereMeasured) {
  RebalanceOptions opts;
  opts.steps = 1;
  opts.threshold = 0.05;
  auto plan = dataParallel({8, 8});
  Rebalancer rb(plan, opts);
  // Worker 1 takes 2 + 0.25 n s, worker 0 0.25 n s. At 8 + 8 its speed
  // looks half of worker 0's: proportional shares 11 + 5.
  auto events = rb.observe(plan, {2, 4}, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].newShares, (std::vector<int64_t>{11, 5}));
  // At 11 + 5 (2.75 s, 3.25 s) the two points give its fixed cost: 12 + 4.
  plan = dataParallel({11, 5});
  events = rb.observe(plan, {2.75, 3.25}, 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].newShares, (std::vector<int64_t>{12, 4}));
  plan = dataParallel({12, 4});
  EXPECT_TRUE(rb.observe(plan, {3, 3}, 3).empty());
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

namespace {
std::string gpt2() { return std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx"; }

std::map<std::string, Tensor> gpt2Inputs(int64_t batch) {
  Tensor ids(DType::Int64, {batch, 8});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 37 + 11) % 512;
  return {{"input_ids", ids}};
}

/// gpt2-tiny cut after block h.0: `shares` per stage, 2 micro-batches.
hetplan::plan::Plan gpt2Plan(const std::vector<std::vector<int64_t>> &shares, const std::string &mode) {
  hetplan::test::TwoStageLayout l;
  l.firstNodeOfStage1 = "h.1.ln_1";
  l.shares = shares;
  return hetplan::test::twoStagePlan(gpt2(), l, mode);
}

double maxRelDiff(const Tensor &a, const Tensor &b) {
  double diff = 0, scale = 1e-12;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    scale = std::max(scale, double(std::fabs(b.data<float>()[i])));
  }
  return diff / scale;
}
} // namespace

TEST(Rebalance, SetSharesMovesRangesAndKeepsOutputs) {
  PlanExecutor exec(gpt2Plan({{4, 4, 4}, {12}}, "infer"));
  auto inputs = gpt2Inputs(24);
  Tensor before = exec.run(inputs).at("logits");
  EXPECT_EQ(exec.setShares(0, {6, 4, 2}), "");
  const auto &st = exec.plan().stages(0);
  EXPECT_EQ(st.workers(0).samples(), 6);
  EXPECT_EQ(st.workers(1).sample_offset(), 6);
  EXPECT_EQ(st.workers(2).sample_offset(), 10);
  for (const auto &ins : exec.plan().ranks(2).program())
    if (ins.kind() == hetplan::plan::Instruction::FORWARD) EXPECT_EQ(ins.samples(), 2);
  EXPECT_LT(maxRelDiff(exec.run(inputs).at("logits"), before), 1e-5);
  // Bad shares: one line, nothing changes.
  EXPECT_EQ(exec.setShares(0, {6, 6, 1}), "the shares sum to 13, the micro-batch is 12");
  EXPECT_EQ(exec.setShares(0, {12, 0, 0}), "every worker keeps at least one sample");
  EXPECT_EQ(exec.plan().stages(0).workers(0).samples(), 6);
}

TEST(Rebalance, SetSharesRefusesMovesThatNeedNewPeers) {
  // Stage 1's workers take samples 0-5 and 6-11: giving stage 0's first
  // worker 9 samples would make it send to both.
  PlanExecutor exec(gpt2Plan({{6, 6}, {6, 6}}, "infer"));
  std::string why = exec.setShares(0, {9, 3});
  EXPECT_NE(why.find("the programs would not match the new shares"), std::string::npos) << why;
  EXPECT_EQ(exec.plan().stages(0).workers(0).samples(), 6);
  EXPECT_EQ(exec.plan().stages(0).workers(1).sample_offset(), 6);
}

TEST(Rebalance, TrainingWithMovedSharesEqualsFixedShares) {
  auto plan = gpt2Plan({{4, 4, 4}, {12}}, "train");
  PlanExecutor fixed(plan), moved(plan);
  auto inputs = gpt2Inputs(24);
  Tensor labels = hetplan::test::cyclicLabels(fixed.model(), inputs);
  PlanExecutor::TrainOptions opts;
  opts.eps = 1e-4;
  std::vector<PlanExecutor::RankTrainState> a, b;
  for (int step = 1; step <= 3; ++step) {
    if (step == 2) ASSERT_EQ(moved.setShares(0, {7, 4, 1}), "");
    double la = fixed.train(inputs, labels, a, opts), lb = moved.train(inputs, labels, b, opts);
    EXPECT_NEAR(lb, la, 1e-6 * std::fabs(la)) << "step " << step;
  }
  auto pa = fixed.collectParameters(a), pb = moved.collectParameters(b);
  for (const auto &[name, t] : pa) EXPECT_LT(maxRelDiff(pb.at(name), t), 1e-4) << name;
}

TEST(Rebalance, SessionMovesSharesOfASlowedRank) {
  std::string path = ::testing::TempDir() + "/hetplan_rebalance_session.hpl";
  std::string error;
  ASSERT_TRUE(writePlan(path, gpt2Plan({{4, 4, 4}, {12}}, "infer"), error)) << error;
  auto inputs = gpt2Inputs(24);
  std::unique_ptr<hetplan::Session> plain, rebalancing;
  ASSERT_TRUE(hetplan::Session::fromPlan(path, &plain).ok());
  hetplan::SessionOptions o;
  o.rebalanceThreshold = 0.1;
  ::setenv("HETPLAN_TEST_SLOW_RANK", "2:4", 1); // test only: rank 2 five times slower
  auto st = hetplan::Session::fromPlan(path, &rebalancing, o);
  ::unsetenv("HETPLAN_TEST_SLOW_RANK");
  ASSERT_TRUE(st.ok()) << st.toString();
  std::map<std::string, Tensor> want, got;
  ASSERT_TRUE(plain->run(inputs, &want).ok());
  // Runs of a few milliseconds: on a loaded machine a descheduled peer can
  // hide the straggler for a step, so the first move may come later than
  // the earliest boundary (2, as rebalanceSteps is 2), never before it.
  for (int run = 0; run < 8 && rebalancing->rebalances().empty(); ++run)
    ASSERT_TRUE(rebalancing->run(inputs, &got).ok());
  auto lines = rebalancing->rebalances();
  ASSERT_FALSE(lines.empty());
  int step = 0;
  ASSERT_EQ(std::sscanf(lines[0].c_str(), "rebalance: after step %d,", &step), 1) << lines[0];
  EXPECT_GE(step, 2) << lines[0];
  EXPECT_NE(lines[0].find(", stage 0 shares 4,4,4 -> "), std::string::npos) << lines[0];
  EXPECT_TRUE(plain->rebalances().empty());
  EXPECT_LT(maxRelDiff(got.at("logits"), want.at("logits")), 1e-5);
  // Refused where it cannot run.
  o.rebalanceSteps = 0;
  EXPECT_EQ(hetplan::Session::fromPlan(path, &rebalancing, o).code(), hetplan::StatusCode::InvalidArgument);
  std::remove(path.c_str());
}

TEST(Rebalance, CApiOption) {
  hetplan_session_options *o = nullptr;
  ASSERT_EQ(hetplan_session_options_create(&o), HETPLAN_OK);
  EXPECT_EQ(hetplan_session_options_set_rebalance(o, 0.1, 2), HETPLAN_OK);
  EXPECT_EQ(hetplan_session_options_set_rebalance(o, -1, 2), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(hetplan_session_options_set_rebalance(o, 0.1, 0), HETPLAN_INVALID_ARGUMENT);
  EXPECT_EQ(hetplan_session_options_set_rebalance(nullptr, 0.1, 2), HETPLAN_INVALID_ARGUMENT);
  hetplan_session_options_free(o);
}
