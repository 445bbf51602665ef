//===- Commands.h - hetplan subcommands in their own files ------*- C++ -*-===//
#ifndef HETPLAN_TOOLS_HETPLAN_COMMANDS_H
#define HETPLAN_TOOLS_HETPLAN_COMMANDS_H

#include "llvm/Support/CommandLine.h"

#include <string>

namespace hetplan::tools {

extern llvm::cl::SubCommand compileCmd;
extern llvm::cl::SubCommand explainCmd;
extern llvm::cl::SubCommand runCmd;
extern llvm::cl::SubCommand serveCmd;
extern llvm::cl::SubCommand profileCmd;

/// The command line as typed (main sets it; `hetplan profile` records it).
extern std::string commandLine;

/// `hetplan compile`: model + cluster -> plan file and a summary.
int runCompile();
/// `hetplan explain`: a plan file for people (and an SVG timeline).
int runExplain();
/// `hetplan run`: execute an inference plan on CPU threads (Run.cpp).
int runRun();

/// `hetplan profile`: measure this host, write a cluster file (Profile.cpp).
int runProfileCommand();

/// `hetplan serve`: generate tokens for JSON-line prompts (Serve.cpp).
int runServe();
/// Prints "hetplan: error: MESSAGE" and returns 1.
int fail(const llvm::Twine &message);

} // namespace hetplan::tools

#endif
