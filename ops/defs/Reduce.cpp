//===- Reduce.cpp - Reduce*, ArgMax, ArgMin -------------------------------===//
//
// Reductions over `axes` (an input from opset 13 for ReduceSum and from 18
// for the others; an attribute before), ArgMax/ArgMin over `axis`.
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

#include <set>

namespace hetplan::ops::defs {
namespace {

using Dims = std::vector<int64_t>;

bool reduceShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why, bool isArg) {
  Dims x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  bool keep = in.attrs.intOr("keepdims", 1) != 0;
  std::optional<Dims> axes;
  if (isArg)
    axes = Dims{in.attrs.intOr("axis", 0)};
  else if (in.inputs.size() > 1 && in.inputs[1].ints)
    axes = *in.inputs[1].ints;
  else
    axes = in.attrs.getInts("axes");
  if (!axes && in.inputs.size() > 1 && in.inputs[1].present)
    return true; // axes computed at run time
  bool all = !axes || axes->empty();
  if (all && in.attrs.intOr("noop_with_empty_axes", 0)) {
    out[0] = like(x);
    return true;
  }
  std::set<int64_t> at;
  if (!all)
    for (int64_t a : *axes)
      at.insert(normAxis(a, int64_t(x.size())));
  Dims result;
  for (int64_t i = 0; i < int64_t(x.size()); ++i) {
    if (all || at.count(i)) {
      if (keep)
        result.push_back(1);
    } else {
      result.push_back(x[size_t(i)]);
    }
  }
  out[0] = like(result);
  if (isArg)
    out[0].element = Element::Int64;
  return true;
}
bool reductionShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return reduceShape(in, out, why, false);
}
bool argShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  return reduceShape(in, out, why, true);
}

// FLOPs over the input's elements x and the output's y (docs/cost-model.md).
double inElems(const CostIn &in) { return in.inputElems.empty() ? 0 : in.inputElems[0]; }
double outElems(const CostIn &in) { return in.outputElems.empty() ? 0 : in.outputElems[0]; }
Cost flops(double f) {
  Cost r;
  r.flops = f;
  return r;
}
Cost sumCost(const CostIn &in) { return flops(inElems(in)); } // Sum, Max, Min, Prod, ArgMax, ArgMin
Cost meanCost(const CostIn &in) { return flops(inElems(in) + outElems(in)); }
Cost squaresCost(const CostIn &in) { return flops(2 * inElems(in)); } // L1, SumSquare
Cost l2Cost(const CostIn &in) { return flops(2 * inElems(in) + outElems(in)); }
Cost logSumCost(const CostIn &in) { return flops(inElems(in) + kTranscendental * outElems(in)); }
Cost logSumExpCost(const CostIn &in) {
  return flops((kTranscendental + 1) * inElems(in) + kTranscendental * outElems(in));
}

OpDef reduction(const char *type, const char *summary, ShapeFn shape, CostFn cost, Keeps keeps) {
  OpDef d;
  d.type = type;
  d.minInputs = 1;
  d.maxInputs = 2;
  d.summary = summary;
  d.shape = shape;
  d.cost = cost;
  d.keeps = keeps;
  return d;
}

} // namespace

void addReduceOps(std::vector<OpDef> &out) {
  // Sums and means need only the shapes in their backward.
  out.push_back(reduction("ReduceSum", "sum over `axes`", reductionShape, sumCost, Keeps::Nothing));
  out.push_back(reduction("ReduceMean", "mean over `axes`", reductionShape, meanCost, Keeps::Nothing));
  out.push_back(reduction("ReduceMax", "maximum over `axes`", reductionShape, sumCost, Keeps::Inputs));
  out.push_back(reduction("ReduceMin", "minimum over `axes`", reductionShape, sumCost, Keeps::Inputs));
  out.push_back(reduction("ReduceProd", "product over `axes`", reductionShape, sumCost, Keeps::Inputs));
  out.push_back(reduction("ReduceL1", "sum of |x| over `axes`", reductionShape, squaresCost, Keeps::Inputs));
  out.push_back(reduction("ReduceSumSquare", "sum of x^2 over `axes`", reductionShape, squaresCost,
                          Keeps::Inputs));
  out.push_back(reduction("ReduceL2", "sqrt of the sum of x^2 over `axes`", reductionShape, l2Cost,
                          Keeps::Inputs));
  out.push_back(reduction("ReduceLogSum", "log of the sum over `axes`", reductionShape, logSumCost,
                          Keeps::Inputs));
  out.push_back(reduction("ReduceLogSumExp", "log of the sum of exp over `axes`", reductionShape,
                          logSumExpCost, Keeps::Inputs));
  OpDef am = reduction("ArgMax", "index of the maximum along `axis`", argShape, sumCost, Keeps::Nothing);
  am.maxInputs = 1;
  am.check = axisZeroCheck;
  out.push_back(am);
  OpDef an = reduction("ArgMin", "index of the minimum along `axis`", argShape, sumCost, Keeps::Nothing);
  an.maxInputs = 1;
  an.check = axisZeroCheck;
  out.push_back(an);
}

} // namespace hetplan::ops::defs
