//===- CudaElementwise.cpp - CUDA kernels: elementwise ops and reductions --===//
//
// The elementwise family on the device (float32 compute, CudaKernels.cu):
// unary ops, binary and variadic arithmetic, comparisons, Not, Where, Cast,
// Clip and the Reduce* ops; forward and backward of each, registered by op
// type into the CUDA kernel registry (CudaExecutor::Impl::deviceKernels)
// from the one table below.
//
//===----------------------------------------------------------------------===//
#include "CudaExecutorImpl.h"
#include "CudaSweep.h"

#include <cfloat>
#include <map>
#include <optional>
#include <stdexcept>

namespace hetplan::runtime {

using cudart::cudaCheck;
using cudart::makeBcast;
using cudart::makeStrided;
using cudart::Sweep;
using cudaexec::normAxis;
using cudaexec::stridesOf;
using Impl = CudaExecutor::Impl;
using Kernel = Impl::DeviceKernel;

namespace {

/// What a unary op's derivative reads from the forward pass.
enum class Reads { X, XY, Y };

Impl::Reads declared(Reads r) {
  return r == Reads::X ? Impl::Reads::Inputs : r == Reads::Y ? Impl::Reads::Output : Impl::Reads::InputsAndOutput;
}

/// The unary ops: the forward kernel, and the backward kernel where there
/// is one with what it reads (the CPU's usesY; Relu's reads its output
/// alone, as the op table declares: the forward keeps y, not x, for it).
struct UnaryOp {
  cudak::Unary fwd;
  std::optional<cudak::UnaryGrad> bwd;
  Reads reads = Reads::X;
};
const std::map<std::string, UnaryOp> kUnary = {
    {"Neg", {cudak::Unary::Neg, cudak::UnaryGrad::Neg}},
    {"Abs", {cudak::Unary::Abs, cudak::UnaryGrad::Abs}},
    {"Sqrt", {cudak::Unary::Sqrt, cudak::UnaryGrad::Sqrt, Reads::XY}},
    {"Exp", {cudak::Unary::Exp, cudak::UnaryGrad::Exp, Reads::XY}},
    {"Log", {cudak::Unary::Log, cudak::UnaryGrad::Log}},
    {"Tanh", {cudak::Unary::Tanh, cudak::UnaryGrad::Tanh, Reads::XY}},
    {"Sigmoid", {cudak::Unary::Sigmoid, cudak::UnaryGrad::Sigmoid, Reads::XY}},
    {"Relu", {cudak::Unary::Ramp, cudak::UnaryGrad::Ramp, Reads::Y}},
    {"LeakyRelu", {cudak::Unary::LeakyRelu, cudak::UnaryGrad::LeakyRelu}},
    {"Erf", {cudak::Unary::Erf, cudak::UnaryGrad::Erf}},
    {"Gelu", {cudak::Unary::Gelu, cudak::UnaryGrad::Gelu}},
    {"Floor", {cudak::Unary::Floor, std::nullopt}},
    {"Ceil", {cudak::Unary::Ceil, std::nullopt}},
    {"Reciprocal", {cudak::Unary::Reciprocal, cudak::UnaryGrad::Reciprocal, Reads::XY}},
    {"Sin", {cudak::Unary::Sin, cudak::UnaryGrad::Sin}},
    {"Cos", {cudak::Unary::Cos, cudak::UnaryGrad::Cos}},
    {"Softplus", {cudak::Unary::Softplus, cudak::UnaryGrad::Softplus}},
    {"Elu", {cudak::Unary::Elu, cudak::UnaryGrad::Elu, Reads::XY}},
    {"HardSigmoid", {cudak::Unary::HardSigmoid, std::nullopt}},
    {"HardSwish", {cudak::Unary::HardSwish, std::nullopt}},
};
const std::map<std::string, cudak::Binary> kBinary = {
    {"Add", cudak::Binary::Add}, {"Sub", cudak::Binary::Sub}, {"Mul", cudak::Binary::Mul},
    {"Div", cudak::Binary::Div}, {"Pow", cudak::Binary::Pow}};
const std::map<std::string, cudak::Binary> kVariadic = {
    {"Sum", cudak::Binary::Add}, {"Mean", cudak::Binary::Add}, {"Max", cudak::Binary::Max},
    {"Min", cudak::Binary::Min}};
const std::map<std::string, cudak::Compare> kCompare = {
    {"Equal", cudak::Compare::Equal}, {"Less", cudak::Compare::Less},
    {"Greater", cudak::Compare::Greater}, {"LessOrEqual", cudak::Compare::LessOrEqual},
    {"GreaterOrEqual", cudak::Compare::GreaterOrEqual}};
const std::map<std::string, cudak::Reduce> kReduce = {
    {"ReduceSum", cudak::Reduce::Sum}, {"ReduceMean", cudak::Reduce::Mean},
    {"ReduceMax", cudak::Reduce::Max}, {"ReduceMin", cudak::Reduce::Min}};

bool castable(DType t) {
  return t == DType::Float32 || t == DType::Int64 || t == DType::Int32 || t == DType::Bool;
}

cudak::Elem elemOf(DType t) {
  switch (t) {
  case DType::Float32: return cudak::Elem::F32;
  case DType::Int64: return cudak::Elem::I64;
  case DType::Int32: return cudak::Elem::I32;
  case DType::Bool: return cudak::Elem::Bool;
  default: throw std::runtime_error(std::string("no device cast for ") + dtypeName(t));
  }
}

// --- what the forward kernels do (deviceCheck) ---

bool secondInput(size_t i) { return i == 1; }   // Pow's exponent: any numeric, converted on the host
bool laterInputs(size_t i) { return i >= 1; }   // Clip's bounds, the reductions' axes: read on the host

std::string geluCheck(const Node &n, const std::vector<DType> &) {
  std::string a = n.getString("approximate", "none");
  if (a != "none" && a != "tanh") return "Gelu approximate='" + a + "' is not supported";
  return "";
}

DType typeAt(const std::vector<DType> &t, size_t i) { return i < t.size() ? t[i] : DType::Undefined; }

std::string whereCheck(const Node &, const std::vector<DType> &t) {
  if (typeAt(t, 0) != DType::Undefined && typeAt(t, 0) != DType::Bool) return "Where condition must be bool";
  if (!cudaexec::movableType(typeAt(t, 1)))
    return std::string("element type ") + dtypeName(typeAt(t, 1)) + " is not supported on the CUDA device";
  return "";
}

std::string castCheck(const Node &n, const std::vector<DType> &t) {
  DType to = static_cast<DType>(n.getInt("to", 0));
  if (!castable(to) || (typeAt(t, 0) != DType::Undefined && !castable(typeAt(t, 0))))
    return std::string("Cast from ") + dtypeName(typeAt(t, 0)) + " to " + dtypeName(to) +
           " is not supported on the CUDA device (float32, int64, int32, bool)";
  return "";
}

std::string notCheck(const Node &, const std::vector<DType> &t) {
  return typeAt(t, 0) == DType::Undefined || typeAt(t, 0) == DType::Bool ? "" : "Not takes bool";
}

// --- backward kernels (CudaTraining.cpp's sweep) ---

std::string geluBackwardCheck(Sweep &, const Node &n, const std::vector<bool> &) {
  std::string a = n.getString("approximate", "none");
  if (a != "none" && a != "tanh") return "Gelu approximate='" + a + "'";
  return "";
}

std::string whereBackwardCheck(Sweep &s, const Node &n, const std::vector<bool> &) {
  return s.host(n.inputs[0]).dtype() != DType::Bool ? "condition not bool" : "";
}

std::vector<Tensor> unaryBackward(Sweep &s, const Node &n, const std::vector<bool> &want) {
  const std::string &op = n.opType;
  std::vector<Tensor> g(n.inputs.size());
  const std::string &out0 = n.outputs.at(0);
  if (!(0 < want.size() && want[0]) || !s.hasGrad(out0)) return g;
  const UnaryOp &u = kUnary.at(op);
  const bool onlyY = u.reads == Reads::Y;
  const Tensor &dy = s.devGrad(out0);
  const Tensor *x = onlyY ? nullptr : &s.devValue(n.inputs[0]);
  const Tensor *y = u.reads != Reads::X ? &s.devValue(out0) : nullptr;
  const Tensor &shaped = x ? *x : *y; // a unary op's output has its input's shape
  cudak::UnaryGrad k = *u.bwd;
  if (op == "Gelu" && n.getString("approximate", "none") == "tanh") k = cudak::UnaryGrad::GeluTanh;
  double alpha = op == "LeakyRelu" ? double(n.getFloat("alpha", 0.01f)) : double(n.getFloat("alpha", 1.0f));
  Tensor dx = s.device().alloc(DType::Float32, shaped.shape());
  cudaCheck(cudak::unaryGrad(k, x ? Sweep::fp(*x) : nullptr, y ? Sweep::fp(*y) : nullptr, Sweep::fp(dy),
                             Sweep::fp(dx), shaped.numel(), alpha, s.device().stream),
            "unary gradient");
  g[0] = std::move(dx);
  return g;
}

std::vector<Tensor> addSubBackward(Sweep &s, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  auto w = [&](size_t i) { return i < want.size() && want[i]; };
  const std::string &out0 = n.outputs.at(0);
  for (size_t i = 0; i < 2; ++i)
    if (w(i) && s.hasGrad(out0))
      g[i] = s.reduceTo(s.devGrad(out0), s.host(n.inputs[i]).shape(), n.opType == "Sub" && i == 1 ? -1.f : 1.f);
  return g;
}

std::vector<Tensor> mulDivBackward(Sweep &s, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  auto w = [&](size_t i) { return i < want.size() && want[i]; };
  const std::string &out0 = n.outputs.at(0);
  if (!s.hasGrad(out0)) return g;
  const Tensor &dy = s.devGrad(out0), &a = s.devValue(n.inputs[0]), &b = s.devValue(n.inputs[1]);
  const auto &shape = dy.shape();
  bool div = n.opType == "Div";
  // Mul: dA = dY b, dB = dY a; Div: dA = dY / b, dB = -dY y / b.
  if (w(0)) g[0] = s.reduceTo(s.binary(div ? cudak::Binary::Div : cudak::Binary::Mul, dy, b, shape), a.shape());
  if (w(1)) {
    if (!div) g[1] = s.reduceTo(s.binary(cudak::Binary::Mul, dy, a, shape), b.shape());
    else
      g[1] = s.reduceTo(s.binary(cudak::Binary::Div, s.binary(cudak::Binary::Mul, dy, s.devValue(out0), shape), b, shape),
                        b.shape(), -1.f);
  }
  return g;
}

std::vector<Tensor> whereBackward(Sweep &s, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  auto w = [&](size_t i) { return i < want.size() && want[i]; };
  const std::string &out0 = n.outputs.at(0);
  if (!s.hasGrad(out0) || (!w(1) && !w(2))) return g;
  const Tensor &dy = s.devGrad(out0), &cond = s.devValue(n.inputs[0]);
  const auto &shape = dy.shape();
  Tensor zero = s.device().zeros(DType::Float32, {});
  for (size_t i = 1; i < 3; ++i) {
    if (!w(i)) continue;
    // dX = where(cond, dY, 0), dY' = where(cond, 0, dY)
    const Tensor &x = i == 1 ? dy : zero, &y = i == 1 ? zero : dy;
    Tensor full = s.device().alloc(DType::Float32, shape);
    cudaCheck(cudak::where(static_cast<const uint8_t *>(cond.raw()), x.raw(), y.raw(), full.raw(), 4,
                           makeBcast(shape, {&cond.shape(), &x.shape(), &y.shape()}), s.device().stream),
              "Where gradient");
    g[i] = s.reduceTo(full, s.host(n.inputs[i]).shape());
  }
  return g;
}

} // namespace

void Impl::registerElementwiseKernels(OpRegistry<DeviceKernel> &r) {
  for (const auto &[op, u] : kUnary) {
    Kernel k{&Impl::runUnary};
    if (op == "Gelu") {
      k.check = geluCheck;
      k.backwardCheck = geluBackwardCheck;
    }
    if (u.bwd) {
      k.backward = unaryBackward;
      k.backwardReads = declared(u.reads);
    }
    r.add(op, k);
  }
  Kernel clip{&Impl::runClip};
  clip.hostInput = laterInputs;
  r.add("Clip", clip);
  for (const auto &[op, b] : kBinary) {
    Kernel k{&Impl::runBinary};
    if (op == "Pow") k.hostInput = secondInput;
    if (op == "Add" || op == "Sub") k.backward = addSubBackward;
    if (op == "Mul" || op == "Div") k.backward = mulDivBackward;
    if (op == "Mul") k.backwardReads = Impl::Reads::Inputs;          // dA = dY b, dB = dY a
    if (op == "Div") k.backwardReads = Impl::Reads::InputsAndOutput; // dB = -dY y / b
    r.add(op, k);
  }
  for (const auto &[op, v] : kVariadic) r.add(op, Kernel{&Impl::runVariadic});
  for (const auto &[op, c] : kCompare) {
    Kernel k{&Impl::runCompare};
    k.boolOutput = true;
    r.add(op, k);
  }
  for (const auto &[op, rd] : kReduce) {
    Kernel k{&Impl::runReduce};
    k.hostInput = laterInputs;
    r.add(op, k);
  }
  Kernel logicalNot{&Impl::runNot, Impl::Types::Own};
  logicalNot.check = notCheck;
  r.add("Not", logicalNot);
  Kernel where{&Impl::runWhere, Impl::Types::Own};
  where.check = whereCheck;
  where.backward = whereBackward;
  where.backwardCheck = whereBackwardCheck;
  r.add("Where", where);
  Kernel cast{&Impl::runCast, Impl::Types::Own};
  cast.check = castCheck;
  r.add("Cast", cast);
}

void Impl::runUnary(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  Tensor y = alloc(DType::Float32, x.shape());
  float a = 0.f, b = 0.f;
  cudak::Unary kind = kUnary.at(op).fwd;
  if (op == "LeakyRelu") a = n.getFloat("alpha", 0.01f);
  else if (op == "Elu") a = n.getFloat("alpha", 1.0f);
  else if (op == "HardSigmoid") { a = n.getFloat("alpha", 0.2f); b = n.getFloat("beta", 0.5f); }
  else if (op == "Gelu" && n.getString("approximate", "none") == "tanh") kind = cudak::Unary::GeluTanh;
  launch(cudak::unary(kind, x.data<float>(), y.data<float>(), x.numel(), a, b, stream));
  outs[0].dev = y;
}

void Impl::runClip(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  float lo = -FLT_MAX, hi = FLT_MAX;
  if (opset < 11) {
    lo = n.getFloat("min", -FLT_MAX);
    hi = n.getFloat("max", FLT_MAX);
  } else {
    if (has(1)) lo = static_cast<float>(H(1).scalarAsDouble(0));
    if (has(2)) hi = static_cast<float>(H(2).scalarAsDouble(0));
  }
  Tensor y = alloc(DType::Float32, x.shape());
  launch(cudak::unary(cudak::Unary::Clip, x.data<float>(), y.data<float>(), x.numel(), lo, hi, stream));
  outs[0].dev = y;
}

namespace {

/// a op b (float32) broadcast, on the device.
Tensor binaryOp(Impl &impl, const std::string &op, cudak::Binary kind, const Tensor &a, const Tensor &b) {
  auto shape = broadcastShapes(a.shape(), b.shape());
  Tensor y = impl.alloc(DType::Float32, shape);
  cudaCheck(cudak::binary(kind, a.data<float>(), b.data<float>(), y.data<float>(),
                          makeBcast(shape, {&a.shape(), &b.shape()}), impl.stream),
            (op + " kernel").c_str());
  return y;
}

} // namespace

void Impl::runBinary(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &a = D(0);
  Tensor rhs;
  if (ins[1] && ins[1]->dtype() != DType::Float32) { // Pow's exponent: any numeric, converted on the host
    const Tensor &h = H(1);
    Tensor f(DType::Float32, h.shape());
    for (int64_t i = 0; i < h.numel(); ++i) f.data<float>()[i] = static_cast<float>(h.scalarAsDouble(i));
    rhs = upload(f);
  } else rhs = D(1);
  outs[0].dev = binaryOp(*this, op, kBinary.at(op), a, rhs);
}

void Impl::runVariadic(Call &c) {
  HP_DEVICE_CALL(c);
  cudak::Binary kind = kVariadic.at(op);
  Tensor acc;
  int64_t count = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!has(i)) continue;
    ++count;
    acc = acc.defined() ? binaryOp(*this, op, kind, acc, D(i)) : D(i);
  }
  if (!acc.defined()) throw std::runtime_error(op + " without inputs");
  if (op == "Mean") {
    Tensor cnt(DType::Float32, {});
    *cnt.data<float>() = static_cast<float>(count);
    acc = binaryOp(*this, op, cudak::Binary::Div, acc, upload(cnt));
  }
  outs[0].dev = acc; // values are immutable: a single input is shared
}

