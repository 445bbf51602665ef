//===- OpTable.cpp - the registry of op definitions and shared helpers ----===//
#include "ops/OpTable.h"
#include "ops/defs/Defs.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace hetplan::ops {

int64_t mulDims(int64_t a, int64_t b) {
  int64_t r;
  return isUnknown(a) || isUnknown(b) || __builtin_mul_overflow(a, b, &r) ? kUnknownDim : r;
}
int64_t addDims(int64_t a, int64_t b) {
  int64_t r;
  return isUnknown(a) || isUnknown(b) || __builtin_add_overflow(a, b, &r) ? kUnknownDim : r;
}
int64_t subDims(int64_t a, int64_t b) {
  int64_t r;
  return isUnknown(a) || isUnknown(b) || __builtin_sub_overflow(a, b, &r) ? kUnknownDim : r;
}

std::optional<std::vector<int64_t>> broadcast(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == 1)
      result[i] = db;
    else if (db == 1)
      result[i] = da;
    else if (isUnknown(da))
      result[i] = db;
    else if (isUnknown(db) || da == db)
      result[i] = da;
    else
      return std::nullopt;
  }
  return result;
}

std::string upperBoundNote(const std::string &what, int64_t bound, const std::string &because) {
  return what + " is known only at run time; planned with its upper bound " + std::to_string(bound) + " (" +
         because + ")";
}

namespace {
struct Table {
  std::vector<OpDef> defs;
  std::vector<const OpDef *> sorted;
  std::multimap<std::pair<std::string, std::string>, const OpDef *> byName;
};

const Table &table() {
  static const Table t = [] {
    Table t;
    defs::addMatMulOps(t.defs);
    defs::addConvOps(t.defs);
    defs::addNormalizationOps(t.defs);
    defs::addSoftmaxOps(t.defs);
    defs::addActivationOps(t.defs);
    defs::addGatherOps(t.defs);
    defs::addShapeOps(t.defs);
    defs::addEinsumOps(t.defs);
    defs::addReduceOps(t.defs);
    defs::addQuantizeOps(t.defs);
    defs::addRecurrentOps(t.defs);
    defs::addAttentionOps(t.defs);
    defs::addSelectionOps(t.defs);
    defs::addElementwiseOps(t.defs);
    for (const OpDef &d : t.defs) {
      t.sorted.push_back(&d);
      t.byName.emplace(std::make_pair(d.domain, d.type), &d);
    }
    std::sort(t.sorted.begin(), t.sorted.end(), [](const OpDef *a, const OpDef *b) {
      return std::tie(a->domain, a->type, a->sinceVersion) < std::tie(b->domain, b->type, b->sinceVersion);
    });
    return t;
  }();
  return t;
}
} // namespace

const OpDef *findOp(const std::string &domain, const std::string &type, int64_t opset) {
  const std::string &d = domain == "ai.onnx" ? std::string() : domain;
  auto [lo, hi] = table().byName.equal_range({d, type});
  for (auto it = lo; it != hi; ++it)
    if (opset < 0 || (opset >= it->second->sinceVersion && opset <= it->second->untilVersion))
      return it->second;
  return nullptr;
}

const std::vector<const OpDef *> &allOps() { return table().sorted; }

} // namespace hetplan::ops
