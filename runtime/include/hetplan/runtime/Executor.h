//===- Executor.h - runs an ONNX model's graph on the CPU -------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Model.h"
#include <functional>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// Told the time of every kernel an Executor runs (steady_clock around the
/// kernel call only: input lookup and freeing are not counted). Without an
/// observer the executor reads no clock.
class ExecutionObserver {
public:
  virtual ~ExecutionObserver() = default;
  /// Node `node` (index into Model::nodes) ran in `seconds`.
  virtual void nodeRan(size_t node, double seconds) = 0;
};

/// The nodes of `model` (indices into Model::nodes) in a topological order:
/// repeated passes over the node list, each taking every node whose inputs
/// are initializers, graph inputs or outputs of nodes already taken. Throws
/// if a node reads a value nothing produces (or the graph has a cycle).
std::vector<size_t> topologicalOrder(const Model &model);

/// Whether `n` has a graph-valued attribute (If, Loop, Scan bodies): the
/// executors run no subgraphs.
bool hasSubgraphAttribute(const Node &n);

class Executor {
public:
  /// Orders the nodes topologically; throws if the graph has a cycle or
  /// uses an undefined value.
  explicit Executor(const Model &model);
  /// Every problem that would stop the model from running (op without a
  /// kernel, unsupported attribute or element type), one line each, naming
  /// the node. Empty when the model can run.
  std::vector<std::string> check() const;
  /// Runs the graph; intermediates are freed after their last use.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs,
                                    ExecutionObserver *observer = nullptr) const;
  /// Runs the nodes `nodes` (indices into Model::nodes, in the order given:
  /// a range of a topologically sorted graph is itself in order) with
  /// `values` as everything they read from outside the list (initializers
  /// are found in the model). Returns the values named in `keep` (produced
  /// by the nodes or given in `values`); other intermediates are freed after
  /// their last use in the list. `shapes`, when given, receives the shape
  /// of every value the nodes produce. For the plan executor (a pipeline
  /// stage runs a node range on its samples).
  /// `hook`, when given, is offered every node first (the plan executor's
  /// tensor-parallel MatMuls): it returns true when it filled ctx.outputs
  /// itself, false to let the kernel run.
  using NodeHook = std::function<bool(size_t node, KernelContext &ctx)>;
  std::map<std::string, Tensor>
  runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
           const std::set<std::string> &keep,
           std::map<std::string, std::vector<int64_t>> *shapes = nullptr,
           ExecutionObserver *observer = nullptr, const NodeHook *hook = nullptr) const;

private:
  const Model &model_;
  std::vector<size_t> order_;
  /// Constant folding (done once by the constructor, immutable afterwards,
  /// shared by concurrent runs): outputs of nodes whose inputs are all
  /// initializers or folded values, and which nodes were folded (runs skip
  /// them). `foldDeps_`: the initializers the folded values were computed
  /// from; a run that overrides one of them with an input runs unfolded.
  std::map<std::string, Tensor> folded_;
  std::vector<bool> isFolded_;
  std::set<std::string> foldDeps_;
  void foldConstants();
  bool canFold(const std::map<std::string, Tensor> &given, bool intermediates) const;
};

} // namespace hetplan::runtime
