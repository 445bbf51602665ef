//===- CudaPooling.cpp - CUDA kernels: BatchNormalization, pools, LRN -----===//
//
// The pooling and channel-normalization family's device kernels (cuDNN
// where it expresses the window, the hand-written kernels of CudaKernels.cu
// otherwise), registered by op type, with the cases they leave to the host,
// into the CUDA kernel registry (CudaExecutor::Impl::deviceKernels).
// Inference only: no backward kernels here (the CPU's run on the host).
//
//===----------------------------------------------------------------------===//
#include "CudaExecutorImpl.h"

#include <algorithm>
#include <stdexcept>

namespace hetplan::runtime {

using cudaexec::makeWindow;
using Impl = CudaExecutor::Impl;

namespace {

std::string maxPoolCheck(const Node &n, const std::vector<DType> &) {
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) return "MaxPool's Indices output is not supported on the CUDA device";
  if (!n.has("kernel_shape")) return "kernel_shape is required";
  return "";
}

std::string averagePoolCheck(const Node &n, const std::vector<DType> &) {
  return n.has("kernel_shape") ? "" : "kernel_shape is required";
}

std::string batchNormCheck(const Node &n, const std::vector<DType> &) {
  if (n.getInt("training_mode", 0) || n.outputs.size() > 1) return "training mode is not supported (inference only)";
  return "";
}

} // namespace

void Impl::registerPoolingKernels(OpRegistry<DeviceKernel> &r) {
  DeviceKernel bn{&Impl::runBatchNorm};
  bn.check = batchNormCheck;
  r.add("BatchNormalization", bn);
  DeviceKernel maxPool{&Impl::runWindowPool}, averagePool{&Impl::runWindowPool};
  maxPool.check = maxPoolCheck;
  averagePool.check = averagePoolCheck;
  r.add("MaxPool", maxPool);
  r.add("AveragePool", averagePool);
  r.add("GlobalAveragePool", DeviceKernel{&Impl::runGlobalPool});
  r.add("GlobalMaxPool", DeviceKernel{&Impl::runGlobalPool});
  r.add("LRN", DeviceKernel{&Impl::runLrn});
}

void CudaExecutor::Impl::runBatchNorm(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  int64_t N = x.rank() > 0 ? x.dim(0) : 1, C = x.rank() > 1 ? x.dim(1) : 1, S = x.numel() / std::max<int64_t>(N * C, 1);
  for (size_t i = 1; i <= 4; ++i)
    if (D(i).numel() != C) throw std::runtime_error("BatchNormalization input " + std::to_string(i) + " is not [C]");
  Tensor y = alloc(DType::Float32, x.shape());
  launch(cudak::batchNorm(x.data<float>(), D(1).data<float>(), D(2).data<float>(), D(3).data<float>(),
                          D(4).data<float>(), y.data<float>(), N, C, S, n.getFloat("epsilon", 1e-5f), stream));
  outs[0].dev = y;
  return;
}

void CudaExecutor::Impl::runWindowPool(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  if (x.rank() < 3) throw std::runtime_error(op + " takes [N, C, spatial...]");
  std::vector<int64_t> inSp(x.shape().begin() + 2, x.shape().end()), outSp;
  cudak::Window w = makeWindow(n, inSp, n.getInts("kernel_shape"), true, outSp);
  std::vector<int64_t> outShape = {x.dim(0), x.dim(1)};
  outShape.insert(outShape.end(), outSp.begin(), outSp.end());
  Tensor y = alloc(DType::Float32, outShape);
  outs[0].dev = y;
  if (y.numel() == 0) return;
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
  if (dnn && dnn->pool(op == "MaxPool", n.getInt("count_include_pad", 0) != 0, x, w, y)) return;
#endif
  launch(cudak::pool(op == "MaxPool", x.data<float>(), y.data<float>(), x.dim(0) * x.dim(1), w,
                     n.getInt("count_include_pad", 0) != 0, stream));
  return;
}

void CudaExecutor::Impl::runGlobalPool(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  if (x.rank() < 2) throw std::runtime_error(op + " takes [N, C, ...]");
  int64_t NC = x.dim(0) * x.dim(1), S = NC ? x.numel() / NC : 0;
  std::vector<int64_t> shape(x.rank(), 1);
  shape[0] = x.dim(0); shape[1] = x.dim(1);
  Tensor y = alloc(DType::Float32, shape);
  launch(cudak::reduceRows(op == "GlobalMaxPool" ? cudak::Reduce::Max : cudak::Reduce::Mean, x.data<float>(),
                           y.data<float>(), NC, S, stream));
  outs[0].dev = y;
  return;
}

void CudaExecutor::Impl::runLrn(Call &c) {
  HP_DEVICE_CALL(c);
  const Tensor &x = D(0);
  if (x.rank() < 2) throw std::runtime_error("LRN takes [N, C, ...]");
  int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  Tensor y = alloc(DType::Float32, x.shape());
  launch(cudak::lrn(x.data<float>(), y.data<float>(), N, C, S, n.getInt("size", 1), n.getFloat("alpha", 1e-4f),
                    n.getFloat("beta", 0.75f), n.getFloat("bias", 1.0f), stream));
  outs[0].dev = y;
  return;
}

} // namespace hetplan::runtime
