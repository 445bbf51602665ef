//===- Elementwise.cpp - elementwise functions without a backward kernel --===//
//
// Output shaped like input 0; FLOPs per output element as documented in
// docs/cost-model.md ("Per-op rules"). The elementwise ops that have a CPU
// backward kernel (Exp, Tanh, Sigmoid, Gelu...) are priced in
// passes/cost/OpCosts.cpp until OpTableTest has a sample for each (it runs
// every backward kernel of the table against its `keeps`).
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops::defs {
namespace {

// The predicates: a bool per element.
bool predicateShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  if (!sameAsInput(in, out, why))
    return false;
  if (out[0].set)
    out[0].element = Element::Bool;
  return true;
}

template <int Flops> Cost perElement(const CostIn &in) {
  Cost r;
  r.flops = Flops * in.totalOutputElems();
  return r;
}
// A transcendental (exp, log, sin...) plus `Extra` FLOPs per element.
template <int Times, int Extra> Cost transcendental(const CostIn &in) {
  Cost r;
  r.flops = (Times * kTranscendental + Extra) * in.totalOutputElems();
  return r;
}
Cost noFlops(const CostIn &) { return Cost{}; }

} // namespace

void addElementwiseOps(std::vector<OpDef> &out) {
  struct Unary {
    const char *type;
    const char *summary;
    CostFn cost;
    Keeps keeps = Keeps::Inputs;
    bool fusible = false;
    ShapeFn shape = sameAsInput;
    int minInputs = 1, maxInputs = 1;
  };
  const Unary ops[] = {
      {"Floor", "the largest integer <= x", perElement<1>},
      {"Ceil", "the smallest integer >= x", perElement<1>},
      {"Round", "x rounded half to even", perElement<1>},
      {"Sign", "-1, 0 or 1", perElement<1>},
      {"Not", "logical not", perElement<1>, Keeps::Nothing, false, predicateShape},
      {"IsNaN", "whether x is NaN", perElement<1>, Keeps::Inputs, false, predicateShape},
      {"IsInf", "whether x is infinite (detect_positive/negative)", perElement<1>, Keeps::Inputs, false,
       predicateShape},
      {"ThresholdedRelu", "x where x > alpha, else 0", perElement<1>},
      {"CumSum", "running sums along the axis given as input 1", perElement<1>, Keeps::Nothing, false, sameAsInput,
       2, 2},
      {"Shrink", "x -/+ bias outside [-lambd, lambd], else 0", perElement<2>},
      {"Softsign", "x / (1 + |x|)", perElement<3>},
      {"HardSigmoid", "max(0, min(1, alpha x + beta))", perElement<4>, Keeps::Output, true},
      {"HardSwish", "x * HardSigmoid(x) with alpha 1/6, beta 1/2", perElement<5>, Keeps::Inputs, true},
      {"Tan", "tangent", transcendental<1, 0>},
      {"Asin", "arcsine", transcendental<1, 0>},
      {"Acos", "arccosine", transcendental<1, 0>},
      {"Atan", "arctangent", transcendental<1, 0>},
      {"Sinh", "hyperbolic sine", transcendental<1, 0>},
      {"Cosh", "hyperbolic cosine", transcendental<1, 0>},
      {"Asinh", "inverse hyperbolic sine", transcendental<1, 0>},
      {"Acosh", "inverse hyperbolic cosine", transcendental<1, 0>},
      {"Atanh", "inverse hyperbolic tangent", transcendental<1, 0>},
      // exp + subtract + multiply (+ select)
      {"Selu", "gamma (alpha (exp(x) - 1)) for x <= 0, gamma x above", transcendental<1, 3>, Keeps::Inputs, true},
      {"Celu", "max(0, x) + min(0, alpha (exp(x / alpha) - 1))", transcendental<1, 3>, Keeps::Inputs, true},
      // x * sigmoid(x); x * tanh(softplus(x))
      {"Swish", "x * sigmoid(alpha x)", transcendental<1, 1>, Keeps::Inputs, true},
      {"Mish", "x * tanh(log(1 + exp(x)))", transcendental<3, 2>, Keeps::Inputs, true},
      {"PRelu", "x where x >= 0, else slope x (slope broadcast)", perElement<2>, Keeps::Inputs, false, sameAsInput,
       2, 2},
      {"Trilu", "the upper or lower triangle of the last two dims", noFlops, Keeps::Nothing, false, sameAsInput, 1,
       2},
  };
  for (const Unary &u : ops) {
    OpDef d = define("", u.type, 1, u.minInputs, u.maxInputs, u.summary, u.shape, u.cost);
    d.keeps = u.keeps;
    d.fusible = u.fusible;
    if (d.type == "CumSum")
      d.check = axisZeroCheck;
    out.push_back(d);
  }
}

} // namespace hetplan::ops::defs
