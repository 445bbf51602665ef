//===- ScheduleSimulation.cpp - the step of one candidate -------------------===//
//
// Integer shares per worker, an event simulation of the GPipe or 1F1B
// schedule, and the memory of every rank: the plan the search returns.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include "runtime/include/hetplan/runtime/Checked.h"

#include <algorithm>
#include <cmath>

namespace hetplan::planner::detail {

Plan Search::simulate(const Candidate &c, bool even) {
  Plan plan;
  plan.strategy = opt.strategy;
  plan.schedule = opt.schedule;
  plan.microBatches = c.microBatches;
  int P = int(c.stagesRef().size());
  int M = c.microBatches;
  int64_t mb = (opt.globalBatch + M - 1) / M;

  placeStages(c, even, mb, plan);

  // Event simulation of one step. Transfers delay the dependent compute but
  // do not occupy the sender.
  std::vector<double> free(P, 0);
  std::vector<double> busy(P, 0);
  std::vector<int> peakStash(P, 0);
  runSchedule(scheduleProgram(P, M), plan, free, busy, peakStash);
  double computeEnd = 0;
  for (int j = 0; j < P; ++j)
    computeEnd = std::max(computeEnd, free[j]);
  double step = computeEnd;
  for (int j = 0; j < P; ++j) {
    if (!training)
      continue;
    const Stage &st = plan.stages[j];
    double t = free[j];
    if (st.allReduceSeconds > 0) {
      plan.timeline.push_back({Event::AllReduce, j, -1, t, t + st.allReduceSeconds});
      t += st.allReduceSeconds;
    }
    plan.timeline.push_back({Event::Optimizer, j, -1, t, t + st.optimizerSeconds});
    t += st.optimizerSeconds;
    step = std::max(step, t);
  }
  plan.stepSeconds = step;
  plan.samplesPerSecond = double(opt.globalBatch) / step;
  double busiest = *std::max_element(busy.begin(), busy.end());
  plan.bubbleFraction = computeEnd > 0 ? 1.0 - busiest / computeEnd : 0;
  plan.modelFlopsPerStep = (training ? 3.0 : 1.0) * model.forwardFlopsPerSample() *
                           double(opt.globalBatch);
  double peak = cluster.totalPeakFlops(opt.dtype);
  plan.modelFlopsUtilization = peak > 0 ? plan.modelFlopsPerStep / (step * peak) : 0;

  rankMemory(c, peakStash, plan);
  return plan;
}

/// The plan's stages for `c`: timings, transfers, and integer shares per
/// worker (a worker with nothing to do stays out of the plan).
void Search::placeStages(const Candidate &c, bool even, int64_t mb, Plan &plan) {
  int P = int(c.stagesRef().size());
  plan.stageOfRank.assign(cluster.devices.size(), -1);
  // Each stage's grouping (tensor-parallel degree) first: a transfer's
  // price depends on both ends.
  std::vector<StageCost> costs;
  for (int j = 0, l = 0; j < P; l = c.cuts[j] + 1, ++j)
    costs.push_back(costOf(c, j, l, c.cuts[j], mb, even));
  int l = 0;
  for (int j = 0; j < P; ++j) {
    const StageCost &sc = costs[j];
    const StageDevices &sd = chosen(c.stagesRef()[j], sc);
    int r = c.cuts[j];
    Stage st;
    st.firstLayer = l;
    st.lastLayer = r;
    st.tensorParallel = sd.tp;
    st.forwardSeconds = sc.forward;
    st.backwardSeconds = sc.backward;
    st.recompute = sc.recompute;
    st.allReduceSeconds = allReduceTime(sd, l, r, c.savers);
    st.optimizerSeconds = optimizerTime(sd, l, r, c.savers);
    if (j + 1 < P)
      st.sendSeconds = sendTime(sd, chosen(c.stagesRef()[j + 1], costs[j + 1]), r, mb,
                                st.sendBytes);
    std::vector<std::vector<int64_t>> samples = integerShares(sd, sc, mb);
    int64_t offset = 0;
    for (size_t g = 0; g < sd.groups.size(); ++g)
      for (int w = 0; w < sd.groups[g].count; ++w) {
        if (samples[g][w] == 0)
          continue;  // a worker with nothing to do stays out of the plan
        Worker worker{sd.groups[g].ranks[w], samples[g][w], offset};
        offset += samples[g][w];
        for (int rank : worker.ranks)
          plan.stageOfRank[rank] = j;
        st.workers.push_back(std::move(worker));
      }
    plan.stages.push_back(std::move(st));
    l = r + 1;
  }
}

/// Samples per worker (by group, then worker) of a micro-batch of `mb`:
/// floor of each worker's share, the remainder to the workers with the
/// largest fractional parts (ties by position).
std::vector<std::vector<int64_t>> Search::integerShares(const StageDevices &sd,
                                                        const StageCost &sc, int64_t mb) {
  struct Slot { size_t g; int w; double frac; };
  std::vector<Slot> slots;
  int64_t assigned = 0;
  std::vector<std::vector<int64_t>> samples(sd.groups.size());
  for (size_t g = 0; g < sd.groups.size(); ++g)
    for (int w = 0; w < sd.groups[g].count; ++w) {
      double s = sc.share.empty() ? 0 : sc.share[g];
      int64_t whole = runtime::saturatedCount(std::floor(s + 1e-9));
      samples[g].push_back(whole);
      assigned += whole;
      slots.push_back({g, w, s - double(whole)});
    }
  std::stable_sort(slots.begin(), slots.end(),
                   [](const Slot &a, const Slot &b) { return a.frac > b.frac; });
  for (size_t i = 0; assigned < mb && i < slots.size(); ++i, ++assigned)
    ++samples[slots[i].g][slots[i].w];
  return samples;
}

/// What each of the `P` stages runs, in order, for `M` micro-batches:
/// forwards only at inference, else GPipe's all forwards then all
/// backwards, or 1F1B's warm-up forwards then one forward one backward.
Search::Program Search::scheduleProgram(int P, int M) const {
  Program program(P);
  for (int j = 0; j < P; ++j) {
    auto &prog = program[j];
    if (!training) {
      for (int m = 0; m < M; ++m)
        prog.push_back({Event::Forward, m});
      continue;
    }
    if (opt.schedule == Schedule::GPipe) {
      for (int m = 0; m < M; ++m) prog.push_back({Event::Forward, m});
      for (int m = 0; m < M; ++m) prog.push_back({Event::Backward, m});
      continue;
    }
    int warm = std::min(P - 1 - j, M);
    for (int m = 0; m < warm; ++m)
      prog.push_back({Event::Forward, m});
    for (int m = 0; m + warm < M; ++m) {
      prog.push_back({Event::Forward, m + warm});
      prog.push_back({Event::Backward, m});
    }
    for (int m = M - warm; m < M; ++m)
      prog.push_back({Event::Backward, m});
  }
  return program;
}

/// Runs `program` on the plan's stages: each box starts when its stage is
/// free and its input has arrived. Fills the plan's timeline, and per
/// stage when it is last free, how long it computes, and the most
/// micro-batches it stashes at once.
void Search::runSchedule(const Program &program, Plan &plan, std::vector<double> &free,
                         std::vector<double> &busy, std::vector<int> &peakStash) {
  int P = int(program.size());
  int M = plan.microBatches;
  std::vector<std::vector<double>> fEnd(P, std::vector<double>(M, -1)),
      bEnd(P, std::vector<double>(M, -1));
  std::vector<size_t> next(P, 0);
  std::vector<int> stashed(P, 0);
  size_t remaining = 0;
  for (auto &p : program)
    remaining += p.size();
  while (remaining) {
    bool progressed = false;
    for (int j = 0; j < P; ++j) {
      while (next[j] < program[j].size()) {
        auto [kind, m] = program[j][next[j]];
        double ready = 0;
        if (kind == Event::Forward) {
          if (j > 0) {
            if (fEnd[j - 1][m] < 0) break;
            ready = fEnd[j - 1][m] + plan.stages[j - 1].sendSeconds;
          }
        } else {
          if (fEnd[j][m] < 0) break;
          ready = fEnd[j][m];
          if (j + 1 < P) {
            if (bEnd[j + 1][m] < 0) break;
            ready = std::max(ready, bEnd[j + 1][m] + plan.stages[j].sendSeconds);
          }
        }
        double start = std::max(free[j], ready);
        double dur = kind == Event::Forward ? plan.stages[j].forwardSeconds
                                            : plan.stages[j].backwardSeconds;
        double end = start + dur;
        free[j] = end;
        busy[j] += dur;
        (kind == Event::Forward ? fEnd : bEnd)[j][m] = end;
        plan.timeline.push_back({kind, j, m, start, end});
        if (kind == Event::Forward && j + 1 < P)
          plan.timeline.push_back({Event::SendActivation, j, m, end,
                                   end + plan.stages[j].sendSeconds});
        if (kind == Event::Backward && j > 0)
          plan.timeline.push_back({Event::SendGradient, j, m, end,
                                   end + plan.stages[j - 1].sendSeconds});
        if (training) {
          stashed[j] += kind == Event::Forward ? 1 : -1;
          peakStash[j] = std::max(peakStash[j], stashed[j]);
        }
        ++next[j];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed)
      break;  // cannot happen for these schedules; guards against a hang
  }
}

/// Memory per rank from the simulated stash depth of its stage.
void Search::rankMemory(const Candidate &c, const std::vector<int> &peakStash, Plan &plan) {
  int P = int(c.stagesRef().size());
  int M = c.microBatches;
  plan.zeroStage = training ? c.savers.zero : 0;
  plan.offloadOptimizer = training && c.savers.offload;
  plan.memory.resize(cluster.devices.size());
  for (const auto &d : cluster.devices)
    plan.memory[d.rank].capacity = double(d.type->memoryBytes());
  for (int j = 0; j < P; ++j) {
    const Stage &st = plan.stages[j];
    int depth = training ? std::max(1, peakStash[j]) : 1;
    for (const Worker &w : st.workers)
      for (int rank : w.ranks) {
        RankMemory &mem = plan.memory[rank];
        const double capacity = mem.capacity;
        auto priced = [&](bool recompute, const Savers &sv) {
          Need n = need(classOfRank[rank], st.firstLayer, st.lastLayer, st.tensorParallel,
                        int(c.stagesRef()[j].workers()), depth, M, recompute, sv);
          double samples = double(w.samples);
          RankMemory m;
          m.capacity = capacity;
          m.parameters = n.weights;
          m.gradients = n.gradients;
          m.optimizerState = n.optimizer;
          m.framework = n.framework;
          m.optimizerStep = n.step;
          m.kvCache = n.kvPerSample * samples;
          m.activations = n.keptPerSample * samples;
          m.workspace = n.gather + n.transientPerSample * samples +
                        (n.keptPerSample + n.transientPerSample) * samples *
                            opt.allocatorFragmentation;
          return m;
        };
        mem = priced(st.recompute, c.savers);
        // What each saver bought, for the report (explain, --html).
        if (training && st.recompute)
          mem.recomputeSaved = std::max(0.0, priced(false, c.savers).peak() - mem.peak());
        if (training && c.savers.offload) {
          Savers kept = c.savers;
          kept.offload = false;
          mem.offloadSaved = std::max(0.0, priced(st.recompute, kept).peak() - mem.peak());
        }
        if (mem.peak() > mem.capacity)
          plan.fitsMemory = false;
      }
  }
}

} // namespace hetplan::planner::detail
