//===- MutateMain.cpp - the compile target's mutator, replayed ------------===//
//
// hetplan-fuzz-mutate-compile [--verbose] N FILE_OR_DIR...: for every model
// file (folders walked, sorted) and every seed 0..N-1, applies
// CompileMutator's semantic mutations and feeds the result to the compile
// target's LLVMFuzzerTestOneInput, as libFuzzer would. Deterministic (same
// files, same N, same inputs), so ctest fuzz-mutate-compile runs a small
// campaign of the mutations in every build, gcc included, without libFuzzer.
// Each seed model first runs unmutated: fewer than half of them planned
// means the target refuses what it should compile (exit 1, a broken test
// rather than a quiet one). Prints how often each mutation was applied and
// what the compiler did with the results; exits 1 when no file parsed.
//
//===----------------------------------------------------------------------===//
#include "CompileMutator.h"
#include "CorpusFiles.h"
#include "FuzzCompile.h"
#include "FuzzTarget.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv);

int main(int argc, char **argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  bool verbose = false;
  int first = 1;
  if (argc > 1 && std::strcmp(argv[1], "--verbose") == 0) {
    verbose = true;
    ++first;
  }
  if (argc - first < 2) {
    std::fprintf(stderr, "usage: %s [--verbose] N FILE_OR_DIR...\n", argv[0]);
    return 1;
  }
  const long n = std::strtol(argv[first], nullptr, 10);
  std::vector<fs::path> files;
  if (!hetplan::fuzz::corpusFiles(std::vector<std::string>(argv + first + 1, argv + argc), files))
    return 1;
  std::map<std::string, long> counts;
  long runs = 0, parsed = 0, seedsPlanned = 0;
  for (const auto &f : files) {
    std::string bytes = hetplan::fuzz::readBytes(f);
    bool ok = false;
    const long plannedBefore = hetplan::fuzz::compileStats().planned;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
    seedsPlanned += hetplan::fuzz::compileStats().planned > plannedBefore;
    for (long seed = 0; seed < n; ++seed) {
      std::string mutated;
      std::vector<std::string> applied;
      if (!hetplan::fuzz::mutateModel(bytes, unsigned(seed), mutated, applied))
        break;
      ok = true;
      for (const auto &a : applied) ++counts[a];
      if (verbose) {
        std::string what;
        for (const auto &a : applied) what += (what.empty() ? "" : "+") + a;
        std::fprintf(stderr, "%s seed %ld: %s\n", f.c_str(), seed, what.c_str());
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(mutated.data()), mutated.size());
      ++runs;
    }
    parsed += ok;
  }
  if (!parsed) {
    std::fprintf(stderr, "no file parsed as an ONNX model\n");
    return 1;
  }
  const hetplan::fuzz::CompileStats &st = hetplan::fuzz::compileStats();
  std::printf("seed models: %ld of %zu planned unmutated\n", seedsPlanned, files.size());
  if (2 * seedsPlanned < long(files.size())) {
    std::fprintf(stderr, "fewer than half of the seed models compile unmutated: the target refuses what "
                         "hetplan compile plans (HETPLAN_FUZZ_VERBOSE=1 says why)\n");
    return 1;
  }
  std::printf("%ld mutated models from %ld seed models compiled (and run where the budget allows), none crashed:",
              runs, parsed);
  for (const auto &[k, v] : counts) std::printf(" %s %ld", k.c_str(), v);
  std::printf("\nall inputs: %ld refused at import or shapes, %ld by the planner, %ld planned, %ld plans ran\n",
              st.refusedAtImportOrShapes, st.refusedByPlanner, st.planned, st.ran);
  return 0;
}
