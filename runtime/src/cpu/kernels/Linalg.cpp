//===- Linalg.cpp - ConvTranspose, pooling, BatchNorm, InstanceNorm, LRN --===//
//
// Forward kernels, and the backward of pooling, BatchNormalization and LRN
// (over the window of train/WindowGeo.h). MatMul/Gemm, Conv and
// LayerNormalization/Softmax have files of their own (MatMul.cpp, Conv.cpp,
// Normalization.cpp).
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"
#include "OpKernels.h"
#include "../../train/WindowGeo.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "Geometry.h"
#ifdef HETPLAN_HAVE_DNNL
#include "Dnnl.h"
#endif

namespace hetplan::runtime::cpu {

namespace {

void convTranspose(KernelContext &c) {
  const Tensor &x = c.in(0), &wt = c.in(1);
  const Node &nd = c.node;
  auto ks = nd.getInts("kernel_shape", std::vector<int64_t>(wt.shape().begin() + std::min<int64_t>(2, wt.rank()), wt.shape().end()));
  checkConvOperands("ConvTranspose", x, wt, nd.getInt("group", 1), ks, true, c.hasInput(2) ? &c.in(2) : nullptr);
  int64_t N = x.dim(0), C = x.dim(1), G = nd.getInt("group", 1), Mg = wt.dim(1), M = Mg * G, Cg = C / G;
  auto in = spatialOf(x);
  size_t r = in.size();
  auto stride = nd.getInts("strides", std::vector<int64_t>(r, 1)), dil = nd.getInts("dilations", std::vector<int64_t>(r, 1));
  auto outPad = nd.getInts("output_padding", std::vector<int64_t>(r, 0));
  auto pads = nd.getInts("pads", std::vector<int64_t>(2 * r, 0));
  auto outShapeAttr = nd.getInts("output_shape");
  std::string autoPad = nd.getString("auto_pad", "NOTSET");
  if (stride.size() != r || dil.size() != r || outPad.size() != r || pads.size() != 2 * r ||
      (!outShapeAttr.empty() && outShapeAttr.size() < r))
    throw std::runtime_error("ConvTranspose: strides/dilations/output_padding/pads/output_shape do not match the " +
                             std::to_string(r) + " spatial dims of " + x.describe());
  std::vector<int64_t> outSp(r), padB(r);
  for (size_t i = 0; i < r; ++i) {
    if (stride[i] <= 0 || dil[i] <= 0 || outPad[i] < 0 || pads[i] < 0 || pads[i + r] < 0)
      throw std::runtime_error("ConvTranspose: strides and dilations must be positive, pads and output_padding not negative");
    int64_t full = checkedAdd(checkedAdd(checkedMul(stride[i], in[i] - 1, "ConvTranspose's output size"), outPad[i],
                                         "ConvTranspose's output size"),
                              checkedMul(ks[i] - 1, dil[i], "ConvTranspose's kernel extent") + 1, "ConvTranspose's output size");
    if (!outShapeAttr.empty()) {
      outSp[i] = outShapeAttr[outShapeAttr.size() - r + i];
      // ONNX's total_padding rule (pads ignored); the halves round down
      // (Python's //), so a negative total (an output_shape larger than the
      // full output) pads at the end: the extra cells stay zero (+ bias).
      int64_t total = full - outSp[i];
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      padB[i] = autoPad == "SAME_UPPER" ? half : total - half;
    } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      outSp[i] = in[i] * stride[i];
      int64_t total = full - outSp[i];
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      padB[i] = autoPad == "SAME_UPPER" ? half : total - half;
    } else {
      padB[i] = pads[i];
      outSp[i] = full - pads[i] - pads[i + r];
    }
  }
  std::vector<int64_t> outShape = {N, M};
  outShape.insert(outShape.end(), outSp.begin(), outSp.end());
  Tensor out(x.dtype(), outShape);
  int64_t inSize = shapeNumel(in), outSize = shapeNumel(outSp), kSize = shapeNumel(ks);
#ifdef HETPLAN_HAVE_DNNL
  // float32: oneDNN's deconvolution. Its output size has no output_padding
  // term: the ONNX output (output_padding, output_shape) is expressed as the
  // end padding full - out - padBegin (refused by onednn::deconv if < 0).
  if (x.dtype() == DType::Float32 && N > 0 && outSize > 0 && inSize > 0 && r >= 1 && r <= 3 && Cg * G == C &&
      wt.rank() == r + 2 && wt.dim(0) == C) {
    std::vector<int64_t> padE(r);
    for (size_t i = 0; i < r; ++i) padE[i] = stride[i] * (in[i] - 1) + (ks[i] - 1) * dil[i] + 1 - outSp[i] - padB[i];
    bool kernelMatches = true;
    for (size_t i = 0; i < r; ++i) kernelMatches = kernelMatches && wt.dim(2 + i) == ks[i];
    onednn::ConvShape cs{x.shape(), wt.shape(), outShape, stride, dil, padB, padE, G};
    const void *weightsKey = // small weights: cached, compared value for value (Dnnl.h)
        wt.isView() || wt.numel() <= onednn::kExactWeights ? static_cast<const void *>(&c.node) : nullptr;
    if (kernelMatches && onednn::deconv(cs, x.data<float>(), wt.data<float>(),
                                        c.hasInput(2) ? c.in(2).data<float>() : nullptr, out.data<float>(),
                                        weightsKey)) {
      c.outputs[0] = std::move(out);
      return;
    }
  }
#endif
  HP_DISPATCH_FLOAT(x.dtype(), {
    std::vector<int64_t> iidx(r), kidx(r);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t ci = 0; ci < Cg; ++ci) {
          const T *px = x.data<T>() + (n * C + g * Cg + ci) * inSize;
          for (int64_t ii = 0; ii < inSize; ++ii) {
            int64_t f = ii;
            for (size_t d = r; d-- > 0;) { iidx[d] = f % in[d]; f /= in[d]; }
            T xv = px[ii];
            for (int64_t kk = 0; kk < kSize; ++kk) {
              int64_t kf = kk, off = 0, mul = 1; bool inside = true;
              for (size_t d = r; d-- > 0;) { kidx[d] = kf % ks[d]; kf /= ks[d]; }
              for (size_t d = r; d-- > 0;) {
                int64_t p = iidx[d] * stride[d] + kidx[d] * dil[d] - padB[d];
                if (p < 0 || p >= outSp[d]) { inside = false; break; }
                off += p * mul; mul *= outSp[d];
              }
              if (!inside) continue;
              for (int64_t m = 0; m < Mg; ++m)
                out.data<T>()[(n * M + g * Mg + m) * outSize + off] += xv * wt.data<T>()[((g * Cg + ci) * Mg + m) * kSize + kk];
            }
          }
        }
    if (c.hasInput(2))
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t o = 0; o < outSize; ++o) out.data<T>()[(n * M + m) * outSize + o] += c.in(2).data<T>()[m];
  });
  c.outputs[0] = std::move(out);
}

