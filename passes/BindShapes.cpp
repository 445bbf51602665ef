//===- BindShapes.cpp - the het-bind-shapes pass --------------------------===//

#include "passes/Passes.h"
#include "passes/ShapeRules.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace hetplan::het {

#define GEN_PASS_DEF_HETBINDSHAPES
#include "passes/Passes.h.inc"

namespace {

using Shape = SmallVector<int64_t>;

/// Parses "8x3x640x640" (a `?` keeps a dim dynamic).
std::optional<SmallVector<int64_t>> parseDims(StringRef text) {
  SmallVector<int64_t> dims;
  SmallVector<StringRef> parts;
  text.split(parts, 'x');
  for (StringRef p : parts) {
    int64_t d;
    if (p == "?")
      d = ShapedType::kDynamic;
    else if (p.getAsInteger(10, d) || d < 0)
      return std::nullopt;
    dims.push_back(d);
  }
  return dims;
}

/// `type` with named dims replaced by their bound sizes; the encoding keeps
/// only names that stay unbound.
Type bindNamedDims(Type type, const llvm::StringMap<int64_t> &bound) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked)
    return type;
  auto names = dyn_cast_or_null<DimsAttr>(ranked.getEncoding());
  if (!names)
    return type;
  SmallVector<int64_t> shape(ranked.getShape());
  SmallVector<StringAttr> left;
  bool anyLeft = false;
  for (auto [i, name] : llvm::enumerate(names.getNames())) {
    auto it = bound.find(name.getValue());
    if (!name.empty() && it != bound.end()) {
      shape[i] = it->second;
      left.push_back(StringAttr::get(type.getContext(), ""));
    } else {
      left.push_back(name);
      anyLeft |= !name.empty();
    }
  }
  return RankedTensorType::get(shape, ranked.getElementType(),
                               anyLeft ? DimsAttr::get(type.getContext(), left)
                                       : Attribute());
}

/// Combines a rule's result with the model's declaration: static sizes from
/// either side win; a contradiction is an error (returns null).
Type mergeTypes(Type inferred, Type declared) {
  auto a = dyn_cast<RankedTensorType>(inferred);
  auto b = dyn_cast<RankedTensorType>(declared);
  if (!a)
    return declared;
  if (!b) {
    if (auto unranked = dyn_cast<UnrankedTensorType>(declared))
      if (unranked.getElementType() != a.getElementType())
        return {};
    return inferred;
  }
  if (a.getRank() != b.getRank() || a.getElementType() != b.getElementType())
    return {};
  SmallVector<int64_t> shape;
  for (auto [x, y] : llvm::zip(a.getShape(), b.getShape())) {
    if (!ShapedType::isDynamic(x) && !ShapedType::isDynamic(y) && x != y)
      return {};
    shape.push_back(ShapedType::isDynamic(x) ? y : x);
  }
  return RankedTensorType::get(shape, a.getElementType());
}

/// Exporters name dims by guesswork: TorchScript and Paddle2ONNX name the
/// height of a reflect-padded conv's output after the batch, beside the real
/// batch dim of the same type. Where the rule contradicts the declaration
/// only in such dims (a name the type also gives a dim that agrees with the
/// rule), the rule's sizes win: the type with them, and `note` says which
/// dims. Null on any other contradiction (a static size of the model, or a
/// binding the user chose that does not hold).
Type overrideSymbolicDims(Type inferred, Type original, Type declared, std::string &note) {
  auto a = dyn_cast<RankedTensorType>(inferred);
  auto o = dyn_cast<RankedTensorType>(original);
  auto b = dyn_cast<RankedTensorType>(declared);
  if (!a || !o || !b || a.getRank() != o.getRank() || a.getRank() != b.getRank() ||
      a.getElementType() != b.getElementType())
    return {};
  auto names = dyn_cast_or_null<DimsAttr>(o.getEncoding());
  if (!names || names.getNames().size() != size_t(a.getRank()))
    return {};
  auto agrees = [&](size_t i) {
    return !ShapedType::isDynamic(a.getShape()[i]) && a.getShape()[i] == b.getShape()[i];
  };
  // A name is misused when one of its dims agrees with the rule and another not.
  auto misnamed = [&](size_t i) {
    StringRef name = names.getNames()[i].getValue();
    if (name.empty())
      return false;
    for (auto [j, other] : llvm::enumerate(names.getNames()))
      if (j != i && other.getValue() == name && agrees(j))
        return true;
    return false;
  };
  SmallVector<int64_t> shape;
  llvm::raw_string_ostream os(note);
  for (auto [i, dims] : llvm::enumerate(llvm::zip(a.getShape(), o.getShape(), b.getShape()))) {
    auto [x, orig, y] = dims;
    if (!ShapedType::isDynamic(orig)) {
      if (!ShapedType::isDynamic(x) && x != orig)
        return {};
      shape.push_back(orig);
      continue;
    }
    if (ShapedType::isDynamic(x)) {
      shape.push_back(y);
      continue;
    }
    if (!ShapedType::isDynamic(y) && x != y) {
      if (!misnamed(i))
        return {};
      os << (note.empty() ? "" : ", ") << "dim " << i << " is " << x << ", not " << y;
    }
    shape.push_back(x);
  }
  return RankedTensorType::get(shape, a.getElementType());
}

