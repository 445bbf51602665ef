//===- CudaMovement.cpp - CUDA kernels: Transpose, Expand, Slice, Split, Concat, Gather ===//
//
// Data movement on the device, any element type of 1, 2, 4 or 8 bytes:
// strided copies, cudaMemcpy2D, a gather kernel; their backward kernels
// (float32); the shape-only ops (run on a device view) and their backward. Registered by op type, with
// the cases left to the host, into the CUDA kernel registry
// (CudaExecutor::Impl::deviceKernels).
//
//===----------------------------------------------------------------------===//
#include "CudaExecutorImpl.h"
#include "CudaSweep.h"
#include "../cpu/kernels/ViewParams.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace hetplan::runtime {

using cudart::cudaCheck;
using cudart::makeStrided;
using cudart::Sweep;
using cudaexec::normAxis;
using cudaexec::stridesOf;

/// strided(x, shape, strides, base): a copy of x read at base + index .
/// strides (the view a transpose, broadcast, slice or split part is).
#define HP_STRIDED_COPY                                                                             \
  auto strided = [&](const Tensor &x, const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,  \
                     int64_t base) {                                                                \
    Tensor y = alloc(x.dtype(), shape);                                                             \
    launch(cudak::stridedCopy(x.raw(), y.raw(), int(dtypeSize(x.dtype())), makeStrided(shape, strides, base), stream)); \
    return y;                                                                                       \
  }

namespace {

// --- what the forward kernels do (deviceCheck) ---

std::string gatherCheck(const Node &, const std::vector<DType> &t) {
  DType idx = t.size() > 1 ? t[1] : DType::Undefined;
  if (idx != DType::Undefined && idx != DType::Int64 && idx != DType::Int32)
    return std::string("Gather indices of type ") + dtypeName(idx) + " are not supported on the CUDA device";
  return "";
}

// --- backward kernels (CudaTraining.cpp's sweep) ---

void aroundAxis(const std::vector<int64_t> &shape, int64_t axis, int64_t &outer, int64_t &inner) {
  outer = inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (int64_t i = axis + 1; i < int64_t(shape.size()); ++i) inner *= shape[i];
}

bool wanted(const std::vector<bool> &want, size_t i) { return i < want.size() && want[i]; }

/// Shape-only ops (Reshape, Flatten, ...): dX = dY reshaped (regPassThrough).
std::vector<Tensor> passThroughBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  const std::string &out0 = n.outputs.at(0);
  if (wanted(want, 0) && sw.hasGrad(out0)) g[0] = sw.copyAs(sw.devGrad(out0), sw.host(n.inputs[0]).shape());
  return g;
}

std::vector<Tensor> expandBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  const std::string &out0 = n.outputs.at(0);
  if (wanted(want, 0) && sw.hasGrad(out0)) g[0] = sw.reduceTo(sw.devGrad(out0), sw.host(n.inputs[0]).shape());
  return g;
}

std::vector<Tensor> transposeBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  const std::string &out0 = n.outputs.at(0);
  if (!wanted(want, 0) || !sw.hasGrad(out0)) return g;
  const Tensor &x = sw.host(n.inputs[0]), &dy = sw.devGrad(out0);
  int64_t r = x.rank();
  std::vector<int64_t> perm = cpu::transposePerm(n, r), sy = train::contiguousStrides(dy.shape());
  std::vector<int64_t> strides(static_cast<size_t>(r), 0);
  // dX[p] = dY[q] with q_i = p_perm[i]: X's dim perm[i] walks dY's dim i.
  for (int64_t i = 0; i < r; ++i) strides[size_t(perm[size_t(i)])] = sy[size_t(i)];
  Tensor dx = sw.device().alloc(DType::Float32, x.shape());
  cudaCheck(cudak::stridedCopy(dy.raw(), dx.raw(), 4, makeStrided(x.shape(), strides, 0), sw.device().stream),
            "Transpose gradient");
  g[0] = std::move(dx);
  return g;
}

