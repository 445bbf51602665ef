//===- OpRegistry.h - a table of per-op-type entries ------------*- C++ -*-===//
//
// The kernel registry (model/Executor.cpp) and the backward-kernel registry
// (train/Gradients.cpp): entries by ONNX op type, the last registration of
// an op type winning.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hetplan::runtime {

template <typename Info> class OpRegistry {
public:
  void add(const std::string &opType, Info info) { byOp_[opType] = std::move(info); }
  /// The entry for `opType`; null when there is none.
  const Info *find(const std::string &opType) const {
    auto it = byOp_.find(opType);
    return it == byOp_.end() ? nullptr : &it->second;
  }
  /// Every registered op type, sorted.
  std::vector<std::string> opTypes() const {
    std::vector<std::string> out;
    for (const auto &[k, v] : byOp_) out.push_back(k);
    return out;
  }

private:
  std::map<std::string, Info> byOp_;
};

} // namespace hetplan::runtime
