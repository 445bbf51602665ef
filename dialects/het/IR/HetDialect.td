//===- HetDialect.td - the het dialect ---------------------*- tablegen -*-===//
//
// The het dialect holds one neural network imported from ONNX, and later the
// planning decisions made about it (costs, stages, communication).
//
//===----------------------------------------------------------------------===//

#ifndef HET_DIALECT
#define HET_DIALECT

include "mlir/IR/OpBase.td"

def Het_Dialect : Dialect {
  let name = "het";
  let cppNamespace = "::hetplan::het";
  let summary = "A neural network and its plan across heterogeneous devices.";
  let description = [{
    The `het` dialect keeps every ONNX node as one generic `het.node` op, so
    all of ONNX's operators import without a hand-written op each. Knowledge
    about particular operators (shapes, FLOPs, bytes) lives in registries keyed
    by op type. Parameters are `het.weight` ops that name their bytes in the
    model file instead of copying them into the IR.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

class Het_Op<string mnemonic, list<Trait> traits = []>
    : Op<Het_Dialect, mnemonic, traits>;

#endif // HET_DIALECT