void poolOn(KernelContext &c, bool isMax, const Tensor &x);
void pool(KernelContext &c, bool isMax) { poolOn(c, isMax, c.in(0)); }

/// Pooling of x: channels-last bytes (Tensor::channelsLast, from a Conv)
/// stay so through oneDNN's pooling; other paths take plain ones.
void poolOn(KernelContext &c, bool isMax, const Tensor &x) {
  const Node &nd = c.node;
  Window w = makeWindow(nd, spatialOf(x), nd.getInts("kernel_shape"), true);
  size_t r = w.in.size();
  int64_t N = x.dim(0), C = x.dim(1), inSize = shapeNumel(w.in), outSize = shapeNumel(w.out), kSize = shapeNumel(w.kernel);
  bool includePad = nd.getInt("count_include_pad", 0);
  std::vector<int64_t> outShape = {N, C};
  outShape.insert(outShape.end(), w.out.begin(), w.out.end());
  Tensor out(x.dtype(), outShape);
  Tensor indices;
  bool wantIdx = c.numOutputs() > 1 && !c.node.outputs[1].empty();
  if (wantIdx) indices = Tensor(DType::Int64, outShape);
  int64_t storageOrder = nd.getInt("storage_order", 0);
  // float32 1-D windows without Indices: rows (n, c) in parallel, each
  // output over its window clipped to the input (oneDNN's 1-D pooling on
  // plain layouts is a slow reference loop; its 2-D one is faster than
  // this loop). Max keeps the first of equal values and NaN as the loop
  // below does.
  if (x.dtype() == DType::Float32 && !wantIdx && r == 1 && out.numel() > 0 && !x.channelsLast()) {
    const int64_t IH = r == 2 ? w.in[0] : 1, IW = w.in[r - 1], OH = r == 2 ? w.out[0] : 1, OW = w.out[r - 1];
    const int64_t KH = r == 2 ? w.kernel[0] : 1, KW = w.kernel[r - 1], SH = r == 2 ? w.stride[0] : 1,
                  SW = w.stride[r - 1], DH = r == 2 ? w.dil[0] : 1, DW = w.dil[r - 1],
                  PH = r == 2 ? w.padBegin[0] : 0, PW = w.padBegin[r - 1], EH = r == 2 ? w.padEnd[0] : 0,
                  EW = w.padEnd[r - 1];
    const float *px = x.data<float>();
    float *po = out.data<float>();
    parallelFor(N * C, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, outSize * kSize)),
                [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const float *xs = px + nc * inSize;
        float *ys = po + nc * outSize;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t h0 = oh * SH - PH;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t w0 = ow * SW - PW;
            float acc = isMax ? -std::numeric_limits<float>::infinity() : 0.f;
            bool any = false;
            int64_t count = 0, padCount = 0;
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = h0 + kh * DH;
              const bool rowPad = ih >= -PH && ih < IH + EH;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = w0 + kw * DW;
                if (rowPad && iw >= -PW && iw < IW + EW) ++padCount;
                if (ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
                const float v = xs[ih * IW + iw];
                if (isMax) { if (!any || v > acc) acc = v; }
                else acc += v;
                any = true;
                ++count;
              }
            }
            if (!isMax) acc = includePad ? (padCount ? acc / static_cast<float>(padCount) : 0.f)
                                         : (count ? acc / static_cast<float>(count) : 0.f);
            ys[oh * OW + ow] = acc;
          }
        }
      }
    });
    c.outputs[0] = std::move(out);
    return;
  }
