//===- PrintSummary.cpp - the het-print-summary pass ----------------------===//

#include "passes/GraphSummary.h"
#include "passes/Passes.h"

namespace hetplan::het {

#define GEN_PASS_DEF_HETPRINTSUMMARY
#include "passes/Passes.h.inc"

namespace {
struct PrintSummaryPass : impl::HetPrintSummaryBase<PrintSummaryPass> {
  using HetPrintSummaryBase::HetPrintSummaryBase;

  void runOnOperation() override {
    for (auto graph : getOperation().getOps<GraphOp>()) {
      GraphSummary summary = summarizeGraph(graph);
      if (json)
        printSummaryJson(summary, llvm::outs());
      else
        printSummaryText(summary, llvm::outs());
    }
    markAllAnalysesPreserved();
  }
};
} // namespace

} // namespace hetplan::het
