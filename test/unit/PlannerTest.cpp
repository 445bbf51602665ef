//===- PlannerTest.cpp - the planner on synthetic models ------------------===//

#include "passes/planner/Planner.h"
#include "SyntheticModel.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <set>

using namespace hetplan;
using namespace hetplan::planner;

namespace {

using test::clusterOf;
using test::uniformModel;

Plan planOrDie(const cost::ModelCost &m, const cluster::Cluster &c, Options o) {
  auto p = makePlan(m, c, o);
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  return std::move(*p);
}

} // namespace

TEST(Planner, SameInputsSamePlan) {
  auto model = uniformModel(12, 2e12, 50'000'000, 8e6);
  auto cluster = clusterOf("2xA100-80G,4xT4");
  Options o;
  o.globalBatch = 32;
  Plan a = planOrDie(model, cluster, o), b = planOrDie(model, cluster, o);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  EXPECT_EQ(a.stepSeconds, b.stepSeconds);
  EXPECT_EQ(a.microBatches, b.microBatches);
  for (size_t j = 0; j < a.stages.size(); ++j) {
    EXPECT_EQ(a.stages[j].lastLayer, b.stages[j].lastLayer);
    ASSERT_EQ(a.stages[j].workers.size(), b.stages[j].workers.size());
    for (size_t w = 0; w < a.stages[j].workers.size(); ++w)
      EXPECT_EQ(a.stages[j].workers[w].samples, b.stages[j].workers[w].samples);
  }
}

TEST(Planner, FasterDevicesGetMoreSamples) {
  // One stage (pinned) over an A100 and a T4: the batch is split by speed.
  auto model = uniformModel(4, 1e12, 10'000'000, 1e6);
  auto cluster = clusterOf("A100-80G,T4");
  Options o;
  o.globalBatch = 64;
  o.strategy = Strategy::Pinned;
  o.pin = {1, 2, 1, 1};
  Plan p = planOrDie(model, cluster, o);
  ASSERT_EQ(p.stages.size(), 1u);
  ASSERT_EQ(p.stages[0].workers.size(), 2u);
  int64_t a100 = 0, t4 = 0;
  for (const Worker &w : p.stages[0].workers)
    (cluster.devices[w.ranks[0]].type->name == "T4" ? t4 : a100) = w.samples;
  EXPECT_EQ(a100 + t4, 64);
  EXPECT_GT(a100, 4 * t4) << "A100 fp16 is ~4.8x a T4's peak";
}

TEST(Planner, BeatsEvenBaselinesOnAMixedCluster) {
  auto model = uniformModel(24, 4e12, 80'000'000, 16e6);
  auto cluster = clusterOf("4xA100-80G,12xT4");
  Options o;
  o.globalBatch = 96;
  Plan het = planOrDie(model, cluster, o);
  for (Strategy s : {Strategy::DataParallel, Strategy::EvenPipeline, Strategy::Homogeneous}) {
    Options b = o;
    b.strategy = s;
    auto base = makePlan(model, cluster, b);
    if (!base) {
      llvm::consumeError(base.takeError());  // a baseline may not fit at all
      continue;
    }
    EXPECT_LE(het.stepSeconds, base->stepSeconds * 1.0001) << strategyName(s);
  }
}

TEST(Planner, OneFOneBScheduleMatchesTheClosedForm) {
  // Equal stages on identical devices, no transfers to speak of: the
  // simulated compute time is (M + P - 1) * (forward + backward) plus the
  // transfers on the critical path.
  auto model = uniformModel(4, 1e12, 1'000'000, 1e3);
  auto cluster = clusterOf("4xA100-80G");
  Options o;
  o.globalBatch = 8;
  o.strategy = Strategy::Pinned;
  o.pin = {4, 1, 8, 1};
  Plan p = planOrDie(model, cluster, o);
  ASSERT_EQ(p.stages.size(), 4u);
  double fb = p.stages[0].forwardSeconds + p.stages[0].backwardSeconds;
  double lastCompute = 0;
  for (const Event &e : p.timeline)
    if (e.kind == Event::Forward || e.kind == Event::Backward)
      lastCompute = std::max(lastCompute, e.end);
  double send = 0;
  for (const Stage &s : p.stages)
    send = std::max(send, s.sendSeconds);
  ASSERT_LT(send, 1e-3 * fb);
  // Transfers (a microsecond each here) lengthen the critical path a little:
  // at most one per hop of it.
  EXPECT_GE(lastCompute, (8 + 4 - 1) * fb);
  EXPECT_LE(lastCompute, (8 + 4 - 1) * fb + 2 * (8 + 4) * send + 1e-9);
  EXPECT_NEAR(p.bubbleFraction, 3.0 / 11.0, 0.02);
}

