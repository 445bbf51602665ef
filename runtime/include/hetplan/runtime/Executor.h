//===- Executor.h - runs an ONNX model's graph on the CPU -------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Model.h"

#include <map>
#include <string>
#include <vector>

namespace hetplan::runtime {

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
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs) const;

private:
  const Model &model_;
  std::vector<size_t> order_;
};

} // namespace hetplan::runtime
