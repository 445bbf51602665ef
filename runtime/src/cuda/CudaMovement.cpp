//===- CudaMovement.cpp - CUDA kernels: Transpose, Expand, Slice, Split, Concat, Gather ===//
//
// Data movement on the device, any element type of 1, 2, 4 or 8 bytes:
// strided copies, cudaMemcpy2D, a gather kernel. Registered by op type into
// CudaExecutor::Impl::deviceKernels.
//
//===----------------------------------------------------------------------===//
#include "CudaExecutorImpl.h"
#include "../cpu/kernels/ViewParams.h"
#include "ops/OpTable.h" // ops::names: the spelling of op types kernels register under

#include <algorithm>
#include <stdexcept>

namespace hetplan::runtime {

using cudart::cudaCheck;
using cudart::makeStrided;
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

void CudaExecutor::Impl::registerMovementKernels(OpRegistry<DeviceKernel> &r) {
  r.add("Transpose", &Impl::runTranspose);
  r.add("Expand", &Impl::runExpand);
  r.add("Slice", &Impl::runSlice);
  r.add("Split", &Impl::runSplit);
  r.add("Concat", &Impl::runConcat);
  r.add(ops::names::Gather, &Impl::runGather);
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
