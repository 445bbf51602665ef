//===- GraphSummary.cpp - what a het.graph holds --------------------------===//

#include "passes/GraphSummary.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace mlir;

namespace hetplan::het {

namespace {
int64_t elementBytes(Type element, int64_t count) {
  if (auto c = dyn_cast<ComplexType>(element))
    return elementBytes(c.getElementType(), 2 * count);
  if (!element.isIntOrFloat())
    return 0;
  unsigned bits = element.getIntOrFloatBitWidth();
  return (int64_t(bits == 1 ? 8 : bits) * count + 7) / 8;
}

std::string withCommas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

std::string humanBytes(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return llvm::formatv("{0:F1} {1}", v, units[u]).str();
}
} // namespace

std::string formatType(Type type) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (auto ranked = dyn_cast<RankedTensorType>(type)) {
    auto dims = dyn_cast_or_null<DimsAttr>(ranked.getEncoding());
    for (auto [i, size] : llvm::enumerate(ranked.getShape())) {
      if (dims && !dims.getNames()[i].empty())
        os << dims.getNames()[i].getValue();
      else if (ShapedType::isDynamic(size))
        os << '?';
      else
        os << size;
      os << " x ";
    }
    os << ranked.getElementType();
  } else if (auto unranked = dyn_cast<UnrankedTensorType>(type)) {
    os << "* x " << unranked.getElementType();
  } else {
    os << type;
  }
  return out;
}

GraphSummary summarizeGraph(GraphOp graph) {
  GraphSummary s;
  s.graphName = graph.getSymName().str();
  if (auto module = graph->getParentOfType<ModuleOp>()) {
    if (auto src = module->getAttrOfType<StringAttr>("het.source"))
      s.source = src.str();
    if (auto si = module->getAttrOfType<StringAttr>("het.shape_inference"))
      s.shapeInference = si.str();
  }
  llvm::StringSet<> seenDims;
  auto noteDims = [&](Type type) {
    if (auto ranked = dyn_cast<RankedTensorType>(type))
      if (auto dims = dyn_cast_or_null<DimsAttr>(ranked.getEncoding()))
        for (StringAttr name : dims.getNames())
          if (!name.empty() && seenDims.insert(name.getValue()).second)
            s.symbolicDims.push_back(name.str());
  };
  auto portName = [](ArrayAttr attrs, unsigned i) -> std::string {
    if (attrs && i < attrs.size())
      if (auto dict = dyn_cast<DictionaryAttr>(attrs[i]))
        if (auto name = dict.getAs<StringAttr>("het.name"))
          return name.str();
    return "#" + std::to_string(i);
  };
  for (auto [i, type] : llvm::enumerate(graph.getArgumentTypes())) {
    s.inputs.push_back({portName(graph.getArgAttrsAttr(), i), formatType(type)});
    noteDims(type);
  }
  for (auto [i, type] : llvm::enumerate(graph.getResultTypes())) {
    s.outputs.push_back({portName(graph.getResAttrsAttr(), i), formatType(type)});
    noteDims(type);
  }
  // The cost model's rule (passes/cost/OpCosts.cpp, isParameterType and the
  // BatchNormalization exception), so summary and compile count alike.
  auto isParameter = [](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !type.hasStaticShape() || !isa<FloatType>(type.getElementType()) ||
        type.getNumElements() < 2)
      return false;
    bool statsOnly = !v.use_empty();
    for (OpOperand &use : v.getUses()) {
      auto node = dyn_cast<NodeOp>(use.getOwner());
      bool stat = node && node.getDomain().empty() && node.getOpType() == "BatchNormalization" &&
                  (use.getOperandNumber() == 3 || use.getOperandNumber() == 4);
      statsOnly &= stat;
    }
    return !statsOnly;
  };
  graph.walk([&](Operation *op) {
    if (auto node = dyn_cast<NodeOp>(op)) {
      ++s.numNodes;
      s.numSubgraphs += node.getBodies().size();
      std::string key = node.getDomain().empty()
                            ? node.getOpType().str()
                            : (node.getDomain() + "." + node.getOpType()).str();
      ++s.opCounts[key];
    } else if (auto constant = dyn_cast<ConstantOp>(op)) {
      ++s.numNodes;
      ++s.opCounts["Constant"];
      auto type = dyn_cast<RankedTensorType>(constant.getType());
      if (type && isParameter(constant.getResult())) {
        ++s.numWeights;
        ++s.numConstantWeights;
        s.numParameters += type.getNumElements();
        s.parameterBytes += elementBytes(type.getElementType(), type.getNumElements());
      }
    } else if (auto weight = dyn_cast<WeightOp>(op)) {
      auto type = cast<RankedTensorType>(weight.getType());
      if (isParameter(weight.getResult())) {
        ++s.numWeights;
        s.numParameters += type.getNumElements();
        s.parameterBytes += elementBytes(type.getElementType(), type.getNumElements());
      } else {
        ++s.numBuffers;
        s.bufferElements += type.getNumElements();
      }
    }
  });
  return s;
}

