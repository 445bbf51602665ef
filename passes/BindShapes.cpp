//===- BindShapes.cpp - the het-bind-shapes pass --------------------------===//

#include "passes/Passes.h"
#include "passes/ShapeRules.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace hetplan::het {

#define GEN_PASS_DEF_HETBINDSHAPES
#include "passes/Passes.h.inc"

namespace {

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

bool isFullyStatic(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.hasStaticShape();
}

struct BindShapesPass : impl::HetBindShapesBase<BindShapesPass> {
  using HetBindShapesBase::HetBindShapesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<int64_t> bound;
    for (const std::string &entry : dims) {
      auto [name, value] = StringRef(entry).split('=');
      int64_t size;
      if (name.empty() || value.getAsInteger(10, size) || size <= 0) {
        module.emitError() << "bad dims entry '" << entry
                           << "': expected NAME=SIZE with SIZE > 0";
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
    for (auto graph : module.getOps<GraphOp>())
      if (failed(bindGraph(graph, bound, shapes)))
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

  LogicalResult bindGraph(GraphOp graph, const llvm::StringMap<int64_t> &bound,
                          const llvm::StringMap<SmallVector<int64_t>> &shapes) {
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

    llvm::DenseMap<Value, ValueFacts> facts;
    for (BlockArgument arg : body.getArguments())
      facts[arg] = {arg.getType(), std::nullopt, std::nullopt};
    llvm::StringMap<int> noRule;
    for (Operation &op : body) {
      if (isa<WeightOp, ConstantOp>(op)) {
        facts[op.getResult(0)] = factsOfConstant(&op);
        continue;
      }
      auto node = dyn_cast<NodeOp>(op);
      if (!node) {
        for (Value r : op.getResults())
          facts[r] = {r.getType(), std::nullopt, std::nullopt};
        continue;
      }
      SmallVector<ValueFacts> in;
      for (Value v : node.getInputs()) {
        auto it = facts.find(v);
        in.push_back(it != facts.end() ? it->second
                                       : ValueFacts{v.getType(), std::nullopt, std::nullopt});
      }
      SmallVector<ValueFacts> out(node.getNumResults());
      ShapeRule rule = lookupShapeRule(node.getDomain(), node.getOpType());
      if (rule) {
        std::string why;
        if (failed(rule(node, in, out, why)))
          return node.emitError() << node.getOpType() << ": " << why;
      }
      for (auto [i, result] : llvm::enumerate(node.getResults())) {
        Type declared = bindNamedDims(result.getType(), bound);
        Type type = declared;
        if (out[i].type) {
          type = mergeTypes(out[i].type, declared);
          if (!type)
            return node.emitError()
                   << node.getOpType() << " output #" << i << " is " << out[i].type
                   << " by het's shape rules but the model declares " << declared;
        } else if (!rule && !isa<NoneType>(declared) && !isFullyStatic(declared)) {
          ++noRule[node.getOpType()];
        }
        result.setType(type);
        facts[result] = {type, out[i].ints, out[i].floats};
      }
    }

    auto ret = cast<ReturnOp>(body.getTerminator());
    graph.setFunctionTypeAttr(TypeAttr::get(FunctionType::get(
        graph.getContext(), inputs, SmallVector<Type>(ret.getOperandTypes()))));

    if (requireStatic) {
      for (Operation &op : body)
        for (Value r : op.getResults())
          if (isa<TensorType, UnknownType>(r.getType()) && !isFullyStatic(r.getType())) {
            InFlightDiagnostic d = op.emitError() << "shape of this value is still not known: "
                                                  << r.getType();
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
