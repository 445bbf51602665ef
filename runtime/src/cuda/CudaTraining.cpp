//===- CudaTraining.cpp - a CUDA rank's BACKWARD and Adam on its GPU -------===//
//
// The device gradients mirror the CPU gradient kernels (runtime/src/train)
// op by op: the same formulas, the same cases, row-major GEMMs through
// Device::rowGemm with cpu::gemm's arguments. Gradients live on the device
// from the seeds' upload to the end of the sweep; forward values are read
// where the FORWARD left them (device-resident values, docs/gpu.md) or
// uploaded once per BACKWARD when a node first reads them, and dropped
// once their producer's gradient ran. A node whose op has no device
// gradient (or whose values are not float32, or whose attributes take a
// case not done here) runs the CPU gradient kernel on host copies
// (train::hostNodeGradient) and its results go back to the device.
//
//===----------------------------------------------------------------------===//

#include "CudaTraining.h"

#include "CudaDevice.h"
#include "CudaKernels.h"
#include "../cpu/kernels/Geometry.h"
#include "../cpu/kernels/ViewParams.h"
#include "../exec/Training.h"
#include "../train/GradUtil.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include "ops/OpTable.h" // ops::names: the spelling of op types kernels register under

namespace hetplan::runtime::cudart {

namespace {

const std::map<std::string, cudak::UnaryGrad> kUnaryGrad = {
    {"Neg", cudak::UnaryGrad::Neg},         {"Sqrt", cudak::UnaryGrad::Sqrt},
    {"Exp", cudak::UnaryGrad::Exp},         {"Log", cudak::UnaryGrad::Log},
    {"Tanh", cudak::UnaryGrad::Tanh},       {"Sigmoid", cudak::UnaryGrad::Sigmoid},
    {"Erf", cudak::UnaryGrad::Erf},         {ops::names::Relu, cudak::UnaryGrad::Relu},
    {"Reciprocal", cudak::UnaryGrad::Reciprocal}, {"Abs", cudak::UnaryGrad::Abs},
    {"Sin", cudak::UnaryGrad::Sin},         {"Cos", cudak::UnaryGrad::Cos},
    {"Softplus", cudak::UnaryGrad::Softplus}, {"LeakyRelu", cudak::UnaryGrad::LeakyRelu},
    {"Elu", cudak::UnaryGrad::Elu},         {"Gelu", cudak::UnaryGrad::Gelu}};
/// Unary ops whose derivative reads the forward output (the CPU's usesY).
const std::set<std::string> kUsesY = {"Sqrt", "Exp", "Tanh", "Sigmoid", "Reciprocal", "Elu"};
/// Gradient dX = dY reshaped (regPassThrough).
const std::set<std::string> kPassThrough = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"};
const std::set<std::string> kOther = {"Add", "Sub", "Mul", "Div", "Where", ops::names::MatMul, ops::names::Gemm, ops::names::Softmax, ops::names::LogSoftmax,
                                      ops::names::LayerNormalization, "Transpose", "Split", "Concat", ops::names::Gather, "Expand"};

void aroundAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (int64_t i = axis + 1; i < int64_t(shape.size()); ++i) inner *= shape[i];
}

/// One BACKWARD on the device.
class Sweep {
public:
  Sweep(Device &dev, const Model &model, const std::function<const Tensor *(const std::string &)> &value)
      : dev_(dev), model_(model), value_(value) {}
  ~Sweep() {
    try {
      finish(); // after an error too: the free of another stream's memory waits for the reads made here
    } catch (...) {
    }
  }

  // --- gradients: a host and/or a device copy per value ---
  struct Grad {
    Tensor host, dev;
    bool defined() const { return host.defined() || dev.defined(); }
    const Tensor &any() const { return dev.defined() ? dev : host; }
  };
  std::map<std::string, Grad> grads;

