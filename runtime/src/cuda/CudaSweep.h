//===- CudaSweep.h - one BACKWARD on a CUDA device -------------*- C++ -*-===//
//
// Internal to runtime/src/cuda: the backward sweep's state (gradients on the
// device, forward values as the FORWARD left them) and the helpers the
// backward kernels of the family files (CudaElementwise.cpp, CudaLinalg.cpp,
// CudaMovement.cpp) share. CudaTraining.cpp runs the sweep: each node's
// backward by lookup in the CUDA kernel registry
// (CudaExecutor::Impl::deviceKernels), else on the host.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/Tensor.h"

#include "CudaDevice.h"
#include "CudaKernels.h"
#include "../exec/Training.h"
#include "../train/GradUtil.h"

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime::cudart {

/// One BACKWARD on the device: the gradients, the forward values, and the
/// helpers the backward kernels share.
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

  /// The device, its stream and cuBLAS handle; the model swept.
  Device &device() { return dev_; }
  const Model &model() const { return model_; }

  static const float *fp(const Tensor &t) { return t.data<float>(); }
  static float *fp(Tensor &t) { return t.data<float>(); }
  /// `g` (of shape dy) summed down to `shape` times `scale` (a copy when
  /// nothing is summed and scale is 1): reduceGradToShape.
  Tensor reduceTo(const Tensor &g, const std::vector<int64_t> &shape, float scale = 1.f);
  Tensor copyAs(const Tensor &g, const std::vector<int64_t> &shape);
  /// a op b broadcast to `shape` (dense).
  Tensor binary(cudak::Binary op, const Tensor &a, const Tensor &b, const std::vector<int64_t> &shape);

private:
  Device &dev_;
  const Model &model_;
  const std::function<const Tensor *(const std::string &)> &value_;
  std::map<std::string, Tensor> up_, down_;
  std::vector<std::shared_ptr<StreamMemory>> foreign_;
};

} // namespace hetplan::runtime::cudart
