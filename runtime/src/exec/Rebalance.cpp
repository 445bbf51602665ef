//===- Rebalance.cpp - data-parallel shares from measured speeds ----------===//
//
// Rebalancer (Rebalance.h; docs/runtime.md, "Stragglers"): when a stage's
// slowest worker stays slower than the measured-speed optimum by more than
// the threshold, new shares proportional to the measured speeds.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Rebalance.h"
#include "hetplan/runtime/PlanFile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace hetplan::runtime {

namespace {
std::string joined(const std::vector<int64_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}
std::string joined(const std::vector<double> &v) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.4g", v[i]);
    s += (i ? ", " : "") + std::string(buf);
  }
  return s;
}
} // namespace

std::string RebalanceEvent::describe() const {
  if (!refused.empty())
    return "rebalance: after step " + std::to_string(step) + ", stage " + std::to_string(stage) +
           " shares kept at " + joined(oldShares) + " (wanted " + joined(newShares) + "): " + refused;
  return "rebalance: after step " + std::to_string(step) + ", stage " + std::to_string(stage) + " shares " +
         joined(oldShares) + " -> " + joined(newShares) + " (measured samples/s per worker: " + joined(speeds) +
         ")";
}

std::vector<double> rankComputeSeconds(const plan::Plan &plan, const PlanExecutor::StepTiming &timing) {
  std::vector<double> out(size_t(plan.ranks_size()), 0.0);
  for (size_t r = 0; r < out.size() && r < timing.ranks.size(); ++r) {
    const auto &spans = timing.ranks[r].instructionSpans;
    const auto &program = plan.ranks(int(r)).program();
    for (int i = 0; i < program.size() && size_t(i) < spans.size(); ++i)
      if (program[i].kind() == plan::Instruction::FORWARD || program[i].kind() == plan::Instruction::BACKWARD)
        out[r] += spans[size_t(i)].second - spans[size_t(i)].first;
  }
  return out;
}

std::vector<int64_t> balancedShares(int64_t total, const std::vector<WorkerCost> &costs,
                                    const std::vector<int64_t> &caps) {
  size_t n = costs.size();
  if (int64_t(n) > total) throw std::runtime_error("rebalance: more workers than samples in a micro-batch");
  std::vector<int64_t> out(n, 1);
  for (int64_t left = total - int64_t(n); left > 0; --left) {
    size_t best = n;
    for (size_t w = 0; w < n; ++w)
      if (out[w] < caps[w] && (best == n || costs[w].seconds(out[w] + 1) < costs[best].seconds(out[best] + 1)))
        best = w;
    if (best == n) throw std::runtime_error("rebalance: the workers' caps hold fewer samples than the micro-batch");
    out[best]++;
  }
  return out;
}

std::vector<int64_t> proportionalShares(int64_t total, const std::vector<double> &speeds,
                                        const std::vector<int64_t> &caps) {
  std::vector<WorkerCost> costs;
  for (double v : speeds) costs.push_back({0.0, 1.0 / std::max(v, 1e-300)});
  return balancedShares(total, costs, caps);
}

Rebalancer::Rebalancer(const plan::Plan &plan, RebalanceOptions options) : options_(options) {
  size_t S = size_t(plan.stages_size());
  caps_.resize(S);
  slowSteps_.assign(S, 0);
  secondsHistory_.resize(S);
  before_.resize(S);
  for (size_t s = 0; s < S; ++s) {
    const auto &st = plan.stages(int(s));
    int64_t largest = 0;
    for (const auto &w : st.workers()) largest = std::max(largest, w.samples());
    for (const auto &w : st.workers()) {
      int64_t cap = std::max<int64_t>(int64_t(std::floor(options.growBound * double(largest))), w.samples());
      // Activation memory grows with the share: what the rank's recorded
      // capacity leaves beside its fixed use (peak - activations).
      for (uint32_t r : w.ranks()) {
        if (r >= uint32_t(plan.ranks_size())) continue;
        const auto &m = plan.ranks(int(r)).memory();
        if (m.capacity() == 0 || m.activations() == 0 || m.peak() < m.activations()) continue;
        uint64_t fixed = m.peak() - m.activations();
        double room = m.capacity() > fixed ? double(m.capacity() - fixed) : 0;
        int64_t memCap = int64_t(std::floor(double(w.samples()) * room / double(m.activations())));
        cap = std::min(cap, std::max(memCap, w.samples()));
      }
      caps_[s].push_back(cap);
      before_[s].push_back({0, 0.0});
    }
  }
}

