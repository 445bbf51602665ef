//===- ControlFlow.cpp - If, Loop and Scan on the CPU ---------------------===//
//
// The control-flow ops run their subgraphs (Model.h `Graph`, parsed by the
// loader) node by node through the same kernel registry as the top-level
// graph. A subgraph sees its formal inputs, its initializers, the values its
// nodes produce and, by name, every value of the enclosing scopes (ONNX
// lexical scoping) through KernelContext::scope, which the executors set for
// nodes with implicitInputs. Values are immutable tensors shared by
// reference; each subgraph run has its own value map.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Kernels.h"

#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>

namespace hetplan::runtime {
namespace {

using Scope = std::function<const Tensor *(const std::string &)>;

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

const Graph &graphAttr(const Node &n, const std::string &name) {
  auto it = n.attrs.find(name);
  if (it == n.attrs.end() || it->second.kind != Attribute::Graph || !it->second.g)
    fail("attribute '" + name + "' (a graph) is missing");
  return *it->second.g;
}

bool truthy(const Tensor &t) {
  if (t.numel() != 1) fail("condition " + t.describe() + " is not a single value");
  if (t.dtype() == DType::Bool || t.dtype() == DType::UInt8) return t.data<uint8_t>()[0] != 0;
  return t.scalarAsDouble(0) != 0;
}

/// Runs `g` with its formal inputs bound to `args` (in order); names the
/// graph neither declares nor produces come from `outer`. Returns its
/// outputs in order. Errors are prefixed with `where` and the node.
std::vector<Tensor> runGraph(const Graph &g, const std::vector<Tensor> &args, const Scope *outer, int64_t opset,
                             const std::string &where) {
  if (args.size() != g.inputs.size())
    fail(where + "the subgraph has " + std::to_string(g.inputs.size()) + " inputs, " +
         std::to_string(args.size()) + " were given");
  std::map<std::string, Tensor> values;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].defined()) values[g.inputs[i].name] = args[i];
  Scope local = [&](const std::string &s) -> const Tensor * {
    if (auto it = values.find(s); it != values.end()) return &it->second;
    if (auto it = g.initializers.find(s); it != g.initializers.end()) return &it->second;
    return outer && *outer ? (*outer)(s) : nullptr;
  };
  for (const Node &n : g.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx") fail(where + n.describe() + ": domain '" + n.domain + "' is not supported");
    const KernelInfo *k = findKernel(n.opType);
    if (!k) fail(where + n.describe() + ": no CPU kernel for " + n.opType);
    KernelContext ctx{n, opset, {}, std::vector<Tensor>(n.outputs.size())};
    for (const auto &s : n.inputs) {
      if (s.empty()) { ctx.inputs.push_back(nullptr); continue; }
      const Tensor *t = local(s);
      if (!t) fail(where + n.describe() + ": value '" + s + "' is missing");
      ctx.inputs.push_back(t);
    }
    if (!n.implicitInputs.empty()) ctx.scope = &local;
    try {
      k->run(ctx);
    } catch (const std::exception &e) {
      fail(where + n.describe() + ": " + e.what());
    }
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) values[n.outputs[i]] = std::move(ctx.outputs[i]);
  }
  std::vector<Tensor> out;
  for (const auto &o : g.outputs) {
    const Tensor *t = local(o.name);
    if (!t) fail(where + "output '" + o.name + "' was not produced");
    out.push_back(*t);
  }
  return out;
}

size_t elemBytes(const Tensor &t) { return dtypeSize(t.dtype()); }

/// x with dim `axis` fixed at `index` (that dim removed).
Tensor sliceAxis(const Tensor &x, int64_t axis, int64_t index) {
  std::vector<int64_t> shape = x.shape();
  int64_t T = shape[size_t(axis)];
  shape.erase(shape.begin() + axis);
  Tensor out(x.dtype(), shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  size_t inner = elemBytes(x);
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= size_t(x.dim(d));
  const char *src = static_cast<const char *>(x.raw());
  char *dst = static_cast<char *>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + size_t(o) * inner, src + (size_t(o) * size_t(T) + size_t(index)) * inner, inner);
  return out;
}

