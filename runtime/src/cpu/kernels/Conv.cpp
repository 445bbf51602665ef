//===- Conv.cpp - Conv: forward, load-time fusion, backward ---------------===//
//
// The forward kernel (oneDNN's convolution where built, else im2col + GEMM)
// with the post-ops of a fused chain (residual sum, Relu); the fusion rule
// that makes such chains (Conv + inference BatchNormalization [+ Sum/Add]
// [+ Relu], model/Fusion.h); the float Conv the quantized variants run
// (OpKernels.h); and the backward kernel (im2col / col2im over the window of
// train/WindowGeo.h).
//
//===----------------------------------------------------------------------===//
#include "ElementwiseChain.h"
#include "Gemm.h"
#include "Geometry.h"
#include "KernelUtil.h"
#include "OpKernels.h"
#include "../../model/Fusion.h"
#include "../../train/WindowGeo.h"
#ifdef HETPLAN_HAVE_DNNL
#include "Dnnl.h"
#endif

#include <algorithm>
#include <cmath>

namespace hetplan::runtime::cpu {
namespace {

/// The fused node's post-ops (set by fuseConvChain): add input 3 (the
/// residual), then Relu.
constexpr const char kPostSum[] = "__hetplan_post_sum", kPostRelu[] = "__hetplan_post_relu";
/// The chain's program as one oneDNN eltwise post-op (EwEltwise), when it is one.
constexpr const char kPostEltwise[] = "__hetplan_post_eltwise", kPostEltwiseArgs[] = "__hetplan_post_eltwise_args";

void convOn(KernelContext &c, const Tensor &x);
void conv(KernelContext &c) { convOn(c, c.in(0)); }

/// Conv of x (plain or channels-last bytes: Tensor::channelsLast) with
/// c's other inputs.
void convOn(KernelContext &c, const Tensor &x) {
  const Tensor &wt = c.in(1);
  auto ks = c.node.getInts("kernel_shape", std::vector<int64_t>(wt.shape().begin() + std::min<int64_t>(2, wt.rank()), wt.shape().end()));
  checkConvOperands("Conv", x, wt, c.node.getInt("group", 1), ks, false, c.hasInput(2) ? &c.in(2) : nullptr);
  int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0), G = c.node.getInt("group", 1);
  Window w = makeWindow(c.node, spatialOf(x), ks, false);
  size_t r = w.in.size();
  int64_t Cg = C / G, Mg = M / G, kSize = shapeNumel(w.kernel), inSize = shapeNumel(w.in), outSize = shapeNumel(w.out);
  if (wt.dim(1) != Cg) throw std::runtime_error("Conv weight " + wt.describe() + " does not match input " + x.describe() + " with group " + std::to_string(G));
  std::vector<int64_t> outShape = {N, M};
  outShape.insert(outShape.end(), w.out.begin(), w.out.end());
  Tensor out = Tensor::uninitialized(x.dtype(), outShape); // (oneDNN writes all of it; cleared below otherwise)
  // Load-time fusion (Executor): + residual (input 3) and/or Relu after.
  const bool postSum = c.node.getInt(kPostSum, 0) != 0 && c.hasInput(3);
  const bool postRelu = c.node.getInt(kPostRelu, 0) != 0;
  EwProgram post; // an elementwise chain after the sum (ElementwiseChain.h)
  const bool postChain = hasEwProgram(c.node);
  if (postChain && !decodeEwProgram(c.node, post))
    throw std::runtime_error(c.node.describe() + ": not a fused Conv of this hetplan");
  bool chainDone = false; // applied as a oneDNN post-op
  auto finish = [&](Tensor y) {
    if (postSum) {
      y = plainLayout(y);
      Tensor res = plainLayout(c.in(3));
      if (res.dtype() != y.dtype()) throw std::runtime_error("fused Sum: mixed element types");
      HP_DISPATCH_FLOAT(y.dtype(), y = binaryBroadcast<T, T, T>(y, res, y.dtype(), [](T a, T b) { return a + b; }));
    }
    if (postRelu)
      HP_DISPATCH_FLOAT(y.dtype(), {
        T *p = y.data<T>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = p[i] < T(0) ? T(0) : p[i];
      });
    if (postChain && !chainDone) y = runEwProgram(post, y, c.node.describe());
    c.outputs[0] = std::move(y);
  };
  // 1x1 kernel, stride 1, no padding: the im2col matrix is the input itself.
  bool pointwise = kSize == 1;
  for (size_t d = 0; d < r; ++d)
    pointwise = pointwise && w.stride[d] == 1 && w.padBegin[d] == 0 && w.out[d] == w.in[d];
#ifdef HETPLAN_HAVE_DNNL
  // float32: oneDNN's convolution (blocked layouts, JIT for the host ISA).
  if (x.dtype() == DType::Float32 && N > 0 && outSize > 0 && Cg * G == C && Mg * G == M && r >= 1 && r <= 3) {
    onednn::ConvShape cs{x.shape(), wt.shape(), outShape, w.stride, w.dil, w.padBegin, w.padEnd, G};
    const float *bias = c.hasInput(2) ? c.in(2).data<float>() : nullptr;
    // Only weights that are views (of the model file, or folded/fused
    // constants) are immutable: larger trained parameters (owned copies,
    // updated in place) are reordered every call; small ones are cached and
    // compared value for value.
    const void *weightsKey =
        wt.isView() || wt.numel() <= onednn::kExactWeights ? static_cast<const void *>(&c.node) : nullptr;
    bool sumInPrim = postSum && c.in(3).shape() == outShape && c.in(3).dtype() == DType::Float32;
    cs.xChannelsLast = x.channelsLast();
    cs.yChannelsLast = c.node.getInt(kChannelsLastOutput, 0) != 0 && r >= 1 && r <= 3;
    // The sum post-op adds the residual's bytes: in y's layout.
    Tensor residual;
    if (sumInPrim)
      residual = cs.yChannelsLast ? channelsLastLayout(c.in(3)) : plainLayout(c.in(3));
    cs.postSum = sumInPrim;
    cs.postRelu = postRelu && (sumInPrim || !postSum);
    if (postChain && (sumInPrim || !postSum) && post.constRank <= static_cast<int64_t>(outShape.size())) {
      auto args = c.node.getFloats(kPostEltwiseArgs, {0.f, 0.f});
      int64_t kind = c.node.getInt(kPostEltwise, EwEltwise::none);
      if (kind > EwEltwise::none && kind <= EwEltwise::gelu_erf && args.size() == 2) {
        cs.postEltwise = kind;
        cs.postAlpha = args[0];
        cs.postBeta = args[1];
      }
    }
    if (onednn::conv(cs, x.data<float>(), wt.data<float>(), bias, out.data<float>(), weightsKey,
                     sumInPrim ? residual.data<float>() : nullptr)) {
      out.setChannelsLast(cs.yChannelsLast);
      chainDone = cs.postEltwise != EwEltwise::none;
      if ((!postSum || sumInPrim) && (!postRelu || cs.postRelu) && (!postChain || chainDone)) c.outputs[0] = std::move(out);
      else finish(std::move(out));
      return;
    }
  }
#endif
  if (x.channelsLast()) return convOn(c, plainLayout(x));
  std::memset(out.raw(), 0, out.nbytes());
  HP_DISPATCH_FLOAT(x.dtype(), {
    std::vector<T> col(pointwise ? 0 : static_cast<size_t>(Cg * kSize * outSize));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < G; ++g) {
        const T *px = x.data<T>() + (n * C + g * Cg) * inSize;
        // im2col: row (c, kernel offset), column output position. Rows are
        // independent: split across threads (outside the GEMM).
        if (!pointwise)
          parallelFor(Cg * kSize, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, outSize)),
                      [&](int64_t lo, int64_t hi) {
          std::vector<int64_t> kidx(r), oidx(r);
          if (r == 2) { // no divisions per element: rows walk (c, kh, kw)
            int64_t OH = w.out[0], OW = w.out[1], IH = w.in[0], IW = w.in[1];
            int64_t KH = w.kernel[0], KW = w.kernel[1], sh = w.stride[0], sw = w.stride[1];
            int64_t ci = lo / kSize, kh = (lo % kSize) / KW, kw = lo % KW;
            for (int64_t ck = lo; ck < hi; ++ck) {
              T *row = col.data() + ck * outSize;
              const T *pc = px + ci * inSize;
              int64_t offH = kh * w.dil[0] - w.padBegin[0], offW = kw * w.dil[1] - w.padBegin[1];
              // output columns whose input column lies inside [0, IW)
              int64_t owLo = std::min<int64_t>(OW, offW >= 0 ? 0 : (-offW + sw - 1) / sw);
              int64_t owHi = IW - offW <= 0 ? 0 : std::min<int64_t>(OW, (IW - offW + sw - 1) / sw);
              if (owHi < owLo) owHi = owLo;
              for (int64_t oh = 0; oh < OH; ++oh) {
                int64_t ih = oh * sh + offH;
                T *dst = row + oh * OW;
                if (ih < 0 || ih >= IH) { std::fill(dst, dst + OW, T(0)); continue; }
                const T *src = pc + ih * IW + offW;
                std::fill(dst, dst + owLo, T(0));
                if (sw == 1) {
                  if (owHi > owLo) std::memcpy(dst + owLo, src + owLo, static_cast<size_t>(owHi - owLo) * sizeof(T));
                }
                else for (int64_t ow = owLo; ow < owHi; ++ow) dst[ow] = src[ow * sw];
                std::fill(dst + owHi, dst + OW, T(0));
              }
              if (++kw == KW) { kw = 0; if (++kh == KH) { kh = 0; ++ci; } }
            }
            return;
          }
          for (int64_t ck = lo; ck < hi; ++ck) {
            int64_t ci = ck / kSize, kf = ck % kSize;
            for (size_t d = r; d-- > 0;) { kidx[d] = kf % w.kernel[d]; kf /= w.kernel[d]; }
            T *row = col.data() + ck * outSize;
            const T *pc = px + ci * inSize;
            for (int64_t o = 0; o < outSize; ++o) {
              int64_t of = o, off = 0; bool inside = true;
              for (size_t d = r; d-- > 0;) { oidx[d] = of % w.out[d]; of /= w.out[d]; }
              int64_t mul = 1;
              for (size_t d = r; d-- > 0;) {
                int64_t p = oidx[d] * w.stride[d] - w.padBegin[d] + kidx[d] * w.dil[d];
                if (p < 0 || p >= w.in[d]) { inside = false; break; }
                off += p * mul; mul *= w.in[d];
              }
              row[o] = inside ? pc[off] : T(0);
            }
          }
        });
        const T *pcol = pointwise ? px : col.data();
        T *po = out.data<T>() + (n * M + g * Mg) * outSize;
        gemm<T>(false, false, Mg, outSize, Cg * kSize, T(1), wt.data<T>() + g * Mg * Cg * kSize, Cg * kSize,
                pcol, outSize, T(0), po, outSize);
        if (c.hasInput(2))
          for (int64_t m = 0; m < Mg; ++m) {
            T bias = c.in(2).data<T>()[g * Mg + m];
            for (int64_t o = 0; o < outSize; ++o) po[m * outSize + o] += bias;
          }
      }
  });
  finish(std::move(out));
}

