//===- Passes.td - het passes ------------------------------*- tablegen -*-===//

#ifndef HET_PASSES
#define HET_PASSES

include "mlir/Pass/PassBase.td"

def HetPrintSummary : Pass<"het-print-summary", "::mlir::ModuleOp"> {
  let summary = "Print a short summary of each het.graph";
  let description = [{
    For every `het.graph`: node counts per op type, parameter count and bytes
    (from `het.weight` ops), inputs and outputs with their symbolic dims. The
    IR is left unchanged. This is what `hetplan summary` prints.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print the summary as JSON instead of text">
  ];
}

#endif // HET_PASSES
