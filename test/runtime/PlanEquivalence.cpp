//===- PlanEquivalence.cpp - a plan's outputs against one rank ------------===//
//
//   hetplan-plan-equivalence PLAN [--model MODEL] [--write DIR] [--seed N]
//                            [--per-sample]
//
// Makes inputs for the plan's global batch (floats in [-1, 1), integers in
// [0, 8), bools random), runs the whole model on one rank (Executor) and the
// plan on its ranks (PlanExecutor, one thread per rank), and compares every
// output: |a - b| <= 1e-5 + 1e-4 |b|. Prints the max relative error per
// output. With --write, also writes the inputs (DIR/in_<name>.npy) and the
// reference outputs (DIR/ref_<name>.npy) for `hetplan run` to be checked
// against. --per-sample runs the reference one sample at a time (for graphs
// that hard-code a batch of 1). Exit 0 when equal, 1 otherwise. Links the runtime only.
//
// A training plan instead runs --steps N (default 2) steps with random
// labels on its ranks and on PlanExecutor::singleRankPlan (one rank, one
// micro-batch), and compares every step's loss, every parameter's summed
// gradient and the parameters after the last step. Adam runs with eps 1e-4
// here so that an update is a smooth function of its gradient (with 1e-8,
// a gradient of pure rounding noise moves a weight by +-lr either way).
// With --write, also writes the labels (DIR/labels.npy) and the reference
// losses (DIR/ref_loss.npy) and parameters (DIR/ref_param_<name>.npy).
//
// Training memory options, set on the loaded plan before it runs (what
// `hetplan compile` writes when the planner chooses them): --recompute
// all|S[,S...] (Stage.recompute), --zero N (Settings.zero_stage), --offload
// (Settings.offload_optimizer). A ZeRO-2/3 rank keeps only its range of the
// summed gradients: that range is compared. With --write the changed plan
// is written too (DIR/plan.hpl, model path absolute) for `hetplan run`.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"

#include <climits>
#include <cstdlib>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <algorithm>
#include <random>

using namespace hetplan::runtime;

static std::vector<double> asDoubles(const Tensor &t) {
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.scalarAsDouble(i);
  return out;
}

