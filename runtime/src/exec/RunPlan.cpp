//===- RunPlan.cpp - running a plan's step on its ranks -------------------===//
#include "hetplan/runtime/RunPlan.h"

#include <chrono>

#include <algorithm>
#include <mutex>
#include <thread>

namespace hetplan::runtime {

namespace {
/// Per piece its (micro-batch, worker, #outputs), then per output its name
/// bytes and its tensor; a count of pieces first.
void sendPieces(Communicator &comm, int peer, int64_t tag, const PlanExecutor::OutputPieces &mine) {
  comm.send(peer, tag, Tensor::scalar<int64_t>(DType::Int64, int64_t(mine.size())));
  for (const auto &[key, outs] : mine) {
    Tensor head(DType::Int64, {3});
    int64_t *h = head.data<int64_t>();
    h[0] = key.first, h[1] = key.second, h[2] = int64_t(outs.size());
    comm.send(peer, tag, head);
    for (const auto &[name, t] : outs) {
      Tensor bytes(DType::UInt8, {int64_t(name.size())});
      std::copy(name.begin(), name.end(), bytes.data<uint8_t>());
      comm.send(peer, tag, bytes);
      comm.send(peer, tag, t);
    }
  }
}

PlanExecutor::OutputPieces receivePieces(Communicator &comm, int peer, int64_t tag) {
  PlanExecutor::OutputPieces pieces;
  int64_t count = *comm.recv(peer, tag).data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    Tensor head = comm.recv(peer, tag);
    const int64_t *h = head.data<int64_t>();
    auto &outs = pieces[{uint32_t(h[0]), uint32_t(h[1])}];
    for (int64_t k = 0, m = h[2]; k < m; ++k) {
      Tensor name = comm.recv(peer, tag);
      std::string key(reinterpret_cast<const char *>(name.data<uint8_t>()), size_t(name.numel()));
      outs[key] = comm.recv(peer, tag);
    }
  }
  return pieces;
}
} // namespace

RankThreadsOutcome runRankThreads(int ranks, const std::function<void(Communicator &)> &body) {
  ThreadCommGroup group(ranks);
  std::mutex mutex;
  RankThreadsOutcome outcome;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Communicator &comm = group.communicator(r);
      try {
        body(comm);
      } catch (const CommAborted &e) {
        std::lock_guard<std::mutex> lock(mutex);
        outcome.aborted = true;
        if (outcome.abortError.empty()) outcome.abortError = e.what();
      } catch (const std::exception &e) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (outcome.firstRank < 0) outcome.firstError = e.what(), outcome.firstRank = r;
        }
        comm.abort(e.what());
      }
    });
  for (auto &t : threads) t.join();
  return outcome;
}

std::vector<PlanExecutor::OutputPieces> gatherOutputPieces(Communicator &comm, PlanExecutor::OutputPieces mine,
                                                           int root, int64_t tag) {
  const int me = comm.rank(), n = comm.size();
  bool receiving = root < 0 || me == root;
  for (int peer = 0; peer < n; ++peer)
    if (peer != me && (root < 0 || peer == root)) sendPieces(comm, peer, tag, mine);
  if (!receiving) return {};
  std::vector<PlanExecutor::OutputPieces> all(static_cast<size_t>(n));
  for (int peer = 0; peer < n; ++peer)
    if (peer != me) all[size_t(peer)] = receivePieces(comm, peer, tag);
  all[size_t(me)] = std::move(mine);
  if (root < 0) comm.barrier(); // every send has completed before the next call reuses the tag
  return all;
}

void gatherRankTiming(Communicator &comm, const PlanExecutor::RankTiming &mine, double wall,
                      PlanExecutor::StepTiming &all, int64_t tag) {
  auto f64 = [](const std::vector<double> &v) {
    Tensor t(DType::Float64, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), t.data<double>());
    return t;
  };
  if (comm.rank() != 0) {
    Tensor samples(DType::Int64, {int64_t(mine.nodeSamples.size())});
    std::copy(mine.nodeSamples.begin(), mine.nodeSamples.end(), samples.data<int64_t>());
    comm.send(0, tag, f64(mine.nodeSeconds));
    comm.send(0, tag, samples);
    comm.send(0, tag, f64(mine.forwardSeconds));
    comm.send(0, tag, f64({wall}));
    std::vector<double> spans; // (start, end) pairs, flat: a profile's rank speeds read them
    for (auto [a, b] : mine.instructionSpans) spans.insert(spans.end(), {a, b});
    comm.send(0, tag, f64(spans));
    return;
  }
  all.ranks.assign(size_t(comm.size()), {});
  all.ranks[0] = mine;
  all.wallSeconds = wall;
  for (int r = 1; r < comm.size(); ++r) {
    auto &t = all.ranks[size_t(r)];
    Tensor s = comm.recv(r, tag), n = comm.recv(r, tag), f = comm.recv(r, tag), w = comm.recv(r, tag),
           spans = comm.recv(r, tag);
    for (int64_t i = 0; i + 1 < spans.numel(); i += 2)
      t.instructionSpans.push_back({spans.data<double>()[i], spans.data<double>()[i + 1]});
    t.nodeSeconds.assign(s.data<double>(), s.data<double>() + s.numel());
    t.nodeSamples.assign(n.data<int64_t>(), n.data<int64_t>() + n.numel());
    t.forwardSeconds.assign(f.data<double>(), f.data<double>() + f.numel());
    all.wallSeconds = std::max(all.wallSeconds, w.data<double>()[0]);
  }
}

TrainPlanResult trainPlanSteps(PlanExecutor &exec, const std::map<std::string, Tensor> &inputs,
                               const Tensor &labels, const TrainPlanOptions &options) {
  TrainPlanResult result;
  std::unique_ptr<Rebalancer> rebalancer;
  if (options.rebalance) rebalancer = std::make_unique<Rebalancer>(exec.plan(), options.rebalanceOptions);
  for (int s = 1; s <= options.steps; ++s) {
    PlanExecutor::StepTiming own;
    PlanExecutor::StepTiming *timing = s == options.steps ? options.timing : nullptr;
    if (rebalancer && !timing) timing = &own;
    auto t0 = std::chrono::steady_clock::now();
    result.losses.push_back(exec.train(inputs, labels, result.states, options.train, timing));
    result.stepSeconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (options.onStep) options.onStep(s, result.losses.back());
    if (!rebalancer || s == options.steps) continue;
    for (auto &e : rebalanceStep(exec, *rebalancer, rankComputeSeconds(exec.plan(), *timing), s)) {
      if (options.onRebalance) options.onRebalance(e);
      result.rebalances.push_back(std::move(e));
    }
  }
  result.parameters = exec.collectParameters(result.states);
  return result;
}

} // namespace hetplan::runtime
