//===- CudaFusion.cpp - which nodes the CUDA executor fuses ----------------===//
//
// The matching machinery: the patterns themselves (which ops, in which
// chain) belong to the kernel family that owns the fused ops and register
// in the order they are tried (cudafuse::fusionPatterns, CudaLinalg.cpp).
// Every value inside a group has one reader, the next node of the group,
// and is no graph output; the nodes are default-domain, not folded and in
// the stage.
//
//===----------------------------------------------------------------------===//
#include "CudaFusion.h"

#include "hetplan/runtime/Executor.h"

#include <map>
#include <optional>

namespace hetplan::runtime::cudafuse {

bool Matcher::usable(size_t i) const {
  const Node &n = m.nodes[i];
  return i < isFolded.size() && !isFolded[i] && (stage.empty() || stage.count(i)) && !taken[i] &&
         (n.domain.empty() || n.domain == "ai.onnx") && !hasSubgraphAttribute(n);
}

long Matcher::sole(const std::string &v) const {
  auto it = readers.find(v);
  if (v.empty() || graphOut.count(v) || it == readers.end() || it->second.size() != 1) return -1;
  return usable(it->second[0]) ? long(it->second[0]) : -1;
}

bool Matcher::maybeFloat(const std::string &v) const {
  auto it = m.valueTypes.find(v);
  return it == m.valueTypes.end() || it->second == DType::Float32;
}

std::optional<std::vector<int64_t>> Matcher::knownShape(const std::string &v) const {
  if (const Tensor *t = constant(v)) return t->shape();
  for (const auto *list : {&m.inputs, &m.outputs})
    for (const auto &vi : *list)
      if (vi.name == v && vi.hasShape) {
        for (int64_t d : vi.shape)
          if (d < 0) return std::nullopt;
        return vi.shape;
      }
  return std::nullopt;
}

std::vector<CudaFusion> findFusions(const Model &m, const std::vector<size_t> &order,
                                    const std::vector<bool> &isFolded,
                                    const std::function<const Tensor *(const std::string &)> &constant,
                                    const std::string &precision, const std::set<size_t> &stage) {
  Matcher mt{m, order, isFolded, constant, precision, stage};
  mt.opset = m.opset("");
  for (size_t i = 0; i < m.nodes.size(); ++i)
    m.nodes[i].forEachRead([&](const std::string &s) { mt.readers[s].push_back(i); });
  for (const auto &o : m.outputs) mt.graphOut.insert(o.name);
  mt.taken.assign(m.nodes.size(), 0);
  std::vector<CudaFusion> out;
  for (FusionPattern p : fusionPatterns()) p(mt, out);
  return out;
}

} // namespace hetplan::runtime::cudafuse
