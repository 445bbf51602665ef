//===- TrainingMemoryTest.cpp - recomputation, ZeRO, offload vs one rank --===//
//
// Training plans with the memory options of plan.proto (Stage.recompute,
// Settings.zero_stage, Settings.offload_optimizer) run on CPU ranks (threads)
// against PlanExecutor::singleRankPlan, as hetplan-plan-equivalence does for
// plain plans: 3 steps, every step's loss, every rank's summed gradient (its
// ZeRO range where it keeps only that) and the parameters after the steps
// within 1e-4 max-norm relative (Adam eps 1e-4, see PlanEquivalence.cpp).
// And what the options are for: a recomputing stage stashes fewer bytes, a
// ZeRO rank keeps only its range of Adam's state / gradients / parameters,
// offload keeps Adam's state in the host store.
//
// The plans are built here (2 stages x 2 data-parallel workers, even or
// uneven shares, GPipe or 1F1B), cut where the compiler cuts: gpt2-tiny after
// block h.0 (its tied embedding `wte.weight` is read by both stages) and the
// residual convnet of models/gen_cnn.py after its stem. Links the runtime only.
//
//===----------------------------------------------------------------------===//
#include "PlanFixtures.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <unistd.h>
#include <thread>

using namespace hetplan::runtime;
namespace plan = hetplan::plan;

