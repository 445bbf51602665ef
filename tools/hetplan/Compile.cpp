//===- Compile.cpp - hetplan compile and hetplan explain ------------------===//
//
//   hetplan compile MODEL --cluster SPEC|FILE --mode train|infer --batch N
//                   [--seq L] [--shape INPUT=DIMS]... [--dim NAME=VALUE,...]
//                   [--batch-axis INPUT=AXIS,...] [--dtype fp16]
//                   [--strategy hetplan|dp-even|pp-even|homogeneous]
//                   [--pin pp=4,dp=4,mb=8] [--layout FILE] [--schedule 1f1b|gpipe]
//                   [--grad-dtype fp32|fp16|bf16]
//                   [--json] -o PLAN
//   hetplan explain PLAN [--timeline OUT.svg] [--trace OUT.json] [--html OUT.html]
//
//===----------------------------------------------------------------------===//

#include "tools/hetplan/Commands.h"
#include "tools/hetplan/PickDevices.h"
#include "tools/hetplan/Baselines.h"

#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/Trace.h"
#include "passes/cluster/Cluster.h"
#include "passes/planner/Baselines.h"
#include "passes/planner/ModelPipeline.h"
#include "passes/planner/PlanExport.h"
#include "passes/planner/Planner.h"
#include "passes/planner/ServePlanner.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <sstream>

namespace cl = llvm::cl;