// ---- load-time fusion (model/Fusion.h): Conv + BatchNormalization [+ Sum/Add] [+ Relu] ----

/// The residual Sum/Add (same-shape operands) reading `last`, whose other
/// input is computed before the head Conv runs, and then a Relu: absorbed
/// into `f` as the fused Conv's post-ops; `last` becomes the chain's output.
void absorbPostOps(const FusionGraph &g, size_t idx, FusedChain &f, std::string &last, bool &relu) {
  const Model &model = g.model;
  if (const Node *sum = g.soleReader(last);
      sum && (sum->opType == "Sum" || sum->opType == "Add") && sum->inputs.size() == 2 &&
      sum->outputs.size() == 1 && sum->inputs[0] != sum->inputs[1]) {
    const std::string &other = sum->inputs[0] == last ? sum->inputs[1] : sum->inputs[0];
    auto pr = g.producer.find(other);
    bool before = pr == g.producer.end() ? !other.empty() : g.position[pr->second] < g.position[idx];
    auto vt = model.valueTypes.find(other);
    bool isFloat = vt == model.valueTypes.end() || vt->second == DType::Float32;
    if (before && isFloat && !g.folded.count(other) && !model.initializers.count(other)) {
      f.residual = other;
      f.members.push_back(g.producer.at(sum->outputs[0]));
      f.intermediates.push_back(last);
      last = sum->outputs[0];
    }
  }
  relu = false;
  // Then the elementwise chain over the result (Relu, hard-swish, SiLU, ...):
  // a Relu alone stays the relu post-op; others become the fused node's
  // program (ElementwiseChain.h).
  FusedChain chain;
  EwProgram prog;
  std::string out;
  if (!growElementwiseChain(g, last, g.position[idx], SIZE_MAX, true, 1, prog, chain, out)) return;
  relu = prog.steps.size() == 1 && prog.steps[0].op == EwStep::relu && prog.constRank == 0;
  if (!relu) {
    encodeEwProgram(prog, f.node);
    // Which oneDNN post-op the chain is, probed once here, not per run.
    EwEltwise e = identifyEltwise(prog);
    Attribute k, ab;
    k.kind = Attribute::Int;
    k.i = e.kind;
    ab.kind = Attribute::Floats;
    ab.floats = {e.alpha, e.beta};
    f.node.attrs[kPostEltwise] = k;
    f.node.attrs[kPostEltwiseArgs] = ab;
  }
  f.members.insert(f.members.end(), chain.members.begin(), chain.members.end());
  f.intermediates.insert(f.intermediates.end(), chain.intermediates.begin(), chain.intermediates.end());
  f.deps.insert(chain.deps.begin(), chain.deps.end());
  last = out;
}

