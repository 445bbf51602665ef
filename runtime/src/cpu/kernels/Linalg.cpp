//===- Linalg.cpp - MatMul, Gemm, Conv, pooling, normalizations -----------===//
#include "KernelUtil.h"

#include <cmath>
#include <limits>

#include "FastMath.h"
#include "Gemm.h"
#include "Geometry.h"
#ifdef HETPLAN_HAVE_DNNL
#include "Dnnl.h"
#include "ops/OpTable.h" // ops::names: the spelling of op types kernels register under
#endif

namespace hetplan::runtime::cpu {

namespace {

void matmul(KernelContext &c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  if (a.dtype() != b.dtype()) throw std::runtime_error("MatMul of " + a.describe() + " and " + b.describe() + ": element types differ");
  MatMulShape ms = matmulShape(a.shape(), b.shape());
  int64_t M = ms.M, K = ms.K, N = ms.N;
  const auto &ab = ms.aBatch, &bb = ms.bBatch, &batch = ms.batch;
  Tensor out(a.dtype(), ms.out);
  int64_t nb = shapeNumel(batch);
  auto sa = broadcastStrides(ab, batch), sb = broadcastStrides(bb, batch);
#ifdef HETPLAN_HAVE_DNNL
  // Constant 2-D weights (a view of the model file, immutable): oneDNN matmul
  // with the weights packed once per node; [B, S, K] activations as [B*S, K].
  if (a.dtype() == DType::Float32 && b.rank() == 2 && b.isView() && !isSmallGemm(M * nb, N, K) &&
      onednn::matmulConstWeights(M * nb, K, N, a.data<float>(), b.data<float>(), out.data<float>(), &c.node)) {
    c.outputs[0] = std::move(out);
    return;
  }
#endif
  HP_DISPATCH_FLOAT(a.dtype(), {
    const T *pa = a.data<T>(); const T *pb = b.data<T>(); T *po = out.data<T>();
    if (nb == 1) gemm<T>(false, false, M, N, K, T(1), pa, K, pb, N, T(0), po, N);
    else if (bb.empty()) // fold the batch into M
      gemm<T>(false, false, M * nb, N, K, T(1), pa, K, pb, N, T(0), po, N);
    else
      forEachBroadcast2(batch, sa, sb, [&](int64_t i, int64_t oa, int64_t ob) {
        gemm<T>(false, false, M, N, K, T(1), pa + oa * M * K, K, pb + ob * K * N, N, T(0), po + i * M * N, N);
      });
  });
  c.outputs[0] = std::move(out);
}

void gemmKernel(KernelContext &c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  bool ta = c.node.getInt("transA", 0), tb = c.node.getInt("transB", 0);
  if (a.rank() != 2 || b.rank() != 2 || a.dtype() != b.dtype() || (c.hasInput(2) && c.in(2).dtype() != a.dtype()))
    throw std::runtime_error("Gemm needs 2-D A and B of one element type, not " + a.describe() + " and " + b.describe());
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  if ((tb ? b.dim(1) : b.dim(0)) != K)
    throw std::runtime_error("Gemm shapes " + a.describe() + " and " + b.describe() + " do not match (transA " +
                             std::to_string(ta) + ", transB " + std::to_string(tb) + ")");
  double alpha = c.node.getFloat("alpha", 1.0f), beta = c.node.getFloat("beta", 1.0f);
  Tensor out(a.dtype(), {M, N});
  HP_DISPATCH_FLOAT(a.dtype(), {
    T *po = out.data<T>();
    bool hasC = c.hasInput(2) && beta != 0;
    if (hasC) {
      const Tensor &cc = c.in(2);
      Tensor bc = binaryBroadcast<T, T, T>(out, cc, out.dtype(), [](T, T y) { return y; });
      std::memcpy(po, bc.raw(), out.nbytes());
    }
    gemm<T>(ta, tb, M, N, K, static_cast<T>(alpha), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1),
            hasC ? static_cast<T>(beta) : T(0), po, N);
  });
  c.outputs[0] = std::move(out);
}


void conv(KernelContext &c) {
  const Tensor &x = c.in(0), &wt = c.in(1);
  auto ks = c.node.getInts("kernel_shape", std::vector<int64_t>(wt.shape().begin() + std::min<int64_t>(2, wt.rank()), wt.shape().end()));
  checkConvOperands(ops::names::Conv, x, wt, c.node.getInt("group", 1), ks, false, c.hasInput(2) ? &c.in(2) : nullptr);
  int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0), G = c.node.getInt("group", 1);
  Window w = makeWindow(c.node, spatialOf(x), ks, false);
  size_t r = w.in.size();
  int64_t Cg = C / G, Mg = M / G, kSize = shapeNumel(w.kernel), inSize = shapeNumel(w.in), outSize = shapeNumel(w.out);
  if (wt.dim(1) != Cg) throw std::runtime_error("Conv weight " + wt.describe() + " does not match input " + x.describe() + " with group " + std::to_string(G));
  std::vector<int64_t> outShape = {N, M};
  outShape.insert(outShape.end(), w.out.begin(), w.out.end());
  Tensor out(x.dtype(), outShape);
  // Load-time fusion (Executor): + residual (input 3) and/or Relu after.
  const bool postSum = c.node.getInt("__hetplan_post_sum", 0) != 0 && c.hasInput(3);
  const bool postRelu = c.node.getInt("__hetplan_post_relu", 0) != 0;
  auto finish = [&](Tensor y) {
    if (postSum) {
      const Tensor &res = c.in(3);
      if (res.dtype() != y.dtype()) throw std::runtime_error("fused Sum: mixed element types");
      HP_DISPATCH_FLOAT(y.dtype(), y = binaryBroadcast<T, T, T>(y, res, y.dtype(), [](T a, T b) { return a + b; }));
    }
    if (postRelu)
      HP_DISPATCH_FLOAT(y.dtype(), {
        T *p = y.data<T>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = p[i] < T(0) ? T(0) : p[i];
      });
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
    // constants) are immutable: trained parameters (owned copies, updated
    // in place) are reordered every call.
    const void *weightsKey = wt.isView() ? static_cast<const void *>(&c.node) : nullptr;
    bool sumInPrim = postSum && c.in(3).shape() == outShape && c.in(3).dtype() == DType::Float32;
    cs.postSum = sumInPrim;
    cs.postRelu = postRelu && (sumInPrim || !postSum);
    if (onednn::conv(cs, x.data<float>(), wt.data<float>(), bias, out.data<float>(), weightsKey,
                     sumInPrim ? c.in(3).data<float>() : nullptr)) {
      if ((!postSum || sumInPrim) && (!postRelu || cs.postRelu)) c.outputs[0] = std::move(out);
      else finish(std::move(out));
      return;
    }
  }
#endif
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
    const void *weightsKey = wt.isView() ? static_cast<const void *>(&c.node) : nullptr;
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

void pool(KernelContext &c, bool isMax) {
  const Tensor &x = c.in(0);
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
#ifdef HETPLAN_HAVE_DNNL
  // float32 without Indices, dilations or ceil_mode: oneDNN's pooling.
  bool dilated = false;
  for (int64_t d : w.dil) dilated = dilated || d != 1;
  if (x.dtype() == DType::Float32 && !wantIdx && !dilated && !nd.getInt("ceil_mode", 0) && r >= 1 && r <= 3 &&
      out.numel() > 0) {
    onednn::PoolShape ps{x.shape(), outShape, w.kernel, w.stride, w.padBegin, w.padEnd};
    auto kind = isMax ? onednn::PoolKind::Max
                      : includePad ? onednn::PoolKind::AvgIncludePad : onednn::PoolKind::AvgExcludePad;
    if (onednn::pool(ps, kind, x.data<float>(), out.data<float>())) {
      c.outputs[0] = std::move(out);
      return;
    }
  }
#endif
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

void layerNorm(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t axis = normAxis(c.node.getInt("axis", -1), x.rank());
  double eps = c.node.getFloat("epsilon", 1e-5f);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(i);
  Tensor out(x.dtype(), x.shape());
  std::vector<int64_t> statShape = x.shape();
  for (int64_t i = axis; i < x.rank(); ++i) statShape[i] = 1;
  DType statType = static_cast<DType>(c.node.getInt("stash_type", 1));
  Tensor meanT(statType == DType::Float64 ? DType::Float64 : x.dtype(), statShape), invT(meanT.dtype(), statShape);
  bool floatDone = false;
  HP_DISPATCH_FLOAT(x.dtype(), {
    Tensor scale = c.in(1);
    for (size_t i = 1; i < 3; ++i)
      if (c.hasInput(i) && (c.in(i).dtype() != x.dtype() ||
                            broadcastShapes(c.in(i).shape(), std::vector<int64_t>(x.shape().begin() + axis, x.shape().end())) !=
                                std::vector<int64_t>(x.shape().begin() + axis, x.shape().end())))
        throw std::runtime_error("LayerNormalization input " + std::to_string(i) + " " + c.in(i).describe() +
                                 " does not broadcast to the normalized dims of " + x.describe());
    Tensor sb = binaryBroadcast<T, T, T>(Tensor(x.dtype(), std::vector<int64_t>(x.shape().begin() + axis, x.shape().end())), scale, x.dtype(), [](T, T y) { return y; });
    Tensor bb;
    if (c.hasInput(2)) bb = binaryBroadcast<T, T, T>(Tensor(x.dtype(), sb.shape()), c.in(2), x.dtype(), [](T, T y) { return y; });
    if constexpr (std::is_same_v<T, float>) {
      if (meanT.dtype() == DType::Float32 && inner > 0) { // float statistics: vectorised rows
        const float *ps = sb.data<float>(), *pbias = bb.defined() ? bb.data<float>() : nullptr;
        float *pm = meanT.data<float>(), *pi = invT.data<float>();
        parallelFor(outer, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
          for (int64_t o = lo; o < hi; ++o)
            fastmath::layerNormRow(x.data<float>() + o * inner, out.data<float>() + o * inner, inner, ps, pbias,
                                   static_cast<float>(eps), pm + o, pi + o);
        });
        floatDone = true;
      }
    }
    if (!floatDone) parallelFor(outer, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      const T *px = x.data<T>() + o * inner; T *po = out.data<T>() + o * inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mean += px[i];
      mean /= inner;
      for (int64_t i = 0; i < inner; ++i) var += (px[i] - mean) * (px[i] - mean);
      var /= inner;
      double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < inner; ++i)
        po[i] = static_cast<T>((px[i] - mean) * inv * sb.data<T>()[i] + (bb.defined() ? bb.data<T>()[i] : T(0)));
      HP_DISPATCH_FLOAT(meanT.dtype(), { meanT.data<T>()[o] = static_cast<T>(mean); invT.data<T>()[o] = static_cast<T>(inv); });
    }
    });
  });
  c.outputs[0] = std::move(out);
  if (c.numOutputs() > 1) c.outputs[1] = std::move(meanT);
  if (c.numOutputs() > 2) c.outputs[2] = std::move(invT);
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
  registerKernel(ops::names::MatMul, {matmul, nullptr, kFloatTypes});
  registerKernel(ops::names::Gemm, {gemmKernel, nullptr, kFloatTypes});
  registerKernel(ops::names::Conv, {conv, nullptr, kFloatTypes});
  registerKernel("ConvTranspose", {convTranspose, nullptr, kFloatTypes});
  registerKernel("MaxPool", {[](KernelContext &c) { pool(c, true); }, poolCheck, kFloatTypes});
  registerKernel("AveragePool", {[](KernelContext &c) { pool(c, false); }, poolCheck, kFloatTypes});
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
  registerKernel(ops::names::LayerNormalization, {layerNorm, nullptr, kFloatTypes});
  registerKernel("InstanceNormalization", {instanceNorm, nullptr, kFloatTypes});
  registerKernel("LRN", {lrn, nullptr, kFloatTypes});
}

} // namespace hetplan::runtime::cpu