  bool hasGrad(const std::string &name) const {
    auto it = grads.find(name);
    return it != grads.end() && it->second.defined();
  }
  const Tensor &devGrad(const std::string &name) {
    Grad &g = grads.at(name);
    if (!g.dev.defined()) g.dev = dev_.upload(g.host);
    return g.dev;
  }
  Tensor hostGrad(const std::string &name) {
    auto it = grads.find(name);
    if (it == grads.end() || !it->second.defined()) return Tensor();
    Grad &g = it->second;
    if (!g.host.defined()) g.host = dev_.download(g.dev);
    return g.host;
  }
  /// grads[name] += g. Device tensors made here are never shared between
  /// two names, so a device sum is in place; a host sum copies first (a
  /// CPU kernel may have handed one tensor to two inputs).
  void add(const std::string &name, Tensor g, bool onDevice) {
    Grad &acc = grads[name];
    if (!acc.defined()) {
      (onDevice ? acc.dev : acc.host) = std::move(g);
      return;
    }
    bool f32 = g.dtype() == DType::Float32 && acc.any().dtype() == DType::Float32 && g.shape() == acc.any().shape();
    if (f32) {
      if (!acc.dev.defined()) acc.dev = dev_.upload(acc.host);
      acc.host = Tensor();
      Tensor d = onDevice ? std::move(g) : dev_.upload(g);
      cudaCheck(cudak::addInPlace(acc.dev.data<float>(), d.data<float>(), d.numel(), dev_.stream), "gradient sum");
      return;
    }
    Tensor h = hostGrad(name).clone();
    train::accumulate(h, onDevice ? dev_.download(g) : g);
    acc = Grad{std::move(h), Tensor()};
  }

  // --- forward values ---
  /// A forward value as the FORWARD left it, host or device: for its shape
  /// and type (hostValue for its bytes on the host).
  const Tensor &host(const std::string &name) {
    const Tensor *t = value_(name);
    if (!t) throw std::runtime_error("forward value '" + name + "' was not kept");
    return *t;
  }
  /// A forward value on the host (a device one copied once, counted).
  const Tensor *hostValue(const std::string &name) {
    const Tensor *t = value_(name);
    if (!t || !t->isDevice()) return t;
    auto it = down_.find(name);
    if (it == down_.end()) it = down_.emplace(name, t->toHost()).first;
    return &it->second;
  }
  const Tensor &devValue(const std::string &name) {
    auto it = up_.find(name);
    if (it != up_.end()) return it->second;
    const Tensor &t = host(name); // a parameter's upload is not a forward value's (ValueTransfers)
    bool parameter = !t.isDevice() && model_.initializers.count(name);
    return up_[name] = parameter ? dev_.upload(t) : dev_.deviceValue(t, foreign_);
  }
  void dropValue(const std::string &name) {
    up_.erase(name);
    down_.erase(name);
  }
  /// At the end of the sweep: reads of other streams' memory precede its free.
  void finish() { dev_.markRead(foreign_); }

  /// "" when node `idx`'s backward runs on the device, else why not.
  std::string whyHost(const Node &n, const std::vector<bool> &want);
  /// Node `idx`'s input gradients (device tensors; undefined where none).
  std::vector<Tensor> run(const Node &n, const std::vector<bool> &want);

private:
  Device &dev_;
  const Model &model_;
  const std::function<const Tensor *(const std::string &)> &value_;
  std::map<std::string, Tensor> up_, down_;
  std::vector<std::shared_ptr<StreamMemory>> foreign_;

  const float *fp(const Tensor &t) { return t.data<float>(); }
  float *fp(Tensor &t) { return t.data<float>(); }
  /// `g` (of shape dy) summed down to `shape` times `scale` (a copy when
  /// nothing is summed and scale is 1): reduceGradToShape.
  Tensor reduceTo(const Tensor &g, const std::vector<int64_t> &shape, float scale = 1.f);
  Tensor copyAs(const Tensor &g, const std::vector<int64_t> &shape);
  /// a op b broadcast to `shape` (dense).
  Tensor binary(cudak::Binary op, const Tensor &a, const Tensor &b, const std::vector<int64_t> &shape);

