//===- CudaLinalg.cpp - CUDA kernels: MatMul, Gemm, Conv, Softmax, LayerNormalization ===//
//
// The linalg family's device kernels (cuBLAS/cuBLASLt/cuDNN or the
// hand-written kernels of CudaKernels.cu): forward, backward and the cases
// left to the host, registered by op type into the CUDA kernel registry
// (CudaExecutor::Impl::deviceKernels); the fusion patterns over these ops
// (cudafuse::fusionPatterns) and the fused groups' runs (CudaFusion.h) too.
//
//===----------------------------------------------------------------------===//
#include "CudaExecutorImpl.h"
#include "CudaSweep.h"
#include "../cpu/kernels/Geometry.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <stdexcept>

namespace hetplan::runtime {

using cudak::Bcast;
using cudak::Strided;
using cudart::blasCheck;
using cudart::blasInt;
using cudart::cudaCheck;
using cudart::makeBcast;
using cudart::makeStrided;
using cudart::Sweep;
using cudaexec::deviceCheck;
using cudaexec::makeWindow;
using cudaexec::normAxis;
using cudaexec::stridesOf;

namespace {

// --- what the forward kernels do (deviceCheck) ---

std::string layerNormCheck(const Node &n, const std::vector<DType> &) {
  if (n.getInt("stash_type", 1) != 1)
    return "LayerNormalization stash_type other than float32 is not supported on the CUDA device";
  return "";
}

// --- backward kernels (CudaTraining.cpp's sweep) ---

// Y[batch, M, N] = A[batch_a, M, K] x B[batch_b, K, N]: dA = dY B^T,
// dB = A^T dY, summed over the batch positions each was broadcast to.
std::vector<Tensor> matmulBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(2);
  bool wa = want[0], wb = want[1];
  if ((!wa && !wb) || !sw.hasGrad(n.outputs[0])) return g;
  const Tensor &a = sw.devValue(n.inputs[0]), &b = sw.devValue(n.inputs[1]), &dy = sw.devGrad(n.outputs[0]);
  cpu::MatMulShape ms = cpu::matmulShape(a.shape(), b.shape());
  int64_t M = ms.M, K = ms.K, N = ms.N;
  const std::vector<int64_t> &ab = ms.aBatch, &bb = ms.bBatch, &batch = ms.batch;
  int64_t nb = shapeNumel(batch), na = shapeNumel(ab), nB = shapeNumel(bb);
  Tensor ga, gb;
  if (wa) ga = sw.device().zeros(DType::Float32, a.shape());
  if (wb) gb = sw.device().zeros(DType::Float32, b.shape());
  if (M > 0 && N > 0 && K > 0 && nb > 0) {
    const float *pa = Sweep::fp(a), *pb = Sweep::fp(b), *pg = Sweep::fp(dy);
    float *pga = wa ? Sweep::fp(ga) : nullptr, *pgb = wb ? Sweep::fp(gb) : nullptr;
    if (nB == 1 && na == nb) { // B shared by every batch: fold the batch into M
      if (pga) sw.device().rowGemm(false, true, nb * M, K, N, 1.f, pg, N, pb, N, 0.f, pga, K);
      if (pgb) sw.device().rowGemm(true, false, K, N, nb * M, 1.f, pa, K, pg, N, 0.f, pgb, N);
    } else if (na == nb && nB == nb) { // one A and one B per batch position
      if (pga) sw.device().rowGemmBatched(false, true, M, K, N, 1.f, pg, N, M * N, pb, N, K * N, 0.f, pga, K, M * K, nb);
      if (pgb) sw.device().rowGemmBatched(true, false, K, N, M, 1.f, pa, K, M * K, pg, N, M * N, 0.f, pgb, N, K * N, nb);
    } else { // partial broadcasts: one GEMM per batch position, summed (beta 1)
      auto stA = broadcastStrides(ab, batch), stB = broadcastStrides(bb, batch);
      for (int64_t i = 0; i < nb; ++i) {
        auto [oa, ob] = cpu::batchOffsets(i, batch, stA, stB);
        const float *gi = pg + i * M * N;
        if (pga) sw.device().rowGemm(false, true, M, K, N, 1.f, gi, N, pb + ob * K * N, N, 1.f, pga + oa * M * K, K);
        if (pgb) sw.device().rowGemm(true, false, K, N, M, 1.f, pa + oa * M * K, K, gi, N, 1.f, pgb + ob * K * N, N);
      }
    }
  }
  if (wa) g[0] = std::move(ga);
  if (wb) g[1] = std::move(gb);
  return g;
}

// Y = alpha op(A) op(B) + beta C.
std::vector<Tensor> gemmBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  if (!sw.hasGrad(n.outputs[0])) return g;
  const Tensor &a = sw.devValue(n.inputs[0]), &b = sw.devValue(n.inputs[1]), &dy = sw.devGrad(n.outputs[0]);
  bool ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  float alpha = n.getFloat("alpha", 1.0f), beta = n.getFloat("beta", 1.0f);
  const float *pa = Sweep::fp(a), *pb = Sweep::fp(b), *pg = Sweep::fp(dy);
  bool work = M > 0 && N > 0 && K > 0;
  if (want[0]) {
    Tensor ga = sw.device().zeros(DType::Float32, a.shape());
    if (work) {
      if (!ta) sw.device().rowGemm(false, !tb, M, K, N, alpha, pg, N, pb, b.dim(1), 0.f, Sweep::fp(ga), K); // dY op(B)^T
      else sw.device().rowGemm(tb, true, K, M, N, alpha, pb, b.dim(1), pg, N, 0.f, Sweep::fp(ga), M);       // op(B) dY^T
    }
    g[0] = std::move(ga);
  }
  if (want[1]) {
    Tensor gb = sw.device().zeros(DType::Float32, b.shape());
    if (work) {
      if (!tb) sw.device().rowGemm(!ta, false, K, N, M, alpha, pa, a.dim(1), pg, N, 0.f, Sweep::fp(gb), N); // op(A)^T dY
      else sw.device().rowGemm(true, ta, N, K, M, alpha, pg, N, pa, a.dim(1), 0.f, Sweep::fp(gb), K);       // dY^T op(A)
    }
    g[1] = std::move(gb);
  }
  if (want.size() > 2 && want[2]) g[2] = sw.reduceTo(dy, sw.host(n.inputs[2]).shape(), beta);
  return g;
}

