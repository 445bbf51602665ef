//===- ReplayMain.cpp - replays a corpus through a fuzz target ------------===//
//
// hetplan-fuzz-replay-<target> FILE_OR_DIR...: feeds every file (folders are
// walked, sorted, recursively) to the target's LLVMFuzzerTestOneInput, as
// libFuzzer would, and prints one line per file with --verbose. A crash
// ends the process with the signal (ctest reports the test failed); so the
// regression corpus, built with gcc in the normal build, runs on every ctest.
// Exits 1 when no file was found (an empty corpus is a mistake).
//
//===----------------------------------------------------------------------===//
#include "CorpusFiles.h"
#include "FuzzTarget.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;

extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  bool verbose = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--verbose") == 0) { verbose = true; continue; }
    args.push_back(argv[i]);
  }
  std::vector<fs::path> files;
  if (!hetplan::fuzz::corpusFiles(args, files))
    return 1;
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--verbose] FILE_OR_DIR... (no corpus files found)\n", argv[0]);
    return 1;
  }
  for (const auto &f : files) {
    std::string bytes = hetplan::fuzz::readBytes(f);
    if (verbose) std::fprintf(stderr, "%s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs replayed, none crashed\n", files.size());
  return 0;
}