  std::vector<Tensor> matmul(const Node &n, const std::vector<bool> &want);
  std::vector<Tensor> gemm(const Node &n, const std::vector<bool> &want);
  std::vector<Tensor> layerNorm(const Node &n, const std::vector<bool> &want);
  std::vector<Tensor> split(const Node &n);
  std::vector<Tensor> concat(const Node &n, const std::vector<bool> &want);
  std::vector<Tensor> gather(const Node &n);
};

Tensor Sweep::reduceTo(const Tensor &g, const std::vector<int64_t> &shape, float scale) {
  if (g.shape() == shape && scale == 1.f) return dev_.copyDevice(g);
  if (broadcastShapes(shape, g.shape()) != g.shape())
    throw std::runtime_error("reduceGradToShape: " + shapeString(shape) + " does not broadcast to " +
                             shapeString(g.shape()));
  const auto &full = g.shape();
  std::vector<int64_t> padded(full.size() - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  std::vector<int64_t> st = train::contiguousStrides(full), redShape(full.size(), 1);
  for (size_t d = 0; d < full.size(); ++d)
    if (padded[d] == 1) redShape[d] = full[d];
  Tensor out = dev_.alloc(DType::Float32, shape);
  cudaCheck(cudak::reduceSum(fp(g), fp(out), makeStrided(padded, st, 0), makeStrided(redShape, st, 0), scale,
                             dev_.stream),
            "gradient sum to an input's shape");
  return out;
}

Tensor Sweep::copyAs(const Tensor &g, const std::vector<int64_t> &shape) {
  if (g.numel() != shapeNumel(shape))
    throw std::runtime_error("gradient " + g.describe() + " does not fit " + shapeString(shape));
  return dev_.copyDevice(g).reshaped(shape);
}

Tensor Sweep::binary(cudak::Binary op, const Tensor &a, const Tensor &b, const std::vector<int64_t> &shape) {
  Tensor out = dev_.alloc(DType::Float32, shape);
  cudaCheck(cudak::binary(op, fp(a), fp(b), fp(out), makeBcast(shape, {&a.shape(), &b.shape()}), dev_.stream),
            "elementwise gradient");
  return out;
}

const std::set<std::string> &allDeviceOps() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s(kOther);
    for (const auto &[op, g] : kUnaryGrad) s.insert(op);
    s.insert(kPassThrough.begin(), kPassThrough.end());
    return s;
  }();
  return ops;
}

std::string Sweep::whyHost(const Node &n, const std::vector<bool> &want) {
  const std::string &op = n.opType;
  if (!allDeviceOps().count(op)) return "no device gradient for " + op;
  if (!n.domain.empty() && n.domain != "ai.onnx") return "domain " + n.domain;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor &t = host(n.inputs[i]);
    if (t.rank() > cudak::kMaxRank) return "rank above " + std::to_string(cudak::kMaxRank);
    if (isFloatType(t.dtype()) && t.dtype() != DType::Float32) return "not float32";
    if (want[i] && t.dtype() != DType::Float32) return "not float32";
  }
  for (const auto &o : n.outputs)
    if (!o.empty() && hasGrad(o) && grads.at(o).any().dtype() != DType::Float32) return "gradient not float32";
  if (op == "Gelu") {
    std::string a = n.getString("approximate", "none");
    if (a != "none" && a != "tanh") return "Gelu approximate='" + a + "'";
  }
  if (op == ops::names::LayerNormalization) {
    const Tensor &x = host(n.inputs[0]);
    int64_t axis = cpu::normAxis(n.getInt("axis", -1), x.rank());
    std::vector<int64_t> innerShape(x.shape().begin() + axis, x.shape().end());
    if (n.inputs.size() < 2 || n.inputs[1].empty() || host(n.inputs[1]).shape() != innerShape)
      return "scale not of the normalized shape";
    if (want.size() > 2 && want[2] && host(n.inputs[2]).shape() != innerShape) return "bias not of the normalized shape";
  }
  if (op == "Where" && host(n.inputs[0]).dtype() != DType::Bool) return "condition not bool";
  if (op == ops::names::Gather) {
    DType t = host(n.inputs[1]).dtype();
    if (t != DType::Int64 && t != DType::Int32) return "indices not int32/int64";
  }
  if (op == ops::names::Gemm && (host(n.inputs[0]).rank() != 2 || host(n.inputs[1]).rank() != 2)) return "Gemm not 2-D";
  return "";
}

