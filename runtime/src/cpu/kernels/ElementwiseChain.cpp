//===- ElementwiseChain.cpp - fused elementwise chains: rule, kernel -------===//
//
// The load-time rule that finds chains of float32 elementwise nodes, the
// tile interpreter that runs them in one pass, and the probe that tells
// Conv.cpp which oneDNN post-op a chain is (ElementwiseChain.h).
//
//===----------------------------------------------------------------------===//
#include "ElementwiseChain.h"

#include "FastMath.h"
#include "KernelUtil.h"
#include "OpKernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>

namespace hetplan::runtime::cpu {
namespace {

constexpr size_t kMaxSteps = 32;
constexpr int64_t kTile = 256;
constexpr const char kFusedDomain[] = "ai.hetplan.fused", kChainOp[] = "ElementwiseChain";
constexpr const char kOps[] = "__hetplan_ew_ops", kA[] = "__hetplan_ew_a", kB[] = "__hetplan_ew_b",
                     kKa[] = "__hetplan_ew_ka", kKb[] = "__hetplan_ew_kb", kRank[] = "__hetplan_ew_rank";

/// A one-element float32 constant (of any rank) as a float.
bool scalarConstant(const FusionGraph &g, const std::string &v, float &out, int64_t &rank,
                    std::set<std::string> &deps) {
  std::set<std::string> d;
  const Tensor *t = v.empty() ? nullptr : g.constant(v, d);
  if (!t || t->numel() != 1) return false;
  out = t->data<float>()[0];
  rank = std::max(rank, t->rank());
  deps.insert(d.begin(), d.end());
  return true;
}

/// An operand: a value of the chain (its slot) or a constant (slot -1).
bool operandOf(const FusionGraph &g, const std::map<std::string, int64_t> &slots, const std::string &v,
               int64_t &slot, float &k, int64_t &rank, std::set<std::string> &deps) {
  if (auto it = slots.find(v); it != slots.end()) {
    slot = it->second;
    return true;
  }
  slot = -1;
  return scalarConstant(g, v, k, rank, deps);
}

std::map<std::string, EwStepInfo> &stepRegistry() {
  static std::map<std::string, EwStepInfo> r;
  return r;
}

/// The step node `n` is over the chain's values, if it is one; `floatish`
/// set when it shows x is a float (a float-only op or a float32 constant).
bool stepOf(const FusionGraph &g, const Node &n, const std::map<std::string, int64_t> &slots, EwStep &st,
            int64_t &rank, std::set<std::string> &deps, bool &floatish) {
  if (n.outputs.size() != 1 || n.outputs[0].empty() || !n.implicitInputs.empty() || n.inputs.empty())
    return false;
  auto info = stepRegistry().find(n.opType);
  if (info == stepRegistry().end()) return false;
  int64_t r = rank;
  std::set<std::string> d;
  auto in = slots.find(n.inputs[0]);
  st = EwStep();
  st.op = info->second.op;
  bool constant = false;
  if (st.op <= EwStep::min) { // binary: slots or one-element constants
    if (n.inputs.size() != 2) return false;
    if (!operandOf(g, slots, n.inputs[0], st.a, st.ka, r, d) || !operandOf(g, slots, n.inputs[1], st.b, st.kb, r, d))
      return false;
    if (st.a < 0 && st.b < 0) return false;
    constant = st.a < 0 || st.b < 0;
  } else if (st.op == EwStep::square) { // Pow with a constant exponent of 2
    float e = 0;
    if (n.inputs.size() != 2 || in == slots.end() || !scalarConstant(g, n.inputs[1], e, r, d) || e != 2.f)
      return false;
    st.a = in->second;
    constant = true;
  } else if (st.op == EwStep::clip) { // bounds: attributes before opset 11, then constant inputs
    if (in == slots.end()) return false;
    st.a = in->second;
    st.ka = std::numeric_limits<float>::lowest();
    st.kb = std::numeric_limits<float>::max();
    if (g.model.opset("") < 11) {
      float lo = n.getFloat("min", st.ka), hi = n.getFloat("max", st.kb);
      if (!std::isnan(lo)) st.ka = lo;
      if (!std::isnan(hi)) st.kb = hi;
    } else {
      if (n.inputs.size() > 3) return false;
      bool lo = n.inputs.size() > 1 && !n.inputs[1].empty(), hi = n.inputs.size() > 2 && !n.inputs[2].empty();
      if (lo && !scalarConstant(g, n.inputs[1], st.ka, r, d)) return false;
      if (hi && !scalarConstant(g, n.inputs[2], st.kb, r, d)) return false;
      constant = lo || hi;
    }
  } else { // unary
    if (n.inputs.size() != 1 || in == slots.end()) return false;
    st.a = in->second;
    if (info->second.attributes) info->second.attributes(n, st);
  }
  rank = r;
  deps.insert(d.begin(), d.end());
  floatish = floatish || constant || info->second.floatOnly;
  return true;
}

// One tile through the program: step k's result in bufs[k] (the last one in
// y). Each expression is its node's kernel's (Elementwise.cpp, Unary.cpp),
// so the result equals the unfused chain's.
// (float64: the kernels' double loops, libm for the transcendentals.)
template <typename T> HP_INLINE void runTileOf(const EwStep *steps, size_t ns, const T *x, T *y, int64_t len, T *bufs) {
  for (size_t s = 0; s < ns; ++s) {
    const EwStep &st = steps[s];
    T *o = s + 1 == ns ? y : bufs + s * kTile;
    const T *a = st.a < 0 ? nullptr : (st.a == 0 ? x : bufs + (st.a - 1) * kTile);
    const T *b = st.b < 0 ? nullptr : (st.b == 0 ? x : bufs + (st.b - 1) * kTile);
    const T ka = static_cast<T>(st.ka), kb = static_cast<T>(st.kb);
    using F = T; // (the expressions below are the kernels', in the tensor's type)
#define HP_EW_BINARY(EXPR)                                                                                             \
  if (a && b) {                                                                                                        \
    HP_SIMD for (int64_t j = 0; j < len; ++j) { F u = a[j], v = b[j]; o[j] = (EXPR); }                                \
  } else if (a) {                                                                                                      \
    HP_SIMD for (int64_t j = 0; j < len; ++j) { F u = a[j], v = kb; o[j] = (EXPR); }                                  \
  } else {                                                                                                             \
    HP_SIMD for (int64_t j = 0; j < len; ++j) { F u = ka, v = b[j]; o[j] = (EXPR); }                                  \
  }                                                                                                                    \
  break
#define HP_EW_UNARY(EXPR)                                                                                              \
  HP_SIMD for (int64_t j = 0; j < len; ++j) { F u = a[j]; o[j] = (EXPR); }                                            \
  break
    switch (st.op) {
    case EwStep::add: HP_EW_BINARY(u + v);
    case EwStep::sub: HP_EW_BINARY(u - v);
    case EwStep::mul: HP_EW_BINARY(u * v);
    case EwStep::div: HP_EW_BINARY(u / v);
    case EwStep::max: HP_EW_BINARY(u > v ? u : v);
    case EwStep::min: HP_EW_BINARY(u < v ? u : v);
    case EwStep::square: HP_EW_UNARY(u * u);
    case EwStep::clip: HP_EW_UNARY(u < ka ? ka : (u > kb ? kb : u));
    case EwStep::relu: HP_EW_UNARY(u < F(0) ? F(0) : u);
    case EwStep::leaky_relu:
      HP_EW_UNARY(static_cast<F>(u < 0 ? static_cast<double>(st.ka) * u : static_cast<double>(u)));
    case EwStep::neg: HP_EW_UNARY(F(0) - u);
    case EwStep::abs: HP_EW_UNARY(u < F(0) ? F(0) - u : u);
    case EwStep::sqrt: HP_EW_UNARY(static_cast<F>(std::sqrt(static_cast<double>(u))));
    case EwStep::hard_sigmoid:
      HP_EW_UNARY(static_cast<F>(std::max(0.0, std::min(1.0, static_cast<double>(st.ka) * u + static_cast<double>(st.kb)))));
    case EwStep::hard_swish:
      HP_EW_UNARY(static_cast<F>(static_cast<double>(u) * std::max(0.0, std::min(1.0, static_cast<double>(u) / 6.0 + 0.5))));
    case EwStep::sigmoid:
      if constexpr (std::is_same_v<T, float>) fastmath::sigmoid(a, o, len);
      else for (int64_t j = 0; j < len; ++j) o[j] = 1.0 / (1.0 + std::exp(-a[j]));
      break;
    case EwStep::tanh:
      if constexpr (std::is_same_v<T, float>) fastmath::tanh(a, o, len);
      else for (int64_t j = 0; j < len; ++j) o[j] = std::tanh(a[j]);
      break;
    case EwStep::erf:
      if constexpr (std::is_same_v<T, float>) fastmath::erf(a, o, len);
      else for (int64_t j = 0; j < len; ++j) o[j] = std::erf(a[j]);
      break;
    case EwStep::exp:
      if constexpr (std::is_same_v<T, float>) fastmath::exp(a, o, len);
      else for (int64_t j = 0; j < len; ++j) o[j] = std::exp(a[j]);
      break;
    }
#undef HP_EW_BINARY
#undef HP_EW_UNARY
  }
}
HP_CLONES void runTile(const EwStep *steps, size_t ns, const float *x, float *y, int64_t len, float *bufs) {
  runTileOf(steps, ns, x, y, len, bufs);
}
HP_CLONES void runTile(const EwStep *steps, size_t ns, const double *x, double *y, int64_t len, double *bufs) {
  runTileOf(steps, ns, x, y, len, bufs);
}

template <typename T> void runProgramSerialOf(const EwProgram &p, const T *x, T *y, int64_t n) {
  alignas(64) T bufs[kMaxSteps * kTile];
  for (int64_t t = 0; t < n; t += kTile)
    runTile(p.steps.data(), p.steps.size(), x + t, y + t, std::min<int64_t>(kTile, n - t), bufs);
}

template <typename T> void runProgramOf(const EwProgram &p, const T *x, T *y, int64_t n) {
  parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) { runProgramSerialOf(p, x + lo, y + lo, hi - lo); });
}