// Y = (X - mean) * inv * scale + B per row of the normalized dims; outputs 1
// and 2 (Mean, InvStdDev) may have gradients of their own.
std::vector<Tensor> layerNormBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  const Tensor &xh = sw.host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", -1), xh.rank());
  double eps = n.getFloat("epsilon", 1e-5f);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < xh.rank(); ++i) (i < axis ? outer : inner) *= xh.dim(i);
  auto gradOf = [&](size_t o) -> const float * {
    if (o >= n.outputs.size() || n.outputs[o].empty() || !sw.hasGrad(n.outputs[o])) return nullptr;
    const Tensor &t = sw.devGrad(n.outputs[o]);
    if (o > 0 && t.numel() != outer)
      throw std::runtime_error("LayerNormalization backward: statistics gradient " + t.describe());
    return Sweep::fp(t);
  };
  const float *dy = gradOf(0), *dMean = gradOf(1), *dInv = gradOf(2);
  auto w = [&](size_t i) { return i < want.size() && want[i]; };
  bool wx = w(0), ws = w(1) && dy, wb = w(2) && dy;
  if (!wx && !ws && !wb) return g;
  const Tensor &x = sw.devValue(n.inputs[0]), &scale = sw.devValue(n.inputs[1]);
  Tensor mean = sw.device().alloc(DType::Float64, {outer}), inv = sw.device().alloc(DType::Float64, {outer});
  Tensor dx;
  if (wx) dx = sw.device().alloc(DType::Float32, x.shape());
  cudaCheck(cudak::layerNormGrad(Sweep::fp(x), Sweep::fp(scale), dy, dMean, dInv, wx ? Sweep::fp(dx) : nullptr, mean.data<double>(),
                                 inv.data<double>(), outer, inner, eps, sw.device().stream),
            "LayerNormalization gradient");
  if (wx) g[0] = std::move(dx);
  if (ws || wb) {
    std::vector<int64_t> innerShape(xh.shape().begin() + axis, xh.shape().end());
    Tensor ds, db;
    if (ws) ds = sw.device().alloc(DType::Float32, innerShape);
    if (wb) db = sw.device().alloc(DType::Float32, innerShape);
    cudaCheck(cudak::layerNormParamGrad(Sweep::fp(x), dy, mean.data<double>(), inv.data<double>(), ws ? Sweep::fp(ds) : nullptr,
                                        wb ? Sweep::fp(db) : nullptr, outer, inner, sw.device().stream),
              "LayerNormalization scale/bias gradient");
    if (ws) g[1] = std::move(ds);
    if (wb) g[2] = std::move(db);
  }
  return g;
}

std::vector<Tensor> softmaxBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  const std::string &out0 = n.outputs.at(0);
  if (!(0 < want.size() && want[0]) || !sw.hasGrad(out0)) return g;
  const Tensor &x = sw.host(n.inputs[0]);
  int64_t outer, len, inner;
  train::softmaxDims(n, sw.model().opset(""), x.shape(), outer, len, inner);
  Tensor dx = sw.device().alloc(DType::Float32, x.shape());
  cudaCheck(cudak::softmaxGrad(Sweep::fp(sw.devValue(out0)), Sweep::fp(sw.devGrad(out0)), Sweep::fp(dx), outer, len,
                               inner, n.opType == "LogSoftmax", sw.device().stream),
            "Softmax gradient");
  g[0] = std::move(dx);
  return g;
}