#ifdef HETPLAN_HAVE_DNNL
  // float32 without Indices, dilations or ceil_mode: oneDNN's pooling.
  bool dilated = false;
  for (int64_t d : w.dil) dilated = dilated || d != 1;
  if (x.dtype() == DType::Float32 && !wantIdx && !dilated && !nd.getInt("ceil_mode", 0) && r >= 1 && r <= 3 &&
      out.numel() > 0) {
    onednn::PoolShape ps{x.shape(), outShape, w.kernel, w.stride, w.padBegin, w.padEnd, x.channelsLast()};
    auto kind = isMax ? onednn::PoolKind::Max
                      : includePad ? onednn::PoolKind::AvgIncludePad : onednn::PoolKind::AvgExcludePad;
    if (onednn::pool(ps, kind, x.data<float>(), out.data<float>())) {
      out.setChannelsLast(x.channelsLast());
      c.outputs[0] = std::move(out);
      return;
    }
  }
#endif
  if (x.channelsLast()) return poolOn(c, isMax, plainLayout(x));
  HP_DISPATCH_FLOAT(x.dtype(), {
    std::vector<int64_t> oidx(r), kidx(r);
    for (int64_t nc = 0; nc < N * C; ++nc) {
      const T *px = x.data<T>() + nc * inSize;
      for (int64_t o = 0; o < outSize; ++o) {
        int64_t of = o;
        for (size_t d = r; d-- > 0;) { oidx[d] = of % w.out[d]; of /= w.out[d]; }
        double acc = isMax ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t count = 0, best = -1, padCount = 0;
        for (int64_t kk = 0; kk < kSize; ++kk) {
          int64_t kf = kk, off = 0, mul = 1, offT = 0, mulT = 1; bool inside = true, inPad = true;
          for (size_t d = r; d-- > 0;) { kidx[d] = kf % w.kernel[d]; kf /= w.kernel[d]; }
          for (size_t d = r; d-- > 0;) {
            int64_t p = oidx[d] * w.stride[d] - w.padBegin[d] + kidx[d] * w.dil[d];
            if (p < -w.padBegin[d] || p >= w.in[d] + w.padEnd[d]) inPad = false;
            if (p < 0 || p >= w.in[d]) { inside = false; continue; }
            off += p * mul; mul *= w.in[d];
          }
          if (inPad) ++padCount;
          if (!inside) continue;
          (void)offT; (void)mulT;
          double v = px[off];
          if (isMax) { if (v > acc || best < 0) { acc = v; best = off; } }
          else { acc += v; ++count; }
        }
        if (!isMax) acc = (includePad ? (padCount ? acc / padCount : 0) : (count ? acc / count : 0));
        out.data<T>()[nc * outSize + o] = static_cast<T>(acc);
        if (wantIdx) {
          int64_t idx = best;
          if (storageOrder == 1 && r == 2) idx = (best % w.in[1]) * w.in[0] + best / w.in[1];
          indices.data<int64_t>()[nc * outSize + o] = nc * inSize + idx;
        }
      }
    }
  });
  c.outputs[0] = std::move(out);
  if (wantIdx) c.outputs[1] = std::move(indices);
}

