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
StringRef attrStr(NodeOp n, StringRef name, StringRef dflt) {
  if (auto a = dyn_cast_or_null<StringAttr>(n.getOnnxAttr(name)))
    return a.getValue();
  return dflt;
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

std::string upperBoundNote(StringRef what, int64_t bound, StringRef because) {
  return (what + " is known only at run time; planned with its upper bound " +
          std::to_string(bound) + " (" + because + ")")
      .str();
}

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
  std::vector<ops::ValueShape> shapes(in.size());
  for (auto [i, facts] : llvm::enumerate(in)) {
    ops::ValueShape &v = shapes[i];
    v.present = present(in, i);
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
    }
    out[i] = tensor(r.dims, element);
    if (r.ints)
      out[i].ints = Shape(r.ints->begin(), r.ints->end());
  }
  return success();
}

LogicalResult tableRule(NodeOp n, ArrayRef<ValueFacts> in,
                        SmallVectorImpl<ValueFacts> &out, std::string &why) {
  return runTableRule(opDefOf(n), n, in, out, why);
}
/// The float products' rules, for the integer and QOperator ops that keep them.
LogicalResult matMulOp(NodeOp n, ArrayRef<ValueFacts> in,
                       SmallVectorImpl<ValueFacts> &out, std::string &why) {
  return runTableRule(opDefOf(ops::names::MatMul), n, in, out, why);
}
LogicalResult gemmOp(NodeOp n, ArrayRef<ValueFacts> in,
                     SmallVectorImpl<ValueFacts> &out, std::string &why) {
  return runTableRule(opDefOf(ops::names::Gemm), n, in, out, why);
}
LogicalResult convOp(NodeOp n, ArrayRef<ValueFacts> in,
                     SmallVectorImpl<ValueFacts> &out, std::string &why) {
  return runTableRule(opDefOf(ops::names::Conv), n, in, out, why);
}
LogicalResult concatOp(NodeOp n, ArrayRef<ValueFacts> in,
                       SmallVectorImpl<ValueFacts> &out, std::string &why) {
  return runTableRule(opDefOf("Concat"), n, in, out, why);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult sameAsInput(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  Type element = in[0].elementType();
  StringRef op = n.getOpType();
  if (op == "IsNaN" || op == "IsInf" || op == "Not")
    element = IntegerType::get(n.getContext(), 1);
  out[0] = tensor(x, element);
  if (op == "Identity" || op == "Neg" || op == "Abs")
    if (in[0].ints) {
      Shape v = *in[0].ints;
      if (op == "Neg")
        for (auto &e : v) e = -e;
      if (op == "Abs")
        for (auto &e : v) e = std::abs(e);
      out[0].ints = v;
    }
  // Secondary outputs: Dropout's mask, LayerNormalization's statistics.
  if (out.size() > 1 && op == "Dropout")
    out[1] = tensor(x, IntegerType::get(n.getContext(), 1));
  if (out.size() > 1 && op == "RMSNormalization") {
    int64_t axis = normAxis(attrInt(n, "axis", -1), x.size());
    Shape stat = x;
    for (size_t i = axis; i < stat.size(); ++i)
      stat[i] = 1;
    for (size_t i = 1; i < out.size(); ++i)
      out[i] = tensor(stat, FloatType(Float32Type::get(n.getContext())));
  }
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

LogicalResult broadcastOp(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  if (in.empty())
    return success();
  StringRef op = n.getOpType();
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

  std::optional<Shape> folded;
  int64_t total = numElements(shape);
  if (op == "Add")
    // ONNX integer arithmetic wraps as two's complement (as onnxruntime's
    // does); computed unsigned, where wrapping is defined.
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return int64_t(uint64_t(a[0]) + uint64_t(a[1])); });
  else if (op == "Sub")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return int64_t(uint64_t(a[0]) - uint64_t(a[1])); });
  else if (op == "Mul")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return int64_t(uint64_t(a[0]) * uint64_t(a[1])); });
  else if (op == "Div")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return a[1] ? a[0] / a[1] : 0; });
  else if (op == "Equal")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) -> int64_t { return a[0] == a[1]; });
  else if (op == "Max")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return *llvm::max_element(a); });
  else if (op == "Min")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return *llvm::min_element(a); });
  else if (op == "Where")
    folded = foldInts(in, total, [](ArrayRef<int64_t> a) { return a[0] ? a[1] : a[2]; });
  if (folded)
    out[0].ints = folded;
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
  auto shape = intsFrom(n, in, 0);
  Type element = Float32Type::get(n.getContext());
  std::optional<int64_t> fill;
  if (auto value = dyn_cast_or_null<DenseElementsAttr>(n.getOnnxAttr("value"))) {
    element = value.getElementType();
    if (element.isInteger() && value.getNumElements() == 1)
      fill = value.getSplatValue<APInt>().getSExtValue();
  }
  if (!shape) {
    if (auto s = in[0].shape(); s && s->size() == 1 && !isDyn((*s)[0]))
      out[0] = tensor(Shape((*s)[0], kDyn), element);
    return success();
  }
  out[0] = tensor(*shape, element);
  int64_t total = numElements(*shape);
  if (fill && total <= int64_t(kMaxFoldedElements))
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