std::string layerNormBackwardCheck(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  const Tensor &x = sw.host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", -1), x.rank());
  std::vector<int64_t> innerShape(x.shape().begin() + axis, x.shape().end());
  if (n.inputs.size() < 2 || n.inputs[1].empty() || sw.host(n.inputs[1]).shape() != innerShape)
    return "scale not of the normalized shape";
  if (want.size() > 2 && want[2] && sw.host(n.inputs[2]).shape() != innerShape) return "bias not of the normalized shape";
  return "";
}

std::string gemmBackwardCheck(Sweep &sw, const Node &n, const std::vector<bool> &) {
  return sw.host(n.inputs[0]).rank() != 2 || sw.host(n.inputs[1]).rank() != 2 ? "Gemm not 2-D" : "";
}

} // namespace

void CudaExecutor::Impl::registerLinalgKernels(OpRegistry<DeviceKernel> &r) {
  DeviceKernel matmul{&Impl::runMatMul}, gemm{&Impl::runGemm}, softmax{&Impl::runSoftmax},
      layerNorm{&Impl::runLayerNorm};
  matmul.backward = matmulBackward;
  matmul.backwardReads = Reads::Inputs;
  gemm.backward = gemmBackward;
  gemm.backwardCheck = gemmBackwardCheck;
  gemm.backwardReads = Reads::Inputs; // A and B (C: its shape)
  softmax.backward = softmaxBackward;
  softmax.backwardReads = Reads::Output;
  layerNorm.check = layerNormCheck;
  layerNorm.backward = layerNormBackward;
  layerNorm.backwardCheck = layerNormBackwardCheck;
  layerNorm.backwardReads = Reads::Inputs; // X and the scale (statistics recomputed)
  r.add("MatMul", matmul);
  r.add("Gemm", gemm);
  r.add("Conv", DeviceKernel{&Impl::runConv});
  r.add("Softmax", softmax);
  r.add("LogSoftmax", softmax);
  r.add("LayerNormalization", layerNorm);
}

void CudaExecutor::Impl::runSoftmax(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  int64_t r = x.rank();
  bool legacy = opset < 13;
  int64_t axis = normAxis(n.getInt("axis", legacy ? 1 : -1), r);
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  if (legacy) for (int64_t i = axis; i < r; ++i) len *= x.dim(i);
  else {
    len = r ? x.dim(axis) : 1;
    for (int64_t i = axis + 1; i < r; ++i) inner *= x.dim(i);
  }
  Tensor y = alloc(DType::Float32, x.shape());
  launch(cudak::softmax(x.data<float>(), y.data<float>(), outer, len, inner, op == "LogSoftmax", stream));
  outs[0].dev = y;
  return;
}

void CudaExecutor::Impl::runLayerNorm(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  int64_t axis = normAxis(n.getInt("axis", -1), x.rank());
  float eps = n.getFloat("epsilon", 1e-5f);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.dim(i);
  std::vector<int64_t> normShape(x.shape().begin() + axis, x.shape().end());
  auto expanded = [&](const Tensor &t) { // scale/bias broadcast to the normalized shape
    if (t.shape() == normShape) return t;
    Tensor e = alloc(DType::Float32, normShape);
    launch(cudak::stridedCopy(t.raw(), e.raw(), 4, makeStrided(normShape, broadcastStrides(t.shape(), normShape), 0), stream));
    return e;
  };
  Tensor scale = expanded(D(1)), bias = has(2) ? expanded(D(2)) : Tensor();
  std::vector<int64_t> statShape = x.shape();
  for (int64_t i = axis; i < x.rank(); ++i) statShape[i] = 1;
  Tensor y = alloc(DType::Float32, x.shape()), mean, inv;
  if (outs.size() > 1 && !n.outputs[1].empty()) mean = alloc(DType::Float32, statShape);
  if (outs.size() > 2 && !n.outputs[2].empty()) inv = alloc(DType::Float32, statShape);
  launch(cudak::layerNorm(x.data<float>(), scale.data<float>(), bias.defined() ? bias.data<float>() : nullptr,
                          y.data<float>(), mean.defined() ? mean.data<float>() : nullptr,
                          inv.defined() ? inv.data<float>() : nullptr, outer, inner, eps, stream));
  outs[0].dev = y;
  if (mean.defined()) outs[1].dev = mean;
  if (inv.defined()) outs[2].dev = inv;
  return;
}

void CudaExecutor::Impl::runMatMul(Call &c) {
  HP_DEVICE_CALL(c);
  return matmul(D(0), D(1), outs[0]);
}

