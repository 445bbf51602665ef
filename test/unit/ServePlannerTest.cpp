//===- ServePlannerTest.cpp - the serving simulator and planner -----------===//
//
// The simulator against queueing theory (M/D/1), capacity bounds and its
// determinism; the planner on synthetic layer costs: shares, KV-cache memory
// bounding the batch, device picking by price, errors naming the target.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/ServePlanner.h"
#include "SyntheticModel.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

using namespace hetplan;
using namespace hetplan::planner::serve;

namespace {

SimReplica fixedReplica(double prefill, double decode, int batch, int groups = 1) {
  SimReplica r;
  r.groups = groups;
  r.groupBatch = batch;
  r.prefillBatch = 1;
  r.prefillSeconds = [prefill](int k) { return prefill * k; };
  r.decodeSeconds = [decode](int, double) { return decode; };
  return r;
}

TEST(ServeSimulator, LowLoadTtftIsThePrefillAndTpotTheDecodeStep) {
  auto r = simulate({fixedReplica(0.05, 0.01, 8)}, /*rate=*/0.05, 128, 16, 2000, 7);
  EXPECT_NEAR(r.ttftP50, 0.05, 0.05 * 0.01);
  EXPECT_NEAR(r.tpotP50, 0.01, 0.01 * 0.01);
  EXPECT_LT(r.ttftP99, 0.05 * 1.5);  // hardly any queueing at this load
}

TEST(ServeSimulator, ABurstIsPrefilledTogether) {
  // Eight requests of one instant: one prefill iteration of all eight (the
  // first arrival must not start a prefill alone), so every TTFT is 8 x 0.05.
  SimReplica r = fixedReplica(0.05, 0.01, 8);
  r.prefillBatch = 8;
  Workload w;
  w.arrivals = Arrivals::Trace;
  w.trace.assign(8, TraceRequest{0.0, 128, 4});
  auto out = simulate({r}, 1, w, 128, 4, 8, 1);
  EXPECT_NEAR(out.ttftMean, 0.4, 1e-9);
  EXPECT_NEAR(out.ttftP50, 0.4, 1e-9);
  EXPECT_NEAR(out.tpotP50, 0.01, 1e-9);
}

TEST(ServeSimulator, OneTokenOneSlotIsMD1) {
  // Output 1: a request is its prefill only, one at a time: an M/D/1 queue
  // with service D; mean sojourn = D + rho D / (2 (1 - rho)) (Pollaczek-Khinchine).
  const double D = 0.1, rate = 5;  // rho = 0.5
  auto r = simulate({fixedReplica(D, 0, 1)}, rate, 64, 1, 50000, 3);
  double rho = rate * D;
  double expected = D + rho * D / (2 * (1 - rho));
  EXPECT_NEAR(r.ttftMean, expected, 0.03 * expected);
  EXPECT_EQ(r.tpotP99, 0);
}

TEST(ServeSimulator, ThroughputNeverExceedsCapacity) {
  // Each request holds one of the 4 slots for its prefill and 9 decode
  // steps: at most 4 / (0.01 + 9 * 0.02) requests per second.
  const double capacity = 4 / (0.01 + 9 * 0.02);
  for (double rate : {0.5 * capacity, 2 * capacity, 10 * capacity}) {
    auto r = simulate({fixedReplica(0.01, 0.02, 4)}, rate, 32, 10, 5000, 11);
    EXPECT_LE(r.requestsPerSecond, capacity * 1.001) << "at rate " << rate;
    EXPECT_LE(r.requestsPerSecond, rate * 1.1) << "at rate " << rate;
  }
}

TEST(ServeSimulator, SeededAndDeterministic) {
  std::vector<SimReplica> rs = {fixedReplica(0.02, 0.01, 8), fixedReplica(0.04, 0.02, 4)};
  rs[0].share = 0.7;
  rs[1].share = 0.3;
  auto a = simulate(rs, 20, 64, 32, 3000, 5);
  auto b = simulate(rs, 20, 64, 32, 3000, 5);
  auto c = simulate(rs, 20, 64, 32, 3000, 6);
  EXPECT_EQ(a.ttftP90, b.ttftP90);
  EXPECT_EQ(a.tpotP99, b.tpotP99);
  EXPECT_EQ(a.requestsPerSecond, b.requestsPerSecond);
  EXPECT_NE(a.ttftP90, c.ttftP90);
}

TEST(ServeSimulator, RoutingFollowsTheShares) {
  // All traffic on a replica with share 1, none on the other: the same
  // latencies as that replica alone.
  std::vector<SimReplica> rs = {fixedReplica(0.02, 0.01, 8), fixedReplica(1.0, 1.0, 1)};
  rs[0].share = 1;
  rs[1].share = 0;
  auto both = simulate(rs, 10, 64, 8, 2000, 9);
  auto alone = simulate({rs[0]}, 10, 64, 8, 2000, 9);
  EXPECT_EQ(both.ttftP99, alone.ttftP99);
  EXPECT_EQ(both.tpotP99, alone.tpotP99);
}

TEST(ServeSimulator, BurstyArrivalsQueueLongerThanPoisson) {
  Workload bursty;
  bursty.arrivals = Arrivals::Gamma;
  bursty.burstiness = 4;
  auto poisson = simulate({fixedReplica(0.02, 0.01, 4)}, 10, Workload(), 128, 8, 4000, 3);
  auto gamma = simulate({fixedReplica(0.02, 0.01, 4)}, 10, bursty, 128, 8, 4000, 3);
  EXPECT_GT(gamma.ttftP99, 2 * poisson.ttftP99);
  // The same mean rate: about as many requests per second served.
  EXPECT_NEAR(gamma.requestsPerSecond, poisson.requestsPerSecond, 0.25 * poisson.requestsPerSecond);
  // CV 1 is Poisson in distribution (not in the draws).
  Workload one = bursty;
  one.burstiness = 1;
  auto g1 = simulate({fixedReplica(0.02, 0.01, 4)}, 10, one, 128, 8, 4000, 3);
  EXPECT_NEAR(g1.ttftP50, poisson.ttftP50, 0.2 * poisson.ttftP50);
}

TEST(ServeSimulator, TraceReplaysItsLengthsAtTheRatePlanned) {
  // Two requests a second apart, 64 and 256 prompt tokens, 3 and 11 output
  // tokens: the prefill scales with the prompt, e2e with the output.
  Workload w;
  w.arrivals = Arrivals::Trace;
  w.trace = {{0, 64, 3}, {1, 256, 11}};
  auto r = simulate({fixedReplica(0.1, 0.01, 4)}, 1, w, /*promptTokens=*/128, 8, 0, 1);
  EXPECT_EQ(r.requests, 2u);
  // Percentiles over both (no warm-up to drop at two requests).
  EXPECT_NEAR(r.ttftP50, 0.05, 1e-9);   // 64 / 128 of the priced prefill
  EXPECT_NEAR(r.ttftP99, 0.2, 1e-9);    // 256 / 128
  EXPECT_NEAR(r.e2eP99, 0.2 + 10 * 0.01, 1e-9);
  // At twice its own rate the second request arrives after half a second.
  auto fast = simulate({fixedReplica(0.1, 0.01, 4)}, 2, w, 128, 8, 0, 1);
  EXPECT_NEAR(fast.e2eP99, r.e2eP99, 1e-9);
  EXPECT_LT(fast.requestsPerSecond, 2 * r.requestsPerSecond + 1e-9);
  EXPECT_GT(fast.requestsPerSecond, r.requestsPerSecond);
}

TEST(ServeSimulator, LengthTablesDrawTheirPercentiles) {
  Workload w;
  auto out = parseLength("p50=10,p90=100,max=200", "--output-len");
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  w.output = *out;
  auto r = simulate({fixedReplica(0.001, 0.001, 64)}, 1, w, 16, 1, 4000, 5);
  // Output tokens per request average the table's mean (tokens/s over req/s).
  double perRequest = r.outputTokensPerSecond / r.requestsPerSecond;
  EXPECT_NEAR(perRequest, out->mean(), 0.1 * out->mean());
}

/// A decoder of `layers` layers of `params` parameters each, KV cache
/// `kvPerToken` bytes per token per layer: costed at `prompt` tokens
/// (prefill) and at one token (decode).
std::pair<cost::ModelCost, cost::ModelCost> decoder(int layers, int64_t params, int64_t prompt,
                                                    double kvPerToken) {
  double flopsPerToken = 2.0 * double(params);
  auto prefill = test::uniformModel(layers, flopsPerToken * double(prompt), params,
                                    4096.0 * double(prompt));
  auto decode = test::uniformModel(layers, flopsPerToken, params, 4096.0);
  for (auto &l : prefill.layers)
    l.kvCacheBytesPerSample = kvPerToken * double(prompt);
  return {prefill, decode};
}

Options options(double rate) {
  Options o;
  o.rate = rate;
  o.promptTokens = 256;
  o.outputTokens = 64;
  o.simulatedRequests = 2000;
  return o;
}

TEST(ServePlanner, SharesSumToOneAndRatesToTheRate) {
  auto [prefill, decode] = decoder(8, 50'000'000, 256, 64 * 1024);
  auto cl = test::clusterOf("2xA100-80G,4xL4");
  auto p = planServing(prefill, decode, cl, options(20));
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  double shares = 0, rates = 0, capacity = 0;
  for (const Replica &r : p->replicas) {
    shares += r.share;
    rates += r.rate;
    capacity += r.capacity;
    EXPECT_GT(r.maxBatch, 0);
  }
  EXPECT_NEAR(shares, 1, 1e-9);
  EXPECT_NEAR(rates, 20, 1e-9);
  EXPECT_NEAR(capacity, p->capacity, 1e-9);
  EXPECT_LE(p->predicted.requestsPerSecond, p->capacity);
  EXPECT_GT(p->pricePerHour, 0);
}

TEST(ServePlanner, KvCacheMemoryBoundsTheBatch) {
  auto cl = test::clusterOf("1xL4");
  Options o = options(1);
  auto small = decoder(8, 50'000'000, 256, 16 * 1024);
  auto big = decoder(8, 50'000'000, 256, 1024 * 1024);  // 8 MiB per token: 2.5 GiB per request
  auto a = planServing(small.first, small.second, cl, o);
  auto b = planServing(big.first, big.second, cl, o);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_GT(a->replicas[0].maxBatch, b->replicas[0].maxBatch);
  const Replica &r = b->replicas[0];
  EXPECT_EQ(r.limitedBy, "memory");
  // The batch fills the memory the planner may use, and one more request
  // would not fit.
  const ReplicaStage &st = r.stages[0];
  double limit = 0.9 * st.capacityBytes;
  double perRequest = st.kvBytesPerToken * double(o.promptTokens + o.outputTokens);
  EXPECT_LE(st.peakBytes, limit);
  EXPECT_GT(st.peakBytes + perRequest, limit);
}

TEST(ServePlanner, PicksTheCheaperMixThatMeetsTheRate) {
  auto [prefill, decode] = decoder(8, 50'000'000, 256, 64 * 1024);
  auto cl = test::clusterOf("8xA100-80G,8xL4");
  Options o = options(5);
  o.pickDevices = true;
  auto picked = planServing(prefill, decode, cl, o);
  ASSERT_TRUE(bool(picked)) << llvm::toString(picked.takeError());
  Options whole = options(5);
  auto all = planServing(prefill, decode, cl, whole);
  ASSERT_TRUE(bool(all)) << llvm::toString(all.takeError());
  EXPECT_LT(picked->pricePerHour, all->pricePerHour);
  EXPECT_GE(picked->capacity * 0.9, 5 - 1e-9);
  // A small model at a low rate: one replica of the cheapest type does it.
  ASSERT_EQ(picked->replicas.size(), 1u);
  EXPECT_EQ(picked->replicas[0].type->name, "L4");
  EXPECT_EQ(picked->replicas[0].tensorParallel, 1);
}

TEST(ServePlanner, ErrorsNameTheTargetAndByHowMuch) {
  auto [prefill, decode] = decoder(8, 50'000'000, 256, 64 * 1024);
  auto cl = test::clusterOf("1xL4");
  Options o = options(1);
  o.tpotTarget = 1e-6;
  auto p = planServing(prefill, decode, cl, o);
  ASSERT_FALSE(bool(p));
  std::string text = llvm::toString(p.takeError());
  EXPECT_NE(text.find("TPOT target"), std::string::npos) << text;
  EXPECT_NE(text.find("over)"), std::string::npos) << text;

  // A rate above capacity: the plan at capacity, and a note saying so.
  Options r = options(1e6);
  auto q = planServing(prefill, decode, cl, r);
  ASSERT_TRUE(bool(q)) << llvm::toString(q.takeError());
  EXPECT_NEAR(q->rate, q->capacity, 1e-9 * q->capacity);
  ASSERT_EQ(q->notes.size(), 1u);
  EXPECT_NE(q->notes[0].find("exceeds what the cluster can serve"), std::string::npos) << q->notes[0];
  EXPECT_NE(q->notes[0].find("planned at"), std::string::npos) << q->notes[0];
  // ... unless a target is missed even there: the error says both.
  Options rt = options(1e6);
  rt.ttftTarget = 0.02;  // met by one prefill (3.4 ms), not by queues at capacity
  auto qt = planServing(prefill, decode, cl, rt);
  ASSERT_FALSE(bool(qt));
  text = llvm::toString(qt.takeError());
  EXPECT_NE(text.find("exceeds what the cluster can serve"), std::string::npos) << text;

  Options b = options(1);
  b.budget = 0.01;
  auto c = planServing(prefill, decode, cl, b);
  ASSERT_FALSE(bool(c));
  text = llvm::toString(c.takeError());
  EXPECT_NE(text.find("budget $0.01/h is too small"), std::string::npos) << text;
}

TEST(ServePlanner, UsesEveryDeviceOfATypeWhenThatServesMore) {
  // 24 layers of 1 GB (fp16): about 8 T4s hold the weights, so the
  // powers of two alone would give one 8-stage replica and 4 idle T4s.
  auto [prefill, decode] = decoder(24, 500'000'000, 256, 64 * 1024);
  auto cl = test::clusterOf("12xT4");
  auto p = planServing(prefill, decode, cl, options(0.1));
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  size_t used = 0;
  for (const Replica &r : p->replicas)
    for (const ReplicaStage &st : r.stages)
      used += st.ranks.size();
  EXPECT_EQ(used, 12u);
  Options eight = options(0.1);
  eight.pinPipelineStages = 8;
  auto pinned = planServing(prefill, decode, cl, eight);
  ASSERT_TRUE(bool(pinned)) << llvm::toString(pinned.takeError());
  EXPECT_GT(p->capacity, pinned->capacity);
  EXPECT_TRUE(p->notes.empty());
}

TEST(ServePlanner, NoReplicaFitsNamesTheDepthThatWould) {
  // 72 GB of weights in 24 layers: no 4-T4 pipeline holds them (14.4 GB
  // each may fill); 6 stages of 4 layers (12 GB) do, 5 of 5 (15 GB) do not.
  auto [prefill, decode] = decoder(24, 1'500'000'000, 256, 64 * 1024);
  auto cl = test::clusterOf("4xT4");
  auto p = planServing(prefill, decode, cl, options(0.1));
  ASSERT_FALSE(bool(p));
  std::string text = llvm::toString(p.takeError());
  EXPECT_NE(text.find("no replica fits in memory"), std::string::npos) << text;
  EXPECT_NE(text.find("no replica of T4 fits in memory on its 4 device(s): the shallowest that "
                      "fits is 6 stage(s) of tp 1, 6 devices"),
            std::string::npos)
      << text;
  // Beside a type that holds it, the T4s are left idle, and the plan says why.
  auto mixed = planServing(prefill, decode, test::clusterOf("2xA100-80G,4xT4"), options(0.1));
  ASSERT_TRUE(bool(mixed)) << llvm::toString(mixed.takeError());
  ASSERT_EQ(mixed->notes.size(), 1u);
  EXPECT_NE(mixed->notes[0].find("its devices are left idle"), std::string::npos) << mixed->notes[0];
  for (const Replica &r : mixed->replicas)
    EXPECT_EQ(r.type->name, "A100-SXM-80GB");
}

TEST(ServePlanner, PipelinesAcrossTypesWhenNoTypeHoldsTheModelAlone) {
  // 48 GB of weights in 24 layers: an A100 40GB holds 35.5 GB, two T4s
  // 27.8 GB; the three together hold it, the A100's stage the most layers.
  auto [prefill, decode] = decoder(24, 1'000'000'000, 256, 64 * 1024);
  auto p = planServing(prefill, decode, test::clusterOf("1xA100-40G,2xT4"), options(0.05));
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  ASSERT_EQ(p->replicas.size(), 1u);
  const Replica &r = p->replicas[0];
  EXPECT_EQ(r.typeName, "A100-SXM-40GB+T4");
  ASSERT_EQ(r.stages.size(), 3u);
  EXPECT_EQ(r.stages[0].type->name, "A100-SXM-40GB");
  EXPECT_EQ(r.stages[2].type->name, "T4");
  auto layers = [](const ReplicaStage &st) { return st.lastLayer - st.firstLayer + 1; };
  EXPECT_GT(layers(r.stages[0]), layers(r.stages[1]));
  EXPECT_EQ(r.stages.back().lastLayer, 23);
  for (const ReplicaStage &st : r.stages)
    EXPECT_LE(st.peakBytes, 0.9 * st.capacityBytes + 1);
  EXPECT_GT(r.capacity, 0);
  ASSERT_EQ(p->notes.size(), 1u);
  EXPECT_NE(p->notes[0].find("one pipeline across the types"), std::string::npos) << p->notes[0];
}

} // namespace

TEST(ServePlanner, TensorParallelStepsPayTheStacksFloorPerCollective) {
  // Small all-reduces cost a fixed tens of microseconds under a serving
  // engine (vidur's measured NCCL all-reduces: bench/fit_serving.py): the
  // stack's collective_us is paid per collective call of every split layer,
  // whatever the batch, so decode stops speeding up with tp.
  auto [prefill, decode] = decoder(8, 50'000'000, 256, 64 * 1024);
  for (auto *m : {&prefill, &decode})
    for (auto &l : m->layers) {
      cost::TensorParallelUnit u;
      u.pair = true;
      u.divisor = 64;
      u.forwardElementsPerSample = 4096;
      u.forwardCollectives = 2;
      l.tensorParallelUnits.push_back(u);
    }
  auto clusterWith = [](double us) {
    std::string yaml = "stack: {name: hetplan, collective_us: " + std::to_string(us) +
                       "}\nnodes:\n  - devices: [A100-80G, A100-80G, A100-80G, A100-80G]\n";
    auto c = cluster::Cluster::fromYaml(yaml, "c.yaml", cluster::DeviceCatalog::builtin());
    EXPECT_TRUE(bool(c)) << llvm::toString(c.takeError());
    return std::move(*c);
  };
  Options o = options(0.1);
  o.pinPipelineStages = 1;
  o.pinTensorParallel = 4;
  auto plain = clusterWith(0), floored = clusterWith(50);
  auto a = planServing(prefill, decode, plain, o);
  auto b = planServing(prefill, decode, floored, o);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  ASSERT_EQ(b->replicas[0].tensorParallel, 4);
  for (int k : {1, 16}) {
    double extra = b->replicas[0].sim.decodeSeconds(k, 512.0 * k) -
                   a->replicas[0].sim.decodeSeconds(k, 512.0 * k);
    EXPECT_NEAR(extra, 8 * 2 * 50e-6, 1e-9) << k << " requests";
  }
}