namespace {

using Layout = hetplan::test::TwoStageLayout;
plan::Plan trainPlan(const std::string &path, const Layout &l) { return hetplan::test::twoStagePlan(path, l); }

std::string gpt2() { return std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx"; }

/// models/gen_cnn.py's residual convnet, written once per test run.
std::string cnn() {
  static std::string path;
  if (!path.empty()) return path;
  std::string out = std::string(::testing::TempDir()) + "/hetplan-train-memory-cnn-" + std::to_string(::getpid()) + ".onnx";
  std::string cmd = std::string(HETPLAN_PYTHON) + " " + HETPLAN_SOURCE_DIR + "/models/gen_cnn.py -o " + out + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "";
  return path = out;
}

struct Batch {
  std::map<std::string, Tensor> inputs;
  Tensor labels;
};

Batch makeBatch(const Model &m, int64_t batch, unsigned seed) {
  Batch b;
  std::mt19937 rng(seed);
  for (const auto &in : m.inputs) {
    std::vector<int64_t> shape = in.shape;
    shape[0] = batch;
    for (auto &d : shape)
      if (d < 0) d = 8; // gpt2-tiny's sequence
    Tensor t(in.dtype, shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (in.dtype == DType::Int64) t.data<int64_t>()[i] = int64_t(rng() % 50);
      else t.data<float>()[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
    }
    b.inputs[in.name] = t;
  }
  auto out = Executor(m).run(b.inputs).at(m.outputs[0].name);
  std::vector<int64_t> shape = out.shape();
  int64_t classes = shape.back();
  shape.pop_back();
  b.labels = Tensor(DType::Int64, shape);
  for (int64_t i = 0; i < b.labels.numel(); ++i) b.labels.data<int64_t>()[i] = int64_t(rng() % uint64_t(classes));
  return b;
}

/// max |a - b| / max(max |b|, floor).
double maxNormError(const Tensor &a, const Tensor &b, double floor = 0) {
  if (a.numel() != b.numel() || a.dtype() != DType::Float32 || b.dtype() != DType::Float32) return INFINITY;
  double d = 0, m = floor;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d = std::max(d, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    m = std::max(m, std::fabs(double(b.data<float>()[i])));
  }
  return m > 0 ? d / m : d;
}

/// Elements [lo, hi) of `names` laid end to end.
Tensor flat(const std::map<std::string, Tensor> &values, const std::vector<std::string> &names,
            const std::vector<int64_t> &offsets, int64_t lo, int64_t hi) {
  Tensor out(DType::Float32, {hi - lo});
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t a = std::max(lo, offsets[i]), b = std::min(hi, offsets[i + 1]);
    if (a < b)
      std::memcpy(out.data<float>() + (a - lo), values.at(names[i]).data<float>() + (a - offsets[i]),
                  size_t(b - a) * sizeof(float));
  }
  return out;
}

struct Outcome {
  std::vector<PlanExecutor::RankTrainState> states;
  double worstLoss = 0, worstGrad = 0, worstParam = 0;
};

/// `steps` steps of the plan and of one rank; the worst errors.
Outcome trainAgainstOneRank(const plan::Plan &p, const std::string &path, int steps = 3,
                            const std::vector<std::string> &freeze = {}, double weightDecay = 0) {
  PlanExecutor exec(p, path), single(PlanExecutor::singleRankPlan(p), path);
  Batch batch = makeBatch(exec.model(), p.settings().global_batch(), 7);
  PlanExecutor::TrainOptions options;
  options.eps = 1e-4;
  options.lr = 1e-2;
  options.weightDecay = weightDecay;
  options.freeze = freeze;
  Outcome o;
  std::vector<PlanExecutor::RankTrainState> ref;
  for (int s = 0; s < steps; ++s) {
    double a = exec.train(batch.inputs, batch.labels, o.states, options);
    double b = single.train(batch.inputs, batch.labels, ref, options);
    o.worstLoss = std::max(o.worstLoss, std::fabs(a - b) / std::fabs(b));
    double largest = 0;
    for (const auto &[name, g] : ref[0].grads)
      for (int64_t i = 0; i < g.numel(); ++i) largest = std::max(largest, std::fabs(double(g.data<float>()[i])));
    size_t checked = 0;
    for (uint32_t r = 0; r < o.states.size(); ++r) {
      const auto &st = o.states[r];
      for (const auto &[name, g] : st.grads) {
        o.worstGrad = std::max(o.worstGrad, maxNormError(g, ref[0].grads.at(name), 1e-3 * largest));
        ++checked;
      }
      // ZeRO-2/3: the rank's range of the summed gradients.
      for (const auto &[grp, z] : exec.zeroShards(r)) {
        if (!st.shards.count(grp) || !st.shards.at(grp).grad.defined()) continue;
        Tensor want = flat(ref[0].grads, z.params, z.offsets, z.lo, z.hi);
        o.worstGrad = std::max(o.worstGrad, maxNormError(st.shards.at(grp).grad, want, 1e-3 * largest));
        checked += z.params.size();
      }
    }
    EXPECT_GE(checked, ref[0].grads.size()) << "step " << s << ": gradients of some parameters are nowhere";
  }
  auto got = exec.collectParameters(o.states), want = single.collectParameters(ref);
  EXPECT_EQ(got.size(), want.size());
  for (const auto &[name, w] : want) {
    auto it = got.find(name);
    o.worstParam = std::max(o.worstParam, it == got.end() ? INFINITY : maxNormError(it->second, w));
  }
  // Every holder of a parameter has the same values (ZeRO's all-gathers).
  for (uint32_t r = 0; r < o.states.size(); ++r)
    for (const auto &[name, t] : o.states[r].params)
      EXPECT_EQ(std::memcmp(t.raw(), got.at(name).raw(), t.nbytes()), 0) << name << " on rank " << r;
  return o;
}

void expectEquivalent(const Outcome &o, const std::string &what) {
  const double tol = 1e-4;
  EXPECT_LE(o.worstLoss, tol) << what << ": losses";
  EXPECT_LE(o.worstGrad, tol) << what << ": gradients";
  EXPECT_LE(o.worstParam, tol) << what << ": parameters after the steps";
}

Layout gpt2Uneven() {
  Layout l;
  l.firstNodeOfStage1 = "h.1.ln_1";
  l.shares = {{4, 2}, {1, 5}};
  return l;
}

Layout cnnUneven() {
  Layout l;
  l.firstNodeOfStage1 = "block.a.conv";
  l.shares = {{5, 1}, {2, 4}};
  return l;
}

int64_t numel(const std::map<std::string, Tensor> &m) {
  int64_t n = 0;
  for (const auto &[k, t] : m) n += t.numel();
  return n;
}

} // namespace

TEST(TrainingMemory, PlainPlanMatchesOneRank) {
  expectEquivalent(trainAgainstOneRank(trainPlan(gpt2(), gpt2Uneven()), gpt2()), "gpt2-tiny, uneven, no options");
}

TEST(TrainingMemory, RecomputationMatchesOneRankAndStashesLess) {
  for (std::string schedule : {"gpipe", "1f1b"}) {
    Layout l = gpt2Uneven();
    l.schedule = schedule;
    Outcome plain = trainAgainstOneRank(trainPlan(gpt2(), l), gpt2());
    for (auto which : std::vector<std::vector<bool>>{{true, false}, {false, true}, {true, true}}) {
      l.recompute = which;
      Outcome o = trainAgainstOneRank(trainPlan(gpt2(), l), gpt2());
      std::string what = schedule + " recompute " + std::to_string(which[0]) + std::to_string(which[1]);
      expectEquivalent(o, what);
      for (uint32_t r = 0; r < 4; ++r) {
        uint64_t with = o.states[r].stats.peakStashedBytes, without = plain.states[r].stats.peakStashedBytes;
        uint32_t stage = r / 2, inFlight = schedule == "gpipe" ? l.micro : std::min(2 - stage, l.micro);
        std::printf("%s rank %u: peak stashed activations %llu bytes, %llu without recomputation\n", what.c_str(), r,
                    (unsigned long long)with, (unsigned long long)without);
        EXPECT_GT(without, 0u);
        // With one micro-batch in flight (1F1B's last stage) the rebuilt
        // values are what the stage would have kept: no saving.
        if (which[stage] && inFlight > 1) EXPECT_LT(with, without) << what << " rank " << r;
        else EXPECT_EQ(with, without) << what << " rank " << r;
      }
    }
  }
}

TEST(TrainingMemory, ZeroStagesMatchOneRank) {
  Layout l = gpt2Uneven();
  PlanExecutor plainExec(trainPlan(gpt2(), l), gpt2());
  Outcome plain = trainAgainstOneRank(trainPlan(gpt2(), l), gpt2());
  for (uint32_t zero = 1; zero <= 3; ++zero) {
    l.zero = zero;
    plan::Plan p = trainPlan(gpt2(), l);
    PlanExecutor exec(p, gpt2());
    Outcome o = trainAgainstOneRank(p, gpt2());
    std::string what = "ZeRO-" + std::to_string(zero);
    expectEquivalent(o, what);
    for (uint32_t r = 0; r < 4; ++r) {
      const auto &st = o.states[r], &ref = plain.states[r];
      auto shards = exec.zeroShards(r);
      // Two groups per rank: its stage's own parameters over the stage's two
      // workers, and the tied embedding over all four ranks.
      ASSERT_EQ(shards.size(), 2u) << what << " rank " << r;
      int64_t range = 0, whole = 0;
      for (const auto &[g, z] : shards) {
        range += z.hi - z.lo;
        whole += z.offsets.back();
        EXPECT_EQ(z.paramsSharded, zero == 3 && z.ranks.size() == 2) << what;
      }
      EXPECT_EQ(numel(st.adamM), range) << what << " rank " << r << ": Adam's state is the rank's range";
      EXPECT_LE(2 * range, whole + 2) << what << " rank " << r << ": at most half the state";
      EXPECT_EQ(numel(ref.adamM), whole) << "without ZeRO every parameter has its state";
      if (zero >= 2) {
        EXPECT_TRUE(st.grads.empty()) << what << " rank " << r << " keeps whole gradients";
        int64_t held = 0;
        for (const auto &[g, sh] : st.shards) held += sh.grad.numel();
        EXPECT_EQ(held, range) << what;
      } else {
        EXPECT_EQ(numel(st.grads), whole) << what;
      }
      if (zero == 3) {
        // Between steps: only the tied embedding (its group spans both
        // stages) is whole; the stage's own parameters are the range.
        EXPECT_EQ(st.params.size(), 1u) << what << " rank " << r;
        EXPECT_TRUE(st.params.count("wte.weight")) << what;
        EXPECT_GT(st.stats.gatheredParameterBytes, 0u) << what;
      } else {
        EXPECT_EQ(st.params.size(), ref.params.size()) << what;
        EXPECT_EQ(st.stats.gatheredParameterBytes, 0u) << what;
      }
    }
  }
}

TEST(TrainingMemory, ZeroRangesSkipFrozenParameters) {
  // A ZeRO range may cover parts of a frozen and a trained parameter.
  for (uint32_t zero : {1u, 3u}) {
    Layout l = gpt2Uneven();
    l.zero = zero;
    plan::Plan p = trainPlan(gpt2(), l);
    Outcome o = trainAgainstOneRank(p, gpt2(), 2, {"wpe", "ln_1"});
    expectEquivalent(o, "ZeRO-" + std::to_string(zero) + " with frozen parameters");
    PlanExecutor exec(p, gpt2());
    auto params = exec.collectParameters(o.states);
    for (const char *frozen : {"wpe.weight", "h.0.ln_1.weight", "h.1.ln_1.bias"})
      EXPECT_EQ(maxNormError(params.at(frozen), exec.model().initializers.at(frozen)), 0) << frozen << " moved";
    EXPECT_GT(maxNormError(params.at("h.0.ln_2.weight"), exec.model().initializers.at("h.0.ln_2.weight")), 0);
  }
}

TEST(TrainingMemory, OffloadKeepsAdamStateInTheHostStore) {
  for (uint32_t zero : {0u, 2u, 3u}) {
    Layout l = gpt2Uneven();
    l.offload = true;
    l.zero = zero;
    Outcome o = trainAgainstOneRank(trainPlan(gpt2(), l), gpt2());
    std::string what = "offload, ZeRO-" + std::to_string(zero);
    expectEquivalent(o, what);
    for (uint32_t r = 0; r < 4; ++r) {
      const auto &st = o.states[r];
      EXPECT_TRUE(st.adamM.empty() && st.adamV.empty()) << what << ": Adam's state on the rank";
      EXPECT_FALSE(st.host.adamM.empty()) << what;
      EXPECT_EQ(numel(st.host.adamM), numel(st.host.adamV)) << what;
      // Per step: the gradient and the parameter down, the parameter up.
      EXPECT_EQ(st.stats.offloadBytes, uint64_t(3 * 4 * numel(st.host.adamM))) << what << " rank " << r;
    }
  }
}

TEST(TrainingMemory, CombinationsMatchOneRank) {
  Layout l = gpt2Uneven();
  l.schedule = "1f1b";
  l.recompute = {true, true};
  l.zero = 3;
  l.offload = true;
  expectEquivalent(trainAgainstOneRank(trainPlan(gpt2(), l), gpt2()), "gpt2 1f1b recompute+ZeRO-3+offload");
  l.shares = {{3, 3}, {3, 3}};
  l.recompute = {false, true};
  l.zero = 1;
  l.offload = false;
  expectEquivalent(trainAgainstOneRank(trainPlan(gpt2(), l), gpt2()), "gpt2 even recompute stage 1 + ZeRO-1");
}

TEST(TrainingMemory, ConvnetMatchesOneRank) {
  std::string path = cnn();
  if (path.empty()) GTEST_SKIP() << "models/gen_cnn.py needs " << HETPLAN_PYTHON << " with onnx and numpy";
  Layout l = cnnUneven();
  Outcome plain = trainAgainstOneRank(trainPlan(path, l), path);
  expectEquivalent(plain, "cnn plain");
  l.recompute = {true, true};
  l.zero = 2;
  Outcome o = trainAgainstOneRank(trainPlan(path, l), path);
  expectEquivalent(o, "cnn recompute + ZeRO-2");
  for (uint32_t r = 0; r < 4; ++r)
    EXPECT_LT(o.states[r].stats.peakStashedBytes, plain.states[r].stats.peakStashedBytes) << "cnn rank " << r;
  l.recompute = {false, true};
  l.zero = 3;
  l.offload = true;
  l.schedule = "1f1b";
  expectEquivalent(trainAgainstOneRank(trainPlan(path, l), path), "cnn 1f1b recompute stage 1 + ZeRO-3 + offload");
}

// Settings.optimizer: SGD, momentum SGD and AdamW (weight decay on), plain
// and with ZeRO-2 and offload, against one rank; each rank keeps the
// optimizer's buffers only (none for SGD, one for momentum).
TEST(TrainingMemory, EveryOptimizerMatchesOneRank) {
  for (const char *name : {"sgd", "momentum", "adamw"})
    for (bool savers : {false, true}) {
      Layout l = gpt2Uneven();
      l.zero = savers ? 2 : 0;
      l.offload = savers;
      plan::Plan p = trainPlan(gpt2(), l);
      p.mutable_settings()->set_optimizer(name);
      Outcome o = trainAgainstOneRank(p, gpt2(), 3, {}, 0.01);
      std::string what = std::string(name) + (savers ? ", ZeRO-2 + offload" : "");
      expectEquivalent(o, what);
      int buffers = optimizerStateBuffers(*parseOptimizer(name));
      for (uint32_t r = 0; r < 4; ++r) {
        const auto &st = o.states[r];
        const auto &store = savers ? st.host.adamM : st.adamM;
        EXPECT_EQ(numel(store) > 0, buffers >= 1) << what << " rank " << r;
        EXPECT_EQ(numel(savers ? st.host.adamV : st.adamV) > 0, buffers >= 2) << what << " rank " << r;
      }
    }
}

TEST(TrainingMemory, InconsistentSettingsAreRefused) {
  auto refused = [](plan::Plan p, const std::string &needle) {
    try {
      PlanExecutor exec(std::move(p), gpt2());
      ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Layout l = gpt2Uneven();
  l.zero = 4;
  refused(trainPlan(gpt2(), l), "settings.zero_stage is 4; ZeRO stages are 0 (off)");
  plan::Plan lion = trainPlan(gpt2(), gpt2Uneven());
  lion.mutable_settings()->set_optimizer("lion");
  refused(lion, "settings.optimizer is 'lion'; this runtime runs sgd, momentum, adam or adamw");
  // Inference plans: no optimizer state to shard or offload; a recompute
  // flag is ignored.
  auto inference = [&](uint32_t zero, bool offload, bool recompute) {
    Layout x = gpt2Uneven();
    x.zero = zero;
    x.offload = offload;
    x.recompute = {recompute, recompute};
    plan::Plan p = trainPlan(gpt2(), x);
    p.mutable_settings()->set_mode("infer");
    p.mutable_settings()->set_optimizer("");
    for (auto &r : *p.mutable_ranks()) {
      auto *prog = r.mutable_program();
      for (int i = prog->size() - 1; i >= 0; --i) {
        auto k = prog->Get(i).kind();
        if (k != plan::Instruction::FORWARD && k != plan::Instruction::SEND_ACTIVATION &&
            k != plan::Instruction::RECV_ACTIVATION)
          prog->DeleteSubrange(i, 1);
      }
    }
    return p;
  };
  refused(inference(1, false, false), "settings.zero_stage is 1 in an inference plan");
  refused(inference(0, true, false), "settings.offload_optimizer is set in an inference plan");
  PlanExecutor ok(inference(0, false, true), gpt2()), plain(inference(0, false, false), gpt2());
  Batch b = makeBatch(ok.model(), 12, 3);
  auto outs = ok.run(b.inputs);
  // The same plan without the flag runs the same shapes: the same bits. The
  // whole model on one rank runs other GEMM sizes (oneDNN picks kernels by
  // size, and their sums round differently on some CPUs): close.
  EXPECT_EQ(maxNormError(outs.at("logits"), plain.run(b.inputs).at("logits")), 0)
      << "recompute in an inference plan changes nothing";
  auto ref = Executor(ok.model()).run(b.inputs);
  EXPECT_LT(maxNormError(outs.at("logits"), ref.at("logits")), 1e-5);
  // ZeRO-3 with workers of one stage running their micro-batches in
  // different orders: their parameter all-gathers would not match.
  Layout z = gpt2Uneven();
  z.zero = 3;
  plan::Plan p = trainPlan(gpt2(), z);
  auto *prog = p.mutable_ranks(1)->mutable_program();
  std::vector<plan::Instruction> ins(prog->begin(), prog->end());
  // Rank 1 (stage 0): F0 S F1 S R0 B0 R1 B1 ... -> swap its two backward
  // blocks (each RECV_GRADIENT with its BACKWARD): each program is in a
  // valid order on its own, but the two workers no longer meet.
  std::vector<int> backward;
  for (int i = 0; i < int(ins.size()); ++i)
    if (ins[size_t(i)].kind() == plan::Instruction::BACKWARD) backward.push_back(i);
  ASSERT_EQ(backward.size(), 2u);
  for (int b : backward) ASSERT_EQ(ins[size_t(b - 1)].kind(), plan::Instruction::RECV_GRADIENT);
  std::swap(ins[size_t(backward[0])], ins[size_t(backward[1])]);
  std::swap(ins[size_t(backward[0] - 1)], ins[size_t(backward[1] - 1)]);
  prog->Clear();
  for (const auto &x : ins) *prog->Add() = x;
  refused(p, "the rank programs deadlock: rank 0 waits at instruction");
}

TEST(Communicator, GroupReduceScatterAndAllGather) {
  // Ranks 1, 2, 3 of 4 (rank 0 not in the group), uneven segments 3, 0, 2.
  ThreadCommGroup group(4);
  const std::vector<int> members = {1, 2, 3};
  const std::vector<int64_t> counts = {3, 0, 2};
  std::vector<Tensor> scattered(4), gathered(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int r = 1; r < 4; ++r)
    threads.emplace_back([&, r] {
      Communicator &comm = group.communicator(r);
      try {
        Tensor in(DType::Float32, {5});
        for (int i = 0; i < 5; ++i) in.data<float>()[i] = float(10 * r + i);
        scattered[size_t(r)] = comm.reduceScatterSum(members, in, counts, 77);
        size_t k = size_t(r - 1);
        Tensor mine(DType::Int64, {counts[k]});
        for (int64_t i = 0; i < counts[k]; ++i) mine.data<int64_t>()[i] = 100 * r + i;
        gathered[size_t(r)] = comm.allGather(members, mine, counts, 78);
        Tensor wrong(DType::Float32, {4});
        comm.reduceScatterSum(members, wrong, counts, 79);
      } catch (const std::exception &e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto &t : threads) t.join();
  // Segment of rank 1: elements 0..2 summed over ranks 1..3: (10+20+30) + 3i.
  ASSERT_EQ(scattered[1].numel(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(scattered[1].data<float>()[i], 60.f + 3 * i);
  EXPECT_EQ(scattered[2].numel(), 0);
  ASSERT_EQ(scattered[3].numel(), 2);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(scattered[3].data<float>()[i], 60.f + 3 * (3 + i));
  for (int r = 1; r < 4; ++r) {
    ASSERT_EQ(gathered[size_t(r)].numel(), 5) << r;
    std::vector<int64_t> want = {100, 101, 102, 300, 301};
    EXPECT_EQ(gathered[size_t(r)].toInt64Vector(), want) << r;
    EXPECT_NE(errors[size_t(r)].find("reduceScatterSum: float32[4] is not 5 float32 elements"), std::string::npos)
        << errors[size_t(r)];
  }
}