void CudaExecutor::Impl::runGemm(Call &c) {
  HP_DEVICE_CALL(c);
  return gemm(n, D(0), D(1), has(2) ? &D(2) : nullptr, outs[0]);
}

void CudaExecutor::Impl::runConv(Call &c) {
  HP_DEVICE_CALL(c);
  return conv(n, D(0), D(1), has(2) ? &D(2) : nullptr, outs[0]);
}

void CudaExecutor::Impl::matmul(const Tensor &a, const Tensor &b, Val &out) {
  cpu::MatMulShape ms = cpu::matmulShape(a.shape(), b.shape());
  int64_t M = ms.M, K = ms.K, N = ms.N;
  const auto &ab = ms.aBatch, &bb = ms.bBatch, &batch = ms.batch;
  Tensor o = alloc(DType::Float32, ms.out);
  int64_t nb = shapeNumel(batch);
  if (o.numel() == 0) { out.dev = o; return; }
  if (K == 0) {
    cudaCheck(cudaMemsetAsync(o.raw(), 0, o.nbytes(), stream), "cudaMemsetAsync");
    out.dev = o;
    return;
  }
  const float one = 1.f, zero = 0.f;
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float *po = o.data<float>();
  int m = blasInt(M, "MatMul"), n = blasInt(N, "MatMul"), k = blasInt(K, "MatMul");
  // A batch operand is either one matrix (stride 0) or a full batch
  // (stride one matrix); anything else (partial broadcast) loops.
  auto strideOf = [&](const std::vector<int64_t> &own, int64_t mat) -> int64_t {
    if (shapeNumel(own) == 1) return 0;
    std::vector<int64_t> padded(batch.size() - own.size(), 1);
    padded.insert(padded.end(), own.begin(), own.end());
    return padded == batch ? mat : -1;
  };
  int64_t sa = strideOf(ab, M * K), sb = strideOf(bb, K * N);
  // Row-major C = A B is column-major C^T = B^T A^T.
  if (sa >= 0 && sb >= 0) {
    sgemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, pb, n, sb, pa, k, sa, &zero, po, n, M * N,
                 blasInt(nb, "MatMul batch"));
  } else {
    auto stA = broadcastStrides(ab, batch), stB = broadcastStrides(bb, batch);
    for (int64_t i = 0; i < nb; ++i) {
      auto [oa, ob] = cpu::batchOffsets(i, batch, stA, stB);
      sgemm(CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, pb + ob * K * N, n, pa + oa * M * K, k, &zero, po + i * M * N, n);
    }
  }
  out.dev = o;
}

void CudaExecutor::Impl::gemm(const Node &nd, const Tensor &a, const Tensor &b, const Tensor *c, Val &out) {
  if (a.rank() != 2 || b.rank() != 2) throw std::runtime_error("Gemm takes 2-D A and B");
  bool ta = nd.getInt("transA", 0), tb = nd.getInt("transB", 0);
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  if ((tb ? b.dim(1) : b.dim(0)) != K)
    throw std::runtime_error("Gemm shapes " + shapeString(a.shape()) + " and " + shapeString(b.shape()) + " do not match");
  float alpha = nd.getFloat("alpha", 1.0f), beta = nd.getFloat("beta", 1.0f);
  Tensor o = alloc(DType::Float32, {M, N});
  bool hasC = c && beta != 0.f;
  if (hasC)
    cudaCheck(cudak::stridedCopy(c->raw(), o.raw(), 4,
                                 makeStrided(o.shape(), broadcastStrides(c->shape(), o.shape()), 0), stream),
              "Gemm bias broadcast");
  else beta = 0.f;
  if (M > 0 && N > 0) {
    if (K == 0 && !hasC) cudaCheck(cudaMemsetAsync(o.raw(), 0, o.nbytes(), stream), "cudaMemsetAsync");
    else if (K > 0)
      sgemm(tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, blasInt(N, "Gemm"), blasInt(M, "Gemm"),
            blasInt(K, "Gemm"), &alpha, b.data<float>(), blasInt(b.dim(1), "Gemm"), a.data<float>(),
            blasInt(a.dim(1), "Gemm"), &beta, o.data<float>(), blasInt(N, "Gemm"));
  }
  out.dev = o;
}

