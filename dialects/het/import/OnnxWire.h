//===- OnnxWire.h - read ONNX files without copying weight bytes -*- C++ -*-===//
//
// protobuf's generated parser copies every raw_data payload into a
// std::string, so parsing a 500 MB model needs 500 MB more memory. This reader
// walks the protobuf wire format of a memory-mapped file and writes a copy of
// the model in which every large tensor payload is replaced by a note of where
// it lies in the file. The copy is small and is what protobuf then parses.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_DIALECTS_HET_IMPORT_ONNXWIRE_H
#define HETPLAN_DIALECTS_HET_IMPORT_ONNXWIRE_H

#include <cstdint>
#include <string>
#include <string_view>

namespace hetplan::import {

/// Payloads larger than this many bytes stay in the file; smaller ones (shape
/// vectors, scales, scalars) are kept, since shape rules need their values.
constexpr int64_t kInlinePayloadLimit = 256;

/// TensorProto.external_data keys that record where a stripped payload lies
/// in the model file itself.
constexpr const char *kOffsetKey = "hetplan.offset";
constexpr const char *kLengthKey = "hetplan.length";
constexpr const char *kEncodingKey = "hetplan.encoding";

/// Writes into `out` the serialized ModelProto `model` with large tensor
/// payloads (raw_data and packed typed data) replaced by location notes.
/// Returns false and sets `error` when `model` is not a well-formed protobuf.
bool stripLargePayloads(std::string_view model, std::string &out,
                        std::string &error,
                        int64_t inlineLimit = kInlinePayloadLimit);

} // namespace hetplan::import

#endif
