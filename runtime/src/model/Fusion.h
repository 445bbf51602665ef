//===- Fusion.h - load-time fusions a kernel file registers -----*- C++ -*-===//
//
// The executor (Executor.cpp) fuses chains of nodes once, at load time: for
// each node in run order whose op type has a registered fusion rule, the rule
// may claim a chain the node heads and say what single node runs in its place
// (the fused kernel reads attributes its own kernel file defines). The rule
// lives in the head op's kernel file (Conv.cpp: Conv + BatchNormalization
// [+ Add/Sum] [+ Relu]); the executor only applies what rules return, and
// leaves the chain unfused in any run that could see the difference
// (Executor::activeFusions). Internal to hetplan_exec.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Model.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hetplan::runtime {

/// What a fusion rule sees of the graph at load time.
struct FusionGraph {
  const Model &model;
  /// Value -> the node producing it.
  const std::map<std::string, size_t> &producer;
  /// Node -> its step in the executor's run order.
  const std::vector<size_t> &position;
  /// The values constant folding computed.
  const std::map<std::string, Tensor> &folded;
  /// A constant float32 value (folded or an initializer, not a graph input or
  /// output), or null; adds the initializers it comes from to `deps`.
  std::function<const Tensor *(const std::string &name, std::set<std::string> &deps)> constant;
  /// The one reader of `value` when it has exactly one (default domain, not
  /// folded, in no fusion yet) and is no graph input or output; else null.
  std::function<const Node *(const std::string &value)> soleReader;
  /// Every reader of `value` (node indices), or false when it is a graph
  /// input or output (never an intermediate) or a reader is taken already
  /// (folded, in a fusion, another domain).
  std::function<bool(const std::string &value, std::vector<size_t> &readers)> readers;
};

/// A chain a rule claims, and what runs in its place.
struct FusedChain {
  std::vector<size_t> members;            // head first, in chain order
  std::vector<std::string> intermediates; // values the fused node skips
  std::string residual;                   // an input computed before the head runs, or ""
  /// Runs at the head's step, in place of the chain; its output is the last
  /// member's.
  Node node;
  /// Values `node` reads that the rule computed from constants (immutable
  /// afterwards), named by fusedConstantName, and the initializers they come
  /// from (a run that overrides one leaves the chain unfused).
  std::vector<std::pair<std::string, Tensor>> constants;
  std::set<std::string> deps;
};

/// Attribute of a Conv node the executor sets when every reader of its
/// output takes channels-last bytes (KernelInfo::readsChannelsLast: Conv,
/// pooling): the kernel then writes them (Tensor::channelsLast), and the
/// next Conv reads them without a reorder.
constexpr const char kChannelsLastOutput[] = "__hetplan_channels_last_out";

/// The name of constant `what` of the fusion headed by node `head` (no graph
/// value can have it: it starts with a control character).
inline std::string fusedConstantName(size_t head, const std::string &what) {
  return "\x01" "fused:" + std::to_string(head) + ":" + what;
}

/// Returns true and fills `out` when node `head` (not folded, default
/// domain, of the op type the rule is registered for) heads a chain.
using FusionRule = std::function<bool(const FusionGraph &g, size_t head, FusedChain &out)>;

/// Registers the fusion rule of default-domain nodes of `opType` (called by
/// the op's kernel registration; the last registration wins).
void registerFusion(const std::string &opType, FusionRule rule);

} // namespace hetplan::runtime
