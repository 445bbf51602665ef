//===- HetDialect.cpp - het dialect, types and attributes -----------------===//

#include "dialects/het/IR/HetOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace hetplan::het;

#include "dialects/het/IR/HetDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/het/IR/HetTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/het/IR/HetAttrs.cpp.inc"

void HetDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/het/IR/HetOps.cpp.inc"
      >();
  registerTypes();
  registerAttributes();
}

void HetDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/het/IR/HetTypes.cpp.inc"
      >();
}

void HetDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/het/IR/HetAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// DimsAttr
//===----------------------------------------------------------------------===//

// Printed as #het.dims<"batch", "">: one string per dimension.
Attribute DimsAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> names;
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater())) {
    if (parser.parseCommaSeparatedList([&]() -> ParseResult {
          std::string name;
          if (parser.parseString(&name))
            return failure();
          names.push_back(StringAttr::get(parser.getContext(), name));
          return success();
        }) ||
        parser.parseGreater())
      return {};
  }
  return DimsAttr::get(parser.getContext(), names);
}

void DimsAttr::print(AsmPrinter &printer) const {
  printer << '<';
  llvm::interleaveComma(getNames(), printer, [&](StringAttr name) {
    printer.printString(name.getValue());
  });
  printer << '>';
}

bool DimsAttr::hasNames() const {
  return llvm::any_of(getNames(), [](StringAttr n) { return !n.empty(); });
}

LogicalResult
DimsAttr::verifyEncoding(ArrayRef<int64_t> shape, Type,
                         function_ref<InFlightDiagnostic()> emitError) const {
  if (getNames().size() != shape.size())
    return emitError() << "#het.dims has " << getNames().size()
                       << " names for a tensor of rank " << shape.size();
  for (auto [i, name] : llvm::enumerate(getNames()))
    if (!name.empty() && !ShapedType::isDynamic(shape[i]))
      return emitError() << "dimension " << i << " is named '"
                         << name.getValue() << "' but has the static size "
                         << shape[i];
  return success();
}

//===----------------------------------------------------------------------===//
// ExternAttr
//===----------------------------------------------------------------------===//

LogicalResult ExternAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringRef, int64_t offset, int64_t length,
                                 StringRef encoding) {
  if (offset < 0 || length < 0)
    return emitError() << "#het.extern needs a non-negative offset and length";
  if (encoding != "raw" && encoding != "varint")
    return emitError() << "#het.extern encoding must be \"raw\" or "
                          "\"varint\", not \""
                       << encoding << "\"";
  return success();
}