std::vector<Tensor> Sweep::run(const Node &n, const std::vector<bool> &want) {
  const std::string &op = n.opType;
  std::vector<Tensor> g(n.inputs.size());
  auto w = [&](size_t i) { return i < want.size() && want[i]; };
  const std::string &out0 = n.outputs.at(0);
  if (auto it = kUnaryGrad.find(op); it != kUnaryGrad.end()) {
    if (!w(0) || !hasGrad(out0)) return g;
    // Relu's derivative reads its output alone, as the op table declares
    // (the forward keeps y, not x, for it).
    const bool onlyY = op == ops::names::Relu;
    const Tensor &dy = devGrad(out0);
    const Tensor *x = onlyY ? nullptr : &devValue(n.inputs[0]);
    const Tensor *y = onlyY || kUsesY.count(op) ? &devValue(out0) : nullptr;
    const Tensor &shaped = x ? *x : *y; // a unary op's output has its input's shape
    cudak::UnaryGrad k = it->second;
    if (op == "Gelu" && n.getString("approximate", "none") == "tanh") k = cudak::UnaryGrad::GeluTanh;
    double alpha = op == "LeakyRelu" ? double(n.getFloat("alpha", 0.01f)) : double(n.getFloat("alpha", 1.0f));
    Tensor dx = dev_.alloc(DType::Float32, shaped.shape());
    cudaCheck(cudak::unaryGrad(k, x ? fp(*x) : nullptr, y ? fp(*y) : nullptr, fp(dy), fp(dx), shaped.numel(), alpha,
                               dev_.stream),
              "unary gradient");
    g[0] = std::move(dx);
    return g;
  }
  if (kPassThrough.count(op)) {
    if (w(0) && hasGrad(out0)) g[0] = copyAs(devGrad(out0), host(n.inputs[0]).shape());
    return g;
  }
  if (op == "Add" || op == "Sub") {
    for (size_t i = 0; i < 2; ++i)
      if (w(i) && hasGrad(out0)) g[i] = reduceTo(devGrad(out0), host(n.inputs[i]).shape(), op == "Sub" && i == 1 ? -1.f : 1.f);
    return g;
  }
  if (op == "Mul" || op == "Div") {
    if (!hasGrad(out0)) return g;
    const Tensor &dy = devGrad(out0), &a = devValue(n.inputs[0]), &b = devValue(n.inputs[1]);
    const auto &shape = dy.shape();
    bool div = op == "Div";
    // Mul: dA = dY b, dB = dY a; Div: dA = dY / b, dB = -dY y / b.
    if (w(0)) g[0] = reduceTo(binary(div ? cudak::Binary::Div : cudak::Binary::Mul, dy, b, shape), a.shape());
    if (w(1)) {
      if (!div) g[1] = reduceTo(binary(cudak::Binary::Mul, dy, a, shape), b.shape());
      else g[1] = reduceTo(binary(cudak::Binary::Div, binary(cudak::Binary::Mul, dy, devValue(out0), shape), b, shape),
                           b.shape(), -1.f);
    }
    return g;
  }
  if (op == "Where") {
    if (!hasGrad(out0) || (!w(1) && !w(2))) return g;
    const Tensor &dy = devGrad(out0), &cond = devValue(n.inputs[0]);
    const auto &shape = dy.shape();
    Tensor zero = dev_.zeros(DType::Float32, {});
    for (size_t i = 1; i < 3; ++i) {
      if (!w(i)) continue;
      // dX = where(cond, dY, 0), dY' = where(cond, 0, dY)
      const Tensor &x = i == 1 ? dy : zero, &y = i == 1 ? zero : dy;
      Tensor full = dev_.alloc(DType::Float32, shape);
      cudaCheck(cudak::where(static_cast<const uint8_t *>(cond.raw()), x.raw(), y.raw(), full.raw(), 4,
                             makeBcast(shape, {&cond.shape(), &x.shape(), &y.shape()}), dev_.stream),
                "Where gradient");
      g[i] = reduceTo(full, host(n.inputs[i]).shape());
    }
    return g;
  }
  if (op == "Expand") {
    if (w(0) && hasGrad(out0)) g[0] = reduceTo(devGrad(out0), host(n.inputs[0]).shape());
    return g;
  }
  if (op == ops::names::MatMul) return matmul(n, want);
  if (op == ops::names::Gemm) return gemm(n, want);
  if (op == ops::names::LayerNormalization) return layerNorm(n, want);
  if (op == "Split") return w(0) ? split(n) : g;
  if (op == "Concat") return concat(n, want);
  if (op == ops::names::Gather) return w(0) && hasGrad(out0) ? gather(n) : g;
  if (op == ops::names::Softmax || op == ops::names::LogSoftmax) {
    if (!w(0) || !hasGrad(out0)) return g;
    const Tensor &x = host(n.inputs[0]);
    int64_t outer, len, inner;
    train::softmaxDims(n, model_.opset(""), x.shape(), outer, len, inner);
    Tensor dx = dev_.alloc(DType::Float32, x.shape());
    cudaCheck(cudak::softmaxGrad(fp(devValue(out0)), fp(devGrad(out0)), fp(dx), outer, len, inner, op == ops::names::LogSoftmax,
                                 dev_.stream),
              "Softmax gradient");
    g[0] = std::move(dx);
    return g;
  }
  if (op == "Transpose") {
    if (!w(0) || !hasGrad(out0)) return g;
    const Tensor &x = host(n.inputs[0]), &dy = devGrad(out0);
    int64_t r = x.rank();
    std::vector<int64_t> perm = cpu::transposePerm(n, r), sy = train::contiguousStrides(dy.shape());
    std::vector<int64_t> strides(static_cast<size_t>(r), 0);
    // dX[p] = dY[q] with q_i = p_perm[i]: X's dim perm[i] walks dY's dim i.
    for (int64_t i = 0; i < r; ++i) strides[size_t(perm[size_t(i)])] = sy[size_t(i)];
    Tensor dx = dev_.alloc(DType::Float32, x.shape());
    cudaCheck(cudak::stridedCopy(dy.raw(), dx.raw(), 4, makeStrided(x.shape(), strides, 0), dev_.stream),
              "Transpose gradient");
    g[0] = std::move(dx);
    return g;
  }
  throw std::runtime_error("no device gradient for " + op);
}

