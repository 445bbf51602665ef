//===- node_profile.cpp - where a model's CPU run spends its time ---------===//
//
//   hetplan-bench-profile MODEL --input NAME=FILE.npy ... [--warmup W] [--iters N] [--top K]
//
// Loads MODEL (hetplan::runtime::loadModel + Executor), runs W warm-up and N
// timed runs with an ExecutionObserver, and prints the mean time per run of
// each op type and of the K slowest nodes, and the mean wall time of a run.
// For finding slow kernels (bench/zoo_latency.py gives the end-to-end view).
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/Npy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace hetplan::runtime;

namespace {
struct Obs : ExecutionObserver {
  std::vector<double> perNode;
  void nodeRan(size_t node, double seconds) override {
    if (node >= perNode.size()) perNode.resize(node + 1);
    perNode[node] += seconds;
  }
};
} // namespace

int main(int argc, char **argv) {
  std::string path;
  std::map<std::string, Tensor> inputs;
  long warmup = 3, iters = 20, top = 15;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--input" && i + 1 < argc) {
        std::string s = argv[++i];
        size_t eq = s.rfind('=');
        inputs[s.substr(0, eq)] = readNpy(s.substr(eq + 1));
      } else if (a == "--warmup" && i + 1 < argc) warmup = std::atol(argv[++i]);
      else if (a == "--iters" && i + 1 < argc) iters = std::max(1L, std::atol(argv[++i]));
      else if (a == "--top" && i + 1 < argc) top = std::atol(argv[++i]);
      else path = a;
    }
    Model model = loadModel(path);
    Executor ex(model);
    for (const auto &p : ex.check()) std::cerr << p << "\n";
    for (long i = 0; i < warmup; ++i) ex.run(inputs);
    Obs obs;
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; ++i) ex.run(inputs, &obs);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    obs.perNode.resize(model.nodes.size());
    std::map<std::string, std::pair<double, int>> byOp;
    double sum = 0;
    for (size_t n = 0; n < model.nodes.size(); ++n) {
      double t = obs.perNode[n] / iters;
      if (t == 0) continue;
      auto &e = byOp[model.nodes[n].opType];
      e.first += t, e.second++, sum += t;
    }
    std::printf("wall %.3f ms/run, sum of nodes %.3f ms\n", wall * 1e3, sum * 1e3);
    std::vector<std::pair<double, std::string>> ops;
    for (auto &[op, e] : byOp) ops.push_back({e.first, op + " x" + std::to_string(e.second)});
    std::sort(ops.rbegin(), ops.rend());
    for (auto &[t, op] : ops) std::printf("  %8.3f ms  %5.1f%%  %s\n", t * 1e3, 100 * t / sum, op.c_str());
    std::vector<size_t> idx;
    for (size_t n = 0; n < model.nodes.size(); ++n) idx.push_back(n);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return obs.perNode[a] > obs.perNode[b]; });
    std::printf("slowest nodes:\n");
    for (long k = 0; k < top && k < (long)idx.size(); ++k)
      std::printf("  %8.3f ms  %s\n", obs.perNode[idx[k]] / iters * 1e3, model.nodes[idx[k]].describe().c_str());
  } catch (const std::exception &e) {
    std::cerr << "hetplan-bench-profile: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