/// The standalone fused node: out = program(x).
void chainKernel(KernelContext &c) {
  EwProgram p;
  if (!decodeEwProgram(c.node, p))
    throw std::runtime_error(c.node.describe() + ": not a fused elementwise chain of this hetplan");
  c.outputs[0] = runEwProgram(p, c.in(0), c.node.describe());
}

/// The rule for an elementwise head: the chain it starts, two nodes or more.
bool fuseElementwiseChain(const FusionGraph &g, size_t head, FusedChain &f) {
  const Node &n = g.model.nodes[head];
  std::string x;
  for (const auto &in : n.inputs) {
    std::set<std::string> d;
    if (in.empty() || g.constant(in, d)) continue;
    if (!x.empty() && in != x) return false; // two different tensors: not a chain over one
    x = in;
  }
  if (x.empty()) return false;
  EwProgram p;
  std::string last;
  if (!growElementwiseChain(g, x, g.position[head], head, false, 2, p, f, last)) return false;
  if (!p.floatish) return false; // (may be an integer chain: unfused)
  f.node = Node();
  f.node.name = n.name + "+chain";
  f.node.opType = kChainOp;
  f.node.domain = kFusedDomain;
  f.node.inputs = {x};
  f.node.outputs = {last};
  encodeEwProgram(p, f.node);
  return true;
}

