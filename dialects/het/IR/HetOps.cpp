//===- HetOps.cpp - het dialect operations --------------------------------===//

#include "dialects/het/IR/HetOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionImplementation.h"
#include "llvm/ADT/StringSet.h"

#include "runtime/include/hetplan/runtime/Checked.h"

using namespace mlir;
using namespace hetplan::het;

/// A tensor whose static element count or byte size overflows int64 is
/// refused where it is declared: every later count (the summary's
/// parameters, the planner's memory, the runtime's buffers) multiplies it.
/// `what` names the value ("result #0", "input #2").
static LogicalResult verifyTensorSize(Operation *op, Type type, const Twine &what) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked)
    return success();
  SmallVector<int64_t> dims;
  for (int64_t d : ranked.getShape())
    if (!ShapedType::isDynamic(d))
      dims.push_back(d);
  int64_t count = 0, bytes = 0;
  int64_t width = 8;
  if (ranked.getElementType().isIntOrFloat())
    width = std::max<int64_t>(1, (ranked.getElementType().getIntOrFloatBitWidth() + 7) / 8);
  if (!hetplan::runtime::numelInto(dims.data(), dims.size(), count) ||
      !hetplan::runtime::mulInto(count, width, bytes))
    return op->emitOpError() << what << " of type " << type
                             << " has more elements or bytes than a 64-bit size holds";
  return success();
}

//===----------------------------------------------------------------------===//
// GraphOp
//===----------------------------------------------------------------------===//

void GraphOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                    FunctionType type) {
  state.addAttribute(SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  state.addAttribute(getFunctionTypeAttrName(state.name), TypeAttr::get(type));
  state.addRegion();
}

ParseResult GraphOp::parse(OpAsmParser &parser, OperationState &result) {
  auto buildType = [](Builder &builder, ArrayRef<Type> argTypes,
                      ArrayRef<Type> results,
                      function_interface_impl::VariadicFlag, std::string &) {
    return builder.getFunctionType(argTypes, results);
  };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false,
      getFunctionTypeAttrName(result.name), buildType,
      getArgAttrsAttrName(result.name), getResAttrsAttrName(result.name));
}

void GraphOp::print(OpAsmPrinter &p) {
  function_interface_impl::printFunctionOp(p, *this, /*isVariadic=*/false,
                                           getFunctionTypeAttrName(),
                                           getArgAttrsAttrName(),
                                           getResAttrsAttrName());
}

LogicalResult GraphOp::verify() {
  Region &body = getBody();
  if (body.empty())
    return emitOpError("needs a body");
  Block &entry = body.front();
  ArrayRef<Type> inputs = getArgumentTypes();
  if (entry.getNumArguments() != inputs.size())
    return emitOpError("body has ")
           << entry.getNumArguments() << " arguments but the graph type has "
           << inputs.size() << " inputs";
  for (auto [i, arg] : llvm::enumerate(entry.getArguments())) {
    if (arg.getType() != inputs[i])
      return emitOpError("input #")
             << i << " has type " << arg.getType()
             << " in the body but " << inputs[i] << " in the graph type";
    if (failed(verifyTensorSize(*this, inputs[i], "input #" + Twine(i))))
      return failure();
  }
  if (entry.empty() || !isa<ReturnOp>(entry.back()))
    return emitOpError("body must end with 'het.return'");
  llvm::StringSet<> names;
  for (auto weight : entry.getOps<WeightOp>())
    if (!names.insert(weight.getSymName()).second)
      return weight.emitOpError("redefines the weight @")
             << weight.getSymName() << " of this graph";
  return success();
}

//===----------------------------------------------------------------------===//
// NodeOp
//===----------------------------------------------------------------------===//

Region *NodeOp::getBodyNamed(StringRef name) {
  auto names = getRegionNames();
  if (!names)
    return nullptr;
  for (auto [i, n] : llvm::enumerate(names->getAsValueRange<StringAttr>()))
    if (n == name)
      return &getBodies()[i];
  return nullptr;
}

