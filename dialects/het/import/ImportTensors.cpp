//===- ImportTensors.cpp - ONNX tensor payloads -----------------------------===//
//
// Inline tensor data (typed fields or raw bytes, packed sub-byte types) and
// external data files, as dense attributes.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/Importer.h"

#include "dialects/het/import/OnnxWire.h"
#include "runtime/include/hetplan/runtime/Checked.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstring>

namespace hetplan::import::detail {

/// Decodes packed little-endian `bytes` into `count` units of `bits` each.
void Importer::unpackRaw(llvm::StringRef bytes, unsigned bits, int64_t count,
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
Attribute Importer::denseValue(const onnx::TensorProto &t, RankedTensorType type,
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
Attribute Importer::tensorValue(const onnx::TensorProto &t, RankedTensorType &type,
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
               "' for " + what.str() + ": " + ec.message() +
               " (--allow-missing-weights plans from the shapes alone)");
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

} // namespace hetplan::import::detail