/// The residual and relu attributes and the output of a fused Conv.
void finishFusedConv(FusedChain &f, bool relu, const std::string &last) {
  if (!f.residual.empty()) {
    f.node.inputs.resize(3); // (an absent bias stays "")
    f.node.inputs.push_back(f.residual);
    Attribute a; a.kind = Attribute::Int; a.i = 1;
    f.node.attrs[kPostSum] = a;
  }
  if (relu) {
    Attribute a; a.kind = Attribute::Int; a.i = 1;
    f.node.attrs[kPostRelu] = a;
  }
  f.node.outputs = {last};
}

/// A Conv (no BatchNormalization after it) followed by a residual Sum/Add
/// and/or an elementwise chain: those as its post-ops.
bool fuseConvPostOps(const FusionGraph &g, size_t idx, FusedChain &f) {
  const Node &conv = g.model.nodes[idx];
  f.members = {idx};
  f.node = conv;
  f.node.name = conv.name + "+fused";
  std::string last = conv.outputs[0];
  bool relu = false;
  absorbPostOps(g, idx, f, last, relu);
  if (f.members.size() == 1) return false;
  finishFusedConv(f, relu, last);
  return true;
}

/// A Conv with constant float32 weights (and bias) whose output only an
/// inference BatchNormalization with constant statistics reads: the BN
/// folded into copies of the weights and bias, W' = W * k[m],
/// B' = (B - mean) * k + beta, k = scale / sqrt(var + eps).
bool fuseConvChain(const FusionGraph &g, size_t idx, FusedChain &f) {
  const Node &conv = g.model.nodes[idx];
  if (conv.outputs.size() != 1) return false;
  if (conv.inputs.size() < 2 || conv.inputs[0].empty()) return false;
  std::set<std::string> &deps = f.deps;
  const Tensor *w = g.constant(conv.inputs[1], deps);
  const Tensor *b = conv.inputs.size() > 2 && !conv.inputs[2].empty() ? g.constant(conv.inputs[2], deps) : nullptr;
  if (!w || w->rank() < 3 || (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !b)) return false;
  int64_t M = w->dim(0);
  if (b && b->numel() != M) return false;
  const Node *bn = g.soleReader(conv.outputs[0]);
  if (!bn || bn->opType != "BatchNormalization" || bn->inputs.size() != 5 || bn->inputs[0] != conv.outputs[0])
    return fuseConvPostOps(g, idx, f);
  if (bn->getInt("training_mode", 0) || bn->getInt("spatial", 1) != 1) return false;
  bool extraOut = false;
  for (size_t o = 1; o < bn->outputs.size(); ++o) extraOut |= !bn->outputs[o].empty();
  if (extraOut || bn->outputs.empty() || bn->outputs[0].empty()) return false;
  const Tensor *p[4];
  bool ok = true;
  for (int k = 0; k < 4; ++k) {
    p[k] = g.constant(bn->inputs[k + 1], deps);
    ok = ok && p[k] && p[k]->numel() == M;
  }
  if (!ok) return false;
  f.members = {idx, g.producer.at(bn->outputs[0])};
  f.intermediates = {conv.outputs[0]};
  f.node = conv;
  f.node.name = conv.name + "+fused";
  std::string last = bn->outputs[0];
  bool relu = false;
  absorbPostOps(g, idx, f, last, relu);
  double eps = bn->getFloat("epsilon", 1e-5f);
  Tensor wf(DType::Float32, w->shape()), bf(DType::Float32, {M});
  int64_t per = M ? w->numel() / M : 0;
  const float *sc = p[0]->data<float>(), *beta = p[1]->data<float>(), *mean = p[2]->data<float>(),
              *var = p[3]->data<float>();
  for (int64_t m = 0; m < M; ++m) {
    double k = sc[m] / std::sqrt(static_cast<double>(var[m]) + eps);
    const float *src = w->data<float>() + m * per;
    float *dst = wf.data<float>() + m * per;
    for (int64_t j = 0; j < per; ++j) dst[j] = static_cast<float>(src[j] * k);
    double b0 = b ? b->data<float>()[m] : 0.0;
    bf.data<float>()[m] = static_cast<float>((b0 - mean[m]) * k + beta[m]);
  }
  std::string wName = fusedConstantName(idx, "W"), bName = fusedConstantName(idx, "B");
  f.constants.emplace_back(wName, std::move(wf));
  f.constants.emplace_back(bName, std::move(bf));
  f.node.inputs = {conv.inputs[0], wName, bName};
  finishFusedConv(f, relu, last);
  return true;
}

} // namespace

