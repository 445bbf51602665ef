//===- CudaFusion.cpp - which nodes the CUDA executor fuses ----------------===//
//
// Two patterns, matched in graph order (attention first, so its MatMuls are
// not taken as GEMMs):
//   attention: MatMul(Q, Kᵀ) -> [Mul|Div by a scalar constant] -> [Add mask]
//              -> Softmax(last axis) -> [Cast to float] -> MatMul(., V),
//              at fp16/bf16 only, head dims cuDNN's flash attention takes
//              when the shapes are declared (else checked at run time);
//   GEMM:      MatMul or Gemm -> Add of a 1-D constant bias [-> Gelu
//              approximate="tanh"], or a Gemm whose C is that bias (beta 1).
// Every value inside a group has one reader, the next node of the group,
// and is no graph output; the nodes are default-domain, not folded and in
// the stage.
//
//===----------------------------------------------------------------------===//
#include "CudaFusion.h"

#include "hetplan/runtime/Executor.h"

#include <map>
#include <optional>
#include "ops/OpTable.h" // ops::names: the spelling of op types kernels register under

namespace hetplan::runtime::cudafuse {

std::vector<CudaFusion> findFusions(const Model &m, const std::vector<size_t> &order,
                                    const std::vector<bool> &isFolded,
                                    const std::function<const Tensor *(const std::string &)> &constant,
                                    const std::string &precision, const std::set<size_t> &stage) {
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < m.nodes.size(); ++i) m.nodes[i].forEachRead([&](const std::string &s) { readers[s].push_back(i); });
  std::set<std::string> graphOut;
  for (const auto &o : m.outputs) graphOut.insert(o.name);
  std::vector<char> taken(m.nodes.size(), 0);
  auto usable = [&](size_t i) {
    const Node &n = m.nodes[i];
    return i < isFolded.size() && !isFolded[i] && (stage.empty() || stage.count(i)) && !taken[i] &&
           (n.domain.empty() || n.domain == "ai.onnx") && !hasSubgraphAttribute(n);
  };
  // The one node reading `v` (usable, v no graph output), else -1.
  auto sole = [&](const std::string &v) -> long {
    auto it = readers.find(v);
    if (v.empty() || graphOut.count(v) || it == readers.end() || it->second.size() != 1) return -1;
    return usable(it->second[0]) ? long(it->second[0]) : -1;
  };
  // Not known to be something other than float32.
  auto maybeFloat = [&](const std::string &v) {
    auto it = m.valueTypes.find(v);
    return it == m.valueTypes.end() || it->second == DType::Float32;
  };
  // Declared shape (graph input/output with every dim known) or a constant's.
  auto knownShape = [&](const std::string &v) -> std::optional<std::vector<int64_t>> {
    if (const Tensor *t = constant(v)) return t->shape();
    for (const auto *list : {&m.inputs, &m.outputs})
      for (const auto &vi : *list)
        if (vi.name == v && vi.hasShape) {
          for (int64_t d : vi.shape)
            if (d < 0) return std::nullopt;
          return vi.shape;
        }
    return std::nullopt;
  };
  auto unaryOut = [&](const Node &n) { return n.outputs.size() == 1 && !n.outputs[0].empty(); };
  int64_t opset = m.opset("");
  std::vector<CudaFusion> out;

