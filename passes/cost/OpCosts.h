//===- OpCosts.h - forward cost of each het.node ----------------*- C++ -*-===//
//
// Per-op cost rules (FLOPs, bytes moved, weight bytes) for het IR whose
// shapes are static (after het-bind-shapes), and the graph facts they need:
// which values carry data from the graph inputs (activations) and which are
// plan-time constants, how many samples one call processes, and which
// weights are parameters. Equations: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_OPCOSTS_H
#define HETPLAN_PASSES_COST_OPCOSTS_H

#include "dialects/het/IR/HetOps.h"
#include "passes/cost/CostModel.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>
#include <string>
#include <vector>

namespace hetplan::cost {

/// What a value is, for costing and for cutting the graph.
enum class ValueKind : uint8_t {
  /// Depends on the data of a graph input: scales with the samples of a
  /// call, moves between devices at a cut.
  Activation,
  /// Known at plan time once shapes are bound: het.weight, het.constant,
  /// Shape/Size outputs and ops whose inputs are all of this kind. Ops that
  /// produce such values are folded (cost nothing at run time).
  Constant,
  /// het.none and values of no tensor type.
  None,
};

/// One activation value defined by a top-level node: where it is defined
/// and last used, as top-level node indices (lastUse == number of nodes when
/// it is a graph output).
struct ValueSpan {
  mlir::Value value;
  int def = 0;
  int lastUse = 0;
  /// The last top-level node reading it (def when none): a graph output
  /// made early (a decoder's present KV cache) is handed out by the stage
  /// that makes it, not carried through the later ones.
  int lastNodeUse = 0;
  int users = 0;   // distinct top-level users, the graph's return counting as one
  /// All users are top-level nodes of one op type (a mask added in every
  /// block, an encoder output projected in every decoder block).
  bool uniformUsers = true;
};

/// A weight the model owns: a float het.weight / het.constant of at least
/// two elements, or the output of a generator node (ConstantOfShape) on
/// constants, reached from an op on activations (directly or through folded
/// ops such as a Transpose of a tied embedding). Counted once.
struct Parameter {
  mlir::Value value;
  int64_t elements = 0;
  int firstUser = 0;   // top-level node index of the first activation op using it
};

/// Facts about one het.graph.
class GraphInfo {
public:
  /// `samples` > 0 overrides the samples per call (otherwise: the size bound
  /// to the dim "batch" in the module's het.bound_dims, else the leading dim
  /// of the first ranked graph input, else 1).
  explicit GraphInfo(het::GraphOp graph, int64_t samples = 0);

  mutable het::GraphOp graph;
  /// Top-level het.node ops in order; indices below refer to this list.
  std::vector<het::NodeOp> nodes;
  int64_t samples = 1;
  std::vector<Parameter> parameters;
  /// Activation values defined by top-level nodes, in definition order.
  std::vector<ValueSpan> spans;

  ValueKind kind(mlir::Value value) const;
  /// True when the node's inputs are all plan-time constants.
  bool isFolded(het::NodeOp node) const;
  /// Index of a top-level node (or of the top-level node holding `op` in a
  /// region), -1 for anything else.
  int indexOf(mlir::Operation *op) const;

  /// The first top-level node with a value whose shape is not static, and
  /// a message naming it; nullopt when every shape is static.
  std::optional<std::pair<mlir::Operation *, std::string>> findNonStatic() const;

private:
  llvm::DenseMap<mlir::Value, ValueKind> kinds;
  llvm::DenseMap<mlir::Operation *, int> index;
};

/// "'name' (OpType)", or "#index (OpType)" for a node without a name.
std::string describeNode(het::NodeOp node, int index);

/// Samples per call of `graph` (see GraphInfo).
int64_t boundSamples(het::GraphOp graph);

/// Bytes of a value of this type in the run format: float elements take
/// dtypeBytes(dtype), integers their own width (i1 one byte). 0 for types
/// without a static shape.
double valueBytes(mlir::Type type, DType dtype);

/// Element count of a static ranked tensor type, 0 otherwise.
int64_t numElements(mlir::Type type);

/// The forward cost of a top-level node of `info` in the run format.
OpCost computeOpCost(het::NodeOp node, const GraphInfo &info, DType dtype);

/// True when the node is a MatMul-like product of an activation with a
/// weight-like constant (het.weight, or a folded op on one), and that
/// constant's bytes in `dtype`; used for tensor-parallel shares.
std::optional<double> matmulWeightBytes(het::NodeOp node, const GraphInfo &info, DType dtype);

/// The numeric format the graph's parameters are stored in (the float type
/// holding most parameter elements): fp32 for f32/f64, fp16, bf16.
DType graphDType(const GraphInfo &info);

} // namespace hetplan::cost

#endif