std::vector<Tensor> splitGrad(Sweep &sw, const Node &n) {
  std::vector<Tensor> g(n.inputs.size());
  const Tensor &x = sw.host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", 0), x.rank());
  int64_t count = int64_t(n.outputs.size());
  bool hasSplit = n.inputs.size() > 1 && !n.inputs[1].empty();
  std::vector<int64_t> parts = sw.model().opset("") >= 13
                                   ? (hasSplit ? sw.hostValue(n.inputs[1])->toInt64Vector() : std::vector<int64_t>{})
                                   : n.getInts("split");
  if (parts.empty()) {
    int64_t each = (x.dim(axis) + count - 1) / count;
    for (int64_t i = 0; i < count; ++i) parts.push_back(std::min(each, x.dim(axis) - i * each));
  }
  int64_t outer, inner, D = x.dim(axis);
  aroundAxis(x.shape(), axis, outer, inner);
  Tensor dx = sw.device().zeros(DType::Float32, x.shape()); // outputs without a gradient contribute zeros
  char *pd = static_cast<char *>(dx.raw());
  const size_t es = sizeof(float);
  int64_t start = 0;
  for (int64_t i = 0; i < count && i < int64_t(parts.size()); ++i) {
    const std::string &o = n.outputs[size_t(i)];
    if (!o.empty() && sw.hasGrad(o)) {
      const Tensor &gi = sw.devGrad(o);
      if (gi.numel() != outer * parts[size_t(i)] * inner)
        throw std::runtime_error("gradient " + gi.describe() + " for output " + std::to_string(i) +
                                 " does not match the split");
      size_t row = size_t(parts[size_t(i)] * inner) * es;
      if (row && outer)
        cudaCheck(cudaMemcpy2DAsync(pd + size_t(start * inner) * es, size_t(D * inner) * es, gi.raw(), row, row,
                                    size_t(outer), cudaMemcpyDeviceToDevice, sw.device().stream),
                  "Split gradient (cudaMemcpy2DAsync)");
    }
    start += parts[size_t(i)];
  }
  g[0] = std::move(dx);
  return g;
}

std::vector<Tensor> concatBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  std::vector<Tensor> g(n.inputs.size());
  if (!sw.hasGrad(n.outputs[0])) return g;
  const Tensor &dy = sw.devGrad(n.outputs[0]);
  const Tensor *first = nullptr;
  for (const auto &s : n.inputs)
    if (!s.empty() && !first) first = &sw.host(s);
  if (!first) return g;
  int64_t axis = cpu::normAxis(n.getInt("axis", 0), first->rank());
  int64_t outer, inner, D = dy.dim(axis);
  aroundAxis(dy.shape(), axis, outer, inner);
  const size_t es = sizeof(float);
  const char *pg = static_cast<const char *>(dy.raw());
  int64_t offset = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor &x = sw.host(n.inputs[i]);
    int64_t len = x.dim(axis);
    if (want[i]) {
      Tensor gi = sw.device().alloc(DType::Float32, x.shape());
      size_t row = size_t(len * inner) * es;
      if (row && outer)
        cudaCheck(cudaMemcpy2DAsync(gi.raw(), row, pg + size_t(offset * inner) * es, size_t(D * inner) * es, row,
                                    size_t(outer), cudaMemcpyDeviceToDevice, sw.device().stream),
                  "Concat gradient (cudaMemcpy2DAsync)");
      g[i] = std::move(gi);
    }
    offset += len;
  }
  return g;
}

// Gather along `axis`: rows of dY are added back to the rows they came from.
std::vector<Tensor> gatherGrad(Sweep &sw, const Node &n) {
  std::vector<Tensor> g(n.inputs.size());
  const Tensor &x = sw.host(n.inputs[0]);
  int64_t axis = cpu::normAxis(n.getInt("axis", 0), x.rank());
  std::vector<int64_t> idx = sw.hostValue(n.inputs[1])->toInt64Vector();
  int64_t outer, inner, d = x.dim(axis), count = int64_t(idx.size());
  aroundAxis(x.shape(), axis, outer, inner);
  for (auto &k : idx) {
    int64_t v = k < 0 ? k + d : k;
    if (v < 0 || v >= d) throw std::runtime_error("Gather index " + std::to_string(k) + " out of range");
    k = v;
  }
  Tensor hostIdx(DType::Int64, {count});
  if (count) std::memcpy(hostIdx.raw(), idx.data(), idx.size() * sizeof(int64_t));
  Tensor devIdx = sw.device().upload(hostIdx);
  Tensor dx = sw.device().zeros(DType::Float32, x.shape());
  cudaCheck(cudak::gatherGrad(Sweep::fp(sw.devGrad(n.outputs[0])), devIdx.data<int64_t>(), Sweep::fp(dx), outer, count, d, inner,
                              sw.device().stream),
            "Gather gradient");
  g[0] = std::move(dx);
  return g;
}

