//===- HetTypes.td - het dialect types ---------------------*- tablegen -*-===//
//
// ONNX value kinds that the builtin types do not cover.
//
//===----------------------------------------------------------------------===//

#ifndef HET_TYPES
#define HET_TYPES

include "mlir/IR/AttrTypeBase.td"
include "dialects/het/IR/HetDialect.td"

class Het_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Het_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Het_StringType : Het_Type<"String", "string"> {
  let summary = "ONNX string element type";
  let description = [{ Element type of ONNX `tensor(string)` values. }];
}

def Het_UnknownType : Het_Type<"Unknown", "unknown"> {
  let summary = "a value whose type is not known yet";
  let description = [{
    The type of a node output that neither the model's value_info nor ONNX
    shape inference describes (typically an opset newer than libonnx knows).
    Shape binding replaces it.
  }];
}

def Het_SequenceType : Het_Type<"Sequence", "seq"> {
  let summary = "ONNX sequence type";
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
}

def Het_OptionalType : Het_Type<"Optional", "opt"> {
  let summary = "ONNX optional type";
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
}

def Het_MapType : Het_Type<"Map", "map"> {
  let summary = "ONNX map type";
  let parameters = (ins "::mlir::Type":$keyType, "::mlir::Type":$valueType);
  let assemblyFormat = "`<` $keyType `,` $valueType `>`";
}

#endif // HET_TYPES
