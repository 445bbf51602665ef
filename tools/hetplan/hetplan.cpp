//===- hetplan.cpp - the hetplan command line -----------------------------===//
//
//   hetplan summary MODEL [--json]     what a model holds (ops, parameters,
//                                      inputs and outputs with symbolic dims)
//   hetplan cluster SPEC|FILE [--json] a cluster as the planner sees it
//   hetplan devices [--json]           the built-in device catalog
//   hetplan compile MODEL --cluster SPEC --mode train|infer --batch N -o PLAN
//   hetplan explain PLAN [--timeline OUT.svg] [--html OUT.html]
//   hetplan run PLAN --input NAME=FILE.npy ... --output DIR [--ranks N]
//   hetplan profile [--ranks R] [--threads N] [--out FILE] [--quick]
//
// MODEL is an ONNX model (.onnx / .onnxtext) or het IR (.mlir). SPEC is an
// inline cluster (`4xA100-80G,12xT4`), FILE a YAML/JSON cluster file; see
// docs/cluster-format.md.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxImporter.h"
#include "passes/GraphSummary.h"
#include "passes/cluster/Cluster.h"
#include "passes/planner/ModelPipeline.h"
#include "tools/hetplan/Commands.h"
#include "hetplan/runtime/Plan.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "tools/CrashReport.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;

static cl::SubCommand summaryCmd("summary",
                                 "Import a model and print what it holds");
static cl::opt<std::string> summaryModel(cl::Positional, cl::Required,
                                         cl::desc("<model.onnx|.onnxtext|.mlir>"),
                                         cl::sub(summaryCmd));
static cl::opt<bool> summaryJson("json", cl::desc("Print JSON"),
                                 cl::sub(summaryCmd));
static cl::opt<bool> summaryNoShapeInference(
    "no-shape-inference", cl::desc("Skip libonnx shape inference"),
    cl::sub(summaryCmd));

static cl::opt<bool> summaryAllowMissingWeights(
    "allow-missing-weights",
    cl::desc("Accept absent external-data files (shapes are enough)"),
    cl::sub(summaryCmd));

static cl::SubCommand clusterCmd(
    "cluster", "Resolve a cluster (inline spec or file) and print it");
static cl::opt<std::string>
    clusterSpec(cl::Positional, cl::Required,
                cl::desc("<SPEC like 4xA100-80G,12xT4 | cluster.yaml>"),
                cl::sub(clusterCmd));
static cl::opt<bool> clusterJson("json", cl::desc("Print JSON"),
                                 cl::sub(clusterCmd));

static cl::SubCommand devicesCmd("devices",
                                 "List the built-in device catalog");
static cl::opt<bool> devicesJson("json", cl::desc("Print JSON"),
                                 cl::sub(devicesCmd));

int hetplan::tools::fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "hetplan") << hetplan::planner::oneLineMessage(message.str()) << "\n";
  return 1;
}
using hetplan::tools::fail;

/// Loads `path` as het IR: imported from ONNX, or parsed from .mlir.
static mlir::OwningOpRef<mlir::ModuleOp>
loadModel(llvm::StringRef path, mlir::MLIRContext &context,
          const hetplan::import::ImportOptions &options, std::string &error) {
  context.loadDialect<hetplan::het::HetDialect>();
  if (path.ends_with(".mlir")) {
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    auto module = mlir::parseSourceFile<mlir::ModuleOp>(path, sourceMgr,
                                                         &context);
    if (!module)
      error = (path + ": not valid het IR (see above)").str();
    return module;
  }
  return hetplan::import::importOnnxFile(path, &context, options, error);
}

static int runSummary() {
  mlir::MLIRContext context;
  std::string error;
  hetplan::import::ImportOptions options;
  options.shapeInference = !summaryNoShapeInference;
  options.allowMissingWeights = summaryAllowMissingWeights;
  auto module = loadModel(summaryModel, context, options, error);
  if (!module)
    return fail(error);
  for (auto graph : module->getOps<hetplan::het::GraphOp>()) {
    auto summary = hetplan::het::summarizeGraph(graph);
    if (summaryJson)
      hetplan::het::printSummaryJson(summary, llvm::outs());
    else
      hetplan::het::printSummaryText(summary, llvm::outs());
  }
  return 0;
}

