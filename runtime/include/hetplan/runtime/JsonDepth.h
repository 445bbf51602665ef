//===- JsonDepth.h - refuse JSON nested too deep before parsing it -*- C++ -*-===//
//
// llvm::json's parser recurses once per nesting level: a line of 100,000 '['
// would overflow the stack. The readers of outside JSON lines (hetplan serve's
// prompts, serving traces) check the depth first.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string_view>

namespace hetplan::runtime {

/// Whether `text` opens more than `maxDepth` arrays or objects at once
/// (brackets inside strings do not count).
inline bool jsonNestsDeeperThan(std::string_view text, int maxDepth) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

} // namespace hetplan::runtime
