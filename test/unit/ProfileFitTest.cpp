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
  // One product: t = fixed + (W + W_half) / rate; 40 GFLOP/s, half the rate at 2 MFLOP, 7 us fixed.
  // Batched calls of P products: t = fixed + (W + P W_half) / rate.
  const double rate = 40e9, half = 2e6, fixed = 7e-6;
  std::vector<GemmPoint> pts;
  for (int64_t n : {32, 64, 128, 256, 512, 1024}) pts.push_back({n, n, n, "fp32", 0, 1});
  for (int64_t s : {32, 64, 128}) pts.push_back({s, 64, s, "fp32", 0, 32});
  for (GemmPoint &g : pts) g.seconds = fixed + (g.flops() + double(g.batch) * half) / rate;
  GemmCurve c = fitGemmCurve(pts, fixed);
  EXPECT_NEAR(c.rate, rate, rate * 1e-6);
  EXPECT_NEAR(c.halfFlops, half, half * 1e-4);
  EXPECT_LT(c.maxRelError, 1e-6);
  // The cost model's form for one product: fixed + W / (rate * W / (W + half)).
  for (const GemmPoint &g : pts)
    if (g.batch == 1)
      EXPECT_NEAR(fixed + g.flops() / (c.rate * g.flops() / (g.flops() + c.halfFlops)), g.seconds, g.seconds * 1e-6);
  // A fixed cost above the calls' own leaves less per product (never negative).
  double less = fitGemmCurve(pts, fixed + 2 * half / rate).halfFlops;
  EXPECT_GE(less, 0);
  EXPECT_LT(less, half);
  std::vector<GemmPoint> single(pts.begin(), pts.begin() + 6); // one product per call
  EXPECT_EQ(fitGemmCurve(single, fixed + 2 * half / rate).halfFlops, 0);
  EXPECT_THROW(fitGemmCurve(pts, 1.0), std::runtime_error); // every call faster than the fixed cost
  std::vector<GemmPoint> flat = {{100, 100, 100, "fp32", 1e-3, 1}, {1000, 1000, 1000, "fp32", 1e-3, 1}};
  EXPECT_THROW(fitGemmCurve(flat, 2e-3), std::runtime_error);
  EXPECT_THROW(fitGemmCurve({}, 0), std::runtime_error);
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