// Y[batch, M, N] = A[batch_a, M, K] x B[batch_b, K, N]: dA = dY B^T,
// dB = A^T dY, summed over the batch positions each was broadcast to.
std::vector<Tensor> Sweep::matmul(const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(2);
  bool wa = want[0], wb = want[1];
  if ((!wa && !wb) || !hasGrad(n.outputs[0])) return g;
  const Tensor &a = devValue(n.inputs[0]), &b = devValue(n.inputs[1]), &dy = devGrad(n.outputs[0]);
  cpu::MatMulShape ms = cpu::matmulShape(a.shape(), b.shape());
  int64_t M = ms.M, K = ms.K, N = ms.N;
  const std::vector<int64_t> &ab = ms.aBatch, &bb = ms.bBatch, &batch = ms.batch;
  int64_t nb = shapeNumel(batch), na = shapeNumel(ab), nB = shapeNumel(bb);
  Tensor ga, gb;
  if (wa) ga = dev_.zeros(DType::Float32, a.shape());
  if (wb) gb = dev_.zeros(DType::Float32, b.shape());
  if (M > 0 && N > 0 && K > 0 && nb > 0) {
    const float *pa = fp(a), *pb = fp(b), *pg = fp(dy);
    float *pga = wa ? fp(ga) : nullptr, *pgb = wb ? fp(gb) : nullptr;
    if (nB == 1 && na == nb) { // B shared by every batch: fold the batch into M
      if (pga) dev_.rowGemm(false, true, nb * M, K, N, 1.f, pg, N, pb, N, 0.f, pga, K);
      if (pgb) dev_.rowGemm(true, false, K, N, nb * M, 1.f, pa, K, pg, N, 0.f, pgb, N);
    } else if (na == nb && nB == nb) { // one A and one B per batch position
      if (pga) dev_.rowGemmBatched(false, true, M, K, N, 1.f, pg, N, M * N, pb, N, K * N, 0.f, pga, K, M * K, nb);
      if (pgb) dev_.rowGemmBatched(true, false, K, N, M, 1.f, pa, K, M * K, pg, N, M * N, 0.f, pgb, N, K * N, nb);
    } else { // partial broadcasts: one GEMM per batch position, summed (beta 1)
      auto stA = broadcastStrides(ab, batch), stB = broadcastStrides(bb, batch);
      for (int64_t i = 0; i < nb; ++i) {
        auto [oa, ob] = cpu::batchOffsets(i, batch, stA, stB);
        const float *gi = pg + i * M * N;
        if (pga) dev_.rowGemm(false, true, M, K, N, 1.f, gi, N, pb + ob * K * N, N, 1.f, pga + oa * M * K, K);
        if (pgb) dev_.rowGemm(true, false, K, N, M, 1.f, pa + oa * M * K, K, gi, N, 1.f, pgb + ob * K * N, N);
      }
    }
  }
  if (wa) g[0] = std::move(ga);
  if (wb) g[1] = std::move(gb);
  return g;
}