void globalPool(KernelContext &c, bool isMax) {
  const Tensor &x = c.in(0);
  int64_t NC = x.dim(0) * x.dim(1), S = x.numel() / std::max<int64_t>(NC, 1);
  std::vector<int64_t> shape(x.shape().size(), 1);
  shape[0] = x.dim(0); shape[1] = x.dim(1);
  Tensor out(x.dtype(), shape);
  HP_DISPATCH_FLOAT(x.dtype(), {
    for (int64_t i = 0; i < NC; ++i) {
      const T *p = x.data<T>() + i * S;
      double acc = isMax ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t j = 0; j < S; ++j) acc = isMax ? std::max<double>(acc, p[j]) : acc + p[j];
      out.data<T>()[i] = static_cast<T>(isMax ? acc : acc / S);
    }
  });
  c.outputs[0] = std::move(out);
}

/// Inputs first..last of a normalization op: `x`'s element type and `count`
/// values each (one per channel), or a one-line error naming the rule.
void requirePerChannel(const KernelContext &c, size_t first, size_t last, int64_t count, const char *op) {
  const Tensor &x = c.in(0);
  for (size_t i = first; i <= last; ++i) {
    const Tensor &p = c.in(i);
    if (p.dtype() != x.dtype() || p.numel() != count)
      throw std::runtime_error(std::string(op) + " input " + std::to_string(i) + " is " + p.describe() + "; X " +
                               x.describe() + " needs " + std::to_string(count) + " " + dtypeName(x.dtype()) +
                               " values (one per channel)");
  }
}