/// Stacks `parts` (equal shapes and types) along a new dim `axis` of size
/// `T` >= parts.size(); part t goes to position t (or T-1-t when
/// `reverse`); positions without a part stay zero.
Tensor stackAxis(const std::vector<Tensor> &parts, int64_t axis, bool reverse, int64_t T, const std::string &what) {
  const Tensor &p0 = parts.at(0);
  for (const auto &p : parts)
    if (p.shape() != p0.shape() || p.dtype() != p0.dtype())
      fail(what + ": iterations give different shapes (" + p0.describe() + ", " + p.describe() + ")");
  if (axis < 0) axis += p0.rank() + 1;
  if (axis < 0 || axis > p0.rank()) fail(what + ": axis out of range for " + p0.describe());
  std::vector<int64_t> shape = p0.shape();
  shape.insert(shape.begin() + axis, T);
  Tensor out(p0.dtype(), shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= p0.dim(d);
  size_t inner = elemBytes(p0);
  for (int64_t d = axis; d < p0.rank(); ++d) inner *= size_t(p0.dim(d));
  char *dst = static_cast<char *>(out.raw());
  int64_t n = int64_t(parts.size());
  for (int64_t t = 0; t < n; ++t) {
    int64_t pos = reverse ? n - 1 - t : t;
    const char *src = static_cast<const char *>(parts[size_t(t)].raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + (size_t(o) * size_t(T) + size_t(pos)) * inner, src + size_t(o) * inner, inner);
  }
  return out;
}

/// An empty scan output (no iterations): [0] + the body output's declared
/// shape (unknown dims 0), of its declared type (float32 when unknown).
Tensor emptyScanOutput(const ValueInfo &vi, int64_t axis) {
  std::vector<int64_t> shape;
  for (int64_t d : vi.shape) shape.push_back(d < 0 ? 0 : d);
  if (axis < 0) axis += int64_t(shape.size()) + 1;
  axis = std::max<int64_t>(0, std::min<int64_t>(axis, int64_t(shape.size())));
  shape.insert(shape.begin() + axis, 0);
  return Tensor(vi.dtype == DType::Undefined ? DType::Float32 : vi.dtype, shape);
}

void runIf(KernelContext &ctx) {
  bool c = truthy(ctx.in(0));
  const char *branch = c ? "then_branch" : "else_branch";
  const Graph &g = graphAttr(ctx.node, branch);
  std::vector<Tensor> outs = runGraph(g, {}, ctx.scope, ctx.opset, std::string(branch) + " > ");
  if (outs.size() != ctx.numOutputs())
    fail(std::string(branch) + " has " + std::to_string(outs.size()) + " outputs, the node " +
         std::to_string(ctx.numOutputs()));
  for (size_t i = 0; i < outs.size(); ++i) ctx.outputs[i] = std::move(outs[i]);
}

void runLoop(KernelContext &ctx) {
  const Graph &body = graphAttr(ctx.node, "body");
  int64_t maxTrip = std::numeric_limits<int64_t>::max();
  if (ctx.hasInput(0)) {
    auto v = ctx.in(0).toInt64Vector();
    if (v.size() != 1) fail("trip count M " + ctx.in(0).describe() + " is not a single value");
    maxTrip = v[0];
  }
  bool condGiven = ctx.hasInput(1);
  bool cond = condGiven ? truthy(ctx.in(1)) : true;
  size_t N = ctx.inputs.size() >= 2 ? ctx.inputs.size() - 2 : 0;
  if (ctx.numOutputs() < N) fail("the node has fewer outputs than loop-carried values");
  size_t K = ctx.numOutputs() - N;
  if (body.outputs.size() != 1 + N + K)
    fail("the body has " + std::to_string(body.outputs.size()) + " outputs, expected 1 + " + std::to_string(N) +
         " loop-carried + " + std::to_string(K) + " scan outputs");
  std::vector<Tensor> carried(N);
  for (size_t i = 0; i < N; ++i) {
    if (!ctx.hasInput(2 + i)) fail("loop-carried input " + std::to_string(i) + " is missing");
    carried[i] = ctx.in(2 + i);
  }
  std::vector<std::vector<Tensor>> scans(K);
  for (int64_t i = 0; i < maxTrip && cond; ++i) {
    std::vector<Tensor> args;
    args.push_back(Tensor::scalar<int64_t>(DType::Int64, i));
    args.push_back(Tensor::scalar<uint8_t>(DType::Bool, cond ? 1 : 0));
    for (auto &c : carried) args.push_back(c);
    std::vector<Tensor> outs =
        runGraph(body, args, ctx.scope, ctx.opset, "body (iteration " + std::to_string(i) + ") > ");
    if (condGiven) cond = truthy(outs[0]); // else the body's condition is ignored (ONNX)
    for (size_t k = 0; k < N; ++k) carried[k] = std::move(outs[1 + k]);
    for (size_t k = 0; k < K; ++k) scans[k].push_back(std::move(outs[1 + N + k]));
  }
  for (size_t k = 0; k < N; ++k) ctx.outputs[k] = std::move(carried[k]);
  for (size_t k = 0; k < K; ++k) {
    const std::string what = "scan output " + std::to_string(k);
    ctx.outputs[N + k] = scans[k].empty() ? emptyScanOutput(body.outputs[1 + N + k], 0)
                                          : stackAxis(scans[k], 0, false, int64_t(scans[k].size()), what);
  }
}

/// One scan (Scan-9 semantics) over `steps` iterations: slice t of scan
/// input j is taken at index t (or steps-1-t when reversed) of its axis.
void scanCore(const Graph &body, std::vector<Tensor> &states, const std::vector<Tensor> &scanIn,
              const std::vector<int64_t> &inAxes, const std::vector<int64_t> &inDirs, int64_t steps,
              std::vector<std::vector<Tensor>> &scanOut, const Scope *scope, int64_t opset) {
  size_t N = states.size(), K = scanOut.size();
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<Tensor> args = states;
    for (size_t j = 0; j < scanIn.size(); ++j)
      args.push_back(sliceAxis(scanIn[j], inAxes[j], inDirs[j] ? steps - 1 - t : t));
    std::vector<Tensor> outs = runGraph(body, args, scope, opset, "body (iteration " + std::to_string(t) + ") > ");
    if (outs.size() != N + K)
      fail("the body has " + std::to_string(outs.size()) + " outputs, expected " + std::to_string(N) +
           " states + " + std::to_string(K) + " scan outputs");
    for (size_t k = 0; k < N; ++k) states[k] = std::move(outs[k]);
    for (size_t k = 0; k < K; ++k) scanOut[k].push_back(std::move(outs[N + k]));
  }
}

