//===- HetAttrs.td - het dialect attributes ----------------*- tablegen -*-===//

#ifndef HET_ATTRS
#define HET_ATTRS

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/TensorEncoding.td"
include "dialects/het/IR/HetDialect.td"

class Het_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Het_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Het_DimsAttr : Het_Attr<"Dims", "dims",
    [DeclareAttrInterfaceMethods<VerifiableTensorEncoding>]> {
  let summary = "names of a tensor's symbolic dimensions";
  let description = [{
    A tensor encoding that keeps ONNX `dim_param` names, one entry per
    dimension, empty for a dimension without a name:
    `tensor<?x128xf32, #het.dims<"batch", "">>`. A named dimension must be
    dynamic; shape binding replaces names with sizes.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$names);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// True when at least one dimension has a name.
    bool hasNames() const;
  }];
}

def Het_ExternAttr : Het_Attr<"Extern", "extern"> {
  let summary = "bytes of a tensor that stay in a file";
  let description = [{
    Where a weight's or constant's bytes are: `file` is empty for the model
    file itself, otherwise a path relative to the model's folder (ONNX
    external data). `encoding` is `raw` (little-endian elements, as ONNX
    raw_data) or `varint` (a packed ONNX int32_data/int64_data/uint64_data
    field, decoded by the loader).
  }];
  let parameters = (ins
    StringRefParameter<"file, empty for the model itself">:$file,
    "int64_t":$offset,
    "int64_t":$length,
    StringRefParameter<"raw or varint">:$encoding);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // HET_ATTRS