namespace hetplan::tools {

cl::SubCommand compileCmd("compile",
                          "Plan a model on a cluster and write the plan file");
cl::SubCommand explainCmd("explain", "Describe a plan file for people");

namespace {

/// The model's path as the plan records it: relative to the plan file's
/// folder, so a plan and its model move together and `hetplan run` finds the
/// model from any working directory (the runtime resolves it the same way).
/// Absolute when there is no plan file or the two share no folder.
std::string modelPathFromPlan(llvm::StringRef model, llvm::StringRef planFile) {
  llvm::SmallString<256> m(model), dir(planFile.empty() ? "." : planFile);
  if (llvm::sys::fs::make_absolute(m) || llvm::sys::fs::make_absolute(dir))
    return model.str();
  llvm::sys::path::remove_dots(m, true);
  llvm::sys::path::remove_dots(dir, true);
  if (planFile.empty())
    return std::string(m);
  dir = llvm::sys::path::parent_path(dir);
  llvm::SmallVector<llvm::StringRef> mc(llvm::sys::path::begin(m), llvm::sys::path::end(m));
  llvm::SmallVector<llvm::StringRef> dc(llvm::sys::path::begin(dir), llvm::sys::path::end(dir));
  size_t common = 0;
  while (common < mc.size() && common < dc.size() && mc[common] == dc[common])
    ++common;
  if (common <= 1) // only the root in common
    return std::string(m);
  llvm::SmallString<256> rel;
  for (size_t i = common; i < dc.size(); ++i)
    llvm::sys::path::append(rel, "..");
  for (size_t i = common; i < mc.size(); ++i)
    llvm::sys::path::append(rel, mc[i]);
  return std::string(rel);
}

cl::opt<std::string> model(cl::Positional, cl::Required,
                           cl::desc("<model.onnx|.onnxtext|.mlir>"), cl::sub(compileCmd));
cl::opt<std::string> clusterArg("cluster", cl::Required,
                                cl::desc("Cluster: inline (4xA100-80G,12xT4) or a YAML/JSON file"),
                                cl::value_desc("SPEC|FILE"), cl::sub(compileCmd));
cl::opt<std::string> modeArg("mode",
                             cl::desc("train (forward, backward, Adam), infer, or serve (LLM "
                                      "serving: replicas, routing, KV cache; docs/serving.md)"),
                             cl::init("train"), cl::value_desc("train|infer|serve"),
                             cl::sub(compileCmd));
cl::opt<int64_t> batchArg("batch",
                          cl::desc("Samples per step (the global batch); required for train "
                                   "and infer"),
                          cl::init(0), cl::sub(compileCmd));
cl::opt<int64_t> seqArg("seq",
                        cl::desc("Sequence length: binds the first input dim named like a "
                                 "sequence that is not a past/total/cache length (others: "
                                 "--dim)"),
                        cl::init(0), cl::sub(compileCmd));
cl::list<std::string> shapeArgs("shape",
                                cl::desc("Bind an input's whole shape, INPUT=D0xD1x...; its "
                                         "batch axis (where the batch dim sits, the axis "
                                         "--batch-axis gives, or a dynamic unnamed dim 0) "
                                         "holds --batch"),
                                cl::value_desc("INPUT=DIMS"), cl::sub(compileCmd));
cl::list<std::string> dimArgs("dim",
                              cl::desc("Bind symbolic dims by name, NAME=VALUE[,NAME=VALUE] "
                                       "(e.g. past_sequence_length=0); repeatable"),
                              cl::value_desc("NAME=VALUE"), cl::CommaSeparated,
                              cl::sub(compileCmd));
cl::list<std::string> valueArgs("value",
                                cl::desc("Fix an integer scalar input's value, "
                                         "INPUT=VALUE[,INPUT=VALUE] (e.g. rate=16000): an If on "
                                         "it takes one branch; the plan records it and run "
                                         "refuses other values"),
                                cl::value_desc("INPUT=VALUE"), cl::CommaSeparated,
                                cl::sub(compileCmd));
cl::list<std::string> batchAxisArgs("batch-axis",
                                    cl::desc("Which axis of an input is the batch, "
                                             "INPUT=AXIS[,INPUT=AXIS] (e.g. h0=1), or "
                                             "INPUT=none; default: the dim named like batch, "
                                             "else the first input's leading dim"),
                                    cl::value_desc("INPUT=AXIS"), cl::CommaSeparated,
                                    cl::sub(compileCmd));
cl::opt<std::string> dtypeArg("dtype", cl::desc("Numeric format: fp32, tf32, fp16, bf16"),
                              cl::init("fp16"), cl::sub(compileCmd));
cl::opt<std::string> strategyArg(
    "strategy",
    cl::desc("hetplan (search), dp-even, pp-even or homogeneous (baselines)"),
    cl::init("hetplan"), cl::sub(compileCmd));
cl::opt<std::string> pinArg("pin", cl::desc("Evaluate this layout: pp=4,dp=4,mb=8[,tp=2] (mb: micro-batch count; or mbs: micro-batch size); serve: every replica pp=N[,tp=T]"),
                            cl::sub(compileCmd));
cl::opt<std::string> layoutArg(
    "layout",
    cl::desc("Price this exact layout (JSON: stages with their workers' ranks and last "
             "layer, micro-batches, tp, even or speed shares; or {\"layouts\": [...]} to "
             "price several and print one JSON line each)"),
    cl::value_desc("FILE"), cl::sub(compileCmd));
cl::opt<std::string> gradDtypeArg(
    "grad-dtype",
    cl::desc("Format of the gradients the data-parallel all-reduce moves (default: --dtype)"),
    cl::value_desc("fp32|fp16|bf16"), cl::sub(compileCmd));
cl::opt<std::string> recomputeArg(
    "recompute",
    cl::desc("Activation recomputation: never; auto (default: per stage, where a stage "
             "does not fit without it or where it lets memory-capped workers take "
             "larger shares and is faster); always (every stage)"),
    cl::value_desc("never|auto|always"), cl::init("auto"), cl::sub(compileCmd));
cl::opt<std::string> zeroArg(
    "zero",
    cl::desc("ZeRO stage over each pipeline stage's data-parallel workers: 0 (replicated), "
             "1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters); auto "
             "(default): the smallest that fits"),
    cl::value_desc("auto|0|1|2|3"), cl::init("auto"), cl::sub(compileCmd));
cl::opt<std::string> offloadArg(
    "offload",
    cl::desc("Optimizer state and step in host memory (ZeRO-Offload): never; auto "
             "(default: only when no layout fits without); always"),
    cl::value_desc("never|auto|always"), cl::init("auto"), cl::sub(compileCmd));
cl::opt<std::string> optimizerArg(
    "optimizer",
    cl::desc("Training optimizer, priced (state memory, step time) and recorded in the plan: sgd "
             "(no state), momentum (1 buffer), adam (default) or adamw (2 buffers)"),
    cl::value_desc("sgd|momentum|adam|adamw"), cl::init("adam"), cl::sub(compileCmd));
cl::opt<bool> sparseEmbeddingsArg(
    "sparse-embeddings",
    cl::desc("Training: embedding tables (weights read only by Gathers) take sparse row updates: "
             "a step's gradient is the rows it looked up, synced as rows, and only they are updated"),
    cl::sub(compileCmd));
cl::opt<bool> uncalibratedArg(
    "uncalibrated",
    cl::desc("Ignore the catalog's measured 'achieved' figures (the plain roofline "
             "defaults; for comparisons)"),
    cl::sub(compileCmd));
cl::opt<std::string> stackArg(
    "stack",
    cl::desc("Software stack to price for: hetplan (default), deepspeed-2021, megatron-lm, or "
             "one a cluster file defines; overrides the cluster file's 'stack:'"),
    cl::value_desc("name"), cl::sub(compileCmd));
cl::opt<std::string> scheduleArg("schedule", cl::desc("1f1b or gpipe"), cl::init("1f1b"),
                                 cl::sub(compileCmd));
cl::opt<bool> jsonArg("json", cl::desc("Print the summary as JSON"), cl::sub(compileCmd));
cl::opt<bool> missingWeights("allow-missing-weights",
                             cl::desc("Plan from shapes: external-data files may be absent"),
                             cl::sub(compileCmd));
cl::opt<std::string> outputArg("o", cl::desc("Plan file to write"), cl::value_desc("PLAN"),
                               cl::sub(compileCmd));
cl::opt<bool> quietArg("quiet", cl::desc("No progress messages"), cl::sub(compileCmd));
cl::list<std::string> profileArgs("profile",
                                  cl::desc("Measured op times (JSON, see docs/cost-model.md) "
                                           "that replace the roofline on their device type"),
                                  cl::value_desc("FILE"), cl::sub(compileCmd));

// --mode serve (docs/serving.md).
cl::opt<double> rateArg("rate", cl::desc("serve: requests per second to serve"),
                        cl::value_desc("REQ/S"), cl::init(0), cl::sub(compileCmd));
cl::opt<std::string> promptLenArg("prompt-len",
                                  cl::desc("serve: prompt tokens per request: N, or percentiles "
                                           "p50=500,p90=1500,p99=3000 (also min=, max=)"),
                                  cl::value_desc("N|pXX=N,..."), cl::sub(compileCmd));
cl::opt<std::string> outputLenArg("output-len",
                                  cl::desc("serve: tokens generated per request: N, or "
                                           "percentiles as --prompt-len"),
                                  cl::value_desc("N|pXX=N,..."), cl::sub(compileCmd));
cl::opt<std::string> workloadArg(
    "workload",
    cl::desc("serve: a request trace to replay: JSON lines {\"arrival_s\", \"prompt_tokens\", "
             "\"output_tokens\"} or CSV with those columns; --rate rescales its gaps"),
    cl::value_desc("FILE"), cl::sub(compileCmd));
cl::opt<std::string> arrivalsArg("arrivals",
                                 cl::desc("serve: poisson (default), or gamma (bursty: "
                                          "--burstiness sets the gaps' coefficient of variation)"),
                                 cl::value_desc("poisson|gamma"), cl::init("poisson"),
                                 cl::sub(compileCmd));
cl::opt<double> burstinessArg("burstiness",
                              cl::desc("serve --arrivals gamma: the gaps' coefficient of variation "
                                       "(1 is Poisson)"),
                              cl::value_desc("CV"), cl::init(2), cl::sub(compileCmd));
cl::opt<double> ttftArg("ttft-ms",
                        cl::desc("serve: time-to-first-token target, ms, at the 90th percentile"),
                        cl::init(0), cl::sub(compileCmd));
cl::opt<double> tpotArg("tpot-ms",
                        cl::desc("serve: time-per-output-token target, ms, at the 90th "
                                 "percentile"),
                        cl::init(0), cl::sub(compileCmd));
cl::opt<double> budgetArg("budget", cl::desc("serve, and train/infer with --pick-devices: the most "
                                             "to spend, $ per hour"),
                          cl::value_desc("$/h"), cl::init(0), cl::sub(compileCmd));
cl::opt<bool> pickDevicesArg(
    "pick-devices",
    cl::desc("serve: use the cheapest part of the cluster that meets the rate and targets; "
             "train/infer: the cheapest mix meeting --target-step-s or --target-samples-s "
             "(or the fastest within --budget, else the least $/step); "
             "a count written N? in an inline cluster (8xA100-80G?,16xL4?) means up to N, "
             "one without ? is used whole; in a cluster file every type is up to its count"),
    cl::sub(compileCmd));
cl::opt<double> targetStepArg("target-step-s",
                              cl::desc("train/infer --pick-devices: the longest step, seconds"),
                              cl::init(0), cl::sub(compileCmd));
cl::opt<double> pickTimeArg("pick-time-s",
                            cl::desc("train/infer --pick-devices: the most seconds to spend "
                                     "planning mixes (cheapest first)"),
                            cl::init(60), cl::sub(compileCmd));
cl::opt<double> targetSamplesArg("target-samples-s",
                                 cl::desc("train/infer --pick-devices: the fewest samples per "
                                          "second"),
                                 cl::init(0), cl::sub(compileCmd));
cl::opt<int64_t> maxBatchedTokensArg(
    "max-batched-tokens",
    cl::desc("serve: prompt tokens one prefill iteration takes at most (vLLM's "
             "max_num_batched_tokens; bounds the prefill batch and its workspace)"),
    cl::init(8192), cl::sub(compileCmd));
cl::opt<uint64_t> serveSeedArg("serve-seed",
                               cl::desc("serve: seed of the simulated Poisson arrivals"),
                               cl::init(1), cl::sub(compileCmd));

cl::opt<std::string> planArg(cl::Positional, cl::Required, cl::desc("<plan file>"),
                             cl::sub(explainCmd));
cl::opt<std::string> timelineArg("timeline",
                                 cl::desc("Also write an SVG timeline of one step"),
                                 cl::value_desc("OUT.svg"), cl::sub(explainCmd));
cl::opt<std::string> traceArg("trace",
                              cl::desc("Also write the predicted step as a Chrome/Perfetto trace "
                                       "(chrome://tracing, ui.perfetto.dev)"),
                              cl::value_desc("OUT.json"), cl::sub(explainCmd));
cl::opt<std::string> htmlArg("html",
                             cl::desc("Also write a self-contained HTML report of the plan"),
                             cl::value_desc("OUT.html"), cl::sub(explainCmd));
cl::opt<bool> explainJsonArg("json",
                             cl::desc("Print the plan's summary as JSON (what compile --json prints)"),
                             cl::sub(explainCmd));

std::string gib(double bytes) { return llvm::formatv("{0:F1}", bytes / double(1ull << 30)).str(); }

std::string fileSha256(llvm::StringRef path, uint64_t &size) {
  auto buffer = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buffer)
    return "";
  llvm::StringRef bytes = (*buffer)->getBuffer();
  size = bytes.size();
  // The runtime's (OpenSSL) SHA-256: the same digest `run` checks, 5x LLVM's.
  return runtime::sha256Hex(bytes.data(), bytes.size());
}

/// What every plan's summary starts with: the model, the cluster, the mode
/// and the format.
llvm::json::Object summaryHead(const plan::Plan &p) {
  return llvm::json::Object{{"model", p.model().path()},
                            {"graph", p.model().graph()},
                            {"parameters", p.model().parameters()},
                            {"layers", int64_t(p.model().layers_size())},
                            {"cluster", p.cluster().spec()},
                            {"devices", int64_t(p.cluster().devices_size())},
                            {"mode", p.settings().mode()},
                            {"dtype", p.settings().dtype()}};
}

llvm::json::Value summaryJson(const plan::Plan &p) {
  llvm::json::Array stages;
  for (const auto &s : p.stages()) {
    llvm::json::Array workers;
    for (const auto &w : s.workers()) {
      llvm::json::Array ranks;
      for (auto r : w.ranks())
        ranks.push_back(int64_t(r));
      workers.push_back(llvm::json::Object{{"ranks", std::move(ranks)},
                                           {"samples", w.samples()}});
    }
    stages.push_back(llvm::json::Object{
        {"index", int64_t(s.index())},
        {"first_layer", int64_t(s.first_layer())},
        {"last_layer", int64_t(s.last_layer())},
        {"first_layer_name", p.model().layers(s.first_layer()).name()},
        {"last_layer_name", p.model().layers(s.last_layer()).name()},
        {"tensor_parallel", int64_t(s.tensor_parallel())},
        {"recompute", s.recompute()},
        {"workers", std::move(workers)},
        {"forward_s", s.forward_s()},
        {"backward_s", s.backward_s()},
        {"gradient_allreduce_s", s.gradient_allreduce_s()},
        {"send_activation_s", s.send_activation_s()}});
  }
  llvm::json::Array memory;
  for (const auto &r : p.ranks())
    memory.push_back(llvm::json::Object{
        {"rank", int64_t(r.rank())},
        {"type", p.cluster().devices(r.rank()).type()},
        {"used", !r.program().empty()},
        {"peak_bytes", int64_t(r.memory().peak())},
        {"capacity_bytes", int64_t(r.memory().capacity())}});
  const auto &pr = p.prediction();
  if (p.has_serving()) {
    const auto &sv = p.serving();
    llvm::json::Array replicas;
    for (const auto &r : sv.replicas()) {
      llvm::json::Array stagesOf;
      for (const auto &st : r.stages()) {
        llvm::json::Array ranks;
        for (auto rank : st.ranks())
          ranks.push_back(int64_t(rank));
        stagesOf.push_back(llvm::json::Object{{"first_layer", int64_t(st.first_layer())},
                                              {"last_layer", int64_t(st.last_layer())},
                                              {"ranks", std::move(ranks)},
                                              {"weight_bytes", int64_t(st.weight_bytes())},
                                              {"kv_cache_bytes", int64_t(st.kv_cache_bytes())},
                                              {"peak_bytes", int64_t(st.peak_bytes())},
                                              {"capacity_bytes", int64_t(st.capacity_bytes())},
                                              {"device_type", st.device_type().empty()
                                                                  ? r.device_type()
                                                                  : st.device_type()},
                                              // What the planner may fill: memory_utilization of it.
                                              {"budget_bytes",
                                               int64_t(double(st.capacity_bytes()) *
                                                       sv.memory_utilization())}});
      }
      replicas.push_back(llvm::json::Object{{"device_type", r.device_type()},
                                            {"tensor_parallel", int64_t(r.tensor_parallel())},
                                            {"stages", std::move(stagesOf)},
                                            {"max_batch", int64_t(r.max_batch())},
                                            {"limited_by", r.limited_by()},
                                            {"share", r.share()},
                                            {"rate_rps", r.rate_rps()},
                                            {"capacity_rps", r.capacity_rps()},
                                            {"prefill_s", r.prefill_s()},
                                            {"decode_step_s", r.decode_step_s()},
                                            {"usd_per_hour", r.usd_per_hour()}});
    }
    const auto &sp = sv.prediction();
    llvm::json::Object summary = summaryHead(p);
    for (auto &[key, value] : llvm::json::Object{
        {"rate_rps", sv.rate_rps()},
        {"requested_rate_rps", sv.requested_rate_rps()},
        {"arrivals", sv.arrivals()},
        {"prompt_lengths", sv.prompt_lengths()},
        {"output_lengths", sv.output_lengths()},
        {"prompt_tokens", sv.prompt_tokens()},
        {"output_tokens", sv.output_tokens()},
        {"ttft_target_s", sv.ttft_target_s()},
        {"tpot_target_s", sv.tpot_target_s()},
        {"budget_usd_per_hour", sv.budget_usd_per_hour()},
        {"picked_devices", sv.picked_devices()},
        {"kv_cache_bytes_per_token", sv.kv_cache_bytes_per_token()},
        {"replicas", std::move(replicas)},
        {"usd_per_hour", sv.usd_per_hour()},
        {"usd_per_million_tokens", sv.usd_per_million_tokens()},
        {"unpriced_devices", int64_t(sv.unpriced_devices())},
        {"idle_devices", int64_t(sv.idle_devices())},
        {"capacity_rps", sp.capacity_rps()},
        {"requests_per_s", sp.requests_per_s()},
        {"output_tokens_per_s", sp.output_tokens_per_s()},
        {"ttft_s", llvm::json::Object{{"p50", sp.ttft_p50_s()},
                                      {"p90", sp.ttft_p90_s()},
                                      {"p99", sp.ttft_p99_s()}}},
        {"tpot_s", llvm::json::Object{{"p50", sp.tpot_p50_s()},
                                      {"p90", sp.tpot_p90_s()},
                                      {"p99", sp.tpot_p99_s()}}},
        {"e2e_s", llvm::json::Object{{"p50", sp.e2e_p50_s()},
                                     {"p90", sp.e2e_p90_s()},
                                     {"p99", sp.e2e_p99_s()}}},
        {"simulated_requests", int64_t(sp.simulated_requests())},
        {"baselines", baselinesJson(p)}})
      summary[key] = std::move(value);
    return summary;
  }
  llvm::json::Object summary = summaryHead(p);
  for (auto &[key, value] : llvm::json::Object{
      {"batch", p.settings().global_batch()},
      {"sequence", p.settings().sequence()},
      {"strategy", p.settings().strategy()},
      {"schedule", p.settings().schedule()},
      {"micro_batches", int64_t(p.settings().micro_batches())},
      {"optimizer", p.settings().optimizer()},
      {"zero_stage", int64_t(p.settings().zero_stage())},
      {"offload_optimizer", p.settings().offload_optimizer()},
      {"stages", std::move(stages)},
      {"memory", std::move(memory)},
      {"step_time_s", pr.step_time_s()},
      {"samples_per_s", pr.samples_per_s()},
      {"bubble_fraction", pr.bubble_fraction()},
      {"model_flops_utilization", pr.model_flops_utilization()},
      {"search_time_s", pr.search_time_s()},
      {"plans_evaluated", int64_t(pr.plans_evaluated())},
      {"baselines", baselinesJson(p)}})
    summary[key] = std::move(value);
  return summary;
}

void printSummary(const plan::Plan &p, llvm::raw_ostream &os) {
  const auto &s = p.settings();
  os << llvm::formatv("planned {0} ({1:F1} M parameters, {2} layers) for {3}, batch {4}",
                      p.model().graph(), double(p.model().parameters()) / 1e6,
                      p.model().layers_size(), s.mode() == "train" ? "training" : "inference",
                      s.global_batch());
  if (s.sequence())
    os << ", sequence " << s.sequence();
  os << ", " << s.dtype() << ", on " << p.cluster().spec() << " ("
     << p.cluster().devices_size() << " devices)\n";
  int64_t mbSize = s.global_batch() / std::max<int64_t>(1, s.micro_batches());
  os << llvm::formatv("  strategy {0}, {1} schedule, {2} stage(s), {3} micro-batch(es) of {4} "
                      "sample(s) (count mb={3}, size mbs={4})\n",
                      s.strategy(), s.schedule(), p.stages_size(), s.micro_batches(), mbSize);
  if (s.mode() == "train" && runtime::memorySaversText(p) != "none")
    os << "  memory savers: " << runtime::memorySaversText(p) << "\n";
  if (std::string tables = runtime::sparseEmbeddingsText(p); !tables.empty())
    os << "  embedding tables: " << tables << "\n";
  os << "  stage  devices                     layers                          tp  samples/worker       fwd+bwd ms  all-reduce ms\n";
  for (const auto &st : p.stages()) {
    std::map<std::string, int> types;
    std::string shares;
    for (const auto &w : st.workers()) {
      types[p.cluster().devices(w.ranks(0)).type()] += w.ranks_size();
      if (!shares.empty())
        shares += ",";
      shares += std::to_string(w.samples());
    }
    std::string devices;
    for (const auto &[t, n] : types)
      devices += (devices.empty() ? "" : " + ") + std::to_string(n) + "x " + t;
    if (shares.size() > 20)
      shares = shares.substr(0, 17) + "...";
    std::string layers = llvm::formatv("{0}-{1} ({2} .. {3})", st.first_layer(), st.last_layer(),
                                       p.model().layers(st.first_layer()).name(),
                                       p.model().layers(st.last_layer()).name())
                             .str();
    os << llvm::formatv("  {0,-5}  {1,-26}  {2,-30}  {3,-2}  {4,-20} {5,10:F2}  {6,13:F2}\n",
                        st.index(), devices, layers, st.tensor_parallel(), shares,
                        1e3 * (st.forward_s() + st.backward_s()),
                        1e3 * st.gradient_allreduce_s());
  }
  // Memory: the fullest device of each (stage, type).
  os << "  memory (fullest device per stage and type, against capacity):\n";
  std::map<std::pair<int, std::string>, std::pair<double, double>> fullest;
  int idle = 0;
  for (const auto &r : p.ranks()) {
    if (r.program().empty()) {
      ++idle;
      continue;
    }
    auto key = std::make_pair(int(r.stage()), p.cluster().devices(r.rank()).type());
    auto &f = fullest[key];
    if (double(r.memory().peak()) >= f.first)
      f = {double(r.memory().peak()), double(r.memory().capacity())};
  }
  for (const auto &[key, f] : fullest)
    os << llvm::formatv("    stage {0} {1,-12} {2,7} / {3,6} GiB ({4,3:F0}%)\n", key.first,
                        key.second, gib(f.first), gib(f.second), 100 * f.first / f.second);
  if (idle)
    os << "    " << idle << " device(s) left idle: they would slow the plan down\n";
  const auto &pr = p.prediction();
  os << llvm::formatv("  predicted step time {0:F3} s, {1:F1} samples/s, bubble {2:F0}%, "
                      "model FLOPs utilization {3:F1}%\n",
                      pr.step_time_s(), pr.samples_per_s(), 100 * pr.bubble_fraction(),
                      100 * pr.model_flops_utilization());
  os << llvm::formatv("  search: {0} layouts in {1:F2} s (cost model: {2})\n",
                      pr.plans_evaluated(), pr.search_time_s(), pr.cost_model());
  printBaselines(p, os);
}

/// The flags every mode shares, read once: the format, the measured
/// profiles, the catalog (--uncalibrated drops its measured figures) and
/// how the model's dims are bound. Errors are one line for fail().
struct CommonFlags {
  cluster::DType dtype = cluster::DType::FP16;
  std::vector<cost::Profile> profiles;
  cluster::DeviceCatalog catalog = cluster::DeviceCatalog::builtin();
};

llvm::Expected<CommonFlags> readCommonFlags() {
  auto err = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  CommonFlags f;
  auto dtype = cluster::parseDType(dtypeArg);
  if (!dtype || *dtype == cluster::DType::INT8)
    return err("--dtype must be fp32, tf32, fp16 or bf16, not '" + dtypeArg + "'");
  f.dtype = *dtype;
  for (const std::string &path : profileArgs) {
    auto profile = cost::Profile::load(path);
    if (!profile)
      return profile.takeError();
    f.profiles.push_back(std::move(*profile));
  }
  if (uncalibratedArg) {
    for (const cluster::DeviceType *type : cluster::DeviceCatalog::builtin().types()) {
      cluster::DeviceType plain = *type;
      plain.achieved = {};
      if (llvm::Error e = f.catalog.override(std::move(plain)))
        return std::move(e);
    }
    // The stacks keep what they run (fusion, TF32), not their fitted figures.
    for (cluster::Stack s : cluster::DeviceCatalog::builtin().stacks()) {
      s.kernelUs = cost::Efficiency().launchSeconds * 1e6;
      s.microBatchUs = 0;
      s.matrix.reset();
      f.catalog.setStack(std::move(s));
    }
  }
  if (!stackArg.empty())
    if (llvm::Error e = f.catalog.setDefaultStack(stackArg))
      return err("--stack: " + llvm::toString(std::move(e)));
  return f;
}

/// The ranks' measured speeds in the --profile files (`hetplan run
/// --profile` writes them: docs/runtime.md, "Measured profiles") become
/// those ranks' speed factors in `cl`, the cluster the plan ran on: a
/// straggler gets fewer samples and layers. A rank the cluster does not have,
/// or of another device type, is an error naming the file.
llvm::Error applyRankSpeeds(cluster::Cluster &cl, const CommonFlags &flags) {
  for (size_t k = 0; k < flags.profiles.size(); ++k) {
    const cost::Profile &p = flags.profiles[k];
    if (p.rankSpeeds.empty())
      continue;
    std::string path = profileArgs[unsigned(k)];
    std::string line;
    for (auto [rank, speed] : p.rankSpeeds) {
      if (size_t(rank) >= cl.devices.size())
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::formatv("{0}: \"ranks\" names rank {1}, but the cluster has {2} device(s): compile "
                          "with the cluster the profiled plan ran on",
                          path, rank, cl.devices.size()));
      cluster::Device &d = cl.devices[size_t(rank)];
      if (!p.measuredOn(*d.type))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::formatv("{0}: rank {1} was measured as a {2}, but it is a {3} in this cluster: "
                          "compile with the cluster the profiled plan ran on",
                          path, rank, p.device, d.type->name));
      d.speedFactor = speed;
      line += llvm::formatv("{0}{1} {2:F2}", line.empty() ? "" : ", ", rank, speed).str();
    }
    if (!quietArg)
      llvm::errs() << "hetplan: note: " << path << ": measured speed per rank, as its speed factor: "
                   << line << "\n";
  }
  return llvm::Error::success();
}

