//===- OnnxWire.cpp - read ONNX files without copying weight bytes --------===//

#include "dialects/het/import/OnnxWire.h"

#include <vector>

namespace hetplan::import {
namespace {

// The message kinds whose fields we look into; everything else is copied.
enum class Kind { Model, Graph, Node, Attribute, Tensor, Function };

// Field numbers from onnx.proto.
struct SubField {
  Kind parent;
  uint32_t field;
  Kind child;
};
constexpr SubField kSubFields[] = {
    {Kind::Model, 7, Kind::Graph},       {Kind::Model, 25, Kind::Function},
    {Kind::Graph, 1, Kind::Node},        {Kind::Graph, 5, Kind::Tensor},
    {Kind::Node, 5, Kind::Attribute},    {Kind::Attribute, 5, Kind::Tensor},
    {Kind::Attribute, 6, Kind::Graph},   {Kind::Attribute, 10, Kind::Tensor},
    {Kind::Attribute, 11, Kind::Graph},  {Kind::Function, 7, Kind::Node},
};

// TensorProto payload fields: raw_data (9) and packed float (4) and double
// (10) hold little-endian elements; packed int32 (5), int64 (7) and uint64
// (11) hold varints.
const char *payloadEncoding(uint32_t field) {
  switch (field) {
  case 9:
  case 4:
  case 10:
    return "raw";
  case 5:
  case 7:
  case 11:
    return "varint";
  default:
    return nullptr;
  }
}

class Walker {
public:
  Walker(std::string_view file, int64_t limit) : file(file), limit(limit) {}

  bool strip(Kind kind, size_t begin, size_t end, std::string &out) {
    size_t pos = begin;
    while (pos < end) {
      size_t fieldStart = pos;
      uint64_t tag;
      if (!readVarint(pos, end, tag))
        return fail(fieldStart, "truncated field tag");
      size_t tagEnd = pos;
      uint32_t field = uint32_t(tag >> 3);
      uint32_t wire = uint32_t(tag & 7);
      if (field == 0)
        return fail(fieldStart, "field number 0");
      switch (wire) {
      case 0: { // varint
        uint64_t v;
        if (!readVarint(pos, end, v))
          return fail(fieldStart, "truncated varint");
        break;
      }
      case 1: // fixed64
        if (end - pos < 8)
          return fail(fieldStart, "truncated fixed64");
        pos += 8;
        break;
      case 5: // fixed32
        if (end - pos < 4)
          return fail(fieldStart, "truncated fixed32");
        pos += 4;
        break;
      case 2: { // length-delimited
        uint64_t len;
        if (!readVarint(pos, end, len))
          return fail(fieldStart, "truncated length");
        if (len > end - pos)
          return fail(fieldStart, "field " + std::to_string(field) +
                                      " claims " + std::to_string(len) +
                                      " bytes but only " +
                                      std::to_string(end - pos) +
                                      " remain (a truncated file?)");
        size_t payload = pos;
        pos += len;
        if (const Kind *child = subKind(kind, field)) {
          std::string inner;
          if (!strip(*child, payload, payload + len, inner))
            return false;
          out.append(file.data() + fieldStart, tagEnd - fieldStart);
          appendVarint(out, inner.size());
          out += inner;
          continue;
        }
        if (kind == Kind::Tensor && int64_t(len) > limit) {
          if (const char *encoding = payloadEncoding(field)) {
            pendingNotes.push_back({payload, len, encoding});
            continue; // dropped from the copy
          }
        }
        break;
      }
      default:
        return fail(fieldStart, "unsupported wire type " + std::to_string(wire));
      }
      out.append(file.data() + fieldStart, pos - fieldStart);
    }
    if (kind == Kind::Tensor && !pendingNotes.empty()) {
      // One payload per tensor is all ONNX allows; note it as external_data.
      const Note &note = pendingNotes.back();
      appendEntry(out, kOffsetKey, std::to_string(note.offset));
      appendEntry(out, kLengthKey, std::to_string(note.length));
      appendEntry(out, kEncodingKey, note.encoding);
      pendingNotes.clear();
    }
    return true;
  }

  std::string error;

private:
  struct Note {
    size_t offset;
    uint64_t length;
    const char *encoding;
  };

  static const Kind *subKind(Kind kind, uint32_t field) {
    for (const SubField &s : kSubFields)
      if (s.parent == kind && s.field == field)
        return &s.child;
    return nullptr;
  }

  bool readVarint(size_t &pos, size_t end, uint64_t &value) {
    value = 0;
    for (int shift = 0; shift < 64 && pos < end; shift += 7) {
      uint8_t byte = uint8_t(file[pos++]);
      value |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return false;
  }

  static void appendVarint(std::string &out, uint64_t v) {
    while (v >= 0x80) {
      out += char(uint8_t(v) | 0x80);
      v >>= 7;
    }
    out += char(v);
  }

  static void appendEntry(std::string &out, const std::string &key,
                          const std::string &value) {
    std::string entry;
    entry += char((1 << 3) | 2);
    appendVarint(entry, key.size());
    entry += key;
    entry += char((2 << 3) | 2);
    appendVarint(entry, value.size());
    entry += value;
    out += char((13 << 3) | 2); // TensorProto.external_data
    appendVarint(out, entry.size());
    out += entry;
  }

  bool fail(size_t at, const std::string &what) {
    error = "not a valid ONNX protobuf: " + what + " at byte " +
            std::to_string(at) + " of " + std::to_string(file.size());
    return false;
  }

  std::string_view file;
  int64_t limit;
  std::vector<Note> pendingNotes;
};

} // namespace

bool stripLargePayloads(std::string_view model, std::string &out,
                        std::string &error, int64_t inlineLimit) {
  Walker walker(model, inlineLimit);
  out.clear();
  if (!walker.strip(Kind::Model, 0, model.size(), out)) {
    error = walker.error;
    return false;
  }
  return true;
}

} // namespace hetplan::import
