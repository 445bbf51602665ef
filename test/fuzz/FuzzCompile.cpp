//===- FuzzCompile.cpp - a model through hetplan compile, then run ---------===//
//
// Bytes (an ONNX model) -> what `hetplan compile` does: import, bind-shapes
// with every shape rule, cost annotation, layer grouping, the planner on two
// CPU ranks, plan export and validation -> then the plan runs once on small
// fixed inputs (Session::fromPlan, both ranks as threads), as `hetplan run`
// would. Errors are expected and must be one line; a crash, hang, sanitizer
// finding or a plan that fails its own validation is a bug.
//
// The mutations that reach the compile pipeline's rules are semantic, not
// bytewise: LLVMFuzzerCustomMutator (CompileMutator.h) parses the model and
// swaps op types, drops, adds, swaps or cycles inputs, sets attributes out of
// range, gives initializers dims that disagree with their data, graph
// inputs dims 0, -1 or huge, and changes element types. Bytes that do not
// parse get libFuzzer's own mutations. ctest fuzz-mutate-compile replays
// the same mutator deterministically over the seeds in every build.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"
#include "FuzzModel.h"
#include "CompileMutator.h"
#include "FuzzCompile.h"

#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/Session.h"
#include "passes/cluster/Cluster.h"
#include "passes/planner/Baselines.h"
#include "passes/planner/ModelPipeline.h"
#include "passes/planner/PlanExport.h"
#include "passes/planner/Planner.h"

#include <llvm/Support/Error.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace hetplan;

// As in FuzzOnnxImport.cpp: libMLIR's uninstrumented allocator shares the
// slabs that instrumented inline code poisons.
extern "C" const char *__asan_default_options() { return "allow_user_poisoning=0"; }

namespace hetplan::fuzz {
CompileStats &compileStats() {
  static CompileStats stats;
  return stats;
}
} // namespace hetplan::fuzz

namespace {

std::string workDir;
bool verbose = false;

void note(const char *stage, const std::string &what) {
  if (verbose)
    std::fprintf(stderr, "  %s: %s\n", stage, what.c_str());
}

/// An error must say something, on one line (what the CLI prints).
void checkError(const std::string &message) {
  note("refused", message);
  if (message.empty() || message.find('\n') != std::string::npos) {
    std::fprintf(stderr, "FuzzCompile: bad error message: '%s'\n", message.c_str());
    std::abort();
  }
}

/// The runtime's refusals: one line per problem, at least one.
void checkStatus(const Status &st) {
  note("runtime refused", st.message());
  if (st.message().empty()) {
    std::fprintf(stderr, "FuzzCompile: a %s status without a message\n", statusCodeName(st.code()));
    std::abort();
  }
}

bool writeFile(const std::string &path, const uint8_t *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(data), std::streamsize(size));
  return bool(out);
}