/// The model pipeline's options from the flags, at `batch` and `sequence`.
planner::PipelineOptions pipelineOptions(int64_t batch, int64_t sequence, cluster::DType dtype) {
  planner::PipelineOptions po;
  po.path = model;
  po.batch = batch;
  po.sequence = sequence;
  po.shapes.assign(shapeArgs.begin(), shapeArgs.end());
  po.dims.assign(dimArgs.begin(), dimArgs.end());
  po.batchAxes.assign(batchAxisArgs.begin(), batchAxisArgs.end());
  po.values.assign(valueArgs.begin(), valueArgs.end());
  po.allowMissingWeights = missingWeights;
  po.dtype = dtype;
  return po;
}

/// What the plan records about the model and the run besides the planner's
/// result.
planner::ExportInfo exportInfo(const planner::CostedModel &costed, int64_t sequence,
                               llvm::StringRef pickedSpec = {}) {
  planner::ExportInfo info;
  info.modelPath = modelPathFromPlan(model, outputArg);
  info.modelSha256 = fileSha256(model, info.modelBytes);
  info.clusterSpec = pickedSpec.empty() ? std::string(clusterArg) : pickedSpec.str();
  info.sequence = sequence;
  info.boundDims = costed.boundDims;
  info.inputs = costed.inputs;
  info.outputs = costed.outputs;
  info.wholeBatchReason = costed.wholeBatchReason;
  if (!profileArgs.empty())
    info.costModel = "roofline + profile:" + llvm::join(profileArgs, ",");
  return info;
}

} // namespace

