//===- ModelVerifier.cpp - ONNX's rules for a node, checked at load -------===//
//
// One function per family of ops; each returns the first broken rule or "".
// Only what ONNX's operator specification requires is refused: a rule whose
// facts are unknown (an input's rank not declared, a value not constant) is
// not checked here, and the kernel checks it against the shapes it meets.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/ModelVerifier.h"
#include "OpDefs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace hetplan::runtime {
namespace {

std::string list(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

/// Verifies one node; `f` answers what is known of its inputs.
class NodeRules {
public:
  NodeRules(const Node &n, int64_t opset, const ValueFacts &f) : n(n), opset(opset), f(f), attrs(n) {}

  /// The declared rank of input i, or -1.
  int64_t rank(size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty() || !f.shape) return -1;
    const auto *s = f.shape(n.inputs[i]);
    return s ? static_cast<int64_t>(s->size()) : -1;
  }
  /// Dim d of input i when declared, else -1.
  int64_t dim(size_t i, int64_t d) const {
    if (i >= n.inputs.size() || n.inputs[i].empty() || !f.shape) return -1;
    const auto *s = f.shape(n.inputs[i]);
    return s && d >= 0 && d < static_cast<int64_t>(s->size()) ? (*s)[size_t(d)] : -1;
  }
  /// The constant value of input i, or null.
  const Tensor *constant(size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty() || !f.constant) return nullptr;
    return f.constant(n.inputs[i]);
  }
  std::vector<int64_t> constantInts(size_t i, bool &known) const {
    const Tensor *t = constant(i);
    known = t && isIntegerType(t->dtype());
    return known ? t->toInt64Vector() : std::vector<int64_t>{};
  }

  /// `axis` (attribute `name`) in [-r, r) for rank r (+extra for ops whose
  /// axis may point one past the last dim); unknown ranks pass.
  std::string axisIn(const std::string &name, int64_t axis, int64_t r, int64_t extra = 0) const {
    if (r < 0) return "";
    int64_t hi = r + extra;
    if (axis < -hi || axis >= hi)
      return name + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(r) +
             " (must be in [" + std::to_string(-hi) + ", " + std::to_string(hi - 1) + "])";
    return "";
  }
  std::string axisAttr(const std::string &name, int64_t def, int64_t r, int64_t extra = 0) const {
    return axisIn(name, n.getInt(name, def), r, extra);
  }
  /// A list of axes: each in range, none twice (after normalising).
  std::string axesIn(const std::string &what, const std::vector<int64_t> &axes, int64_t r) const {
    std::set<int64_t> seen;
    for (int64_t a : axes) {
      if (r < 0) {
        if (!seen.insert(a).second) return what + " " + list(axes) + " repeats axis " + std::to_string(a);
        continue;
      }
      if (auto e = axisIn(what, a, r); !e.empty()) return what + " " + list(axes) + ": axis " + std::to_string(a) +
                                                          " is out of range for rank " + std::to_string(r);
      if (!seen.insert(a < 0 ? a + r : a).second) return what + " " + list(axes) + " repeats axis " + std::to_string(a);
    }
    return "";
  }