/// Whether `inferred` contradicts a size the user bound: a dim of `original`
/// (the type before binding) named by a bound symbol whose bound size differs
/// from the rule's.
bool contradictsBinding(Type inferred, Type original, const llvm::StringMap<int64_t> &bound) {
  auto a = dyn_cast<RankedTensorType>(inferred);
  auto o = dyn_cast<RankedTensorType>(original);
  if (!a || !o || a.getRank() != o.getRank())
    return false;
  auto names = dyn_cast_or_null<DimsAttr>(o.getEncoding());
  if (!names || names.getNames().size() != size_t(a.getRank()))
    return false;
  for (auto [i, name] : llvm::enumerate(names.getNames())) {
    auto it = name.empty() ? bound.end() : bound.find(name.getValue());
    if (it != bound.end() && !ShapedType::isDynamic(a.getShape()[i]) &&
        a.getShape()[i] != it->second)
      return true;
  }
  return false;
}

/// Whether the declared type differs from the rule's in rank or sizes only
/// (a hint onnxruntime also overrides), not in its element type.
bool sameElements(Type inferred, Type declared) {
  auto a = dyn_cast<TensorType>(inferred);
  auto b = dyn_cast<TensorType>(declared);
  return a && b && a.getElementType() == b.getElementType();
}

bool isFullyStatic(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.hasStaticShape();
}

/// What two types that may each be a value's (If branches, a Loop's initial
/// and carried values) have in common: sizes that agree stay, others become
/// dynamic; null unless both are ranked tensors of one rank and element type.
Type joinTypes(Type a, Type b) {
  auto x = dyn_cast_or_null<RankedTensorType>(a);
  auto y = dyn_cast_or_null<RankedTensorType>(b);
  if (!x || !y || x.getRank() != y.getRank() || x.getElementType() != y.getElementType())
    return {};
  SmallVector<int64_t> shape;
  for (auto [p, q] : llvm::zip(x.getShape(), y.getShape()))
    shape.push_back(p == q ? p : ShapedType::kDynamic);
  return RankedTensorType::get(shape, x.getElementType());
}

