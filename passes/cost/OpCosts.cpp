//===- OpCosts.cpp - forward cost of each het.node ------------------------===//
//
// FLOP counts follow the ONNX operator specification (onnx/docs/Operators.md)
// for what each op computes; a multiply-add is 2 FLOPs. The constants for
// elementwise functions and normalizations are documented, with their
// derivation, in docs/cost-model.md ("Per-op rules"). Keep the two in step.
//
//===----------------------------------------------------------------------===//

#include "passes/cost/OpCosts.h"
#include "passes/cost/OpTableAdapter.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <functional>

using namespace mlir;
using namespace hetplan::het;

namespace hetplan::cost {

namespace {

/// Cost of a transcendental function per element (the table's constant).
using ops::kTranscendental;

std::optional<ArrayRef<int64_t>> staticShape(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return std::nullopt;
  return ranked.getShape();
}
std::optional<ArrayRef<int64_t>> staticShape(Value v) { return staticShape(v.getType()); }

double elems(Value v) { return double(numElements(v.getType())); }

int64_t attrInt(NodeOp n, StringRef name, int64_t dflt) {
  if (auto a = dyn_cast_or_null<IntegerAttr>(n.getOnnxAttr(name)))
    return a.getInt();
  return dflt;
}
StringRef attrStr(NodeOp n, StringRef name, StringRef dflt) {
  if (auto a = dyn_cast_or_null<StringAttr>(n.getOnnxAttr(name)))
    return a.getValue();
  return dflt;
}
double outputElems(NodeOp n) {
  double total = 0;
  for (Value r : n.getResults())
    total += elems(r);
  return total;
}
double inputElems(NodeOp n, unsigned i = 0) {
  return i < n.getInputs().size() ? elems(n.getInputs()[i]) : 0;
}

/// The FLOP side of a rule.
struct Raw {
  double flops = 0;
  bool matrix = false;
  bool view = false;         // aliases its input: no kernel, no traffic
  bool readsOutput = false;  // Gather/Slice: reads only what it outputs from input 0
  bool estimated = false;
  double batchedProducts = 0;  // ops::Cost::batchedProducts
};

// Elementwise functions: FLOPs per output element.
const llvm::StringMap<double> &unaryFlops() {
  static const llvm::StringMap<double> table = {
      {"Neg", 1}, {"Abs", 1}, {"Reciprocal", 1}, {"Sqrt", 1}, {"BitwiseNot", 1},
      {"LeakyRelu", 2}, {"Clip", 2}, {"Exp", kTranscendental},
      {"Log", kTranscendental}, {"Erf", kTranscendental}, {"Tanh", kTranscendental},
      {"Sigmoid", kTranscendental}, {"Sin", kTranscendental}, {"Cos", kTranscendental},
      // exp + subtract + multiply (+ select)
      {"Elu", kTranscendental + 2},
      // log(1 + exp(x))
      {"Softplus", 2 * kTranscendental + 1},
      // (x - zero_point) * scale and its inverse with rounding
      {"QuantizeLinear", 2}, {"DequantizeLinear", 2},
      // x * cos + rotate(x) * sin
      {"RotaryEmbedding", 3}, {"CumProd", 1},
      // square, sum, divide (per element; the root per row is negligible)
      {"LpNormalization", 3},
  };
  return table;
}

// Broadcasting binary ops: one FLOP per output element (Pow: a transcendental).
bool isBinary(StringRef op) {
  static const llvm::StringSet<> ops = {
      "Add", "Sub", "Mul", "Div", "Mod", "BitShift", "And", "Or", "Xor", "Equal",
      "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "BitwiseAnd", "BitwiseOr",
      "BitwiseXor", "Where"};
  return ops.contains(op);
}

// Ops that only move data: FLOPs 0, bytes in + out.
bool isDataMovement(StringRef op) {
  static const llvm::StringSet<> ops = {
      "Cast", "CastLike", "ReverseSequence", "OneHot",
      "ConstantOfShape", "Range", "EyeLike", "SplitToSequence", "ConcatFromSequence",
      "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceEmpty",
      "SequenceLength", "SequenceErase", "Col2Im", "CenterCropPad", "Optional",
      "OptionalGetElement", "OptionalHasElement", "MaxUnpool", "BitCast",
      "TensorScatter"};
  return ops.contains(op);
}

// Views: no kernel, no traffic (the output aliases the input), or ops that
// are the identity at inference.
bool isView(StringRef op) {
  static const llvm::StringSet<> ops = {"Identity", "Dropout"};
  return ops.contains(op);
}

/// Runs a cost rule of the op table (ops/OpTable.h) over the node's static
/// shapes: the one place OpCosts adapts a het.node to the table's form.
Raw tableCost(NodeOp n, llvm::function_ref<ops::Cost(const ops::CostIn &)> rule) {
  NodeAttrs attrs(n);
  ops::CostIn in{attrs, {}, {}, {}, {}};
  for (Value v : n.getInputs()) {
    auto s = staticShape(v);
    in.inputs.push_back(s ? std::optional<std::vector<int64_t>>(std::vector<int64_t>(s->begin(), s->end()))
                          : std::nullopt);
    in.present.push_back(!isa<NoneType>(v.getType()));
    in.inputElems.push_back(elems(v));
  }
  for (Value r : n.getResults())
    in.outputElems.push_back(elems(r));
  ops::Cost c = rule(in);
  Raw r;
  r.flops = c.flops;
  r.matrix = c.engine == ops::Engine::Matrix;
  r.view = c.view;
  r.readsOutput = c.readsOutput;
  r.estimated = c.estimated;
  r.batchedProducts = c.batchedProducts;
  return r;
}
Raw tableRule(NodeOp n, const ops::OpDef &def) { return tableCost(n, def.cost); }

/// A convolution priced as the table's convolutions are, with its weight
/// and bias at other inputs (DeformConv).
Raw convRule(NodeOp n, unsigned weightAt, unsigned biasAt) {
  return tableCost(n, [&](const ops::CostIn &in) { return ops::convolutionCost(in, weightAt, biasAt); });
}

Raw normRule(NodeOp n) {
  Raw r;
  StringRef op = n.getOpType();
  double x = inputElems(n);
  if (op == "BatchNormalization") {
    // Inference: per-channel scale and shift folded, y = a * x + b. Training
    // mode also computes the batch statistics.
    r.flops = (attrInt(n, "training_mode", 0) ? 7 : 2) * x;
  } else if (op == "SkipSimplifiedLayerNormalization") {
    r.flops = 5 * x;
  } else { // LRN
    r.flops = (2 * double(attrInt(n, "size", 1)) + kTranscendental + 2) * x;
  }
  return r;
}

Raw resizeRule(NodeOp n) {
  Raw r;
  StringRef mode = attrStr(n, "mode", "nearest");
  auto in = staticShape(n.getInputs()[0]);
  auto out = n.getNumResults() ? staticShape(n.getResult(0)) : std::nullopt;
  if (!in || !out || in->size() != out->size() || mode == "nearest")
    return r;
  double axes = 0;
  for (auto [a, b] : llvm::zip(*in, *out))
    axes += a != b;
  // Separable interpolation: linear a + t (b - a) = 3 FLOPs per axis, cubic
  // 4 taps = 7 FLOPs per axis, per output element.
  r.flops = (mode == "cubic" ? 7 : 3) * axes * elems(n.getResult(0));
  return r;
}

Raw topKRule(NodeOp n) {
  Raw r;
  auto out = n.getNumResults() ? staticShape(n.getResult(0)) : std::nullopt;
  if (!out || out->empty())
    return r;
  int64_t axis = attrInt(n, "axis", -1);
  if (axis < 0)
    axis += int64_t(out->size());
  double k = axis >= 0 && axis < int64_t(out->size()) ? double((*out)[axis]) : 1;
  r.flops = inputElems(n) * std::ceil(std::log2(k + 1));
  return r;
}

double opBytesAllActivation(NodeOp n, DType dtype) {
  double total = 0;
  for (Value v : n.getInputs())
    total += valueBytes(v.getType(), dtype);
  for (Value v : n.getResults())
    total += valueBytes(v.getType(), dtype);
  return total;
}

Raw rawRule(NodeOp n);

/// A node's trip count: `het.trip_count` (het-bind-shapes sets it for a Loop
/// whose M folds and a Scan whose sequence length is known), else a Loop's
/// constant M input.
std::optional<int64_t> tripCount(NodeOp node);

/// Whether `region` of `node` runs: an If whose condition folded
/// (het.taken_branch, set by het-bind-shapes) runs only that branch.
bool runsRegion(NodeOp node, Region &region) {
  auto taken = node->getAttrOfType<IntegerAttr>("het.taken_branch");
  return !taken || region.getRegionNumber() == unsigned(taken.getInt());
}

/// FLOPs and bytes of the nodes of a region (a subgraph), run once.
/// `unpriced` counts the nodes left out because their shapes are not static.
std::pair<double, double> regionCost(Region &region, DType dtype, bool &estimated,
                                     bool &matrix, int &unpriced) {
  double flops = 0, bytes = 0;
  for (Operation &op : region.getOps()) {
    auto node = dyn_cast<NodeOp>(op);
    if (!node)
      continue;
    bool allStatic = llvm::all_of(node->getOperandTypes(), [](Type t) {
                       return !isa<TensorType, UnknownType>(t) || staticShape(t);
                     }) &&
                     llvm::all_of(node->getResultTypes(), [](Type t) {
                       return !isa<TensorType, UnknownType>(t) || staticShape(t);
                     });
    if (!allStatic) {
      estimated = true;
      ++unpriced;
      continue;
    }
    Raw raw = rawRule(node);
    estimated |= raw.estimated;
    matrix |= raw.matrix;
    flops += raw.flops;
    if (!raw.view)
      bytes += opBytesAllActivation(node, dtype);
    // Nested subgraphs: If takes its dearest branch, Loop and Scan their
    // body times the trip count when it is known, else once.
    double best = 0, bestBytes = 0, sumF = 0, sumB = 0;
    for (Region &inner : node->getRegions()) {
      if (!runsRegion(node, inner))
        continue;
      auto [f, b] = regionCost(inner, dtype, estimated, matrix, unpriced);
      sumF += f;
      sumB += b;
      if (f + b > best + bestBytes)
        best = f, bestBytes = b;
    }
    bool isIf = node.getOpType() == "If";
    double trips = 1;
    if (!isIf && node->getNumRegions()) {
      if (auto t = tripCount(node))
        trips = double(*t);
      else
        estimated = true;
    }
    flops += (isIf ? best : sumF) * trips;
    bytes += (isIf ? bestBytes : sumB) * trips;
  }
  return {flops, bytes};
}

/// A value's integer contents when a het.weight/het.constant holds them inline.
std::optional<int64_t> constantScalar(Value v) {
  Attribute value;
  if (auto w = v.getDefiningOp<WeightOp>())
    value = w.getValueAttr();
  else if (auto c = v.getDefiningOp<ConstantOp>())
    value = c.getValue();
  auto dense = dyn_cast_or_null<DenseElementsAttr>(value);
  if (!dense || dense.getNumElements() != 1 || !dense.getElementType().isInteger())
    return std::nullopt;
  return dense.getSplatValue<APInt>().getSExtValue();
}

std::optional<int64_t> tripCount(NodeOp node) {
  if (auto a = node->getAttrOfType<IntegerAttr>("het.trip_count"))
    return a.getInt();
  if (node.getOpType() == "Loop" && !node.getInputs().empty() &&
      !isa<NoneType>(node.getInputs()[0].getType()))
    if (auto m = constantScalar(node.getInputs()[0]); m && *m >= 0)
      return m;
  if (node.getOpType() == "Scan") {
    // The sequence length: the first scan input's dim at its scan axis.
    int64_t scanInputs = attrInt(node, "num_scan_inputs", 0);
    size_t first = node.getInputs().size() - size_t(std::max<int64_t>(scanInputs, 0));
    if (scanInputs > 0 && first < node.getInputs().size()) {
      auto s = staticShape(node.getInputs()[first]);
      int64_t axis = 0;
      if (auto a = dyn_cast_or_null<DenseI64ArrayAttr>(node.getOnnxAttr("scan_input_axes")))
        if (a.size())
          axis = a[0];
      if (s && axis < 0)
        axis += int64_t(s->size());
      if (s && axis >= 0 && axis < int64_t(s->size()))
        return (*s)[axis];
    }
  }
  return std::nullopt;
}

Raw rawRule(NodeOp n) {
  StringRef op = n.getOpType();
  StringRef domain = n.getDomain();
  Raw r;
  if (domain == "com.microsoft") {
    if (const ops::OpDef *def = opDefOf(n); def && def->cost)
      return tableRule(n, *def);
    static const llvm::StringMap<double> ms = {
        {"Gelu", 2 * 1 + kTranscendental + 2}, {"QuickGelu", kTranscendental + 2}, {"BiasAdd", 2}};
    if (auto it = ms.find(op); it != ms.end()) {
      r.flops = it->second * outputElems(n);
      return r;
    }
    if (op == "SkipSimplifiedLayerNormalization")
      return normRule(n);
    // QLinearAdd/Mul (onnxruntime's quantizer): dequantize both operands,
    // the op, requantize. The other QOperator ops are in the op table.
    if (op == "QLinearAdd" || op == "QLinearMul") {
      r.flops = 7 * outputElems(n);
      return r;
    }
    r.estimated = true;
    r.flops = outputElems(n);
    return r;
  }
  if (!domain.empty() && domain != "ai.onnx") {
    r.estimated = true;
    r.flops = outputElems(n);
    return r;
  }
  if (isView(op)) {
    r.view = true;
    return r;
  }
  if (const ops::OpDef *def = opDefOf(n); def && def->cost)
    return tableRule(n, *def);
  if (op == "DeformConv") {
    // A convolution over bilinearly sampled taps: priced as the
    // convolution (the sampling is not counted).
    return convRule(n, 1, 3);
  }
  if (op == "BatchNormalization" || op == "LRN")
    return normRule(n);
  if (op == "Resize" || op == "Upsample")
    return resizeRule(n);
  if (op == "TopK")
    return topKRule(n);
  if (op == "Gelu") {
    // 0.5 x (1 + erf(x / sqrt 2)): divide, erf, add, 2 multiplies; the tanh
    // form: x^3 (2), 2 multiplies, add, tanh, add, 2 multiplies.
    r.flops = (attrStr(n, "approximate", "none") == "tanh" ? 8 + kTranscendental
                                                           : 4 + kTranscendental) *
              outputElems(n);
    return r;
  }
  if (auto it = unaryFlops().find(op); it != unaryFlops().end()) {
    r.flops = it->second * outputElems(n);
    return r;
  }
  if (op == "Pow") {
    r.flops = kTranscendental * outputElems(n);
    return r;
  }
  if (isBinary(op)) {
    r.flops = outputElems(n);
    return r;
  }
  if (op == "Sum" || op == "Max" || op == "Min" || op == "Mean") {
    double n1 = double(n.getInputs().size()) - (op == "Mean" ? 0 : 1);
    r.flops = std::max(0.0, n1) * outputElems(n);
    return r;
  }
  if (isDataMovement(op))
    return r;
  if (op == "If" || op == "Loop" || op == "Scan") {
    // Filled in by computeOpCost (needs the dtype for the bodies' bytes).
    return r;
  }
  r.estimated = true;
  r.flops = outputElems(n);
  return r;
}

bool isGenerator(StringRef op) {
  return op == "ConstantOfShape" || op == "EyeLike";
}

bool isRandom(StringRef op) {
  return op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Bernoulli" || op == "Multinomial";
}

bool isParameterType(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.hasStaticShape() && isa<FloatType>(ranked.getElementType()) &&
         ranked.getNumElements() >= 2;
}

} // namespace

//===----------------------------------------------------------------------===//
// Graph facts
//===----------------------------------------------------------------------===//

int64_t numElements(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return 0;
  return ranked.getNumElements();
}

double valueBytes(Type type, DType dtype) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return 0;
  Type element = ranked.getElementType();
  double per = 0;
  if (isa<FloatType>(element))
    per = dtypeBytes(dtype);
  else if (auto c = dyn_cast<ComplexType>(element))
    per = isa<FloatType>(c.getElementType()) ? 2.0 * dtypeBytes(dtype) : 0;
  else if (element.isIntOrIndex())
    per = element.isIndex() ? 8 : element.getIntOrFloatBitWidth() == 1
                                      ? 1
                                      : double(element.getIntOrFloatBitWidth()) / 8;
  return per * double(ranked.getNumElements());
}