std::vector<Tensor> splitBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  return wanted(want, 0) ? splitGrad(sw, n) : std::vector<Tensor>(n.inputs.size());
}

std::vector<Tensor> gatherBackward(Sweep &sw, const Node &n, const std::vector<bool> &want) {
  return wanted(want, 0) && sw.hasGrad(n.outputs.at(0)) ? gatherGrad(sw, n) : std::vector<Tensor>(n.inputs.size());
}

std::string gatherBackwardCheck(Sweep &sw, const Node &n, const std::vector<bool> &) {
  DType t = sw.host(n.inputs[1]).dtype();
  return t != DType::Int64 && t != DType::Int32 ? "indices not int32/int64" : "";
}

} // namespace

void CudaExecutor::Impl::registerMovementKernels(OpRegistry<DeviceKernel> &r) {
  auto movement = [](Forward run, Backward backward) {
    DeviceKernel k{run, Types::Movable};
    k.backward = backward;
    return k;
  };
  r.add("Transpose", movement(&Impl::runTranspose, transposeBackward));
  r.add("Expand", movement(&Impl::runExpand, expandBackward));
  r.add("Slice", movement(&Impl::runSlice, nullptr));
  r.add("Split", movement(&Impl::runSplit, splitBackward));
  r.add("Concat", movement(&Impl::runConcat, concatBackward));
  DeviceKernel gather = movement(&Impl::runGather, gatherBackward);
  gather.check = gatherCheck;
  gather.backwardCheck = gatherBackwardCheck;
  r.add("Gather", gather);
  // Shape-only ops: their CPU kernel runs on a device view of input 0
  // (CudaExecutor.cpp); the backward of those that pass dY on, here.
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Shape", "Size"}) {
    DeviceKernel k;
    k.shapeOnly = true;
    if (std::string(op) != "Shape" && std::string(op) != "Size") k.backward = passThroughBackward;
    r.add(op, k);
  }
}

void CudaExecutor::Impl::runTranspose(Call &c) {
  HP_DEVICE_CALL(c);
  HP_STRIDED_COPY;
  const Tensor &x = D(0);
  int64_t r = x.rank();
  std::vector<int64_t> perm = cpu::transposePerm(n, r);
  if (int64_t(perm.size()) != r) throw std::runtime_error("perm does not match the rank");
  auto st = stridesOf(x.shape());
  std::vector<int64_t> shape(r), strides(r);
  for (int64_t i = 0; i < r; ++i) { shape[i] = x.dim(perm[i]); strides[i] = st[perm[i]]; }
  outs[0].dev = strided(x, shape, strides, 0);
  return;
}

void CudaExecutor::Impl::runExpand(Call &c) {
  HP_DEVICE_CALL(c);
  HP_STRIDED_COPY;
  const Tensor &x = D(0);
  auto shape = broadcastShapes(x.shape(), H(1).toInt64Vector());
  outs[0].dev = strided(x, shape, broadcastStrides(x.shape(), shape), 0);
  return;
}

void CudaExecutor::Impl::runSlice(Call &c) {
  HP_DEVICE_CALL(c);
  HP_STRIDED_COPY;
  const Tensor &x = D(0);
  cpu::SliceArgs a = cpu::sliceArgs(n, opset, has, H);
  if (a.ends.size() != a.starts.size() || a.axes.size() != a.starts.size() || a.steps.size() != a.starts.size())
    throw std::runtime_error("starts/ends/axes/steps differ in length");
  cpu::SliceView v = cpu::sliceView(x.shape(), a);
  outs[0].dev = strided(x, v.shape, v.strides, shapeNumel(v.shape) ? v.base : 0);
  return;
}

