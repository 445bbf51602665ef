//===- MatMul.cpp - MatMul and Gemm: forward, backward --------------------===//
//
// The forward kernels (oneDNN with packed constant weights where built,
// else the GEMM of Gemm.h), MatMul's shape (Geometry.h's matmulShape, the
// op table's rule for the output dims), the float MatMul the quantized
// variants run (OpKernels.h), and the backward kernels.
//
//===----------------------------------------------------------------------===//
#include "ElementwiseChain.h"
#include "Gemm.h"
#include "Geometry.h"
#include "KernelUtil.h"
#include "OpKernels.h"
#include "../../train/GradUtil.h"
#ifdef HETPLAN_HAVE_DNNL
#include "Dnnl.h"
#endif

#include <stdexcept>
#include "ops/OpTable.h"

namespace hetplan::runtime::cpu {

MatMulShape matmulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  MatMulShape m;
  auto as = a, bs = b;
  m.aVec = as.size() == 1;
  m.bVec = bs.size() == 1;
  if (m.aVec) as.insert(as.begin(), 1);
  if (m.bVec) bs.push_back(1);
  if (as.size() < 2 || bs.size() < 2) throw std::runtime_error("MatMul of scalars");
  m.M = as[as.size() - 2];
  m.K = as.back();
  m.N = bs.back();
  if (bs[bs.size() - 2] != m.K)
    throw std::runtime_error("MatMul shapes " + shapeString(a) + " and " + shapeString(b) + " do not match");
  m.aBatch.assign(as.begin(), as.end() - 2);
  m.bBatch.assign(bs.begin(), bs.end() - 2);
  m.batch = broadcastShapes(m.aBatch, m.bBatch);
  // The output's dims by the op table's rule, the one the compiler plans with.
  std::string why;
  auto out = ops::matMulShape(a, b, why);
  if (!out) throw std::runtime_error("MatMul shapes " + shapeString(a) + " and " + shapeString(b) + ": " + why);
  m.out = std::move(*out);
  return m;
}

namespace {

/// The fused node's bias (input 2, N values, added to every row) before
/// the elementwise program (fuseMatMulChain).
constexpr const char kBiasAdd[] = "__hetplan_bias_add";

void matmul(KernelContext &c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  if (a.dtype() != b.dtype()) throw std::runtime_error("MatMul of " + a.describe() + " and " + b.describe() + ": element types differ");
  MatMulShape ms = matmulShape(a.shape(), b.shape());
  int64_t M = ms.M, K = ms.K, N = ms.N;
  const auto &ab = ms.aBatch, &bb = ms.bBatch, &batch = ms.batch;
  Tensor out = Tensor::uninitialized(a.dtype(), ms.out); // (every path writes all of it)
  int64_t nb = shapeNumel(batch);
  auto sa = broadcastStrides(ab, batch), sb = broadcastStrides(bb, batch);
  // Load-time fusion: + bias, then an elementwise chain.
  const Tensor *bias = c.node.getInt(kBiasAdd, 0) && c.hasInput(2) ? &c.in(2) : nullptr;
  if (bias && (bias->dtype() != a.dtype() || bias->numel() != N))
    throw std::runtime_error(c.node.describe() + ": fused bias " + bias->describe() + " for " + std::to_string(N) + " columns");
  EwProgram post;
  const bool postChain = hasEwProgram(c.node);
  if (postChain && !decodeEwProgram(c.node, post))
    throw std::runtime_error(c.node.describe() + ": not a fused MatMul of this hetplan");
  // The bias and the chain in one pass over the rows, as the unfused Add
  // and chain compute them (bit for bit: plans that cut a chain and plans
  // that do not give the same values).
  auto finish = [&]() {
    if (bias || postChain)
      HP_DISPATCH_FLOAT(a.dtype(), {
        T *po = out.data<T>();
        const T *pbias = bias ? bias->data<T>() : nullptr;
        parallelFor(M * nb, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, N)), [&](int64_t lo, int64_t hi) {
          T *rows = po + lo * N;
          if (pbias)
            for (int64_t r = 0; r < hi - lo; ++r)
              for (int64_t j = 0; j < N; ++j) rows[r * N + j] = rows[r * N + j] + pbias[j];
          if (postChain) runEwProgramSerial(post, rows, rows, (hi - lo) * N);
        });
      });
    if (postChain && post.constRank > out.rank()) { // the chain's constants widen the shape
      std::vector<int64_t> shape = out.shape();
      shape.insert(shape.begin(), post.constRank - out.rank(), 1);
      out = out.reshaped(shape);
    }
    c.outputs[0] = std::move(out);
  };
