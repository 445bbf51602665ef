//===- ServePrompts.h - the JSON-lines prompts hetplan serve reads -*- C++ -*-===//
//
// One JSON object per line: {"prompt": [token ids], "max_new_tokens": N,
// "id": anything}; blank lines are skipped. Outside input: fuzzed by
// test/fuzz/FuzzPrompts.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Generate.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <vector>

namespace hetplan::tools {

struct PromptLine {
  GenerateRequest request;
  llvm::json::Value id = nullptr;
};

/// The requests of `text`, each with `defaultMaxNew` new tokens unless its
/// line says otherwise; or one error naming `name:LINE`.
llvm::Expected<std::vector<PromptLine>> parsePrompts(llvm::StringRef text, llvm::StringRef name,
                                                     int defaultMaxNew);

} // namespace hetplan::tools