LogicalResult recurrentOp(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  if (x.size() != 3)
    return (why = "recurrent input must be [seq, batch, input]", failure());
  int64_t hidden = attrInt(n, "hidden_size", kDyn);
  int64_t dirs = attrStr(n, "direction", "forward") == "bidirectional" ? 2 : 1;
  bool batchFirst = attrInt(n, "layout", 0) == 1;
  int64_t seq = batchFirst ? x[1] : x[0], batch = batchFirst ? x[0] : x[1];
  Type element = in[0].elementType();
  if (out.size() > 0)
    out[0] = tensor(batchFirst ? Shape{batch, seq, dirs, hidden}
                               : Shape{seq, dirs, batch, hidden},
                    element);
  for (size_t i = 1; i < out.size(); ++i)
    out[i] = tensor(batchFirst ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden},
                    element);
  return success();
}

LogicalResult attentionOp(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  // ONNX Attention (opset 23): Q, K, V as [B, H, S, D] or [B, S, H*D].
  REQUIRE_SHAPE(q, 0);
  REQUIRE_SHAPE(v, 2);
  Shape result;
  if (q.size() == 4 && v.size() == 4) {
    result = {q[0], q[1], q[2], v[3]};
  } else if (q.size() == 3 && v.size() == 3) {
    int64_t qHeads = attrInt(n, "q_num_heads", kDyn);
    int64_t kvHeads = attrInt(n, "kv_num_heads", kDyn);
    int64_t headV = (isDyn(v[2]) || isDyn(kvHeads) || kvHeads == 0) ? kDyn : v[2] / kvHeads;
    result = {q[0], q[1], mulDims(qHeads, headV)};
  } else {
    return (why = "Q and V must both be rank 3 or rank 4", failure());
  }
  out[0] = tensor(result, in[0].elementType());
  return success();
}

// com.microsoft Attention (onnxruntime's fused GPT-2/BERT attention): input
// [B, S, D], packed QKV weights [D, 3 Dh], optional past [2, B, N, P, Dh/N]
// -> output [B, S, Dh] and present [2, B, N, P + S, Dh/N].
LogicalResult contribAttentionOp(NodeOp n, ArrayRef<ValueFacts> in,
                                 SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  REQUIRE_SHAPE(w, 1);
  if (x.size() != 3 || w.size() != 2)
    return (why = "needs input [batch, sequence, hidden] and weights [hidden, 3 x hidden]", failure());
  if (n.getOnnxAttr("qkv_hidden_sizes"))
    return (why = "qkv_hidden_sizes is not supported", failure());
  int64_t heads = attrInt(n, "num_heads", 0);
  if (heads <= 0)
    return (why = "num_heads must be positive", failure());
  int64_t hidden = isDyn(w[1]) ? kDyn : w[1] / 3;
  out[0] = tensor({x[0], x[1], hidden}, in[0].elementType());
  if (out.size() > 1) {
    int64_t past = 0;
    if (present(in, 4)) {
      REQUIRE_SHAPE(p, 4);
      if (p.size() != 5)
        return (why = "past must be [2, batch, heads, past, head size]", failure());
      past = p[3];
    }
    int64_t head = isDyn(hidden) ? kDyn : hidden / heads;
    out[1] = tensor({2, x[0], heads, addDims(past, x[1]), head}, in[0].elementType());
  }
  return success();
}

