//===- FuzzModelLoad.cpp - the runtime's ONNX model loader ----------------===//
//
// Bytes -> parseModel (what loadModel does after mapping the file) -> the
// Executor's constructor (topological order, constant folding is skipped
// only by what the model holds) and check(), the load-time checks that run
// before any kernel. External data is looked up in a folder that does not
// exist, so no input makes the loader read files of this machine.
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
    (void)ex.check();
  } catch (const std::exception &) {
  }
  return 0;
}
