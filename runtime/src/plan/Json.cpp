//===- Json.cpp - the runtime's JSON text ---------------------------------===//
#include "hetplan/runtime/Json.h"

#include <cstdio>

namespace hetplan::runtime::json {

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += char(c);
  }
  return out + "\"";
}

std::string number(double value, const char *format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

} // namespace hetplan::runtime::json
