//===- HetOps.h - het dialect types, attributes and ops ---------*- C++ -*-===//
#ifndef HETPLAN_DIALECTS_HET_IR_HETOPS_H
#define HETPLAN_DIALECTS_HET_IR_HETOPS_H

#include "dialects/het/IR/HetDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/TensorEncoding.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_TYPEDEF_CLASSES
#include "dialects/het/IR/HetTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/het/IR/HetAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/het/IR/HetOps.h.inc"

#endif