// The bytes as [N, C, S] <-> [N, S, C] (S the spatial dims): the Transpose
// kernel's strided copy.
Tensor plainLayout(const Tensor &t) {
  if (!t.channelsLast()) return t;
  const int64_t N = t.dim(0), C = t.dim(1), S = N * C ? t.numel() / (N * C) : 0;
  Tensor bytes = t;
  bytes.setChannelsLast(false);
  return gatherStridedFast(bytes, {N, C, S}, {S * C, 1, C}).reshaped(t.shape());
}

Tensor channelsLastLayout(const Tensor &t) {
  if (t.channelsLast()) return t;
  if (t.dtype() != DType::Float32 || t.rank() < 3 || t.rank() > 5)
    throw std::runtime_error("internal error: channels-last bytes of " + t.describe());
  const int64_t N = t.dim(0), C = t.dim(1), S = N * C ? t.numel() / (N * C) : 0;
  Tensor out = gatherStridedFast(t, {N, S, C}, {C * S, 1, S}).reshaped(t.shape());
  out.setChannelsLast(true);
  return out;
}

void requireConvWeight(const Tensor &w) {
  if (w.rank() < 3) throw std::runtime_error("Conv weight must have rank >= 3");
}

Tensor runFloatConv(const KernelContext &c, const Tensor &x, const Tensor &w) {
  return runKernelOn(conv, c, {&x, &w});
}