#ifdef HETPLAN_HAVE_DNNL
  // Constant 2-D weights (a view of the model file, immutable): oneDNN matmul
  // with the weights packed once per node; [B, S, K] activations as [B*S, K].
  if (a.dtype() == DType::Float32 && b.rank() == 2 && b.isView() && !isSmallGemm(M * nb, N, K) &&
      onednn::matmulConstWeights(M * nb, K, N, a.data<float>(), b.data<float>(), out.data<float>(), &c.node)) {
    finish();
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
  finish();
}

/// A MatMul with constant 2-D float32 weights whose output only an Add of
/// a constant bias of shape [N] reads, and the elementwise
/// chain after it (ElementwiseChain.h): one node, the bias and the chain
/// one pass over the product's rows while they are in cache.
bool fuseMatMulChain(const FusionGraph &g, size_t idx, FusedChain &f) {
  const Node &mm = g.model.nodes[idx];
  if (mm.inputs.size() != 2 || mm.outputs.size() != 1 || mm.inputs[0].empty()) return false;
  const Tensor *w = g.constant(mm.inputs[1], f.deps);
  if (!w || w->rank() != 2) return false;
  const int64_t N = w->dim(1);
  const Node *add = g.soleReader(mm.outputs[0]);
  if (!add || add->opType != "Add" || add->inputs.size() != 2 || add->outputs.size() != 1) return false;
  const std::string &other = add->inputs[0] == mm.outputs[0] ? add->inputs[1] : add->inputs[0];
  if (other == mm.outputs[0]) return false;
  const Tensor *bias = g.constant(other, f.deps);
  if (!bias || bias->numel() != N || bias->rank() != 1) return false; // (a wider bias would widen the output)
  f.members = {idx, g.producer.at(add->outputs[0])};
  f.intermediates = {mm.outputs[0]};
  f.node = mm;
  f.node.name = mm.name + "+fused";
  f.node.inputs = {mm.inputs[0], mm.inputs[1], other};
  Attribute yes;
  yes.kind = Attribute::Int;
  yes.i = 1;
  f.node.attrs[kBiasAdd] = yes;
  std::string last = add->outputs[0];
  FusedChain chain;
  EwProgram prog;
  std::string out;
  if (growElementwiseChain(g, last, g.position[idx], SIZE_MAX, true, 1, prog, chain, out)) {
    encodeEwProgram(prog, f.node);
    f.members.insert(f.members.end(), chain.members.begin(), chain.members.end());
    f.intermediates.insert(f.intermediates.end(), chain.intermediates.begin(), chain.intermediates.end());
    f.deps.insert(chain.deps.begin(), chain.deps.end());
    last = out;
  }
  f.node.outputs = {last};
  return true;
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

} // namespace

void requireMatMulOperands(const Tensor &a, const Tensor &b) {
  if (a.rank() < 1 || b.rank() < 1) throw std::runtime_error("MatMul operands must have rank >= 1");
}

Tensor runFloatMatMul(const KernelContext &c, const Tensor &a, const Tensor &b) {
  return runKernelOn(matmul, c, {&a, &b});
}

void registerMatMulKernels() {
  registerKernel("MatMul", {matmul, nullptr, kFloatTypes});
  registerFusion("MatMul", fuseMatMulChain);
  registerKernel("Gemm", {gemmKernel, nullptr, kFloatTypes});
}

} // namespace hetplan::runtime::cpu

