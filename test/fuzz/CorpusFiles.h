//===- CorpusFiles.h - the files a fuzz driver replays -----------*- C++ -*-===//
//
// ReplayMain.cpp and MutateMain.cpp take files and folders on the command
// line; folders are walked recursively and everything is sorted, so a
// replay visits the same inputs in the same order on every machine.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace hetplan::fuzz {

/// The files under `args` (files or folders), sorted; false (after a
/// message on stderr) when an argument is neither.
inline bool corpusFiles(const std::vector<std::string> &args, std::vector<std::filesystem::path> &files) {
  namespace fs = std::filesystem;
  for (const std::string &a : args) {
    fs::path p(a);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto &e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: not a file or folder\n", a.c_str());
      return false;
    }
  }
  std::sort(files.begin(), files.end());
  return true;
}

inline std::string readBytes(const std::filesystem::path &file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

} // namespace hetplan::fuzz