  if (sdpaPrecision(precision)) {
    for (size_t idx : order) {
      const Node &qk = m.nodes[idx];
      if (qk.opType != ops::names::MatMul || !usable(idx) || qk.inputs.size() != 2 || !unaryOut(qk)) continue;
      CudaFusion f;
      f.kind = CudaFusion::Kind::Attention;
      f.q = qk.inputs[0];
      f.kT = qk.inputs[1];
      f.nodes = {idx};
      std::string cur = qk.outputs[0];
      long r = sole(cur);
      auto advance = [&](long node) {
        f.nodes.push_back(size_t(node));
        cur = m.nodes[size_t(node)].outputs[0];
        return sole(cur);
      };
      if (r >= 0 && (m.nodes[r].opType == "Mul" || m.nodes[r].opType == "Div") && m.nodes[r].inputs.size() == 2 &&
          unaryOut(m.nodes[r])) {
        const Node &s = m.nodes[r];
        bool div = s.opType == "Div";
        if (div && s.inputs[0] != cur) continue;
        const std::string &other = s.inputs[0] == cur ? s.inputs[1] : s.inputs[0];
        const Tensor *c = constant(other);
        if (!c || c->numel() != 1 || other == cur) continue;
        double v = c->scalarAsDouble(0);
        if (div && v == 0) continue;
        f.scale = float(div ? 1.0 / v : v);
        r = advance(r);
      }
      if (r >= 0 && m.nodes[r].opType == "Add" && m.nodes[r].inputs.size() == 2 && unaryOut(m.nodes[r])) {
        const Node &a = m.nodes[r];
        const std::string &other = a.inputs[0] == cur ? a.inputs[1] : a.inputs[0];
        if (other == cur || other.empty() || !maybeFloat(other)) continue;
        f.mask = other;
        r = advance(r);
      }
      if (r < 0 || m.nodes[r].opType != ops::names::Softmax || !unaryOut(m.nodes[r])) continue;
      {
        int64_t axis = m.nodes[r].getInt("axis", opset < 13 ? 1 : -1);
        auto qs = knownShape(f.q);
        if (axis != -1 && !(qs && axis == int64_t(qs->size()) - 1)) continue;
      }
      r = advance(r);
      if (r >= 0 && m.nodes[r].opType == "Cast" && unaryOut(m.nodes[r]) &&
          m.nodes[r].getInt("to", 0) == int64_t(DType::Float32))
        r = advance(r);
      if (r < 0 || m.nodes[r].opType != ops::names::MatMul || m.nodes[r].inputs.size() != 2 || !unaryOut(m.nodes[r]) ||
          m.nodes[r].inputs[0] != cur || m.nodes[r].inputs[1] == cur)
        continue;
      f.v = m.nodes[r].inputs[1];
      f.nodes.push_back(size_t(r));
      f.output = m.nodes[r].outputs[0];
      bool typesOk = maybeFloat(f.q) && maybeFloat(f.kT) && maybeFloat(f.v);
      auto qs = knownShape(f.q), ks = knownShape(f.kT), vs = knownShape(f.v);
      bool dimsOk = (!qs || (qs->size() >= 3 && sdpaHeadDimOk(qs->back()))) &&
                    (!ks || (ks->size() >= 3 && sdpaHeadDimOk((*ks)[ks->size() - 2]))) &&
                    (!vs || (vs->size() >= 3 && sdpaHeadDimOk(vs->back())));
      if (!typesOk || !dimsOk) continue;
      for (size_t k : f.nodes) taken[k] = 1;
      out.push_back(std::move(f));
    }
  }

  for (size_t idx : order) {
    const Node &g = m.nodes[idx];
    if ((g.opType != ops::names::MatMul && g.opType != ops::names::Gemm) || !usable(idx) || g.inputs.size() < 2 || !unaryOut(g)) continue;
    if (!maybeFloat(g.inputs[0]) || !maybeFloat(g.inputs[1])) continue;
    // The N the bias must have, when B is a constant (a weight).
    std::optional<int64_t> N;
    if (const Tensor *w = constant(g.inputs[1])) {
      if (w->rank() != 2) continue; // batched weights: plain path
      N = g.opType == ops::names::Gemm && g.getInt("transB", 0) ? w->dim(0) : w->dim(1);
    }
    auto biasOk = [&](const Tensor *b) {
      return b && b->dtype() == DType::Float32 && (b->rank() == 1 || (b->rank() == 2 && b->dim(0) == 1)) &&
             (!N || b->numel() == *N);
    };
    CudaFusion f;
    f.kind = CudaFusion::Kind::GemmBias;
    f.nodes = {idx};
    std::string cur = g.outputs[0];
    bool hasC = g.opType == ops::names::Gemm && g.inputs.size() > 2 && !g.inputs[2].empty();
    if (hasC) {
      if (g.getFloat("beta", 1.f) != 1.f || !biasOk(constant(g.inputs[2]))) continue;
    } else {
      long a = sole(cur);
      if (a < 0 || m.nodes[a].opType != "Add" || m.nodes[a].inputs.size() != 2 || !unaryOut(m.nodes[a])) continue;
      const Node &add = m.nodes[a];
      const std::string &other = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
      if (other == cur || !biasOk(constant(other)) || (constant(other)->rank() != 1)) continue;
      f.bias = other;
      f.nodes.push_back(size_t(a));
      cur = add.outputs[0];
    }
    long gl = sole(cur);
    if (gl >= 0 && m.nodes[gl].opType == "Gelu" && unaryOut(m.nodes[gl]) &&
        m.nodes[gl].getString("approximate", "none") == "tanh") {
      f.kind = CudaFusion::Kind::GemmBiasGelu;
      f.nodes.push_back(size_t(gl));
      cur = m.nodes[gl].outputs[0];
    }
    f.output = cur;
    for (size_t k : f.nodes) taken[k] = 1;
    out.push_back(std::move(f));
  }
  return out;
}

} // namespace hetplan::runtime::cudafuse
