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
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--verbose") == 0) { verbose = true; continue; }
    fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto &e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: not a file or folder\n", argv[i]);
      return 1;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--verbose] FILE_OR_DIR... (no corpus files found)\n", argv[0]);
    return 1;
  }
  for (const auto &f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (verbose) std::fprintf(stderr, "%s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  std::printf("%zu inputs replayed, none crashed\n", files.size());
  return 0;
}