/// Compiles `modelPath` at batch 2 (sequence 4) for two CPU ranks; runs the
/// inference plan once. Training is planned (and validated), not run.
void compileAndRun(const std::string &modelPath, const std::string &bytes, bool training, bool runIt) {
  auto cl = cluster::parseClusterSpec("2xCPU", cluster::DeviceCatalog::builtin());
  if (!cl) {
    std::fprintf(stderr, "FuzzCompile: cluster: %s\n", llvm::toString(cl.takeError()).c_str());
    std::abort();
  }
  planner::PipelineOptions po;
  po.path = modelPath;
  po.batch = 2;
  po.sequence = 4;
  po.allowMissingWeights = true;
  fuzz::inputBindings(bytes, po.dims, po.shapes);
  if (verbose) {
    std::string b;
    for (const std::string &d : po.dims) b += " --dim " + d;
    for (const std::string &s : po.shapes) b += " --shape " + s;
    note("compile", "--batch 2 --seq 4" + b + (training ? " --mode train" : " --mode infer"));
  }
  po.dtype = cluster::DType::FP32;
  po.training = training;
  po.fusedAttention = cl->stack().fusedAttention;
  auto costed = planner::costModelFile(po);
  if (!costed) {
    ++fuzz::compileStats().refusedAtImportOrShapes;
    checkError(llvm::toString(costed.takeError()));
    return;
  }
  planner::Options options;
  options.mode = training ? cost::Mode::Train : cost::Mode::Infer;
  options.globalBatch = 2;
  options.dtype = po.dtype;
  options.splitBatch = costed->wholeBatchReason.empty();
  options.scatterGatherSends = cl->stack().scatterGatherSends;
  options.fusedCrossEntropy = cl->stack().fusedCrossEntropy;
  auto result = planner::makePlan(costed->cost, *cl, options);
  if (!result) {
    ++fuzz::compileStats().refusedByPlanner;
    checkError(llvm::toString(result.takeError()));
    return;
  }
  planner::ExportInfo info;
  info.modelPath = "model.onnx";  // beside the plan, as `hetplan compile` writes it
  info.modelSha256 = runtime::fileSha256(modelPath);
  info.clusterSpec = "2xCPU";
  info.sequence = po.sequence;
  info.boundDims = costed->boundDims;
  info.inputs = costed->inputs;
  info.outputs = costed->outputs;
  info.wholeBatchReason = costed->wholeBatchReason;
  plan::Plan out = planner::exportPlan(*result, costed->cost, *cl, options, info);
  planner::exportBaselines(planner::planBaselines(costed->cost, *cl, options, &*result), out);
  std::string error;
  if (!runtime::validatePlan(out, error)) {
    // `hetplan compile` calls this an internal error: the planner wrote a
    // plan its own runtime refuses.
    std::fprintf(stderr, "FuzzCompile: the exported plan does not validate: %s\n", error.c_str());
    std::abort();
  }
  ++fuzz::compileStats().planned;
  note("planned", training ? "train" : "infer");
  if (training || !runIt)
    return;
  const std::string planPath = workDir + "/model.plan";
  if (!runtime::writePlan(planPath, out, error)) {
    std::fprintf(stderr, "FuzzCompile: cannot write %s: %s\n", planPath.c_str(), error.c_str());
    std::abort();
  }
  std::unique_ptr<Session> session;
  SessionOptions so;
  so.threads = 1;
  so.ranks = PlanRanks::InProcess;
  Status st = Session::fromPlan(planPath, &session, so);
  if (!st.ok()) {
    checkStatus(st);
    return;
  }
  std::map<std::string, runtime::Tensor> inputs;
  for (const TensorInfo &in : session->inputs()) {
    std::vector<int64_t> shape = in.shape;
    int64_t elements = 1;
    for (int64_t &d : shape) {
      if (d < 0) d = 2;
      elements = d == 0 ? 0 : (elements > fuzz::kMaxDeclaredElements ? elements : elements * d);
    }
    if (elements > fuzz::kMaxDeclaredElements || runtime::dtypeSize(in.dtype) == 0) {
      note("not run", "input " + in.name + " over the budget or of no runtime type");
      return;
    }
    // Integers 0 and 1: indices valid for every dim of two or more (a
    // token-type table of two rows).
    inputs[in.name] = fuzz::smallTensor(in.dtype, shape, 2);
  }
  std::map<std::string, runtime::Tensor> outputs;
  st = session->run(inputs, &outputs);
  if (!st.ok()) {
    checkStatus(st);
    return;
  }
  ++fuzz::compileStats().ran;
  note("ran", std::to_string(outputs.size()) + " output(s)");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fuzz::initModelTarget();
  verbose = std::getenv("HETPLAN_FUZZ_VERBOSE") != nullptr;
  char tmpl[] = "/tmp/hetplan-fuzz-compile-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("FuzzCompile: mkdtemp");
    std::abort();
  }
  workDir = tmpl;
  // The work folder goes with the process (files left in it are a few KB).
  std::atexit([] {
    std::remove((workDir + "/model.onnx").c_str());
    std::remove((workDir + "/model.plan").c_str());
    rmdir(workDir.c_str());
  });
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize, unsigned int seed) {
  return fuzz::mutateModelBytes(data, size, maxSize, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The runtime's budget (FuzzModel.h): no Loop, at most 256 nodes, small
  // declared values. The compiler itself gets every input.
  bool runIt = false;
  try {
    runtime::Model model;
    runIt = fuzz::loadWithinBudget(data, size, model);
    if (!runIt) note("not run", "over the runtime budget (FuzzModel.h)");
  } catch (const std::exception &e) {
    runIt = false;
    note("not run", std::string("the runtime's loader: ") + e.what());
  }
  const std::string modelPath = workDir + "/model.onnx";
  if (!writeFile(modelPath, data, size))
    std::abort();
  // One bit of the input picks training or inference planning, so both
  // cost paths (backward, optimizer state, loss) see every mutation.
  bool training = size > 0 && (data[size / 2] & 1);
  try {
    compileAndRun(modelPath, std::string(reinterpret_cast<const char *>(data), size), training, runIt);
  } catch (const std::exception &e) {
    // The runtime reports errors by exception (one line per problem).
    if (!*e.what()) std::abort();
  }
  return 0;
}