void CudaExecutor::Impl::conv(const Node &nd, const Tensor &x, const Tensor &wt, const Tensor *bias, Val &out) {
  if (x.rank() < 3 || wt.rank() != x.rank()) throw std::runtime_error("Conv takes [N, C, spatial...] input and weight of the same rank");
  int64_t N = x.dim(0), C = x.dim(1), M = wt.dim(0), G = nd.getInt("group", 1);
  if (G <= 0 || C % G || M % G || wt.dim(1) != C / G)
    throw std::runtime_error("Conv weight " + wt.describe() + " does not match input " + x.describe() + " with group " + std::to_string(G));
  std::vector<int64_t> inSp(x.shape().begin() + 2, x.shape().end()), outSp;
  auto ks = nd.getInts("kernel_shape", std::vector<int64_t>(wt.shape().begin() + 2, wt.shape().end()));
  cudak::Window w = makeWindow(nd, inSp, ks, false, outSp);
  int64_t Cg = C / G, Mg = M / G, kSize = shapeNumel(ks), inSize = shapeNumel(inSp), outSize = shapeNumel(outSp);
  std::vector<int64_t> outShape = {N, M};
  outShape.insert(outShape.end(), outSp.begin(), outSp.end());
  Tensor o = alloc(DType::Float32, outShape);
  out.dev = o;
  if (o.numel() == 0) return;
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
  // cuDNN where it expresses the window exactly; im2col + cuBLAS otherwise.
  if (dnn && dnn->conv(x, wt, G, w, convMath, o, [&](size_t bytes) { return alloc(DType::UInt8, {int64_t(bytes)}); })) {
    if (bias) cudaCheck(cudak::addBias(o.data<float>(), bias->data<float>(), N, M, outSize, stream), "bias kernel");
    return;
  }
#endif
  bool pointwise = kSize == 1;
  for (int d = 0; d < w.r; ++d) pointwise = pointwise && w.s[d] == 1 && w.pb[d] == 0 && w.out[d] == w.in[d];
  Tensor col;
  if (!pointwise) col = alloc(DType::Float32, {C * kSize, outSize});
  int64_t Kd = Cg * kSize;
  const float one = 1.f, zero = 0.f;
  for (int64_t n = 0; n < N; ++n) {
    const float *px = x.data<float>() + n * C * inSize;
    const float *pcol = px;
    if (!pointwise) {
      cudaCheck(cudak::im2col(px, col.data<float>(), C, w, stream), "im2col kernel");
      pcol = col.data<float>();
    }
    // per group g: out_g[Mg, outSize] = W_g[Mg, Kd] col_g[Kd, outSize]
    // (column-major: out_g^T = col_g^T W_g^T)
    sgemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, blasInt(outSize, "Conv"), blasInt(Mg, "Conv"), blasInt(Kd, "Conv"), &one,
                 pcol, blasInt(outSize, "Conv"), Kd * outSize, wt.data<float>(), blasInt(Kd, "Conv"), Mg * Kd, &zero,
                 o.data<float>() + n * M * outSize, blasInt(outSize, "Conv"), Mg * outSize, blasInt(G, "Conv"));
  }
  if (bias) cudaCheck(cudak::addBias(o.data<float>(), bias->data<float>(), N, M, outSize, stream), "bias kernel");
}

bool CudaExecutor::Impl::runGemmGroup(const CudaFusion &g, const Lookup &lookup, Val &out) {
  if (!lt) return false;
  const Node &h = model.nodes[g.nodes[0]];
  Val *a = lookup(h.inputs[0]), *b = lookup(h.inputs[1]);
  Val *c = g.bias.empty() ? (h.inputs.size() > 2 ? lookup(h.inputs[2]) : nullptr) : lookup(g.bias);
  if (!a || !b || !c) return false;
  for (Val *v : {a, b, c})
    if (v->dtype() != DType::Float32) return false;
  const std::vector<int64_t> &as = a->shape(), &bs = b->shape();
  cublaslt::GemmBias args;
  std::vector<int64_t> outShape;
  if (h.opType == "MatMul") { // A [..., M, K] flattened to [M', K] times a 2-D B
    if (as.size() < 2 || bs.size() != 2 || as.back() != bs[0]) return false;
    args.K = bs[0];
    args.N = bs[1];
    args.M = args.K ? shapeNumel(as) / args.K : 0;
    args.lda = args.K;
    args.ldb = args.N;
    outShape.assign(as.begin(), as.end() - 1);
    outShape.push_back(args.N);
  } else {
    if (as.size() != 2 || bs.size() != 2) return false;
    args.ta = h.getInt("transA", 0);
    args.tb = h.getInt("transB", 0);
    args.M = args.ta ? as[1] : as[0];
    args.K = args.ta ? as[0] : as[1];
    args.N = args.tb ? bs[0] : bs[1];
    if ((args.tb ? bs[1] : bs[0]) != args.K) return false;
    args.alpha = h.getFloat("alpha", 1.0f);
    args.lda = as[1];
    args.ldb = bs[1];
    outShape = {args.M, args.N};
  }
  if (c->any().numel() != args.N) return false;
  args.gelu = g.kind == CudaFusion::Kind::GemmBiasGelu;
  const Tensor &A = devOf(*a), &B = devOf(*b), &C = devOf(*c);
  Tensor o = alloc(DType::Float32, outShape);
  args.A = A.data<float>();
  args.B = B.data<float>();
  args.bias = C.data<float>();
  args.D = o.data<float>();
  if (!lt->run(args, gemmCompute, stream, [&](size_t bytes) { return scratch(bytes); })) {
    if (!ltNoted)
      std::fprintf(stderr, "hetplan: cuBLASLt has no %s epilogue for %s (M=%lld N=%lld K=%lld); running it unfused\n",
                   args.gelu ? "bias+GELU" : "bias", where(h).c_str(), (long long)args.M, (long long)args.N,
                   (long long)args.K);
    ltNoted = true;
    return false;
  }
  out.dev = o;
  return true;
}