void batchNorm(KernelContext &c) {
  const Tensor &x = c.in(0);
  if (x.rank() < 1) throw std::runtime_error("BatchNormalization input X must have rank >= 1 (N, C, ...)");
  requirePerChannel(c, 1, 4, x.rank() > 1 ? x.dim(1) : 1, "BatchNormalization");
  int64_t N = x.dim(0), C = x.rank() > 1 ? x.dim(1) : 1, S = x.numel() / std::max<int64_t>(N * C, 1);
  double eps = c.node.getFloat("epsilon", 1e-5f);
  Tensor out(x.dtype(), x.shape());
  const bool training = c.opset >= 14 && c.node.getInt("training_mode", 0);
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *sc = c.in(1).data<T>(), *b = c.in(2).data<T>(), *mean = c.in(3).data<T>(), *var = c.in(4).data<T>();
    // training_mode (opset 14+): normalize with the batch statistics (mean
    // and population variance over every dim but 1, in double); outputs 1
    // and 2, when asked for, are the running statistics updated with
    // momentum: running * momentum + batch * (1 - momentum).
    std::vector<T> batchMean, batchVar;
    if (training) {
      batchMean.resize(C), batchVar.resize(C);
      double mom = c.node.getFloat("momentum", 0.9f);
      std::vector<T> newMean(C), newVar(C);
      for (int64_t ch = 0; ch < C; ++ch) {
        double sum = 0, sq = 0, cnt = double(N * S);
        for (int64_t n = 0; n < N; ++n) {
          const T *px = x.data<T>() + (n * C + ch) * S;
          for (int64_t s = 0; s < S; ++s) sum += px[s];
        }
        double m = cnt > 0 ? sum / cnt : 0;
        for (int64_t n = 0; n < N; ++n) {
          const T *px = x.data<T>() + (n * C + ch) * S;
          for (int64_t s = 0; s < S; ++s) sq += (px[s] - m) * (px[s] - m);
        }
        double v = cnt > 0 ? sq / cnt : 0;
        batchMean[ch] = static_cast<T>(m), batchVar[ch] = static_cast<T>(v);
        newMean[ch] = static_cast<T>(mean[ch] * mom + m * (1 - mom));
        newVar[ch] = static_cast<T>(var[ch] * mom + v * (1 - mom));
      }
      for (size_t o = 1; o < 3 && o < c.numOutputs(); ++o) {
        if (c.node.outputs[o].empty()) continue;
        Tensor t(x.dtype(), {C});
        std::copy_n((o == 1 ? newMean : newVar).data(), C, t.data<T>());
        c.outputs[o] = std::move(t);
      }
      mean = batchMean.data(), var = batchVar.data();
    }
    // Per channel (x - mean) * k + b in T (vectorizes); k in double first.
    std::vector<T> ks(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) ks[ch] = static_cast<T>(sc[ch] / std::sqrt(static_cast<double>(var[ch]) + eps));
    parallelFor(N * C, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(S, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        int64_t ch = nc % C;
        const T k = ks[ch], m = mean[ch], bb = b[ch];
        const T *px = x.data<T>() + nc * S; T *po = out.data<T>() + nc * S;
        for (int64_t s = 0; s < S; ++s) po[s] = (px[s] - m) * k + bb;
      }
    });
  });
  c.outputs[0] = std::move(out);
}

void instanceNorm(KernelContext &c) {
  const Tensor &x = c.in(0);
  if (x.rank() < 2) throw std::runtime_error("InstanceNormalization input " + x.describe() + " needs rank >= 2 (N, C, ...)");
  requirePerChannel(c, 1, 2, x.dim(1), "InstanceNormalization");
  int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  double eps = c.node.getFloat("epsilon", 1e-5f);
  Tensor out(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch) {
        const T *px = x.data<T>() + (n * C + ch) * S; T *po = out.data<T>() + (n * C + ch) * S;
        double mean = 0, var = 0;
        for (int64_t s = 0; s < S; ++s) mean += px[s];
        mean /= S;
        for (int64_t s = 0; s < S; ++s) var += (px[s] - mean) * (px[s] - mean);
        var /= S;
        double k = c.in(1).data<T>()[ch] / std::sqrt(var + eps), b = c.in(2).data<T>()[ch];
        for (int64_t s = 0; s < S; ++s) po[s] = static_cast<T>((px[s] - mean) * k + b);
      }
  });
  c.outputs[0] = std::move(out);
}

void lrn(KernelContext &c) {
  const Tensor &x = c.in(0);
  if (x.rank() < 2) throw std::runtime_error("LRN input " + x.describe() + " needs rank >= 2 (N, C, ...)");
  if (c.node.getInt("size", 1) <= 0) throw std::runtime_error("LRN size must be positive");
  int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1), size = c.node.getInt("size", 1);
  double alpha = c.node.getFloat("alpha", 1e-4f), beta = c.node.getFloat("beta", 0.75f), bias = c.node.getFloat("bias", 1.0f);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  Tensor out(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t s = 0; s < S; ++s) {
          double sq = 0;
          for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(C - 1, ch + hi); ++k) {
            double v = x.data<T>()[(n * C + k) * S + s];
            sq += v * v;
          }
          int64_t i = (n * C + ch) * S + s;
          out.data<T>()[i] = static_cast<T>(x.data<T>()[i] / std::pow(bias + alpha / size * sq, beta));
        }
  });
  c.outputs[0] = std::move(out);
}