void runScan(KernelContext &ctx) {
  const Node &n = ctx.node;
  const Graph &body = graphAttr(n, "body");
  int64_t M = n.getInt("num_scan_inputs", -1);
  bool v8 = ctx.opset < 9;
  size_t first = v8 ? 1 : 0; // Scan-8: input 0 is sequence_lens
  if (M < 1 || size_t(M) + first > ctx.inputs.size()) fail("num_scan_inputs is missing or out of range");
  size_t N = ctx.inputs.size() - first - size_t(M);
  if (ctx.numOutputs() < N) fail("the node has fewer outputs than states");
  size_t K = ctx.numOutputs() - N;
  std::vector<Tensor> states(N), scanIn(static_cast<size_t>(M));
  for (size_t i = 0; i < N; ++i) states[i] = ctx.in(first + i);
  for (size_t j = 0; j < size_t(M); ++j) scanIn[j] = ctx.in(first + N + j);
  auto listOr = [&](const char *name, size_t count) {
    std::vector<int64_t> v = n.getInts(name, std::vector<int64_t>(count, 0));
    if (v.size() != count) fail(std::string(name) + " has " + std::to_string(v.size()) + " entries, expected " + std::to_string(count));
    return v;
  };
  if (!v8) {
    std::vector<int64_t> inAxes = listOr("scan_input_axes", size_t(M)), inDirs = listOr("scan_input_directions", size_t(M));
    std::vector<int64_t> outAxes = listOr("scan_output_axes", K), outDirs = listOr("scan_output_directions", K);
    int64_t T = -1;
    for (size_t j = 0; j < size_t(M); ++j) {
      int64_t r = scanIn[j].rank();
      if (inAxes[j] < 0) inAxes[j] += r;
      if (inAxes[j] < 0 || inAxes[j] >= r) fail("scan_input_axes[" + std::to_string(j) + "] is out of range for " + scanIn[j].describe());
      int64_t len = scanIn[j].dim(inAxes[j]);
      if (T >= 0 && len != T) fail("scan inputs have different sequence lengths (" + std::to_string(T) + ", " + std::to_string(len) + ")");
      T = len;
    }
    std::vector<std::vector<Tensor>> scanOut(K);
    scanCore(body, states, scanIn, inAxes, inDirs, T, scanOut, ctx.scope, ctx.opset);
    for (size_t k = 0; k < N; ++k) ctx.outputs[k] = std::move(states[k]);
    for (size_t k = 0; k < K; ++k)
      ctx.outputs[N + k] = scanOut[k].empty()
                               ? emptyScanOutput(body.outputs[N + k], outAxes[k])
                               : stackAxis(scanOut[k], outAxes[k], outDirs[k] != 0, T, "scan output " + std::to_string(k));
    return;
  }
  // Scan-8: dim 0 of every input is a batch, dim 1 of the scan inputs the
  // sequence; sequence_lens (optional) limits the steps per batch entry,
  // scan outputs are zero past it.
  std::vector<int64_t> dirs = listOr("directions", size_t(M));
  int64_t B = -1, T = -1;
  for (const auto *v : {&states, &scanIn})
    for (const auto &t : *v) {
      if (t.rank() < 1 || (B >= 0 && t.dim(0) != B)) fail("inputs disagree on the batch dim");
      B = t.dim(0);
    }
  for (const auto &t : scanIn) {
    if (t.rank() < 2 || (T >= 0 && t.dim(1) != T)) fail("scan inputs disagree on the sequence dim");
    T = t.dim(1);
  }
  std::vector<int64_t> lens(size_t(B), T);
  if (ctx.hasInput(0)) {
    lens = ctx.in(0).toInt64Vector();
    if (int64_t(lens.size()) != B) fail("sequence_lens has " + std::to_string(lens.size()) + " entries, batch is " + std::to_string(B));
    for (int64_t l : lens)
      if (l < 0 || l > T) fail("sequence_lens entry " + std::to_string(l) + " is out of range [0, " + std::to_string(T) + "]");
  }
  std::vector<std::vector<Tensor>> finalStates(N), outs(K);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Tensor> st(N), in(static_cast<size_t>(M));
    for (size_t k = 0; k < N; ++k) st[k] = sliceAxis(states[k], 0, b);
    for (size_t j = 0; j < size_t(M); ++j) in[j] = sliceAxis(scanIn[j], 0, b);
    std::vector<std::vector<Tensor>> so(K);
    scanCore(body, st, in, std::vector<int64_t>(size_t(M), 0), dirs, lens[size_t(b)], so, ctx.scope, ctx.opset);
    for (size_t k = 0; k < N; ++k) finalStates[k].push_back(std::move(st[k]));
    for (size_t k = 0; k < K; ++k)
      outs[k].push_back(so[k].empty() ? Tensor() : stackAxis(so[k], 0, false, T, "scan output " + std::to_string(k)));
  }
  for (size_t k = 0; k < N; ++k)
    ctx.outputs[k] = B ? stackAxis(finalStates[k], 0, false, B, "state " + std::to_string(k)) : Tensor(DType::Float32, {0});
  for (size_t k = 0; k < K; ++k) {
    // A batch entry without steps: zeros shaped like the others.
    const Tensor *like = nullptr;
    for (const auto &t : outs[k]) if (t.defined()) like = &t;
    if (!like) { ctx.outputs[N + k] = emptyScanOutput(body.outputs[N + k], 0); continue; }
    for (auto &t : outs[k]) if (!t.defined()) t = Tensor(like->dtype(), like->shape());
    ctx.outputs[N + k] = stackAxis(outs[k], 0, false, B, "scan output " + std::to_string(k));
  }
}