struct BindShapesPass : impl::HetBindShapesBase<BindShapesPass> {
  using HetBindShapesBase::HetBindShapesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<int64_t> bound;
    for (const std::string &entry : dims) {
      auto [name, value] = StringRef(entry).split('=');
      int64_t size;
      if (name.empty() || value.getAsInteger(10, size) || size < 0) {
        module.emitError() << "bad dims entry '" << entry
                           << "': expected NAME=SIZE with SIZE >= 0";
        return signalPassFailure();
      }
      bound[name] = size;
    }
    llvm::StringMap<SmallVector<int64_t>> shapes;
    for (const std::string &entry : inputShapes) {
      auto [name, value] = StringRef(entry).split('=');
      auto parsed = parseDims(value);
      if (name.empty() || !parsed) {
        module.emitError() << "bad input-shapes entry '" << entry
                           << "': expected NAME=D0xD1x... (e.g. x=8x3x224x224)";
        return signalPassFailure();
      }
      shapes[name] = *parsed;
    }
    llvm::StringMap<int64_t> values;
    for (const std::string &entry : inputValues) {
      auto [name, value] = StringRef(entry).split('=');
      int64_t v;
      if (name.empty() || value.getAsInteger(10, v)) {
        module.emitError() << "bad input-values entry '" << entry
                           << "': expected NAME=VALUE with an integer VALUE (e.g. rate=16000)";
        return signalPassFailure();
      }
      values[name] = v;
    }
    for (auto graph : module.getOps<GraphOp>())
      if (failed(bindGraph(graph, bound, shapes, values)))
        return signalPassFailure();
    if (!bound.empty()) {
      SmallVector<NamedAttribute> attrs;
      for (auto &entry : bound)
        attrs.emplace_back(StringAttr::get(&getContext(), entry.getKey()),
                           IntegerAttr::get(IntegerType::get(&getContext(), 64),
                                            entry.getValue()));
      module->setAttr("het.bound_dims", DictionaryAttr::get(&getContext(), attrs));
    }
  }

  using Facts = llvm::DenseMap<Value, ValueFacts>;

  /// Outputs whose declared shape the graph contradicts (warned once per
  /// graph, at the first of them).
  struct DeclaredShapes {
    Operation *first = nullptr;
    std::string text;
    int count = 0;
  } declaredShapes;

  void noteDeclaredShape(NodeOp node, size_t i, Type computed, Type declared) {
    if (declaredShapes.count++ > 0)
      return;
    declaredShapes.first = node;
    llvm::raw_string_ostream os(declaredShapes.text);
    os << node.getOpType() << " output #" << i << " is " << computed << " by the graph but the model declares " << declared;
  }

  void warnDeclaredShapes() {
    if (!declaredShapes.first)
      return;
    InFlightDiagnostic d = declaredShapes.first->emitWarning() << declaredShapes.text;
    if (declaredShapes.count > 1)
      d << " (and " << declaredShapes.count - 1 << " more outputs declared with other shapes)";
    d << "; declared shapes are hints, as in onnxruntime: the graph's shapes are used";
    declaredShapes = {};
  }

  static ValueFacts factsOf(const Facts &facts, Value v) {
    auto it = facts.find(v);
    return it != facts.end() ? it->second
                             : ValueFacts{v.getType(), std::nullopt, std::nullopt};
  }

  /// Gives every op of `block` (and of the subgraphs of its nodes) its
  /// types, in order.
  LogicalResult bindBlock(Block &block, Facts &facts, const llvm::StringMap<int64_t> &bound,
                          llvm::StringMap<int> &noRule) {
    for (Operation &op : block) {
      if (isa<WeightOp, ConstantOp>(op)) {
        facts[op.getResult(0)] = factsOfConstant(&op);
        continue;
      }
      auto node = dyn_cast<NodeOp>(op);
      if (!node) {
        for (Value r : op.getResults())
          facts[r] = ValueFacts{r.getType(), std::nullopt, std::nullopt};
        continue;
      }
      SmallVector<ValueFacts> in;
      for (Value v : node.getInputs())
        in.push_back(factsOf(facts, v));
      SmallVector<ValueFacts> out(node.getNumResults());
      ShapeRule rule = lookupShapeRule(node.getDomain(), node.getOpType());
      bool haveRule = rule || node->getNumRegions() > 0;
      if (node->getNumRegions() > 0) {
        if (failed(bindSubgraphs(node, in, out, facts, bound, noRule)))
          return failure();
      } else if (rule) {
        std::string why;
        if (failed(rule(node, in, out, why)))
          return node.emitError() << node.getOpType() << ": " << why;
      }
      std::string upperBound;
      for (auto [i, result] : llvm::enumerate(node.getResults())) {
        Type declared = bindNamedDims(result.getType(), bound);
        Type type = declared;
        if (out[i].type) {
          type = mergeTypes(out[i].type, declared);
          bool boundUsed = !out[i].upperBound.empty();
          if (!type && boundUsed) { // a bound, not the size: a static declaration wins
            boundUsed = !isFullyStatic(declared);
            type = boundUsed ? out[i].type : declared;
          }
          if (!type) { // wrong names of symbolic dims: the rule's sizes win
            std::string note;
            type = overrideSymbolicDims(out[i].type, result.getType(), declared, note);
            if (type && !note.empty())
              node.emitWarning() << node.getOpType() << " output #" << i << ": " << note
                                 << " by het's shape rules; the model's name for that dim "
                                    "does not hold here";
          }
          if (!type && sameElements(out[i].type, declared) &&
              !contradictsBinding(out[i].type, result.getType(), bound)) {
            // A declared shape (value_info, graph outputs) is a hint, as in
            // onnxruntime: the graph's shape wins, with one warning per graph.
            noteDeclaredShape(node, i, out[i].type, declared);
            type = out[i].type;
          }
          if (!type)
            return node.emitError()
                   << node.getOpType() << " output #" << i << " is " << out[i].type
                   << " by het's shape rules but the model declares " << declared;
          if (boundUsed && upperBound.empty())
            upperBound = out[i].upperBound;
        } else if (!haveRule && !isa<NoneType>(declared) && !isFullyStatic(declared)) {
          ++noRule[node.getOpType()];
        }
        result.setType(type);
        facts[result] = ValueFacts{type, out[i].ints, out[i].floats};
      }
      if (!upperBound.empty())
        node.emitWarning() << node.getOpType() << ": " << upperBound;
    }
    return success();
  }

  /// What the terminator of `region`'s block returns, as facts (none for an
  /// empty region or a block not ended by a ReturnOp).
  static SmallVector<ValueFacts> returnedFacts(const Facts &facts, Region &region) {
    SmallVector<ValueFacts> r;
    if (region.empty())
      return r;
    if (auto ret = dyn_cast<ReturnOp>(region.front().getTerminator()))
      for (Value v : ret.getOperands())
        r.push_back(factsOf(facts, v));
    return r;
  }

  /// Types `block`'s arguments: from `types` (merged with the declared type)
  /// where given, else the declared type with named dims bound.
  static void typeBlockArgs(Block &block, ArrayRef<Type> types, Facts &facts,
                            const llvm::StringMap<int64_t> &bound) {
    for (auto [arg, type] : llvm::zip(block.getArguments(), types)) {
      Type t = type ? type : bindNamedDims(arg.getType(), bound);
      if (auto merged = type ? mergeTypes(type, bindNamedDims(arg.getType(), bound)) : Type())
        t = merged;
      arg.setType(t);
      facts[arg] = ValueFacts{t, std::nullopt, std::nullopt};
    }
  }

  static std::optional<int64_t> intScalar(const ValueFacts &f) {
    if (f.ints && f.ints->size() == 1)
      return (*f.ints)[0];
    return std::nullopt;
  }

  /// If, Loop and Scan: binds the bodies (their arguments typed from the
  /// node's inputs) and derives the node's outputs from what they return.
  /// Loop records a trip count it can compute as `het.trip_count`.
  LogicalResult bindSubgraphs(NodeOp node, ArrayRef<ValueFacts> in,
                              SmallVectorImpl<ValueFacts> &out, Facts &facts,
                              const llvm::StringMap<int64_t> &bound,
                              llvm::StringMap<int> &noRule) {
    StringRef op = node.getDomain().empty() ? node.getOpType() : StringRef();
    if (op == "If" && node->getNumRegions() == 2)
      return bindIf(node, in, out, facts, bound, noRule);
    if (op == "Loop" && node->getNumRegions() == 1 && !node->getRegion(0).empty())
      return bindLoop(node, in, out, facts, bound, noRule);
    if (op == "Scan" && node.getOpset() >= 9 && node->getNumRegions() == 1 &&
        !node->getRegion(0).empty())
      return bindScan(node, in, out, facts, bound, noRule);
    // Other nodes with regions: bind their bodies for costing; outputs keep
    // the declared types.
    for (Region &region : node->getRegions())
      if (!region.empty() && failed(bindBlock(region.front(), facts, bound, noRule)))
        return failure();
    return success();
  }

  /// If(cond): when the condition folds (constants, input-values), only the
  /// branch taken is bound (the other may not bind at these sizes at all: a
  /// Squeeze of the frames of another sample rate) and the node records its
  /// region index as `het.taken_branch`; otherwise both are, and each output joins the
  /// two branches' types. A branch that does not bind then is one error at
  /// the If node.
  LogicalResult bindIf(NodeOp node, ArrayRef<ValueFacts> in, SmallVectorImpl<ValueFacts> &out,
                       Facts &facts, const llvm::StringMap<int64_t> &bound,
                       llvm::StringMap<int> &noRule) {
    MLIRContext *ctx = node.getContext();
    std::optional<int64_t> cond = in.empty() ? std::nullopt : intScalar(in[0]);
    // Regions are in the node's attribute order (onnx.helper sorts them:
    // else_branch first); region_names says which is which.
    unsigned thenAt = 0;
    if (auto names = node->getAttrOfType<ArrayAttr>("region_names"))
      for (auto [k, name] : llvm::enumerate(names))
        if (auto s = dyn_cast<StringAttr>(name); s && s.getValue() == "then_branch")
          thenAt = unsigned(k);
    if (cond) {
      unsigned taken = *cond ? thenAt : 1 - thenAt;
      node->setAttr("het.taken_branch", IntegerAttr::get(IntegerType::get(ctx, 64), taken));
      Region &region = node->getRegion(taken);
      if (!region.empty() && failed(bindBlock(region.front(), facts, bound, noRule)))
        return failure();
      auto b = returnedFacts(facts, region);
      for (size_t i = 0; i < out.size() && i < b.size(); ++i)
        out[i] = b[i];
      return success();
    }
    node->removeAttr("het.taken_branch");
    SmallVector<SmallVector<ValueFacts>> branches;
    for (auto [k, region] : llvm::enumerate(node->getRegions())) {
      std::string inner;
      LogicalResult bound1 = success();
      if (!region.empty()) {
        ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
          if (d.getSeverity() != DiagnosticSeverity::Error)
            return failure(); // warnings go on to the caller's handler
          if (inner.empty()) {
            if (auto name = dyn_cast<NameLoc>(d.getLocation()))
              inner = "node '" + name.getName().str() + "': ";
            inner += d.str();
          }
          return success();
        });
        bound1 = bindBlock(region.front(), facts, bound, noRule);
      }
      if (failed(bound1))
        return node.emitError()
               << "If: its " << (k == thenAt ? "then" : "else")
               << " branch does not bind at these sizes (" << inner
               << ") and its condition is known only at run time; bind the scalar inputs "
                  "the condition depends on (hetplan compile --value NAME=VALUE)";
      branches.push_back(returnedFacts(facts, region));
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (i < branches[0].size() && i < branches[1].size())
        out[i].type = joinTypes(branches[0][i].type, branches[1][i].type);
    return success();
  }

  /// Loop(M, cond, v_initial...): body(iter, cond, v...) -> (cond, v..., scan...)
  LogicalResult bindLoop(NodeOp node, ArrayRef<ValueFacts> in, SmallVectorImpl<ValueFacts> &out,
                         Facts &facts, const llvm::StringMap<int64_t> &bound,
                         llvm::StringMap<int> &noRule) {
    MLIRContext *ctx = node.getContext();
    Type i64 = RankedTensorType::get({}, IntegerType::get(ctx, 64));
    Type i1 = RankedTensorType::get({}, IntegerType::get(ctx, 1));
    Block &body = node->getRegion(0).front();
    SmallVector<Type> argTypes = {i64, i1};
    for (size_t k = 2; k < in.size(); ++k)
      argTypes.push_back(in[k].type && isa<RankedTensorType>(in[k].type) ? in[k].type
                                                                         : Type());
    typeBlockArgs(body, argTypes, facts, bound);
    if (failed(bindBlock(body, facts, bound, noRule)))
      return failure();
    auto ret = returnedFacts(facts, node->getRegion(0));
    size_t carried = in.size() > 2 ? in.size() - 2 : 0;
    std::optional<int64_t> trips =
        in.size() > 0 && in[0].type && !isa<NoneType>(in[0].type) ? intScalar(in[0])
                                                                   : std::nullopt;
    if (trips && *trips >= 0)
      node->setAttr("het.trip_count", IntegerAttr::get(IntegerType::get(ctx, 64), *trips));
    for (size_t i = 0; i < out.size(); ++i) {
      if (i < carried) {
        Type body = 1 + i < ret.size() ? ret[1 + i].type : Type();
        out[i].type = body ? joinTypes(in[2 + i].type, body) : Type();
      } else if (1 + i < ret.size()) {
        auto s = ret[1 + i].shape();
        if (!s)
          continue;
        Shape stacked{trips && *trips >= 0 ? *trips : ShapedType::kDynamic};
        stacked.append(s->begin(), s->end());
        out[i] = ValueFacts{makeTensor(stacked, ret[1 + i].elementType()), std::nullopt,
                            std::nullopt};
      }
    }
    return success();
  }

  /// A Scan attribute listing one axis per scan input or output (`count` of
  /// them), 0 where absent.
  static Shape scanAxes(NodeOp node, StringRef name, size_t count) {
    Shape axes(count, 0);
    if (auto a = dyn_cast_or_null<DenseI64ArrayAttr>(node.getOnnxAttr(name)))
      for (size_t k = 0; k < count && k < size_t(a.size()); ++k)
        axes[k] = a[k];
    return axes;
  }

  /// Scan(state..., scan_in...): body(state..., slice...) -> (state..., scan_out_elem...)
  LogicalResult bindScan(NodeOp node, ArrayRef<ValueFacts> in, SmallVectorImpl<ValueFacts> &out,
                         Facts &facts, const llvm::StringMap<int64_t> &bound,
                         llvm::StringMap<int> &noRule) {
    MLIRContext *ctx = node.getContext();
    Block &body = node->getRegion(0).front();
    int64_t numScan = 0;
    if (auto a = dyn_cast_or_null<IntegerAttr>(node.getOnnxAttr("num_scan_inputs")))
      numScan = a.getInt();
    if (numScan < 0 || numScan > int64_t(in.size()))
      return node.emitError() << "Scan: num_scan_inputs is " << numScan << " but it has "
                              << in.size() << " inputs";
    size_t states = in.size() - numScan;
    Shape inAxes = scanAxes(node, "scan_input_axes", numScan);
    SmallVector<Type> argTypes;
    int64_t length = ShapedType::kDynamic;
    for (size_t k = 0; k < in.size(); ++k) {
      if (k < states) {
        argTypes.push_back(isa_and_nonnull<RankedTensorType>(in[k].type) ? in[k].type
                                                                           : Type());
        continue;
      }
      auto s = in[k].shape();
      if (!s) {
        argTypes.push_back(Type());
        continue;
      }
      int64_t axis = inAxes[k - states] < 0 ? inAxes[k - states] + s->size()
                                            : inAxes[k - states];
      if (axis < 0 || axis >= int64_t(s->size()))
        return node.emitError() << "Scan: scan axis out of range for input #" << k;
      if (ShapedType::isDynamic(length))
        length = (*s)[axis];
      Shape slice(s->begin(), s->end());
      slice.erase(slice.begin() + axis);
      argTypes.push_back(makeTensor(slice, in[k].elementType()));
    }
    typeBlockArgs(body, argTypes, facts, bound);
    if (failed(bindBlock(body, facts, bound, noRule)))
      return failure();
    if (!ShapedType::isDynamic(length))
      node->setAttr("het.trip_count", IntegerAttr::get(IntegerType::get(ctx, 64), length));
    auto ret = returnedFacts(facts, node->getRegion(0));
    Shape outAxes =
        scanAxes(node, "scan_output_axes", out.size() > states ? out.size() - states : 0);
    for (size_t i = 0; i < out.size() && i < ret.size(); ++i) {
      if (i < states) {
        out[i].type = joinTypes(in[i].type, ret[i].type);
        continue;
      }
      auto s = ret[i].shape();
      if (!s)
        continue;
      Shape stacked(s->begin(), s->end());
      int64_t axis = outAxes[i - states];
      if (axis < 0)
        axis += stacked.size() + 1;
      if (axis < 0 || axis > int64_t(stacked.size()))
        return node.emitError() << "Scan: scan_output_axes out of range for output #" << i;
      stacked.insert(stacked.begin() + axis, length);
      out[i] = ValueFacts{makeTensor(stacked, ret[i].elementType()), std::nullopt,
                          std::nullopt};
    }
    return success();
  }

  /// The name of input `i` of `graph` (`#i` without a het.name).
  static std::string inputName(GraphOp graph, size_t i) {
    if (auto attrs = graph.getArgAttrsAttr())
      if (auto dict = dyn_cast<DictionaryAttr>(attrs[i]))
        if (auto n = dict.getAs<StringAttr>("het.name"))
          return n.str();
    return "#" + std::to_string(i);
  }

  /// `input-values`: an integer or bool input of one element folds like a
  /// constant holding the value given.
  LogicalResult bindInputValues(GraphOp graph, const llvm::StringMap<int64_t> &values,
                                Facts &facts) {
    llvm::StringSet<> used;
    Block &body = graph.getBody().front();
    for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
      std::string name = inputName(graph, i);
      auto it = values.find(name);
      if (it == values.end())
        continue;
      used.insert(name);
      auto ranked = dyn_cast<RankedTensorType>(arg.getType());
      if (!ranked || !ranked.hasStaticShape() || ranked.getNumElements() != 1 ||
          !ranked.getElementType().isInteger())
        return graph.emitError() << "input-values gives input '" << name << "' a value, but it is "
                                 << arg.getType() << ", not an integer or bool scalar";
      facts[arg].ints = SmallVector<int64_t>{it->second};
    }
    for (auto &entry : values)
      if (!used.contains(entry.getKey()))
        return graph.emitError() << "input-values names '" << entry.getKey()
                                 << "', which is not an input of @" << graph.getSymName();
    return success();
  }

  LogicalResult bindGraph(GraphOp graph, const llvm::StringMap<int64_t> &bound,
                          const llvm::StringMap<SmallVector<int64_t>> &shapes,
                          const llvm::StringMap<int64_t> &values) {
    Block &body = graph.getBody().front();
    llvm::StringSet<> usedShapes;
    SmallVector<Type> inputs;
    for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
      std::string name = "#" + std::to_string(i);
      if (auto attrs = graph.getArgAttrsAttr())
        if (auto dict = dyn_cast<DictionaryAttr>(attrs[i]))
          if (auto n = dict.getAs<StringAttr>("het.name"))
            name = n.str();
      Type type = bindNamedDims(arg.getType(), bound);
      auto it = shapes.find(name);
      if (it != shapes.end()) {
        usedShapes.insert(name);
        auto ranked = dyn_cast<RankedTensorType>(arg.getType());
        if (!ranked)
          return graph.emitError() << "input '" << name << "' is not a ranked tensor";
        if (it->second.size() != size_t(ranked.getRank()))
          return graph.emitError()
                 << "input '" << name << "' has rank " << ranked.getRank()
                 << " but input-shapes gives " << it->second.size() << " dims";
        for (auto [d, want] : llvm::zip(ranked.getShape(), it->second))
          if (!ShapedType::isDynamic(d) && !ShapedType::isDynamic(want) && d != want)
            return graph.emitError() << "input '" << name << "' has the static shape "
                                     << arg.getType() << "; input-shapes cannot change it";
        type = RankedTensorType::get(it->second, ranked.getElementType());
      }
      arg.setType(type);
      inputs.push_back(type);
    }
    for (auto &entry : shapes)
      if (!usedShapes.contains(entry.getKey()))
        return graph.emitError() << "input-shapes names '" << entry.getKey()
                                 << "', which is not an input of @" << graph.getSymName();

    Facts facts;
    for (BlockArgument arg : body.getArguments())
      facts[arg] = ValueFacts{arg.getType(), std::nullopt, std::nullopt};
    if (failed(bindInputValues(graph, values, facts)))
      return failure();
    llvm::StringMap<int> noRule;
    declaredShapes = {};
    if (failed(bindBlock(body, facts, bound, noRule)))
      return failure();
    warnDeclaredShapes();

    auto ret = cast<ReturnOp>(body.getTerminator());
    graph.setFunctionTypeAttr(TypeAttr::get(FunctionType::get(
        graph.getContext(), inputs, SmallVector<Type>(ret.getOperandTypes()))));

    if (requireStatic) {
      for (Operation &op : body)
        for (Value r : op.getResults())
          if (isa<TensorType, UnknownType>(r.getType()) && !isFullyStatic(r.getType())) {
            InFlightDiagnostic d = op.emitError() << "shape of this value is still not known: "
                                                  << r.getType();
            auto node = dyn_cast<NodeOp>(op);
            if (node && node.getOpType() == "If" && node.getDomain().empty())
              d << " (If: its branches give different shapes and its condition is known "
                   "only at run time; bind the scalar inputs the condition depends on: "
                   "hetplan compile --value NAME=VALUE)";
            if (!noRule.empty()) {
              d << " (ops without a shape rule:";
              for (auto &e : noRule)
                d << " " << e.getKey() << " x" << e.getValue();
              d << ")";
            }
            return d;
          }
    }
    return success();
  }
};

} // namespace
} // namespace hetplan::het
