//===- ProfileFit.cpp - from micro-benchmark times to cluster figures -----===//
//
// The fitting half of `hetplan profile` (Microbench.h): weighted least
// squares of time = intercept + slope * size, and the cost model's GEMM
// curve. Pure arithmetic, unit-tested on synthetic timings
// (test/unit/ProfileFitTest.cpp).
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Microbench.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace hetplan::runtime {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  double hi = v[mid];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + long(mid));
  return (lo + hi) / 2;
}

namespace {
void fillErrors(LinearFit &fit, const std::vector<BenchPoint> &points) {
  std::vector<double> errors;
  for (const BenchPoint &p : points)
    if (p.seconds > 0) errors.push_back(std::fabs(fit.at(p.x) - p.seconds) / p.seconds);
  fit.medianRelError = median(errors);
  fit.maxRelError = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
}
} // namespace

LinearFit fitLinear(const std::vector<BenchPoint> &points) {
  if (points.empty()) throw std::runtime_error("fitLinear: no points");
  double s = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  std::vector<double> times;
  for (const BenchPoint &p : points) {
    if (!(p.seconds > 0) || !std::isfinite(p.seconds) || !std::isfinite(p.x))
      throw std::runtime_error("fitLinear: a time is not a positive number");
    double w = 1.0 / (p.seconds * p.seconds);
    s += w, sx += w * p.x, sxx += w * p.x * p.x, st += w * p.seconds, sxt += w * p.x * p.seconds;
    times.push_back(p.seconds);
  }
  LinearFit fit;
  double det = s * sxx - sx * sx;
  if (det > 1e-12 * s * sxx) {
    fit.slope = (s * sxt - sx * st) / det;
    fit.intercept = (st - fit.slope * sx) / s;
    if (fit.intercept < 0 && sxx > 0) { // through the origin
      fit.intercept = 0;
      fit.slope = sxt / sxx;
    }
  }
  if (!(fit.slope > 0)) { // no size effect (or one size): a constant
    fit.slope = 0;
    fit.intercept = median(times);
  }
  fillErrors(fit, points);
  return fit;
}

GemmCurve fitGemmCurve(const std::vector<GemmPoint> &points, double fixedSeconds) {
  if (points.empty()) throw std::runtime_error("fitGemmCurve: no points");
  // t - fixed = W b + P c, weighted by 1 / t^2: b = 1 / rate, c = halfFlops / rate.
  double fixed = std::max(0.0, fixedSeconds);
  double sww = 0, swp = 0, spp = 0, swy = 0, spy = 0;
  for (const GemmPoint &g : points) {
    if (!(g.seconds > 0) || !std::isfinite(g.seconds))
      throw std::runtime_error("fitGemmCurve: a time is not a positive number");
    double w = 1.0 / (g.seconds * g.seconds), W = g.flops(), P = double(std::max<int64_t>(1, g.batch));
    double y = g.seconds - fixed;
    sww += w * W * W, swp += w * W * P, spp += w * P * P, swy += w * W * y, spy += w * P * y;
  }
  double b = 0, c = 0, det = sww * spp - swp * swp;
  if (det > 1e-12 * sww * spp) {
    b = (spp * swy - swp * spy) / det;
    c = (sww * spy - swp * swy) / det;
  }
  if (c < 0 || !(b > 0)) { // no per-product cost: through the origin
    c = 0;
    b = sww > 0 ? swy / sww : 0;
  }
  if (!(b > 0)) throw std::runtime_error("GEMM times do not grow with size: cannot fit a rate");
  GemmCurve curve;
  curve.rate = 1.0 / b;
  curve.halfFlops = c / b;
  std::vector<double> errors;
  for (const GemmPoint &g : points)
    errors.push_back(std::fabs(fixed + b * g.flops() + c * double(std::max<int64_t>(1, g.batch)) - g.seconds) /
                     g.seconds);
  curve.medianRelError = median(errors);
  curve.maxRelError = *std::max_element(errors.begin(), errors.end());
  return curve;
}

FittedHost fitMicrobench(const MicrobenchResult &measured) {
  FittedHost f;
  // Compute times as a long step sees them: unpreempted call time / CPU share.
  MicrobenchResult r = measured;
  double share = measured.cpuShare > 0 && measured.cpuShare <= 1 ? measured.cpuShare : 1;
  for (GemmPoint &g : r.gemm) g.seconds /= share;
  for (auto *v : {&r.stream, &r.copy, &r.fresh, &r.dispatch})
    for (BenchPoint &p : *v) p.seconds /= share;
  if (!r.dispatch.empty()) {
    f.dispatch = fitLinear(r.dispatch);
    f.kernelSeconds = f.dispatch.slope;
    f.runSeconds = std::max(0.0, f.dispatch.intercept);
  }
  std::vector<GemmPoint> g32;
  std::vector<BenchPoint> g16;
  for (const GemmPoint &g : r.gemm) {
    if (g.dtype == "fp16") g16.push_back({g.flops(), g.seconds});
    else g32.push_back(g);
  }
  if (g32.empty()) throw std::runtime_error("no fp32 GEMM was measured");
  f.gemm32 = fitGemmCurve(g32, f.runSeconds + f.kernelSeconds);
  if (!g16.empty()) {
    LinearFit l16 = fitLinear(g16);
    f.gemm16Rate = l16.slope > 0 ? 1.0 / l16.slope : 0;
  }
  if (!r.stream.empty()) {
    f.stream = fitLinear(r.stream);
    f.streamBandwidth = f.stream.slope > 0 ? 1.0 / f.stream.slope : 0;
  }
  if (!r.copy.empty()) {
    LinearFit c = fitLinear(r.copy);
    f.copyBandwidth = c.slope > 0 ? 1.0 / c.slope : 0;
  }
  if (!r.fresh.empty()) {
    LinearFit c = fitLinear(r.fresh);
    f.freshBandwidth = c.slope > 0 ? 1.0 / c.slope : 0;
  }
  if (!r.send.empty()) {
    f.send = fitLinear(r.send);
    f.linkBandwidth = f.send.slope > 0 ? 1.0 / f.send.slope : 0;
    f.linkLatency = f.send.intercept;
  }
  if (!r.allReduce.empty()) f.allReduce = fitLinear(r.allReduce);
  return f;
}

} // namespace hetplan::runtime