bool CudaExecutor::Impl::runAttentionGroup(const CudaFusion &g, const Lookup &lookup, Val &out) {
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
  if (!sdpa) return false;
  Val *qv = lookup(g.q), *kv = lookup(g.kT), *vv = lookup(g.v), *mv = g.mask.empty() ? nullptr : lookup(g.mask);
  if (!qv || !kv || !vv || (!g.mask.empty() && !mv)) return false;
  for (Val *x : {qv, kv, vv, mv})
    if (x && x->dtype() != DType::Float32) return false;
  size_t r = qv->shape().size();
  if (r < 3 || r > 4 || kv->shape().size() != r || vv->shape().size() != r) return false;
  auto pad4 = [](std::vector<int64_t> s) {
    while (s.size() < 4) s.insert(s.begin(), 1);
    return s;
  };
  std::vector<int64_t> qs = pad4(qv->shape()), ks = pad4(kv->shape()), vs = pad4(vv->shape());
  cudnn::Sdpa a;
  a.Sq = qs[2];
  a.D = qs[3];
  a.Skv = ks[3];
  a.Dv = vs[3];
  if (ks[2] != a.D || vs[2] != a.Skv) return false;
  for (int d = 0; d < 2; ++d) { // batch and heads: equal or broadcast from 1
    int64_t n = std::max({qs[d], ks[d], vs[d]});
    for (int64_t x : {qs[d], ks[d], vs[d]})
      if (x != n && x != 1) return false;
    (d == 0 ? a.B : a.H) = n;
  }
  if (!cudafuse::sdpaHeadDimOk(a.D) || !cudafuse::sdpaHeadDimOk(a.Dv) || a.Sq <= 0 || a.Skv <= 0 || a.B * a.H <= 0)
    return false;
  const std::vector<int64_t> full = {a.B, a.H, a.Sq, a.Skv};
  std::vector<int64_t> ms;
  if (mv) { // the mask may broadcast into the scores, never widen them
    std::vector<int64_t> scores(full.begin() + (4 - r), full.end());
    try {
      if (mv->shape().size() > r || broadcastShapes(scores, mv->shape()) != scores) return false;
    } catch (const std::exception &) {
      return false;
    }
    ms = pad4(mv->shape());
    a.biasB = ms[0] != 1;
    a.biasH = ms[1] != 1;
  }
  a.bf16 = precision == "bf16";
  a.scale = g.scale;
  // float32 -> half, packed (K from the graph's Kᵀ), clamped to the finite
  // range so that -FLT_MAX masks stay finite.
  const float clamp = a.bf16 ? 3.0e38f : 65504.f;
  auto half = [&](Val &src, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides) {
    Tensor h = alloc(a.bf16 ? DType::BFloat16 : DType::Float16, shape);
    cudaCheck(cudak::toHalf(devOf(src).data<float>(), h.raw(), a.bf16, makeStrided(shape, strides, 0), clamp, stream),
              "attention: float32 to half");
    return h;
  };
  Tensor qh = half(*qv, {a.B, a.H, a.Sq, a.D}, broadcastStrides(qs, {a.B, a.H, a.Sq, a.D}));
  auto kst = broadcastStrides(ks, {a.B, a.H, a.D, a.Skv});
  Tensor kh = half(*kv, {a.B, a.H, a.Skv, a.D}, {kst[0], kst[1], kst[3], kst[2]});
  Tensor vh = half(*vv, {a.B, a.H, a.Skv, a.Dv}, broadcastStrides(vs, {a.B, a.H, a.Skv, a.Dv}));
  Tensor bh;
  if (mv) {
    std::vector<int64_t> bshape = {a.biasB ? a.B : 1, a.biasH ? a.H : 1, a.Sq, a.Skv};
    bh = half(*mv, bshape, broadcastStrides(ms, bshape));
    a.bias = bh.raw();
  }
  Tensor oh = alloc(a.bf16 ? DType::BFloat16 : DType::Float16, {a.B, a.H, a.Sq, a.Dv});
  a.q = qh.raw();
  a.k = kh.raw();
  a.v = vh.raw();
  a.o = oh.raw();
  std::string why;
  if (!sdpa->run(a, [&](size_t bytes) { return scratch(bytes); }, &why)) {
    if (!sdpaNoted)
      std::fprintf(stderr, "hetplan: cuDNN fused attention unavailable for %s: %s; running the attention nodes unfused\n",
                   where(model.nodes[g.nodes[0]]).c_str(), why.c_str());
    sdpaNoted = true;
    return false;
  }
  std::vector<int64_t> outShape = {a.B, a.H, a.Sq, a.Dv};
  outShape.erase(outShape.begin(), outShape.begin() + (4 - r));
  Tensor o = alloc(DType::Float32, outShape);
  cudaCheck(cudak::fromHalf(oh.raw(), o.data<float>(), a.bf16, o.numel(), stream), "attention: half to float32");
  out.dev = o;
  return true;
#else
  (void)g;
  (void)lookup;
  (void)out;
  return false;
#endif
}

