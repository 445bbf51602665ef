//===- ShapeRules.cpp - the dialect's own shape rules ---------------------===//
//
// Rules follow the ONNX operator specification (onnx/docs/Operators.md) for
// the opsets hetplan prices; where an op changed between opsets (attributes
// that became inputs: Slice, Squeeze, Split, Reduce*, Pad), both forms are
// read.
//
//===----------------------------------------------------------------------===//

#include "passes/ShapeRules.h"
#include "passes/cost/OpTableAdapter.h"
#include "runtime/include/hetplan/runtime/Checked.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>
#include <limits>
#include <map>
#include <numeric>

using namespace mlir;

namespace hetplan::het {

namespace {

using Shape = SmallVector<int64_t>;
constexpr int64_t kDyn = ShapedType::kDynamic;
using ops::kMaxFoldedElements;

bool isDyn(int64_t d) { return ShapedType::isDynamic(d); }
// A product or sum that overflows int64 is no size: unknown (the verifier
// then refuses any static type it would have made). The table's helpers:
// its unknown dim is kDyn.
using ops::addDims;
using ops::mulDims;
static_assert(ops::kUnknownDim == ShapedType::kDynamic);

int64_t attrInt(NodeOp n, StringRef name, int64_t dflt) {
  if (auto a = dyn_cast_or_null<IntegerAttr>(n.getOnnxAttr(name)))
    return a.getInt();
  return dflt;
}
std::optional<Shape> attrInts(NodeOp n, StringRef name) {
  if (auto a = dyn_cast_or_null<DenseI64ArrayAttr>(n.getOnnxAttr(name)))
    return Shape(a.asArrayRef());
  return std::nullopt;
}
std::optional<SmallVector<double>> attrFloats(NodeOp n, StringRef name) {
  if (auto a = dyn_cast_or_null<DenseF32ArrayAttr>(n.getOnnxAttr(name)))
    return SmallVector<double>(a.asArrayRef().begin(), a.asArrayRef().end());
  return std::nullopt;
}

/// Integer values of input `i`, or of the attribute `name` for older opsets.
std::optional<Shape> intsFrom(NodeOp n, ArrayRef<ValueFacts> in, unsigned i,
                              StringRef name = {}) {
  if (i < in.size() && in[i].ints)
    return *in[i].ints;
  if (!name.empty())
    return attrInts(n, name);
  return std::nullopt;
}
bool present(ArrayRef<ValueFacts> in, unsigned i) {
  return i < in.size() && in[i].type && !isa<NoneType>(in[i].type);
}

int64_t normAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n = mulDims(n, d);
  return n;
}

ValueFacts tensor(ArrayRef<int64_t> shape, Type element) {
  return {makeTensor(shape, element), std::nullopt, std::nullopt};
}
ValueFacts intTensor(ArrayRef<int64_t> shape, Type element, Shape values) {
  ValueFacts f = tensor(shape, element);
  if (values.size() <= kMaxFoldedElements)
    f.ints = std::move(values);
  return f;
}

using ops::upperBoundNote;

#define REQUIRE_SHAPE(var, idx)                                                \
  if ((idx) >= in.size())                                                      \
    return (why = "needs input #" #idx, failure());                            \
  auto var##Opt = in[idx].shape();                                             \
  if (!var##Opt)                                                               \
    return success(); /* not known yet: leave the outputs as they are */       \
  Shape var(var##Opt->begin(), var##Opt->end());

/// The op table's shape rule (ops/OpTable.h) over the node's facts: the one
/// place the compiler's types meet the table's plain dims.
LogicalResult runTableRule(const ops::OpDef *def, NodeOp n, ArrayRef<ValueFacts> in,
                           SmallVectorImpl<ValueFacts> &out, std::string &why) {
  // The table's rules read their required inputs without counting them.
  if (int64_t(in.size()) < def->minInputs)
    return (why = "needs at least " + std::to_string(def->minInputs) + " input" +
                  (def->minInputs > 1 ? "s" : "") + ", not " + std::to_string(in.size()),
            failure());
  std::vector<ops::ValueShape> shapes(in.size());
  for (auto [i, facts] : llvm::enumerate(in)) {
    ops::ValueShape &v = shapes[i];
    v.present = present(in, i);
    v.typed = bool(facts.elementType());
    if (auto s = facts.shape()) {
      v.ranked = true;
      v.dims.assign(s->begin(), s->end());
    }
    if (facts.ints)
      v.ints = std::vector<int64_t>(facts.ints->begin(), facts.ints->end());
  }
  NodeAttrs attrs(n);
  std::vector<ops::OutShape> results(out.size());
  if (!def->shape({attrs, shapes, int64_t(n.getOpset())}, results, why))
    return failure();
  MLIRContext *c = n.getContext();
  for (auto [i, r] : llvm::enumerate(results)) {
    if (!r.set)
      continue;
    Type element;
    switch (r.element) {
    case ops::Element::OfInput: element = in[r.elementOf].elementType(); break;
    case ops::Element::Bool: element = IntegerType::get(c, 1); break;
    case ops::Element::Int64: element = IntegerType::get(c, 64); break;
    case ops::Element::Float32: element = Float32Type::get(c); break;
    case ops::Element::Int32: element = IntegerType::get(c, 32); break;
    case ops::Element::UInt8: element = IntegerType::get(c, 8, IntegerType::Unsigned); break;
    }
    out[i] = tensor(r.dims, element);
    if (r.ints)
      out[i].ints = Shape(r.ints->begin(), r.ints->end());
    out[i].upperBound = r.upperBound;
  }
  return success();
}

std::optional<SmallVector<double>> foldFloatUnary(StringRef op, const ValueFacts &x);

LogicalResult tableRule(NodeOp n, ArrayRef<ValueFacts> in,
                        SmallVectorImpl<ValueFacts> &out, std::string &why) {
  if (failed(runTableRule(opDefOf(n), n, in, out, why)))
    return failure();
  // The table carries integer values only; float ones of Floor/Ceil/Round.
  if (!in.empty() && !out.empty() && out[0].type && n.getDomain().empty())
    out[0].floats = foldFloatUnary(n.getOpType(), in[0]);
  return success();
}
//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// The values of a unary op on a small float tensor whose values are known
/// (sizes computed in floats: Sqrt, Floor, Ceil, Round, Neg, Abs,
/// Reciprocal, Identity).
std::optional<SmallVector<double>> foldFloatUnary(StringRef op, const ValueFacts &x) {
  if (!x.floats)
    return std::nullopt;
  double (*f)(double) = nullptr;
  if (op == "Identity") f = [](double v) { return v; };
  else if (op == "Sqrt") f = [](double v) { return std::sqrt(v); };
  else if (op == "Floor") f = [](double v) { return std::floor(v); };
  else if (op == "Ceil") f = [](double v) { return std::ceil(v); };
  else if (op == "Round") f = [](double v) { return std::nearbyint(v); }; // half to even
  else if (op == "Neg") f = [](double v) { return -v; };
  else if (op == "Abs") f = [](double v) { return std::fabs(v); };
  else if (op == "Reciprocal") f = [](double v) { return 1.0 / v; };
  if (!f)
    return std::nullopt;
  SmallVector<double> r;
  for (double v : *x.floats)
    r.push_back(f(v));
  return r;
}

LogicalResult sameAsInput(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  Type element = in[0].elementType();
  StringRef op = n.getOpType();
  out[0] = tensor(x, element);
  out[0].floats = foldFloatUnary(op, in[0]);
  if (op == "Identity" || op == "Neg" || op == "Abs")
    if (in[0].ints) {
      Shape v = *in[0].ints;
      if (op == "Neg")
        for (auto &e : v) e = -e;
      if (op == "Abs")
        for (auto &e : v) e = std::abs(e);
      out[0].ints = v;
    }
  // Dropout's mask.
  if (out.size() > 1 && op == "Dropout")
    out[1] = tensor(x, IntegerType::get(n.getContext(), 1));
  return success();
}

/// Applies `f` to integer operands with numpy broadcasting of 1-D/scalar ones.
std::optional<Shape> foldInts(ArrayRef<ValueFacts> in, int64_t total,
                              llvm::function_ref<int64_t(ArrayRef<int64_t>)> f) {
  if (isDyn(total) || total > int64_t(kMaxFoldedElements))
    return std::nullopt;
  for (const auto &v : in)
    if (!v.ints || (int64_t(v.ints->size()) != total && v.ints->size() != 1))
      return std::nullopt;
  Shape result;
  SmallVector<int64_t> args(in.size());
  for (int64_t i = 0; i < total; ++i) {
    for (size_t k = 0; k < in.size(); ++k)
      args[k] = (*in[k].ints)[in[k].ints->size() == 1 ? 0 : i];
    result.push_back(f(args));
  }
  return result;
}

/// The values of an integer broadcast op (shape arithmetic: Add, Sub, Mul,
/// Div, Mod, Min, Max, Sum, comparisons, logic, Where), when every operand's
/// values are known; nullopt where ONNX leaves the result undefined (a
/// division by zero).
std::optional<Shape> foldIntOp(NodeOp n, ArrayRef<ValueFacts> in, int64_t total) {
  StringRef op = n.getOpType();
  using Fn = int64_t (*)(ArrayRef<int64_t>);
  // ONNX integer arithmetic wraps as two's complement (as onnxruntime's
  // does); computed unsigned, where wrapping is defined.
  static const llvm::StringMap<Fn> fns = {
      {"Add", [](ArrayRef<int64_t> a) { return int64_t(uint64_t(a[0]) + uint64_t(a[1])); }},
      {"Sub", [](ArrayRef<int64_t> a) { return int64_t(uint64_t(a[0]) - uint64_t(a[1])); }},
      {"Mul", [](ArrayRef<int64_t> a) { return int64_t(uint64_t(a[0]) * uint64_t(a[1])); }},
      {"Sum",
       [](ArrayRef<int64_t> a) {
         uint64_t r = 0;
         for (int64_t v : a)
           r += uint64_t(v);
         return int64_t(r);
       }},
      // Truncated toward zero, as onnxruntime's integer Div.
      {"Div", [](ArrayRef<int64_t> a) { return a[0] / a[1]; }},
      // fmod = 0: the remainder takes the divisor's sign (numpy's mod).
      {"Mod",
       [](ArrayRef<int64_t> a) {
         int64_t r = a[0] % a[1];
         return r != 0 && ((r < 0) != (a[1] < 0)) ? r + a[1] : r;
       }},
      {"Equal", [](ArrayRef<int64_t> a) -> int64_t { return a[0] == a[1]; }},
      {"Less", [](ArrayRef<int64_t> a) -> int64_t { return a[0] < a[1]; }},
      {"Greater", [](ArrayRef<int64_t> a) -> int64_t { return a[0] > a[1]; }},
      {"LessOrEqual", [](ArrayRef<int64_t> a) -> int64_t { return a[0] <= a[1]; }},
      {"GreaterOrEqual", [](ArrayRef<int64_t> a) -> int64_t { return a[0] >= a[1]; }},
      {"And", [](ArrayRef<int64_t> a) -> int64_t { return a[0] && a[1]; }},
      {"Or", [](ArrayRef<int64_t> a) -> int64_t { return a[0] || a[1]; }},
      {"Xor", [](ArrayRef<int64_t> a) -> int64_t { return bool(a[0]) != bool(a[1]); }},
      {"Max", [](ArrayRef<int64_t> a) { return *llvm::max_element(a); }},
      {"Min", [](ArrayRef<int64_t> a) { return *llvm::min_element(a); }},
      {"Where", [](ArrayRef<int64_t> a) { return a[0] ? a[1] : a[2]; }},
  };
  auto it = fns.find(op);
  if (it == fns.end())
    return std::nullopt;
  bool binary = op != "Sum" && op != "Max" && op != "Min" && op != "Where";
  if ((binary && in.size() != 2) || (op == "Mod" && attrInt(n, "fmod", 0) != 0))
    return std::nullopt;
  if ((op == "Div" || op == "Mod") && in[1].ints &&
      llvm::any_of(*in[1].ints, [](int64_t d) { return d == 0; }))
    return std::nullopt;
  // INT64_MIN / -1 overflows; no shape computation divides so.
  if ((op == "Div" || op == "Mod") && in[0].ints && in[1].ints &&
      llvm::is_contained(*in[0].ints, std::numeric_limits<int64_t>::min()) &&
      llvm::is_contained(*in[1].ints, int64_t(-1)))
    return std::nullopt;
  return foldInts(in, total, it->second);
}

/// The values of a float broadcast op (Add, Sub, Mul, Div, Pow, Min, Max)
/// when every operand's are known (a scale computed from sizes).
std::optional<SmallVector<double>> foldFloatOp(StringRef op, ArrayRef<ValueFacts> in,
                                               int64_t total) {
  static const llvm::StringSet<> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Min", "Max"};
  if (!ops.contains(op) || in.empty() || isDyn(total) ||
      total > int64_t(kMaxFoldedElements) || (op != "Min" && op != "Max" && in.size() != 2))
    return std::nullopt;
  for (const auto &v : in)
    if (!v.floats || (int64_t(v.floats->size()) != total && v.floats->size() != 1))
      return std::nullopt;
  SmallVector<double> result;
  for (int64_t i = 0; i < total; ++i) {
    SmallVector<double> a;
    for (const auto &v : in)
      a.push_back((*v.floats)[v.floats->size() == 1 ? 0 : i]);
    double r = op == "Add"   ? a[0] + a[1]
               : op == "Sub" ? a[0] - a[1]
               : op == "Mul" ? a[0] * a[1]
               : op == "Div" ? a[0] / a[1]
               : op == "Pow" ? std::pow(a[0], a[1])
               : op == "Min" ? *llvm::min_element(a)
                             : *llvm::max_element(a);
    result.push_back(r);
  }
  return result;
}

LogicalResult broadcastOp(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  if (in.empty())
    return success();
  StringRef op = n.getOpType();
  if (op == "Where" && in.size() != 3)
    return (why = "needs 3 inputs (condition, X, Y), not " + std::to_string(in.size()),
            failure());
  // The binary ops take exactly two (the variadic Max, Min, Sum and Mean one
  // or more); one input would pass for an identity here and break the cost
  // rules that read the second.
  static const llvm::StringSet<> variadic = {"Max", "Min", "Sum", "Mean"};
  if (op != "Where" && !variadic.contains(op) && in.size() != 2)
    return (why = "needs 2 inputs, not " + std::to_string(in.size()), failure());
  Shape shape;
  bool first = true;
  for (const auto &v : in) {
    auto s = v.shape();
    if (!s)
      return success();
    if (first) {
      shape.assign(s->begin(), s->end());
      first = false;
      continue;
    }
    auto b = broadcastShapes(shape, *s);
    if (!b) {
      llvm::raw_string_ostream os(why);
      os << "operands do not broadcast: " << in[0].type << " and " << v.type;
      return failure();
    }
    shape = *b;
  }
  static const llvm::StringSet<> comparisons = {
      "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"};
  Type element = op == "Where" ? in[1].elementType() : in[0].elementType();
  if (comparisons.contains(op))
    element = IntegerType::get(n.getContext(), 1);
  out[0] = tensor(shape, element);

  int64_t total = numElements(shape);
  if (std::optional<Shape> folded = foldIntOp(n, in, total))
    out[0].ints = folded;
  else if (std::optional<SmallVector<double>> f = foldFloatOp(op, in, total))
    out[0].floats = f;
  return success();
}

Type onnxElementType(MLIRContext *c, int64_t dt);

LogicalResult castOp(NodeOp n, ArrayRef<ValueFacts> in,
                     SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  Type element;
  if (n.getOpType() == "CastLike") {
    element = in.size() > 1 ? in[1].elementType() : Type();
  } else {
    element = onnxElementType(n.getContext(), attrInt(n, "to", 0));
  }
  if (!element)
    return success();
  out[0] = tensor(x, element);
  // Values pass through casts between integers and floats (yolo: a Range's
  // limit is Cast(Gather(Shape(x))) to float).
  bool toInt = element.isInteger(), toFloat = isa<FloatType>(element);
  if (in[0].ints && toInt) {
    out[0].ints = in[0].ints;
    if (element.isInteger(1))
      for (auto &v : *out[0].ints) v = v != 0;
  } else if (in[0].ints && toFloat) {
    out[0].floats = SmallVector<double>(in[0].ints->begin(), in[0].ints->end());
  } else if (in[0].floats && toFloat) {
    out[0].floats = in[0].floats;
  } else if (in[0].floats && toInt) {
    Shape v;
    for (double d : *in[0].floats) {
      if (!std::isfinite(d))
        return success();
      v.push_back(element.isInteger(1) ? d != 0 : int64_t(d)); // toward zero
    }
    out[0].ints = v;
  }
  return success();
}

/// ONNX TensorProto.DataType numbers, as the importer maps them.
Type onnxElementType(MLIRContext *c, int64_t dt) {
  Type element;
  {
    switch (dt) {
    case 1: element = Float32Type::get(c); break;
    case 2: element = IntegerType::get(c, 8, IntegerType::Unsigned); break;
    case 3: element = IntegerType::get(c, 8); break;
    case 4: element = IntegerType::get(c, 16, IntegerType::Unsigned); break;
    case 5: element = IntegerType::get(c, 16); break;
    case 6: element = IntegerType::get(c, 32); break;
    case 7: element = IntegerType::get(c, 64); break;
    case 9: element = IntegerType::get(c, 1); break;
    case 10: element = Float16Type::get(c); break;
    case 11: element = Float64Type::get(c); break;
    case 12: element = IntegerType::get(c, 32, IntegerType::Unsigned); break;
    case 13: element = IntegerType::get(c, 64, IntegerType::Unsigned); break;
    case 16: element = BFloat16Type::get(c); break;
    case 21: element = IntegerType::get(c, 4, IntegerType::Unsigned); break;
    case 22: element = IntegerType::get(c, 4); break;
    default: break;
    }
  }
  return element;
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult constantOfShapeOp(NodeOp n, ArrayRef<ValueFacts> in,
                                SmallVectorImpl<ValueFacts> &out, std::string &why) {
  if (in.size() != 1)
    return (why = "needs 1 input (the shape), not " + std::to_string(in.size()), failure());
  auto shape = intsFrom(n, in, 0);
  Type element = Float32Type::get(n.getContext());
  std::optional<int64_t> fill;
  if (auto value = dyn_cast_or_null<DenseElementsAttr>(n.getOnnxAttr("value"))) {
    element = value.getElementType();
    if (element.isInteger() && value.getNumElements() == 1)
      fill = value.getSplatValue<APInt>().getSExtValue();
  }
  // (Found by the compile fuzzer: a negative dim made the folded fill a
  // vector of 2^64 - 1 elements, and a shape input of 2^40 entries a rank
  // of 2^40.)
  constexpr int64_t kMaxRank = 64;
  if (!shape) {
    if (auto s = in[0].shape(); s && s->size() == 1 && !isDyn((*s)[0])) {
      if ((*s)[0] < 0 || (*s)[0] > kMaxRank)
        return (why = "a shape of " + std::to_string((*s)[0]) + " dims", failure());
      out[0] = tensor(Shape((*s)[0], kDyn), element);
    }
    return success();
  }
  if (int64_t(shape->size()) > kMaxRank)
    return (why = "a shape of " + std::to_string(shape->size()) + " dims", failure());
  for (int64_t d : *shape)
    if (d < 0 && !isDyn(d))
      return (why = "shape has a negative dim (" + std::to_string(d) + ")", failure());
  out[0] = tensor(*shape, element);
  int64_t total = numElements(*shape);
  if (fill && total >= 0 && total <= int64_t(kMaxFoldedElements))
    out[0].ints = Shape(total, *fill);
  return success();
}

LogicalResult rangeOp(NodeOp n, ArrayRef<ValueFacts> in,
                      SmallVectorImpl<ValueFacts> &out, std::string &why) {
  if (in.size() != 3)
    return (why = "Range needs start, limit and delta", failure());
  Type element = in[0].elementType();
  if (!element)
    element = in[1].elementType();
  if (!element)
    return success();
  auto scalar = [&](unsigned i) -> std::optional<double> {
    if (in[i].ints && in[i].ints->size() == 1)
      return double((*in[i].ints)[0]);
    if (in[i].floats && in[i].floats->size() == 1)
      return (*in[i].floats)[0];
    return std::nullopt;
  };
  auto start = scalar(0), limit = scalar(1), delta = scalar(2);
  if (!start || !limit || !delta) {
    // Rank 1 always; the length follows from values known only at run time.
    out[0] = tensor({kDyn}, element);
    return success();
  }
  if (*delta == 0)
    return (why = "Range delta is 0", failure());
  // ONNX: max(ceil((limit - start) / delta), 0) elements.
  int64_t count = std::max<int64_t>(0, int64_t(std::ceil((*limit - *start) / *delta)));
  if (in[0].ints && in[1].ints && in[2].ints) {
    int64_t s0 = (*in[0].ints)[0], d = (*in[2].ints)[0];
    Shape values;
    for (int64_t i = 0; i < count && i <= int64_t(kMaxFoldedElements); ++i)
      values.push_back(s0 + i * d);
    out[0] = count <= int64_t(kMaxFoldedElements) ? intTensor({count}, element, values)
                                                  : tensor({count}, element);
    return success();
  }
  out[0] = tensor({count}, element);
  if (isa<FloatType>(element) && count <= int64_t(kMaxFoldedElements)) {
    SmallVector<double> values;
    for (int64_t i = 0; i < count; ++i)
      values.push_back(*start + double(i) * *delta);
    out[0].floats = values;
  }
  return success();
}

LogicalResult resizeOp(NodeOp n, ArrayRef<ValueFacts> in,
                       SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  // Resize(X, roi, scales, sizes) from opset 11; Upsample(X, scales) and
  // Resize(X, scales) before.
  unsigned scalesAt = n.getOpType() == "Upsample" || n.getOpset() < 11 ? 1 : 2;
  if (auto sizes = present(in, 3) ? intsFrom(n, in, 3) : std::nullopt) {
    if (sizes->size() != x.size())
      return (why = "sizes must have one entry per dim", failure());
    out[0] = tensor(*sizes, in[0].elementType());
    return success();
  }
  std::optional<SmallVector<double>> scales =
      scalesAt < in.size() && in[scalesAt].floats ? in[scalesAt].floats
                                                  : attrFloats(n, "scales");
  if (!scales || scales->empty())
    return success();
  if (scales->size() != x.size())
    return (why = "scales must have one entry per dim", failure());
  Shape result;
  for (size_t i = 0; i < x.size(); ++i)
  {
    int64_t d = kDyn;
    if (!isDyn(x[i]) && !runtime::countInto(std::floor(double(x[i]) * (*scales)[i]), d))
      return (why = "scale " + std::to_string((*scales)[i]) + " gives no size for dim " +
                    std::to_string(i),
              failure());
    result.push_back(d);
  }
  out[0] = tensor(result, in[0].elementType());
  return success();
}

LogicalResult topKOp(NodeOp n, ArrayRef<ValueFacts> in,
                     SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  int64_t axis = normAxis(attrInt(n, "axis", -1), x.size());
  auto k = n.getOpset() < 10 ? std::optional<Shape>(Shape{attrInt(n, "k", kDyn)})
                             : intsFrom(n, in, 1);
  if (axis < 0 || axis >= int64_t(x.size()))
    return (why = "axis out of range", failure());
  Shape result = x;
  bool bounded = !k && !isDyn(x[axis]);
  result[axis] = k ? (*k)[0] : x[axis]; // k computed at run time: at most the dim
  out[0] = tensor(result, in[0].elementType());
  if (out.size() > 1)
    out[1] = tensor(result, IntegerType::get(n.getContext(), 64));
  if (bounded)
    for (auto &o : out)
      o.upperBound = upperBoundNote("k", x[axis], "the size of the axis it selects from");
  return success();
}

LogicalResult quantizeOp(NodeOp n, ArrayRef<ValueFacts> in,
                         SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  Type element;
  if (n.getOpType() == "DequantizeLinear")
    element = in.size() > 1 ? in[1].elementType() : Type();
  else if (int64_t dt = attrInt(n, "output_dtype", 0))
    element = onnxElementType(n.getContext(), dt);
  else
    element = present(in, 2) ? in[2].elementType()
                             : IntegerType::get(n.getContext(), 8, IntegerType::Unsigned);
  if (element)
    out[0] = tensor(x, element);
  return success();
}

/// Runs `rule` on the inputs at `pick` (the QOperator ops' data operands
/// among their scales and zero points).
LogicalResult onPicked(ShapeRule rule, NodeOp n, ArrayRef<ValueFacts> in,
                       ArrayRef<unsigned> pick, SmallVectorImpl<ValueFacts> &out,
                       std::string &why) {
  SmallVector<ValueFacts> sub;
  for (unsigned i : pick) {
    if (i >= in.size())
      return (why = "needs input #" + std::to_string(i), failure());
    sub.push_back(in[i]);
  }
  SmallVector<ValueFacts> o(1);
  if (failed(rule(n, sub, o, why)))
    return failure();
  if (o[0].type && !out.empty())
    out[0] = o[0];
  return success();
}

/// Sets out[0]'s element type to `element` (kept as computed when null).
void retype(SmallVectorImpl<ValueFacts> &out, Type element) {
  if (out.empty() || !element)
    return;
  if (auto s = out[0].shape())
    out[0] = tensor(*s, element);
}

/// com.microsoft's QLinearAdd and QLinearMul (onnxruntime's quantizer;
/// onnxruntime/docs/ContribOperators.md): A, A_scale, A_zp, B, B_scale,
/// B_zp, C_scale, C_zp, broadcast as Add and Mul; the output takes the
/// element type of its zero point, else of A. The other quantized ops are in
/// the op table (ops/defs/Quantize.cpp, MatMul.cpp, Conv.cpp).
LogicalResult qLinearBinaryOp(NodeOp n, ArrayRef<ValueFacts> in,
                              SmallVectorImpl<ValueFacts> &out, std::string &why) {
  if (failed(onPicked(broadcastOp, n, in, {0, 3}, out, why)))
    return failure();
  retype(out, present(in, 7) && in[7].elementType() ? in[7].elementType() : in[0].elementType());
  return success();
}

//===----------------------------------------------------------------------===//
// Indexing, scatter, one-hot, einsum
//===----------------------------------------------------------------------===//

LogicalResult oneHotOp(NodeOp n, ArrayRef<ValueFacts> in,
                       SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(indices, 0);
  if (in.size() < 3)
    return (why = "OneHot needs indices, depth and values", failure());
  int64_t depth = kDyn;
  if (in[1].ints && in[1].ints->size() == 1)
    depth = (*in[1].ints)[0];
  else if (in[1].floats && in[1].floats->size() == 1)
    depth = int64_t((*in[1].floats)[0]);
  if (!isDyn(depth) && depth < 1)
    return (why = "depth must be at least 1, not " + std::to_string(depth), failure());
  int64_t rank = indices.size() + 1;
  int64_t axis = normAxis(attrInt(n, "axis", -1), rank);
  if (axis < 0 || axis >= rank)
    return (why = "axis out of range", failure());
  Shape result = indices;
  result.insert(result.begin() + axis, depth);
  Type element = in[2].elementType();
  if (element)
    out[0] = tensor(result, element);
  // Known indices, depth and integer values: the values (Mixtral's expert
  // loop tiles by a OneHot of a TopK's k).
  int64_t total = numElements(result);
  if (element && element.isInteger() && in[0].ints && in[2].ints && in[2].ints->size() == 2 &&
      !isDyn(depth) && !isDyn(total) && total <= int64_t(kMaxFoldedElements)) {
    int64_t off = (*in[2].ints)[0], on = (*in[2].ints)[1];
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= result[d];
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= result[d];
    Shape values(total, off);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = (*in[0].ints)[o * inner + i];
        if (k < 0)
          k += depth;
        if (k >= 0 && k < depth)
          values[(o * depth + k) * inner + i] = on;
      }
    out[0].ints = values;
  }
  return success();
}

const llvm::StringMap<ShapeRule> &rules() {
  static const llvm::StringMap<ShapeRule> table = [] {
    llvm::StringMap<ShapeRule> t;
    for (const char *op :
         {"Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Sin",
          "Cos", "Gelu", "LeakyRelu", "Elu", "Softplus", "Identity", "Dropout", "Clip",
          "BatchNormalization", "LRN"})
      t[op] = sameAsInput;
    for (const char *op :
         {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "And", "Or",
          "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
          "BitShift", "Sum", "Mean", "Where"})
      t[op] = broadcastOp;
    t["Cast"] = castOp;
    t["CastLike"] = castOp;
    t["ConstantOfShape"] = constantOfShapeOp;
    t["Range"] = rangeOp;
    t["Resize"] = resizeOp;
    t["Upsample"] = resizeOp;
    t["TopK"] = topKOp;
    t["OneHot"] = oneHotOp;
    t["QuantizeLinear"] = quantizeOp;
    t["DequantizeLinear"] = quantizeOp;
    return t;
  }();
  return table;
}

} // namespace

std::optional<ArrayRef<int64_t>> ValueFacts::shape() const {
  if (auto ranked = dyn_cast_or_null<RankedTensorType>(type))
    return ranked.getShape();
  return std::nullopt;
}

Type ValueFacts::elementType() const {
  if (auto shaped = dyn_cast_or_null<TensorType>(type))
    return shaped.getElementType();
  return {};
}

Type makeTensor(ArrayRef<int64_t> shape, Type element) {
  return RankedTensorType::get(shape, element);
}

std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                    ArrayRef<int64_t> b) {
  auto result = ops::broadcast(std::vector<int64_t>(a.begin(), a.end()),
                               std::vector<int64_t>(b.begin(), b.end()));
  if (!result)
    return std::nullopt;
  return SmallVector<int64_t>(result->begin(), result->end());
}

ShapeRule lookupShapeRule(StringRef domain, StringRef opType) {
  if (const ops::OpDef *def = ops::findOp(domain.str(), opType.str()); def && def->shape)
    return tableRule;
  if (domain == "com.microsoft" && opType == "Gelu")
    return sameAsInput;
  if (domain == "com.microsoft" && (opType == "QLinearAdd" || opType == "QLinearMul"))
    return qLinearBinaryOp;
  if (!domain.empty())
    return nullptr;
  auto it = rules().find(opType);
  return it == rules().end() ? nullptr : it->second;
}

ValueFacts factsOfConstant(Operation *op) {
  ValueFacts f{op->getResult(0).getType(), std::nullopt, std::nullopt};
  Attribute value;
  if (auto w = dyn_cast<WeightOp>(op))
    value = w.getValueAttr();
  else if (auto c = dyn_cast<ConstantOp>(op))
    value = c.getValue();
  auto dense = dyn_cast_or_null<DenseElementsAttr>(value);
  if (!dense || dense.getNumElements() > int64_t(kMaxFoldedElements))
    return f;
  Type element = dense.getElementType();
  if (element.isInteger()) {
    SmallVector<int64_t> ints;
    bool zext = element.isUnsignedInteger() || element.isInteger(1);
    for (const APInt &v : dense.getValues<APInt>())
      ints.push_back(zext ? int64_t(v.getZExtValue()) : v.getSExtValue());
    f.ints = ints;
  } else if (isa<FloatType>(element)) {
    SmallVector<double> floats;
    for (const APFloat &v : dense.getValues<APFloat>())
      floats.push_back(v.convertToDouble());
    f.floats = floats;
  }
  return f;
}

} // namespace hetplan::het
