//===- ServePrompts.h - the JSON-lines prompts hetplan serve reads -*- C++ -*-===//
//
// One JSON object per line: {"prompt": [token ids], "max_new_tokens": N,
// "id": anything}; blank lines are skipped. Encoder-decoders also take
// "encoder": {"INPUT": nested arrays of numbers, one sample without its
// batch dim} (T5: {"input_ids": [ids]}; Whisper: {"input_features":
// [[...], ...]}). Outside input: fuzzed by test/fuzz/FuzzPrompts.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Generate.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <string>
#include <vector>

namespace hetplan::tools {

/// One encoder input of one request as the line wrote it.
struct PromptArray {
  std::vector<int64_t> shape; // at least one dim
  std::vector<double> values; // row-major, product of shape
};

struct PromptLine {
  GenerateRequest request;
  llvm::json::Value id = nullptr;
  int line = 0;                                 // 1-based, in the file
  std::map<std::string, PromptArray> encoder;   // "encoder", when given
};

/// The requests of `text`, each with `defaultMaxNew` new tokens unless its
/// line says otherwise; or one error naming `name:LINE`.
/// A name from the file on one line: control bytes as \xNN.
std::string printableName(llvm::StringRef text);

llvm::Expected<std::vector<PromptLine>> parsePrompts(llvm::StringRef text, llvm::StringRef name,
                                                     int defaultMaxNew);


} // namespace hetplan::tools
