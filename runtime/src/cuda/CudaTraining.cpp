//===- CudaTraining.cpp - a CUDA rank's BACKWARD and optimizer on its GPU -===//
//
// The device gradients mirror the CPU gradient kernels (runtime/src/train)
// op by op: the same formulas, the same cases, row-major GEMMs through
// Device::rowGemm with cpu::gemm's arguments. Each op's backward kernel and
// the cases it leaves to the host live in its family's kernel file and are
// found in the CUDA kernel registry (CudaExecutor::Impl::deviceKernels); the
// sweep here (CudaSweep.h) holds the gradients and forward values. Gradients live on the device
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

#include "CudaExecutorImpl.h"
#include "CudaSweep.h"
#include "../exec/Training.h"
#include "../train/GradUtil.h"

#include <cmath>
#include <stdexcept>

namespace hetplan::runtime::cudart {

using Kernel = CudaExecutor::Impl::DeviceKernel;

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

std::string Sweep::whyHost(const Node &n, const std::vector<bool> &want) {
  const std::string &op = n.opType;
  const Kernel *k = CudaExecutor::Impl::deviceKernels().find(op);
  if (!k || !k->backward) return "no device gradient for " + op;
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
  return k->backwardCheck ? k->backwardCheck(*this, n, want) : std::string();
}

std::vector<Tensor> Sweep::run(const Node &n, const std::vector<bool> &want) {
  (void)n.outputs.at(0); // as before the registry: a node without outputs throws out_of_range
  const Kernel *k = CudaExecutor::Impl::deviceKernels().find(n.opType);
  if (!k || !k->backward) throw std::runtime_error("no device gradient for " + n.opType);
  return k->backward(*this, n, want);
}

const std::set<std::string> &deviceGradientOps() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s;
    const auto &r = CudaExecutor::Impl::deviceKernels();
    for (const std::string &op : r.opTypes())
      if (r.find(op)->backward) s.insert(op);
    return s;
  }();
  return ops;
}

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

void optimizerUpdate(Device &dev, Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                     const OptimizerSettings &s, const std::vector<std::pair<int64_t, int64_t>> &pieces) {
  const std::string name = optimizerName(s.kind);
  train::prepareOptimizer(param, grad, m, v, s.kind);
  for (auto [begin, count] : pieces)
    if (begin < 0 || count < 0 || begin + count > param.numel())
      throw std::runtime_error(name + ": element range outside the parameter");
  cudaCheck(cudaSetDevice(dev.device), "cudaSetDevice");
  // The buffers the optimizer does not keep stay undefined (no upload).
  Tensor p = dev.upload(param), g = dev.upload(grad);
  Tensor dm = m.defined() ? dev.upload(m) : Tensor(), dv = v.defined() ? dev.upload(v) : Tensor();
  cudak::OptimizerStep k;
  k.kind = cudak::OptimizerStep::Kind(int(s.kind));
  k.lr = s.lr, k.beta1 = s.beta1, k.beta2 = s.beta2, k.eps = s.eps, k.weightDecay = s.weightDecay;
  k.momentum = s.momentum;
  k.c1 = 1 - std::pow(s.beta1, double(step)), k.c2 = 1 - std::pow(s.beta2, double(step));
  auto at = [](Tensor &t, int64_t begin) { return t.defined() ? t.data<float>() + begin : nullptr; };
  std::vector<std::pair<int64_t, int64_t>> ranges = pieces;
  if (ranges.empty()) ranges.push_back({0, param.numel()});
  for (auto [begin, count] : ranges)
    cudaCheck(cudak::optimizer(p.data<float>() + begin, g.data<float>() + begin, at(dm, begin), at(dv, begin),
                               count, k, dev.stream),
              (name + " kernel").c_str());
  // Back into the host tensors (pageable memory: each copy returns once done).
  const std::pair<Tensor *, const Tensor *> back[] = {{&param, &p}, {&m, &dm}, {&v, &dv}};
  for (const auto &[host, d] : back)
    if (d->defined() && d->nbytes())
      cudaCheck(cudaMemcpyAsync(host->raw(), d->raw(), d->nbytes(), cudaMemcpyDeviceToHost, dev.stream),
                (name + " (cudaMemcpyAsync to host)").c_str());
  cudaCheck(cudaStreamSynchronize(dev.stream), ("cudaStreamSynchronize (" + name + ")").c_str());
}

} // namespace hetplan::runtime::cudart
