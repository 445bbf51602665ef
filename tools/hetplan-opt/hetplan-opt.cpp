//===- hetplan-opt.cpp - MLIR optimizer driver for het IR -----------------===//
//
// The lit-testing entry point: parses het IR, runs the passes named on the
// command line, prints the result (mlir-opt with the het dialect and passes).
//
//===----------------------------------------------------------------------===//

#include "dialects/het/IR/HetOps.h"
#include "passes/Passes.h"
#include "tools/CrashReport.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  hetplan::tools::installCrashReport();
  hetplan::het::registerHetPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();

  mlir::DialectRegistry registry;
  registry.insert<hetplan::het::HetDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "hetplan optimizer driver for het IR\n", registry));
}
