//===- Cudnn.h - convolution and pooling with cuDNN (CudaExecutor) -*- C++ -*-===//
//
// cuDNN's convolution and pooling for the CUDA executor (docs/gpu.md), with
// its legacy descriptor API (cudnn_cnn.h / cudnn_ops.h, deprecated in cuDNN
// 9 in favour of the graph API but supported through 9.x). Each call says
// whether cuDNN could express the node exactly: ONNX windows cuDNN has no
// form for (asymmetric padding, ceil_mode outputs, dilated pooling) return
// false and the executor runs its own kernels instead. Only compiled when
// CMake finds cuDNN (HETPLAN_HAVE_CUDNN).
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_CUDA_CUDNN_H
#define HETPLAN_RUNTIME_CUDA_CUDNN_H

#include "CudaKernels.h"
#include "hetplan/runtime/Tensor.h"

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>

namespace hetplan::runtime::cudnn {

/// How convolutions may round: exact float32 FMAs (the CPU's results to
/// 1e-4), or tensor cores (TF32 / FP16 / BF16 inputs: the plan's dtype).
enum class Math { Fp32, TensorCores };

/// A cuDNN handle bound to one stream, and the algorithm chosen per
/// convolution shape. Not thread-safe (the executor serializes runs).
class Context {
public:
  explicit Context(cudaStream_t stream);
  ~Context();
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;

  /// y = conv(x, w) over `win` with `groups` (NCHW float32, device
  /// tensors; y already allocated with the ONNX output shape). `scratch`
  /// allocates a stream-ordered workspace. False, doing nothing, when
  /// cuDNN cannot express the window; throws on a cuDNN error.
  bool conv(const Tensor &x, const Tensor &w, int64_t groups, const cudak::Window &win, Math math, Tensor &y,
            const std::function<Tensor(size_t bytes)> &scratch);
  /// MaxPool / AveragePool: false when the window has dilation, unequal
  /// padding or an output size cuDNN's floor rule does not give.
  bool pool(bool max, bool countIncludePad, const Tensor &x, const cudak::Window &win, Tensor &y);

  struct State;

private:
  std::unique_ptr<State> state_;
};

} // namespace hetplan::runtime::cudnn

#endif
