//===- ModelVerifier.h - ONNX's rules for a node, checked at load -*- C++ -*-===//
//
// The runtime never trusts a model. Before any kernel runs (constant folding
// included), every node's attributes, and the ranks, shapes and constant
// values of its inputs where the model declares them, are checked against
// ONNX's rules for its op: axes in range, perm a permutation, kernel
// shapes/strides/dilations positive and pads non-negative with consistent
// lengths, Concat's axis given, Tile's repeats one per dim and non-negative,
// Pad's pads two per dim, Resize's scales positive, TopK's k non-negative,
// BatchNormalization's parameters one per channel, ... A failure names the
// rule; Executor::check() reports it naming the node and the op, and
// constant folding skips the node. Shapes that are only known at run time
// are checked by the kernels before they index with them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Model.h"

#include <functional>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// What the verifier knows of a value by name: its declared shape (dims -1
/// when unknown; null when the rank is unknown) and its constant value
/// (initializers, folded constants; null when not constant).
struct ValueFacts {
  std::function<const std::vector<int64_t> *(const std::string &)> shape;
  std::function<const Tensor *(const std::string &)> constant;
};

/// Facts from a model's initializers and declared graph inputs/outputs.
/// The returned object refers to `model`, which must outlive it.
ValueFacts modelFacts(const Model &model);

/// "" when `node` obeys ONNX's rules for its op at `opset` as far as the
/// facts tell, else the first broken rule (one line, without the node).
std::string verifyNode(const Node &node, int64_t opset, const ValueFacts &facts);

/// Every broken rule of the model's nodes, subgraphs included, one line
/// each: "PATH: node 'NAME' (Op): rule".
std::vector<std::string> verifyModel(const Model &model);

} // namespace hetplan::runtime
