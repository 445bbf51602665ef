//===- hetplan.cpp - the hetplan command line -----------------------------===//
//
//   hetplan summary MODEL [--json]     what a model holds (ops, parameters,
//                                      inputs and outputs with symbolic dims)
//
// MODEL is an ONNX model (.onnx / .onnxtext) or het IR (.mlir).
//
//===----------------------------------------------------------------------===//

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxImporter.h"
#include "passes/GraphSummary.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
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

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "hetplan") << message << "\n";
  return 1;
}

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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv,
      "hetplan: plan one neural network across a cluster of different GPUs\n");
  if (summaryCmd)
    return runSummary();
  cl::PrintHelpMessage();
  return 1;
}
