//===- Run.cpp - hetplan run: execute a plan on its ranks -----------------===//
//
//   hetplan run PLAN --input NAME=FILE.npy ... --output DIR [--ranks N]
//               [--model MODEL] [--profile OUT.json] [--device auto|cpu|cuda]
//   hetplan run TRAIN.PLAN --input ... --labels FILE.npy --output DIR
//               [--steps N] [--lr X] [--loss-output NAME] [--save-model OUT.onnx]
//
// Runs the plan with one thread per rank (the in-process communicator), or
// one process per rank under mpirun. Each rank computes where the plan puts
// it (RankBackend.h, docs/gpu.md): GPU ranks on the CUDA executor when this
// build and host have one (--device cpu: every rank on the CPU), and an MPI
// job of CUDA ranks talks over NCCL. An inference plan writes
// DIR/<output>.npy; a training plan runs N steps on the batch and writes
// DIR/loss.npy (one loss per step) and, with --save-model, the trained
// model. Errors are one line, exit 1, and leave no output files behind.
//
//===----------------------------------------------------------------------===//

#include "tools/hetplan/Commands.h"

#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/Files.h"
#include "hetplan/runtime/Trace.h"
#include "hetplan/runtime/MpiCommunicator.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/RankBackend.h"
#include "hetplan/runtime/Rebalance.h"
#include "hetplan/runtime/RunPlan.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <unistd.h>

namespace cl = llvm::cl;