std::string poolCheck(const CheckContext &c) {
  if (!c.node.has("kernel_shape")) return "kernel_shape is required";
  return "";
}

} // namespace

void registerLinalgKernels() {
  registerKernel("ConvTranspose", {convTranspose, nullptr, kFloatTypes});
  // (pooling keeps a Conv's channels-last bytes: KernelInfo::readsChannelsLast)
  registerKernel("MaxPool", {[](KernelContext &c) { pool(c, true); }, poolCheck, kFloatTypes, HalfPolicy::Auto, true});
  registerKernel("AveragePool", {[](KernelContext &c) { pool(c, false); }, poolCheck, kFloatTypes, HalfPolicy::Auto, true});
  registerKernel("GlobalMaxPool", {[](KernelContext &c) { globalPool(c, true); }, nullptr, kFloatTypes});
  registerKernel("GlobalAveragePool", {[](KernelContext &c) { globalPool(c, false); }, nullptr, kFloatTypes});
  registerKernel("BatchNormalization", {batchNorm, [](const CheckContext &c) -> std::string {
                                          if (c.opset < 14 && c.node.outputs.size() > 1)
                                            return "training mode before opset 14 (saved mean/variance outputs) is not supported";
                                          if (c.opset >= 14 && c.node.outputs.size() > 1 && !c.node.getInt("training_mode", 0))
                                            return "running mean/variance outputs need training_mode=1";
                                          return "";
                                        },
                                        kFloatTypes});
  registerKernel("InstanceNormalization", {instanceNorm, nullptr, kFloatTypes});
  registerKernel("LRN", {lrn, nullptr, kFloatTypes});
}

} // namespace hetplan::runtime::cpu

namespace hetplan::runtime::train {
namespace {

// MaxPool: each output's gradient goes to the first maximum of its window
// (the forward kernel's choice); AveragePool: spread evenly over the
// window's counted positions (count_include_pad counts the padding, not the
// part of a ceil_mode window past it).
void poolGrad(GradientContext &c, bool isMax) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  const Node &nd = c.node;
  Geo g = makeGeo(nd, cpu::spatialOf(x), nd.getInts("kernel_shape"), true);
  int64_t N = x.dim(0), C = x.dim(1), inSize = g.inSize, outSize = g.outSize;
  checkOutShape(c, dy, g, N, C);
  bool includePad = nd.getInt("count_include_pad", 0);
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *pxAll = x.data<T>(), *pgAll = dy.data<T>();
    T *pdAll = dx.data<T>();
    int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, outSize * g.kSize));
    parallelFor(N * C, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const T *px = pxAll + nc * inSize, *pg = pgAll + nc * outSize;
        T *pd = pdAll + nc * inSize;
        for (int64_t od = 0; od < g.out[0]; ++od)
          for (int64_t oh = 0; oh < g.out[1]; ++oh)
            for (int64_t ow = 0; ow < g.out[2]; ++ow) {
              int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
              int64_t base[3] = {od * g.s[0] - g.pb[0], oh * g.s[1] - g.pb[1], ow * g.s[2] - g.pb[2]};
              T best = T(0);
              int64_t bestOff = -1, count = 0, padCount = 0;
              // pass 1: the argmax, or the divisor
              for (int64_t kd = 0; kd < g.k[0]; ++kd)
                for (int64_t kh = 0; kh < g.k[1]; ++kh)
                  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                    int64_t p[3] = {base[0] + kd * g.d[0], base[1] + kh * g.d[1], base[2] + kw * g.d[2]};
                    bool inside = true, inPad = true;
                    for (int i = 0; i < 3; ++i) {
                      if (p[i] < -g.pb[i] || p[i] >= g.in[i] + g.pe[i]) inPad = false;
                      if (p[i] < 0 || p[i] >= g.in[i]) inside = false;
                    }
                    if (inPad) ++padCount;
                    if (!inside) continue;
                    int64_t off = (p[0] * g.in[1] + p[1]) * g.in[2] + p[2];
                    ++count;
                    if (isMax && (bestOff < 0 || px[off] > best)) { best = px[off]; bestOff = off; }
                  }
              if (isMax) {
                if (bestOff >= 0) pd[bestOff] += pg[o];
                continue;
              }
              int64_t div = includePad ? padCount : count;
              if (!div || !count) continue;
              T share = static_cast<T>(static_cast<double>(pg[o]) / div);
              for (int64_t kd = 0; kd < g.k[0]; ++kd)
                for (int64_t kh = 0; kh < g.k[1]; ++kh)
                  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                    int64_t p[3] = {base[0] + kd * g.d[0], base[1] + kh * g.d[1], base[2] + kw * g.d[2]};
                    if (p[0] < 0 || p[0] >= g.in[0] || p[1] < 0 || p[1] >= g.in[1] || p[2] < 0 || p[2] >= g.in[2])
                      continue;
                    pd[(p[0] * g.in[1] + p[1]) * g.in[2] + p[2]] += share;
                  }
            }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

