//===- Passes.h - het passes ------------------------------------*- C++ -*-===//
#ifndef HETPLAN_PASSES_PASSES_H
#define HETPLAN_PASSES_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace hetplan::het {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace hetplan::het

#endif