void registerConvKernels() {
  registerKernel("Conv", {conv, nullptr, kFloatTypes, HalfPolicy::Auto, true, true});
  registerFusion("Conv", fuseConvChain);
}

} // namespace hetplan::runtime::cpu

namespace hetplan::runtime::train {
namespace {

using cpu::gemm;

/// Output columns [lo, hi) of the innermost dim whose input column
/// ow * s + off lies in [0, in).
inline void innerRange(int64_t off, int64_t s, int64_t in, int64_t out, int64_t &lo, int64_t &hi) {
  lo = std::min<int64_t>(out, off >= 0 ? 0 : (-off + s - 1) / s);
  hi = in - off <= 0 ? 0 : std::min<int64_t>(out, (in - off + s - 1) / s);
  if (hi < lo) hi = lo;
}

/// Calls f(outRowPtrOffset, inRowOffset, owLo, owHi) for every output row
/// (od, oh) of kernel offset (kd, kh, kw) whose input row is inside; the input
/// element of output column ow is inRowOffset + ow * s[2]. `skip(o)` is
/// called for output rows that lie wholly in the padding.
template <typename F, typename S>
inline void forRows(const Geo &g, int64_t kd, int64_t kh, int64_t kw, F f, S skip) {
  int64_t offD = kd * g.d[0] - g.pb[0], offH = kh * g.d[1] - g.pb[1], offW = kw * g.d[2] - g.pb[2];
  int64_t lo, hi;
  innerRange(offW, g.s[2], g.in[2], g.out[2], lo, hi);
  for (int64_t od = 0; od < g.out[0]; ++od) {
    int64_t id = od * g.s[0] + offD;
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      int64_t ih = oh * g.s[1] + offH, o = (od * g.out[1] + oh) * g.out[2];
      if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || lo == hi) { skip(o); continue; }
      f(o, (id * g.in[1] + ih) * g.in[2] + offW, lo, hi);
    }
  }
}

