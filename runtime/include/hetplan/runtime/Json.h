//===- Json.h - the runtime's JSON text ------------------------*- C++ -*-===//
//
// The runtime writes JSON without LLVM (the CLI's llvm::json is not
// linked here): Chrome traces (Trace.h), a session's profile
// (Session::endProfiling) and hetplan-bench-runtime's report. They share
// these pieces so that strings are escaped one way everywhere.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_JSON_H
#define HETPLAN_RUNTIME_JSON_H

#include <string>
#include <string_view>

namespace hetplan::runtime::json {

/// `text` as a JSON string literal: in double quotes, with `"` and `\`
/// backslash-escaped and control characters (< 0x20) as \u00XX; other
/// bytes (UTF-8) as they are.
std::string quoted(std::string_view text);

/// `value` as printf's `format` prints it (a JSON number for finite values,
/// e.g. "%.9g" or "%.3f").
std::string number(double value, const char *format);

} // namespace hetplan::runtime::json

#endif