/// `hetplan compile MODEL --mode serve ...`: docs/serving.md.
int runCompileServe() {
  if (batchArg.getNumOccurrences() || seqArg.getNumOccurrences())
    return fail("--mode serve takes --prompt-len and --output-len (and --rate), not --batch "
                "or --seq");
  std::vector<planner::serve::ServeLayoutReplica> serveLayout;
  if (!layoutArg.empty()) {
    if (!pinArg.empty() || pickDevicesArg)
      return fail("--layout gives every replica exactly: not with --pin or --pick-devices");
    auto text = llvm::MemoryBuffer::getFile(layoutArg);
    if (!text)
      return fail(layoutArg + ": cannot open: " + text.getError().message());
    auto parsed = planner::serve::parseServeLayout((*text)->getBuffer(), layoutArg);
    if (!parsed)
      return fail(llvm::toString(parsed.takeError()));
    serveLayout = std::move(*parsed);
  }
  if (optimizerArg.getNumOccurrences())
    return fail("--optimizer is for --mode train (a serving plan keeps no optimizer state)");
  planner::serve::Workload workload;
  int64_t promptTokens = 0, outputTokens = 0;
  if (!workloadArg.empty()) {
    if (promptLenArg.getNumOccurrences() || outputLenArg.getNumOccurrences() ||
        arrivalsArg.getNumOccurrences() || burstinessArg.getNumOccurrences())
      return fail("--workload replays a trace's own arrivals and lengths: give it without "
                  "--prompt-len, --output-len, --arrivals and --burstiness");
    auto text = llvm::MemoryBuffer::getFile(workloadArg);
    if (!text)
      return fail(workloadArg + ": cannot open: " + text.getError().message());
    auto trace = planner::serve::parseTrace((*text)->getBuffer(), workloadArg);
    if (!trace)
      return fail(llvm::toString(trace.takeError()));
    workload.arrivals = planner::serve::Arrivals::Trace;
    workload.trace = std::move(*trace);
    workload.traceName = llvm::sys::path::filename(workloadArg).str();
    double prompts = 0, outputs = 0;
    for (const auto &r : workload.trace) {
      prompts += double(r.promptTokens);
      outputs += double(r.outputTokens);
    }
    promptTokens = std::max<int64_t>(1, std::llround(prompts / double(workload.trace.size())));
    outputTokens = std::max<int64_t>(1, std::llround(outputs / double(workload.trace.size())));
    if (!rateArg.getNumOccurrences()) {
      if (!(workload.traceRate() > 0))
        return fail(workloadArg + ": its requests arrive at one instant: give --rate to spread them");
      rateArg = workload.traceRate();
    }
  } else {
    if (promptLenArg.empty() || outputLenArg.empty())
      return fail("--mode serve needs --prompt-len and --output-len (tokens per request), or "
                  "--workload TRACE");
    auto prompt = planner::serve::parseLength(promptLenArg, "--prompt-len");
    if (!prompt)
      return fail(llvm::toString(prompt.takeError()));
    auto output = planner::serve::parseLength(outputLenArg, "--output-len");
    if (!output)
      return fail(llvm::toString(output.takeError()));
    if (prompt->points.size() > 1)
      workload.prompt = *prompt;
    if (output->points.size() > 1)
      workload.output = *output;
    promptTokens = std::max<int64_t>(1, std::llround(prompt->mean()));
    outputTokens = std::max<int64_t>(1, std::llround(output->mean()));
    if (arrivalsArg == "gamma") {
      if (!(burstinessArg > 0) || !std::isfinite(burstinessArg) || burstinessArg > 100)
        return fail("--burstiness must be a coefficient of variation above 0 and at most 100");
      workload.arrivals = planner::serve::Arrivals::Gamma;
      workload.burstiness = burstinessArg;
    } else if (arrivalsArg != "poisson") {
      return fail("--arrivals must be poisson or gamma, not '" + arrivalsArg +
                  "' (--workload FILE replays a trace)");
    } else if (burstinessArg.getNumOccurrences()) {
      return fail("--burstiness goes with --arrivals gamma");
    }
  }
  if (!(rateArg > 0) || !std::isfinite(rateArg))
    return fail("--mode serve needs --rate REQ/S, a positive number of requests per second");
  for (auto [name, value] : {std::pair{"--ttft-ms", double(ttftArg)},
                             std::pair{"--tpot-ms", double(tpotArg)},
                             std::pair{"--budget", double(budgetArg)}})
    if (value < 0 || !std::isfinite(value))
      return fail(std::string(name) + " must be a positive number");
  auto flags = readCommonFlags();
  if (!flags)
    return fail(llvm::toString(flags.takeError()));
  if (outputArg.empty() && !jsonArg)
    return fail("give -o PLAN (the plan file to write)");

  planner::serve::Options so;
  so.rate = rateArg;
  so.promptTokens = promptTokens;
  so.outputTokens = outputTokens;
  so.workload = std::move(workload);
  so.layout = std::move(serveLayout);
  so.ttftTarget = ttftArg / 1e3;
  so.tpotTarget = tpotArg / 1e3;
  so.budget = budgetArg;
  so.pickDevices = pickDevicesArg;
  so.dtype = flags->dtype;
  so.seed = serveSeedArg;
  if (maxBatchedTokensArg < 1 || maxBatchedTokensArg > (int64_t(1) << 24))
    return fail("--max-batched-tokens must be between 1 and 16777216");
  so.maxPrefillTokens = maxBatchedTokensArg;
  so.profiles = flags->profiles;
  if (!pinArg.empty()) {
    auto pin = planner::parsePin(pinArg);
    if (!pin)
      return fail(llvm::toString(pin.takeError()));
    if (pin->dp || pin->mb || pin->mbs)
      return fail("--pin in --mode serve takes pp and tp (every replica's stages and tensor "
                  "parallelism); replicas and their groups in flight are planned");
    so.pinPipelineStages = pin->pp;
    so.pinTensorParallel = pin->tp;
  }

  // `N?` in an inline spec: up to N of that type (--pick-devices only).
  std::string spec = clusterArg;
  std::vector<std::string> optionalNames;
  if (spec.find('?') != std::string::npos) {
    if (!pickDevicesArg)
      return fail("'?' in --cluster (up to N devices) needs --pick-devices");
    llvm::SmallVector<llvm::StringRef> items;
    llvm::StringRef(clusterArg).split(items, ',');
    std::string stripped;
    for (llvm::StringRef item : items) {
      llvm::StringRef body = item.split(';').first.trim();
      bool optional = body.ends_with("?");
      if (optional) {
        body = body.drop_back();
        optionalNames.push_back(body.rsplit('x').second.str());
      }
      std::string text = item.str();
      text.erase(std::remove(text.begin(), text.end(), '?'), text.end());
      stripped += (stripped.empty() ? "" : ",") + text;
    }
    spec = stripped;
  }
  auto cl = cluster::parseClusterSpec(spec, flags->catalog);
  if (!cl)
    return fail(llvm::toString(cl.takeError()));
  if (llvm::Error e = stackArg.empty() ? llvm::Error::success() : cl->selectStack(stackArg))
    return fail("--stack: " + llvm::toString(std::move(e)));
  for (const std::string &name : optionalNames) {
    auto type = cl->catalog().lookup(name);
    if (!type)
      return fail(llvm::toString(type.takeError()));
    so.optionalTypes.insert(*type);
  }
  // No '?' with --pick-devices: every type may be used in part (the
  // planner's reading of an empty optionalTypes).

  // Decode costs at one token, prefill costs at the prompt length; a
  // decode-step-only export (no sequence dim to bind: input_ids fixed at one
  // token) prefills token by token, priced from the one-token cost.
  planner::PipelineOptions po = pipelineOptions(1, 1, so.dtype);
  po.fusedAttention = cl->stack().fusedAttention;
  po.fusedElementwise = cl->stack().fusedElementwise;
  po.cacheLength = 0; // a decoder exported with its KV cache: priced without it (see below)
  auto decode = planner::costModelFile(po);
  if (!decode)
    return fail(llvm::toString(decode.takeError()));
  // No dim took the sequence: input_ids' fixed length is the run's.
  if (decode->sequenceDim.empty()) {
    so.prefillChunk = 1;
    for (const planner::IoShape &in : decode->inputs)
      if (in.name == "input_ids" && in.dims.size() == 2 && in.dims[1] > 0)
        so.prefillChunk = in.dims[1];
  }
  llvm::Expected<planner::CostedModel> prefill = *decode;
  if (so.prefillChunk == 0) {
    po.sequence = so.promptTokens;
    prefill = planner::costModelFile(po);
    if (!prefill)
      return fail(llvm::toString(prefill.takeError()));
    for (const std::string &w : prefill->warnings)
      llvm::errs() << "hetplan: warning: " << w << "\n";
  } else {
    for (const std::string &w : decode->warnings)
      if (!llvm::StringRef(w).starts_with("--seq "))
        llvm::errs() << "hetplan: warning: " << w << "\n";
    llvm::errs() << "hetplan: note: " << model << ": no input dim takes the sequence (input_ids is fixed at "
                 << so.prefillChunk << " token(s) per run): prompts are prefilled "
                 << (so.prefillChunk == 1 ? std::string("token by token")
                                          : "in runs of " + std::to_string(so.prefillChunk) + " tokens")
                 << ", priced as decode runs over the growing cache\n";
  }

  auto served = planner::serve::planServing(prefill->cost, decode->cost, *cl, so);
  if (!served)
    return fail(model + " on " + clusterArg + ": " + llvm::toString(served.takeError()));
  for (const std::string &note : served->notes)
    llvm::errs() << "hetplan: warning: " << note << "\n";

  plan::Plan out = planner::serve::exportServePlan(*served, prefill->cost, *cl, so,
                                                   exportInfo(*prefill, so.promptTokens));
  planner::exportBaselines(
      planner::planServeBaselines(prefill->cost, decode->cost, *cl, so, *served), out);
  std::string error;
  if (!runtime::validatePlan(out, error))
    return fail("internal error: the plan does not validate: " + error);
  if (!outputArg.empty() && !runtime::writePlan(outputArg, out, error))
    return fail(error);
  if (jsonArg) {
    llvm::outs() << llvm::formatv("{0:2}", summaryJson(out)) << "\n";
    return 0;
  }
  std::ostringstream os;
  runtime::explainServing(out, os);
  llvm::outs() << os.str();
  printBaselines(out, llvm::outs());
  llvm::outs() << "  plan written to " << outputArg << "\n";
  return 0;
}