/// Row ck = (c, kd, kh, kw) of the im2col matrix of one channel group.
template <typename T>
void im2col(const Geo &g, const T *px, int64_t Cg, T *col) {
  int64_t rows = Cg * g.kSize, sw = g.s[2];
  parallelFor(rows, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, g.outSize)), [&](int64_t lo, int64_t hi) {
    for (int64_t ck = lo; ck < hi; ++ck) {
      int64_t ci = ck / g.kSize, kf = ck % g.kSize;
      int64_t kw = kf % g.k[2], kh = (kf / g.k[2]) % g.k[1], kd = kf / (g.k[2] * g.k[1]);
      T *row = col + ck * g.outSize;
      const T *pc = px + ci * g.inSize;
      std::fill(row, row + g.outSize, T(0));
      forRows(g, kd, kh, kw, [&](int64_t o, int64_t src, int64_t a, int64_t b) {
        T *dst = row + o;
        const T *s = pc + src;
        for (int64_t ow = a; ow < b; ++ow) dst[ow] = s[ow * sw];
      }, [](int64_t) {});
    }
  });
}

/// dX of one channel group += col2im(dcol); channels in parallel (each owns
/// its kSize rows and its input plane).
template <typename T>
void col2im(const Geo &g, const T *col, int64_t Cg, T *pdx) {
  int64_t sw = g.s[2];
  parallelFor(Cg, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, g.kSize * g.outSize)),
              [&](int64_t lo, int64_t hi) {
    for (int64_t ci = lo; ci < hi; ++ci) {
      T *pc = pdx + ci * g.inSize;
      for (int64_t kf = 0; kf < g.kSize; ++kf) {
        int64_t kw = kf % g.k[2], kh = (kf / g.k[2]) % g.k[1], kd = kf / (g.k[2] * g.k[1]);
        const T *row = col + (ci * g.kSize + kf) * g.outSize;
        forRows(g, kd, kh, kw, [&](int64_t o, int64_t dst, int64_t a, int64_t b) {
          const T *s = row + o;
          T *d = pc + dst;
          for (int64_t ow = a; ow < b; ++ow) d[ow * sw] += s[ow];
        }, [](int64_t) {});
      }
    }
  });
}

