//===- ProfileFitTest.cpp - `hetplan profile`'s fits on synthetic timings -===//
//
// Given times made from known parameters (with and without noise), the fits
// of ProfileFit.cpp (Microbench.h) recover them.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Microbench.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace hetplan::runtime;

namespace {
// Deterministic +-`amp` relative noise.
double noise(int i, double amp) { return 1.0 + amp * (((i * 37) % 11) - 5) / 5.0; }
} // namespace

TEST(ProfileFit, LinearRecoversInterceptAndSlope) {
  std::vector<BenchPoint> pts;
  for (double x : {1e3, 1e4, 1e5, 1e6, 1e7}) pts.push_back({x, 5e-6 + x / 2e9});
  LinearFit f = fitLinear(pts);
  EXPECT_NEAR(f.intercept, 5e-6, 1e-9);
  EXPECT_NEAR(f.slope, 1 / 2e9, 1e-15);
  EXPECT_LT(f.maxRelError, 1e-6);
}

TEST(ProfileFit, LinearWithNoiseStaysClose) {
  std::vector<BenchPoint> pts;
  int i = 0;
  for (double x : {1.0, 4.0, 16.0, 64.0, 128.0}) pts.push_back({x, (20e-6 + x * 3e-6) * noise(i++, 0.03)});
  LinearFit f = fitLinear(pts);
  EXPECT_NEAR(f.slope, 3e-6, 0.3e-6);
  EXPECT_NEAR(f.intercept, 20e-6, 3e-6);
  EXPECT_LT(f.medianRelError, 0.05);
}

TEST(ProfileFit, NegativeInterceptGoesThroughOrigin) {
  // Times that extrapolate below zero (super-linear small sizes): no negative fixed cost.
  std::vector<BenchPoint> pts = {{1e6, 0.5e-3}, {2e6, 1.6e-3}, {4e6, 3.8e-3}};
  LinearFit f = fitLinear(pts);
  EXPECT_EQ(f.intercept, 0);
  EXPECT_GT(f.slope, 0);
}

TEST(ProfileFit, ConstantTimesGiveNoSlope) {
  std::vector<BenchPoint> pts = {{1, 2e-6}, {10, 2e-6}, {100, 2e-6}};
  LinearFit f = fitLinear(pts);
  EXPECT_EQ(f.slope, 0);
  EXPECT_DOUBLE_EQ(f.intercept, 2e-6);
  std::vector<BenchPoint> one = {{5, 3e-6}};
  EXPECT_DOUBLE_EQ(fitLinear(one).intercept, 3e-6);
  EXPECT_THROW(fitLinear({}), std::runtime_error);
  EXPECT_THROW(fitLinear({{1, 0}}), std::runtime_error);
}

TEST(ProfileFit, GemmCurveRecoversRateAndHalfSize) {
  // t = fixed + (W + W_half) / rate: 40 GFLOP/s, half the rate at 2 MFLOP, 7 us fixed.
  const double rate = 40e9, half = 2e6, fixed = 7e-6;
  std::vector<BenchPoint> pts;
  for (double n : {32.0, 64.0, 128.0, 256.0, 512.0, 1024.0}) {
    double w = 2 * n * n * n;
    pts.push_back({w, fixed + (w + half) / rate});
  }
  GemmCurve c = fitGemmCurve(pts, fixed);
  EXPECT_NEAR(c.rate, rate, rate * 1e-6);
  EXPECT_NEAR(c.halfFlops, half, half * 1e-4);
  // The cost model's form: W / (rate * W / (W + half)) + fixed reproduces each point.
  for (const BenchPoint &p : pts)
    EXPECT_NEAR(fixed + p.x / (c.rate * p.x / (p.x + c.halfFlops)), p.seconds, p.seconds * 1e-6);
  // A fixed cost above the intercept: no size effect left (0, never negative).
  EXPECT_EQ(fitGemmCurve(pts, 1.0).halfFlops, 0);
  std::vector<BenchPoint> flat = {{1e6, 1e-3}, {1e9, 1e-3}};
  EXPECT_THROW(fitGemmCurve(flat, 0), std::runtime_error);
}

TEST(ProfileFit, WholeHostFromSyntheticBenchmarks) {
  MicrobenchResult r;
  const double kernel = 3e-6, run = 12e-6, rate = 50e9, half = 1e6, bw = 8e9, copyBw = 10e9, lat = 4e-6,
               linkBw = 5e9;
  for (double n : {1.0, 4.0, 16.0, 64.0}) r.dispatch.push_back({n, run + n * kernel});
  for (int64_t s : {64, 128, 256, 512}) {
    GemmPoint g{s, s, s, "fp32", 0};
    g.seconds = run + kernel + (g.flops() + half) / rate;
    r.gemm.push_back(g);
    GemmPoint h{s, s, s, "fp16", 0};
    h.seconds = run + kernel + h.flops() / (rate / 4);
    r.gemm.push_back(h);
  }
  for (double b : {1e4, 1e5, 1e6, 1e7}) {
    r.stream.push_back({b, run + kernel + b / bw});
    r.copy.push_back({b, b / copyBw});
    r.send.push_back({b, lat + b / linkBw});
  }
  FittedHost f = fitMicrobench(r);
  EXPECT_NEAR(f.kernelSeconds, kernel, 1e-12);
  EXPECT_NEAR(f.runSeconds, run, 1e-12);
  EXPECT_NEAR(f.gemm32.rate, rate, rate * 1e-6);
  EXPECT_NEAR(f.gemm32.halfFlops, half, half * 1e-3);
  EXPECT_NEAR(f.gemm16Rate, rate / 4, rate * 1e-3);
  EXPECT_NEAR(f.streamBandwidth, bw, bw * 1e-6);
  EXPECT_NEAR(f.copyBandwidth, copyBw, copyBw * 1e-6);
  EXPECT_NEAR(f.linkBandwidth, linkBw, linkBw * 1e-6);
  EXPECT_NEAR(f.linkLatency, lat, 1e-12);
  MicrobenchResult none;
  EXPECT_THROW(fitMicrobench(none), std::runtime_error); // no GEMM measured
}

TEST(ProfileFit, Median) {
  EXPECT_EQ(median({}), 0);
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
}