double reference(EwEltwise::Kind k, double x, double alpha, double beta) {
  switch (k) {
  case EwEltwise::relu: return x > 0 ? x : alpha * x;
  case EwEltwise::clip: return std::min(std::max(x, alpha), beta);
  case EwEltwise::hardswish: return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
  case EwEltwise::swish: return x / (1.0 + std::exp(-alpha * x));
  case EwEltwise::logistic: return 1.0 / (1.0 + std::exp(-x));
  case EwEltwise::tanh: return std::tanh(x);
  case EwEltwise::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  case EwEltwise::none: break;
  }
  return 0;
}

} // namespace

bool growElementwiseChain(const FusionGraph &g, const std::string &x, size_t after, size_t first, bool xInternal,
                          size_t minSteps, EwProgram &prog, FusedChain &f, std::string &last) {
  std::map<std::string, int64_t> slots{{x, 0}};
  std::vector<std::string> values{x}; // values[k + 1]: step k's result
  std::vector<size_t> members;
  std::vector<EwStep> steps;
  std::vector<int64_t> ranks;
  std::vector<std::set<std::string>> deps;
  std::vector<char> floatish;
  auto add = [&](size_t node, const EwStep &st, int64_t rank, std::set<std::string> d, bool isFloat) {
    floatish.push_back(isFloat);
    const std::string &out = g.model.nodes[node].outputs[0];
    slots[out] = static_cast<int64_t>(values.size());
    values.push_back(out);
    members.push_back(node);
    steps.push_back(st);
    ranks.push_back(rank);
    deps.push_back(std::move(d));
  };
  if (first != SIZE_MAX) {
    EwStep st;
    int64_t rank = 0;
    std::set<std::string> d;
    bool isFloat = false;
    if (!stepOf(g, g.model.nodes[first], slots, st, rank, d, isFloat)) return false;
    add(first, st, rank, std::move(d), isFloat);
  }
  std::vector<size_t> rs;
  // Grow: the earliest node (run order) over the chain's values, until none.
  while (steps.size() < kMaxSteps) {
    size_t best = SIZE_MAX;
    EwStep bestStep;
    int64_t bestRank = 0;
    std::set<std::string> bestDeps;
    bool bestFloat = false;
    for (const auto &v : values) {
      g.readers(v, rs);
      for (size_t r : rs) {
        if (g.position[r] <= after || std::find(members.begin(), members.end(), r) != members.end()) continue;
        if (best != SIZE_MAX && g.position[r] >= g.position[best]) continue;
        EwStep st;
        int64_t rank = 0;
        std::set<std::string> d;
        bool isFloat = false;
        if (!stepOf(g, g.model.nodes[r], slots, st, rank, d, isFloat)) continue;
        bestFloat = isFloat;
        best = r;
        bestStep = st;
        bestRank = rank;
        bestDeps = std::move(d);
      }
    }
    if (best == SIZE_MAX) break;
    add(best, bestStep, bestRank, std::move(bestDeps), bestFloat);
  }
  // The longest prefix whose values other than its output are read only
  // inside it (and are no graph outputs).
  for (size_t L = steps.size(); L >= std::max<size_t>(minSteps, 1); --L) {
    bool closed = true;
    for (size_t k = xInternal ? 0 : 1; k < L && closed; ++k) {
      if (!g.readers(values[k], rs)) closed = false;
      for (size_t r : rs)
        closed = closed && std::find(members.begin(), members.begin() + L, r) != members.begin() + L;
    }
    if (!closed) continue;
    prog.steps.assign(steps.begin(), steps.begin() + L);
    prog.constRank = 0;
    prog.floatish = false;
    for (size_t k = 0; k < L; ++k) {
      prog.floatish = prog.floatish || floatish[k];
      prog.constRank = std::max(prog.constRank, ranks[k]);
      f.deps.insert(deps[k].begin(), deps[k].end());
      f.members.push_back(members[k]);
    }
    for (size_t k = xInternal ? 0 : 1; k < L; ++k) f.intermediates.push_back(values[k]);
    last = values[L];
    return true;
  }
  return false;
}