// Y[n, g*Mg+m] = sum_{c,k} W[g*Mg+m, c, k] X[n, g*Cg+c, window(o, k)] + B:
// per sample and group, with col = im2col(X): dW_g += dY_g col^T,
// dX_g = col2im(W_g^T dY_g), dB = sum of dY over samples and positions.
void convGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  bool wx = wants(c, 0), ww = wants(c, 1), wb = wants(c, 2);
  if (!wx && !ww && !wb) return;
  const Tensor &x = c.in(0), &wt = c.in(1);
  Tensor dy = outGrad(c, 0, x.dtype());
  if (!dy.defined()) return;
  if (wt.dtype() != x.dtype())
    throw std::runtime_error(c.node.describe() + ": backward: weight " + wt.describe() + " and input " + x.describe() +
                             " differ in element type");
  int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0), G = c.node.getInt("group", 1);
  auto ks = c.node.getInts("kernel_shape", std::vector<int64_t>(wt.shape().begin() + 2, wt.shape().end()));
  Geo g = makeGeo(c.node, cpu::spatialOf(x), ks, false);
  if (G < 1 || C % G || M % G || wt.dim(1) != C / G)
    throw std::runtime_error(c.node.describe() + ": backward: weight " + wt.describe() + " does not match input " +
                             x.describe() + " with group " + std::to_string(G));
  int64_t Cg = C / G, Mg = M / G, K = Cg * g.kSize, inSize = g.inSize, outSize = g.outSize;
  checkOutShape(c, dy, g, N, M);
  Tensor dx, dw;
  if (wx) dx = Tensor(x.dtype(), x.shape());
  if (ww) dw = Tensor(wt.dtype(), wt.shape());
  bool pointwise = g.kSize == 1;
  for (int i = 0; i < 3; ++i) pointwise = pointwise && g.s[i] == 1 && g.pb[i] == 0 && g.out[i] == g.in[i];
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(), *pw = wt.data<T>(), *pg = dy.data<T>();
    T *pdx = wx ? dx.data<T>() : nullptr, *pdw = ww ? dw.data<T>() : nullptr;
    if (Cg == 1 && !pointwise && (wx || ww)) {
      // depthwise (one input channel per group): direct loops, groups in parallel
      int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, N * Mg * g.kSize * outSize));
      parallelFor(G, grain, [&](int64_t glo, int64_t ghi) {
        std::vector<double> acc(static_cast<size_t>(g.kSize));
        int64_t sw = g.s[2];
        for (int64_t gi = glo; gi < ghi; ++gi)
          for (int64_t m = 0; m < Mg; ++m) {
            int64_t oc = gi * Mg + m;
            const T *wrow = pw + oc * g.kSize;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t n = 0; n < N; ++n) {
              const T *gy = pg + (n * M + oc) * outSize;
              const T *xp = px + (n * C + gi) * inSize;
              T *dxp = pdx ? pdx + (n * C + gi) * inSize : nullptr;
              for (int64_t kf = 0; kf < g.kSize; ++kf) {
                int64_t kw = kf % g.k[2], kh = (kf / g.k[2]) % g.k[1], kd = kf / (g.k[2] * g.k[1]);
                T wv = wrow[kf];
                double a = 0;
                forRows(g, kd, kh, kw, [&](int64_t o, int64_t in, int64_t lo, int64_t hi) {
                  const T *gr = gy + o;
                  if (pdw) {
                    const T *xr = xp + in;
                    for (int64_t ow = lo; ow < hi; ++ow) a += static_cast<double>(gr[ow]) * xr[ow * sw];
                  }
                  if (dxp) {
                    T *dr = dxp + in;
                    for (int64_t ow = lo; ow < hi; ++ow) dr[ow * sw] += wv * gr[ow];
                  }
                }, [](int64_t) {});
                acc[kf] += a;
              }
            }
            if (pdw)
              for (int64_t kf = 0; kf < g.kSize; ++kf) pdw[oc * g.kSize + kf] = static_cast<T>(acc[kf]);
          }
      });
    } else if (wx || ww) {
      std::vector<T> col(pointwise || !ww ? 0 : static_cast<size_t>(K * outSize));
      std::vector<T> dcol(pointwise || !wx ? 0 : static_cast<size_t>(K * outSize));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t gi = 0; gi < G; ++gi) {
          const T *xg = px + (n * C + gi * Cg) * inSize;
          const T *gy = pg + (n * M + gi * Mg) * outSize;
          const T *wg = pw + gi * Mg * K;
          if (ww) {
            const T *pcol = xg;
            if (!pointwise) { im2col(g, xg, Cg, col.data()); pcol = col.data(); }
            gemm<T>(false, true, Mg, K, outSize, T(1), gy, outSize, pcol, outSize, T(1), pdw + gi * Mg * K, K);
          }
          if (wx) {
            T *dxg = pdx + (n * C + gi * Cg) * inSize;
            if (pointwise) {
              gemm<T>(true, false, K, outSize, Mg, T(1), wg, K, gy, outSize, T(0), dxg, outSize);
            } else {
              gemm<T>(true, false, K, outSize, Mg, T(1), wg, K, gy, outSize, T(0), dcol.data(), outSize);
              col2im(g, dcol.data(), Cg, dxg);
            }
          }
        }
    }
    if (wb) {
      const Tensor &b = c.in(2);
      Tensor db(b.dtype(), b.shape());
      if (b.numel() != M) throw std::runtime_error(c.node.describe() + ": backward: bias " + b.describe());
      T *pdb = db.data<T>();
      parallelFor(M, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, N * outSize)),
                  [&](int64_t lo, int64_t hi) {
        for (int64_t m = lo; m < hi; ++m) {
          double s = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T *r = pg + (n * M + m) * outSize;
            for (int64_t o = 0; o < outSize; ++o) s += r[o];
          }
          pdb[m] = static_cast<T>(s);
        }
      });
      c.inputGrads[2] = std::move(db);
    }
  });
  if (wx) c.inputGrads[0] = std::move(dx);
  if (ww) c.inputGrads[1] = std::move(dw);
}

std::string convCheck(const Node &n, int64_t) {
  if (n.has("kernel_shape") && (n.getInts("kernel_shape").empty() || n.getInts("kernel_shape").size() > 3))
    return "Conv backward supports 1-D, 2-D and 3-D convolutions only";
  return "";
}

} // namespace

void registerConvGradients() { registerGradient("Conv", {convGrad, convCheck, {}}); }

} // namespace hetplan::runtime::train
