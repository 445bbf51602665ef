//===- ImportTypes.cpp - ONNX types as MLIR types ---------------------------===//
//
// Element types, tensor types with their symbolic dims, and the type of a
// value by name.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/Importer.h"

namespace hetplan::import::detail {

Type Importer::elementType(int32_t dt) {
  MLIRContext *c = context;
  switch (dt) {
  case onnx::TensorProto::FLOAT: return Float32Type::get(c);
  case onnx::TensorProto::UINT8: return IntegerType::get(c, 8, IntegerType::Unsigned);
  case onnx::TensorProto::INT8: return IntegerType::get(c, 8);
  case onnx::TensorProto::UINT16: return IntegerType::get(c, 16, IntegerType::Unsigned);
  case onnx::TensorProto::INT16: return IntegerType::get(c, 16);
  case onnx::TensorProto::INT32: return IntegerType::get(c, 32);
  case onnx::TensorProto::INT64: return IntegerType::get(c, 64);
  case onnx::TensorProto::STRING: return StringType::get(c);
  case onnx::TensorProto::BOOL: return IntegerType::get(c, 1);
  case onnx::TensorProto::FLOAT16: return Float16Type::get(c);
  case onnx::TensorProto::DOUBLE: return Float64Type::get(c);
  case onnx::TensorProto::UINT32: return IntegerType::get(c, 32, IntegerType::Unsigned);
  case onnx::TensorProto::UINT64: return IntegerType::get(c, 64, IntegerType::Unsigned);
  case onnx::TensorProto::COMPLEX64: return ComplexType::get(Float32Type::get(c));
  case onnx::TensorProto::COMPLEX128: return ComplexType::get(Float64Type::get(c));
  case onnx::TensorProto::BFLOAT16: return BFloat16Type::get(c);
  // Types newer than libonnx 1.12's enum, by their ONNX numbers.
  case 17: return Float8E4M3FNType::get(c);
  case 18: return Float8E4M3FNUZType::get(c);
  case 19: return Float8E5M2Type::get(c);
  case 20: return Float8E5M2FNUZType::get(c);
  case 21: return IntegerType::get(c, 4, IntegerType::Unsigned);
  case 22: return IntegerType::get(c, 4);
  case 23: return Float4E2M1FNType::get(c);
  case 24: return Float8E8M0FNUType::get(c);
  case 25: return IntegerType::get(c, 2, IntegerType::Unsigned);
  case 26: return IntegerType::get(c, 2);
  default:
    return {};
  }
}

Type Importer::requireElementType(int32_t dt, llvm::StringRef what) {
  if (dt == onnx::TensorProto::UNDEFINED)
    failHere(what.str() + " has no element type");
  Type t = elementType(dt);
  if (!t)
    failHere("unsupported element type " + std::to_string(dt) + " in " +
             what.str());
  return t;
}

Type Importer::convertType(const onnx::TypeProto &type, llvm::StringRef what) {
  switch (type.value_case()) {
  case onnx::TypeProto::kTensorType: {
    const auto &tensor = type.tensor_type();
    if (tensor.elem_type() == onnx::TensorProto::UNDEFINED)
      return UnknownType::get(context);
    Type element = requireElementType(tensor.elem_type(), what);
    if (!tensor.has_shape())
      return UnrankedTensorType::get(element);
    SmallVector<int64_t> shape;
    SmallVector<StringAttr> names;
    bool named = false;
    for (const auto &dim : tensor.shape().dim()) {
      if (dim.has_dim_value() && dim.dim_value() >= 0) {
        shape.push_back(dim.dim_value());
        names.push_back(builder.getStringAttr(""));
      } else {
        // An empty name, a negative size or the placeholder `?` (converters
        // write `?` for every unknown dim, batch and height alike) is a dim
        // of its own, named by nothing: never one symbol shared by all.
        const std::string &param = dim.dim_param();
        bool anonymous = param.empty() || param == "?";
        shape.push_back(ShapedType::kDynamic);
        names.push_back(builder.getStringAttr(anonymous ? "" : param));
        named |= !anonymous;
      }
    }
    Attribute encoding = named ? DimsAttr::get(context, names) : Attribute();
    return RankedTensorType::get(shape, element, encoding);
  }
  case onnx::TypeProto::kSequenceType:
    if (!type.sequence_type().has_elem_type())
      return SequenceType::get(context, UnknownType::get(context));
    return SequenceType::get(context,
                             convertType(type.sequence_type().elem_type(), what));
  case onnx::TypeProto::kOptionalType:
    if (!type.optional_type().has_elem_type())
      return OptionalType::get(context, UnknownType::get(context));
    return OptionalType::get(context,
                             convertType(type.optional_type().elem_type(), what));
  case onnx::TypeProto::kMapType:
    return MapType::get(context,
                        requireElementType(type.map_type().key_type(), what),
                        convertType(type.map_type().value_type(), what));
  case onnx::TypeProto::kSparseTensorType:
    failHere("unsupported: " + what.str() + " is a sparse tensor");
  case onnx::TypeProto::kOpaqueType:
    failHere("unsupported: " + what.str() + " has an opaque type");
  default:
    return UnknownType::get(context);
  }
}

/// The type of value `name` from value_info/inputs/outputs, if known.
Type Importer::typeOf(const Scope &scope, llvm::StringRef name) {
  if (const onnx::TypeProto *t = scope.lookupType(name))
    return convertType(*t, "value '" + name.str() + "'");
  return UnknownType::get(context);
}

} // namespace hetplan::import::detail