TEST(Planner, TooBigModelNamesTheShortfall) {
  // 40 B parameters x 16 bytes = 640 GB of training state on 2 x 16 GB.
  auto model = uniformModel(8, 1e12, 5'000'000'000, 1e6);
  auto cluster = clusterOf("2xT4");
  Options o;
  o.globalBatch = 8;
  auto p = makePlan(model, cluster, o);
  ASSERT_FALSE(bool(p));
  std::string msg = llvm::toString(p.takeError());
  EXPECT_NE(msg.find("no layout fits in memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GiB more on"), std::string::npos) << msg;
  EXPECT_NE(msg.find("What would fix it"), std::string::npos) << msg;
}

TEST(Planner, BatchOutsideOneToTwoToThe24IsRefusedByEveryEntry) {
  // The CLI checks --batch too, but the Python package and C++ callers
  // reach makePlan and evaluateLayout directly.
  auto model = uniformModel(4, 1e12, 1'000'000, 1e3);
  auto cluster = clusterOf("2xA100-80G");
  Options o;
  for (int64_t batch : {int64_t(0), int64_t(-3), kMaxSamples + 1, int64_t(1) << 40}) {
    o.globalBatch = batch;
    auto p = makePlan(model, cluster, o);
    ASSERT_FALSE(bool(p)) << batch;
    std::string msg = llvm::toString(p.takeError());
    EXPECT_TRUE(msg.find("too large") != std::string::npos ||
                msg.find("at least 1") != std::string::npos) << msg;
    Layout layout;
    auto e = evaluateLayout(model, cluster, o, layout);
    ASSERT_FALSE(bool(e)) << batch;
    llvm::consumeError(e.takeError());
  }
  o.globalBatch = 8;
  Layout layout;
  layout.microBatches = 16;
  auto e = evaluateLayout(model, cluster, o, layout);
  ASSERT_FALSE(bool(e));
  EXPECT_NE(llvm::toString(e.takeError()).find("16 micro-batches for a batch of 8"),
            std::string::npos);
}

TEST(Planner, PinErrorsSayWhatIsWrong) {
  auto model = uniformModel(4, 1e12, 1'000'000, 1e3);
  auto cluster = clusterOf("2xA100-80G");
  Options o;
  o.globalBatch = 8;
  o.strategy = Strategy::Pinned;
  o.pin = {2, 2, 4, 1};
  auto p = makePlan(model, cluster, o);
  ASSERT_FALSE(bool(p));
  EXPECT_NE(llvm::toString(p.takeError()).find("needs 4 devices"), std::string::npos);
  o.pin = {2, 1, 3, 1};
  p = makePlan(model, cluster, o);
  ASSERT_FALSE(bool(p));
  EXPECT_NE(llvm::toString(p.takeError()).find("mb=3 does not divide the batch of 8"),
            std::string::npos);
  auto pin = parsePin("pp=4,dq=2");
  ASSERT_FALSE(bool(pin));
  EXPECT_NE(llvm::toString(pin.takeError()).find("unknown key 'dq'"), std::string::npos);
}

TEST(Planner, MemoryFitsEveryUsedDevice) {
  auto model = uniformModel(16, 2e12, 200'000'000, 64e6);
  auto cluster = clusterOf("2xA100-40G,4xV100-16G");
  Options o;
  o.globalBatch = 64;
  Plan p = planOrDie(model, cluster, o);
  for (size_t r = 0; r < p.memory.size(); ++r)
    if (p.stageOfRank[r] >= 0)
      EXPECT_LE(p.memory[r].peak(), p.memory[r].capacity) << "rank " << r;
}

TEST(Planner, AllReduceMovesGradientsInTheirOwnFormat) {
  // Two data-parallel workers; fp16 compute with gradients reduced in fp32
  // (DeepSpeed fp32_allreduce, PyTorch AMP + DDP) moves twice the bytes.
  auto model = uniformModel(2, 1e9, 50'000'000, 1e3);
  auto cluster = clusterOf("2x1xA100-80G;net=10gbps");
  Layout layout;
  layout.stageWorkers = {{{0}, {1}}};
  layout.lastLayer = {1};
  layout.microBatches = 1;
  layout.evenShares = true;
  Options o;
  o.globalBatch = 2;
  o.dtype = cost::DType::FP16;
  auto half = evaluateLayout(model, cluster, o, layout);
  o.gradientDType = cost::DType::FP32;
  auto full = evaluateLayout(model, cluster, o, layout);
  ASSERT_TRUE(bool(half) && bool(full));
  double a = half->stages[0].allReduceSeconds, b = full->stages[0].allReduceSeconds;
  ASSERT_GT(a, 0);
  // Ring: 2 (D-1)/D * bytes / bandwidth + latency; the bytes double.
  EXPECT_NEAR(b / a, 2.0, 0.01);
  EXPECT_GT(full->stepSeconds, half->stepSeconds);
}

TEST(Planner, TensorParallelBackwardAllReducesTheSameBytesOnce) {
  // Megatron's f/g pairs: the backward pass all-reduces as many bytes as the
  // forward one; its compute is twice the forward's.
  auto model = uniformModel(2, 1e10, 1'000'000, 1e6);
  for (auto &l : model.layers)
    l.ops[0].tensorParallelSplit = true;
  auto cluster = clusterOf("2xA100-80G");
  Layout layout;
  layout.stageWorkers = {{{0, 1}}};
  layout.lastLayer = {1};
  layout.tensorParallel = 2;
  layout.microBatches = 1;
  Options o;
  o.globalBatch = 4;
  auto quiet = evaluateLayout(model, cluster, o, layout);
  for (auto &l : model.layers)
    l.tensorParallelAllReduceBytesPerSample = 5e8;
  auto loud = evaluateLayout(model, cluster, o, layout);
  ASSERT_TRUE(bool(quiet) && bool(loud));
  double comm = loud->stages[0].forwardSeconds - quiet->stages[0].forwardSeconds;
  ASSERT_GT(comm, 0);
  EXPECT_NEAR(loud->stages[0].backwardSeconds - quiet->stages[0].backwardSeconds, comm,
              1e-9);
  EXPECT_NEAR(quiet->stages[0].backwardSeconds, 2 * quiet->stages[0].forwardSeconds, 1e-12);
}

TEST(Planner, RingsOfTensorParallelRanksShareTheNodesNetwork) {
  // Two nodes of two GPUs; a worker is a tp pair inside a node. Its two
  // ranks all-reduce half the gradients each, in two rings that both cross
  // the one 10 Gb/s network: as long as one ring moving all of them.
  auto model = uniformModel(2, 1e9, 50'000'000, 1e3);
  auto cluster = clusterOf("2x2xA100-80G;net=10gbps");
  Options o;
  o.globalBatch = 4;
  Layout dp;
  dp.stageWorkers = {{{0}, {2}}};
  dp.lastLayer = {1};
  dp.microBatches = 1;
  dp.evenShares = true;
  Layout tp = dp;
  tp.stageWorkers = {{{0, 1}, {2, 3}}};
  tp.tensorParallel = 2;
  auto a = evaluateLayout(model, cluster, o, dp);
  auto b = evaluateLayout(model, cluster, o, tp);
  ASSERT_TRUE(bool(a) && bool(b));
  EXPECT_NEAR(b->stages[0].allReduceSeconds / a->stages[0].allReduceSeconds, 1.0, 0.01);
}

TEST(Planner, LayoutsReadFromJson) {
  auto layouts = parseLayouts(R"({"layouts": [
      {"micro_batches": 4, "tensor_parallel": 1, "shares": "even",
       "stages": [{"workers": [[0], [1]], "last_layer": 0},
                  {"workers": [[2]], "last_layer": 1}]},
      {"stages": [{"workers": [[0]], "last_layer": 1}]}]})",
                              "l.json");
  ASSERT_TRUE(bool(layouts)) << llvm::toString(layouts.takeError());
  ASSERT_EQ(layouts->size(), 2u);
  EXPECT_EQ((*layouts)[0].microBatches, 4);
  EXPECT_TRUE((*layouts)[0].evenShares);
  EXPECT_EQ((*layouts)[0].stageWorkers[0].size(), 2u);
  EXPECT_EQ((*layouts)[0].lastLayer, (std::vector<int>{0, 1}));
  EXPECT_FALSE((*layouts)[1].evenShares);
  auto bad = parseLayouts(R"({"stages": [{"workers": [[0]]}]})", "b.json");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("last_layer"), std::string::npos);
  // A layout that does not end at the last layer is refused when priced.
  auto model = uniformModel(3, 1e9, 1000, 1e3);
  auto cluster = clusterOf("2xA100-80G");
  Layout l;
  l.stageWorkers = {{{0}}, {{1}}};
  l.lastLayer = {0, 1};
  Options o;
  o.globalBatch = 2;
  auto p = evaluateLayout(model, cluster, o, l);
  ASSERT_FALSE(bool(p));
  EXPECT_NE(llvm::toString(p.takeError()).find("last layer"), std::string::npos);
}