void Impl::runCompare(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &a = D(0), &b = D(1);
  auto shape = broadcastShapes(a.shape(), b.shape());
  Tensor y = alloc(DType::Bool, shape);
  launch(cudak::compare(kCompare.at(op), a.data<float>(), b.data<float>(), y.data<uint8_t>(),
                        makeBcast(shape, {&a.shape(), &b.shape()}), stream));
  outs[0].dev = y;
}

void Impl::runNot(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  Tensor y = alloc(DType::Bool, x.shape());
  launch(cudak::logicalNot(x.data<uint8_t>(), y.data<uint8_t>(), x.numel(), stream));
  outs[0].dev = y;
}

void Impl::runWhere(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &cond = D(0), &x = D(1), &y = D(2);
  if (x.dtype() != y.dtype()) throw std::runtime_error(std::string("Where of ") + dtypeName(x.dtype()) + " and " + dtypeName(y.dtype()));
  auto shape = broadcastShapes(broadcastShapes(cond.shape(), x.shape()), y.shape());
  Tensor o = alloc(x.dtype(), shape);
  launch(cudak::where(cond.data<uint8_t>(), x.raw(), y.raw(), o.raw(), int(dtypeSize(x.dtype())),
                      makeBcast(shape, {&cond.shape(), &x.shape(), &y.shape()}), stream));
  outs[0].dev = o;
}

