//===- CrashReport.h - what a crash of a hetplan tool tells the user -*- C++ -*-===//
//
// LLVM's signal handler prints a stack trace after "PLEASE submit a bug report
// to https://github.com/llvm/llvm-project/issues/": the wrong place for a
// crash in hetplan. Every tool installs this text instead, before it parses
// its command line.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_TOOLS_CRASHREPORT_H
#define HETPLAN_TOOLS_CRASHREPORT_H

#include "llvm/Support/PrettyStackTrace.h"

namespace hetplan::tools {

inline void installCrashReport() {
  llvm::setBugReportMsg(
      "hetplan crashed: this is a bug in hetplan, not in your model. Please report it to the "
      "hetplan developers with the command line below, the model (or `hetplan summary` of it) "
      "and the cluster file, and this stack trace:\n");
}

} // namespace hetplan::tools

#endif
