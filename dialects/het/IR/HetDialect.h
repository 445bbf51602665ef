//===- HetDialect.h - the het dialect ---------------------------*- C++ -*-===//
#ifndef HETPLAN_DIALECTS_HET_IR_HETDIALECT_H
#define HETPLAN_DIALECTS_HET_IR_HETDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/het/IR/HetDialect.h.inc"

#endif