int64_t boundSamples(GraphOp graph) {
  if (auto module = graph->getParentOfType<ModuleOp>())
    if (auto bound = module->getAttrOfType<DictionaryAttr>("het.bound_dims"))
      if (auto batch = bound.getAs<IntegerAttr>("batch"))
        if (batch.getInt() > 0)
          return batch.getInt();
  for (Type type : graph.getArgumentTypes())
    if (auto ranked = dyn_cast<RankedTensorType>(type))
      if (ranked.getRank() >= 1) {
        int64_t d = ranked.getDimSize(0);
        return ShapedType::isDynamic(d) || d <= 0 ? 1 : d;
      }
  return 1;
}

std::string describeNode(NodeOp node, int index) {
  std::string out;
  if (auto name = node.getName(); name && !name->empty())
    out = "'" + name->str() + "'";
  else
    out = "#" + std::to_string(index);
  out += " (" + node.getOpType().str() + ")";
  return out;
}

GraphInfo::GraphInfo(GraphOp g, int64_t samplesOverride) : graph(g) {
  samples = samplesOverride > 0 ? samplesOverride : boundSamples(g);
  Block &body = g.getBody().front();
  for (BlockArgument arg : body.getArguments())
    kinds[arg] = ValueKind::Activation;
  for (Operation &op : body) {
    if (isa<WeightOp, ConstantOp>(op)) {
      kinds[op.getResult(0)] = ValueKind::Constant;
      continue;
    }
    auto node = dyn_cast<NodeOp>(op);
    if (!node) {
      for (Value r : op.getResults())
        kinds[r] = ValueKind::None;
      continue;
    }
    index[&op] = int(nodes.size());
    nodes.push_back(node);
    StringRef type = node.getOpType();
    bool shapeOnly = node.getDomain().empty() && (type == "Shape" || type == "Size");
    bool activation = isRandom(type) || node->getNumRegions() > 0;
    if (!shapeOnly)
      for (Value v : node.getInputs())
        activation |= kind(v) == ValueKind::Activation;
    for (Value r : node.getResults())
      kinds[r] = isa<NoneType>(r.getType()) ? ValueKind::None
                 : activation && !shapeOnly ? ValueKind::Activation
                                            : ValueKind::Constant;
  }

  // Liveness of activations over the top-level order.
  int n = int(nodes.size());
  llvm::DenseMap<Value, size_t> spanOf;
  std::vector<StringRef> userType;
  for (auto [i, node] : llvm::enumerate(nodes))
    for (Value r : node.getResults())
      if (kind(r) == ValueKind::Activation) {
        spanOf[r] = spans.size();
        spans.push_back({r, int(i), int(i), int(i), 0, true});
        userType.push_back({});
      }
  auto noteUse = [&](Value v, int user, llvm::SmallDenseSet<Value, 8> &seen) {
    auto it = spanOf.find(v);
    if (it == spanOf.end() || !seen.insert(v).second)
      return;
    ValueSpan &s = spans[it->second];
    s.lastUse = std::max(s.lastUse, user);
    if (user < n)
      s.lastNodeUse = std::max(s.lastNodeUse, user);
    ++s.users;
    StringRef type = user < n ? nodes[user].getOpType() : StringRef("<return>");
    StringRef &seenType = userType[it->second];
    if (user >= n || (!seenType.empty() && seenType != type))
      s.uniformUsers = false;
    seenType = type;
  };
  for (auto [index, n0] : llvm::enumerate(nodes)) {
    // Named copies: C++17 lambdas cannot capture structured bindings.
    int i = int(index);
    NodeOp node = n0;
    llvm::SmallDenseSet<Value, 8> seen;
    for (Value v : node.getInputs())
      noteUse(v, i, seen);
    node->walk([&](Operation *inner) {
      if (inner == node.getOperation())
        return;
      for (Value v : inner->getOperands())
        noteUse(v, i, seen);
    });
  }
  if (auto ret = dyn_cast<ReturnOp>(body.getTerminator())) {
    llvm::SmallDenseSet<Value, 8> seen;
    for (Value v : ret.getOperands())
      noteUse(v, n, seen);
  }

  // Parameters, in the order their first activation user appears.
  llvm::DenseSet<Value> visited;
  std::function<void(Value, int)> collect = [&](Value v, int user) {
    if (!visited.insert(v).second)
      return;
    Operation *def = v.getDefiningOp();
    if (!def)
      return;
    if (isa<WeightOp, ConstantOp>(def)) {
      if (isParameterType(v.getType()))
        parameters.push_back({v, numElements(v.getType()), user});
      return;
    }
    auto node = dyn_cast<NodeOp>(def);
    if (!node || kind(v) != ValueKind::Constant)
      return;
    StringRef type = node.getOpType();
    if (type == "Shape" || type == "Size")
      return;
    if (isGenerator(type)) {
      // A weight stored as its shape (ConstantOfShape of an initializer),
      // not a tensor shaped like an activation (ConstantOfShape(Shape(x))).
      bool fromInitializers = llvm::all_of(node.getInputs(), [](Value in) {
        return isa_and_nonnull<WeightOp, ConstantOp>(in.getDefiningOp());
      });
      if (fromInitializers && isParameterType(v.getType()))
        parameters.push_back({v, numElements(v.getType()), user});
      return;
    }
    for (Value in : node.getInputs())
      collect(in, user);
  };
  for (auto [index, n0] : llvm::enumerate(nodes)) {
    int i = int(index); // named copies, as above
    NodeOp node = n0;
    if (isFolded(node))
      continue;
    // BatchNormalization's running mean and variance are buffers, not
    // parameters (no gradient, no optimizer state).
    bool batchNorm = node.getDomain().empty() && node.getOpType() == "BatchNormalization";
    for (auto [k, v] : llvm::enumerate(node.getInputs()))
      if (kind(v) == ValueKind::Constant && !(batchNorm && (k == 3 || k == 4)))
        collect(v, i);
    // Subgraphs may read weights of the enclosing graph.
    node->walk([&](Operation *inner) {
      if (inner == node.getOperation())
        return;
      for (Value v : inner->getOperands())
        if (kinds.count(v) && kind(v) == ValueKind::Constant)
          collect(v, i);
    });
  }
}