namespace hetplan::tools {

cl::SubCommand runCmd("run", "Run a plan on its ranks: CUDA GPUs or CPUs (threads, or processes under mpirun)");

namespace {
// "rank N: message", unless the message already starts by naming the rank.
std::string rankPrefixed(int rank, const std::string &message) {
  std::string who = "rank " + std::to_string(rank);
  return message.compare(0, who.size() + 1, who + " ") == 0 ? message : who + ": " + message;
}
} // namespace

namespace {
cl::opt<std::string> runPlan(cl::Positional, cl::Required, cl::desc("<plan file>"), cl::sub(runCmd));
cl::list<std::string> runInputs("input", cl::desc("A graph input as a NumPy file (batch on dim 0)"),
                                cl::value_desc("NAME=FILE.npy"), cl::sub(runCmd));
cl::opt<std::string> runOutput("output", cl::Required,
                               cl::desc("Folder for the outputs (<output name>.npy)"),
                               cl::value_desc("DIR"), cl::sub(runCmd));
cl::opt<int> runRanks("ranks", cl::desc("Ranks (threads); must equal the plan's rank count"),
                      cl::init(0), cl::sub(runCmd));
cl::opt<std::string> runModel("model", cl::desc("The model file (default: the path in the plan)"),
                              cl::value_desc("MODEL"), cl::sub(runCmd));
cl::opt<bool> runQuiet("quiet", cl::desc("No summary line"), cl::sub(runCmd));
cl::opt<std::string> runDevice("device",
                               cl::desc("Where ranks compute: auto (GPU ranks of the plan on CUDA when this "
                                        "build and host have it, else the CPU), cpu (every rank), cuda (the "
                                        "plan's GPU ranks on CUDA, or an error). Default: $HETPLAN_DEVICE, "
                                        "else auto"),
                               cl::value_desc("auto|cpu|cuda"), cl::sub(runCmd));

/// --device, else HETPLAN_DEVICE (a test suite pins its runs to the CPU on
/// a GPU host with it), else auto.
hetplan::runtime::DeviceChoice deviceChoice() {
  if (runDevice.getNumOccurrences()) return hetplan::runtime::parseDeviceChoice(runDevice);
  const char *env = std::getenv("HETPLAN_DEVICE");
  return hetplan::runtime::parseDeviceChoice(env && *env ? env : "auto");
}
cl::opt<std::string> runTrace("trace",
                              cl::desc("Write the measured step (the last, for training) as a "
                                       "Chrome/Perfetto trace: a thread per rank, an event per "
                                       "instruction (chrome://tracing, ui.perfetto.dev)"),
                              cl::value_desc("OUT.json"), cl::sub(runCmd));
cl::opt<bool> runJson("json",
                      cl::desc("Print the result as one JSON object (outputs with their files, "
                               "dtypes and shapes; losses of a training plan) instead of text"),
                      cl::sub(runCmd));
cl::opt<std::string> runProfile("profile",
                                cl::desc("Time every node and write a measured profile (the format "
                                         "`hetplan compile --profile` reads; one file per device type: "
                                         "OUT.json, OUT.<type>.json) and print predicted vs measured"),
                                cl::value_desc("OUT.json"), cl::sub(runCmd));

cl::opt<std::string> runLabels("labels",
                               cl::desc("Training plans: class indices (int64) for the loss output, "
                                        "shaped like it without its last axis (softmax cross-entropy); "
                                        "or float targets in [0, 1] shaped like it (binary cross-entropy "
                                        "of a Sigmoid's output)"),
                               cl::value_desc("FILE.npy"), cl::sub(runCmd));
cl::opt<int> runSteps("steps",
                      cl::desc("Training plans: optimizer steps to run on the batch. Inference plans: times "
                               "to run the step (the outputs, --profile and --trace are the last run's)"),
                      cl::init(1), cl::sub(runCmd));
cl::opt<double> runLr("lr", cl::desc("Training plans: the optimizer's learning rate"), cl::init(1e-3),
                      cl::sub(runCmd));
cl::opt<double> runAdamEps("adam-eps", cl::desc("Training plans of adam and adamw: epsilon"), cl::init(1e-8),
                           cl::sub(runCmd));
cl::opt<double> runMomentum("momentum", cl::desc("Training plans of momentum: the momentum factor"),
                            cl::init(0.9), cl::sub(runCmd));
cl::opt<double> runWeightDecay("weight-decay",
                               cl::desc("Training plans: weight decay (L2, added to the gradient; "
                                        "adamw: decoupled)"),
                               cl::init(0.0), cl::sub(runCmd));
cl::opt<std::string> runLossOutput("loss-output",
                                   cl::desc("Training plans: the graph output the softmax "
                                            "cross-entropy is computed on (default: the first)"),
                                   cl::value_desc("NAME"), cl::sub(runCmd));
cl::list<std::string> runFreeze("freeze",
                                cl::desc("Training plans: do not update parameters whose name matches "
                                         "this regular expression (e.g. rotary_emb); repeatable"),
                                cl::value_desc("REGEX"), cl::sub(runCmd));
cl::opt<std::string> runRebalance(
    "rebalance", cl::ValueOptional,
    cl::desc("Training plans: measure each data-parallel worker's compute time per step and move "
             "samples between a stage's workers, to shares proportional to the measured speeds, when "
             "its slowest worker is more than THRESHOLD (default 0.1) slower than that optimum for "
             "--rebalance-steps steps (stragglers; docs/runtime.md)"),
    cl::value_desc("THRESHOLD"), cl::sub(runCmd));
cl::opt<int> runRebalanceSteps("rebalance-steps",
                               cl::desc("Training plans with --rebalance: consecutive slow steps before "
                                        "shares move (default 2)"),
                               cl::init(2), cl::sub(runCmd));
cl::opt<std::string> runTestSlowRank("test-slow-rank", cl::Hidden,
                                     cl::desc("Test only: rank R sleeps FRACTION times what each of its "
                                              "FORWARD and BACKWARD instructions took (a straggler)"),
                                     cl::value_desc("R:FRACTION"), cl::sub(runCmd));
cl::opt<std::string> runSaveModel("save-model",
                                  cl::desc("Training plans: write the trained model (ONNX, weights inline)"),
                                  cl::value_desc("OUT.onnx"), cl::sub(runCmd));

/// A file name for an output: path separators and odd characters become '_'.
std::string fileNameFor(const std::string &name) {
  std::string out;
  for (char c : name)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (out.empty() || out[0] == '.') out = "_" + out;
  return out;
}

using StepTiming = hetplan::runtime::PlanExecutor::StepTiming;

/// The timing record of this run when --profile is given (every rank's in
/// threads mode; under MPI rank 0 gathers them), else null: without it
/// PlanExecutor reads no clock.
/// What a training run measured for --json: each step's wall seconds and
/// every move of shares (--rebalance).
struct TrainRecord {
  std::vector<double> stepSeconds;
  std::vector<hetplan::runtime::RebalanceEvent> rebalances;
};
TrainRecord &trainRecord() {
  static TrainRecord record;
  return record;
}

/// --rebalance's threshold; throws one line on a bad value.
double rebalanceThreshold() {
  if (runRebalance.getValue().empty()) return 0.1;
  char *end = nullptr;
  double v = std::strtod(runRebalance.c_str(), &end);
  if (*end || !std::isfinite(v) || v <= 0 || v > 10)
    throw std::runtime_error("--rebalance=" + runRebalance + ": the threshold must be a number in (0, 10]");
  return v;
}

llvm::json::Value rebalancesJson() {
  llvm::json::Array out;
  for (const auto &e : trainRecord().rebalances) {
    llvm::json::Array oldS, newS, speeds, seconds;
    for (int64_t v : e.oldShares) oldS.push_back(v);
    for (int64_t v : e.newShares) newS.push_back(v);
    for (double v : e.speeds) speeds.push_back(v);
    for (double v : e.seconds) seconds.push_back(v);
    llvm::json::Object o{{"after_step", e.step},         {"stage", int64_t(e.stage)},
                         {"old_shares", std::move(oldS)}, {"new_shares", std::move(newS)},
                         {"samples_per_s", std::move(speeds)}, {"compute_s", std::move(seconds)},
                         {"moved", e.refused.empty()}};
    if (!e.refused.empty()) o["refused"] = e.refused;
    out.push_back(std::move(o));
  }
  return out;
}

StepTiming *profileTiming() {
  static StepTiming timing;
  return runProfile.empty() && runTrace.empty() ? nullptr : &timing;
}

//===-- Devices: where each rank computes (RankBackend.h) ------------------===//

/// placeCudaRanks's `refused` (RunPlan.h): a stage with a node the CUDA
/// executor cannot run stays on the CPU under --device auto (one note on
/// stderr) and is an error under --device cuda.
void cudaRefused(int r, const std::vector<std::string> &problems) {
  std::string why = "rank " + std::to_string(r) + ": the CUDA executor cannot run its stage: " + problems.front() +
                    (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "");
  if (deviceChoice() == hetplan::runtime::DeviceChoice::Cuda)
    throw std::runtime_error(why + "; --device cpu runs it on CPUs");
  llvm::errs() << "hetplan: note: " << why << "; it runs on the CPU\n";
}

void reportPlacement(const hetplan::runtime::Placement &placement) {
  // Only when a GPU is in play: CPU runs print what they always did.
  bool any = false;
  for (bool c : placement.cuda) any = any || c;
  if (any && !runQuiet && !runJson) llvm::outs() << "devices: " << placement.summary << "\n";
}

#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
/// How an MPI process places its rank (placeMpiRank, RunPlan.h): as the
/// threads' ranks are, and rank 0 prints the job's placement.
hetplan::runtime::MpiRankPlacing mpiPlacing() {
  hetplan::runtime::MpiRankPlacing placing;
  placing.device = deviceChoice();
  placing.refused = cudaRefused;
  placing.placed = reportPlacement;
  return placing;
}
#endif

//===-- MPI: one process per rank (`mpirun -np N hetplan run ...`) -------===//
// When an MPI launcher started this process, it runs only its own rank's
// program over MpiCommunicator (every process reads the .npy inputs
// itself); the ranks then send their pieces of the graph outputs to rank 0,
// which assembles them (runPlanRank, RunPlan.h) and alone writes DIR.
// Returns -1 when this process should write `outputs`, else an exit code.
int runMpiRanks(hetplan::runtime::PlanExecutor &exec,
                const std::map<std::string, hetplan::runtime::Tensor> &inputs,
                std::map<std::string, hetplan::runtime::Tensor> &outputs) {
  using namespace hetplan::runtime;
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
  exec.checkInputs(inputs); // the same on every rank: all fail alike
  MpiCommunicator comm;
  if (comm.size() != exec.ranks() || (runRanks != 0 && runRanks != comm.size())) {
    std::string msg = runPlan + ": the plan has " + std::to_string(exec.ranks()) + " ranks, the MPI job has " +
                      std::to_string(comm.size()) + " processes";
    if (runRanks != 0) msg += ", --ranks is " + std::to_string(runRanks);
    return comm.rank() == 0 ? fail(msg) : 1;
  }
  try {
    outputs = runPlanRank(exec, comm, inputs, mpiPlacing(), profileTiming());
    if (comm.rank() != 0) {
      comm.flush();
      return 0;
    }
    return -1;
  } catch (const std::exception &e) {
    // The other ranks may be blocked in a receive: end the whole job.
    fail(rankPrefixed(comm.rank(), e.what()));
    comm.abort(e.what());
  }
#else
  (void)exec, (void)inputs, (void)outputs;
  return fail("started by an MPI launcher, but this hetplan was built without MPI "
              "(install libopenmpi-dev and reconfigure)");
#endif
}
//===-- end of MPI ---------------------------------------------------------===//
} // namespace

//===-- hetplan run --profile: measured per-node times ---------------------===//
namespace {

/// Fits time = fixed + per_sample * samples for one node from (samples per
/// run, seconds per run) points, one per rank that ran it. One batch size:
/// fixed = 0, per_sample = total time / total samples. Several: least
/// squares, falling back to the one-size fit when a coefficient would be
/// negative (timer noise on small kernels).
std::pair<double, double> fitNode(const std::vector<std::pair<double, double>> &points) {
  double sumT = 0, sumS = 0;
  std::set<double> sizes;
  for (auto [s, t] : points) { sumS += s; sumT += t; sizes.insert(s); }
  double through0 = sumS > 0 ? sumT / sumS : 0;
  if (sizes.size() < 2) return {0.0, through0};
  double n = double(points.size()), mS = sumS / n, mT = sumT / n, sxx = 0, sxy = 0;
  for (auto [s, t] : points) { sxx += (s - mS) * (s - mS); sxy += (s - mS) * (t - mT); }
  double p = sxy / sxx, f = mT - p * mS;
  if (p < 0 || f < 0) return {0.0, through0};
  return {f, p};
}

/// Writes the measured profile(s) (docs/runtime.md, "Measured profiles") and
/// prints the predicted-vs-measured report. Throws on a write error.
void writeMeasuredProfile(const hetplan::runtime::PlanExecutor &exec, const StepTiming &timing,
                          const std::string &outPath) {
  if (timing.ranks.empty()) // nothing was timed
    throw std::runtime_error("--profile: no rank was timed");
  const auto &plan = exec.plan();
  auto typeOf = [&](uint32_t rank) -> std::string {
    for (const auto &d : plan.cluster().devices())
      if (d.rank() == rank) return d.type();
    return "CPU";
  };
  // Device types in rank order; per type, per node name, (samples, seconds)
  // per run. Nodes that share a name (unnamed ONNX nodes go by their op
  // type) pool their points: the entry is their mean, which the cost model
  // then applies to each of them.
  std::vector<std::string> types;
  std::map<std::string, std::map<std::string, std::vector<std::pair<double, double>>>> points;
  auto nameOf = [&](size_t node) {
    return node < size_t(plan.model().node_names_size()) ? plan.model().node_names(int(node))
                                                         : std::to_string(node);
  };
  for (uint32_t r = 0; r < timing.ranks.size(); ++r) {
    const auto &rt = timing.ranks[r];
    if (rt.nodeSeconds.empty()) continue; // idle rank
    const auto &rank = plan.ranks(int(r));
    int64_t n = plan.stages(int(rank.stage())).workers(int(rank.worker())).samples();
    std::string type = typeOf(r);
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
    for (size_t i = 0; i < rt.nodeSeconds.size(); ++i)
      if (rt.nodeSamples[i] > 0 && n > 0) {
        double runs = double(rt.nodeSamples[i]) / double(n);
        points[type][nameOf(i)].push_back({double(n), rt.nodeSeconds[i] / runs});
      }
  }
  if (types.empty()) throw std::runtime_error("--profile: no rank was timed");
  // Each rank's speed: what the fitted op times predict for its work over
  // the time its FORWARD/BACKWARD instructions took (a straggler's extra
  // time is outside its kernels' fit, which pools every rank of its type),
  // relative to the fastest rank of its type.
  std::vector<double> compute = runtime::rankComputeSeconds(plan, timing);
  std::string speedLine;
  std::vector<std::string> files;
  for (size_t k = 0; k < types.size(); ++k) {
    llvm::json::Object ops;
    std::map<std::string, std::pair<double, double>> fits;
    for (const auto &[name, pts] : points[types[k]]) {
      auto [f, p] = fitNode(pts);
      fits[name] = {f, p};
      ops[name] = llvm::json::Object{{"fixed", f}, {"per_sample", p}};
    }
    std::map<uint32_t, double> ratio;
    for (uint32_t r = 0; r < timing.ranks.size(); ++r) {
      const auto &rt = timing.ranks[r];
      if (rt.nodeSeconds.empty() || typeOf(r) != types[k] || r >= compute.size() || !(compute[r] > 0))
        continue;
      const auto &rank = plan.ranks(int(r));
      int64_t n = plan.stages(int(rank.stage())).workers(int(rank.worker())).samples();
      double predicted = 0;
      for (size_t i = 0; i < rt.nodeSeconds.size(); ++i)
        if (rt.nodeSamples[i] > 0 && n > 0) {
          auto [f, p] = fits[nameOf(i)];
          predicted += double(rt.nodeSamples[i]) / double(n) * (f + p * double(n));
        }
      if (predicted > 0) ratio[r] = predicted / compute[r];
    }
    double fastest = 0;
    for (auto [r, q] : ratio) fastest = std::max(fastest, q);
    llvm::json::Object ranks;
    for (auto [r, q] : ratio) {
      double speed = std::round(q / fastest * 1000) / 1000; // 3 digits: the timer's noise is larger
      ranks[std::to_string(r)] = speed;
      speedLine += llvm::formatv(" {0} {1:F2}", r, speed).str();
    }
    llvm::json::Object docObject{
        {"device", types[k]}, {"dtype", plan.settings().dtype()}, {"ops", std::move(ops)}};
    if (!ranks.empty()) docObject["ranks"] = std::move(ranks);
    llvm::json::Value doc = std::move(docObject);
    std::string path = outPath;
    if (k > 0) {
      llvm::StringRef base(outPath);
      base.consume_back(".json");
      path = (base + "." + fileNameFor(types[k]) + ".json").str();
    }
    std::string error;
    if (!runtime::writeFileAtomically(path, llvm::formatv("{0:2}", doc).str() + "\n", error))
      throw std::runtime_error(error);
    files.push_back(path + " (" + types[k] + ")");
  }
  auto &o = llvm::outs();
  o << "profile: wrote";
  for (const auto &f : files) o << " " << f;
  o << "\n";
  if (!speedLine.empty())
    o << "profile: measured speed per rank (of its type's fastest; hetplan compile --profile prices "
         "each rank so):" << speedLine << "\n";
  o << llvm::format("%-22s %14s %14s %10s\n", "predicted vs measured", "predicted_s", "measured_s",
                    "meas/pred");
  auto row = [&](const std::string &what, double pred, double meas) {
    o << llvm::format("%-22s %14.6g %14.6g ", what.c_str(), pred, meas);
    if (pred > 0) o << llvm::format("%10.3f\n", meas / pred);
    else o << llvm::format("%10s\n", "-");
  };
  row("step (wall)", plan.prediction().step_time_s(), timing.wallSeconds);
  uint32_t mbs = plan.settings().micro_batches();
  for (int s = 0; s < plan.stages_size(); ++s) {
    const auto &st = plan.stages(s);
    double sum = 0;
    for (uint32_t mb = 0; mb < mbs; ++mb) {
      double slowest = 0; // the stage's slowest worker, like forward_s
      for (const auto &w : st.workers())
        for (uint32_t r : w.ranks())
          if (r < timing.ranks.size() && mb < timing.ranks[r].forwardSeconds.size())
            slowest = std::max(slowest, timing.ranks[r].forwardSeconds[mb]);
      sum += slowest;
    }
    row("stage " + std::to_string(s) + " forward/mb", st.forward_s(), mbs ? sum / mbs : 0);
  }
}
//===-- end of --profile ---------------------------------------------------===//
} // namespace

namespace {
/// The optimizer flags that do not fit the plan's optimizer (--momentum
/// for momentum, --adam-eps for adam and adamw), or a bad --momentum; ""
/// when all is well.
std::string optimizerFlagError(hetplan::runtime::Optimizer kind) {
  using hetplan::runtime::Optimizer;
  std::string name = hetplan::runtime::optimizerName(kind);
  if (runMomentum.getNumOccurrences() && kind != Optimizer::Momentum)
    return "--momentum is for plans compiled with --optimizer momentum; " + runPlan + " uses " + name;
  if (!std::isfinite(runMomentum) || runMomentum < 0 || runMomentum >= 1)
    return "--momentum must be a number in [0, 1), not " + std::to_string(runMomentum);
  if (runAdamEps.getNumOccurrences() && kind != Optimizer::Adam && kind != Optimizer::AdamW)
    return "--adam-eps is for plans compiled with --optimizer adam or adamw; " + runPlan + " uses " + name;
  return "";
}

/// Training plans: `--steps` steps on threads or MPI ranks (trainPlanSteps,
/// RunPlan.h). Fills `losses` and `params` (the trained parameters) on the
/// process that writes; returns -1 there, else an exit code.
int trainSteps(hetplan::runtime::PlanExecutor &exec,
               const std::map<std::string, hetplan::runtime::Tensor> &inputs,
               const hetplan::runtime::Tensor &labels, std::vector<double> &losses,
               std::map<std::string, hetplan::runtime::Tensor> &params) {
  using namespace hetplan::runtime;
  TrainPlanOptions train;
  train.steps = runSteps;
  train.train.lr = runLr;
  train.train.weightDecay = runWeightDecay;
  train.train.eps = runAdamEps;
  train.train.momentum = runMomentum;
  train.train.freeze.assign(runFreeze.begin(), runFreeze.end());
  train.train.lossOutput = runLossOutput;
  train.timing = profileTiming();
  train.rebalance = runRebalance.getNumOccurrences() > 0;
  train.rebalanceOptions.threshold = rebalanceThreshold();
  train.rebalanceOptions.steps = runRebalanceSteps;
  train.onRebalance = [](const RebalanceEvent &e) {
    llvm::errs() << e.describe() << "\n";
    llvm::errs().flush();
  };
  train.onStep = [&](int step, double loss) {
    if (!runQuiet && !runJson)
      llvm::outs() << llvm::format("step %d/%d: loss %.6f\n", step, int(runSteps), loss);
    llvm::outs().flush();
  };
  if (!launchedByMpi()) {
    TrainPlanResult result = trainPlanSteps(exec, inputs, labels, train);
    trainRecord() = {result.stepSeconds, result.rebalances};
    losses = std::move(result.losses);
    params = std::move(result.parameters);
    // --profile: what the training memory options measured in the last
    // step, per rank (docs/runtime.md, "Training memory").
    if (!runProfile.empty()) {
      const auto &settings = exec.plan().settings();
      llvm::outs() << "memory (last step, bytes; zero_stage " << settings.zero_stage() << ", offload "
                   << (settings.offload_optimizer() ? "on" : "off") << ")\n"
                   << "rank  stage  recompute  peak_stashed_activations  optimizer_offload  zero3_gathered\n";
      for (size_t r = 0; r < result.states.size(); ++r) {
        if (isIdleRank(exec.plan(), uint32_t(r))) continue;
        const auto &st = result.states[r].stats;
        uint32_t stage = exec.plan().ranks(int(r)).stage();
        llvm::outs() << llvm::format("%4zu  %5u  %9s  %24llu  %17llu  %14llu\n", r, stage,
                                     exec.plan().stages(int(stage)).recompute() ? "yes" : "no",
                                     (unsigned long long)st.peakStashedBytes, (unsigned long long)st.offloadBytes,
                                     (unsigned long long)st.gatheredParameterBytes);
      }
    }
    return -1;
  }
#if defined(HETPLAN_HAVE_MPI) && HETPLAN_HAVE_MPI
  exec.checkInputs(inputs);
  MpiCommunicator comm;
  if (comm.size() != exec.ranks())
    return comm.rank() == 0 ? fail(runPlan + ": the plan has " + std::to_string(exec.ranks()) +
                                   " ranks, the MPI job has " + std::to_string(comm.size()) + " processes")
                            : 1;
  try {
    train.gatherParameters = !runSaveModel.empty();
    train.placing = mpiPlacing();
    TrainPlanResult result = trainPlanSteps(exec, comm, inputs, labels, train);
    trainRecord() = {result.stepSeconds, result.rebalances};
    losses = std::move(result.losses);
    params = std::move(result.parameters);
    comm.flush();
    return comm.rank() == 0 ? -1 : 0;
  } catch (const std::exception &e) {
    fail(rankPrefixed(comm.rank(), e.what()));
    comm.abort(e.what());
    return 1;
  }
#endif
  return fail("started by an MPI launcher, but this hetplan was built without MPI");
}
} // namespace

int runRun() {
  using namespace hetplan::runtime;
  std::vector<std::string> written; // temporary files, removed on failure
  if (!runTrace.empty() && launchedByMpi())
    return fail("--trace times the ranks of one process: run without mpirun");
  try {
    DeviceChoice device = deviceChoice(); // a bad value fails before loading
    auto exec = PlanExecutor::load(runPlan, runModel);
    if (!launchedByMpi() && runRanks != 0 && runRanks != exec->ranks())
      return fail(runPlan + ": the plan has " + std::to_string(exec->ranks()) + " ranks, --ranks is " +
                  std::to_string(runRanks));
    if (!launchedByMpi()) { // threads: CUDA ranks share this host's GPUs
      Placement placement = placeRanks(exec->plan(), device, hostCudaDevices(), false);
      placeCudaRanks(*exec, placement, -1, true, cudaRefused);
      reportPlacement(placement);
    }
    if (!runTestSlowRank.empty()) {
      auto [rank, fraction] = parseSlowRank(runTestSlowRank, exec->ranks());
      exec->setTestSlowdown(rank, fraction);
    }
    if (runRebalance.getNumOccurrences() && !exec->training())
      return fail("--rebalance is for training plans (shares move between steps); " + runPlan +
                  " is an inference plan");
    if (runRebalanceSteps < 1) return fail("--rebalance-steps must be at least 1");
    rebalanceThreshold(); // a bad value fails before anything runs
    std::map<std::string, Tensor> inputs;
    for (const std::string &arg : runInputs) {
      size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        return fail("--input " + arg + ": expected NAME=FILE.npy");
      std::string name = arg.substr(0, eq);
      if (inputs.count(name)) return fail("--input " + name + " is given twice");
      Tensor t = readNpy(arg.substr(eq + 1));
      inputs[name] = std::move(t);
    }
    std::map<std::string, Tensor> outputs;
    std::map<std::string, Tensor> trained;
    if (runSteps < 1) return fail("--steps must be at least 1, not " + std::to_string(runSteps));
    if (exec->training()) {
      if (runLabels.empty())
        return fail(runPlan + " is a training plan: give the labels with --labels FILE.npy (class "
                              "indices for the output the loss is computed on)");
      // NaN or a negative rate would silently turn every weight into NaN.
      auto positive = [](double v) { return std::isfinite(v) && v > 0; };
      if (!positive(runLr)) return fail("--lr must be a finite number > 0, not " + std::to_string(runLr));
      if (!positive(runAdamEps))
        return fail("--adam-eps must be a finite number > 0, not " + std::to_string(runAdamEps));
      if (!std::isfinite(runWeightDecay) || runWeightDecay < 0)
        return fail("--weight-decay must be a finite number >= 0, not " + std::to_string(runWeightDecay));
      if (std::string bad = optimizerFlagError(exec->optimizer()); !bad.empty()) return fail(bad);
      Tensor labels = readNpy(runLabels);
      std::vector<double> losses;
      if (int rc = trainSteps(*exec, inputs, labels, losses, trained); rc >= 0) return rc;
      Tensor t(DType::Float64, {int64_t(losses.size())});
      std::copy(losses.begin(), losses.end(), t.data<double>());
      outputs["loss"] = std::move(t);
    } else if (!runLabels.empty() || !runSaveModel.empty()) {
      return fail(runPlan + " is an inference plan: --labels and --save-model are for training plans");
    } else if (launchedByMpi()) { // one process per rank: see runMpiRanks
      if (runSteps > 1) return fail("--steps above 1 repeats an inference step on threads only, not under mpirun");
      if (int rc = runMpiRanks(*exec, inputs, outputs); rc >= 0) return rc;
    } else {
      // Earlier runs warm up (kernel primitives, packed weights); the last one is timed.
      for (int step = 1; step <= runSteps; ++step)
        outputs = exec->run(inputs, step == runSteps ? profileTiming() : nullptr);
    }

    if (auto ec = llvm::sys::fs::create_directories(runOutput))
      return fail(runOutput + ": cannot create: " + ec.message());
    // Write every output to a temporary name first, then rename them all:
    // a failure leaves no output files.
    std::vector<std::pair<std::string, std::string>> renames;
    std::set<std::string> used;
    for (const auto &[name, t] : outputs) {
      std::string file = fileNameFor(name);
      if (!used.insert(file).second) return fail("outputs '" + name + "' and another map to the same file " + file);
      llvm::SmallString<256> final(runOutput.getValue());
      llvm::sys::path::append(final, file + ".npy");
      std::string refuse = replaceableError(std::string(final));
      if (!refuse.empty()) return fail(refuse);
      std::string tmp = std::string(final) + ".tmp-" + std::to_string(::getpid());
      written.push_back(tmp);
      writeNpy(tmp, t);
      renames.push_back({tmp, std::string(final)});
    }
    if (!runSaveModel.empty()) saveModel(exec->model(), trained, runSaveModel); // atomic itself
    for (const auto &[tmp, final] : renames)
      if (std::rename(tmp.c_str(), final.c_str()) != 0)
        throw std::runtime_error(final + ": cannot write");
    written.clear();
    if (StepTiming *timing = profileTiming(); timing && !runProfile.empty())
      writeMeasuredProfile(*exec, *timing, runProfile);
    if (StepTiming *timing = profileTiming(); timing && !runTrace.empty()) {
      std::vector<TraceSpan> spans;
      double first = -1;
      for (size_t r = 0; r < timing->ranks.size(); ++r)
        for (auto [a, b] : timing->ranks[r].instructionSpans)
          if (first < 0 || a < first) first = a;
      for (size_t r = 0; r < timing->ranks.size(); ++r)
        for (auto [i, span] : llvm::enumerate(timing->ranks[r].instructionSpans))
          spans.push_back({uint32_t(r), uint32_t(i), span.first - first, span.second - first});
      std::string error;
      if (!writeTrace(exec->plan(), spans, runTrace, error)) throw std::runtime_error(error);
    }
    if (runJson) {
      llvm::json::Array outs;
      for (const auto &[name, t] : outputs) {
        llvm::json::Array shape;
        for (int64_t d : t.shape()) shape.push_back(d);
        llvm::SmallString<256> file(runOutput.getValue());
        llvm::sys::path::append(file, fileNameFor(name) + ".npy");
        outs.push_back(llvm::json::Object{{"name", name},
                                          {"file", std::string(file)},
                                          {"dtype", dtypeName(t.dtype())},
                                          {"shape", std::move(shape)}});
      }
      llvm::json::Object result{{"plan", std::string(runPlan)},
                                {"ranks", int64_t(exec->ranks())},
                                {"stages", int64_t(exec->plan().stages_size())},
                                {"micro_batches", int64_t(exec->plan().settings().micro_batches())},
                                {"mode", exec->plan().settings().mode()},
                                {"outputs", std::move(outs)}};
      if (exec->training()) {
        auto it = outputs.find("loss");
        llvm::json::Array losses;
        if (it != outputs.end())
          for (int64_t i = 0; i < it->second.numel(); ++i) losses.push_back(it->second.data<double>()[i]);
        result["losses"] = std::move(losses);
        if (!runSaveModel.empty()) result["trained_model"] = std::string(runSaveModel);
        llvm::json::Array stepSeconds;
        for (double v : trainRecord().stepSeconds) stepSeconds.push_back(v);
        result["step_seconds"] = std::move(stepSeconds);
        if (runRebalance.getNumOccurrences()) result["rebalances"] = rebalancesJson();
      }
      llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(result))) << "\n";
    } else if (!runQuiet) {
      llvm::outs() << "ran " << runPlan << " on " << exec->ranks() << " ranks ("
                   << exec->plan().stages_size() << " stage(s), " << exec->plan().settings().micro_batches()
                   << " micro-batch(es)); wrote";
      for (const auto &[name, t] : outputs)
        llvm::outs() << " " << fileNameFor(name) << ".npy " << t.describe();
      llvm::outs() << " to " << runOutput;
      if (!runSaveModel.empty()) llvm::outs() << "; trained model " << runSaveModel;
      llvm::outs() << "\n";
    }
    return 0;
  } catch (const std::exception &e) {
    for (const auto &f : written) std::remove(f.c_str());
    return fail(e.what());
  }
}

} // namespace hetplan::tools
