//===- ElementwiseChain.h - fused float32 elementwise programs --*- C++ -*-===//
//
// Exporters decompose activations into chains of elementwise nodes
// (hard-swish as Add/Clip/Mul/Div, SiLU as Sigmoid/Mul, GELU as
// Div/Erf/Add/Mul/Mul); run one by one, each is a pass over memory and an
// allocation. The executor's load-time fusion (model/Fusion.h) turns such a
// chain over one float32 value into an EwProgram: steps over tiles that stay
// in L1, one pass over memory. Each step computes what its node's kernel
// computes, element for element (same float expressions, the same fastmath
// loops), so a fused chain's output equals the unfused one bit for bit.
// Conv.cpp absorbs a chain after a Conv as oneDNN post-ops when the program
// is one of oneDNN's eltwise functions (identifyEltwise), else runs it over
// the Conv's output in place.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../../model/Fusion.h"

#include <cstdint>
#include <vector>

namespace hetplan::runtime::cpu {

/// One step: slots are 0 (the chain's input) and k (step k-1's result); an
/// operand slot of -1 reads the constant ka (for a) or kb (for b).
struct EwStep {
  enum Op : int64_t {
    add, sub, mul, div, max, min, square, // binary (square: Pow with exponent 2, a only)
    clip, relu, leaky_relu, sigmoid, tanh, erf, exp, neg, abs, sqrt, hard_sigmoid, hard_swish, // unary
  };
  Op op = add;
  int64_t a = 0, b = -1;
  float ka = 0, kb = 0;
};

/// How a node of an op type is one step (registered by the op's kernel
/// file, which also registers the chain's fusion rule for the op type).
struct EwStepInfo {
  EwStep::Op op = EwStep::add;
  /// Only float types have this op (a chain needs one such step, or a
  /// float32 constant, so that x is a float: integer chains stay unfused).
  bool floatOnly = false;
  /// Sets ka/kb from the node's attributes (LeakyRelu's alpha), or null.
  void (*attributes)(const Node &n, EwStep &st) = nullptr;
};
void registerElementwiseStep(const std::string &opType, EwStepInfo info);

struct EwProgram {
  std::vector<EwStep> steps;
  /// The largest rank of a constant operand: the output has x's shape, with
  /// leading 1s up to this rank.
  int64_t constRank = 0;
  /// (Load time only.) Some step shows x is a float (EwStepInfo::floatOnly).
  bool floatish = false;
};

/// The longest chain of elementwise nodes over float value `x` (each
/// reading only `x`, earlier members' results and float32 one-element
/// constants) whose values other than its output are read only inside it;
/// members after run-order position `after`, `first` (when not SIZE_MAX) the
/// first. With `xInternal`, every reader of x must be a member too (x is an
/// intermediate of the caller's fusion). Appends members and intermediates
/// to `f` (and constants' initializers to f.deps), sets `last` to the
/// chain's output. False when fewer than `minSteps` nodes qualify.
bool growElementwiseChain(const FusionGraph &g, const std::string &x, size_t after, size_t first, bool xInternal,
                          size_t minSteps, EwProgram &prog, FusedChain &f, std::string &last);

/// The program as attributes of a fused node (and back).
void encodeEwProgram(const EwProgram &p, Node &n);
bool decodeEwProgram(const Node &n, EwProgram &p);
bool hasEwProgram(const Node &n);

/// y = program(x), n elements, threaded; y may be x. float32 or float64
/// (each step as its kernel computes that type).
void runEwProgram(const EwProgram &p, const float *x, float *y, int64_t n);
void runEwProgram(const EwProgram &p, const double *x, double *y, int64_t n);
/// The same on the calling thread only (inside a kernel's own parallelFor).
void runEwProgramSerial(const EwProgram &p, const float *x, float *y, int64_t n);
void runEwProgramSerial(const EwProgram &p, const double *x, double *y, int64_t n);
/// out = program(x) for a float32 or float64 tensor (shape widened to the
/// constants' rank); throws naming `who` for other types.
Tensor runEwProgram(const EwProgram &p, const Tensor &x, const std::string &who);

/// The oneDNN eltwise function the program computes, probed on values
/// across [-1e4, 1e4] (relu: alpha the negative slope; clip: [alpha, beta];
/// swish: x sigmoid(alpha x)); None when it is none of them.
struct EwEltwise {
  enum Kind : int64_t { none, relu, clip, hardswish, swish, logistic, tanh, gelu_erf };
  Kind kind = none;
  float alpha = 0, beta = 0;
};
EwEltwise identifyEltwise(const EwProgram &p);

} // namespace hetplan::runtime::cpu