void Impl::runCast(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  DType to = static_cast<DType>(n.getInt("to", 0));
  if (x.dtype() == to) { outs[0].dev = x; return; }
  Tensor y = alloc(to, x.shape());
  launch(cudak::cast(elemOf(x.dtype()), x.raw(), elemOf(to), y.raw(), x.numel(), stream));
  outs[0].dev = y;
}

void Impl::runReduce(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  int64_t r = x.rank();
  bool axesAsInput = (op == "ReduceSum" && opset >= 13) || opset >= 18;
  std::vector<int64_t> axes = axesAsInput ? (has(1) ? H(1).toInt64Vector() : std::vector<int64_t>{}) : n.getInts("axes");
  bool keep = n.getInt("keepdims", 1);
  if (axes.empty() && n.getInt("noop_with_empty_axes", 0)) { outs[0].dev = x; return; }
  std::vector<bool> red(r, axes.empty());
  for (int64_t a : axes) red[normAxis(a, r)] = true;
  std::vector<int64_t> perm, outShape;
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < r; ++i)
    if (!red[i]) { perm.push_back(i); rows *= x.dim(i); outShape.push_back(x.dim(i)); }
    else if (keep) outShape.push_back(1);
  for (int64_t i = 0; i < r; ++i)
    if (red[i]) { perm.push_back(i); cols *= x.dim(i); }
  Tensor src = x;
  bool identity = true;
  for (int64_t i = 0; i < r; ++i) identity = identity && perm[i] == i;
  if (!identity) { // reduced axes last
    auto st = stridesOf(x.shape());
    std::vector<int64_t> shape(r), strides(r);
    for (int64_t i = 0; i < r; ++i) { shape[i] = x.dim(perm[i]); strides[i] = st[perm[i]]; }
    src = alloc(DType::Float32, shape);
    launch(cudak::stridedCopy(x.raw(), src.raw(), 4, makeStrided(shape, strides, 0), stream));
  }
  Tensor y = alloc(DType::Float32, outShape);
  launch(cudak::reduceRows(kReduce.at(op), src.data<float>(), y.data<float>(), rows, cols, stream));
  outs[0].dev = y;
}

} // namespace hetplan::runtime
