//===- OnnxImporter.cpp - ONNX to het IR ----------------------------------===//
//
// Reads an ONNX model (binary or text), runs libonnx shape inference where
// libonnx knows the model's opsets, and builds one het.graph. Weight bytes are
// not copied: OnnxWire strips large payloads before protobuf parses the model
// and the weights refer to their place in the file.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/OnnxImporter.h"

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxWire.h"
#include "runtime/include/hetplan/runtime/Checked.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/checker.h"
#include "onnx/defs/parser.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace mlir;
using namespace hetplan;
using namespace hetplan::het;

namespace hetplan::import {

// ONNX 1.22 writes IR version 13 at most.
int64_t maxSupportedIrVersion() { return 13; }

namespace {

constexpr int64_t kMinIrVersion = 3;

/// Domains the importer accepts besides model-local function domains.
const char *const kKnownDomains[] = {
    "",
    "ai.onnx",
    "ai.onnx.ml",
    "ai.onnx.training",
    "ai.onnx.preview",
    "ai.onnx.preview.training",
    "com.microsoft",
    "com.microsoft.nchwc",
    "com.microsoft.experimental",
    "com.ms.internal.nhwc",
    "org.pytorch.aten",
};

/// Thrown inside this file only; importOnnxFile turns it into `error`.
struct ImportError {
  std::string message;
};

[[noreturn]] void fail(const std::string &message) {
  throw ImportError{message};
}

std::string canonicalDomain(const std::string &domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

/// A lexical scope of ONNX value names: a subgraph sees its parents' values.
struct Scope {
  Scope *parent = nullptr;
  llvm::StringMap<Value> values;
  llvm::StringMap<const onnx::TypeProto *> types;

  Value lookup(llvm::StringRef name) const {
    for (const Scope *s = this; s; s = s->parent) {
      auto it = s->values.find(name);
      if (it != s->values.end())
        return it->second;
    }
    return {};
  }
  const onnx::TypeProto *lookupType(llvm::StringRef name) const {
    for (const Scope *s = this; s; s = s->parent) {
      auto it = s->types.find(name);
      if (it != s->types.end())
        return it->second;
    }
    return nullptr;
  }
};

class Importer {
public:
  Importer(MLIRContext *context, llvm::StringRef path,
           const onnx::ModelProto &model, bool allowMissingWeights)
      : context(context), builder(context), path(path.str()), model(model),
        allowMissingWeights(allowMissingWeights) {
    modelDir = llvm::sys::path::parent_path(path).str();
    for (const auto &opset : model.opset_import())
      opsets[canonicalDomain(opset.domain())] = opset.version();
    for (const auto &function : model.functions())
      functionDomains.insert(function.domain());
  }

  OwningOpRef<ModuleOp> run(llvm::StringRef shapeInferenceNote) {
    Location loc = FileLineColLoc::get(context, path, 0, 0);
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    SmallVector<NamedAttribute> opsetAttrs;
    for (const auto &[domain, version] : opsets)
      opsetAttrs.push_back(builder.getNamedAttr(
          domain.empty() ? "ai.onnx" : domain, builder.getI64IntegerAttr(version)));
    std::string producer = model.producer_name();
    if (!model.producer_version().empty())
      producer += " " + model.producer_version();
    auto op = module->getOperation();
    op->setAttr("het.source", builder.getStringAttr(path));
    op->setAttr("het.ir_version", builder.getI64IntegerAttr(model.ir_version()));
    op->setAttr("het.opsets", builder.getDictionaryAttr(opsetAttrs));
    if (!producer.empty())
      op->setAttr("het.producer", builder.getStringAttr(producer));
    op->setAttr("het.shape_inference", builder.getStringAttr(shapeInferenceNote));

    builder.setInsertionPointToEnd(module->getBody());
    importTopGraph(model.graph());
    return module;
  }

private:
  //===--------------------------------------------------------------------===//
  // Errors
  //===--------------------------------------------------------------------===//

  [[noreturn]] void failHere(const std::string &message) {
    std::string where = path + ": ";
    if (currentNode) {
      where += "node ";
      if (!currentNode->name().empty())
        where += "'" + currentNode->name() + "' ";
      else
        where += "#" + std::to_string(currentNodeIndex) + " ";
      where += "(" + currentNode->op_type() + "): ";
    }
    fail(where + message);
  }

  //===--------------------------------------------------------------------===//
  // Types
  //===--------------------------------------------------------------------===//

  Type elementType(int32_t dt) {
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

  Type requireElementType(int32_t dt, llvm::StringRef what) {
    if (dt == onnx::TensorProto::UNDEFINED)
      failHere(what.str() + " has no element type");
    Type t = elementType(dt);
    if (!t)
      failHere("unsupported element type " + std::to_string(dt) + " in " +
               what.str());
    return t;
  }

  Type convertType(const onnx::TypeProto &type, llvm::StringRef what) {
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
          shape.push_back(ShapedType::kDynamic);
          names.push_back(builder.getStringAttr(dim.dim_param()));
          named |= !dim.dim_param().empty();
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
  Type typeOf(const Scope &scope, llvm::StringRef name) {
    if (const onnx::TypeProto *t = scope.lookupType(name))
      return convertType(*t, "value '" + name.str() + "'");
    return UnknownType::get(context);
  }

  //===--------------------------------------------------------------------===//
  // Tensors
  //===--------------------------------------------------------------------===//

  static bool isSubByte(Type element) {
    return element.isIntOrFloat() && element.getIntOrFloatBitWidth() < 8 &&
           !element.isInteger(1);
  }

  /// Decodes packed little-endian `bytes` into `count` units of `bits` each.
  void unpackRaw(llvm::StringRef bytes, unsigned bits, int64_t count,
                 std::vector<uint64_t> &out, llvm::StringRef what) {
    unsigned storage = bits == 1 ? 8 : bits;
    int64_t need = (int64_t(storage) * count + 7) / 8;
    if (int64_t(bytes.size()) != need)
      failHere(what.str() + " holds " + std::to_string(bytes.size()) +
               " bytes of data but its shape and type need " +
               std::to_string(need));
    out.resize(count);
    const auto *data = reinterpret_cast<const uint8_t *>(bytes.data());
    for (int64_t i = 0; i < count; ++i) {
      if (storage >= 8) {
        uint64_t v = 0;
        std::memcpy(&v, data + i * (storage / 8), storage / 8); // little-endian host
        out[i] = v;
      } else {
        unsigned perByte = 8 / storage;
        out[i] = (data[i / perByte] >> (storage * (i % perByte))) &
                 ((1u << storage) - 1);
      }
    }
  }

  /// The dense value of an inline tensor.
  Attribute denseValue(const onnx::TensorProto &t, RankedTensorType type,
                       llvm::StringRef what) {
    Type element = type.getElementType();
    int64_t count = type.getNumElements();
    if (isa<StringType>(element)) {
      if (t.string_data_size() != count)
        failHere(what.str() + " has " + std::to_string(t.string_data_size()) +
                 " strings for " + std::to_string(count) + " elements");
      SmallVector<llvm::StringRef> strings;
      for (const auto &s : t.string_data())
        strings.push_back(s);
      return DenseStringElementsAttr::get(type, strings);
    }
    auto complex = dyn_cast<ComplexType>(element);
    Type unit = complex ? complex.getElementType() : element;
    unsigned bits = unit.getIntOrFloatBitWidth();
    int64_t units = complex ? 2 * count : count;
    std::vector<uint64_t> values;
    auto checkCount = [&](int64_t have) {
      if (have != units)
        failHere(what.str() + " has " + std::to_string(have) + " values for " +
                 std::to_string(units) + " elements");
    };
    if (t.has_raw_data()) {
      unpackRaw(t.raw_data(), bits, units, values, what);
    } else {
      switch (t.data_type()) {
      case onnx::TensorProto::FLOAT:
      case onnx::TensorProto::COMPLEX64:
        checkCount(t.float_data_size());
        for (float f : t.float_data()) {
          uint32_t v;
          std::memcpy(&v, &f, 4);
          values.push_back(v);
        }
        break;
      case onnx::TensorProto::DOUBLE:
      case onnx::TensorProto::COMPLEX128:
        checkCount(t.double_data_size());
        for (double d : t.double_data()) {
          uint64_t v;
          std::memcpy(&v, &d, 8);
          values.push_back(v);
        }
        break;
      case onnx::TensorProto::INT64:
        checkCount(t.int64_data_size());
        values.assign(t.int64_data().begin(), t.int64_data().end());
        break;
      case onnx::TensorProto::UINT32:
      case onnx::TensorProto::UINT64:
        checkCount(t.uint64_data_size());
        values.assign(t.uint64_data().begin(), t.uint64_data().end());
        break;
      default:
        if (isSubByte(element)) { // int32_data holds the packed bytes
          std::string bytes;
          for (int32_t v : t.int32_data())
            bytes += char(uint8_t(v));
          unpackRaw(bytes, bits, units, values, what);
        } else {
          checkCount(t.int32_data_size());
          for (int32_t v : t.int32_data())
            values.push_back(uint32_t(v));
        }
      }
    }
    if (auto intType = dyn_cast<IntegerType>(unit)) {
      SmallVector<APInt> ints;
      ints.reserve(units);
      for (uint64_t v : values)
        ints.emplace_back(bits, bits == 1 ? uint64_t(v != 0) : v,
                          /*isSigned=*/false, /*implicitTrunc=*/true);
      return DenseElementsAttr::get(type, ints);
    }
    auto floatType = cast<FloatType>(unit);
    const llvm::fltSemantics &sem = floatType.getFloatSemantics();
    SmallVector<APFloat> floats;
    floats.reserve(units);
    for (uint64_t v : values)
      floats.emplace_back(sem, APInt(bits, v, false, true));
    if (!complex)
      return DenseElementsAttr::get(type, floats);
    SmallVector<std::complex<APFloat>> pairs;
    for (int64_t i = 0; i < count; ++i)
      pairs.emplace_back(floats[2 * i], floats[2 * i + 1]);
    return DenseElementsAttr::get(type, pairs);
  }

  /// The bytes of `t` as an attribute: a #het.extern reference when they lie
  /// in a file, dense elements when the tensor is small and inline.
  Attribute tensorValue(const onnx::TensorProto &t, RankedTensorType &type,
                        llvm::StringRef what) {
    if (t.has_segment())
      failHere("unsupported: " + what.str() + " is a segment of a tensor");
    SmallVector<int64_t> shape;
    for (int64_t d : t.dims()) {
      if (d < 0)
        failHere(what.str() + " has a negative dimension");
      shape.push_back(d);
    }
    Type element = requireElementType(t.data_type(), what);
    type = RankedTensorType::get(shape, element);
    // Every size below (raw bytes, external lengths) multiplies the count:
    // it must fit int64 in bits (found by the onnx-import fuzzer).
    {
      int64_t count = 0, bits = 0;
      if (!runtime::numelInto(shape.data(), shape.size(), count) ||
          !runtime::mulInto(count, 128, bits))
      {
        std::string dims;
        for (int64_t d : shape)
          dims += (dims.empty() ? "" : "x") + std::to_string(d);
        failHere(what.str() + " declares shape [" + dims +
                 "], more elements than a tensor can hold");
      }
    }

    llvm::StringMap<std::string> ext;
    for (const auto &entry : t.external_data())
      ext[entry.key()] = entry.value();
    auto toInt = [&](llvm::StringRef key, int64_t dflt) -> int64_t {
      auto it = ext.find(key);
      if (it == ext.end())
        return dflt;
      int64_t v;
      if (llvm::StringRef(it->second).getAsInteger(10, v) || v < 0)
        failHere(what.str() + " has a bad external_data " + key.str() +
                 " '" + it->second + "'");
      return v;
    };

    if (ext.count(kOffsetKey)) // stripped payload of the model file itself
      return ExternAttr::get(context, "", toInt(kOffsetKey, 0),
                             toInt(kLengthKey, 0), ext[kEncodingKey]);

    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      auto loc = ext.find("location");
      if (loc == ext.end() || loc->second.empty())
        failHere(what.str() + " is stored externally but names no location");
      // ONNX's rule: a relative path that stays inside the model's folder
      // (a model must not make the tools read /etc/passwd).
      if (llvm::sys::path::is_absolute(loc->second) ||
          llvm::is_contained(llvm::make_range(llvm::sys::path::begin(loc->second),
                                              llvm::sys::path::end(loc->second)),
                             ".."))
        failHere("external data of " + what.str() + " is at '" + loc->second +
                 "', outside the model's folder (locations must be relative and "
                 "must not contain '..')");
      llvm::SmallString<256> file(modelDir);
      llvm::sys::path::append(file, loc->second);
      uint64_t fileSize;
      std::error_code ec = llvm::sys::fs::file_size(file, fileSize);
      if (ec && allowMissingWeights) {
        // Without the file, the length is what the tensor type needs.
        int64_t bits = element.isIntOrFloat() ? element.getIntOrFloatBitWidth()
                       : isa<ComplexType>(element)
                           ? 2 * cast<ComplexType>(element)
                                     .getElementType()
                                     .getIntOrFloatBitWidth()
                           : 0;
        int64_t need = ((bits == 1 ? 8 : bits) * type.getNumElements() + 7) / 8;
        return ExternAttr::get(context, loc->second, toInt("offset", 0),
                               toInt("length", need), "raw");
      }
      if (ec)
        failHere("missing external-data file '" + std::string(file) +
                 "' for " + what.str() + ": " + ec.message());
      int64_t offset = toInt("offset", 0);
      int64_t length = toInt("length", int64_t(fileSize) - offset);
      if (offset < 0 || length < 0 || uint64_t(offset) > fileSize ||
          uint64_t(length) > fileSize - uint64_t(offset))
        failHere("external data of " + what.str() + " (offset " +
                 std::to_string(offset) + ", length " + std::to_string(length) +
                 ") runs past the end of '" + std::string(file) + "' (" +
                 std::to_string(fileSize) + " bytes)");
      return ExternAttr::get(context, loc->second, offset, length, "raw");
    }
    return denseValue(t, type, what);
  }

  //===--------------------------------------------------------------------===//
  // Attributes
  //===--------------------------------------------------------------------===//

  Attribute convertAttribute(const onnx::AttributeProto &a) {
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

  static bool isGraphAttribute(const onnx::AttributeProto &a) {
    return a.type() == onnx::AttributeProto::GRAPH ||
           a.type() == onnx::AttributeProto::GRAPHS ||
           (a.type() == onnx::AttributeProto::UNDEFINED &&
            (a.has_g() || a.graphs_size()));
  }

  //===--------------------------------------------------------------------===//
  // Graphs and nodes
  //===--------------------------------------------------------------------===//

  Location nodeLoc(const onnx::NodeProto &node) {
    std::string name = node.name();
    if (name.empty() && node.output_size())
      name = node.output(0);
    return NameLoc::get(builder.getStringAttr(name),
                        FileLineColLoc::get(context, path, 0, 0));
  }

  void collectTypes(const onnx::GraphProto &g, Scope &scope) {
    for (const auto &vi : g.value_info())
      if (vi.has_type())
        scope.types[vi.name()] = &vi.type();
    for (const auto &vi : g.input())
      if (vi.has_type())
        scope.types[vi.name()] = &vi.type();
    for (const auto &vi : g.output())
      if (vi.has_type())
        scope.types[vi.name()] = &vi.type();
  }

  /// Imports weights and nodes of `g` at the builder's insertion point and
  /// returns the values of its outputs. Inputs must already be in `scope`.
  SmallVector<Value> importBody(const onnx::GraphProto &g, Scope &scope) {
    if (g.sparse_initializer_size())
      failHere("unsupported: sparse initializer '" +
               g.sparse_initializer(0).values().name() + "' in graph '" +
               g.name() + "'");
    for (const auto &init : g.initializer()) {
      if (init.name().empty())
        failHere("an initializer of graph '" + g.name() + "' has no name");
      RankedTensorType type;
      Attribute value =
          tensorValue(init, type, "initializer '" + init.name() + "'");
      Location loc = NameLoc::get(builder.getStringAttr(init.name()),
                                  FileLineColLoc::get(context, path, 0, 0));
      auto weight = WeightOp::create(
          builder, loc, type, builder.getStringAttr(init.name()),
          dyn_cast<ElementsAttr>(value), dyn_cast<ExternAttr>(value));
      scope.values[init.name()] = weight;
    }

    llvm::StringSet<> producedHere;
    for (const auto &node : g.node())
      for (const auto &out : node.output())
        if (!out.empty())
          producedHere.insert(out);

    Value none;
    int index = 0;
    for (const auto &node : g.node()) {
      currentNode = &node;
      currentNodeIndex = index++;
      SmallVector<Value> inputs;
      for (const auto &name : node.input()) {
        if (name.empty()) {
          if (!none)
            none = NoneOp::create(builder, builder.getUnknownLoc(), builder.getNoneType());
          inputs.push_back(none);
          continue;
        }
        Value v = scope.lookup(name);
        if (!v) {
          if (producedHere.contains(name))
            failHere("uses '" + name +
                     "' before it is defined (the graph is not in "
                     "topological order or has a cycle)");
          failHere("uses '" + name + "', which no input, initializer or "
                                     "node defines");
        }
        inputs.push_back(v);
      }
      importNode(node, inputs, scope);
      currentNode = nullptr;
    }

    SmallVector<Value> outputs;
    for (const auto &out : g.output()) {
      Value v = scope.lookup(out.name());
      if (!v)
        failHere("graph '" + g.name() + "' output '" + out.name() +
                 "' is not defined by any input, initializer or node");
      outputs.push_back(v);
    }
    return outputs;
  }

  void importNode(const onnx::NodeProto &node, ArrayRef<Value> inputs,
                  Scope &scope) {
    std::string domain = canonicalDomain(node.domain());
    bool known = functionDomains.contains(domain) ||
                 llvm::is_contained(kKnownDomains, llvm::StringRef(domain));
    if (!known)
      failHere("unknown domain '" + node.domain() + "' (hetplan knows ai.onnx, "
               "ai.onnx.ml, ai.onnx.training, ai.onnx.preview(.training), "
               "com.microsoft and the model's own function domains)");
    auto opset = opsets.find(domain);
    if (opset == opsets.end())
      failHere("domain '" + (domain.empty() ? std::string("ai.onnx") : domain) +
               "' is not listed in the model's opset_import");
    Location loc = nodeLoc(node);

    if (domain.empty() && node.op_type() == "Constant") {
      importConstant(node, loc, scope);
      return;
    }

    SmallVector<Type> resultTypes;
    for (const auto &out : node.output())
      resultTypes.push_back(out.empty() ? Type(builder.getNoneType())
                                        : typeOf(scope, out));

    SmallVector<NamedAttribute> attrs;
    SmallVector<const onnx::AttributeProto *> graphAttrs;
    for (const auto &a : node.attribute()) {
      if (isGraphAttribute(a)) {
        graphAttrs.push_back(&a);
        continue;
      }
      attrs.push_back(builder.getNamedAttr(a.name(), convertAttribute(a)));
    }

    SmallVector<const onnx::GraphProto *> bodies;
    SmallVector<Attribute> regionNames;
    for (const auto *a : graphAttrs) {
      if (a->has_g()) {
        bodies.push_back(&a->g());
        regionNames.push_back(builder.getStringAttr(a->name()));
      }
      for (const auto &g : a->graphs()) {
        bodies.push_back(&g);
        regionNames.push_back(builder.getStringAttr(a->name()));
      }
    }

    OperationState state(loc, NodeOp::getOperationName());
    state.addOperands(inputs);
    state.addTypes(resultTypes);
    state.addAttribute("op_type", builder.getStringAttr(node.op_type()));
    if (!domain.empty())
      state.addAttribute("domain", builder.getStringAttr(domain));
    state.addAttribute("opset", builder.getI64IntegerAttr(opset->second));
    if (!attrs.empty())
      state.addAttribute("attrs", builder.getDictionaryAttr(attrs));
    if (!regionNames.empty())
      state.addAttribute("region_names", builder.getArrayAttr(regionNames));
    if (!node.name().empty())
      state.addAttribute("name", builder.getStringAttr(node.name()));
    for (size_t i = 0; i < bodies.size(); ++i)
      state.addRegion();
    Operation *op = builder.create(state);

    for (auto [i, body] : llvm::enumerate(bodies))
      importSubgraph(*body, op->getRegion(i), scope);

    for (auto [i, out] : llvm::enumerate(node.output()))
      if (!out.empty())
        scope.values[out] = op->getResult(i);
  }

  void importSubgraph(const onnx::GraphProto &g, Region &region,
                      Scope &outer) {
    const onnx::NodeProto *savedNode = currentNode;
    int savedIndex = currentNodeIndex;
    OpBuilder::InsertionGuard guard(builder);
    Scope scope;
    scope.parent = &outer;
    collectTypes(g, scope);
    Block *block = new Block();
    region.push_back(block);
    for (const auto &in : g.input()) {
      Type t = in.has_type() ? convertType(in.type(), "input '" + in.name() + "'")
                             : Type(UnknownType::get(context));
      scope.values[in.name()] =
          block->addArgument(t, NameLoc::get(builder.getStringAttr(in.name())));
    }
    builder.setInsertionPointToEnd(block);
    SmallVector<Value> outputs = importBody(g, scope);
    currentNode = savedNode;
    currentNodeIndex = savedIndex;
    ReturnOp::create(builder, builder.getUnknownLoc(), outputs);
  }

  void importConstant(const onnx::NodeProto &node, Location loc, Scope &scope) {
    if (node.output_size() != 1 || node.attribute_size() != 1)
      failHere("a Constant needs exactly one output and one value attribute");
    const auto &a = node.attribute(0);
    RankedTensorType type;
    Attribute value;
    auto dense = [&](Type element, auto values) {
      type = RankedTensorType::get(
          a.name().size() > 6 && a.name().back() == 's'
              ? SmallVector<int64_t>{int64_t(values.size())}
              : SmallVector<int64_t>{},
          element);
      return values;
    };
    const std::string &n = a.name();
    if (n == "value") {
      value = tensorValue(a.t(), type, "attribute 'value'");
    } else if (n == "value_float") {
      dense(builder.getF32Type(), SmallVector<float>{a.f()});
      value = DenseElementsAttr::get(type, ArrayRef<float>{a.f()});
    } else if (n == "value_floats") {
      auto v = dense(builder.getF32Type(),
                     SmallVector<float>(a.floats().begin(), a.floats().end()));
      value = DenseElementsAttr::get(type, ArrayRef<float>(v));
    } else if (n == "value_int") {
      dense(builder.getI64Type(), SmallVector<int64_t>{a.i()});
      value = DenseElementsAttr::get(type, ArrayRef<int64_t>{a.i()});
    } else if (n == "value_ints") {
      auto v = dense(builder.getI64Type(),
                     SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
      value = DenseElementsAttr::get(type, ArrayRef<int64_t>(v));
    } else if (n == "value_string") {
      dense(StringType::get(context), SmallVector<llvm::StringRef>{a.s()});
      value = DenseStringElementsAttr::get(type, {llvm::StringRef(a.s())});
    } else if (n == "value_strings") {
      auto v = dense(StringType::get(context),
                     SmallVector<llvm::StringRef>(a.strings().begin(),
                                                  a.strings().end()));
      value = DenseStringElementsAttr::get(type, v);
    } else if (n == "sparse_value") {
      failHere("unsupported: sparse Constant value");
    } else {
      failHere("unknown Constant attribute '" + n + "'");
    }
    auto op = ConstantOp::create(builder, loc, type, value);
    scope.values[node.output(0)] = op;
  }

  void importTopGraph(const onnx::GraphProto &g) {
    Scope scope;
    collectTypes(g, scope);
    llvm::StringSet<> initializers;
    for (const auto &init : g.initializer())
      initializers.insert(init.name());

    // Inputs that have an initializer are overridable defaults (IR < 4
    // style): they are weights, not model inputs.
    SmallVector<const onnx::ValueInfoProto *> inputs;
    SmallVector<Type> inputTypes;
    for (const auto &in : g.input()) {
      if (initializers.contains(in.name()))
        continue;
      if (!in.has_type())
        failHere("graph input '" + in.name() + "' has no type");
      inputs.push_back(&in);
      inputTypes.push_back(convertType(in.type(), "input '" + in.name() + "'"));
    }

    std::string name = g.name().empty() ? "main" : g.name();
    auto graph = GraphOp::create(builder, FileLineColLoc::get(context, path, 0, 0),
                                 name, builder.getFunctionType(inputTypes, {}));
    Block *block = new Block();
    graph.getBody().push_back(block);
    SmallVector<Attribute> argAttrs;
    for (auto [in, type] : llvm::zip(inputs, inputTypes)) {
      scope.values[in->name()] = block->addArgument(
          type, NameLoc::get(builder.getStringAttr(in->name())));
      argAttrs.push_back(builder.getDictionaryAttr(
          builder.getNamedAttr("het.name", builder.getStringAttr(in->name()))));
    }

    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToEnd(block);
    SmallVector<Value> outputs = importBody(g, scope);
    ReturnOp::create(builder, builder.getUnknownLoc(), outputs);

    SmallVector<Type> resultTypes;
    SmallVector<Attribute> resAttrs;
    for (auto [value, out] : llvm::zip(outputs, g.output())) {
      resultTypes.push_back(value.getType());
      resAttrs.push_back(builder.getDictionaryAttr(
          builder.getNamedAttr("het.name", builder.getStringAttr(out.name()))));
    }
    graph.setFunctionTypeAttr(
        TypeAttr::get(builder.getFunctionType(inputTypes, resultTypes)));
    if (!argAttrs.empty())
      graph.setArgAttrsAttr(builder.getArrayAttr(argAttrs));
    if (!resAttrs.empty())
      graph.setResAttrsAttr(builder.getArrayAttr(resAttrs));
  }

  MLIRContext *context;
  OpBuilder builder;
  std::string path;
  std::string modelDir;
  const onnx::ModelProto &model;
  bool allowMissingWeights;
  std::map<std::string, int64_t> opsets; // sorted: deterministic output
  llvm::StringSet<> functionDomains;
  const onnx::NodeProto *currentNode = nullptr;
  int currentNodeIndex = 0;
};

bool looksLikeText(llvm::StringRef path, llvm::StringRef bytes) {
  if (path.ends_with(".onnxtext") || path.ends_with(".txt"))
    return true;
  llvm::StringRef head = bytes.ltrim();
  return head.starts_with("<");
}

/// Runs libonnx shape inference when libonnx knows every imported opset, and
/// says in one line what happened (recorded in the IR for the curious).
std::string inferShapesInProcess(onnx::ModelProto &model) {
  const auto &ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  // A domain libonnx has no schemas for (com.microsoft, ...) only leaves its
  // own nodes untyped; a known domain at a newer version than libonnx knows
  // would be typed by outdated schemas, so inference is skipped then.
  std::string unknownDomains;
  for (const auto &opset : model.opset_import()) {
    std::string domain = canonicalDomain(opset.domain());
    auto it = ranges.find(domain);
    if (it == ranges.end()) {
      unknownDomains += (unknownDomains.empty() ? "" : ", ") + domain;
      continue;
    }
    if (opset.version() > it->second.second)
      return "skipped: opset " + std::to_string(opset.version()) + " of '" +
             (domain.empty() ? std::string("ai.onnx") : domain) +
             "' is newer than libonnx knows (" +
             std::to_string(it->second.second) + "); types come from value_info";
  }
  // libonnx's inference functions index attributes and inputs without
  // checking them (they crash on malformed nodes): every node, subgraphs
  // included, must first pass its schema's own check (attribute types,
  // required attributes, input/output counts). A model with a node that
  // does not is typed from its value_info only (het's own shape rules bind
  // the rest). (Not onnx::checker::check_model: it also checks weights,
  // which the importer strips before parsing.)
  std::map<std::string, int64_t> versions;
  for (const auto &opset : model.opset_import())
    versions[canonicalDomain(opset.domain())] = opset.version();
  std::function<void(const onnx::GraphProto &)> verifyNodes = [&](const onnx::GraphProto &g) {
    for (const auto &node : g.node()) {
      auto v = versions.find(canonicalDomain(node.domain()));
      if (v != versions.end())
        if (const auto *schema = onnx::OpSchemaRegistry::Schema(node.op_type(), int(v->second), node.domain()))
          schema->Verify(node);
      for (const auto &attr : node.attribute()) {
        if (attr.has_g()) verifyNodes(attr.g());
        for (const auto &sub : attr.graphs()) verifyNodes(sub);
      }
    }
  };
  try {
    verifyNodes(model.graph());
    // ONNX's checker over the graph's structure (values defined before use,
    // topological order, ...), on a copy whose initializers are graph
    // inputs: their payloads were stripped, which check_model would refuse.
    onnx::ModelProto shape = model;
    auto *g = shape.mutable_graph();
    std::set<std::string> declared;
    for (const auto &in : g->input()) declared.insert(in.name());
    for (const auto &init : g->initializer()) {
      if (declared.count(init.name())) continue;
      auto *in = g->add_input();
      in->set_name(init.name());
      auto *tt = in->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(init.data_type());
      auto *sh = tt->mutable_shape();
      for (int64_t d : init.dims()) sh->add_dim()->set_dim_value(d);
    }
    g->clear_initializer();
    g->clear_sparse_initializer();
    onnx::checker::check_model(shape);
  } catch (const std::exception &e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return "skipped: a node fails its ONNX schema (" + what + "); types come from value_info";
  }
  try {
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(),
        onnx::ShapeInferenceOptions(/*check_type=*/false, /*error_mode=*/0,
                                    /*data_prop=*/true));
  } catch (const std::exception &e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return "failed: " + what;
  }
  if (!unknownDomains.empty())
    return "onnx (no schemas for " + unknownDomains + ")";
  return "onnx";
}

/// Reads exactly `size` bytes from `fd`, waiting at most until `deadline`.
bool readAll(int fd, char *out, size_t size,
             std::chrono::steady_clock::time_point deadline) {
  while (size > 0) {
    auto left = deadline == std::chrono::steady_clock::time_point::max()
                    ? std::chrono::milliseconds(1000)
                    : std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return false;
    if (ready == 0) continue;
    if (!(p.revents & POLLIN) && (p.revents & (POLLHUP | POLLERR))) return false;
    ssize_t got = ::read(fd, out, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    size -= size_t(got);
  }
  return true;
}

bool writeAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t put = ::send(fd, data, size, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data += put;
    size -= size_t(put);
  }
  return true;
}

} // namespace

// libFuzzer's death callback would save the parent's input as a crash when
// the child dies; the child clears it (weak: absent outside sanitizer builds).
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {

/// libonnx's checker and shape inference (Debian's 1.12) still crash on some
/// malformed models that pass every schema check (found by the onnx-import
/// fuzzer: data propagation through Shape/Gather, GRU, Conv). They run in a
/// forked worker process, on the payload-stripped model: a crash or hang
/// there costs the types libonnx would have inferred (value_info and het's
/// own shape rules type the model instead), never the process. The worker
/// is forked once and serves every import of the process (a fork per model
/// costs the parent copy-on-write faults on all its memory); a worker that
/// died is replaced at the next import.
class ShapeInferenceWorker {
public:
  static constexpr int kTimeoutSeconds = 120;

  std::string infer(onnx::ModelProto &model) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string input;
    if (!model.SerializeToString(&input))
      return "skipped: the model does not serialize for libonnx";
    if (pid <= 0 && !start())
      return "skipped: no worker process for libonnx's shape inference";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
    uint64_t size = input.size();
    uint64_t sizes[2] = {0, 0};
    std::string note, output;
    bool ok = writeAll(fd, reinterpret_cast<const char *>(&size), sizeof size) &&
              writeAll(fd, input.data(), input.size()) &&
              readAll(fd, reinterpret_cast<char *>(sizes), sizeof sizes, deadline) &&
              sizes[0] < (1u << 20) && sizes[1] < (uint64_t(1) << 32);
    if (ok) {
      note.resize(sizes[0]);
      output.resize(sizes[1]);
      ok = readAll(fd, note.data(), note.size(), deadline) &&
           readAll(fd, output.data(), output.size(), deadline);
    }
    onnx::ModelProto inferred;
    if (ok && inferred.ParseFromString(output)) {
      model = std::move(inferred);
      return note;
    }
    bool late = std::chrono::steady_clock::now() >= deadline;
    int status = stop();
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
      return "skipped: libonnx's shape inference crashed on this model (signal " +
             std::to_string(WTERMSIG(status)) + "); types come from value_info";
    if (late)
      return "skipped: libonnx's shape inference ran over " +
             std::to_string(kTimeoutSeconds) + " s; types come from value_info";
    return "skipped: libonnx's shape inference failed; types come from value_info";
  }

  ~ShapeInferenceWorker() { stop(); }

private:
  bool start() {
    // A socket pair, not pipes: a write to a worker that died must fail
    // with EPIPE (MSG_NOSIGNAL), not kill this process with SIGPIPE.
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
    std::fflush(nullptr);
    pid_t child = ::fork();
    if (child < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return false;
    }
    if (child == 0) {
      ::close(fds[0]);
      serve(fds[1]);
    }
    ::close(fds[1]);
    pid = child;
    fd = fds[0];
    return true;
  }

  /// Kills the worker (if any) and returns how it ended.
  int stop() {
    int status = 0;
    if (pid <= 0) return status;
    ::close(fd);
    // A worker that answered wrongly may still run: end it, then reap it.
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid = -1;
    return status;
  }

  [[noreturn]] static void serve(int in) {
    int out = in;
    // Die quietly by the signal: no crash banner, no sanitizer report that
    // a fuzzer would take for the parent's input.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      ::signal(sig, SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto never = std::chrono::steady_clock::time_point::max();
    for (;;) {
      uint64_t size = 0;
      if (!readAll(in, reinterpret_cast<char *>(&size), sizeof size, never))
        ::_exit(0); // the parent closed the pipe or exited
      std::string input(size, '\0'), note, output;
      if (!readAll(in, input.data(), input.size(), never)) ::_exit(0);
      try {
        onnx::ModelProto model;
        if (!model.ParseFromString(input)) ::_exit(3);
        note = inferShapesInProcess(model);
        if (!model.SerializeToString(&output)) ::_exit(3);
      } catch (...) {
        ::_exit(3);
      }
      uint64_t sizes[2] = {note.size(), output.size()};
      if (!writeAll(out, reinterpret_cast<const char *>(sizes), sizeof sizes) ||
          !writeAll(out, note.data(), note.size()) ||
          !writeAll(out, output.data(), output.size()))
        ::_exit(0);
    }
  }

  std::mutex mutex;
  pid_t pid = -1;
  int fd = -1; // this process's end of the socket pair
};

std::string inferShapes(onnx::ModelProto &model) {
  static ShapeInferenceWorker worker;
  return worker.infer(model);
}

} // namespace

OwningOpRef<ModuleOp> importOnnxFile(llvm::StringRef path, MLIRContext *context,
                                     const ImportOptions &options,
                                     std::string &error) {
  context->loadDialect<HetDialect>();
  std::string file = path.str();
  // Regular files only: a FIFO would block and /dev/zero read forever.
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path)) {
    error = file + ": not a regular file";
    return {};
  }
  // mmap (for large files): pages of weight payloads are never touched.
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    error = file + ": cannot open: " + buffer.getError().message();
    return {};
  }
  return importOnnxBytes((*buffer)->getBuffer(), path, context, options, error);
}