void CudaExecutor::Impl::runSplit(Call &c) {
  HP_DEVICE_CALL(c);
  HP_STRIDED_COPY;
  const Tensor &x = D(0);
  int64_t axis = normAxis(n.getInt("axis", 0), x.rank());
  std::vector<int64_t> parts = opset >= 13 ? (has(1) ? H(1).toInt64Vector() : std::vector<int64_t>{}) : n.getInts("split");
  int64_t count = static_cast<int64_t>(outs.size());
  if (parts.empty()) {
    int64_t each = (x.dim(axis) + count - 1) / count;
    for (int64_t i = 0; i < count; ++i) parts.push_back(std::max<int64_t>(0, std::min(each, x.dim(axis) - i * each)));
  }
  if (int64_t(parts.size()) != count) throw std::runtime_error("split sizes do not match the outputs");
  auto st = stridesOf(x.shape());
  int64_t start = 0;
  for (int64_t i = 0; i < count; ++i) {
    auto shape = x.shape();
    shape[axis] = parts[i];
    if (start + parts[i] > x.dim(axis)) throw std::runtime_error("split sizes exceed the axis");
    if (!n.outputs[i].empty()) outs[i].dev = strided(x, shape, st, start * st[axis]);
    start += parts[i];
  }
  return;
}

void CudaExecutor::Impl::runConcat(Call &c) {
  HP_DEVICE_CALL(c);
  std::vector<const Tensor *> parts;
  for (size_t i = 0; i < ins.size(); ++i)
    if (has(i)) parts.push_back(&D(i));
  if (parts.empty()) throw std::runtime_error("Concat without inputs");
  int64_t axis = normAxis(n.getInt("axis", 0), parts[0]->rank());
  std::vector<int64_t> shape = parts[0]->shape();
  shape[axis] = 0;
  for (auto *t : parts) {
    if (t->dtype() != parts[0]->dtype() || t->rank() != parts[0]->rank())
      throw std::runtime_error("Concat inputs differ in type or rank");
    shape[axis] += t->dim(axis);
  }
  Tensor y = alloc(parts[0]->dtype(), shape);
  size_t es = dtypeSize(y.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (int64_t i = axis + 1; i < int64_t(shape.size()); ++i) inner *= shape[i];
  size_t rowOut = size_t(shape[axis] * inner) * es, offset = 0;
  for (auto *t : parts) {
    size_t row = size_t(t->dim(axis) * inner) * es;
    if (row && outer)
      cudaCheck(cudaMemcpy2DAsync(static_cast<char *>(y.raw()) + offset, rowOut, t->raw(), row, row, size_t(outer),
                                  cudaMemcpyDeviceToDevice, stream),
                "Concat (cudaMemcpy2DAsync)");
    offset += row;
  }
  outs[0].dev = y;
  return;
}

void CudaExecutor::Impl::runGather(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  int64_t axis = normAxis(n.getInt("axis", 0), x.rank());
  if (!has(1)) throw std::runtime_error("missing input 1");
  Val &iv = *ins[1];
  const Tensor &idxShapeOf = iv.any();
  int64_t d = x.dim(axis);
  if (iv.host.defined()) { // indices from the host are checked as the CPU kernel does
    for (int64_t k : iv.host.toInt64Vector())
      if ((k < 0 ? k + d : k) < 0 || (k < 0 ? k + d : k) >= d)
        throw std::runtime_error("Gather index " + std::to_string(k) + " out of range");
  }
  if (iv.dtype() != DType::Int64 && iv.dtype() != DType::Int32)
    throw std::runtime_error(std::string("Gather indices of type ") + dtypeName(iv.dtype()));
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), idxShapeOf.shape().begin(), idxShapeOf.shape().end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  Tensor y = alloc(x.dtype(), shape);
  if (y.numel())
    launch(cudak::gather(x.raw(), int(dtypeSize(x.dtype())), devOf(iv).raw(), iv.dtype() == DType::Int64, y.raw(),
                         outer, idxShapeOf.numel(), d, inner, stream));
  outs[0].dev = y;
  return;
}

} // namespace hetplan::runtime