  /// What is known of the node for the op table's checks.
  ops::CheckIn checkIn() const {
    ops::CheckIn c{attrs, opset, {}};
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::vector<int64_t> *s = n.inputs[i].empty() || !f.shape ? nullptr : f.shape(n.inputs[i]);
      c.shapes.push_back(s ? std::optional<std::vector<int64_t>>(*s) : std::nullopt);
    }
    return c;
  }

  std::string batchNorm() const {
    if (opset < 9 && n.getInt("spatial", 1) == 0) return ""; // per-element parameters (opset 6-8)
    float eps = n.getFloat("epsilon", 1e-5f);
    if (!std::isfinite(eps) || eps < 0) return "epsilon must be a finite number >= 0";
    int64_t channels = rank(0) >= 2 ? dim(0, 1) : -1;
    if (rank(0) >= 0 && rank(0) < 2) return "input rank " + std::to_string(rank(0)) + " has no channel dim (N, C, ...)";
    static const char *kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
    int64_t len = -1;
    for (size_t i = 1; i < std::min<size_t>(n.inputs.size(), 5); ++i) {
      if (rank(i) < 0) continue;
      if (rank(i) != 1) return std::string(kNames[i]) + " must be 1-D (one value per channel), it has rank " + std::to_string(rank(i));
      int64_t d = dim(i, 0);
      if (d < 0) continue;
      if (channels >= 0 && d != channels)
        return std::string(kNames[i]) + " has " + std::to_string(d) + " values for " + std::to_string(channels) + " channels";
      if (len >= 0 && d != len) return std::string(kNames[i]) + " has " + std::to_string(d) + " values, scale " + std::to_string(len);
      len = d;
    }
    return "";
  }

  std::string pad() const {
    std::string mode = n.getString("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
      return "mode '" + mode + "' is not constant, reflect, edge or wrap";
    bool known = opset < 11;
    std::vector<int64_t> pads = opset < 11 ? n.getInts("pads") : constantInts(1, known);
    if (!known) return "";
    if (opset < 11 && !n.has("pads")) return "pads is required";
    size_t axes = pads.size() / 2;
    if (pads.size() % 2) return "pads " + list(pads) + " must hold two values per padded axis";
    if (opset >= 18 && n.inputs.size() > 3 && !n.inputs[3].empty()) {
      bool axesKnown = false;
      auto ax = constantInts(3, axesKnown);
      if (axesKnown) {
        if (ax.size() != axes) return "pads " + list(pads) + " needs two values per axis of " + list(ax);
        return axesIn("axes", ax, rank(0));
      }
    } else if (rank(0) >= 0 && int64_t(axes) != rank(0)) {
      return "pads " + list(pads) + " needs " + std::to_string(2 * rank(0)) + " values for rank " + std::to_string(rank(0));
    }
    return "";
  }

  std::string reduce() const {
    int64_t r = rank(0);
    if (n.has("axes")) return axesIn("axes", n.getInts("axes"), r);
    if (n.inputs.size() > 1) {
      bool known = false;
      auto axes = constantInts(1, known);
      if (known) return axesIn("axes", axes, r);
    }
    return "";
  }

  std::string tile() const {
    bool known = false;
    auto reps = constantInts(1, known);
    if (!known) return "";
    if (const Tensor *t = constant(1); t->rank() != 1) return "repeats must be 1-D, it has rank " + std::to_string(t->rank());
    for (int64_t v : reps)
      if (v < 0) return "repeats " + list(reps) + " must not be negative";
    if (rank(0) >= 0 && int64_t(reps.size()) != rank(0))
      return "repeats " + list(reps) + " needs one value per dim of the rank-" + std::to_string(rank(0)) + " input";
    return "";
  }

  std::string topk() const {
    if (auto e = axisAttr("axis", -1, rank(0)); !e.empty()) return e;
    if (opset < 10) {
      if (!n.has("k")) return "k is required";
      if (n.getInt("k", 0) < 0) return "k " + std::to_string(n.getInt("k", 0)) + " must not be negative";
      return "";
    }
    bool known = false;
    auto k = constantInts(1, known);
    if (!known) return "";
    if (k.size() != 1) return "K must hold one value, it holds " + std::to_string(k.size());
    if (k[0] < 0) return "K " + std::to_string(k[0]) + " must not be negative";
    int64_t r = rank(0), a = n.getInt("axis", -1);
    int64_t d = r >= 0 ? dim(0, a < 0 ? a + r : a) : -1;
    if (d >= 0 && k[0] > d) return "K " + std::to_string(k[0]) + " exceeds the axis length " + std::to_string(d);
    return "";
  }

  std::string resize() const {
    std::string mode = n.getString("mode", "nearest");
    if (mode != "nearest" && mode != "linear" && mode != "cubic" && mode != "bilinear" && mode != "trilinear")
      return "mode '" + mode + "' is not nearest, linear or cubic";
    // scales: input 1 (Upsample-9) or 2 (Resize-11+); sizes: input 3.
    size_t si = n.opType == "Upsample" || opset < 11 ? 1 : 2;
    if (const Tensor *s = constant(si); s && isFloatType(s->dtype())) {
      for (int64_t i = 0; i < s->numel(); ++i) {
        double v = s->scalarAsDouble(i);
        if (!(v > 0) || !std::isfinite(v)) return "scales must be finite and positive";
      }
      if (s->numel() && rank(0) >= 0 && !n.has("axes") && s->numel() != rank(0))
        return "scales has " + std::to_string(s->numel()) + " values for rank " + std::to_string(rank(0));
    }
    if (n.opType == "Upsample" && opset < 9)
      for (float v : n.getFloats("scales"))
        if (!(v > 0) || !std::isfinite(v)) return "scales must be finite and positive";
    bool known = false;
    auto sizes = constantInts(3, known);
    for (int64_t v : sizes)
      if (v < 0) return "sizes " + list(sizes) + " must not be negative";
    if (known && !sizes.empty() && rank(0) >= 0 && !n.has("axes") && int64_t(sizes.size()) != rank(0))
      return "sizes " + list(sizes) + " needs one value per dim of the rank-" + std::to_string(rank(0)) + " input";
    return "";
  }

  std::string split() const {
    std::vector<int64_t> sizes = n.getInts("split");
    bool known = !sizes.empty();
    if (!known && opset >= 13 && n.inputs.size() > 1) sizes = constantInts(1, known);
    for (int64_t v : sizes)
      if (v < 0) return "split " + list(sizes) + " must not be negative";
    if (known && !sizes.empty() && n.outputs.size() != sizes.size())
      return "split " + list(sizes) + " has " + std::to_string(sizes.size()) + " sizes for " +
             std::to_string(n.outputs.size()) + " outputs";
    if (n.has("num_outputs") && n.getInt("num_outputs", 1) <= 0) return "num_outputs must be positive";
    return axisAttr("axis", 0, rank(0));
  }

  std::string reshape() const {
    bool known = false;
    auto shape = constantInts(1, known);
    int minusOnes = 0;
    for (int64_t v : shape) {
      if (v < -1) return "shape " + list(shape) + " has a dim below -1";
      minusOnes += v == -1;
    }
    if (minusOnes > 1) return "shape " + list(shape) + " has more than one -1";
    return "";
  }

  std::string run() const {
    const std::string &op = n.opType;
    // Every operator has at least one output (an optional one may be
    // unnamed, as LSTM's Y), and kernels write the first.
    if (n.outputs.empty()) return "has no outputs (every operator has at least one)";
    if (!n.domain.empty() && n.domain != "ai.onnx") return "";
    // The op table's checks (ops/OpTable.h) where it has them.
    if (const ops::OpDef *def = opDefOf(n); def && def->check) return def->check(checkIn(), op);
    if (op == "BatchNormalization") return batchNorm();
    if (op == "LRN") {
      if (!n.has("size")) return "size is required";
      if (n.getInt("size", 1) <= 0) return "size " + std::to_string(n.getInt("size", 1)) + " must be positive";
      return "";
    }
    if (op == "Pad") return pad();
    if (op.rfind("Reduce", 0) == 0) return reduce();
    if (op == "Tile") return tile();
    if (op == "TopK") return topk();
    if (op == "Resize" || op == "Upsample") return resize();
    if (op == "Split") return split();
    if (op == "Reshape") return reshape();
    if (op == "OneHot") return axisAttr("axis", -1, rank(0), 1); // the output has one more dim
    if (op == "Squeeze" && n.has("axes")) return axesIn("axes", n.getInts("axes"), rank(0));
    if (op == "Unsqueeze" && n.has("axes")) {
      int64_t r = rank(0) >= 0 ? rank(0) + int64_t(n.getInts("axes").size()) : -1;
      return axesIn("axes", n.getInts("axes"), r);
    }
    return "";
  }

private:
  const Node &n;
  int64_t opset;
  const ValueFacts &f;
  NodeAttrs attrs;
};