// Y = alpha op(A) op(B) + beta C.
std::vector<Tensor> Sweep::gemm(const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  if (!hasGrad(n.outputs[0])) return g;
  const Tensor &a = devValue(n.inputs[0]), &b = devValue(n.inputs[1]), &dy = devGrad(n.outputs[0]);
  bool ta = n.getInt("transA", 0), tb = n.getInt("transB", 0);
  int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1), N = tb ? b.dim(0) : b.dim(1);
  float alpha = n.getFloat("alpha", 1.0f), beta = n.getFloat("beta", 1.0f);
  const float *pa = fp(a), *pb = fp(b), *pg = fp(dy);
  bool work = M > 0 && N > 0 && K > 0;
  if (want[0]) {
    Tensor ga = dev_.zeros(DType::Float32, a.shape());
    if (work) {
      if (!ta) dev_.rowGemm(false, !tb, M, K, N, alpha, pg, N, pb, b.dim(1), 0.f, fp(ga), K); // dY op(B)^T
      else dev_.rowGemm(tb, true, K, M, N, alpha, pb, b.dim(1), pg, N, 0.f, fp(ga), M);       // op(B) dY^T
    }
    g[0] = std::move(ga);
  }
  if (want[1]) {
    Tensor gb = dev_.zeros(DType::Float32, b.shape());
    if (work) {
      if (!tb) dev_.rowGemm(!ta, false, K, N, M, alpha, pa, a.dim(1), pg, N, 0.f, fp(gb), N); // op(A)^T dY
      else dev_.rowGemm(true, ta, N, K, M, alpha, pg, N, pa, a.dim(1), 0.f, fp(gb), K);       // dY^T op(A)
    }
    g[1] = std::move(gb);
  }
  if (want.size() > 2 && want[2]) g[2] = reduceTo(dy, host(n.inputs[2]).shape(), beta);
  return g;
}

// Y = (X - mean) * inv * scale + B per row of the normalized dims; outputs 1
// and 2 (Mean, InvStdDev) may have gradients of their own.
std::vector<Tensor> Sweep::layerNorm(const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  const Tensor &xh = host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", -1), xh.rank());
  double eps = n.getFloat("epsilon", 1e-5f);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < xh.rank(); ++i) (i < axis ? outer : inner) *= xh.dim(i);
  auto gradOf = [&](size_t o) -> const float * {
    if (o >= n.outputs.size() || n.outputs[o].empty() || !hasGrad(n.outputs[o])) return nullptr;
    const Tensor &t = devGrad(n.outputs[o]);
    if (o > 0 && t.numel() != outer)
      throw std::runtime_error("LayerNormalization backward: statistics gradient " + t.describe());
    return fp(t);
  };
  const float *dy = gradOf(0), *dMean = gradOf(1), *dInv = gradOf(2);
  auto w = [&](size_t i) { return i < want.size() && want[i]; };
  bool wx = w(0), ws = w(1) && dy, wb = w(2) && dy;
  if (!wx && !ws && !wb) return g;
  const Tensor &x = devValue(n.inputs[0]), &scale = devValue(n.inputs[1]);
  Tensor mean = dev_.alloc(DType::Float64, {outer}), inv = dev_.alloc(DType::Float64, {outer});
  Tensor dx;
  if (wx) dx = dev_.alloc(DType::Float32, x.shape());
  cudaCheck(cudak::layerNormGrad(fp(x), fp(scale), dy, dMean, dInv, wx ? fp(dx) : nullptr, mean.data<double>(),
                                 inv.data<double>(), outer, inner, eps, dev_.stream),
            "LayerNormalization gradient");
  if (wx) g[0] = std::move(dx);
  if (ws || wb) {
    std::vector<int64_t> innerShape(xh.shape().begin() + axis, xh.shape().end());
    Tensor ds, db;
    if (ws) ds = dev_.alloc(DType::Float32, innerShape);
    if (wb) db = dev_.alloc(DType::Float32, innerShape);
    cudaCheck(cudak::layerNormParamGrad(fp(x), dy, mean.data<double>(), inv.data<double>(), ws ? fp(ds) : nullptr,
                                        wb ? fp(db) : nullptr, outer, inner, dev_.stream),
              "LayerNormalization scale/bias gradient");
    if (ws) g[1] = std::move(ds);
    if (wb) g[2] = std::move(db);
  }
  return g;
}

