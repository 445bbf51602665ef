//===- PlannerMemoryTest.cpp - memory model and memory savers -------------===//
//
// What a rank holds (docs/planner.md, "Memory"), and activation
// recomputation, ZeRO stages and optimizer offload: their memory, their
// price, and when the search chooses them. Synthetic layer costs.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Planner.h"
#include "SyntheticModel.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

using namespace hetplan;
using namespace hetplan::planner;

namespace {

constexpr double GiB = double(1 << 30);

using test::clusterOf;

/// `layers` layers of one large MatMul each: `params` parameters, `stash`
/// bytes kept for the backward pass per sample, a quarter of it crossing to
/// the next layer.
cost::ModelCost model(int layers, int64_t params, double stash, double flops = 1e12) {
  return test::uniformModel(layers, flops, params, stash);
}

/// One stage of `workers` single-device workers on ranks 0.., all layers.
Layout oneStage(int workers, int layers, int microBatches = 1) {
  Layout l;
  l.stageWorkers.emplace_back();
  for (int r = 0; r < workers; ++r)
    l.stageWorkers.back().push_back({r});
  l.lastLayer = {layers - 1};
  l.microBatches = microBatches;
  l.evenShares = true;
  return l;
}

std::string errorOf(llvm::Expected<Plan> p) {
  if (p)
    return "";
  return llvm::toString(p.takeError());
}

} // namespace