void encodeEwProgram(const EwProgram &p, Node &n) {
  Attribute ops, a, b, ka, kb, rank;
  ops.kind = a.kind = b.kind = Attribute::Ints;
  ka.kind = kb.kind = Attribute::Floats;
  for (const EwStep &s : p.steps) {
    ops.ints.push_back(s.op);
    a.ints.push_back(s.a);
    b.ints.push_back(s.b);
    ka.floats.push_back(s.ka);
    kb.floats.push_back(s.kb);
  }
  rank.kind = Attribute::Int;
  rank.i = p.constRank;
  n.attrs[kOps] = ops;
  n.attrs[kA] = a;
  n.attrs[kB] = b;
  n.attrs[kKa] = ka;
  n.attrs[kKb] = kb;
  n.attrs[kRank] = rank;
}

bool hasEwProgram(const Node &n) { return n.has(kOps); }

bool decodeEwProgram(const Node &n, EwProgram &p) {
  auto ops = n.getInts(kOps), a = n.getInts(kA), b = n.getInts(kB);
  auto ka = n.getFloats(kKa), kb = n.getFloats(kKb);
  size_t k = ops.size();
  if (k == 0 || k > kMaxSteps || a.size() != k || b.size() != k || ka.size() != k || kb.size() != k) return false;
  p.steps.clear();
  for (size_t s = 0; s < k; ++s) {
    // operands name the input or an earlier step; binary ops need one slot
    auto slotOk = [&](int64_t v) { return v >= -1 && v <= static_cast<int64_t>(s); };
    if (ops[s] < EwStep::add || ops[s] > EwStep::hard_swish || !slotOk(a[s]) || !slotOk(b[s])) return false;
    EwStep st;
    st.op = static_cast<EwStep::Op>(ops[s]);
    st.a = a[s];
    st.b = b[s];
    st.ka = ka[s];
    st.kb = kb[s];
    bool binary = st.op <= EwStep::min;
    if (binary ? (st.a < 0 && st.b < 0) : st.a < 0) return false;
    p.steps.push_back(st);
  }
  p.constRank = n.getInt(kRank, 0);
  return p.constRank >= 0 && p.constRank <= 64;
}

