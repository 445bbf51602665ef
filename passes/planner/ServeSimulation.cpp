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
  int64_t prompt = 1, output = 1, generated = 0;
};

/// Uniform in [0, 1) from the generator's own 53 bits: the same on every
/// standard library (std's distributions are not).
double uniform(std::mt19937_64 &gen) { return double(gen() >> 11) * (1.0 / 9007199254740992.0); }

/// Gamma(shape, 1) by Marsaglia and Tsang (2000), normals by Box-Muller:
/// deterministic across standard libraries.
double gammaSample(std::mt19937_64 &gen, double shape) {
  if (shape < 1)
    return gammaSample(gen, shape + 1) * std::pow(1 - uniform(gen), 1 / shape);
  double d = shape - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  while (true) {
    double u1 = 1 - uniform(gen), u2 = uniform(gen);
    double x = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    double v = 1 + c * x;
    if (v <= 0)
      continue;
    v = v * v * v;
    double u = 1 - uniform(gen);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v))
      return d * v;
  }
}

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
                     int64_t promptTokens) {
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
      // Priced at promptTokens per request: scaled to the prompts admitted.
      double prompts = 0;
      for (Request *q : g.admitted)
        prompts += double(q->prompt);
      g.busyUntil = now + r.prefillSeconds(k) * prompts / (double(k) * double(promptTokens));
    } else if (!g.running.empty()) {
      double context = 0;
      for (Request *q : g.running)
        context += double(q->prompt + q->generated);
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
      // Every request of this instant waits before an idle group starts: a
      // burst (a trace's simultaneous arrivals) is prefilled together, as an
      // engine's scheduler sees its whole queue.
      while (next < requests.size() && requests[next]->arrival == nextArrival)
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
        if (q->generated >= q->output)
          q->finish = now;
        else
          g.running.push_back(q);
      }
      g.admitted.clear();
    } else {
      std::vector<Request *> still;
      for (Request *q : g.running) {
        if (++q->generated >= q->output)
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
  return simulate(replicas, rate, Workload(), promptTokens, outputTokens, count, seed);
}

SimResult simulate(const std::vector<SimReplica> &replicas, double rate, const Workload &workload,
                   int64_t promptTokens, int64_t outputTokens, uint64_t count, uint64_t seed) {
  SimResult result;
  bool trace = workload.arrivals == Arrivals::Trace;
  if (trace)
    count = workload.trace.size();
  if (replicas.empty() || rate <= 0 || count == 0)
    return result;
  std::mt19937_64 gen(seed);
  std::vector<Request> requests(count);
  if (trace) {
    // The trace's gaps scaled to the rate planned (its own rate: unchanged).
    double own = workload.traceRate(), scale = own > 0 ? own / rate : 1;
    for (size_t i = 0; i < count; ++i) {
      const TraceRequest &t = workload.trace[i];
      requests[i].arrival = (t.arrival - workload.trace.front().arrival) * scale;
      requests[i].prompt = t.promptTokens;
      requests[i].output = t.outputTokens;
    }
  } else {
    bool gamma = workload.arrivals == Arrivals::Gamma && workload.burstiness > 0;
    double shape = gamma ? 1 / (workload.burstiness * workload.burstiness) : 1;
    double t = 0;
    for (Request &q : requests) {
      // Exponential gaps by inversion; gamma gaps of mean 1/rate.
      t += gamma ? gammaSample(gen, shape) / (shape * rate) : -std::log1p(-uniform(gen)) / rate;
      q.arrival = t;
    }
    // Lengths from their own stream: the arrivals do not change with them.
    std::mt19937_64 lengths(seed ^ 0x9e3779b97f4a7c15ull);
    for (Request &q : requests) {
      q.prompt = workload.prompt.empty() ? promptTokens : workload.prompt.at(uniform(lengths));
      q.output = workload.output.empty() ? outputTokens : workload.output.at(uniform(lengths));
    }
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
    simulateReplica(replicas[i], routed[i], std::max<int64_t>(1, promptTokens));

  std::vector<double> ttft, tpot, e2e;
  double last = 0, tokens = 0;
  size_t skip = count / 10;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request &q = requests[i];
    last = std::max(last, q.finish);
    tokens += double(q.output);
    if (i < skip)
      continue;
    ttft.push_back(q.firstToken - q.arrival);
    e2e.push_back(q.finish - q.arrival);
    if (q.output > 1)
      tpot.push_back((q.finish - q.firstToken) / double(q.output - 1));
  }
  if (tpot.empty())
    tpot.push_back(0);
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
  result.e2eP50 = percentileOf(e2e, 50);
  result.e2eP90 = percentileOf(e2e, 90);
  result.e2eP99 = percentileOf(e2e, 99);
  result.requests = count;
  double span = last - requests.front().arrival;
  if (span > 0) {
    result.requestsPerSecond = double(count) / span;
    result.outputTokensPerSecond = tokens / span;
  }
  return result;
}

} // namespace hetplan::planner::serve