void printSummaryText(const GraphSummary &s, llvm::raw_ostream &os) {
  os << "graph @" << s.graphName;
  if (!s.source.empty())
    os << " from " << s.source;
  os << "\n";
  os << "  nodes:      " << withCommas(s.numNodes) << " (" << s.opCounts.size()
     << " op types";
  if (s.numSubgraphs)
    os << ", " << s.numSubgraphs << " subgraphs";
  os << ")\n";
  os << "  parameters: " << withCommas(s.numParameters) << " in "
     << s.numWeights << " weights (" << humanBytes(s.parameterBytes);
  if (s.numConstantWeights)
    os << "; " << s.numConstantWeights << " of them Constant nodes";
  os << ")";
  if (s.numBuffers)
    os << "; " << s.numBuffers << " buffers (" << withCommas(s.bufferElements)
       << " elements: integer, bool, scalar or running statistics)";
  os << "\n";
  if (!s.symbolicDims.empty()) {
    os << "  symbolic dims: ";
    llvm::interleaveComma(s.symbolicDims, os);
    os << "\n";
  }
  os << "  inputs:\n";
  for (const auto &p : s.inputs)
    os << "    " << p.name << ": " << p.type << "\n";
  os << "  outputs:\n";
  for (const auto &p : s.outputs)
    os << "    " << p.name << ": " << p.type << "\n";
  // Most frequent first; ties by name, for a stable order.
  std::vector<std::pair<std::string, int64_t>> ops(s.opCounts.begin(),
                                                   s.opCounts.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](auto &a, auto &b) { return a.second > b.second; });
  os << "  op counts:\n";
  for (const auto &[name, count] : ops)
    os << llvm::formatv("    {0,-24} {1,6}\n", name, count);
  if (!s.shapeInference.empty())
    os << "  shape inference: " << s.shapeInference << "\n";
}

void printSummaryJson(const GraphSummary &s, llvm::raw_ostream &os) {
  llvm::json::Object ops;
  for (const auto &[name, count] : s.opCounts)
    ops[name] = count;
  auto ports = [](const std::vector<GraphSummary::Port> &v) {
    llvm::json::Array a;
    for (const auto &p : v)
      a.push_back(llvm::json::Object{{"name", p.name}, {"type", p.type}});
    return a;
  };
  llvm::json::Array dims;
  for (const auto &d : s.symbolicDims)
    dims.push_back(d);
  llvm::json::Value v = llvm::json::Object{
      {"graph", s.graphName},
      {"source", s.source},
      {"nodes", s.numNodes},
      {"subgraphs", s.numSubgraphs},
      {"weights", s.numWeights},
      {"constant_weights", s.numConstantWeights},
      {"parameters", s.numParameters},
      {"parameter_bytes", s.parameterBytes},
      {"buffers", s.numBuffers},
      {"buffer_elements", s.bufferElements},
      {"symbolic_dims", std::move(dims)},
      {"inputs", ports(s.inputs)},
      {"outputs", ports(s.outputs)},
      {"op_counts", std::move(ops)},
      {"shape_inference", s.shapeInference}};
  os << llvm::formatv("{0:2}", v) << "\n";
}

} // namespace hetplan::het