TEST(Planner, EachStageChoosesItsTensorParallelDegree) {
  // Layers too large for a T4 alone (11 GB of weights, gradients and Adam
  // state each) but not for an A100-80G: T4 stages need tensor parallelism
  // to fit, A100 stages do best without its all-reduces. The search gives
  // each stage its own degree, and that beats every single degree.
  auto model = uniformModel(8, 4e11, 700'000'000, 4e6);
  for (auto &l : model.layers) {
    l.ops[0].tensorParallelSplit = true;
    l.tensorParallelFraction = 1;
    l.tensorParallelAllReduceBytesPerSample = 2e6;
  }
  auto cluster = clusterOf("2xA100-80G,4xT4");
  Options o;
  o.globalBatch = 16;
  Plan p = planOrDie(model, cluster, o);
  std::set<int> degrees;
  for (const Stage &st : p.stages) {
    degrees.insert(st.tensorParallel);
    for (const Worker &w : st.workers)
      EXPECT_EQ(int(w.ranks.size()), st.tensorParallel);
  }
  EXPECT_GT(degrees.size(), 1u) << "every stage has tensor parallelism " << *degrees.begin();
  for (int tp : {1, 2, 4}) {
    Options pinned = o;
    pinned.strategy = Strategy::Pinned;
    pinned.pin.tp = tp;
    auto uniform = makePlan(model, cluster, pinned);
    if (!uniform) {
      llvm::consumeError(uniform.takeError());
      continue;
    }
    EXPECT_LE(p.stepSeconds, uniform->stepSeconds * (1 + 1e-9)) << "tp " << tp;
  }
}