static std::string safe(const std::string &name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

/// DIR/in_<name>.npy per input and DIR/input_names.txt (the real names, in
/// the order of the files) for `hetplan run`.
static void writeInputs(const std::string &dir, const std::map<std::string, Tensor> &inputs) {
  std::string names;
  for (const auto &[name, t] : inputs) {
    writeNpy(dir + "/in_" + safe(name) + ".npy", t);
    names += (names.empty() ? "" : "\n") + name;
  }
  FILE *f = std::fopen((dir + "/input_names.txt").c_str(), "w");
  if (f) { std::fputs(names.c_str(), f); std::fclose(f); }
}

/// max |a - b| / max(max |b|, floor) over all elements. `floor`: for a
/// gradient that is zero in exact arithmetic (BERT's key bias: softmax
/// ignores a constant added to a row), both sides hold rounding noise.
static double maxNormError(const Tensor &a, const Tensor &b, double floor = 0) {
  if (a.shape() != b.shape()) return INFINITY;
  auto x = asDoubles(a), y = asDoubles(b);
  double d = 0, m = floor;
  for (size_t i = 0; i < x.size(); ++i) {
    d = std::max(d, std::fabs(x[i] - y[i]));
    m = std::max(m, std::fabs(y[i]));
  }
  return m > 0 ? d / m : d;
}

static double maxAbs(const Tensor &t) {
  double m = 0;
  for (double v : asDoubles(t)) m = std::max(m, std::fabs(v));
  return m;
}

/// The tensor-parallel collectives each rank ran in one step against the
/// plan's priced Stage.tensor_parallel_traffic: per micro-batch, the
/// all-reduces and all-gathers and their elements per sample of the
/// worker's share. Prints one line; false on a mismatch.
static bool checkTensorParallelTraffic(const PlanExecutor &exec, const PlanExecutor::StepTiming &timing) {
  const auto &plan = exec.plan();
  bool train = exec.training();
  uint32_t M = plan.settings().micro_batches();
  int ranks = 0;
  int64_t collectives = 0;
  for (const auto &r : plan.ranks()) {
    const auto &st = plan.stages(int(r.stage()));
    if (st.tensor_parallel() <= 1 || r.rank() >= timing.ranks.size()) continue;
    const auto &w = st.workers(int(r.worker()));
    if (std::find(w.ranks().begin(), w.ranks().end(), r.rank()) == w.ranks().end()) continue;
    const auto &t = st.tensor_parallel_traffic();
    const auto &got = timing.ranks[r.rank()];
    // A recomputing stage runs each micro-batch's forward, and its
    // collectives, twice (priced so: the backward includes the replay).
    int64_t passes = train && st.recompute() ? 2 : 1;
    double samples = double(w.samples()) * M, forwardSamples = samples * double(passes);
    struct { const char *what; int64_t count, want; double elements, wantElements; } rows[] = {
        {"forward all-reduces", got.forwardAllReduces, int64_t(t.forward_all_reduces()) * M * passes,
         got.forwardAllReduceElements, t.forward_all_reduce_elements() * forwardSamples},
        {"forward all-gathers", got.forwardAllGathers, int64_t(t.forward_all_gathers()) * M * passes,
         got.forwardAllGatherElements, t.forward_all_gather_elements() * forwardSamples},
        {"backward all-reduces", got.backwardAllReduces, train ? int64_t(t.backward_all_reduces()) * M : 0,
         got.backwardAllReduceElements, train ? t.backward_all_reduce_elements() * samples : 0}};
    for (const auto &row : rows) {
      if (row.count != row.want || std::fabs(row.elements - row.wantElements) > 1e-6 * std::max(1.0, row.wantElements)) {
        std::printf("FAIL: rank %u ran %lld %s of %.0f elements, the plan priced %lld of %.0f\n", r.rank(),
                    (long long)row.count, row.what, row.elements, (long long)row.want, row.wantElements);
        return false;
      }
      collectives += row.count;
    }
    ++ranks;
  }
  if (ranks)
    std::printf("ok: tensor-parallel collectives on %d ranks (%lld in all) match the plan's priced traffic\n",
                ranks, (long long)collectives);
  return true;
}

static int compareTraining(const PlanExecutor &exec, const std::map<std::string, Tensor> &inputs,
                           const std::string &modelPath, int steps, unsigned seed,
                           const std::string &writeDir) {
  const Model &model = exec.model();
  // Labels: class indices for the first output's last axis.
  std::map<std::string, Tensor> probe;
  for (const auto &[k, v] : inputs) probe[k] = v;
  std::string lossOut = model.outputs.at(0).name;
  auto outShape = Executor(model).run(probe).at(lossOut).shape();
  int64_t classes = outShape.back();
  outShape.pop_back();
  Tensor labels(DType::Int64, outShape);
  std::mt19937 rng(seed + 7);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.data<int64_t>()[i] = int64_t(rng() % uint64_t(classes));

  PlanExecutor single(PlanExecutor::singleRankPlan(exec.plan()), modelPath);
  PlanExecutor::TrainOptions options;
  options.eps = 1e-4;
  std::vector<PlanExecutor::RankTrainState> mine, ref;
  const double tol = 1e-4;
  bool ok = true;
  std::vector<double> refLosses;
  for (int s = 1; s <= steps; ++s) {
    PlanExecutor::StepTiming timing;
    double a = exec.train(inputs, labels, mine, options, &timing);
    ok &= checkTensorParallelTraffic(exec, timing);
    double b = single.train(inputs, labels, ref, options);
    refLosses.push_back(b);
    double e = std::fabs(a - b) / std::max(std::fabs(b), 1e-30);
    bool good = e <= tol;
    std::printf("%s: %s step %d loss %.8f, one rank %.8f, relative error %.3g\n", good ? "ok" : "FAIL",
                model.path.c_str(), s, a, b, e);
    ok &= good;
    // Summed gradients: every holder of a parameter has the same after the
    // all-reduce; check each against the reference.
    double worst = 0;
    std::string worstName;
    size_t checked = 0;
    double largest = 0; // over all parameters' gradients
    for (const auto &[name, g] : ref[0].grads) largest = std::max(largest, maxAbs(g));
    for (size_t r = 0; r < mine.size(); ++r) {
      // ZeRO-2/3: the rank's range of the flattened gradients (of a split
      // weight, the elements in its columns).
      for (const auto &[grp, z] : exec.zeroShards(uint32_t(r))) {
        auto it = mine[r].shards.find(grp);
        if (it == mine[r].shards.end() || !it->second.grad.defined()) continue;
        const float *got = it->second.grad.data<float>();
        double d = 0, m = 1e-3 * largest;
        for (size_t i = 0; i < z.params.size(); ++i) {
          int64_t a = std::max(z.lo, z.offsets[i]), b = std::min(z.hi, z.offsets[i + 1]);
          const Tensor &want = ref[0].grads.at(z.params[i]);
          // Only the elements the rank holds (a tensor-parallel rank's
          // columns or rows of a split weight) carry its gradient.
          PlanExecutor::Held h = exec.held(uint32_t(r), z.params[i]);
          int64_t stride = 1, extent = 1;
          if (!h.whole()) {
            for (size_t d = size_t(h.axis) + 1; d < want.shape().size(); ++d) stride *= want.shape()[d];
            extent = want.shape()[size_t(h.axis)];
          }
          auto holds = [&](int64_t k) {
            if (h.whole()) return true;
            int64_t at = (k / stride) % extent;
            for (auto [lo, hi] : h.ranges)
              if (at >= lo && at < hi) return true;
            return false;
          };
          for (int64_t e = a; e < b; ++e) {
            if (!holds(e - z.offsets[i])) continue;
            double w = want.data<float>()[e - z.offsets[i]];
            d = std::max(d, std::fabs(double(got[e - z.lo]) - w));
            m = std::max(m, std::fabs(w));
          }
          ++checked;
        }
        double err = d / m;
        if (err > worst) { worst = err; worstName = "ZeRO range of group " + std::to_string(grp) + " on rank " + std::to_string(r); }
      }
      for (const auto &[name, g] : mine[r].grads) {
        // A tensor-parallel rank computes its part (columns, rows) of a
        // split weight.
        auto held = exec.held(uint32_t(r), name);
        const Tensor &want = ref[0].grads.at(name);
        double err = maxNormError(PlanExecutor::heldPart(g, held), PlanExecutor::heldPart(want, held),
                                  1e-3 * largest);
        ++checked;
        if (err > worst) { worst = err; worstName = name + " on rank " + std::to_string(r); }
      }
    }
    bool gGood = worst <= tol && checked >= ref[0].grads.size();
    std::printf("%s: step %d gradients of %zu parameters on all ranks (%zu checks), max relative error %.3g%s\n",
                gGood ? "ok" : "FAIL", s, ref[0].grads.size(), checked, worst,
                worstName.empty() ? "" : (" (" + worstName + ")").c_str());
    ok &= gGood;
  }
  auto params = exec.collectParameters(mine);
  auto refParams = single.collectParameters(ref);
  double worst = 0;
  std::string worstName;
  for (const auto &[name, p] : refParams) {
    auto it = params.find(name);
    double err = it == params.end() ? INFINITY : maxNormError(it->second, p);
    if (err > worst) { worst = err; worstName = name; }
  }
  bool pGood = worst <= tol && params.size() == refParams.size();
  std::printf("%s: %zu parameters after %d steps, max relative error %.3g%s\n", pGood ? "ok" : "FAIL",
              refParams.size(), steps, worst, worstName.empty() ? "" : (" (" + worstName + ")").c_str());
  ok &= pGood;
  for (size_t r = 0; r < mine.size(); ++r) {
    const auto &st = mine[r].stats;
    if (st.peakStashedBytes || st.offloadBytes || st.gatheredParameterBytes)
      std::printf("rank %zu: peak stashed activations %llu bytes, optimizer offload %llu bytes, "
                  "ZeRO-3 gathered %llu bytes (last step)\n", r, (unsigned long long)st.peakStashedBytes,
                  (unsigned long long)st.offloadBytes, (unsigned long long)st.gatheredParameterBytes);
  }
  if (!writeDir.empty()) {
    writeInputs(writeDir, inputs);
    writeNpy(writeDir + "/labels.npy", labels);
    Tensor l(DType::Float64, {int64_t(refLosses.size())});
    std::copy(refLosses.begin(), refLosses.end(), l.data<double>());
    writeNpy(writeDir + "/ref_loss.npy", l);
    for (const auto &[name, p] : refParams) writeNpy(writeDir + "/ref_param_" + safe(name) + ".npy", p);
  }
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  std::string planPath, modelPath, writeDir;
  unsigned seed = 1;
  bool perSample = false; // reference one sample at a time (graphs with a fixed batch of 1)
  int steps = 2;
  int zero = -1;
  std::string recompute;
  bool offload = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) modelPath = argv[++i];
    else if (a == "--zero" && i + 1 < argc) zero = std::stoi(argv[++i]);
    else if (a == "--recompute" && i + 1 < argc) recompute = argv[++i];
    else if (a == "--offload") offload = true;
    else if (a == "--write" && i + 1 < argc) writeDir = argv[++i];
    else if (a == "--per-sample") perSample = true;
    else if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = unsigned(std::stoul(argv[++i]));
    else if (planPath.empty()) planPath = a;
    else { std::cerr << "usage: hetplan-plan-equivalence PLAN [--model M] [--write DIR] [--seed N]\n"; return 2; }
  }
  try {
    auto exec = PlanExecutor::load(planPath, modelPath);
    if (zero >= 0 || !recompute.empty() || offload) {
      hetplan::plan::Plan p = exec->plan();
      if (zero >= 0) p.mutable_settings()->set_zero_stage(uint32_t(zero));
      if (offload) p.mutable_settings()->set_offload_optimizer(true);
      for (auto &st : *p.mutable_stages()) {
        std::string me = std::to_string(st.index());
        st.set_recompute(recompute == "all" || ("," + recompute + ",").find("," + me + ",") != std::string::npos);
      }
      char abs[PATH_MAX];
      if (realpath(p.model().path().c_str(), abs)) p.mutable_model()->set_path(abs);
      exec = std::make_unique<PlanExecutor>(p, modelPath);
      std::string error;
      if (!writeDir.empty() && !writePlan(writeDir + "/plan.hpl", p, error)) {
        std::cerr << "hetplan-plan-equivalence: " << error << "\n";
        return 1;
      }
    }
    const Model &model = exec->model();
    int64_t B = exec->plan().settings().global_batch();
    const auto &bound = exec->plan().settings().bound_dims();
    std::mt19937 rng(seed);
    std::map<std::string, Tensor> inputs;
    for (const auto &in : model.inputs) {
      std::vector<int64_t> shape = in.shape;
      if (!in.hasShape) { std::cerr << in.name << ": no shape\n"; return 2; }
      if (!shape.empty()) shape[0] = B; // else a scalar (a flag): no batch dim
      for (size_t d = 1; d < shape.size(); ++d)
        if (shape[d] < 0) {
          int64_t seq = exec->plan().settings().sequence();
          auto it = bound.find("sequence");
          shape[d] = seq > 0 ? seq : (it != bound.end() ? it->second : 1);
        }
      Tensor t(in.dtype, shape);
      for (int64_t i = 0; i < t.numel(); ++i) {
        switch (in.dtype) {
        case DType::Float32: t.data<float>()[i] = std::uniform_real_distribution<float>(-1, 1)(rng); break;
        case DType::Int64: // BERT's token types are 0/1, its attention mask mostly 1
          t.data<int64_t>()[i] = in.name == "token_type_ids" ? int64_t(rng() % 2)
                                 : in.name == "attention_mask" ? int64_t(rng() % 4 != 0)
                                                               : int64_t(rng() % 8);
          break;
        case DType::Int32: t.data<int32_t>()[i] = int32_t(rng() % 8); break;
        case DType::Bool: t.data<bool>()[i] = rng() % 2; break;
        default: std::cerr << in.name << ": element type " << dtypeName(in.dtype) << " not generated\n"; return 2;
        }
      }
      inputs[in.name] = t;
    }
    if (exec->training()) return compareTraining(*exec, inputs, modelPath, steps, seed, writeDir);
    Executor whole(model);
    std::map<std::string, Tensor> ref;
    if (!perSample) ref = whole.run(inputs);
    else {
      std::map<std::string, std::vector<Tensor>> parts;
      for (int64_t b = 0; b < B; ++b) {
        std::map<std::string, Tensor> one;
        for (const auto &[name, t] : inputs) {
          if (t.rank() == 0) { one[name] = t; continue; } // a scalar input: no batch dim
          std::vector<int64_t> shape = t.shape();
          shape[0] = 1;
          Tensor s(t.dtype(), shape);
          std::memcpy(s.raw(), static_cast<const char *>(t.raw()) + s.nbytes() * b, s.nbytes());
          one[name] = s;
        }
        for (auto &[name, t] : whole.run(one)) parts[name].push_back(t.clone());
      }
      for (auto &[name, ps] : parts) {
        std::vector<int64_t> shape = ps[0].shape();
        shape[0] = B;
        Tensor all(ps[0].dtype(), shape);
        for (int64_t b = 0; b < B; ++b)
          std::memcpy(static_cast<char *>(all.raw()) + ps[0].nbytes() * b, ps[b].raw(), ps[0].nbytes());
        ref[name] = all;
      }
    }
    PlanExecutor::StepTiming timing;
    auto got = exec->run(inputs, &timing);
    bool ok = checkTensorParallelTraffic(*exec, timing);
    for (const auto &[name, r] : ref) {
      const Tensor &g = got.at(name);
      if (g.shape() != r.shape() || g.dtype() != r.dtype()) {
        std::cout << name << ": plan gave " << g.describe() << ", one rank " << r.describe() << "\n";
        ok = false;
        continue;
      }
      auto a = asDoubles(g), b = asDoubles(r);
      double maxRel = 0;
      int64_t bad = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        double d = std::fabs(a[i] - b[i]);
        maxRel = std::max(maxRel, d / std::max(std::fabs(b[i]), 1e-30));
        if (!(d <= 1e-5 + 1e-4 * std::fabs(b[i])) && !(std::isnan(a[i]) && std::isnan(b[i]))) ++bad;
      }
      std::printf("%s: %s output '%s' %s, max relative error %.3g%s\n", bad ? "FAIL" : "ok",
                  model.path.c_str(), name.c_str(), r.describe().c_str(), maxRel,
                  bad ? (", " + std::to_string(bad) + " elements differ").c_str() : "");
      if (bad) ok = false;
    }
    if (!writeDir.empty()) {
      writeInputs(writeDir, inputs);
      for (const auto &[name, t] : ref) writeNpy(writeDir + "/ref_" + safe(name) + ".npy", t);
    }
    return ok ? 0 : 1;
  } catch (const std::exception &e) {
    std::cerr << "hetplan-plan-equivalence: " << e.what() << "\n";
    return 1;
  }
}