namespace {

llvm::Error flagError(const std::string &message) {
  return llvm::createStringError(message);
}

/// --batch, --seq and --mode for a train or infer plan.
llvm::Error readBatchAndMode(planner::Options &options) {
  options.globalBatch = batchArg;
  // Sizes beyond 2^24 samples or tokens are no real step and overflow the
  // planner's element and byte counts.
  constexpr int64_t kMaxSize = int64_t(1) << 24;
  if (batchArg <= 0)
    return flagError("--batch must be at least 1");
  if (batchArg > kMaxSize)
    return flagError("--batch " + std::to_string(batchArg) + " is too large (at most " +
                     std::to_string(kMaxSize) + " samples per step)");
  if (seqArg < 0 || seqArg > kMaxSize)
    return flagError("--seq must be between 1 and " + std::to_string(kMaxSize) + ", not " +
                     std::to_string(seqArg));
  if (modeArg == "train")
    options.mode = cost::Mode::Train;
  else if (modeArg == "infer" || modeArg == "inference")
    options.mode = cost::Mode::Infer;
  else
    return flagError("--mode must be train, infer or serve, not '" + modeArg + "'");
  return llvm::Error::success();
}

/// The search's flags: --schedule, --strategy, --pin, --grad-dtype,
/// --recompute, --zero, --offload, --optimizer.
llvm::Error readSearchFlags(planner::Options &options) {
  auto schedule = planner::parseSchedule(scheduleArg);
  if (!schedule)
    return schedule.takeError();
  options.schedule = *schedule;
  auto strategy = planner::parseStrategy(strategyArg);
  if (!strategy)
    return strategy.takeError();
  options.strategy = *strategy;
  if (!pinArg.empty()) {
    auto pin = planner::parsePin(pinArg);
    if (!pin)
      return pin.takeError();
    options.strategy = planner::Strategy::Pinned;
    options.pin = *pin;
  }
  if (!gradDtypeArg.empty()) {
    auto g = cluster::parseDType(gradDtypeArg);
    if (!g || *g == cluster::DType::INT8 || *g == cluster::DType::TF32)
      return flagError("--grad-dtype must be fp32, fp16 or bf16, not '" + gradDtypeArg + "'");
    options.gradientDType = *g;
  }
  if (recomputeArg == "never")
    options.recompute = planner::RecomputePolicy::Never;
  else if (recomputeArg == "auto")
    options.recompute = planner::RecomputePolicy::Search;
  else if (recomputeArg == "always")
    options.recompute = planner::RecomputePolicy::Always;
  else
    return flagError("--recompute must be never, auto or always, not '" + recomputeArg + "'");
  if (zeroArg == "auto")
    options.zeroStage = -1;
  else if (zeroArg.size() == 1 && zeroArg[0] >= '0' && zeroArg[0] <= '3')
    options.zeroStage = zeroArg[0] - '0';
  else
    return flagError("--zero must be auto, 0, 1, 2 or 3, not '" + zeroArg + "'");
  if (offloadArg == "never")
    options.offload = planner::OffloadPolicy::Never;
  else if (offloadArg == "auto")
    options.offload = planner::OffloadPolicy::Search;
  else if (offloadArg == "always")
    options.offload = planner::OffloadPolicy::Always;
  else
    return flagError("--offload must be never, auto or always, not '" + offloadArg + "'");
  auto optimizer = runtime::parseOptimizer(optimizerArg);
  if (!optimizer)
    return flagError("--optimizer must be " + std::string(runtime::optimizerNames()) + ", not '" +
                     optimizerArg + "'");
  options.optimizer = *optimizer;
  if (optimizerArg.getNumOccurrences() && options.mode != cost::Mode::Train)
    return flagError("--optimizer is for --mode train (an inference plan keeps no optimizer state)");
  if (sparseEmbeddingsArg && options.mode != cost::Mode::Train)
    return flagError("--sparse-embeddings is for --mode train (inference updates nothing)");
  options.sparseEmbeddings = sparseEmbeddingsArg;
  return llvm::Error::success();
}

/// --layout FILE: the layouts to price (none without the flag).
llvm::Error readLayouts(planner::Options &options, std::vector<planner::Layout> &layouts) {
  if (layoutArg.empty())
    return llvm::Error::success();
  if (!pinArg.empty())
    return flagError("give --layout or --pin, not both");
  llvm::sys::fs::file_status status;  // regular files only (no FIFO, no /dev/zero)
  if (!llvm::sys::fs::status(layoutArg, status) &&
      status.type() != llvm::sys::fs::file_type::regular_file)
    return flagError(layoutArg + ": not a regular file");
  auto buffer = llvm::MemoryBuffer::getFile(layoutArg, /*IsText=*/true);
  if (!buffer)
    return flagError(layoutArg + ": cannot read layout: " + buffer.getError().message());
  auto parsed = planner::parseLayouts((*buffer)->getBuffer(), layoutArg);
  if (!parsed)
    return parsed.takeError();
  layouts = std::move(*parsed);
  options.strategy = planner::Strategy::Pinned;
  return llvm::Error::success();
}

/// One JSON line for a priced layout: its predicted step time, or why it
/// fails with how full its fullest device would be.
llvm::json::Object layoutLine(size_t index, llvm::Expected<planner::Plan> p) {
  llvm::json::Object line{{"index", int64_t(index)}};
  if (!p) {
    line["error"] = llvm::toString(p.takeError());
    return line;
  }
  double peak = 0;
  int fullest = -1;
  for (size_t r = 0; r < p->memory.size(); ++r) {
    const auto &m = p->memory[r];
    if (p->stageOfRank[r] < 0 || m.capacity <= 0)
      continue;
    if (m.peak() / m.capacity > peak) {
      peak = m.peak() / m.capacity;
      fullest = int(r);
    }
  }
  line["peak_memory_fraction"] = peak;
  if (fullest >= 0) {
    line["peak_memory_bytes"] = p->memory[fullest].peak();
    line["fullest_rank"] = fullest;
    line["fullest_capacity_bytes"] = p->memory[fullest].capacity;
  }
  line["zero_stage"] = p->zeroStage;
  line["offload_optimizer"] = p->offloadOptimizer;
  llvm::json::Array recompute;
  for (const auto &st : p->stages)
    recompute.push_back(st.recompute);
  line["recompute"] = std::move(recompute);
  if (p->fitsMemory) {
    line["step_time_s"] = p->stepSeconds;
    line["samples_per_s"] = p->samplesPerSecond;
    line["bubble_fraction"] = p->bubbleFraction;
  } else {
    line["error"] = "the layout does not fit in memory";
  }
  return line;
}

/// The plan written to -o (without its wall-clock search time: same
/// inputs, same bytes), then its summary or its JSON.
int writeCompiledPlan(const planner::Plan &result, const planner::CostedModel &costed,
                      const cluster::Cluster &cl, const planner::Options &options,
                      llvm::StringRef pickedSpec = {},
                      std::optional<llvm::json::Object> picked = std::nullopt) {
  std::string error;
  plan::Plan out =
      planner::exportPlan(result, costed.cost, cl, options, exportInfo(costed, seqArg, pickedSpec));
  planner::exportBaselines(planner::planBaselines(costed.cost, cl, options, &result), out);
  if (!runtime::validatePlan(out, error))
    return fail("internal error: the plan does not validate: " + error);
  // The file holds no wall-clock figures: same inputs, same bytes.
  out.mutable_prediction()->clear_search_time_s();
  if (!outputArg.empty() && !runtime::writePlan(outputArg, out, error))
    return fail(error);
  out.mutable_prediction()->set_search_time_s(result.searchSeconds);

  if (jsonArg) {
    llvm::json::Value summary = summaryJson(out);
    llvm::json::Array warnings;
    for (const std::string &w : costed.warnings)
      warnings.push_back(w);
    summary.getAsObject()->try_emplace("warnings", std::move(warnings));
    if (picked)
      summary.getAsObject()->try_emplace("picked_devices", std::move(*picked));
    llvm::outs() << llvm::formatv("{0:2}", summary) << "\n";
  } else {
    printSummary(out, llvm::outs());
    llvm::outs() << "  plan written to " << outputArg << "\n";
  }
  return 0;
}

} // namespace