std::string poolCheck(const Node &n, int64_t) {
  if (!n.has("kernel_shape")) return "kernel_shape is required";
  if (n.getInts("kernel_shape").empty() || n.getInts("kernel_shape").size() > 3)
    return "pooling backward supports 1-D, 2-D and 3-D windows only";
  return "";
}

void globalPoolGrad(GradientContext &c, bool isMax) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t NC = x.dim(0) * x.dim(1), S = x.numel() / std::max<int64_t>(NC, 1);
  if (dy.numel() != NC)
    throw std::runtime_error(c.node.describe() + ": backward: gradient " + dy.describe() + " does not match " +
                             x.describe());
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(), *pg = dy.data<T>();
    T *pd = dx.data<T>();
    parallelFor(NC, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(S, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T *p = px + i * S;
        T *d = pd + i * S;
        if (isMax) {
          int64_t best = 0; // the first maximum, as the forward's std::max keeps
          for (int64_t j = 1; j < S; ++j)
            if (p[j] > p[best]) best = j;
          if (S) d[best] = pg[i];
        } else {
          T share = static_cast<T>(static_cast<double>(pg[i]) / S);
          for (int64_t j = 0; j < S; ++j) d[j] = share;
        }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

// Inference-mode BatchNormalization: Y = (X - mean) * k + B per channel with
// k = scale / sqrt(var + eps); mean and var (inputs 3, 4) are constants.
void batchNormGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  bool wx = wants(c, 0), ws = wants(c, 1), wb = wants(c, 2);
  if (!wx && !ws && !wb) return;
  const Tensor &x = c.in(0);
  Tensor dy = outGrad(c, 0, x.dtype());
  if (!dy.defined()) return;
  int64_t N = x.dim(0), C = x.rank() > 1 ? x.dim(1) : 1, S = x.numel() / std::max<int64_t>(N * C, 1);
  double eps = c.node.getFloat("epsilon", 1e-5f);
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *sc = c.in(1).data<T>(), *mean = c.in(3).data<T>(), *var = c.in(4).data<T>();
    const T *px = x.data<T>(), *pg = dy.data<T>();
    std::vector<double> inv(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) inv[ch] = 1.0 / std::sqrt(static_cast<double>(var[ch]) + eps);
    if (wx) {
      Tensor dx(x.dtype(), x.shape());
      T *pd = dx.data<T>();
      parallelFor(N * C, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(S, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t nc = lo; nc < hi; ++nc) {
          int64_t ch = nc % C;
          const T k = static_cast<T>(sc[ch] * inv[ch]);
          const T *g = pg + nc * S;
          T *d = pd + nc * S;
          for (int64_t s = 0; s < S; ++s) d[s] = g[s] * k;
        }
      });
      c.inputGrads[0] = std::move(dx);
    }
    if (ws || wb) {
      std::vector<double> accS(static_cast<size_t>(C), 0.0), accB(static_cast<size_t>(C), 0.0);
      parallelFor(C, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(N * S, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t ch = lo; ch < hi; ++ch) {
          double m = mean[ch], sS = 0, sB = 0;
          for (int64_t n = 0; n < N; ++n) {
            const T *g = pg + (n * C + ch) * S, *xr = px + (n * C + ch) * S;
            for (int64_t s = 0; s < S; ++s) {
              sB += g[s];
              sS += static_cast<double>(g[s]) * (xr[s] - m);
            }
          }
          accS[ch] = sS * inv[ch];
          accB[ch] = sB;
        }
      });
      auto finish = [&](const std::vector<double> &acc, size_t input) {
        Tensor t(c.in(input).dtype(), c.in(input).shape());
        if (t.numel() != C) throw std::runtime_error(c.node.describe() + ": backward: input " + c.in(input).describe());
        HP_DISPATCH_FLOAT(t.dtype(), for (int64_t ch = 0; ch < C; ++ch) t.data<T>()[ch] = static_cast<T>(acc[ch]));
        c.inputGrads[input] = std::move(t);
      };
      if (ws) finish(accS, 1);
      if (wb) finish(accB, 2);
    }
  });
}