void verifyGraphNodes(const std::vector<Node> &nodes, int64_t opset, const ValueFacts &facts, const std::string &where,
                      std::vector<std::string> &problems) {
  for (const Node &n : nodes) {
    std::string at = where + n.describe();
    if (std::string e = verifyNode(n, opset, facts); !e.empty()) problems.push_back(at + ": " + e);
    for (const auto &[an, a] : n.attrs) {
      std::vector<const Graph *> gs;
      if (a.g) gs.push_back(a.g.get());
      for (const auto &g : a.graphs) gs.push_back(g.get());
      for (const Graph *g : gs) {
        // A subgraph's own initializers shadow the enclosing scope's.
        ValueFacts inner = facts;
        inner.constant = [g, outer = facts.constant](const std::string &v) -> const Tensor * {
          auto it = g->initializers.find(v);
          if (it != g->initializers.end()) return &it->second;
          return outer ? outer(v) : nullptr;
        };
        inner.shape = [g, outer = facts.shape](const std::string &v) -> const std::vector<int64_t> * {
          auto it = g->initializers.find(v);
          if (it != g->initializers.end()) return &it->second.shape();
          return outer ? outer(v) : nullptr;
        };
        verifyGraphNodes(g->nodes, opset, inner, at + " '" + an + "' > ", problems);
      }
    }
  }
}

} // namespace

ValueFacts modelFacts(const Model &model) {
  ValueFacts f;
  f.constant = [&model](const std::string &v) -> const Tensor * {
    auto it = model.initializers.find(v);
    return it == model.initializers.end() ? nullptr : &it->second;
  };
  f.shape = [&model](const std::string &v) -> const std::vector<int64_t> * {
    auto it = model.initializers.find(v);
    if (it != model.initializers.end()) return &it->second.shape();
    for (const auto *list : {&model.inputs, &model.outputs})
      for (const auto &vi : *list)
        if (vi.name == v) return vi.hasShape ? &vi.shape : nullptr;
    return nullptr;
  };
  return f;
}

std::string verifyNode(const Node &node, int64_t opset, const ValueFacts &facts) {
  try {
    return NodeRules(node, opset, facts).run();
  } catch (const std::exception &e) {
    return e.what(); // an attribute of the wrong kind, a value that does not convert
  }
}

std::vector<std::string> verifyModel(const Model &model) {
  std::vector<std::string> problems;
  verifyGraphNodes(model.nodes, model.opset(""), modelFacts(model), model.path + ": ", problems);
  return problems;
}

} // namespace hetplan::runtime
