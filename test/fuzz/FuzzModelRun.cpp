//===- FuzzModelRun.cpp - load AND run a model ----------------------------===//
//
// Bytes -> parseModel -> Executor -> check() -> one run() on small generated
// inputs (FuzzModel.h): every kernel the model reaches runs on shapes and
// attributes the fuzzer chose, under ASan+UBSan. Models over the budget and
// Loops are refused before anything runs (FuzzModel.h says why).
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"
#include "FuzzModel.h"

#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"

#include <stdexcept>

using namespace hetplan::runtime;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  hetplan::fuzz::initModelTarget();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    Model model;
    if (!hetplan::fuzz::loadWithinBudget(data, size, model)) return 0;
    Executor ex(model);
    if (!ex.check().empty()) return 0;
    std::map<std::string, Tensor> inputs;
    if (!hetplan::fuzz::makeInputs(model, inputs)) return 0;
    (void)ex.run(inputs);
  } catch (const std::exception &) {
  }
  return 0;
}
