//===- ServeSimulation.cpp - requests through serving replicas -----------===//
//
// Poisson arrivals routed over the replicas by smooth weighted round-robin,
// each replica batching continuously; the latencies the serve planner
// checks against the targets (docs/serving.md).
//
//===----------------------------------------------------------------------===//

#include "passes/planner/ServePlanner.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

namespace hetplan::planner::serve {

namespace {

struct Request {
  double arrival = 0, firstToken = -1, finish = -1;
  int64_t generated = 0;
};

double percentileOf(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank.
  size_t rank = size_t(std::ceil(p / 100.0 * double(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

/// One replica's continuous batching over the requests routed to it.
void simulateReplica(const SimReplica &r, std::vector<Request *> &requests,
                     int64_t promptTokens, int64_t outputTokens) {
  struct Group {
    double busyUntil = 0;
    bool busy = false;
    bool prefilling = false;
    std::vector<Request *> running, admitted;
  };
  std::vector<Group> groups(size_t(std::max(1, r.groups)));
  std::deque<Request *> waiting;
  size_t next = 0;
  const double inf = std::numeric_limits<double>::infinity();
  auto start = [&](Group &g, double now) {
    if (!waiting.empty() && int(g.running.size()) < r.groupBatch) {
      int k = std::min({int(waiting.size()), r.groupBatch - int(g.running.size()),
                        std::max(1, r.prefillBatch)});
      g.admitted.assign(waiting.begin(), waiting.begin() + k);
      waiting.erase(waiting.begin(), waiting.begin() + k);
      g.prefilling = true;
      g.busy = true;
      g.busyUntil = now + r.prefillSeconds(k);
    } else if (!g.running.empty()) {
      double context = 0;
      for (Request *q : g.running)
        context += double(promptTokens + q->generated);
      g.prefilling = false;
      g.busy = true;
      g.busyUntil = now + r.decodeSeconds(int(g.running.size()), context);
    } else {
      g.busy = false;
    }
  };
  while (true) {
    double nextArrival = next < requests.size() ? requests[next]->arrival : inf;
    Group *first = nullptr;
    for (Group &g : groups)
      if (g.busy && (!first || g.busyUntil < first->busyUntil))
        first = &g;
    double nextDone = first ? first->busyUntil : inf;
    if (nextArrival == inf && nextDone == inf)
      break;
    if (nextArrival <= nextDone) {
      waiting.push_back(requests[next++]);
      for (Group &g : groups)
        if (!g.busy)
          start(g, nextArrival);
      continue;
    }
    Group &g = *first;
    double now = g.busyUntil;
    if (g.prefilling) {
      for (Request *q : g.admitted) {
        q->firstToken = now;
        q->generated = 1;
        if (q->generated >= outputTokens)
          q->finish = now;
        else
          g.running.push_back(q);
      }
      g.admitted.clear();
    } else {
      std::vector<Request *> still;
      for (Request *q : g.running) {
        if (++q->generated >= outputTokens)
          q->finish = now;
        else
          still.push_back(q);
      }
      g.running = std::move(still);
    }
    start(g, now);
    // Another idle group may take what this one left waiting.
    for (Group &other : groups)
      if (!other.busy)
        start(other, now);
  }
}

} // namespace

SimResult simulate(const std::vector<SimReplica> &replicas, double rate,
                   int64_t promptTokens, int64_t outputTokens, uint64_t count, uint64_t seed) {
  SimResult result;
  if (replicas.empty() || rate <= 0 || count == 0)
    return result;
  // Exponential gaps by inversion on the generator's own 53-bit doubles:
  // the same on every standard library (std::exponential_distribution is not).
  std::mt19937_64 gen(seed);
  std::vector<Request> requests(count);
  double t = 0;
  for (Request &q : requests) {
    double u = double(gen() >> 11) * (1.0 / 9007199254740992.0);
    t += -std::log1p(-u) / rate;
    q.arrival = t;
  }
  // Smooth weighted round-robin (nginx): deterministic, and each replica's
  // arrivals stay evenly spread.
  std::vector<std::vector<Request *>> routed(replicas.size());
  std::vector<double> current(replicas.size(), 0);
  double total = 0;
  for (const SimReplica &r : replicas)
    total += std::max(0.0, r.share);
  for (Request &q : requests) {
    size_t best = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      current[i] += std::max(0.0, replicas[i].share);
      if (current[i] > current[best])
        best = i;
    }
    current[best] -= total;
    routed[best].push_back(&q);
  }
  for (size_t i = 0; i < replicas.size(); ++i)
    simulateReplica(replicas[i], routed[i], promptTokens, outputTokens);

  std::vector<double> ttft, tpot;
  double last = 0;
  size_t skip = count / 10;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request &q = requests[i];
    last = std::max(last, q.finish);
    if (i < skip)
      continue;
    ttft.push_back(q.firstToken - q.arrival);
    tpot.push_back(outputTokens > 1 ? (q.finish - q.firstToken) / double(outputTokens - 1) : 0);
  }
  for (double v : ttft)
    result.ttftMean += v / double(ttft.size());
  for (double v : tpot)
    result.tpotMean += v / double(tpot.size());
  result.ttftP50 = percentileOf(ttft, 50);
  result.ttftP90 = percentileOf(ttft, 90);
  result.ttftP99 = percentileOf(ttft, 99);
  result.tpotP50 = percentileOf(tpot, 50);
  result.tpotP90 = percentileOf(tpot, 90);
  result.tpotP99 = percentileOf(tpot, 99);
  result.requests = count;
  double span = last - requests.front().arrival;
  if (span > 0) {
    result.requestsPerSecond = double(count) / span;
    result.outputTokensPerSecond = double(count) * double(outputTokens) / span;
  }
  return result;
}

} // namespace hetplan::planner::serve