// com.microsoft SkipLayerNormalization: output and input_skip_bias_sum
// (output 3) are shaped like the input; mean and inv_std_var (1, 2) keep
// one value per row.
LogicalResult skipLayerNormOp(NodeOp n, ArrayRef<ValueFacts> in,
                              SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  if (x.empty())
    return (why = "needs an input with a hidden axis", failure());
  Shape stat = x;
  stat.back() = 1;
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = tensor(i == 1 || i == 2 ? stat : x, in[0].elementType());
  return success();
}

// com.microsoft EmbedLayerNormalization: input_ids [B, S], word embedding
// [V, H] -> output [B, S, H], mask_index [B] (int32), embedding_sum [B, S, H].
LogicalResult embedLayerNormOp(NodeOp n, ArrayRef<ValueFacts> in,
                               SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(ids, 0);
  REQUIRE_SHAPE(word, 2);
  if (ids.size() != 2 || word.size() != 2)
    return (why = "needs input_ids [batch, sequence] and word_embedding [vocabulary, hidden]", failure());
  Type element = in[2].elementType();
  out[0] = tensor({ids[0], ids[1], word[1]}, element);
  if (out.size() > 1)
    out[1] = tensor({ids[0]}, IntegerType::get(n.getContext(), 32));
  if (out.size() > 2)
    out[2] = tensor({ids[0], ids[1], word[1]}, element);
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

/// The integer and QOperator ops: ONNX's MatMulInteger, ConvInteger,
/// QLinearMatMul, QLinearConv, DynamicQuantizeLinear, and the com.microsoft
/// contrib ops onnxruntime's quantizer emits (QLinearAdd/Mul, QGemm,
/// QLinearSoftmax, QLinearConcat, QLinearGlobalAveragePool, QLinear
/// activations; onnxruntime/docs/ContribOperators.md). Quantized outputs take
/// the element type of the output zero point, else of the quantized input.
LogicalResult quantizedOp(NodeOp n, ArrayRef<ValueFacts> in,
                          SmallVectorImpl<ValueFacts> &out, std::string &why) {
  StringRef op = n.getOpType();
  MLIRContext *c = n.getContext();
  auto zpType = [&](unsigned zp, unsigned x) -> Type {
    if (present(in, zp) && in[zp].elementType())
      return in[zp].elementType();
    return x < in.size() ? in[x].elementType() : Type();
  };
  Type i32 = IntegerType::get(c, 32);
  if (op == "MatMulInteger") {
    if (failed(onPicked(matMulOp, n, in, {0, 1}, out, why)))
      return failure();
    retype(out, i32);
    return success();
  }
  if (op == "ConvInteger") {
    if (failed(onPicked(convOp, n, in, {0, 1}, out, why)))
      return failure();
    retype(out, i32);
    return success();
  }
  if (op == "QLinearMatMul") {
    if (failed(onPicked(matMulOp, n, in, {0, 3}, out, why)))
      return failure();
    retype(out, zpType(7, 0));
    return success();
  }
  if (op == "QLinearConv") {
    if (failed(onPicked(convOp, n, in, {0, 3}, out, why)))
      return failure();
    retype(out, zpType(7, 0));
    return success();
  }
  if (op == "QGemm") {
    // A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp: float32 output
    // without y_scale.
    if (failed(onPicked(gemmOp, n, in, {0, 3}, out, why)))
      return failure();
    retype(out, present(in, 7) ? zpType(8, 0) : Float32Type::get(c));
    return success();
  }
  if (op == "QLinearAdd" || op == "QLinearMul") {
    if (failed(onPicked(broadcastOp, n, in, {0, 3}, out, why)))
      return failure();
    retype(out, zpType(7, 0));
    return success();
  }
  if (op == "QLinearSoftmax" || op == "QLinearLeakyRelu" || op == "QLinearSigmoid") {
    // X, X_scale, X_zp, Y_scale, Y_zp
    REQUIRE_SHAPE(x, 0);
    out[0] = tensor(x, zpType(4, 0));
    return success();
  }
  if (op == "QLinearGlobalAveragePool") {
    REQUIRE_SHAPE(x, 0);
    if (x.size() < 3)
      return (why = "pooling needs rank >= 3", failure());
    Shape result(x);
    if (attrInt(n, "channels_last", 0))
      std::fill(result.begin() + 1, result.end() - 1, 1);
    else
      std::fill(result.begin() + 2, result.end(), 1);
    out[0] = tensor(result, zpType(4, 0));
    return success();
  }
  if (op == "QLinearConcat") {
    // Y_scale, Y_zp, then (X, X_scale, X_zp) per operand.
    SmallVector<unsigned> pick;
    for (unsigned i = 2; i < in.size(); i += 3)
      pick.push_back(i);
    if (failed(onPicked(concatOp, n, in, pick, out, why)))
      return failure();
    retype(out, zpType(1, 2));
    return success();
  }
  if (op == "DynamicQuantizeLinear") {
    REQUIRE_SHAPE(x, 0);
    Type u8 = IntegerType::get(c, 8, IntegerType::Unsigned);
    out[0] = tensor(x, u8);
    if (out.size() > 1)
      out[1] = tensor({}, Float32Type::get(c));
    if (out.size() > 2)
      out[2] = tensor({}, u8);
    return success();
  }
  return (why = "no quantized shape rule for " + op.str(), failure());
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

LogicalResult nonZeroOp(NodeOp n, ArrayRef<ValueFacts> in,
                        SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  Type i64 = IntegerType::get(n.getContext(), 64);
  int64_t rank = x.size();
  int64_t total = numElements(x);
  if (in[0].ints && !isDyn(total) && int64_t(in[0].ints->size()) == total) {
    // A constant input: the indices themselves fold.
    Shape nz;
    for (auto [k, v] : llvm::enumerate(*in[0].ints))
      if (v)
        nz.push_back(int64_t(k));
    int64_t count = nz.size();
    Shape values(rank * count);
    for (int64_t j = 0; j < count; ++j) {
      int64_t flat = nz[j];
      for (int64_t a = rank; a-- > 0;) {
        values[a * count + j] = flat % x[a];
        flat /= x[a];
      }
    }
    out[0] = intTensor({rank, count}, i64, values);
    return success();
  }
  out[0] = tensor({rank, total}, i64);
  if (!isDyn(total))
    out[0].upperBound = upperBoundNote("the number of nonzero elements", total,
                                       "every element of the input");
  return success();
}

LogicalResult uniqueOp(NodeOp n, ArrayRef<ValueFacts> in,
                       SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  Type i64 = IntegerType::get(n.getContext(), 64);
  auto axisAttr = dyn_cast_or_null<IntegerAttr>(n.getOnnxAttr("axis"));
  Shape y;
  int64_t bound, inverse;
  if (axisAttr) {
    int64_t axis = normAxis(axisAttr.getInt(), x.size());
    if (axis < 0 || axis >= int64_t(x.size()))
      return (why = "axis out of range", failure());
    bound = inverse = x[axis];
    y = x;
    y[axis] = bound;
  } else {
    bound = inverse = numElements(x);
    y = {bound};
  }
  out[0] = tensor(y, in[0].elementType());
  for (size_t i = 1; i < out.size(); ++i)
    out[i] = tensor({i == 2 ? inverse : bound}, i64);
  if (!isDyn(bound))
    for (size_t i = 0; i < out.size(); ++i)
      if (i != 2)
        out[i].upperBound = upperBoundNote("the number of unique values", bound,
                                           axisAttr ? "every slice of the input"
                                                    : "every element of the input");
  return success();
}

LogicalResult compressOp(NodeOp n, ArrayRef<ValueFacts> in,
                         SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(x, 0);
  auto axisAttr = dyn_cast_or_null<IntegerAttr>(n.getOnnxAttr("axis"));
  int64_t condLen = kDyn;
  if (auto c = in.size() > 1 ? in[1].shape() : std::nullopt; c && c->size() == 1)
    condLen = (*c)[0];
  Shape result;
  int64_t bound;
  if (axisAttr) {
    int64_t axis = normAxis(axisAttr.getInt(), x.size());
    if (axis < 0 || axis >= int64_t(x.size()))
      return (why = "axis out of range", failure());
    bound = isDyn(condLen) ? x[axis] : isDyn(x[axis]) ? condLen : std::min(condLen, x[axis]);
    result = x;
    result[axis] = bound;
  } else {
    int64_t total = numElements(x);
    bound = isDyn(condLen) ? total : isDyn(total) ? condLen : std::min(condLen, total);
    result = {bound};
  }
  out[0] = tensor(result, in[0].elementType());
  if (!isDyn(bound))
    out[0].upperBound = upperBoundNote("the number of selected elements", bound,
                                       "every element the condition covers");
  return success();
}

LogicalResult nonMaxSuppressionOp(NodeOp n, ArrayRef<ValueFacts> in,
                                  SmallVectorImpl<ValueFacts> &out, std::string &why) {
  REQUIRE_SHAPE(boxes, 0);
  REQUIRE_SHAPE(scores, 1);
  if (boxes.size() != 3 || scores.size() != 3)
    return (why = "boxes must be [batch, boxes, 4] and scores [batch, classes, boxes]",
            failure());
  int64_t spatial = boxes[1];
  if (auto m = present(in, 2) ? intsFrom(n, in, 2) : std::optional<Shape>(Shape{0});
      m && m->size() == 1 && !isDyn(spatial))
    spatial = std::min(spatial, std::max<int64_t>((*m)[0], 0));
  int64_t bound = mulDims(mulDims(scores[0], scores[1]), spatial);
  out[0] = tensor({bound, 3}, IntegerType::get(n.getContext(), 64));
  if (!isDyn(bound))
    out[0].upperBound = upperBoundNote("the number of selected boxes", bound,
                                       "batches x classes x max_output_boxes_per_class");
  return success();
}

const llvm::StringMap<ShapeRule> &rules() {
  static const llvm::StringMap<ShapeRule> table = [] {
    llvm::StringMap<ShapeRule> t;
    for (const char *op :
         {"Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs",
          "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Gelu", "LeakyRelu", "Elu", "Selu", "Celu",
          "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish",
          "ThresholdedRelu", "Shrink", "Identity", "Dropout", "Clip",
          "RMSNormalization", "BatchNormalization",
          "InstanceNormalization", "GroupNormalization", "LRN",
          "MeanVarianceNormalization", "Not", "IsNaN", "IsInf", "Sign",
          "CumSum", "Trilu", "Swish", "PRelu", "Asin", "Acos", "Atan", "Sinh", "Cosh",
          "Asinh", "Acosh", "Atanh"})
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
    t["LSTM"] = recurrentOp;
    t["GRU"] = recurrentOp;
    t["RNN"] = recurrentOp;
    t["Attention"] = attentionOp;
    t["OneHot"] = oneHotOp;
    t["NonZero"] = nonZeroOp;
    t["Unique"] = uniqueOp;
    t["Compress"] = compressOp;
    t["NonMaxSuppression"] = nonMaxSuppressionOp;
    t["QuantizeLinear"] = quantizeOp;
    t["DequantizeLinear"] = quantizeOp;
    for (const char *op : {"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv",
                           "DynamicQuantizeLinear"})
      t[op] = quantizedOp;
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
  if (domain == "com.microsoft" &&
      (opType == "Gelu" || opType == "FastGelu" || opType == "BiasGelu" ||
       opType == "SimplifiedLayerNormalization"))
    return sameAsInput;
  if (domain == "com.microsoft" && opType == "SkipLayerNormalization")
    return skipLayerNormOp;
  if (domain == "com.microsoft" && opType == "Attention")
    return contribAttentionOp;
  if (domain == "com.microsoft" && opType == "EmbedLayerNormalization")
    return embedLayerNormOp;
  if (domain == "com.microsoft" &&
      llvm::is_contained(ArrayRef<StringRef>{"QLinearAdd", "QLinearMul", "QGemm", "QLinearSoftmax",
                                             "QLinearConcat", "QLinearGlobalAveragePool",
                                             "QLinearLeakyRelu", "QLinearSigmoid", "QLinearConv",
                                             "QLinearMatMul"},
                         opType))
    return quantizedOp;
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
