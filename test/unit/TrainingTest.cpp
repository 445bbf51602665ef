//===- TrainingTest.cpp - training steps against finite differences -------===//
//
// The whole backward pass of a real model (every gradient kernel the graph
// uses, the sweep, the loss) against the loss itself: the directional
// derivative of the loss along the computed gradient must be |g| and along a
// random direction r must be g.r, measured with central differences of the
// loss. Links the runtime only.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace hetplan::runtime;
namespace plan = hetplan::plan;

namespace {

/// A one-rank training plan for `path` (what `hetplan compile --mode train`
/// writes, reduced to what the runtime reads).
plan::Plan oneRankTrainPlan(const std::string &path, int64_t batch, int64_t micro) {
  Model m = loadModel(path);
  plan::Plan p;
  p.set_schema_version(kPlanSchemaVersion);
  auto *model = p.mutable_model();
  model->set_path(path);
  model->set_sha256(fileSha256(path));
  for (const auto &n : m.nodes) model->add_node_names(n.name);
  auto *layer = model->add_layers();
  layer->set_first_node(0);
  layer->set_last_node(uint32_t(m.nodes.size() - 1));
  auto *d = p.mutable_cluster()->add_devices();
  d->set_rank(0);
  d->set_type("CPU");
  auto *s = p.mutable_settings();
  s->set_mode("train");
  s->set_global_batch(batch);
  s->set_micro_batches(1);
  plan::Plan one = PlanExecutor::singleRankPlan(p);
  (void)micro;
  return one;
}

struct Fixture {
  std::unique_ptr<PlanExecutor> exec;
  std::map<std::string, Tensor> inputs;
  Tensor labels;
  PlanExecutor::TrainOptions frozen; // lr 0: a step only measures
};

Fixture makeFixture(const std::string &path, int64_t batch, int64_t seq, unsigned seed) {
  Fixture f;
  f.exec = std::make_unique<PlanExecutor>(oneRankTrainPlan(path, batch, 1));
  std::mt19937 rng(seed);
  for (const auto &in : f.exec->model().inputs) {
    Tensor t(in.dtype, {batch, seq});
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t v = in.name == "attention_mask"   ? (i % seq < seq - 2 ? 1 : 0)
                  : in.name == "token_type_ids" ? int64_t(rng() % 2)
                                                : int64_t(rng() % 50);
      if (in.dtype == DType::Int64) t.data<int64_t>()[i] = v;
      else t.data<int32_t>()[i] = int32_t(v);
    }
    f.inputs[in.name] = t;
  }
  std::map<std::string, Tensor> probe = f.inputs;
  auto out = Executor(f.exec->model()).run(probe).at(f.exec->model().outputs[0].name);
  std::vector<int64_t> shape = out.shape();
  int64_t classes = shape.back();
  shape.pop_back();
  f.labels = Tensor(DType::Int64, shape);
  for (int64_t i = 0; i < f.labels.numel(); ++i) f.labels.data<int64_t>()[i] = int64_t(rng() % uint64_t(classes));
  f.labels.data<int64_t>()[0] = -100; // ignored position
  f.frozen.lr = 0;
  return f;
}

/// Loss at params + h * dir (dir: per parameter, same shapes).
double lossAt(const Fixture &f, const std::map<std::string, Tensor> &base,
              const std::map<std::string, Tensor> &dir, double h) {
  std::vector<PlanExecutor::RankTrainState> states(1);
  for (const auto &[name, p] : base) {
    Tensor q = p.clone();
    const Tensor &d = dir.at(name);
    for (int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] += float(h * d.data<float>()[i]);
    states[0].params[name] = q;
  }
  return f.exec->train(f.inputs, f.labels, states, f.frozen);
}

