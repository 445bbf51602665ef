//===- CompileMutator.h - semantic mutations of ONNX models -----*- C++ -*-===//
//
// A byte-level fuzzer rarely gets past protobuf parsing and ONNX's checker to
// the compile pipeline's shape and cost rules. These mutations keep the
// model parseable and change what those rules see, as a broken exporter or a
// hand-edited model would (issue 22, item 4):
//
//   op-type    a node's op type becomes another op of the op table
//   drop       a node input removed, or made "" (an omitted optional input)
//   add        a node gains an input: any value of the graph
//   cycle      a node reads its own output or a later node's (a cycle)
//   swap       two inputs of a node trade places
//   attr       an attribute out of range (0, -1, huge, NaN, an empty list,
//              a rank-sized axis), or a stray one added
//   init-dims  an initializer's dims disagree with its data
//   input-dims a graph input dim becomes 0, -1, 2^40, a fresh symbol, or
//              the shape is dropped
//   dtype      a graph input's, initializer's or Cast's element type changed
//
// Nothing here knows the compiler: the mutator works on the protobuf only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hetplan::fuzz {

/// libFuzzer's LLVMFuzzerCustomMutator: parses `data` as a ModelProto and
/// applies one to three semantic mutations chosen by `seed`; bytes that do
/// not parse, or a result over `maxSize`, get libFuzzer's own mutation
/// (LLVMFuzzerMutate; unchanged bytes where it is not linked).
size_t mutateModelBytes(uint8_t *data, size_t size, size_t maxSize, unsigned seed);

/// The same on a string (ctest fuzz-mutate-compile): the mutated model and
/// the names of the mutations applied; false when `model` does not parse.
bool mutateModel(const std::string &model, unsigned seed, std::string &mutated,
                 std::vector<std::string> &applied);

/// What `hetplan compile` needs besides --batch 2 --seq 4 to bind the graph
/// inputs of `model` (bytes), so that models with other symbolic or unnamed
/// dims reach the shape rules too: --dim NAME=4 for every dim name not on
/// axis 0, and --shape INPUT=... (unknown axis 0: 2, other unknown dims: 4)
/// for every input with a dim that has no name. Nothing when it does not
/// parse.
void inputBindings(const std::string &model, std::vector<std::string> &dims, std::vector<std::string> &shapes);

} // namespace hetplan::fuzz
