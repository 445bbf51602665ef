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

def HetBindShapes : Pass<"het-bind-shapes", "::mlir::ModuleOp"> {
  let summary = "Bind symbolic dims to sizes and give every value its shape";
  let description = [{
    Replaces the named dims of graph inputs (`#het.dims<"batch", ...>`) by the
    sizes given in `dims`, or whole input shapes by `input-shapes`, then walks
    the graph in order and computes each node's output types with het's own
    shape rules (`passes/ShapeRules.cpp`), folding small integer tensors so
    Shape/Gather/Concat chains resolve Reshape and Expand targets. This works
    for any opset, unlike libonnx's inference (opset <= 17). A rule that finds
    the model inconsistent (a Reshape of 12 elements into 10, a MatMul whose
    contraction sizes differ) is an error at that node. Ops without a rule keep
    the types the model declared.

    ```
    hetplan-opt m.mlir --het-bind-shapes="dims=batch=8,sequence=128"
    hetplan-opt m.mlir --het-bind-shapes="input-shapes=x=8x3x640x640 require-static=true"
    ```
  }];
  let options = [
    ListOption<"dims", "dims", "std::string",
               "Symbolic dims to bind, NAME=SIZE (e.g. batch=8,sequence=128)">,
    ListOption<"inputShapes", "input-shapes", "std::string",
               "Whole input shapes, NAME=D0xD1x... (e.g. x=8x3x640x640)">,
    Option<"requireStatic", "require-static", "bool", /*default=*/"false",
           "Fail unless every tensor's shape ends up fully known">
  ];
}

#endif // HET_PASSES