ValueKind GraphInfo::kind(Value value) const {
  auto it = kinds.find(value);
  if (it != kinds.end())
    return it->second;
  if (isa<NoneType>(value.getType()))
    return ValueKind::None;
  return ValueKind::Activation; // values inside regions
}

bool GraphInfo::isFolded(NodeOp node) const {
  for (Value r : node.getResults())
    if (kind(r) == ValueKind::Activation)
      return false;
  return true;
}

int GraphInfo::indexOf(Operation *op) const {
  while (op && op->getParentOp() != graph.getOperation())
    op = op->getParentOp();
  if (!op)
    return -1;
  auto it = index.find(op);
  return it == index.end() ? -1 : it->second;
}

std::optional<std::pair<Operation *, std::string>> GraphInfo::findNonStatic() const {
  auto notStatic = [](Type t) {
    return isa<TensorType, UnknownType>(t) && !staticShape(t);
  };
  for (auto [i, arg] : llvm::enumerate(graph.getBody().front().getArguments()))
    if (notStatic(arg.getType())) {
      std::string name = "#" + std::to_string(i);
      if (auto attrs = graph.getArgAttrsAttr())
        if (auto dict = dyn_cast<DictionaryAttr>(attrs[i]))
          if (auto n = dict.getAs<StringAttr>("het.name"))
            name = "'" + n.str() + "'";
      std::string type;
      llvm::raw_string_ostream os(type);
      os << arg.getType();
      return std::make_pair(graph.getOperation(),
                            "input " + name + " has no static shape (" + type +
                                "); run het-bind-shapes first");
    }
  for (auto [index, n0] : llvm::enumerate(nodes)) {
    int i = int(index); // named copies: C++17 lambdas cannot capture bindings
    NodeOp node = n0;
    auto check = [&](Value v, const char *what, size_t at) -> std::optional<std::string> {
      if (!notStatic(v.getType()))
        return std::nullopt;
      std::string type;
      llvm::raw_string_ostream os(type);
      os << v.getType();
      return "node " + describeNode(node, int(i)) + ": " + what + " #" +
             std::to_string(at) + " has no static shape (" + type +
             "); run het-bind-shapes first";
    };
    NodeOp op = node;
    for (auto [k, v] : llvm::enumerate(op.getInputs()))
      if (auto msg = check(v, "input", k))
        return std::make_pair(op.getOperation(), *msg);
    for (auto [k, v] : llvm::enumerate(op.getResults()))
      if (auto msg = check(v, "result", k))
        return std::make_pair(op.getOperation(), *msg);
  }
  return std::nullopt;
}