LogicalResult NodeOp::verify() {
  if (getOpType().empty())
    return emitOpError("needs a non-empty op_type");
  if (getOpset() <= 0)
    return emitOpError("opset must be positive, got ") << getOpset();
  for (auto [i, type] : llvm::enumerate(getResultTypes()))
    if (failed(verifyTensorSize(*this, type, "result #" + Twine(i))))
      return failure();
  size_t numNames = getRegionNames() ? getRegionNames()->size() : 0;
  if (numNames != getBodies().size())
    return emitOpError("has ")
           << getBodies().size() << " subgraph regions but " << numNames
           << " region_names";
  for (Region &region : getBodies()) {
    if (region.empty() || region.front().empty() ||
        !isa<ReturnOp>(region.front().back()))
      return emitOpError("subgraph regions must end with 'het.return'");
  }
  if (auto attrs = getAttrsAttr())
    if (getRegionNames())
      for (StringRef n : getRegionNames()->getAsValueRange<StringAttr>())
        if (attrs.contains(n))
          return emitOpError("attribute '")
                 << n << "' is both a region and an attribute";
  return success();
}

//===----------------------------------------------------------------------===//
// WeightOp and ConstantOp
//===----------------------------------------------------------------------===//

/// Bytes that `count` elements of `type` take when packed as ONNX raw_data,
/// or -1 when the type has no fixed width.
static int64_t rawByteSize(Type type, int64_t count) {
  Type element = type;
  if (auto complex = dyn_cast<ComplexType>(type))
    return rawByteSize(complex.getElementType(), 2 * count);
  if (!element.isIntOrFloat())
    return -1;
  int64_t bits = element.getIntOrFloatBitWidth();
  if (bits == 1) // ONNX stores bool as one byte each
    bits = 8;
  return (bits * count + 7) / 8;
}

/// Shared by weights and constants: `value` matches the result type, or
/// `extern` holds exactly the bytes the type needs.
static LogicalResult verifyTensorSource(Operation *op, Type resultType,
                                        Attribute value) {
  auto tensor = dyn_cast<RankedTensorType>(resultType);
  if (!tensor || !tensor.hasStaticShape())
    return op->emitOpError("result must be a tensor of static shape, got ")
           << resultType;
  if (failed(verifyTensorSize(op, tensor, "the result")))
    return failure();
  if (auto elements = dyn_cast<ElementsAttr>(value)) {
    auto valueType = cast<ShapedType>(elements.getType());
    if (valueType.getShape() != tensor.getShape() ||
        valueType.getElementType() != tensor.getElementType())
      return op->emitOpError("value of type ")
             << valueType << " does not match the result type " << tensor;
    return success();
  }
  auto ext = cast<ExternAttr>(value);
  if (ext.getEncoding() == "raw") {
    int64_t want = rawByteSize(tensor.getElementType(), tensor.getNumElements());
    if (want < 0)
      return op->emitOpError("raw bytes cannot hold elements of type ")
             << tensor.getElementType();
    if (want != ext.getLength())
      return op->emitOpError("refers to ")
             << ext.getLength() << " bytes but " << tensor << " needs "
             << want;
  }
  return success();
}

LogicalResult WeightOp::verify() {
  if (bool(getValueAttr()) == bool(getLocationAttr()))
    return emitOpError("needs exactly one of an inline value or an extern "
                       "reference");
  return verifyTensorSource(*this, getType(),
                            getValueAttr() ? Attribute(getValueAttr())
                                           : Attribute(getLocationAttr()));
}

LogicalResult ConstantOp::verify() {
  return verifyTensorSource(*this, getType(), getValue());
}

//===----------------------------------------------------------------------===//
// ReturnOp
//===----------------------------------------------------------------------===//

LogicalResult ReturnOp::verify() {
  auto graph = dyn_cast<GraphOp>((*this)->getParentOp());
  if (!graph)
    return success(); // subgraph outputs are typed by the node's results
  ArrayRef<Type> results = graph.getResultTypes();
  if (getNumOperands() != results.size())
    return emitOpError("returns ")
           << getNumOperands() << " values but the graph has "
           << results.size() << " outputs";
  for (auto [i, type] : llvm::enumerate(getOperandTypes()))
    if (type != results[i])
      return emitOpError("output #")
             << i << " has type " << type << " but the graph declares "
             << results[i];
  return success();
}

#define GET_OP_CLASSES
#include "dialects/het/IR/HetOps.cpp.inc"
