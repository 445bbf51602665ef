//===- Units.h - sizes as people read them ---------------------*- C++ -*-===//
//
// Shared by Explain.cpp (text) and ExplainHtml.cpp (HTML), so that both
// print a plan's sizes alike.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_PLAN_UNITS_H
#define HETPLAN_RUNTIME_PLAN_UNITS_H

#include <cstdio>
#include <string>

namespace hetplan::runtime {

/// "512 B", "1.5 KiB", ... "2.0 TiB" (binary units, one decimal).
inline std::string bytesText(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char buffer[64];
  if (unit == 0)
    std::snprintf(buffer, sizeof(buffer), "%.0f B", bytes);
  else
    std::snprintf(buffer, sizeof(buffer), "%.1f %s", bytes, units[unit]);
  return buffer;
}

} // namespace hetplan::runtime

#endif