static int runCluster() {
  using namespace hetplan::cluster;
  auto cluster = parseClusterSpec(clusterSpec, DeviceCatalog::builtin());
  if (!cluster)
    return fail(llvm::toString(cluster.takeError()));
  if (clusterJson)
    llvm::outs() << llvm::formatv("{0:2}", cluster->toJSON()) << "\n";
  else
    llvm::outs() << cluster->describe();
  return 0;
}

static int runDevices() {
  using namespace hetplan::cluster;
  const DeviceCatalog &catalog = DeviceCatalog::builtin();
  if (devicesJson) {
    llvm::json::Array types;
    for (const DeviceType *type : catalog.types())
      types.push_back(toJSON(*type));
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(types)))
                 << "\n";
    return 0;
  }
  // Peak TFLOP/s are dense; "-" is no fast path (or no list price).
  auto rate = [](std::optional<double> v) {
    return v ? llvm::formatv("{0}", llvm::format("%.6g", *v)).str()
             : std::string("-");
  };
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::format("%-15s %-7s %4s %8s %6s %6s %6s %6s %6s  %-20s %7s  %s\n",
                     "name", "vendor", "GiB", "mem GB/s", "fp32", "tf32",
                     "fp16", "bf16", "int8", "intra-node GB/s", "$/h",
                     "aliases");
  for (const DeviceType *t : catalog.types()) {
    std::string link = t->intraNodeLink.kind + " " +
                       rate(t->intraNodeLink.bandwidthGBs);
    os << llvm::format(
        "%-15s %-7s %4s %8s %6s %6s %6s %6s %6s  %-20s %7s  %s\n",
        t->name.c_str(), t->vendor.c_str(), rate(t->memoryGiB).c_str(),
        rate(t->memoryBandwidthGBs).c_str(),
        rate(t->nativeTflops(DType::FP32)).c_str(),
        rate(t->nativeTflops(DType::TF32)).c_str(),
        rate(t->nativeTflops(DType::FP16)).c_str(),
        rate(t->nativeTflops(DType::BF16)).c_str(),
        rate(t->nativeTflops(DType::INT8)).c_str(), link.c_str(),
        rate(t->pricePerHourUSD).c_str(),
        llvm::join(t->aliases, ", ").c_str());
  }
  os << catalog.size() << " device types; TFLOP/s dense peak (int8 in TOPS), "
     << "links one direction; names match ignoring case, '-', '_' and spaces\n";
  return 0;
}

/// `hetplan --help` lists hetplan's commands and options only: the options
/// libLLVM/libMLIR register at the top level (hundreds of backend flags) are
/// hidden (still listed by --help-hidden). Subcommands hold hetplan's own.
static void hideLlvmOptions() {
  for (auto &[name, option] : cl::getRegisteredOptions(cl::SubCommand::getTopLevel()))
    if (name != "help" && name != "help-list" && name != "version")
      option->setHiddenFlag(cl::Hidden);
}

static void printVersion(llvm::raw_ostream &os) {
  os << "hetplan " << HETPLAN_VERSION_STRING << " (plan schema version "
     << hetplan::runtime::kPlanSchemaVersion << ")\n";
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  hetplan::tools::installCrashReport();
  hideLlvmOptions();
  for (int i = 0; i < argc; ++i)
    hetplan::tools::commandLine += (i ? " " : "") + std::string(argv[i]);
  cl::SetVersionPrinter(printVersion);
  cl::ParseCommandLineOptions(
      argc, argv,
      "hetplan: plan one neural network across a cluster of different GPUs\n");
  if (summaryCmd)
    return runSummary();
  if (clusterCmd)
    return runCluster();
  if (devicesCmd)
    return runDevices();
  if (hetplan::tools::compileCmd)
    return hetplan::tools::runCompile();
  if (hetplan::tools::explainCmd)
    return hetplan::tools::runExplain();
  if (hetplan::tools::runCmd)
    return hetplan::tools::runRun();
  if (hetplan::tools::serveCmd)
    return hetplan::tools::runServe();
  if (hetplan::tools::profileCmd)
    return hetplan::tools::runProfileCommand();
  cl::PrintHelpMessage();
  return 1;
}