TEST(PlannerMemory, SixteenBytesPerParameterAContextAndTheStepCopy) {
  // Mixed-precision Adam: fp16 weights and gradients (2 + 2), fp32 master
  // weights, momentum and variance (12); the step adds an fp32 gradient
  // copy (4) while no activations are held; a GPU holds its CUDA context.
  auto m = model(2, 100'000'000, 1e6);
  auto gpu = clusterOf("A100-80G");
  Options o;
  o.globalBatch = 4;
  o.recompute = RecomputePolicy::Never;
  auto p = evaluateLayout(m, gpu, o, oneStage(1, 2));
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  const RankMemory &mem = p->memory[0];
  double P = 200e6;
  EXPECT_DOUBLE_EQ(mem.parameters, 2 * P);
  EXPECT_DOUBLE_EQ(mem.gradients, 2 * P);
  EXPECT_DOUBLE_EQ(mem.optimizerState, 12 * P);
  EXPECT_DOUBLE_EQ(mem.optimizerStep, 4 * P);
  EXPECT_DOUBLE_EQ(mem.framework, o.deviceContextBytes);
  // 4 samples x (2 layers x 1 MB kept + the loss's fp32 softmax over the
  // last layer's output: 0.25 MB of fp16 is 125 k elements, 4 bytes each).
  EXPECT_DOUBLE_EQ(mem.activations, 4 * (2e6 + 4 * 1e6 / 4 / 2));
  EXPECT_DOUBLE_EQ(mem.peak(), 16 * P + o.deviceContextBytes +
                                   std::max(mem.activations + mem.workspace, 4 * P));
  // No percentage of the device is set aside: a small model on a CPU needs
  // a small amount of memory (the old 8% kept 41 GiB of a 512 GiB host).
  auto cpu = clusterOf("CPU-2S-AVX512");
  auto tiny = model(2, 70'000, 1e4);
  Options fp32 = o;
  fp32.dtype = cost::DType::FP32;
  auto q = evaluateLayout(tiny, cpu, fp32, oneStage(1, 2));
  ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
  EXPECT_EQ(q->memory[0].framework, 0);
  EXPECT_EQ(q->memory[0].optimizerStep, 0);  // fp32: the optimizer reads the gradients
  EXPECT_DOUBLE_EQ(q->memory[0].parameters + q->memory[0].gradients +
                       q->memory[0].optimizerState,
                   16 * 140'000.0);
  EXPECT_LT(q->memory[0].peak(), 4e6);
}

TEST(PlannerMemory, OneFOneBKeepsStagesMinusIndexMicroBatchesGPipeAll) {
  auto m = model(8, 10'000'000, 4e6);
  auto c = clusterOf("4xA100-80G");
  Layout l;
  for (int j = 0; j < 4; ++j) {
    l.stageWorkers.push_back({{j}});
    l.lastLayer.push_back(2 * j + 1);
  }
  Options o;
  o.recompute = RecomputePolicy::Never;
  // 1F1B: stage j holds min(M, P - j) micro-batches of one sample (the
  // simulated schedule's warm-up forwards min(P - 1 - j, M), then one
  // forward one backward), also with fewer micro-batches than stages; the
  // last stage also the loss's fp32 softmax (1 MB of fp16 output: 2 MB).
  auto loss = [](int j) { return j == 3 ? 4 * 4e6 / 4 / 2 : 0.0; };
  for (int M : {1, 2, 3, 8}) {
    l.microBatches = M;
    o.globalBatch = M;
    auto p = evaluateLayout(m, c, o, l);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    for (int j = 0; j < 4; ++j)
      EXPECT_DOUBLE_EQ(p->memory[j].activations, std::min(4 - j, M) * (2 * 4e6 + loss(j)))
          << "M " << M << ", stage " << j;
  }
  o.schedule = Schedule::GPipe;
  auto g = evaluateLayout(m, c, o, l);
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  for (int j = 0; j < 4; ++j)
    EXPECT_DOUBLE_EQ(g->memory[j].activations, 8 * (2 * 4e6 + loss(j))) << "stage " << j;
  // The search sizes shares by the same count: on 16 GB T4s, 2 layers of
  // 2.5 GB kept per sample fit two micro-batches of one sample (10 GB) on
  // stage 0 of 4, not four (20 GB); 1F1B with M = 2 fits, GPipe with 4 not.
  auto big = model(8, 1'000'000, 2.5e9);
  auto t4 = clusterOf("4xT4");
  o.schedule = Schedule::OneFOneB;
  l.microBatches = o.globalBatch = 2;
  auto fits = evaluateLayout(big, t4, o, l);
  ASSERT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
  EXPECT_DOUBLE_EQ(fits->memory[0].activations, 2 * 2 * 2.5e9);
  l.microBatches = o.globalBatch = 4;
  o.schedule = Schedule::GPipe;
  EXPECT_NE(errorOf(evaluateLayout(big, t4, o, l)).find("does not fit"), std::string::npos);
}

TEST(PlannerMemory, OptimizerSetsStateBytesAndStepTime) {
  // Per parameter: fp16 weights and gradients (2 + 2), the fp32 master
  // copy (4) and 4 bytes per optimizer buffer: SGD none, momentum one,
  // Adam and AdamW two (ZeRO paper, section 3). In fp32 the weights are
  // the master copy. The step streams the whole model state: SGD half of
  // Adam's bytes, momentum three quarters.
  auto m = model(2, 100'000'000, 1e6);
  auto gpu = clusterOf("A100-80G"), four = clusterOf("4xA100-80G");
  double P = 200e6;
  struct Case { runtime::Optimizer o; double fp16State, fp32State, stepShare; };
  const Case cases[] = {{runtime::Optimizer::SGD, 4, 0, 0.5},
                        {runtime::Optimizer::Momentum, 8, 4, 0.75},
                        {runtime::Optimizer::Adam, 12, 8, 1},
                        {runtime::Optimizer::AdamW, 12, 8, 1}};
  Options o;
  o.globalBatch = 4;
  o.recompute = RecomputePolicy::Never;
  o.offload = OffloadPolicy::Never;
  auto adam = evaluateLayout(m, gpu, o, oneStage(1, 2));
  ASSERT_TRUE(bool(adam)) << llvm::toString(adam.takeError());
  for (const Case &k : cases) {
    std::string what = runtime::optimizerName(k.o);
    o.optimizer = k.o;
    o.dtype = cost::DType::FP16;
    auto p = evaluateLayout(m, gpu, o, oneStage(1, 2));
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_DOUBLE_EQ(p->memory[0].optimizerState, k.fp16State * P) << what;
    EXPECT_DOUBLE_EQ(p->memory[0].parameters + p->memory[0].gradients, 4 * P) << what;
    EXPECT_DOUBLE_EQ(p->memory[0].optimizerStep, 4 * P) << what;  // the fp32 gradient copy
    EXPECT_NEAR(p->stages[0].optimizerSeconds, k.stepShare * adam->stages[0].optimizerSeconds, 1e-12) << what;
    // ZeRO-1 over 4 workers shards whatever state there is.
    Layout z = oneStage(4, 2);
    z.zeroStage = 1;
    auto q = evaluateLayout(m, four, o, z);
    ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
    EXPECT_DOUBLE_EQ(q->memory[0].optimizerState, k.fp16State * P / 4) << what;
    o.dtype = cost::DType::FP32;
    auto f = evaluateLayout(m, gpu, o, oneStage(1, 2));
    ASSERT_TRUE(bool(f)) << llvm::toString(f.takeError());
    EXPECT_DOUBLE_EQ(f->memory[0].optimizerState, k.fp32State * P) << what;
    EXPECT_EQ(f->memory[0].optimizerStep, 0) << what;
  }
  // Offloaded, the host step scales with the bytes too: SGD's host time
  // is half of Adam's (the PCIe copies are the same).
  o.dtype = cost::DType::FP16;
  o.offload = OffloadPolicy::Always;
  double host[2];
  for (int i = 0; i < 2; ++i) {
    o.optimizer = i == 0 ? runtime::Optimizer::SGD : runtime::Optimizer::Adam;
    auto p = evaluateLayout(m, gpu, o, oneStage(1, 2));
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_EQ(p->memory[0].optimizerState, 0);
    host[i] = p->stages[0].optimizerSeconds;
  }
  EXPECT_NEAR(host[1] - host[0], 0.5 * P / o.hostAdamParamsPerSecond, 1e-9);
}

TEST(PlannerMemory, RecomputationMakesARefusedLayoutFitAndAutoChoosesIt) {
  // 8 layers keeping 2 GiB per sample each: 16 GiB of activations for one
  // sample does not fit a 16 GiB T4 beside 6.4 GB of training state;
  // keeping each layer's input (0.5 GiB) and recomputing does.
  auto m = model(8, 50'000'000, 2 * GiB);
  auto c = clusterOf("T4");
  Options o;
  o.globalBatch = 4;
  o.recompute = RecomputePolicy::Never;
  std::string refused = errorOf(makePlan(m, c, o));
  EXPECT_NE(refused.find("no layout fits in memory"), std::string::npos) << refused;
  // The error names the fix and says it is enough.
  EXPECT_NE(refused.find("activation recomputation (--recompute auto) saves"),
            std::string::npos) << refused;
  EXPECT_NE(refused.find("enough"), std::string::npos) << refused;

  o.recompute = RecomputePolicy::Search;
  auto p = makePlan(m, c, o);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  ASSERT_EQ(p->stages.size(), 1u);
  EXPECT_TRUE(p->stages[0].recompute);
  EXPECT_LE(p->memory[0].peak(), p->memory[0].capacity);

  // The same for an explicit layout, with recomputation given per stage.
  Options never = o;
  never.recompute = RecomputePolicy::Never;
  Layout l = oneStage(1, 8, 4);
  std::string why = errorOf(evaluateLayout(m, c, never, l));
  EXPECT_NE(why.find("does not fit in memory: rank 0 (T4, stage 0) needs"), std::string::npos)
      << why;
  l.recompute = {true};
  auto forced = evaluateLayout(m, c, never, l);
  ASSERT_TRUE(bool(forced)) << llvm::toString(forced.takeError());
  EXPECT_TRUE(forced->stages[0].recompute);
}

TEST(PlannerMemory, RecomputationCostsOneMoreForwardAndIsNotChosenWhenItFits) {
  auto m = model(4, 10'000'000, 1e6);
  auto c = clusterOf("A100-80G");
  Options o;
  o.globalBatch = 8;
  o.recompute = RecomputePolicy::Search;
  auto keep = evaluateLayout(m, c, o, oneStage(1, 4, 2));
  ASSERT_TRUE(bool(keep)) << llvm::toString(keep.takeError());
  EXPECT_FALSE(keep->stages[0].recompute);  // fits without: not worth it
  o.recompute = RecomputePolicy::Always;
  auto again = evaluateLayout(m, c, o, oneStage(1, 4, 2));
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_TRUE(again->stages[0].recompute);
  const Stage &a = keep->stages[0], &b = again->stages[0];
  // The A100 has no per-micro-batch host time in the catalog: the backward
  // grows by exactly one forward.
  EXPECT_NEAR(b.backwardSeconds, a.backwardSeconds + a.forwardSeconds, 1e-12);
  EXPECT_GT(again->stepSeconds, keep->stepSeconds);
  EXPECT_LT(again->memory[0].activations, keep->memory[0].activations);
}

TEST(PlannerMemory, ZeroStagesShardStateGradientsAndParameters) {
  auto m = model(2, 500'000'000, 1e6);
  auto c = clusterOf("4xA100-80G");
  Options o;
  o.globalBatch = 8;
  o.recompute = RecomputePolicy::Never;
  Layout l = oneStage(4, 2);
  std::vector<Plan> plans;
  for (int z = 0; z <= 3; ++z) {
    l.zeroStage = z;
    auto p = evaluateLayout(m, c, o, l);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_EQ(p->zeroStage, z);
    plans.push_back(std::move(*p));
  }
  double P = 1e9;
  const RankMemory &z0 = plans[0].memory[0], &z1 = plans[1].memory[0],
                   &z2 = plans[2].memory[0], &z3 = plans[3].memory[0];
  EXPECT_DOUBLE_EQ(z0.optimizerState, 12 * P);
  EXPECT_DOUBLE_EQ(z1.optimizerState, 12 * P / 4);  // ZeRO-1: optimizer state / D
  EXPECT_DOUBLE_EQ(z1.optimizerStep, 4 * P / 4);
  EXPECT_DOUBLE_EQ(z1.gradients, 2 * P);
  EXPECT_DOUBLE_EQ(z2.gradients, 2 * P / 4);        // ZeRO-2: and gradients
  EXPECT_DOUBLE_EQ(z2.parameters, 2 * P);
  EXPECT_DOUBLE_EQ(z3.parameters, 2 * P / 4);       // ZeRO-3: and parameters,
  EXPECT_GE(z3.workspace, 2 * 500e6);               // gathering a layer at a time
  EXPECT_LT(z3.peak(), z2.peak());
  EXPECT_LT(z2.peak(), z1.peak());
  EXPECT_LT(z1.peak(), z0.peak());
  // Time: ZeRO-1/2 move the bytes of one all-reduce, ZeRO-3 1.5x; the
  // optimizer steps 1/D of the parameters on each worker.
  EXPECT_DOUBLE_EQ(plans[2].stages[0].allReduceSeconds, plans[0].stages[0].allReduceSeconds);
  EXPECT_NEAR(plans[3].stages[0].allReduceSeconds, 1.5 * plans[0].stages[0].allReduceSeconds,
              1e-12);
  EXPECT_NEAR(plans[1].stages[0].optimizerSeconds, plans[0].stages[0].optimizerSeconds / 4,
              1e-12);
}

TEST(PlannerMemory, SearchTakesTheFastestZeroStageThatFits) {
  // One layer (no pipeline to spread it) of 5 B parameters on 4 A100-80G:
  // 80 GB of training state + 20 GB at the step do not fit one device;
  // ZeRO-1 (optimizer state / 4) does, and ZeRO-2 and 3 price no faster.
  auto m = model(1, 5'000'000'000, 1e6);
  auto c = clusterOf("4xA100-80G");
  Options o;
  o.globalBatch = 8;
  auto p = makePlan(m, c, o);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(p->zeroStage, 1);
  EXPECT_FALSE(p->offloadOptimizer);
  // Half the size fits without ZeRO, but ZeRO-1 moves the same bytes and
  // steps a quarter of the parameters per worker: it is kept as faster.
  auto small = model(1, 2'000'000'000, 1e6);
  auto q = makePlan(small, c, o);
  ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
  EXPECT_EQ(q->zeroStage, 1);
  o.zeroStage = 0;
  auto none = makePlan(small, c, o);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_EQ(none->zeroStage, 0);
  EXPECT_LT(q->stepSeconds, none->stepSeconds);
  o.zeroStage = -1;
  // A fixed stage is kept even where a smaller one would fit.
  o.zeroStage = 2;
  auto r = makePlan(small, c, o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->zeroStage, 2);
}

TEST(PlannerMemory, OffloadOnlyWhenNothingElseFits) {
  // One A100-80G (no data parallelism, so no ZeRO), one layer of 5 B
  // parameters: only host-memory optimizer state fits.
  auto m = model(1, 5'000'000'000, 1e6);
  auto c = clusterOf("A100-80G");
  Options o;
  o.globalBatch = 4;
  auto p = makePlan(m, c, o);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_TRUE(p->offloadOptimizer);
  EXPECT_EQ(p->memory[0].optimizerState, 0);
  // Gradients down and parameters up over PCIe, and Adam on the host at
  // ZeRO-Offload's CPU-Adam rate: over a second for 5 B parameters.
  EXPECT_GT(p->stages[0].optimizerSeconds, 5e9 / o.hostAdamParamsPerSecond);

  o.offload = OffloadPolicy::Never;
  std::string refused = errorOf(makePlan(m, c, o));
  EXPECT_NE(refused.find("optimizer offload to host memory (--offload auto) saves"),
            std::string::npos) << refused;

  // A model that fits is never offloaded.
  o.offload = OffloadPolicy::Search;
  auto fits = makePlan(model(1, 1'000'000'000, 1e6), c, o);
  ASSERT_TRUE(bool(fits)) << llvm::toString(fits.takeError());
  EXPECT_FALSE(fits->offloadOptimizer);
  // ... unless asked to.
  o.offload = OffloadPolicy::Always;
  auto forced = makePlan(model(1, 1'000'000'000, 1e6), c, o);
  ASSERT_TRUE(bool(forced)) << llvm::toString(forced.takeError());
  EXPECT_TRUE(forced->offloadOptimizer);
}

TEST(PlannerMemory, ShortfallSaysWhatEachSaverWouldSave) {
  // 8 layers of 1 B parameters on 2 T4: nothing fits; with every saver
  // forbidden, the error says what each would save and whether enough.
  auto m = model(8, 1'000'000'000, 1e6);
  auto c = clusterOf("2xT4");
  Options o;
  o.globalBatch = 2;
  o.recompute = RecomputePolicy::Never;
  o.zeroStage = 0;
  o.offload = OffloadPolicy::Never;
  std::string msg = errorOf(makePlan(m, c, o));
  EXPECT_NE(msg.find("no layout fits in memory: the closest needs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer offload to host memory (--offload auto) saves"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("a pipeline twice as deep on twice the devices"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("GiB short still"), std::string::npos) << msg;
  // With the savers allowed the search already tried them: the error says so.
  Options all;
  all.globalBatch = 2;
  std::string tried = errorOf(makePlan(model(8, 4'000'000'000, 1e6), c, all));
  EXPECT_NE(tried.find("already applied there: "), std::string::npos) << tried;
  EXPECT_NE(tried.find("optimizer offload"), std::string::npos) << tried;
}

TEST(PlannerMemory, LayoutJsonCarriesTheSavers) {
  auto layouts = parseLayouts(R"({"micro_batches": 2, "zero_stage": 2,
      "offload_optimizer": true,
      "stages": [{"workers": [[0], [1]], "last_layer": 1, "recompute": true},
                 {"workers": [[2], [3]], "last_layer": 3}]})",
                              "layout.json");
  ASSERT_TRUE(bool(layouts)) << llvm::toString(layouts.takeError());
  ASSERT_EQ(layouts->size(), 1u);
  const Layout &l = (*layouts)[0];
  EXPECT_EQ(l.zeroStage, 2);
  EXPECT_EQ(l.offloadOptimizer, 1);
  ASSERT_EQ(l.recompute.size(), 2u);
  EXPECT_TRUE(l.recompute[0]);
  EXPECT_FALSE(l.recompute[1]);
  auto bad = parseLayouts(R"({"zero_stage": 4, "stages": [{"workers": [[0]], "last_layer": 0}]})",
                          "layout.json");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("zero_stage must be 0, 1, 2 or 3"),
            std::string::npos);

  auto m = model(4, 10'000'000, 1e6);
  auto c = clusterOf("4xA100-80G");
  Options o;
  o.globalBatch = 8;
  auto p = evaluateLayout(m, c, o, l);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(p->zeroStage, 2);
  EXPECT_TRUE(p->offloadOptimizer);
  EXPECT_TRUE(p->stages[0].recompute);
  EXPECT_FALSE(p->stages[1].recompute);
}

TEST(PlannerMemory, TensorParallelismSplitsOnlyTheSplitActivations) {
  // Korthikanti et al.: (10 + 24/t) s b h of a block's 34 s b h are kept per
  // rank of a t-way group. Here 3 of 4 MB are split.
  auto m = model(2, 50'000'000, 4e6);
  for (auto &l : m.layers) {
    l.stashSplitBytesPerSample = 3e6;
    l.tensorParallelFraction = 1;
    l.ops[0].tensorParallelSplit = true;
  }
  auto c = clusterOf("2xA100-80G");
  Options o;
  o.globalBatch = 2;
  o.recompute = RecomputePolicy::Never;
  Layout l;
  l.stageWorkers = {{{0, 1}}};
  l.lastLayer = {1};
  l.tensorParallel = 2;
  l.microBatches = 1;
  auto p = evaluateLayout(m, c, o, l);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  // 2 samples x 2 layers x (1 MB whole + 3 MB / 2), plus the loss (its
  // logits are not vocab-parallel here: 4 bytes x 0.5 M elements).
  EXPECT_DOUBLE_EQ(p->memory[0].activations, 2 * (2 * (1e6 + 1.5e6) + 4 * 1e6 / 2));
  EXPECT_DOUBLE_EQ(p->memory[1].activations, p->memory[0].activations);
}

TEST(PlannerMemory, AStageWithoutTheOwnerKeepsACopyOfATiedParameter) {
  // The last layer reads the first layer's 10 M parameters (a tied LM head).
  auto m = model(4, 1'000'000, 1e6);
  m.layers.back().tiedParameters = {{0, 10'000'000}};
  m.layers.front().parameters += 10'000'000;
  auto c = clusterOf("2xA100-80G");
  Options o;
  o.globalBatch = 2;
  Layout two;
  two.stageWorkers = {{{0}}, {{1}}};
  two.lastLayer = {1, 3};
  auto p = evaluateLayout(m, c, o, two);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_DOUBLE_EQ(p->memory[0].parameters, 2 * 12e6);  // owner: 2 layers + the table
  EXPECT_DOUBLE_EQ(p->memory[1].parameters, 2 * 12e6);  // 2 layers + its copy
  auto one = evaluateLayout(m, c, o, oneStage(1, 4));
  ASSERT_TRUE(bool(one)) << llvm::toString(one.takeError());
  EXPECT_DOUBLE_EQ(one->memory[0].parameters, 2 * 14e6);  // counted once
}
