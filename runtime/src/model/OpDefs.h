//===- OpDefs.h - a runtime Node as the op table sees it --------*- C++ -*-===//
//
// The runtime's adaptation of its Node to the op table's plain forms
// (ops/OpTable.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Model.h"
#include "ops/OpTable.h"

namespace hetplan::runtime {

/// A Node's attributes for the op table's rules.
class NodeAttrs : public ops::Attrs {
public:
  explicit NodeAttrs(const Node &n) : n(n) {}
  std::optional<int64_t> getInt(const std::string &name) const override {
    return n.has(name) ? std::optional<int64_t>(n.getInt(name, 0)) : std::nullopt;
  }
  std::optional<std::vector<int64_t>> getInts(const std::string &name) const override {
    return n.has(name) ? std::optional<std::vector<int64_t>>(n.getInts(name)) : std::nullopt;
  }
  std::optional<std::string> getString(const std::string &name) const override {
    return n.has(name) ? std::optional<std::string>(n.getString(name, "")) : std::nullopt;
  }
  bool has(const std::string &name) const override { return n.has(name); }

private:
  const Node &n;
};

/// The table's definition of the node's op, or null.
inline const ops::OpDef *opDefOf(const Node &n) { return ops::findOp(n.domain, n.opType); }

} // namespace hetplan::runtime
