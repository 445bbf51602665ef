//===- FuzzPrompts.cpp - the JSON-lines prompts of hetplan serve ----------===//
//
// Bytes -> parsePrompts (tools/hetplan/ServePrompts.h), what `hetplan serve
// --prompts FILE` reads: either requests (each a non-empty prompt of ids
// >= 0 and 1..2^20 new tokens, encoder inputs rectangular arrays) or one
// error line naming the line.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "tools/hetplan/ServePrompts.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto lines = hetplan::tools::parsePrompts(text, "fuzz.jsonl", 16);
  if (!lines) {
    std::string message = llvm::toString(lines.takeError());
    if (message.empty() || message.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  for (const auto &l : *lines) {
    if (l.request.prompt.empty() || l.request.maxNewTokens < 1 || l.request.maxNewTokens > (1 << 20))
      std::abort();
    // An encoder input is a whole rectangular array: its numbers fill its shape.
    for (const auto &[name, a] : l.encoder) {
      size_t n = 1;
      for (int64_t d : a.shape) {
        if (d < 1) std::abort();
        n *= size_t(d);
      }
      if (a.shape.empty() || n != a.values.size()) std::abort();
    }
  }
  return 0;
}