namespace hetplan::runtime::train {
namespace {

using cpu::gemm; // oneDNN / OpenBLAS / naive, as the forward kernels

// Y[batch, M, N] = A[batch_a, M, K] x B[batch_b, K, N] (batch dims broadcast):
// dA = dY B^T, dB = A^T dY, summed over the batch positions each one was
// broadcast to.
void matmulGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  bool wa = wants(c, 0), wb = wants(c, 1);
  if (!wa && !wb) return;
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor dy = outGrad(c, 0, a.dtype());
  if (!dy.defined()) return;
  auto as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  auto batch = broadcastShapes(ab, bb);
  int64_t nb = shapeNumel(batch), na = shapeNumel(ab), nB = shapeNumel(bb);
  Tensor ga, gb;
  if (wa) ga = Tensor(a.dtype(), a.shape());
  if (wb) gb = Tensor(b.dtype(), b.shape());
  HP_DISPATCH_FLOAT(a.dtype(), {
    const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = dy.data<T>();
    T *pga = wa ? ga.data<T>() : nullptr, *pgb = wb ? gb.data<T>() : nullptr;
    if (nB == 1 && na == nb) { // B shared by every batch: fold the batch into M
      if (pga) gemm<T>(false, true, nb * M, K, N, T(1), pg, N, pb, N, T(0), pga, K);
      if (pgb) gemm<T>(true, false, K, N, nb * M, T(1), pa, K, pg, N, T(0), pgb, N);
    } else {
      cpu::forEachBroadcast2(batch, broadcastStrides(ab, batch), broadcastStrides(bb, batch),
                             [&](int64_t i, int64_t oa, int64_t ob) {
                               const T *gi = pg + i * M * N;
                               if (pga) gemm<T>(false, true, M, K, N, T(1), gi, N, pb + ob * K * N, N, T(1), pga + oa * M * K, K);
                               if (pgb) gemm<T>(true, false, K, N, M, T(1), pa + oa * M * K, K, gi, N, T(1), pgb + ob * K * N, N);
                             });
    }
  });
  if (wa) c.inputGrads[0] = std::move(ga);
  if (wb) c.inputGrads[1] = std::move(gb);
}

// Y = alpha op(A) op(B) + beta C.
void gemmGrad(GradientContext &c) {
  c.inputGrads.resize(c.inputs.size());
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor dy = outGrad(c, 0, a.dtype());
  if (!dy.defined()) return;
  bool ta = c.node.getInt("transA", 0), tb = c.node.getInt("transB", 0);
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  double alpha = c.node.getFloat("alpha", 1.0f), beta = c.node.getFloat("beta", 1.0f);
  HP_DISPATCH_FLOAT(a.dtype(), {
    const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = dy.data<T>();
    T al = static_cast<T>(alpha);
    if (wants(c, 0)) {
      Tensor ga(a.dtype(), a.shape());
      if (!ta) gemm<T>(false, !tb, M, K, N, al, pg, N, pb, b.dim(1), T(0), ga.data<T>(), K); // dY op(B)^T
      else gemm<T>(tb, true, K, M, N, al, pb, b.dim(1), pg, N, T(0), ga.data<T>(), M);       // op(B) dY^T
      c.inputGrads[0] = std::move(ga);
    }
    if (wants(c, 1)) {
      Tensor gb(b.dtype(), b.shape());
      if (!tb) gemm<T>(!ta, false, K, N, M, al, pa, a.dim(1), pg, N, T(0), gb.data<T>(), N); // op(A)^T dY
      else gemm<T>(true, ta, N, K, M, al, pg, N, pa, a.dim(1), T(0), gb.data<T>(), K);       // dY^T op(A)
      c.inputGrads[1] = std::move(gb);
    }
    if (wants(c, 2)) {
      Tensor gc = reduceGradToShape(dy, c.in(2).shape());
      T *p = gc.data<T>();
      for (int64_t i = 0; i < gc.numel(); ++i) p[i] = static_cast<T>(beta * p[i]);
      c.inputGrads[2] = std::move(gc);
    }
  });
}

} // namespace

void registerMatMulGradients() {
  registerGradient("MatMul", {matmulGrad, nullptr, {}});
  registerGradient("Gemm", {gemmGrad, nullptr, {}});
}

} // namespace hetplan::runtime::train