int runCompile() {
  if (modeArg == "serve")
    return runCompileServe();
  if (batchArg.getNumOccurrences() == 0)
    return fail("--batch is required for --mode " + modeArg);
  if (rateArg.getNumOccurrences() || promptLenArg.getNumOccurrences() ||
      outputLenArg.getNumOccurrences() || ttftArg.getNumOccurrences() ||
      tpotArg.getNumOccurrences() || !workloadArg.empty() || arrivalsArg.getNumOccurrences() ||
      burstinessArg.getNumOccurrences() || maxBatchedTokensArg.getNumOccurrences() ||
      (!pickDevicesArg && budgetArg.getNumOccurrences()))
    return fail("--rate, --prompt-len, --output-len, --workload, --arrivals, --burstiness, "
                "--max-batched-tokens, --ttft-ms, --tpot-ms, --budget and --pick-devices are for "
                "--mode serve (--budget and --pick-devices also pick "
                "devices for train and infer plans)");
  if ((targetStepArg.getNumOccurrences() || targetSamplesArg.getNumOccurrences() ||
       pickTimeArg.getNumOccurrences()) &&
      !pickDevicesArg)
    return fail("--target-step-s, --target-samples-s and --pick-time-s go with --pick-devices");
  if (targetStepArg < 0 || targetSamplesArg < 0 || budgetArg < 0 || !(pickTimeArg > 0))
    return fail("--target-step-s, --target-samples-s and --budget must not be negative, and "
                "--pick-time-s must be positive");
  if (int(targetStepArg > 0) + int(targetSamplesArg > 0) + int(budgetArg > 0) > 1)
    return fail("give one of --target-step-s, --target-samples-s and --budget");
  // Options first: a bad flag should not wait for a large import.
  planner::Options options;
  if (llvm::Error e = readBatchAndMode(options))
    return fail(llvm::toString(std::move(e)));
  auto flags = readCommonFlags();
  if (!flags)
    return fail(llvm::toString(flags.takeError()));
  options.dtype = flags->dtype;
  if (llvm::Error e = readSearchFlags(options))
    return fail(llvm::toString(std::move(e)));
  std::vector<planner::Layout> layouts;
  if (llvm::Error e = readLayouts(options, layouts))
    return fail(llvm::toString(std::move(e)));
  options.profiles = flags->profiles;
  if (outputArg.empty() && !jsonArg && layouts.size() <= 1)
    return fail("give -o PLAN (the plan file to write)");
  if (layouts.size() > 1 && !outputArg.empty())
    return fail("--layout with several layouts prices them and writes no plan: drop -o");

  std::vector<PickGroup> pickGroups;
  // A cluster file with --pick-devices: its device types are the groups,
  // each up to the file's count (mixes are subsets of the file's nodes).
  const bool pickFromFile = pickDevicesArg && isClusterFile(clusterArg);
  if (pickDevicesArg) {
    if (!layouts.empty() || !pinArg.empty())
      return fail("--pick-devices plans each mix itself: drop --layout and --pin");
    if (!pickFromFile) {
      auto groups = parsePickGroups(clusterArg);
      if (!groups)
        return fail(llvm::toString(groups.takeError()));
      pickGroups = std::move(*groups);
    }
  } else if (llvm::StringRef(clusterArg).contains('?')) {
    return fail("'?' in --cluster (up to N devices) needs --pick-devices");
  }
  std::vector<int> allCounts;
  for (const PickGroup &g : pickGroups)
    allCounts.push_back(g.max);
  auto cl = cluster::parseClusterSpec(pickDevicesArg && !pickFromFile
                                          ? pickSpec(pickGroups, allCounts)
                                          : std::string(clusterArg),
                                      flags->catalog);
  if (!cl)
    return fail(llvm::toString(cl.takeError()));
  if (pickFromFile)
    pickGroups = fileGroups(*cl);
  if (llvm::Error e = stackArg.empty() ? llvm::Error::success() : cl->selectStack(stackArg))
    return fail("--stack: " + llvm::toString(std::move(e)));
  if (!pickDevicesArg)
    if (llvm::Error e = applyRankSpeeds(*cl, *flags))
      return fail(llvm::toString(std::move(e)));

  planner::PipelineOptions po = pipelineOptions(batchArg, seqArg, options.dtype);
  po.training = options.mode == cost::Mode::Train;
  po.fusedAttention = cl->stack().fusedAttention;
  po.fusedElementwise = cl->stack().fusedElementwise;
  options.scatterGatherSends = cl->stack().scatterGatherSends;
  options.fusedCrossEntropy = cl->stack().fusedCrossEntropy;
  auto costed = planner::costModelFile(po);
  if (!costed)
    return fail(llvm::toString(costed.takeError()));
  // Warnings are one line each, before the search: what was planned with an
  // upper bound or under an assumption.
  for (const std::string &w : costed->warnings)
    llvm::errs() << "hetplan: warning: " << w << "\n";
  if (options.sparseEmbeddings &&
      llvm::none_of(costed->cost.layers, [](const cost::LayerCost &l) { return !l.embeddings.empty(); }))
    llvm::errs() << "hetplan: warning: --sparse-embeddings: " << costed->cost.graphName
                 << " has no embedding table (a float weight read only by Gathers along axis 0); nothing "
                    "is updated sparsely\n";
  cost::ModelCost *modelCost = &costed->cost;
  options.splitBatch = costed->wholeBatchReason.empty();
  if (!options.splitBatch && !quietArg)
    llvm::errs() << "hetplan: note: the batch is not split (one worker per stage, one "
                    "micro-batch): " << costed->wholeBatchReason << "\n";

  bool progressShown = false;
  if (!quietArg)
    options.progress = [&](double done) {
      if (done < 1.0 || progressShown) {
        llvm::errs() << llvm::formatv("\rhetplan: searching layouts {0,3:F0}%", 100 * done);
        progressShown = true;
        if (done >= 1.0)
          llvm::errs() << "\n";
      }
    };
  if (layouts.size() > 1) {
    // One JSON line per layout.
    planner::Options overCapacity = options;
    overCapacity.priceOverCapacity = true;
    for (size_t i = 0; i < layouts.size(); ++i) {
      llvm::json::Object line =
          layoutLine(i, planner::evaluateLayout(*modelCost, *cl, overCapacity, layouts[i]));
      llvm::outs() << llvm::formatv("{0}", llvm::json::Value(std::move(line))) << "\n";
    }
    return 0;
  }
  if (pickDevicesArg) {
    PickTargets targets{targetStepArg, targetSamplesArg, budgetArg, pickTimeArg};
    targets.stack = stackArg;
    if (pickFromFile) {
      targets.file = &*cl;
      targets.fileName = llvm::sys::path::filename(clusterArg).str();
    }
    auto picked = pickDevices(*modelCost, pickGroups, pickFromFile ? cl->catalog() : flags->catalog,
                              options, targets);
    if (!picked)
      return fail(model + " on " + clusterArg + ": " + llvm::toString(picked.takeError()));
    if (!jsonArg)
      llvm::outs() << picked->report;
    return writeCompiledPlan(picked->plan, *costed, *picked->cluster, options, picked->spec,
                             std::move(picked->json));
  }
  auto result = layouts.empty()
                    ? planner::makePlan(*modelCost, *cl, options)
                    : planner::evaluateLayout(*modelCost, *cl, options, layouts[0]);
  if (!result)
    return fail(model + " on " + clusterArg + ": " + llvm::toString(result.takeError()));
  return writeCompiledPlan(*result, *costed, *cl, options);
}

