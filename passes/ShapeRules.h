//===- ShapeRules.h - the dialect's own shape rules -------------*- C++ -*-===//
//
// libonnx knows opsets up to 17 only, so het has its own shape rules for the
// ops it prices. A rule maps what is known about a node's inputs to its
// outputs' types; small integer tensors (shape vectors built by
// Shape/Gather/Concat chains in exported models) carry their values too, so
// Reshape/Expand/Slice targets resolve.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_SHAPERULES_H
#define HETPLAN_PASSES_SHAPERULES_H

#include "dialects/het/IR/HetOps.h"

#include <optional>
#include <string>

namespace hetplan::het {

/// What is known about one value.
struct ValueFacts {
  mlir::Type type;
  /// The elements of a small integer tensor, row-major, when known.
  std::optional<llvm::SmallVector<int64_t>> ints;
  /// The elements of a small float tensor (Resize scales), when known.
  std::optional<llvm::SmallVector<double>> floats;
  /// Set when a size of `type` is data-dependent (NonZero's count, Unique's
  /// values) and the rule gave its upper bound instead: says so for a
  /// compile warning ("planned with its upper bound 4096 (...)").
  std::string upperBound;

  /// The ranked shape, or nullopt for unranked/unknown/non-tensor values.
  std::optional<llvm::ArrayRef<int64_t>> shape() const;
  mlir::Type elementType() const;
};

/// Computes output facts from input facts. Returns failure with `why` set when
/// the inputs are inconsistent (a real error in the model). Leaves an output's
/// type null when it cannot be known yet (e.g. data-dependent shapes).
using ShapeRule = mlir::LogicalResult (*)(NodeOp node,
                                          llvm::ArrayRef<ValueFacts> inputs,
                                          llvm::SmallVectorImpl<ValueFacts> &outputs,
                                          std::string &why);

/// The rule for an op type of the default ONNX domain (or com.microsoft for a
/// few fused ops), or null.
ShapeRule lookupShapeRule(llvm::StringRef domain, llvm::StringRef opType);

/// Facts about a het.weight / het.constant result (integer values if small).
ValueFacts factsOfConstant(mlir::Operation *op);

/// A tensor type with the given shape and element type; dims that are
/// kDynamic stay dynamic.
mlir::Type makeTensor(llvm::ArrayRef<int64_t> shape, mlir::Type element);

/// Numpy-style broadcast of two shapes; nullopt when they do not broadcast.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

} // namespace hetplan::het

#endif