std::string batchNormCheck(const Node &n, int64_t opset) {
  size_t outs = 0;
  for (const auto &o : n.outputs) outs += !o.empty();
  (void)opset;
  if (n.getInt("training_mode", 0) || outs > 1)
    return "BatchNormalization backward: training mode (batch statistics) is not supported, inference mode only";
  return "";
}

// LRN across channels: Y_i = X_i d_i^-beta with d_i = bias + alpha/size *
// sum_{k in [i-lo, i+hi]} X_k^2, so dX_j = dY_j d_j^-beta
// - 2 beta alpha/size X_j sum_{i in [j-hi, j+lo]} dY_i X_i d_i^(-beta-1).
void lrnGrad(GradientContext &c) {
  Tensor dy = firstOutGrad(c);
  if (!dy.defined()) return;
  const Tensor &x = c.in(0);
  int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1), size = c.node.getInt("size", 1);
  double alpha = c.node.getFloat("alpha", 1e-4f), beta = c.node.getFloat("beta", 0.75f),
         bias = c.node.getFloat("bias", 1.0f);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  double a = alpha / size;
  Tensor dx(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>(), *pg = dy.data<T>();
    T *pd = dx.data<T>();
    parallelFor(N * S, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(C * size, 1)), [&](int64_t b, int64_t e) {
      std::vector<double> t(static_cast<size_t>(C)), dpow(static_cast<size_t>(C));
      for (int64_t ns = b; ns < e; ++ns) {
        int64_t n = ns / S, s = ns % S;
        auto at = [&](int64_t ch) { return (n * C + ch) * S + s; };
        for (int64_t i = 0; i < C; ++i) {
          double sq = 0;
          for (int64_t k = std::max<int64_t>(0, i - lo); k <= std::min(C - 1, i + hi); ++k) {
            double v = px[at(k)];
            sq += v * v;
          }
          double d = bias + a * sq;
          dpow[i] = std::pow(d, -beta);
          t[i] = static_cast<double>(pg[at(i)]) * px[at(i)] * dpow[i] / d;
        }
        for (int64_t j = 0; j < C; ++j) {
          double sum = 0;
          for (int64_t i = std::max<int64_t>(0, j - hi); i <= std::min(C - 1, j + lo); ++i) sum += t[i];
          pd[at(j)] = static_cast<T>(pg[at(j)] * dpow[j] - 2.0 * beta * a * px[at(j)] * sum);
        }
      }
    });
  });
  c.inputGrads[0] = std::move(dx);
}

} // namespace

void registerLinalgGradients() {
  registerGradient("MaxPool", {[](GradientContext &c) { poolGrad(c, true); }, poolCheck, {}});
  registerGradient("AveragePool", {[](GradientContext &c) { poolGrad(c, false); }, poolCheck, {}});
  registerGradient("GlobalMaxPool", {[](GradientContext &c) { globalPoolGrad(c, true); }, nullptr, {}});
  registerGradient("GlobalAveragePool", {[](GradientContext &c) { globalPoolGrad(c, false); }, nullptr, {}});
  registerGradient("BatchNormalization", {batchNormGrad, batchNormCheck, {3, 4}});
  registerGradient("LRN", {lrnGrad, nullptr, {}});
}

} // namespace hetplan::runtime::train
