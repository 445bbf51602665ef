//===- ImportGraph.cpp - ONNX graphs as het IR ------------------------------===//
//
// The module, the top graph, its nodes (with their subgraphs) and constants;
// errors name the node they are in.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/Importer.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/Path.h"

namespace hetplan::import::detail {

namespace {

/// Domains the importer accepts besides model-local function domains.
const char *const kKnownDomains[] = {
    "",
    "ai.onnx",
    "ai.onnx.ml",
    "ai.onnx.training",
    "ai.onnx.preview",
    "ai.onnx.preview.training",
    "com.microsoft",
    "com.microsoft.nchwc",
    "com.microsoft.experimental",
    "com.ms.internal.nhwc",
    "org.pytorch.aten",
};

} // namespace

Importer::Importer(MLIRContext *context, llvm::StringRef path,
                   const onnx::ModelProto &model, bool allowMissingWeights)
    : context(context), builder(context), path(path.str()), model(model),
      allowMissingWeights(allowMissingWeights) {
  modelDir = llvm::sys::path::parent_path(path).str();
  for (const auto &opset : model.opset_import())
    opsets[canonicalDomain(opset.domain())] = opset.version();
  for (const auto &function : model.functions())
    functionDomains.insert(function.domain());
}

OwningOpRef<ModuleOp> Importer::run(llvm::StringRef shapeInferenceNote) {
  Location loc = FileLineColLoc::get(context, path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  SmallVector<NamedAttribute> opsetAttrs;
  for (const auto &[domain, version] : opsets)
    opsetAttrs.push_back(builder.getNamedAttr(
        domain.empty() ? "ai.onnx" : domain, builder.getI64IntegerAttr(version)));
  std::string producer = model.producer_name();
  if (!model.producer_version().empty())
    producer += " " + model.producer_version();
  auto op = module->getOperation();
  op->setAttr("het.source", builder.getStringAttr(path));
  op->setAttr("het.ir_version", builder.getI64IntegerAttr(model.ir_version()));
  op->setAttr("het.opsets", builder.getDictionaryAttr(opsetAttrs));
  if (!producer.empty())
    op->setAttr("het.producer", builder.getStringAttr(producer));
  op->setAttr("het.shape_inference", builder.getStringAttr(shapeInferenceNote));

  builder.setInsertionPointToEnd(module->getBody());
  importTopGraph(model.graph());
  return module;
}

void Importer::failHere(const std::string &message) {
  std::string where = path + ": ";
  if (currentNode) {
    where += "node ";
    if (!currentNode->name().empty())
      where += "'" + currentNode->name() + "' ";
    else
      where += "#" + std::to_string(currentNodeIndex) + " ";
    where += "(" + currentNode->op_type() + "): ";
  }
  fail(where + message);
}

Location Importer::nodeLoc(const onnx::NodeProto &node) {
  std::string name = node.name();
  if (name.empty() && node.output_size())
    name = node.output(0);
  return NameLoc::get(builder.getStringAttr(name),
                      FileLineColLoc::get(context, path, 0, 0));
}

void Importer::collectTypes(const onnx::GraphProto &g, Scope &scope) {
  for (const auto &vi : g.value_info())
    if (vi.has_type())
      scope.types[vi.name()] = &vi.type();
  for (const auto &vi : g.input())
    if (vi.has_type())
      scope.types[vi.name()] = &vi.type();
  for (const auto &vi : g.output())
    if (vi.has_type())
      scope.types[vi.name()] = &vi.type();
}

/// Imports weights and nodes of `g` at the builder's insertion point and
/// returns the values of its outputs. Inputs must already be in `scope`.
SmallVector<Value> Importer::importBody(const onnx::GraphProto &g, Scope &scope) {
  if (g.sparse_initializer_size())
    failHere("unsupported: sparse initializer '" +
             g.sparse_initializer(0).values().name() + "' in graph '" +
             g.name() + "'");
  for (const auto &init : g.initializer()) {
    if (init.name().empty())
      failHere("an initializer of graph '" + g.name() + "' has no name");
    RankedTensorType type;
    Attribute value =
        tensorValue(init, type, "initializer '" + init.name() + "'");
    Location loc = NameLoc::get(builder.getStringAttr(init.name()),
                                FileLineColLoc::get(context, path, 0, 0));
    auto weight = WeightOp::create(
        builder, loc, type, builder.getStringAttr(init.name()),
        dyn_cast<ElementsAttr>(value), dyn_cast<ExternAttr>(value));
    scope.values[init.name()] = weight;
  }

  llvm::StringSet<> producedHere;
  for (const auto &node : g.node())
    for (const auto &out : node.output())
      if (!out.empty())
        producedHere.insert(out);

  Value none;
  int index = 0;
  for (const auto &node : g.node()) {
    currentNode = &node;
    currentNodeIndex = index++;
    SmallVector<Value> inputs;
    for (const auto &name : node.input()) {
      if (name.empty()) {
        if (!none)
          none = NoneOp::create(builder, builder.getUnknownLoc(), builder.getNoneType());
        inputs.push_back(none);
        continue;
      }
      Value v = scope.lookup(name);
      if (!v) {
        if (producedHere.contains(name))
          failHere("uses '" + name +
                   "' before it is defined (the graph is not in "
                   "topological order or has a cycle)");
        failHere("uses '" + name + "', which no input, initializer or "
                                   "node defines");
      }
      inputs.push_back(v);
    }
    importNode(node, inputs, scope);
    currentNode = nullptr;
  }

  SmallVector<Value> outputs;
  for (const auto &out : g.output()) {
    Value v = scope.lookup(out.name());
    if (!v)
      failHere("graph '" + g.name() + "' output '" + out.name() +
               "' is not defined by any input, initializer or node");
    outputs.push_back(v);
  }
  return outputs;
}

void Importer::importNode(const onnx::NodeProto &node, ArrayRef<Value> inputs,
                          Scope &scope) {
  std::string domain = canonicalDomain(node.domain());
  bool known = functionDomains.contains(domain) ||
               llvm::is_contained(kKnownDomains, llvm::StringRef(domain));
  if (!known)
    failHere("unknown domain '" + node.domain() + "' (hetplan knows ai.onnx, "
             "ai.onnx.ml, ai.onnx.training, ai.onnx.preview(.training), "
             "com.microsoft and the model's own function domains)");
  auto opset = opsets.find(domain);
  if (opset == opsets.end())
    failHere("domain '" + (domain.empty() ? std::string("ai.onnx") : domain) +
             "' is not listed in the model's opset_import");
  Location loc = nodeLoc(node);

  if (domain.empty() && node.op_type() == "Constant") {
    importConstant(node, loc, scope);
    return;
  }

  SmallVector<Type> resultTypes;
  for (const auto &out : node.output())
    resultTypes.push_back(out.empty() ? Type(builder.getNoneType())
                                      : typeOf(scope, out));

  SmallVector<NamedAttribute> attrs;
  SmallVector<const onnx::AttributeProto *> graphAttrs;
  for (const auto &a : node.attribute()) {
    if (isGraphAttribute(a)) {
      graphAttrs.push_back(&a);
      continue;
    }
    attrs.push_back(builder.getNamedAttr(a.name(), convertAttribute(a)));
  }

  SmallVector<const onnx::GraphProto *> bodies;
  SmallVector<Attribute> regionNames;
  for (const auto *a : graphAttrs) {
    if (a->has_g()) {
      bodies.push_back(&a->g());
      regionNames.push_back(builder.getStringAttr(a->name()));
    }
    for (const auto &g : a->graphs()) {
      bodies.push_back(&g);
      regionNames.push_back(builder.getStringAttr(a->name()));
    }
  }

  OperationState state(loc, NodeOp::getOperationName());
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  state.addAttribute("op_type", builder.getStringAttr(node.op_type()));
  if (!domain.empty())
    state.addAttribute("domain", builder.getStringAttr(domain));
  state.addAttribute("opset", builder.getI64IntegerAttr(opset->second));
  if (!attrs.empty())
    state.addAttribute("attrs", builder.getDictionaryAttr(attrs));
  if (!regionNames.empty())
    state.addAttribute("region_names", builder.getArrayAttr(regionNames));
  if (!node.name().empty())
    state.addAttribute("name", builder.getStringAttr(node.name()));
  for (size_t i = 0; i < bodies.size(); ++i)
    state.addRegion();
  Operation *op = builder.create(state);

  for (auto [i, body] : llvm::enumerate(bodies))
    importSubgraph(*body, op->getRegion(i), scope);

  for (auto [i, out] : llvm::enumerate(node.output()))
    if (!out.empty())
      scope.values[out] = op->getResult(i);
}

void Importer::importSubgraph(const onnx::GraphProto &g, Region &region,
                              Scope &outer) {
  const onnx::NodeProto *savedNode = currentNode;
  int savedIndex = currentNodeIndex;
  OpBuilder::InsertionGuard guard(builder);
  Scope scope;
  scope.parent = &outer;
  collectTypes(g, scope);
  Block *block = new Block();
  region.push_back(block);
  for (const auto &in : g.input()) {
    Type t = in.has_type() ? convertType(in.type(), "input '" + in.name() + "'")
                           : Type(UnknownType::get(context));
    scope.values[in.name()] =
        block->addArgument(t, NameLoc::get(builder.getStringAttr(in.name())));
  }
  builder.setInsertionPointToEnd(block);
  SmallVector<Value> outputs = importBody(g, scope);
  currentNode = savedNode;
  currentNodeIndex = savedIndex;
  ReturnOp::create(builder, builder.getUnknownLoc(), outputs);
}

void Importer::importConstant(const onnx::NodeProto &node, Location loc, Scope &scope) {
  if (node.output_size() != 1 || node.attribute_size() != 1)
    failHere("a Constant needs exactly one output and one value attribute");
  const auto &a = node.attribute(0);
  RankedTensorType type;
  Attribute value;
  auto dense = [&](Type element, auto values) {
    type = RankedTensorType::get(
        a.name().size() > 6 && a.name().back() == 's'
            ? SmallVector<int64_t>{int64_t(values.size())}
            : SmallVector<int64_t>{},
        element);
    return values;
  };
  const std::string &n = a.name();
  if (n == "value") {
    value = tensorValue(a.t(), type, "attribute 'value'");
  } else if (n == "value_float") {
    dense(builder.getF32Type(), SmallVector<float>{a.f()});
    value = DenseElementsAttr::get(type, ArrayRef<float>{a.f()});
  } else if (n == "value_floats") {
    auto v = dense(builder.getF32Type(),
                   SmallVector<float>(a.floats().begin(), a.floats().end()));
    value = DenseElementsAttr::get(type, ArrayRef<float>(v));
  } else if (n == "value_int") {
    dense(builder.getI64Type(), SmallVector<int64_t>{a.i()});
    value = DenseElementsAttr::get(type, ArrayRef<int64_t>{a.i()});
  } else if (n == "value_ints") {
    auto v = dense(builder.getI64Type(),
                   SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
    value = DenseElementsAttr::get(type, ArrayRef<int64_t>(v));
  } else if (n == "value_string") {
    dense(StringType::get(context), SmallVector<llvm::StringRef>{a.s()});
    value = DenseStringElementsAttr::get(type, {llvm::StringRef(a.s())});
  } else if (n == "value_strings") {
    auto v = dense(StringType::get(context),
                   SmallVector<llvm::StringRef>(a.strings().begin(),
                                                a.strings().end()));
    value = DenseStringElementsAttr::get(type, v);
  } else if (n == "sparse_value") {
    failHere("unsupported: sparse Constant value");
  } else {
    failHere("unknown Constant attribute '" + n + "'");
  }
  auto op = ConstantOp::create(builder, loc, type, value);
  scope.values[node.output(0)] = op;
}

void Importer::importTopGraph(const onnx::GraphProto &g) {
  Scope scope;
  collectTypes(g, scope);
  llvm::StringSet<> initializers;
  for (const auto &init : g.initializer())
    initializers.insert(init.name());

  // Inputs that have an initializer are overridable defaults (IR < 4
  // style): they are weights, not model inputs.
  SmallVector<const onnx::ValueInfoProto *> inputs;
  SmallVector<Type> inputTypes;
  for (const auto &in : g.input()) {
    if (initializers.contains(in.name()))
      continue;
    if (!in.has_type())
      failHere("graph input '" + in.name() + "' has no type");
    inputs.push_back(&in);
    inputTypes.push_back(convertType(in.type(), "input '" + in.name() + "'"));
  }

  std::string name = g.name().empty() ? "main" : g.name();
  auto graph = GraphOp::create(builder, FileLineColLoc::get(context, path, 0, 0),
                               name, builder.getFunctionType(inputTypes, {}));
  Block *block = new Block();
  graph.getBody().push_back(block);
  SmallVector<Attribute> argAttrs;
  for (auto [in, type] : llvm::zip(inputs, inputTypes)) {
    scope.values[in->name()] = block->addArgument(
        type, NameLoc::get(builder.getStringAttr(in->name())));
    argAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr("het.name", builder.getStringAttr(in->name()))));
  }

  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(block);
  SmallVector<Value> outputs = importBody(g, scope);
  ReturnOp::create(builder, builder.getUnknownLoc(), outputs);

  SmallVector<Type> resultTypes;
  SmallVector<Attribute> resAttrs;
  for (auto [value, out] : llvm::zip(outputs, g.output())) {
    resultTypes.push_back(value.getType());
    resAttrs.push_back(builder.getDictionaryAttr(
        builder.getNamedAttr("het.name", builder.getStringAttr(out.name()))));
  }
  graph.setFunctionTypeAttr(
      TypeAttr::get(builder.getFunctionType(inputTypes, resultTypes)));
  if (!argAttrs.empty())
    graph.setArgAttrsAttr(builder.getArrayAttr(argAttrs));
  if (!resAttrs.empty())
    graph.setResAttrsAttr(builder.getArrayAttr(resAttrs));
}

} // namespace hetplan::import::detail
