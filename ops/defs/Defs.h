//===- Defs.h - the op families' definition lists and shared rules -*- C++ -*-===//
//
// Each ops/defs/<Family>.cpp appends its definitions; OpTable.cpp collects
// them (explicit calls: a static library drops self-registering objects).
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_OPS_DEFS_DEFS_H
#define HETPLAN_OPS_DEFS_DEFS_H

#include "ops/OpTable.h"

#include <cstdint>

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
void addQuantizeOps(std::vector<OpDef> &out);
void addRecurrentOps(std::vector<OpDef> &out);
void addAttentionOps(std::vector<OpDef> &out);
void addSelectionOps(std::vector<OpDef> &out);
void addElementwiseOps(std::vector<OpDef> &out);

/// Concat's shape rule (Shape.cpp; QLinearConcat keeps it).
bool concatShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why);

/// A definition of (domain, type) from `since` on, with its arity, summary
/// and shape and cost rules; the other fields keep their defaults (no
/// check, keeps its inputs, no tensor-parallel role).
OpDef define(const char *domain, const char *type, int since, int minInputs, int maxInputs, const char *summary,
             ShapeFn shape, CostFn cost);

/// Input i's static shape in a cost rule (nullopt when not static or not
/// given), and whether the node has input i.
std::optional<std::vector<int64_t>> staticInput(const CostIn &in, size_t i);
bool given(const CostIn &in, size_t i);

/// Input i's dims into `dims`: false with `why` set when the node has no
/// input i, false with `why` empty when its shape is not known yet.
bool requireShape(const ShapeIn &in, size_t i, std::vector<int64_t> &dims, std::string &why);

/// The product of dims [from, to) of `shape` (unknown when one is).
int64_t numElements(const std::vector<int64_t> &shape, size_t from = 0, size_t to = SIZE_MAX);

/// Output 0 shaped and typed like input 0 (elementwise ops).
bool sameAsInput(const ShapeIn &in, std::vector<OutShape> &out, std::string &why);

/// An OutShape of `dims` with input `of`'s element type.
OutShape like(std::vector<int64_t> dims, int of = 0);

/// Runs `rule` on the inputs at `pick` only (a quantized op's data operands
/// among its scales and zero points) and sets out[0] from its first output;
/// false with `why` set when the node lacks one of them or the rule fails.
bool onPicked(ShapeFn rule, const ShapeIn &in, const std::vector<size_t> &pick, std::vector<OutShape> &out,
              std::string &why);

/// out[0] (when set) retyped to `element` (input `of`'s for
/// Element::OfInput); folded values do not carry over.
void retype(std::vector<OutShape> &out, Element element, int of = 0);

/// A quantized output's element type: that of the zero point at input `zp`
/// when given, else of input `x`.
int zeroPointOr(const ShapeIn &in, size_t zp, size_t x);

/// The integer forms of a float product `Rule` (MatMul, Conv): A and B at
/// inputs 0 and 1 with an int32 output (MatMulInteger, ConvInteger), or at 0
/// and 3 among their scales and zero points with the output zero point's
/// type, else input 0's (QLinearMatMul, QGemm, QLinearConv).
template <ShapeFn Rule> bool integerProductShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  if (!onPicked(Rule, in, {0, 1}, out, why))
    return false;
  retype(out, Element::Int32);
  return true;
}
template <ShapeFn Rule> bool qLinearProductShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  if (!onPicked(Rule, in, {0, 3}, out, why))
    return false;
  retype(out, Element::OfInput, zeroPointOr(in, 7, 0));
  return true;
}

/// "[1,2,3]": a list of ints in a check's message.
std::string listOf(const std::vector<int64_t> &v);

/// "" or an axis attribute out of range for rank r (unknown ranks pass).
std::string axisAttr(const CheckIn &in, const std::string &name, int64_t dflt, int64_t r, int64_t extra = 0);

/// The check of an op with an `axis` attribute (default 0) into input 0.
std::string axisZeroCheck(const CheckIn &in, const std::string &opType);

/// The samples-mixing message of an op computing along the axes from
/// `first` on (CheckSamples): names the first one that carries the batch.
std::string alongFrom(const std::vector<int> &carries, int64_t first, const std::string &what);

} // namespace hetplan::ops::defs

#endif