TEST(Planner, LayoutGivesEachStageItsOwnDegree) {
  auto model = uniformModel(4, 1e11, 10'000'000, 1e6);
  for (auto &l : model.layers) {
    l.ops[0].tensorParallelSplit = true;
    l.tensorParallelAllReduceBytesPerSample = 1e5;
  }
  auto cluster = clusterOf("2xA100-80G,2xT4");
  auto layouts = parseLayouts(R"({"micro_batches": 2, "stages": [
      {"workers": [[2], [3]], "last_layer": 1},
      {"workers": [[0, 1]], "last_layer": 3, "tensor_parallel": 2}]})",
                              "test.json");
  ASSERT_TRUE(bool(layouts)) << llvm::toString(layouts.takeError());
  ASSERT_EQ((*layouts)[0].stageTensorParallel, (std::vector<int>{1, 2}));
  Options o;
  o.globalBatch = 8;
  auto p = evaluateLayout(model, cluster, o, (*layouts)[0]);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  ASSERT_EQ(p->stages.size(), 2u);
  EXPECT_EQ(p->stages[0].tensorParallel, 1);
  EXPECT_EQ(p->stages[1].tensorParallel, 2);
  EXPECT_EQ(p->stages[0].workers.size(), 2u);
  ASSERT_EQ(p->stages[1].workers.size(), 1u);
  EXPECT_EQ(p->stages[1].workers[0].ranks, (std::vector<int>{0, 1}));
  // Each A100 holds half of its stage's parameters (both stages have two
  // layers of the same size).
  EXPECT_NEAR(p->memory[0].parameters * 2, p->memory[2].parameters, 1.0);
  // A worker of the wrong size names the stage and its degree.
  auto bad = parseLayouts(R"({"stages": [{"workers": [[0]], "last_layer": 3, "tensor_parallel": 2}]})",
                          "bad.json");
  ASSERT_TRUE(bool(bad));
  auto err = evaluateLayout(model, cluster, o, (*bad)[0]);
  ASSERT_FALSE(bool(err));
  EXPECT_NE(llvm::toString(err.takeError()).find("stage 0 has tensor parallelism 2"),
            std::string::npos);
}