std::vector<Tensor> Sweep::split(const Node &n) {
  std::vector<Tensor> g(n.inputs.size());
  const Tensor &x = host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", 0), x.rank());
  int64_t count = int64_t(n.outputs.size());
  bool hasSplit = n.inputs.size() > 1 && !n.inputs[1].empty();
  std::vector<int64_t> parts = model_.opset("") >= 13
                                   ? (hasSplit ? hostValue(n.inputs[1])->toInt64Vector() : std::vector<int64_t>{})
                                   : n.getInts("split");
  if (parts.empty()) {
    int64_t each = (x.dim(axis) + count - 1) / count;
    for (int64_t i = 0; i < count; ++i) parts.push_back(std::min(each, x.dim(axis) - i * each));
  }
  int64_t outer, inner, D = x.dim(axis);
  aroundAxis(x.shape(), axis, outer, inner);
  Tensor dx = dev_.zeros(DType::Float32, x.shape()); // outputs without a gradient contribute zeros
  char *pd = static_cast<char *>(dx.raw());
  const size_t es = sizeof(float);
  int64_t start = 0;
  for (int64_t i = 0; i < count && i < int64_t(parts.size()); ++i) {
    const std::string &o = n.outputs[size_t(i)];
    if (!o.empty() && hasGrad(o)) {
      const Tensor &gi = devGrad(o);
      if (gi.numel() != outer * parts[size_t(i)] * inner)
        throw std::runtime_error("gradient " + gi.describe() + " for output " + std::to_string(i) +
                                 " does not match the split");
      size_t row = size_t(parts[size_t(i)] * inner) * es;
      if (row && outer)
        cudaCheck(cudaMemcpy2DAsync(pd + size_t(start * inner) * es, size_t(D * inner) * es, gi.raw(), row, row,
                                    size_t(outer), cudaMemcpyDeviceToDevice, dev_.stream),
                  "Split gradient (cudaMemcpy2DAsync)");
    }
    start += parts[size_t(i)];
  }
  g[0] = std::move(dx);
  return g;
}

std::vector<Tensor> Sweep::concat(const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  if (!hasGrad(n.outputs[0])) return g;
  const Tensor &dy = devGrad(n.outputs[0]);
  const Tensor *first = nullptr;
  for (const auto &s : n.inputs)
    if (!s.empty() && !first) first = &host(s);
  if (!first) return g;
  int64_t axis = cpu::normAxis(n.getInt("axis", 0), first->rank());
  int64_t outer, inner, D = dy.dim(axis);
  aroundAxis(dy.shape(), axis, outer, inner);
  const size_t es = sizeof(float);
  const char *pg = static_cast<const char *>(dy.raw());
  int64_t offset = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor &x = host(n.inputs[i]);
    int64_t len = x.dim(axis);
    if (want[i]) {
      Tensor gi = dev_.alloc(DType::Float32, x.shape());
      size_t row = size_t(len * inner) * es;
      if (row && outer)
        cudaCheck(cudaMemcpy2DAsync(gi.raw(), row, pg + size_t(offset * inner) * es, size_t(D * inner) * es, row,
                                    size_t(outer), cudaMemcpyDeviceToDevice, dev_.stream),
                  "Concat gradient (cudaMemcpy2DAsync)");
      g[i] = std::move(gi);
    }
    offset += len;
  }
  return g;
}

// Gather along `axis`: rows of dY are added back to the rows they came from.
std::vector<Tensor> Sweep::gather(const Node &n) {
  std::vector<Tensor> g(n.inputs.size());
  const Tensor &x = host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", 0), x.rank());
  std::vector<int64_t> idx = hostValue(n.inputs[1])->toInt64Vector();
  int64_t outer, inner, d = x.dim(axis), count = int64_t(idx.size());
  aroundAxis(x.shape(), axis, outer, inner);
  for (auto &k : idx) {
    int64_t v = k < 0 ? k + d : k;
    if (v < 0 || v >= d) throw std::runtime_error("Gather index " + std::to_string(k) + " out of range");
    k = v;
  }
  Tensor hostIdx(DType::Int64, {count});
  if (count) std::memcpy(hostIdx.raw(), idx.data(), idx.size() * sizeof(int64_t));
  Tensor devIdx = dev_.upload(hostIdx);
  Tensor dx = dev_.zeros(DType::Float32, x.shape());
  cudaCheck(cudak::gatherGrad(fp(devGrad(n.outputs[0])), devIdx.data<int64_t>(), fp(dx), outer, count, d, inner,
                              dev_.stream),
            "Gather gradient");
  g[0] = std::move(dx);
  return g;
}

} // namespace

