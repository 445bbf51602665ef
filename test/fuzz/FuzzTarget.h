//===- FuzzTarget.h - the libFuzzer entry point of every target -*- C++ -*-===//
//
// Each fuzz target defines LLVMFuzzerTestOneInput. With -DHETPLAN_FUZZ=ON
// (clang) it links libFuzzer (-fsanitize=fuzzer) under ASan+UBSan; in every
// build the same function is linked with ReplayMain.cpp, which feeds it the
// files of the regression corpus (ctest fuzz-replay-*). A target must never
// crash, hang or leak on any input: malformed input is an error it catches.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