void runEwProgram(const EwProgram &p, const float *x, float *y, int64_t n) { runProgramOf(p, x, y, n); }
void runEwProgramSerial(const EwProgram &p, const float *x, float *y, int64_t n) { runProgramSerialOf(p, x, y, n); }
void runEwProgramSerial(const EwProgram &p, const double *x, double *y, int64_t n) { runProgramSerialOf(p, x, y, n); }
void runEwProgram(const EwProgram &p, const double *x, double *y, int64_t n) { runProgramOf(p, x, y, n); }

Tensor runEwProgram(const EwProgram &p, const Tensor &xIn, const std::string &who) {
  // (a widened shape has no channels-last form: plain bytes first)
  const Tensor &x = xIn.channelsLast() && p.constRank > xIn.rank() ? plainLayout(xIn) : xIn;
  if (x.dtype() != DType::Float32 && x.dtype() != DType::Float64)
    throw std::runtime_error(who + ": fused elementwise chain over " + x.describe() + " (float32 or float64 only)");
  std::vector<int64_t> shape = x.shape();
  if (p.constRank > static_cast<int64_t>(shape.size())) shape.insert(shape.begin(), p.constRank - shape.size(), 1);
  Tensor out = Tensor::uninitialized(x.dtype(), shape);
  if (x.dtype() == DType::Float32) runProgramOf(p, x.data<float>(), out.data<float>(), x.numel());
  else runProgramOf(p, x.data<double>(), out.data<double>(), x.numel());
  out.setChannelsLast(x.channelsLast() && shape.size() == x.shape().size());
  return out;
}

EwEltwise identifyEltwise(const EwProgram &p) {
  std::vector<float> probe;
  for (int i = -2000; i <= 2000; ++i) probe.push_back(static_cast<float>(i) * 0.01f);
  for (float v : {30.f, 50.f, 100.f, 1e3f, 1e4f}) {
    probe.push_back(v);
    probe.push_back(-v);
  }
  std::vector<float> got(probe.size());
  runEwProgram(p, probe.data(), got.data(), static_cast<int64_t>(probe.size()));
  auto at = [&](float v) {
    for (size_t i = 0; i < probe.size(); ++i)
      if (probe[i] == v) return static_cast<double>(got[i]);
    return 0.0;
  };
  for (EwEltwise::Kind k : {EwEltwise::relu, EwEltwise::clip, EwEltwise::hardswish, EwEltwise::swish,
                            EwEltwise::logistic, EwEltwise::tanh, EwEltwise::gelu_erf}) {
    EwEltwise e;
    e.kind = k;
    if (k == EwEltwise::relu) e.alpha = static_cast<float>(-at(-1.f));
    if (k == EwEltwise::clip) {
      e.alpha = static_cast<float>(at(-1e4f));
      e.beta = static_cast<float>(at(1e4f));
      if (!(e.alpha < e.beta)) continue;
    }
    if (k == EwEltwise::swish) e.alpha = 1.f;
    bool same = true;
    for (size_t i = 0; i < probe.size() && same; ++i) {
      double r = reference(k, probe[i], e.alpha, e.beta);
      same = std::fabs(got[i] - r) <= 1e-5 * std::max(1.0, std::fabs(r));
    }
    if (same) return e;
  }
  return {};
}

void registerElementwiseStep(const std::string &opType, EwStepInfo info) {
  stepRegistry()[opType] = info;
  registerFusion(opType, fuseElementwiseChain);
}

void registerElementwiseChainKernels() {
  registerKernel(kFusedDomain, kChainOp, {chainKernel, nullptr, kFloatTypes});
}

} // namespace hetplan::runtime::cpu