const std::set<std::string> &deviceGradientOps() { return allDeviceOps(); }

void backward(Device &dev, const Model &model, const std::vector<size_t> &nodes,
              const std::function<const Tensor *(const std::string &)> &value,
              const std::set<std::string> &requires, std::map<std::string, Tensor> &grads,
              const GradientHook *hook, const std::set<size_t> *hookNodes) {
  cudaCheck(cudaSetDevice(dev.device), "cudaSetDevice");
  Sweep sweep(dev, model, value);
  for (auto &[name, g] : grads)
    if (g.defined()) sweep.grads[name].host = std::move(g);
  grads.clear();
  train::backwardSweep(
      model, nodes, requires, [&](const std::string &o) { return sweep.hasGrad(o); },
      [&](size_t idx, const std::vector<bool> &want) {
        const Node &n = model.nodes[idx];
        bool hooked = hook && hookNodes && hookNodes->count(idx);
        std::vector<Tensor> got;
        bool onDevice = false;
        try {
          if (!hooked && sweep.whyHost(n, want).empty()) {
            got = sweep.run(n, want);
            onDevice = true;
          }
        } catch (const std::exception &e) {
          throw std::runtime_error(train::backwardWhere(model, n) + e.what());
        }
        if (!onDevice) {
          auto outGrad = [&](const std::string &o) { return sweep.hostGrad(o); };
          auto hostValue = [&](const std::string &v) { return sweep.hostValue(v); };
          got = train::hostNodeGradient(model, idx, want, hostValue, outGrad, hooked ? hook : nullptr);
        }
        for (size_t i = 0; i < n.inputs.size() && i < got.size(); ++i)
          if (want[i] && got[i].defined()) sweep.add(n.inputs[i], std::move(got[i]), onDevice);
      },
      [&](const std::string &o) {
        sweep.grads.erase(o);
        sweep.dropValue(o);
      });
  for (auto &[name, g] : sweep.grads)
    if (g.defined()) grads[name] = sweep.hostGrad(name);
  sweep.finish();
}

void adamUpdate(Device &dev, Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                const AdamSettings &s, const std::vector<std::pair<int64_t, int64_t>> &pieces) {
  train::prepareAdam(param, grad, m, v);
  for (auto [begin, count] : pieces)
    if (begin < 0 || count < 0 || begin + count > param.numel())
      throw std::runtime_error("Adam: element range outside the parameter");
  cudaCheck(cudaSetDevice(dev.device), "cudaSetDevice");
  Tensor p = dev.upload(param), g = dev.upload(grad), dm = dev.upload(m), dv = dev.upload(v);
  double c1 = 1 - std::pow(s.beta1, double(step)), c2 = 1 - std::pow(s.beta2, double(step));
  std::vector<std::pair<int64_t, int64_t>> ranges = pieces;
  if (ranges.empty()) ranges.push_back({0, param.numel()});
  for (auto [begin, count] : ranges)
    cudaCheck(cudak::adam(p.data<float>() + begin, g.data<float>() + begin, dm.data<float>() + begin,
                          dv.data<float>() + begin, count, s.lr, s.beta1, s.beta2, s.eps, s.weightDecay, c1, c2,
                          dev.stream),
              "Adam kernel");
  // Back into the host tensors (pageable memory: each copy returns once done).
  const std::pair<Tensor *, const Tensor *> back[] = {{&param, &p}, {&m, &dm}, {&v, &dv}};
  for (const auto &[host, d] : back)
    if (d->nbytes())
      cudaCheck(cudaMemcpyAsync(host->raw(), d->raw(), d->nbytes(), cudaMemcpyDeviceToHost, dev.stream),
                "Adam (cudaMemcpyAsync to host)");
  cudaCheck(cudaStreamSynchronize(dev.stream), "cudaStreamSynchronize (Adam)");
}

} // namespace hetplan::runtime::cudart
