//===- ImportAttributes.cpp - ONNX node attributes --------------------------===//
//
// Node attributes as MLIR attributes (graphs are imported as regions by
// ImportGraph.cpp).
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/Importer.h"

namespace hetplan::import::detail {

Attribute Importer::convertAttribute(const onnx::AttributeProto &a) {
  std::string what = "attribute '" + a.name() + "'";
  if (!a.ref_attr_name().empty())
    failHere("unsupported: " + what + " refers to a function attribute");
  auto tensorAttr = [&](const onnx::TensorProto &t) -> Attribute {
    RankedTensorType type;
    Attribute v = tensorValue(t, type, what);
    if (isa<ExternAttr>(v)) // keep the type beside the reference
      return builder.getDictionaryAttr(
          {builder.getNamedAttr("type", TypeAttr::get(type)),
           builder.getNamedAttr("data", v)});
    return v;
  };
  switch (a.type()) {
  case onnx::AttributeProto::FLOAT:
    return builder.getF32FloatAttr(a.f());
  case onnx::AttributeProto::INT:
    return builder.getI64IntegerAttr(a.i());
  case onnx::AttributeProto::STRING:
    return builder.getStringAttr(a.s());
  case onnx::AttributeProto::TENSOR:
    return tensorAttr(a.t());
  case onnx::AttributeProto::FLOATS:
    return builder.getDenseF32ArrayAttr(
        SmallVector<float>(a.floats().begin(), a.floats().end()));
  case onnx::AttributeProto::INTS:
    return builder.getDenseI64ArrayAttr(
        SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
  case onnx::AttributeProto::STRINGS: {
    SmallVector<Attribute> strings;
    for (const auto &s : a.strings())
      strings.push_back(builder.getStringAttr(s));
    return builder.getArrayAttr(strings);
  }
  case onnx::AttributeProto::TENSORS: {
    SmallVector<Attribute> tensors;
    for (const auto &t : a.tensors())
      tensors.push_back(tensorAttr(t));
    return builder.getArrayAttr(tensors);
  }
  case onnx::AttributeProto::TYPE_PROTO:
    return TypeAttr::get(convertType(a.tp(), what));
  case onnx::AttributeProto::TYPE_PROTOS: {
    SmallVector<Attribute> types;
    for (const auto &t : a.type_protos())
      types.push_back(TypeAttr::get(convertType(t, what)));
    return builder.getArrayAttr(types);
  }
  case onnx::AttributeProto::SPARSE_TENSOR:
  case onnx::AttributeProto::SPARSE_TENSORS:
    failHere("unsupported: " + what + " is a sparse tensor");
  default:
    break;
  }
  // Old writers leave `type` unset; the field that is present tells.
  if (a.has_f())
    return builder.getF32FloatAttr(a.f());
  if (a.has_i())
    return builder.getI64IntegerAttr(a.i());
  if (a.has_s())
    return builder.getStringAttr(a.s());
  if (a.has_t())
    return tensorAttr(a.t());
  if (a.ints_size())
    return builder.getDenseI64ArrayAttr(
        SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
  if (a.floats_size())
    return builder.getDenseF32ArrayAttr(
        SmallVector<float>(a.floats().begin(), a.floats().end()));
  failHere(what + " has no value");
}

} // namespace hetplan::import::detail
