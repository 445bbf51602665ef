//===- OptimizerTest.cpp - SGD, momentum, Adam, AdamW updates --------------===//
//
// RankCompute::optimizerUpdate's host default (train::optimizerUpdate)
// against PyTorch's update rules written out here from the torch.optim
// documentation (SGD with weight decay, momentum with dampening 0 and no
// Nesterov; Adam with L2 weight decay; AdamW with decoupled decay), and
// against values worked out by hand; the state each keeps
// (docs/runtime.md, "Optimizers"). Plans of each optimizer against one rank
// and a plan naming an unknown one: TrainingMemoryTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "PlanFixtures.h"
#include "hetplan/runtime/PlanExecutor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace hetplan::runtime;

namespace {

using HostCompute = hetplan::test::HostCompute;

Tensor vec(const std::vector<float> &v) {
  Tensor t(DType::Float32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

/// torch.optim's update of one element, in double, as its documentation
/// writes it (t: the 1-based step; b: the momentum buffer or m; v).
struct TorchReference {
  OptimizerSettings s;
  double p, b = 0, v = 0;
  void step(double g, int t) {
    switch (s.kind) {
    case Optimizer::SGD:
    case Optimizer::Momentum:
      // g <- g + lambda * theta; if mu != 0: b <- g (t = 1) or mu * b + (1 - tau) g.
      g += s.weightDecay * p;
      if (s.kind == Optimizer::Momentum) {
        b = t == 1 ? g : s.momentum * b + g;
        g = b;
      }
      p -= s.lr * g;
      return;
    case Optimizer::Adam:
    case Optimizer::AdamW: {
      if (s.kind == Optimizer::AdamW) p -= s.lr * s.weightDecay * p;
      else g += s.weightDecay * p;
      b = s.beta1 * b + (1 - s.beta1) * g;
      v = s.beta2 * v + (1 - s.beta2) * g * g;
      double mHat = b / (1 - std::pow(s.beta1, t)), vHat = v / (1 - std::pow(s.beta2, t));
      p -= s.lr * mHat / (std::sqrt(vHat) + s.eps);
      return;
    }
    }
  }
};

const Optimizer kAll[] = {Optimizer::SGD, Optimizer::Momentum, Optimizer::Adam, Optimizer::AdamW};

} // namespace

TEST(Optimizers, NamesAndStateBuffers) {
  for (Optimizer o : kAll) EXPECT_EQ(parseOptimizer(optimizerName(o)), o);
  EXPECT_FALSE(parseOptimizer("lion"));
  EXPECT_FALSE(parseOptimizer("Adam"));
  EXPECT_EQ(optimizerStateBuffers(Optimizer::SGD), 0);
  EXPECT_EQ(optimizerStateBuffers(Optimizer::Momentum), 1);
  EXPECT_EQ(optimizerStateBuffers(Optimizer::Adam), 2);
  EXPECT_EQ(optimizerStateBuffers(Optimizer::AdamW), 2);
}

TEST(Optimizers, TwoStepsByHand) {
  // One parameter 1.0, gradient 0.5 both steps, lr 0.1, weight decay 0.1.
  HostCompute host;
  auto run = [&](Optimizer kind, int steps) {
    OptimizerSettings s{kind, 0.1, 0.9, 0.999, 1e-8, 0.1, 0.9};
    Tensor p = vec({1.0f}), g = vec({0.5f}), m, v;
    for (int t = 1; t <= steps; ++t) host.optimizerUpdate(p, g, m, v, t, s, {});
    return double(p.data<float>()[0]);
  };
  // SGD: g' = 0.5 + 0.1 * 1 = 0.6, p = 1 - 0.06 = 0.94; then
  // g' = 0.5 + 0.094 = 0.594, p = 0.94 - 0.0594 = 0.8806.
  EXPECT_NEAR(run(Optimizer::SGD, 1), 0.94, 1e-7);
  EXPECT_NEAR(run(Optimizer::SGD, 2), 0.8806, 1e-7);
  // Momentum 0.9: b = 0.6, p = 0.94; then b = 0.9 * 0.6 + 0.594 = 1.134,
  // p = 0.94 - 0.1134 = 0.8266.
  EXPECT_NEAR(run(Optimizer::Momentum, 2), 0.8266, 1e-7);
  // Adam, step 1: g' = 0.6, m-hat = 0.6, v-hat = 0.36, p = 1 - 0.1 * 0.6 /
  // (0.6 + 1e-8) = 0.9 (to 2e-9).
  EXPECT_NEAR(run(Optimizer::Adam, 1), 0.9, 1e-7);
  // AdamW, step 1: p = 1 * (1 - 0.01) = 0.99, then m-hat / sqrt(v-hat) =
  // 0.5 / 0.5: p = 0.99 - 0.1 = 0.89.
  EXPECT_NEAR(run(Optimizer::AdamW, 1), 0.89, 1e-7);
}

TEST(Optimizers, MatchTorchFormulasOverSteps) {
  HostCompute host;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (Optimizer kind : kAll)
    for (double wd : {0.0, 0.05}) {
      OptimizerSettings s{kind, 0.05, 0.8, 0.99, 1e-6, wd, 0.7};
      const int n = 9;
      std::vector<float> init(n);
      for (float &x : init) x = normal(rng);
      std::vector<TorchReference> ref;
      for (float x : init) ref.push_back({s, double(x)});
      Tensor p = vec(init), m, v;
      for (int t = 1; t <= 4; ++t) {
        std::vector<float> grad(n);
        for (float &x : grad) x = normal(rng);
        host.optimizerUpdate(p, vec(grad), m, v, t, s, {});
        for (int i = 0; i < n; ++i) {
          ref[size_t(i)].step(double(grad[size_t(i)]), t);
          std::string what = std::string(optimizerName(kind)) + " wd " + std::to_string(wd) + " step " +
                             std::to_string(t) + " element " + std::to_string(i);
          EXPECT_NEAR(p.data<float>()[i], ref[size_t(i)].p, 1e-5 * (1 + std::abs(ref[size_t(i)].p))) << what;
          if (m.defined()) {
            EXPECT_NEAR(m.data<float>()[i], ref[size_t(i)].b, 1e-5) << what;
          }
          if (v.defined()) {
            EXPECT_NEAR(v.data<float>()[i], ref[size_t(i)].v, 1e-5) << what;
          }
        }
      }
      // The state each keeps: SGD none, momentum its buffer, Adam/AdamW m and v.
      EXPECT_EQ(m.defined(), optimizerStateBuffers(kind) >= 1) << optimizerName(kind);
      EXPECT_EQ(v.defined(), optimizerStateBuffers(kind) >= 2) << optimizerName(kind);
    }
}

TEST(Optimizers, WeightDecayDiffersBetweenAdamAndAdamW) {
  // Without weight decay AdamW is Adam; with it, they differ.
  HostCompute host;
  auto after = [&](Optimizer kind, double wd) {
    OptimizerSettings s{kind, 0.01, 0.9, 0.999, 1e-8, wd, 0.9};
    Tensor p = vec({2.0f, -1.0f}), m, v;
    for (int t = 1; t <= 3; ++t) host.optimizerUpdate(p, vec({0.1f, 0.3f}), m, v, t, s, {});
    return std::vector<float>{p.data<float>()[0], p.data<float>()[1]};
  };
  EXPECT_EQ(after(Optimizer::Adam, 0), after(Optimizer::AdamW, 0));
  EXPECT_NE(after(Optimizer::Adam, 0.1), after(Optimizer::AdamW, 0.1));
}

TEST(Optimizers, PiecesUpdateOnlyTheirElements) {
  HostCompute host;
  for (Optimizer kind : kAll) {
    OptimizerSettings s{kind, 0.1, 0.9, 0.999, 1e-8, 0.01, 0.9};
    Tensor whole = vec({1, 2, 3, 4, 5, 6}), pieced = whole.clone(), g = vec({1, -1, 2, -2, 3, -3});
    Tensor m1, v1, m2, v2;
    host.optimizerUpdate(whole, g, m1, v1, 1, s, {});
    host.optimizerUpdate(pieced, g, m2, v2, 1, s, {{1, 2}, {4, 1}});
    for (int i = 0; i < 6; ++i) {
      bool in = i == 1 || i == 2 || i == 4;
      EXPECT_EQ(pieced.data<float>()[i], in ? whole.data<float>()[i] : float(i + 1))
          << optimizerName(kind) << " element " << i;
    }
    EXPECT_THROW(host.optimizerUpdate(pieced, g, m2, v2, 2, s, {{5, 2}}), std::runtime_error);
  }
}