void CudaExecutor::Impl::runGroupUnfused(const CudaFusion &g, const Lookup &lookup, Val &out) {
  std::map<std::string, Val> inside; // the group's intermediate values
  for (size_t m : g.nodes) {
    const Node &n = model.nodes[m];
    std::vector<Val *> ins;
    std::vector<DType> inTypes;
    for (const auto &s : n.inputs) {
      Val *v = nullptr;
      if (!s.empty()) {
        auto it = inside.find(s);
        v = it != inside.end() ? &it->second : lookup(s);
        if (!v) throw std::runtime_error(where(n) + "value '" + s + "' is missing");
      }
      ins.push_back(v);
      inTypes.push_back(v ? v->dtype() : DType::Undefined);
    }
    std::vector<Val> outs(n.outputs.size());
    try {
      if (std::string dev = deviceCheck(n, inTypes); !dev.empty()) throw std::runtime_error(dev);
      runDevice(n, ins, outs);
    } catch (const std::exception &e) {
      throw std::runtime_error(where(n) + e.what());
    }
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) inside[n.outputs[i]] = std::move(outs[i]);
  }
  out = std::move(inside.at(g.output));
}

// --- fusion patterns (CudaFusion.h), tried in this order ---

namespace cudafuse {

namespace {

/// attention: MatMul(Q, Kᵀ) -> [Mul|Div by a scalar constant] -> [Add mask]
/// -> Softmax(last axis) -> [Cast to float] -> MatMul(., V), at fp16/bf16
/// only, head dims cuDNN's flash attention takes when the shapes are
/// declared (else checked at run time). Tried first, so that its MatMuls
/// are not taken as GEMMs.
void attentionPattern(Matcher &mt, std::vector<CudaFusion> &out) {
  const Model &m = mt.m;
  if (!sdpaPrecision(mt.precision)) return;
  for (size_t idx : mt.order) {
    const Node &qk = m.nodes[idx];
    if (qk.opType != "MatMul" || !mt.usable(idx) || qk.inputs.size() != 2 || !Matcher::unaryOut(qk)) continue;
    CudaFusion f;
    f.kind = CudaFusion::Kind::Attention;
    f.q = qk.inputs[0];
    f.kT = qk.inputs[1];
    f.nodes = {idx};
    std::string cur = qk.outputs[0];
    long r = mt.sole(cur);
    auto advance = [&](long node) {
      f.nodes.push_back(size_t(node));
      cur = m.nodes[size_t(node)].outputs[0];
      return mt.sole(cur);
    };
    if (r >= 0 && (m.nodes[r].opType == "Mul" || m.nodes[r].opType == "Div") && m.nodes[r].inputs.size() == 2 &&
        Matcher::unaryOut(m.nodes[r])) {
      const Node &s = m.nodes[r];
      bool div = s.opType == "Div";
      if (div && s.inputs[0] != cur) continue;
      const std::string &other = s.inputs[0] == cur ? s.inputs[1] : s.inputs[0];
      const Tensor *c = mt.constant(other);
      if (!c || c->numel() != 1 || other == cur) continue;
      double v = c->scalarAsDouble(0);
      if (div && v == 0) continue;
      f.scale = float(div ? 1.0 / v : v);
      r = advance(r);
    }
    if (r >= 0 && m.nodes[r].opType == "Add" && m.nodes[r].inputs.size() == 2 && Matcher::unaryOut(m.nodes[r])) {
      const Node &a = m.nodes[r];
      const std::string &other = a.inputs[0] == cur ? a.inputs[1] : a.inputs[0];
      if (other == cur || other.empty() || !mt.maybeFloat(other)) continue;
      f.mask = other;
      r = advance(r);
    }
    if (r < 0 || m.nodes[r].opType != "Softmax" || !Matcher::unaryOut(m.nodes[r])) continue;
    {
      int64_t axis = m.nodes[r].getInt("axis", mt.opset < 13 ? 1 : -1);
      auto qs = mt.knownShape(f.q);
      if (axis != -1 && !(qs && axis == int64_t(qs->size()) - 1)) continue;
    }
    r = advance(r);
    if (r >= 0 && m.nodes[r].opType == "Cast" && Matcher::unaryOut(m.nodes[r]) &&
        m.nodes[r].getInt("to", 0) == int64_t(DType::Float32))
      r = advance(r);
    if (r < 0 || m.nodes[r].opType != "MatMul" || m.nodes[r].inputs.size() != 2 || !Matcher::unaryOut(m.nodes[r]) ||
        m.nodes[r].inputs[0] != cur || m.nodes[r].inputs[1] == cur)
      continue;
    f.v = m.nodes[r].inputs[1];
    f.nodes.push_back(size_t(r));
    f.output = m.nodes[r].outputs[0];
    bool typesOk = mt.maybeFloat(f.q) && mt.maybeFloat(f.kT) && mt.maybeFloat(f.v);
    auto qs = mt.knownShape(f.q), ks = mt.knownShape(f.kT), vs = mt.knownShape(f.v);
    bool dimsOk = (!qs || (qs->size() >= 3 && sdpaHeadDimOk(qs->back()))) &&
                  (!ks || (ks->size() >= 3 && sdpaHeadDimOk((*ks)[ks->size() - 2]))) &&
                  (!vs || (vs->size() >= 3 && sdpaHeadDimOk(vs->back())));
    if (!typesOk || !dimsOk) continue;
    for (size_t k : f.nodes) mt.taken[k] = 1;
    out.push_back(std::move(f));
  }
}

/// GEMM: MatMul or Gemm -> Add of a 1-D constant bias [-> Gelu
/// approximate="tanh"], or a Gemm whose C is that bias (beta 1).
void gemmBiasPattern(Matcher &mt, std::vector<CudaFusion> &out) {
  const Model &m = mt.m;
  for (size_t idx : mt.order) {
    const Node &g = m.nodes[idx];
    if ((g.opType != "MatMul" && g.opType != "Gemm") || !mt.usable(idx) || g.inputs.size() < 2 || !Matcher::unaryOut(g)) continue;
    if (!mt.maybeFloat(g.inputs[0]) || !mt.maybeFloat(g.inputs[1])) continue;
    // The N the bias must have, when B is a constant (a weight).
    std::optional<int64_t> N;
    if (const Tensor *w = mt.constant(g.inputs[1])) {
      if (w->rank() != 2) continue; // batched weights: plain path
      N = g.opType == "Gemm" && g.getInt("transB", 0) ? w->dim(0) : w->dim(1);
    }
    auto biasOk = [&](const Tensor *b) {
      return b && b->dtype() == DType::Float32 && (b->rank() == 1 || (b->rank() == 2 && b->dim(0) == 1)) &&
             (!N || b->numel() == *N);
    };
    CudaFusion f;
    f.kind = CudaFusion::Kind::GemmBias;
    f.nodes = {idx};
    std::string cur = g.outputs[0];
    bool hasC = g.opType == "Gemm" && g.inputs.size() > 2 && !g.inputs[2].empty();
    if (hasC) {
      if (g.getFloat("beta", 1.f) != 1.f || !biasOk(mt.constant(g.inputs[2]))) continue;
    } else {
      long a = mt.sole(cur);
      if (a < 0 || m.nodes[a].opType != "Add" || m.nodes[a].inputs.size() != 2 || !Matcher::unaryOut(m.nodes[a])) continue;
      const Node &add = m.nodes[a];
      const std::string &other = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
      if (other == cur || !biasOk(mt.constant(other)) || (mt.constant(other)->rank() != 1)) continue;
      f.bias = other;
      f.nodes.push_back(size_t(a));
      cur = add.outputs[0];
    }
    long gl = mt.sole(cur);
    if (gl >= 0 && m.nodes[gl].opType == "Gelu" && Matcher::unaryOut(m.nodes[gl]) &&
        m.nodes[gl].getString("approximate", "none") == "tanh") {
      f.kind = CudaFusion::Kind::GemmBiasGelu;
      f.nodes.push_back(size_t(gl));
      cur = m.nodes[gl].outputs[0];
    }
    f.output = cur;
    for (size_t k : f.nodes) mt.taken[k] = 1;
    out.push_back(std::move(f));
  }
}

} // namespace

const std::vector<FusionPattern> &fusionPatterns() {
  static const std::vector<FusionPattern> patterns = {attentionPattern, gemmBiasPattern};
  return patterns;
}

} // namespace cudafuse

} // namespace hetplan::runtime