void checkGradient(const std::string &path, int64_t batch, int64_t seq) {
  Fixture f = makeFixture(path, batch, seq, 3);
  std::vector<PlanExecutor::RankTrainState> states;
  double loss = f.exec->train(f.inputs, f.labels, states, f.frozen);
  ASSERT_TRUE(std::isfinite(loss));
  const auto &grads = states[0].grads;
  const auto &params = states[0].params;
  ASSERT_EQ(grads.size(), f.exec->parameters().size());
  // Unit direction along g, and a random direction r.
  double norm = 0;
  for (const auto &[name, g] : grads)
    for (int64_t i = 0; i < g.numel(); ++i) norm += double(g.data<float>()[i]) * g.data<float>()[i];
  norm = std::sqrt(norm);
  ASSERT_GT(norm, 0);
  std::map<std::string, Tensor> along, random;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  double dot = 0, rnorm = 0;
  for (const auto &[name, g] : grads) {
    Tensor a(DType::Float32, g.shape()), r(DType::Float32, g.shape());
    for (int64_t i = 0; i < g.numel(); ++i) {
      a.data<float>()[i] = float(g.data<float>()[i] / norm);
      r.data<float>()[i] = normal(rng);
      rnorm += double(r.data<float>()[i]) * r.data<float>()[i];
    }
    along[name] = a;
    random[name] = r;
  }
  rnorm = std::sqrt(rnorm);
  for (auto &[name, r] : random)
    for (int64_t i = 0; i < r.numel(); ++i) {
      r.data<float>()[i] = float(r.data<float>()[i] / rnorm);
      dot += double(r.data<float>()[i]) * grads.at(name).data<float>()[i];
    }
  // Central differences err by O(h^2) (the loss curves: 0.2% at h = 1e-2
  // on gpt2-tiny) and by float32 rounding / h: 2e-3 keeps both small.
  const double h = 2e-3;
  double dAlong = (lossAt(f, params, along, h) - lossAt(f, params, along, -h)) / (2 * h);
  EXPECT_NEAR(dAlong, norm, 2e-3 * norm) << path << ": |g| = " << norm;
  double dRandom = (lossAt(f, params, random, h) - lossAt(f, params, random, -h)) / (2 * h);
  EXPECT_NEAR(dRandom, dot, 2e-3 * norm + 2e-2 * std::fabs(dot)) << path << ": g.r = " << dot;
}

} // namespace

TEST(Training, Gpt2TinyGradientMatchesFiniteDifferences) {
  checkGradient(std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx", 2, 8);
}

TEST(Training, BertTinyGradientMatchesFiniteDifferences) {
  checkGradient(std::string(HETPLAN_EXAMPLES) + "/bert-tiny.onnx", 2, 8);
}

TEST(Training, StepsLowerTheLoss) {
  Fixture f = makeFixture(std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx", 4, 8, 5);
  PlanExecutor::TrainOptions options;
  options.lr = 1e-2;
  std::vector<PlanExecutor::RankTrainState> states;
  double first = f.exec->train(f.inputs, f.labels, states, options), last = first;
  for (int s = 0; s < 10; ++s) last = f.exec->train(f.inputs, f.labels, states, options);
  EXPECT_LT(last, 0.6 * first) << "ten Adam steps on one batch should overfit it";
  EXPECT_EQ(states[0].step, 11);
}

TEST(Training, ErrorsAreOneLine) {
  Fixture f = makeFixture(std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx", 2, 8, 5);
  std::vector<PlanExecutor::RankTrainState> states;
  Tensor wrongBatch(DType::Int64, {3, 8});
  try {
    f.exec->train(f.inputs, wrongBatch, states, f.frozen);
    FAIL() << "labels with the wrong batch were accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("global batch 2"), std::string::npos) << e.what();
  }
  Tensor floats(DType::Float32, {2, 8});
  EXPECT_THROW(f.exec->train(f.inputs, floats, states, f.frozen), std::runtime_error);
  EXPECT_THROW(f.exec->run(f.inputs), std::runtime_error) << "run() must refuse a training plan";
  Tensor outOfRange(DType::Int64, {2, 8});
  outOfRange.data<int64_t>()[3] = 100000;
  EXPECT_THROW(f.exec->train(f.inputs, outOfRange, states, f.frozen), std::runtime_error);
}
