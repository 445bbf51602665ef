//===- Executor.h - runs an ONNX model's graph on the CPU -------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Model.h"
#include <functional>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
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
/// are initializers, graph inputs or outputs of nodes already taken (inputs
/// and the values its subgraphs read, Node::implicitInputs). Throws
/// if a node reads a value nothing produces (or the graph has a cycle).
std::vector<size_t> topologicalOrder(const Model &model);

/// Whether `n` has a graph-valued attribute (If, Loop, Scan bodies). The
/// CPU Executor runs them (ControlFlow.cpp; never constant-folded); the
/// CUDA executor refuses them.
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
  /// Initializers each folded value was computed from (transitively).
  std::map<std::string, std::set<std::string>> foldDepsOf_;
  void foldConstants();
  bool canFold(const std::map<std::string, Tensor> &given, bool intermediates) const;

  /// Load-time fusions (computed once by the constructor, immutable and
  /// shared by concurrent runs, like folding), by the rules the head ops'
  /// kernel files register (src/model/Fusion.h): Conv's (an inference
  /// BatchNormalization folded into a copy of constant weights, a residual
  /// Sum/Add and an elementwise chain as post-ops) and the elementwise
  /// chains' (cpu/kernels/ElementwiseChain.h: a chain over one float value
  /// run as one program), each intermediate read only inside the chain and
  /// no graph output. Conv outputs that only Convs read are marked to be
  /// written channels-last (chooseChannelsLast); every other kernel, and
  /// every returned value, gets plain bytes.
  /// `node` runs at the head's place, with the chain's last output; the
  /// other members are skipped. A run that overrides any initializer the
  /// fused constants came from (`fuseDeps_`), that asks to keep an
  /// intermediate, gives one, runs only part of the chain, or uses a
  /// NodeHook runs the nodes unfused.
  struct Fusion {
    size_t head = 0;
    std::vector<size_t> members;            // head first, in chain order
    std::vector<std::string> intermediates; // values the fused node skips
    std::string residual;                   // an input computed before the head, or ""
    Node node;
  };
  std::vector<Fusion> fusions_;
  std::vector<int> fusionOf_; // per node: fusion index or -1
  std::set<std::string> fuseDeps_;
  std::map<std::string, size_t> producer_; // value -> producing node
  void fuseChains();
  /// Marks the Convs whose every reader takes channels-last bytes
  /// (kChannelsLastOutput, Fusion.h).
  void chooseChannelsLast(const std::map<std::string, std::vector<size_t>> &readers,
                          const std::set<std::string> &graphIO);
  /// Which fusions apply to running `nodes` (in that order) with `given`
  /// values and `keep`; empty when none.
  std::vector<char> activeFusions(const std::vector<size_t> &nodes, const std::map<std::string, Tensor> &given,
                                  const std::set<std::string> &keep, bool useFold) const;

  /// Resolved once by the constructor (resolveSlots), so that a run does no
  /// string lookups per node: every value name the graph (and the fused
  /// nodes) mention gets a slot, an index into a per-run vector of Tensors;
  /// per node its kernel and the slots it reads and writes.
  struct NodeSlots {
    const KernelInfo *kernel = nullptr; // null: no kernel (reported when reached)
    std::vector<int32_t> inputs;        // per input: slot, -1 when omitted
    std::vector<int32_t> outputs;       // per output: slot, -1 when omitted
    std::vector<int32_t> reads;         // Node::forEachRead as slots (freeing)
    bool scope = false;                 // implicit inputs: subgraphs read the scope
    bool readsChannelsLast = false;     // a Conv: takes channels-last inputs as they are
  };
  std::unordered_map<std::string, int32_t> slotOf_;
  std::vector<std::string> slotName_;
  std::vector<Tensor> slotFolded_;       // per slot: its folded_ value (if hasFolded_)
  std::vector<char> hasFolded_;
  std::vector<const Tensor *> slotInit_; // per slot: the initializer or null
  std::vector<NodeSlots> nodeSlots_;     // per model node
  std::vector<NodeSlots> fusedSlots_;    // per fusion: its fused node
  /// run(): the last step of order_ reading each slot (-1: none), the graph
  /// outputs' slots, and the fusions that apply when only declared graph
  /// inputs are given.
  std::vector<int32_t> runLastUse_;
  std::vector<char> isOutput_;
  std::vector<char> runFused_;
  int64_t opset_ = 0;
  void resolveSlots();
  int32_t addSlot(const std::string &name);
  struct RunState; // per-run slot values (Executor.cpp)
  void execute(const Node &n, const NodeSlots &ns, size_t index, RunState &st, ExecutionObserver *observer,
               const NodeHook *hook) const;
};

} // namespace hetplan::runtime
