//===- CudaTraining.h - a CUDA rank's BACKWARD and optimizer -*- C++ -*-===//
//
// Internal to runtime/src/cuda: what CudaRankCompute runs for the plan
// executor's BACKWARD and OPTIMIZER_STEP (RankCompute::backward,
// RankCompute::optimizerUpdate), on the CUDA executor's device, stream and cuBLAS
// handle. Host tensors in and out, as the FORWARD; docs/gpu.md, "What runs
// on the GPU".
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Model.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hetplan::runtime::cudart {

struct Device;

/// RankCompute::backward on the device: the sweep of train::backward
/// (train::backwardSweep), each node's gradient by device kernels and
/// cuBLAS where deviceGradientOps() has its op type and its values are
/// float32 (gradients stay on the device between nodes), else by the CPU
/// gradient kernel on host copies (train::hostNodeGradient; uploaded
/// again). The nodes in `hookNodes` go to `hook` on the host.
void backward(Device &dev, const Model &model, const std::vector<size_t> &nodes,
              const std::function<const Tensor *(const std::string &)> &value,
              const std::set<std::string> &requires, std::map<std::string, Tensor> &grads,
              const GradientHook *hook, const std::set<size_t> *hookNodes);

/// The op types with a device gradient.
const std::set<std::string> &deviceGradientOps();

/// RankCompute::optimizerUpdate on the device: train::optimizerUpdate's
/// formulas (SGD, momentum, Adam, AdamW) in one fused kernel per element
/// range; the host tensors are updated.
void optimizerUpdate(Device &dev, Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                     const OptimizerSettings &settings, const std::vector<std::pair<int64_t, int64_t>> &pieces);

} // namespace hetplan::runtime::cudart