std::string checkGraphAttrs(const CheckContext &cc, std::initializer_list<const char *> names) {
  for (const char *a : names) {
    auto it = cc.node.attrs.find(a);
    if (it == cc.node.attrs.end() || it->second.kind != Attribute::Graph || !it->second.g)
      return std::string("attribute '") + a + "' (a graph) is missing";
  }
  return "";
}

} // namespace

void registerControlFlowKernels() {
  registerKernel("If", {runIf, [](const CheckContext &cc) {
                          std::string why = checkGraphAttrs(cc, {"then_branch", "else_branch"});
                          if (!why.empty()) return why;
                          const Graph &t = *cc.node.attrs.at("then_branch").g, &e = *cc.node.attrs.at("else_branch").g;
                          if (t.outputs.size() != cc.node.outputs.size() || e.outputs.size() != cc.node.outputs.size())
                            return std::string("the branches' outputs do not match the node's");
                          return std::string();
                        }, {}});
  registerKernel("Loop", {runLoop, [](const CheckContext &cc) {
                            std::string why = checkGraphAttrs(cc, {"body"});
                            if (!why.empty()) return why;
                            const Graph &b = *cc.node.attrs.at("body").g;
                            size_t N = cc.node.inputs.size() >= 2 ? cc.node.inputs.size() - 2 : 0;
                            if (b.inputs.size() != 2 + N)
                              return "the body has " + std::to_string(b.inputs.size()) + " inputs, expected " +
                                     std::to_string(2 + N);
                            if (b.outputs.size() != 1 + cc.node.outputs.size())
                              return "the body has " + std::to_string(b.outputs.size()) + " outputs, expected " +
                                     std::to_string(1 + cc.node.outputs.size());
                            return std::string();
                          }, {}});
  registerKernel("Scan", {runScan, [](const CheckContext &cc) {
                            std::string why = checkGraphAttrs(cc, {"body"});
                            if (!why.empty()) return why;
                            int64_t M = cc.node.getInt("num_scan_inputs", -1);
                            size_t first = cc.opset < 9 ? 1 : 0;
                            if (M < 1 || size_t(M) + first > cc.node.inputs.size())
                              return std::string("num_scan_inputs is missing or out of range");
                            const Graph &b = *cc.node.attrs.at("body").g;
                            size_t N = cc.node.inputs.size() - first - size_t(M);
                            if (b.inputs.size() != N + size_t(M) || b.outputs.size() != cc.node.outputs.size())
                              return std::string("the body's inputs/outputs do not match the node's");
                            return std::string();
                          }, {}});
}

} // namespace hetplan::runtime