OwningOpRef<ModuleOp> importOnnxBytes(llvm::StringRef bytes, llvm::StringRef path,
                                      MLIRContext *context,
                                      const ImportOptions &options,
                                      std::string &error) {
  context->loadDialect<HetDialect>();
  std::string file = path.str();
  try {
    if (bytes.empty())
      fail(file + ": empty file, not an ONNX model");

    onnx::ModelProto model;
    if (looksLikeText(path, bytes)) {
      std::string text = bytes.str();
      onnx::OnnxParser parser(text.c_str());
      auto status = parser.Parse(model);
      if (!status.IsOK())
        fail(file + ": ONNX text parse error: " + status.ErrorMessage());
    } else {
      std::string stripped, wireError;
      if (!stripLargePayloads(std::string_view(bytes.data(), bytes.size()),
                              stripped, wireError))
        fail(file + ": " + wireError);
      if (!model.ParseFromString(stripped))
        fail(file + ": not a valid ONNX protobuf (ModelProto parse failed)");
    }
    if (!model.has_graph())
      fail(file + ": not an ONNX model: it has no graph" +
           (model.ir_version() ? "" : " and no IR version"));
    if (model.ir_version() < kMinIrVersion ||
        model.ir_version() > maxSupportedIrVersion())
      fail(file + ": ONNX IR version " + std::to_string(model.ir_version()) +
           " is not supported (hetplan reads IR versions " +
           std::to_string(kMinIrVersion) + " to " +
           std::to_string(maxSupportedIrVersion()) + ")");

    std::string note = options.shapeInference ? inferShapes(model)
                                              : std::string("skipped: disabled");
    Importer importer(context, path, model, options.allowMissingWeights);
    OwningOpRef<ModuleOp> module = importer.run(note);

    std::string diag;
    {
      ScopedDiagnosticHandler handler(context, [&](Diagnostic &d) {
        if (diag.empty()) {
          // The value's ONNX name, not MLIR's loc(...) syntax.
          Location loc = d.getLocation();
          if (auto name = dyn_cast<NameLoc>(loc))
            diag = "'" + name.getName().str() + "': ";
          diag += d.str();
        }
        return success();
      });
      if (failed(verify(*module)))
        fail(file + ": imported IR does not verify: " + diag);
    }
    return module;
  } catch (const ImportError &e) {
    error = e.message;
  } catch (const std::exception &e) {
    error = file + ": " + e.what();
  }
  // One line: libonnx's messages (the text parser's "Error context:", the
  // checker's) span several.
  std::string oneLine;
  for (char ch : error) {
    if (ch == '\n' || ch == '\r') ch = ' ';
    if (ch == ' ' && !oneLine.empty() && oneLine.back() == ' ') continue;
    oneLine += ch;
  }
  while (!oneLine.empty() && oneLine.back() == ' ') oneLine.pop_back();
  error = oneLine;
  return {};
}

} // namespace hetplan::import
