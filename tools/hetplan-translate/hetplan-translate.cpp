//===- hetplan-translate.cpp - ONNX <-> het IR ----------------------------===//
//
//   hetplan-translate --import-onnx model.onnx [-o model.mlir]
//
// Errors go to stderr as one line; the output file is only written when the
// whole translation succeeded.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "tools/CrashReport.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;

static cl::OptionCategory translateOptions("hetplan-translate options");

static cl::opt<std::string> inputFilename(cl::Positional,
                                          cl::desc("<input file>"),
                                          cl::Required, cl::cat(translateOptions));
static cl::opt<std::string> outputFilename("o", cl::desc("Output file"),
                                           cl::value_desc("filename"),
                                           cl::init("-"), cl::cat(translateOptions));
static cl::opt<bool> importOnnx("import-onnx",
                                cl::desc("Import an ONNX model (.onnx or "
                                         ".onnxtext) into het IR"), cl::cat(translateOptions));
static cl::opt<bool> noShapeInference(
    "no-shape-inference",
    cl::desc("Do not run libonnx shape inference; use the model's value_info "
             "only"), cl::cat(translateOptions));
static cl::opt<bool> allowMissingWeights(
    "allow-missing-weights",
    cl::desc("Accept absent external-data files (plan from shapes only)"), cl::cat(translateOptions));
static cl::opt<bool> printDebugInfo(
    "print-debuginfo", cl::desc("Print locations (ONNX node names) in the IR"), cl::cat(translateOptions));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  hetplan::tools::installCrashReport();
  // --help lists hetplan-translate's options, not LLVM's backend flags.
  cl::HideUnrelatedOptions(translateOptions);
  cl::ParseCommandLineOptions(argc, argv, "hetplan translation tool\n");
  auto error = [](const llvm::Twine &message) {
    llvm::WithColor::error(llvm::errs(), "hetplan-translate") << message << "\n";
    return 1;
  };
  if (!importOnnx)
    return error("choose a translation (--import-onnx)");

  mlir::MLIRContext context;
  std::string message;
  hetplan::import::ImportOptions options;
  options.shapeInference = !noShapeInference;
  options.allowMissingWeights = allowMissingWeights;
  auto module = hetplan::import::importOnnxFile(inputFilename, &context,
                                                options, message);
  if (!module)
    return error(message);

  auto output = mlir::openOutputFile(outputFilename, &message);
  if (!output)
    return error(message);
  mlir::OpPrintingFlags flags;
  if (printDebugInfo)
    flags.enableDebugInfo();
  module->print(output->os(), flags);
  output->os() << "\n";
  output->keep();
  return 0;
}
