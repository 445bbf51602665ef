//===- Defs.h - the op families' definition lists and shared rules -*- C++ -*-===//
//
// Each ops/defs/<Family>.cpp appends its definitions; OpTable.cpp collects
// them (explicit calls: a static library drops self-registering objects).
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_OPS_DEFS_DEFS_H
#define HETPLAN_OPS_DEFS_DEFS_H

#include "ops/OpTable.h"

namespace hetplan::ops::defs {

void addMatMulOps(std::vector<OpDef> &out);
void addConvOps(std::vector<OpDef> &out);
void addNormalizationOps(std::vector<OpDef> &out);
void addSoftmaxOps(std::vector<OpDef> &out);
void addActivationOps(std::vector<OpDef> &out);
void addGatherOps(std::vector<OpDef> &out);
void addShapeOps(std::vector<OpDef> &out);
void addEinsumOps(std::vector<OpDef> &out);
void addReduceOps(std::vector<OpDef> &out);

/// Input i's dims into `dims`: false with `why` set when the node has no
/// input i, false with `why` empty when its shape is not known yet.
bool requireShape(const ShapeIn &in, size_t i, std::vector<int64_t> &dims, std::string &why);

/// Output 0 shaped and typed like input 0 (elementwise ops).
bool sameAsInput(const ShapeIn &in, std::vector<OutShape> &out, std::string &why);

/// An OutShape of `dims` with input `of`'s element type.
OutShape like(std::vector<int64_t> dims, int of = 0);

/// "" or an axis attribute out of range for rank r (unknown ranks pass).
std::string axisAttr(const CheckIn &in, const std::string &name, int64_t dflt, int64_t r, int64_t extra = 0);

/// The samples-mixing message of an op computing along the axes from
/// `first` on (CheckSamples): names the first one that carries the batch.
std::string alongFrom(const std::vector<int> &carries, int64_t first, const std::string &what);

} // namespace hetplan::ops::defs

#endif
