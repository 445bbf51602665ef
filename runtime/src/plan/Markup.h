//===- Markup.h - text inside SVG and HTML --------------------*- C++ -*-===//
//
// Shared by ExplainTimeline.cpp (SVG) and ExplainHtml.cpp (HTML): both put
// names from the plan into markup.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_PLAN_MARKUP_H
#define HETPLAN_RUNTIME_PLAN_MARKUP_H

#include <cstdint>
#include <string>

namespace hetplan::runtime {

/// `text` as markup text or a quoted attribute value: the five special
/// characters as entities (valid in XML 1.0 and HTML5), control characters
/// other than tab and newline dropped (XML 1.0 does not allow them).
inline std::string escapeMarkup(const std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    case '\'': out += "&apos;"; break;
    default:
      if (uint8_t(c) >= 0x20 || c == '\t' || c == '\n')
        out += c;
    }
  }
  return out;
}

} // namespace hetplan::runtime

#endif