std::vector<WorkerCost> Rebalancer::costs(size_t stage, const std::vector<int64_t> &shares,
                                          const std::vector<double> &seconds) const {
  std::vector<WorkerCost> out;
  for (size_t w = 0; w < shares.size(); ++w) {
    WorkerCost c{0.0, seconds[w] / double(shares[w])}; // proportional: no fixed part
    auto [n0, t0] = before_[stage][w];
    if (n0 > 0 && n0 != shares[w]) { // two shares measured: fixed + perSample * n
      double p = (seconds[w] - t0) / double(shares[w] - n0), f = seconds[w] - p * double(shares[w]);
      if (p > 0 && f >= 0) c = {f, p};
    }
    out.push_back(c);
  }
  return out;
}

std::vector<RebalanceEvent> Rebalancer::observe(const plan::Plan &current,
                                                const std::vector<double> &computeSeconds, int step) {
  std::vector<RebalanceEvent> events;
  for (size_t s = 0; s < size_t(current.stages_size()); ++s) {
    const auto &st = current.stages(int(s));
    if (st.workers_size() < 2 || current.settings().whole_batch()) continue;
    std::vector<double> seconds;
    std::vector<int64_t> shares;
    int64_t total = 0;
    double slowest = 0;
    bool timed = true;
    for (const auto &w : st.workers()) {
      double t = 0; // a tensor-parallel worker is as fast as its slowest rank
      for (uint32_t r : w.ranks())
        if (r < computeSeconds.size()) t = std::max(t, computeSeconds[r]);
      timed = timed && t > 0;
      seconds.push_back(t);
      shares.push_back(w.samples());
      total += w.samples();
      slowest = std::max(slowest, t);
    }
    if (!timed) continue;
    // The best the measured costs allow (whole samples, within the caps).
    std::vector<WorkerCost> cost = costs(s, shares, seconds);
    std::vector<int64_t> best = balancedShares(total, cost, caps_[s]);
    double optimum = 0;
    for (size_t w = 0; w < best.size(); ++w) optimum = std::max(optimum, cost[w].seconds(best[w]));
    if (slowest <= (1 + options_.threshold) * optimum) {
      slowSteps_[s] = 0;
      secondsHistory_[s].clear();
      continue;
    }
    secondsHistory_[s].push_back(seconds);
    if (++slowSteps_[s] < options_.steps) continue;
    // Seconds averaged over the slow steps.
    std::vector<double> mean(seconds.size(), 0.0);
    for (const auto &h : secondsHistory_[s])
      for (size_t w = 0; w < h.size(); ++w) mean[w] += h[w] / double(secondsHistory_[s].size());
    slowSteps_[s] = 0;
    secondsHistory_[s].clear();
    std::vector<int64_t> next = balancedShares(total, costs(s, shares, mean), caps_[s]);
    if (next == shares) continue;
    RebalanceEvent e;
    e.step = step;
    e.stage = uint32_t(s);
    e.oldShares = shares;
    e.newShares = next;
    uint32_t mbs = std::max<uint32_t>(current.settings().micro_batches(), 1);
    for (size_t w = 0; w < shares.size(); ++w) {
      e.speeds.push_back(double(shares[w]) * double(mbs) / mean[w]); // samples per second over the step
      before_[s][w] = {shares[w], mean[w]};
    }
    e.seconds = mean;
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<RebalanceEvent> rebalanceStep(PlanExecutor &exec, Rebalancer &rebalancer,
                                          const std::vector<double> &computeSeconds, int step) {
  std::vector<RebalanceEvent> events = rebalancer.observe(exec.plan(), computeSeconds, step);
  for (auto &e : events) e.refused = exec.setShares(e.stage, e.newShares);
  return events;
}

std::pair<int, double> parseSlowRank(const std::string &spec, int ranks) {
  size_t colon = spec.find(':');
  auto bad = [&](const std::string &why) {
    return std::runtime_error("--test-slow-rank " + spec + ": " + why);
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
    throw bad("expected RANK:FRACTION (e.g. 1:0.5)");
  std::string r = spec.substr(0, colon), f = spec.substr(colon + 1);
  char *end = nullptr;
  long rank = std::strtol(r.c_str(), &end, 10);
  if (*end || rank < 0 || rank >= ranks)
    throw bad("the rank must be 0.." + std::to_string(ranks - 1));
  double fraction = std::strtod(f.c_str(), &end);
  if (*end || !std::isfinite(fraction) || fraction <= 0 || fraction > 100)
    throw bad("the fraction must be a number in (0, 100]");
  return {int(rank), fraction};
}

} // namespace hetplan::runtime