/// The report's prices: the built-in catalog's, by the plan's device types.
runtime::HtmlOptions htmlOptions(const plan::Plan &p) {
  runtime::HtmlOptions options;
  for (const auto &d : p.cluster().devices())
    if (const cluster::DeviceType *type = cluster::DeviceCatalog::builtin().find(d.type()))
      if (type->pricePerHourUSD)
        options.pricePerHour[d.type()] = *type->pricePerHourUSD;
  return options;
}

int runExplain() {
  plan::Plan p;
  std::string error;
  if (!runtime::readPlan(planArg, p, error))
    return fail(error);
  // Files first: a failure leaves nothing half-reported.
  if (!timelineArg.empty() && !runtime::writeTimelineSvg(p, timelineArg, error))
    return fail(error);
  if (!traceArg.empty() && !runtime::writeTrace(p, {}, traceArg, error))
    return fail(error);
  if (!htmlArg.empty() && !runtime::writeExplainHtml(p, htmlArg, error, htmlOptions(p)))
    return fail(error);
  if (explainJsonArg) {
    llvm::outs() << llvm::formatv("{0:2}", summaryJson(p)) << "\n";
    return 0;
  }
  std::ostringstream os;
  runtime::explainPlan(p, os);
  llvm::outs() << os.str();
  if (!timelineArg.empty())
    llvm::outs() << "timeline written to " << timelineArg << "\n";
  if (!traceArg.empty())
    llvm::outs() << "trace written to " << traceArg << "\n";
  if (!htmlArg.empty())
    llvm::outs() << "report written to " << htmlArg << "\n";
  return 0;
}

} // namespace hetplan::tools