DType graphDType(const GraphInfo &info) {
  int64_t f32 = 0, f16 = 0, bf16 = 0;
  for (const Parameter &p : info.parameters) {
    Type element = cast<RankedTensorType>(p.value.getType()).getElementType();
    if (element.isF16())
      f16 += p.elements;
    else if (element.isBF16())
      bf16 += p.elements;
    else
      f32 += p.elements;
  }
  if (f16 > f32 && f16 >= bf16)
    return DType::FP16;
  if (bf16 > f32 && bf16 > f16)
    return DType::BF16;
  return DType::FP32;
}

//===----------------------------------------------------------------------===//
// Op costs
//===----------------------------------------------------------------------===//

/// Products per call priced separately (ops::Cost::batchedProducts): only
/// when every input is an activation (a weight operand is broadcast, and the
/// runtime folds the batch into rows); 0 otherwise.
static double batchedProducts(NodeOp node, const GraphInfo &info, const Raw &raw) {
  if (raw.batchedProducts <= 0)
    return 0;
  for (Value v : node.getInputs())
    if (info.kind(v) != ValueKind::Activation)
      return 0;
  return raw.batchedProducts;
}

OpCost computeOpCost(NodeOp node, const GraphInfo &info, DType dtype) {
  OpCost cost;
  auto name = node.getName();
  cost.name = name && !name->empty() ? name->str() : node.getOpType().str();
  cost.opType = node.getDomain().empty() ? node.getOpType().str()
                                         : (node.getDomain() + "." + node.getOpType()).str();
  if (info.isFolded(node)) {
    cost.launches = 0;
    return cost;
  }
  Raw raw = rawRule(node);
  cost.matrixEngine = raw.matrix;
  cost.estimated = raw.estimated;
  if (raw.view) {
    cost.launches = 0;
    return cost;
  }

  double flops = raw.flops;
  double activationBytes = 0, weightBytes = 0;
  // Subgraphs: the bodies' work, times the trip count where it is known.
  StringRef op = node.getOpType();
  if (node->getNumRegions() > 0) {
    double best = 0, bestBytes = 0, sumFlops = 0, sumBytes = 0;
    bool estimated = false, matrix = false;
    int unpriced = 0, bodyNodes = 0;
    for (Region &region : node->getRegions()) {
      if (!runsRegion(node, region))
        continue;
      auto [f, b] = regionCost(region, dtype, estimated, matrix, unpriced);
      region.walk([&](NodeOp) { ++bodyNodes; });
      sumFlops += f;
      sumBytes += b;
      if (f + b > best + bestBytes)
        best = f, bestBytes = b;
    }
    double trips = 1;
    std::string assumption;
    if (op == "Loop" || op == "Scan") {
      if (auto t = tripCount(node)) {
        trips = double(*t);
      } else {
        estimated = true;
        assumption = op == "Loop" ? "its trip count is known only at run time: the body is "
                                    "priced as one iteration"
                                  : "its sequence length is not known: the body is priced "
                                    "as one step";
      }
    }
    bool isIf = op == "If";
    flops += (isIf ? best : sumFlops) * trips;
    activationBytes += (isIf ? bestBytes : sumBytes) * trips;
    cost.estimated |= estimated;
    cost.matrixEngine |= matrix;
    std::string why;
    if (unpriced)
      why = std::to_string(unpriced) + " of the " + std::to_string(bodyNodes) +
            " nodes of its subgraphs have shapes not known at compile time and are "
            "priced at 0";
    if (!assumption.empty())
      why += (why.empty() ? "" : "; ") + assumption;
    if (!why.empty())
      cost.note = why;
  }

  for (auto [i, v] : llvm::enumerate(node.getInputs())) {
    double bytes = valueBytes(v.getType(), dtype);
    ValueKind k = info.kind(v);
    if (raw.readsOutput && i == 0) {
      // Gather/Slice read only the elements they output, per sample.
      double out = node.getNumResults() ? valueBytes(node.getResult(0).getType(), dtype) : 0;
      activationBytes += std::min(bytes, out);
      continue;
    }
    if (k == ValueKind::Activation)
      activationBytes += bytes;
    else if (k == ValueKind::Constant)
      weightBytes += bytes;
  }
  for (Value r : node.getResults())
    activationBytes += valueBytes(r.getType(), dtype);

  double samples = double(std::max<int64_t>(info.samples, 1));
  cost.productsPerSample = batchedProducts(node, info, raw) / samples;
  cost.flopsPerSample = flops / samples;
  cost.bytesPerSample = activationBytes / samples;
  cost.weightBytes = weightBytes;
  return cost;
}

std::optional<double> matmulWeightBytes(NodeOp node, const GraphInfo &info, DType dtype) {
  const ops::OpDef *def = opDefOf(node);
  if (!node.getDomain().empty() || !def || !def->weightProduct)
    return std::nullopt;
  if (info.isFolded(node) || node.getInputs().size() < 2)
    return std::nullopt;
  double best = 0;
  bool any = false;
  for (Value v : node.getInputs().take_front(2))
    if (info.kind(v) == ValueKind::Constant) {
      best = std::max(best, valueBytes(v.getType(), dtype));
      any = true;
    }
  if (!any)
    return std::nullopt;
  return best;
}

} // namespace hetplan::cost
