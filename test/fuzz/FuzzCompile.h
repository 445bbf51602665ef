//===- FuzzCompile.h - what the compile target did ---------------*- C++ -*-===//
//
// Counters of FuzzCompile.cpp's outcomes, for MutateMain.cpp's summary and
// its check that the unmutated seeds really compile and run (a target that
// refused everything would pass every replay and find nothing).
// HETPLAN_FUZZ_VERBOSE=1 prints each input's outcome on stderr.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace hetplan::fuzz {

struct CompileStats {
  long refusedAtImportOrShapes = 0; // costModelFile's one-line error
  long refusedByPlanner = 0;        // makePlan's one-line error
  long planned = 0;                 // exported and validated
  long ran = 0;                     // the inference plan ran on its ranks
};
CompileStats &compileStats();

} // namespace hetplan::fuzz
