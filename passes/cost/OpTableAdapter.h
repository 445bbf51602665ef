//===- OpTableAdapter.h - het.node as the op table sees it ------*- C++ -*-===//
//
// The compiler's one adaptation of its IR to the op table's plain forms
// (ops/OpTable.h): a het.node's ONNX attributes, its definition, and the
// static shapes of its values.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_OPTABLEADAPTER_H
#define HETPLAN_PASSES_COST_OPTABLEADAPTER_H

#include "dialects/het/IR/HetOps.h"
#include "ops/OpTable.h"

namespace hetplan::het {

/// A het.node's ONNX attributes (integers, integer lists, strings).
class NodeAttrs : public ops::Attrs {
public:
  explicit NodeAttrs(NodeOp node) : node(node) {}
  std::optional<int64_t> getInt(const std::string &name) const override {
    if (auto a = mlir::dyn_cast_or_null<mlir::IntegerAttr>(node.getOnnxAttr(name)))
      return a.getInt();
    return std::nullopt;
  }
  std::optional<std::vector<int64_t>> getInts(const std::string &name) const override {
    if (auto a = mlir::dyn_cast_or_null<mlir::DenseI64ArrayAttr>(node.getOnnxAttr(name)))
      return std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end());
    return std::nullopt;
  }
  std::optional<std::string> getString(const std::string &name) const override {
    if (auto a = mlir::dyn_cast_or_null<mlir::StringAttr>(node.getOnnxAttr(name)))
      return a.getValue().str();
    return std::nullopt;
  }
  bool has(const std::string &name) const override { return bool(node.getOnnxAttr(name)); }

private:
  mutable NodeOp node; // MLIR op handles are not const-correct
};

/// The table's definition of the node's op (any opset: the compiler's
/// rules apply to every opset it imports), or null.
inline const ops::OpDef *opDefOf(NodeOp node) {
  return ops::findOp(node.getDomain().str(), node.getOpType().str());
}

/// The definition of op type `op` of the default domain, or null.
inline const ops::OpDef *opDefOf(llvm::StringRef op) { return ops::findOp("", op.str()); }

} // namespace hetplan::het

#endif
