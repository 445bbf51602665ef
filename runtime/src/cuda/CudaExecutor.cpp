//===- CudaExecutor.cpp - runs an ONNX graph on one CUDA GPU --------------===//
//
// Values are host and/or device copies of a tensor (a device copy is a
// Tensor view whose bytes are device memory, kept alive by a holder that
// calls cudaFreeAsync). Each node runs where its inputs say:
//   - shape-only ops (Reshape, Flatten, ..., registered so in the CUDA
//     kernel registry) only look at shapes: the CPU kernel runs on the
//     device view (no copy);
//   - a node with no floating-point input whose inputs are all on the host
//     (shape arithmetic on int64, bool masks) runs its CPU kernel there;
//   - everything else runs on the device (float32 compute; data movement of
//     any 1/2/4/8-byte type), uploading host inputs as needed.
// Weights (initializers and constant-folded values) are uploaded once, in
// prepare(); int64 weights are uploaded only if a device kernel reads them.
//
//===----------------------------------------------------------------------===//

#include "CudaExecutorImpl.h"
#include "../cpu/kernels/Geometry.h"
#include "../cpu/kernels/ViewParams.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>

namespace hetplan::runtime {

using cudak::Bcast;
using cudak::Strided;

namespace {

using cudart::blasCheck;
using cudart::makeBcast;
using cudart::makeStrided;
using cudart::blasInt;
using cudart::cudaCheck;
using cudaexec::deviceCheck;
using cudaexec::makeWindow;
using cudaexec::normAxis;
using cudaexec::stridesOf;

/// Ops whose CPU kernels read only the shape of input 0 (never its bytes):
/// they run on a device view as they are (registered so, CudaMovement.cpp).
bool isShapeOnly(const std::string &op) {
  const CudaExecutor::Impl::DeviceKernel *k = CudaExecutor::Impl::deviceKernels().find(op);
  return k && k->shapeOnly;
}

/// Comparisons: their device kernels' outputs are bool.
bool isBoolOp(const std::string &op) {
  const CudaExecutor::Impl::DeviceKernel *k = CudaExecutor::Impl::deviceKernels().find(op);
  return k && k->boolOutput;
}

/// Element types of every value, as far as they can be told without running
/// the graph: declared types first, then a per-op rule.
std::map<std::string, DType> inferTypes(const Model &m, const std::vector<size_t> &order,
                                        const std::map<std::string, Val> &weights) {
  std::map<std::string, DType> types = m.valueTypes;
  for (const auto &[name, v] : weights) types[name] = v.host.dtype(); // initializers and folded values
  for (size_t idx : order) {
    const Node &n = m.nodes[idx];
    auto in = [&](size_t i) {
      if (i >= n.inputs.size() || n.inputs[i].empty()) return DType::Undefined;
      auto it = types.find(n.inputs[i]);
      return it == types.end() ? DType::Undefined : it->second;
    };
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o].empty() || types.count(n.outputs[o])) continue;
      const std::string &op = n.opType;
      DType t = in(0);
      if (op == "Cast") t = static_cast<DType>(n.getInt("to", 0));
      else if (op == "Shape" || op == "Size" || op == "ArgMax" || op == "ArgMin" || op == "NonZero" ||
               (op == "MaxPool" && o == 1) || (op == "TopK" && o == 1))
        t = DType::Int64;
      else if (isBoolOp(op) || op == "Not" || op == "And" || op == "Or" || op == "Xor" || op == "IsNaN" ||
               op == "IsInf" || (op == "Dropout" && o == 1))
        t = DType::Bool;
      else if (op == "ConstantOfShape")
        t = n.has("value") ? n.attrs.at("value").t.dtype() : DType::Float32;
      else if (op == "Constant") {
        if (n.has("value")) t = n.attrs.at("value").t.dtype();
        else if (n.has("value_float") || n.has("value_floats")) t = DType::Float32;
        else if (n.has("value_int") || n.has("value_ints")) t = DType::Int64;
        else t = DType::Undefined;
      } else if (op == "Where") t = in(1);
      if (t != DType::Undefined) types[n.outputs[o]] = t;
    }
  }
  return types;
}


} // namespace

namespace cudaexec {

bool movableType(DType t) {
  if (t == DType::Undefined) return true;
  size_t s = dtypeSize(t);
  return t != DType::String && (s == 1 || s == 2 || s == 4 || s == 8);
}

/// "" when the device can run `n` with input element types `t` (Undefined:
/// not known, accepted), else why not: the registered kernel's element
/// types, then its own check of the node's case.
std::string deviceCheck(const Node &n, const std::vector<DType> &t) {
  const std::string &op = n.opType;
  const CudaExecutor::Impl::DeviceKernel *k = CudaExecutor::Impl::deviceKernels().find(op);
  if (!k || !k->run) return "no CUDA kernel for " + op;
  auto T = [&](size_t i) { return i < t.size() ? t[i] : DType::Undefined; };
  using Types = CudaExecutor::Impl::Types;
  if (k->types == Types::Float32) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      if (k->hostInput && k->hostInput(i)) continue; // shapes, axes or scalars (read on the host)
      if (T(i) != DType::Undefined && T(i) != DType::Float32)
        return std::string("element type ") + dtypeName(T(i)) + " is not supported on the CUDA device (float32 only)";
    }
  } else if (k->types == Types::Movable && !movableType(T(0))) {
    return std::string("element type ") + dtypeName(T(0)) + " is not supported on the CUDA device";
  }
  return k->check ? k->check(n, t) : std::string();
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

int64_t normAxis(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    throw std::runtime_error("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

/// The convolution/pooling window (the CPU kernels' makeWindow) in the
/// device kernels' fixed-size form.
cudak::Window makeWindow(const Node &n, const std::vector<int64_t> &in, std::vector<int64_t> kernel, bool pool,
                         std::vector<int64_t> &outSpatial) {
  size_t r = in.size();
  if (r < 1 || r > 3) throw std::runtime_error(std::to_string(r) + "-D windows are not supported on the CUDA device (1-3)");
  cpu::Window cw = cpu::makeWindow(n, in, std::move(kernel), pool);
  cudak::Window w;
  w.r = static_cast<int>(r);
  for (size_t i = 0; i < r; ++i) {
    w.in[i] = cw.in[i]; w.out[i] = cw.out[i]; w.k[i] = cw.kernel[i]; w.s[i] = cw.stride[i]; w.d[i] = cw.dil[i];
    w.pb[i] = cw.padBegin[i]; w.pe[i] = cw.padEnd[i];
  }
  outSpatial = cw.out;
  return w;
}

} // namespace cudaexec

const OpRegistry<CudaExecutor::Impl::DeviceKernel> &CudaExecutor::Impl::deviceKernels() {
  static const OpRegistry<DeviceKernel> r = [] {
    OpRegistry<DeviceKernel> k;
    registerElementwiseKernels(k);
    registerLinalgKernels(k);
    registerPoolingKernels(k);
    registerMovementKernels(k);
    return k;
  }();
  return r;
}


std::vector<CudaFusion> CudaExecutor::Impl::findGroups() const {
  auto constant = [&](const std::string &name) -> const Tensor * {
    auto it = weights.find(name);
    return it != weights.end() && it->second.host.defined() && it->second.host.dtype() == DType::Float32
               ? &it->second.host
               : nullptr;
  };
  return cudafuse::findFusions(model, order, isFolded, constant, precision, stageNodes);
}

void CudaExecutor::Impl::decideFusions() {
  groups.clear();
  groupOf.clear();
  for (auto &g : findGroups()) {
#if !(defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN)
    if (g.kind == CudaFusion::Kind::Attention) continue; // no cuDNN in this build
#endif
    for (size_t m : g.nodes) groupOf[m] = groups.size();
    groups.push_back(std::move(g));
  }
}

/// Nodes whose inputs are all constants run once here, with the CPU kernels
/// (as Executor does); their outputs become weights.
void CudaExecutor::Impl::foldConstants() {
  static const std::set<std::string> kNondeterministic = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                                          "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"};
  isFolded.assign(model.nodes.size(), false);
  for (const auto &[name, t] : model.initializers) weights[name].host = t;
  std::set<std::string> graphInputs;
  for (const auto &in : model.inputs) graphInputs.insert(in.name);
  int64_t opset = model.opset("");
  for (size_t idx : order) {
    const Node &n = model.nodes[idx];
    if ((!n.domain.empty() && n.domain != "ai.onnx") || kNondeterministic.count(n.opType)) continue;
    const KernelInfo *k = findKernel(n.opType);
    if (hasSubgraphAttribute(n) || !k) continue;
    KernelContext ctx{n, opset, {}, std::vector<Tensor>(n.outputs.size())};
    CheckContext cc{n, opset, {}};
    bool allConst = true;
    for (const auto &s : n.inputs) {
      if (s.empty()) { ctx.inputs.push_back(nullptr); cc.inputTypes.push_back(DType::Undefined); continue; }
      auto it = weights.find(s);
      if (graphInputs.count(s) || it == weights.end()) { allConst = false; break; }
      ctx.inputs.push_back(&it->second.host);
      cc.inputTypes.push_back(it->second.host.dtype());
    }
    if (!allConst) continue;
    DType t0 = cc.in(0);
    if (!k->types.empty() && t0 != DType::Undefined && std::find(k->types.begin(), k->types.end(), t0) == k->types.end())
      continue;
    if (k->check && !k->check(cc).empty()) continue;
    try {
      k->run(ctx);
    } catch (const std::exception &) {
      continue; // left to run time, which reports it
    }
    bool ok = true;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty() && !ctx.outputs[i].defined()) ok = false;
    if (!ok) continue;
    isFolded[idx] = true;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) weights[n.outputs[i]].host = std::move(ctx.outputs[i]);
  }
}

std::vector<std::string> CudaExecutor::Impl::check(const std::set<size_t> *only) const {
  std::vector<std::string> problems;
  for (const auto *list : {&model.inputs, &model.outputs})
    for (const auto &v : *list)
      if (!v.isTensor && !only)
        problems.push_back(model.path + ": value '" + v.name + "' is not a tensor (sequence/map/optional values are not supported)");
  int64_t opset = model.opset("");
  for (size_t idx : order) {
    if (isFolded[idx]) continue; // computed at load, on the CPU
    if (only && !only->count(idx)) continue;
    const Node &n = model.nodes[idx];
    std::string at = where(n);
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      problems.push_back(at + "domain '" + n.domain + "' is not supported");
      continue;
    }
    if (hasSubgraphAttribute(n)) {
      problems.push_back(at + "subgraph attributes are not supported");
      continue;
    }
    CheckContext cc{n, opset, {}};
    bool anyFloat = false;
    for (const auto &s : n.inputs) {
      auto it = types.find(s);
      DType t = s.empty() || it == types.end() ? DType::Undefined : it->second;
      cc.inputTypes.push_back(t);
      anyFloat = anyFloat || isFloatType(t);
    }
    const KernelInfo *k = findKernel(n.opType);
    auto cpuOk = [&]() -> std::string {
      if (!k) return "no kernel for " + n.opType;
      DType t0 = cc.in(0);
      if (!k->types.empty() && t0 != DType::Undefined && std::find(k->types.begin(), k->types.end(), t0) == k->types.end())
        return std::string("element type ") + dtypeName(t0) + " is not supported";
      return k->check ? k->check(cc) : std::string();
    };
    if (isShapeOnly(n.opType)) {
      std::string why = cpuOk();
      if (!why.empty()) problems.push_back(at + why);
      continue;
    }
    std::string dev = deviceCheck(n, cc.inputTypes);
    if (dev.empty()) continue;
    if (!anyFloat && cpuOk().empty()) continue; // runs on the host (integer/bool values)
    problems.push_back(at + dev);
  }
  return problems;
}

void CudaExecutor::Impl::prepare() {
  if (prepared) return;
  std::string why;
  if (!cudaDeviceAvailable(&why)) throw std::runtime_error(why);
  int count = 0;
  cudaCheck(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw std::runtime_error("no CUDA device: index " + std::to_string(device) + " of " + std::to_string(count));
  cudaCheck(cudaSetDevice(device), "cudaSetDevice");
  cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (cublasStatus_t st = cublasCreate(&blas); st != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    blasCheck(st, "cublasCreate");
  }
  prepared = true; // from here the destructor releases the stream and handle
  blasCheck(cublasSetStream(blas, stream), "cublasSetStream");
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
  dnn = std::make_unique<cudnn::Context>(stream);
  sdpa = std::make_unique<cudnn::Attention>(stream);
#endif
  lt = std::make_unique<cublaslt::Context>();
  decideFusions();
  // Plain FP32 (no TF32): results compare with the CPU at 1e-4.
  blasCheck(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  std::set<std::string> used; // weights read by nodes that run (of the stage, if one is set)
  for (size_t idx : order)
    if (!isFolded[idx] && (stageNodes.empty() || stageNodes.count(idx)))
      for (const auto &s : model.nodes[idx].inputs) used.insert(s);
  for (auto &[name, v] : weights)
    if (used.count(name) && v.host.dtype() == DType::Float32) v.dev = upload(v.host);
  cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize (weights)");
}

std::map<std::string, Tensor> CudaExecutor::Impl::run(const std::map<std::string, Tensor> &inputs) {
  std::lock_guard<std::mutex> lock(mutex);
  prepare();
  std::set<std::string> keep;
  for (const auto &o : model.outputs) keep.insert(o.name);
  std::map<std::string, Tensor> values;
  for (const auto &in : model.inputs) {
    auto it = inputs.find(in.name);
    if (it == inputs.end()) throw std::runtime_error(model.path + ": input '" + in.name + "' was not given");
    values[in.name] = it->second;
  }
  for (const auto &[name, t] : inputs)
    if (!values.count(name))
      throw std::runtime_error(model.path + ": '" + name + "' is not a graph input (overriding initializers is not supported on the CUDA backend)");
  std::vector<size_t> nodes;
  for (size_t idx : order)
    if (!isFolded[idx]) nodes.push_back(idx);
  auto got = runNodes(nodes, std::move(values), keep, nullptr, nullptr, nullptr, nullptr, nullptr);
  std::map<std::string, Tensor> out;
  for (const auto &o : model.outputs) {
    auto it = got.find(o.name);
    if (it == got.end()) throw std::runtime_error(model.path + ": output '" + o.name + "' was not produced");
    out[o.name] = std::move(it->second);
  }
  return out;
}

namespace {

/// The given values into `values` (device tensors used where they are,
/// another stream's memory noted in `foreign`); true when they replace
/// initializers.
bool takeGiven(CudaExecutor::Impl &impl, std::map<std::string, Tensor> &given, std::map<std::string, Val> &values,
               std::vector<std::shared_ptr<cudart::StreamMemory>> &foreign) {
  bool overridesWeights = false;
  for (auto &[name, t] : given) {
    bool weight = impl.model.initializers.count(name);
    overridesWeights = overridesWeights || weight;
    Val &v = values[name];
    v.given = !weight;
    if (t.isDevice()) v.dev = impl.deviceValue(t, foreign);
    else v.host = std::move(t);
  }
  return overridesWeights;
}

/// Value -> the last step reading it (a fused group reads at its step).
std::map<std::string, size_t> lastReads(const CudaExecutor::Impl &impl, const std::vector<size_t> &nodes,
                                        const std::vector<long> &fusedAt) {
  std::map<std::string, size_t> last; // value -> last step reading it (a group reads at its step)
  for (size_t step = 0; step < nodes.size(); ++step) {
    size_t at = fusedAt[step] >= 0 ? size_t(fusedAt[step]) : step;
    impl.model.nodes[nodes[step]].forEachRead([&](const std::string &v) { last[v] = std::max(last[v], at); });
  }
  return last;
}

/// Node n's input values (null: omitted) and their types; whether any is a
/// float and whether any has no host copy.
void gatherInputs(const CudaExecutor::Impl &impl, const Node &n, const CudaExecutor::Impl::Lookup &lookup,
                  std::vector<Val *> &ins, std::vector<DType> &inTypes, bool &anyFloat, bool &anyDeviceOnly) {
  for (const auto &s : n.inputs) {
    if (s.empty()) { ins.push_back(nullptr); inTypes.push_back(DType::Undefined); continue; }
    Val *v = lookup(s);
    if (!v) throw std::runtime_error(impl.where(n) + "value '" + s + "' is missing");
    ins.push_back(v);
    inTypes.push_back(v->dtype());
    anyFloat = anyFloat || isFloatType(v->dtype());
    anyDeviceOnly = anyDeviceOnly || !v->host.defined();
  }
}

/// Fused groups run at the step of their last node, when all their
/// nodes are here, none is offered to the hook and no value inside a
/// group is kept or given (nor are weights replaced: a training rank).
/// Returns, per step, the step its group runs at (-1: not fused).
std::vector<long> fusedSteps(const CudaExecutor::Impl &impl, const std::vector<size_t> &nodes,
                             const std::set<std::string> &keep, const std::map<std::string, Val> &values,
                             bool overridesWeights, const Executor::NodeHook *hook,
                             const std::set<size_t> *hookNodes) {
  std::vector<long> fusedAt(nodes.size(), -1); // step -> the step its group runs at
  if (!overridesWeights && !impl.groups.empty()) {
    std::map<size_t, size_t> stepOf;
    for (size_t step = 0; step < nodes.size(); ++step) stepOf[nodes[step]] = step;
    for (size_t gi = 0; gi < impl.groups.size(); ++gi) {
      const CudaFusion &g = impl.groups[gi];
      bool ok = true;
      long at = -1;
      for (size_t m : g.nodes) {
        auto it = stepOf.find(m);
        ok = ok && it != stepOf.end() && !(hook && hookNodes && hookNodes->count(m));
        if (it != stepOf.end()) at = std::max(at, long(it->second));
        for (const auto &o : impl.model.nodes[m].outputs)
          if (o != g.output) ok = ok && !keep.count(o) && !values.count(o);
      }
      if (!ok) continue;
      for (size_t m : g.nodes) fusedAt[stepOf[m]] = at;
    }
  }
  return fusedAt;
}

/// Node n on the hook, the host or the device; true when it ran on the device.
bool dispatchNode(CudaExecutor::Impl &impl, const Node &n, size_t idx, std::vector<Val *> &ins,
                  const std::vector<DType> &inTypes, std::vector<Val> &outs, bool anyFloat, bool anyDeviceOnly,
                  const Executor::NodeHook *hook, const std::set<size_t> *hookNodes) {
  bool onDevice = false;
  try {
    if (hook && hookNodes && hookNodes->count(idx) && impl.runHooked(n, idx, *hook, ins, outs)) {
      // the plan executor's tensor-parallel node, on host copies
    } else if (isShapeOnly(n.opType)) {
      impl.runHost(n, ins, outs, ins.size() && ins[0] && !ins[0]->host.defined());
    } else {
      std::string dev = deviceCheck(n, inTypes);
      if (!anyFloat && findKernel(n.opType) && (!anyDeviceOnly || !dev.empty()))
        impl.runHost(n, ins, outs, false);
      else if (dev.empty()) {
        impl.runDevice(n, ins, outs);
        onDevice = true;
      } else
        throw std::runtime_error(dev);
    }
  } catch (const std::exception &e) {
    throw std::runtime_error(impl.where(n) + e.what());
  }
  return onDevice;
}

/// The kept values into `out`: on the device where `resident` names them and
/// they have no host copy, else on the host. Returns this stream's memory
/// among the device ones (ready after an event recorded once they are all out).
std::vector<cudart::StreamMemory *> exportKept(CudaExecutor::Impl &impl, const std::set<std::string> &keep,
                                               std::map<std::string, Val> &values,
                                               const std::set<std::string> *resident,
                                               std::map<std::string, Tensor> &out) {
  std::vector<cudart::StreamMemory *> produced;
  for (const auto &name : keep) {
    auto it = values.find(name);
    if (it == values.end()) continue;
    Val &v = it->second;
    try {
      if (resident && resident->count(name) && !v.host.defined()) {
        out[name] = v.dev;
        if (cudart::StreamMemory *m = cudart::streamMemory(v.dev); m && m->owner() == impl.stream) produced.push_back(m);
        continue;
      }
      if (!v.host.defined()) v.host = impl.valueDownload(v.dev);
      const Tensor &h = v.host;
      out[name] = h.isView() ? h.clone() : h;
    } catch (const std::exception &e) {
      throw std::runtime_error(impl.model.path + ": value '" + name + "': " + e.what());
    }
  }
  return produced;
}

} // namespace

std::map<std::string, Tensor>
CudaExecutor::Impl::runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> given,
                             const std::set<std::string> &keep, std::map<std::string, std::vector<int64_t>> *shapes,
                             ExecutionObserver *observer, const Executor::NodeHook *hook,
                             const std::set<size_t> *hookNodes, const std::set<std::string> *resident) {
  cudaCheck(cudaSetDevice(device), "cudaSetDevice");
  std::map<std::string, Val> values;
  // Given values that replace initializers (a training rank's parameters)
  // make the values folded from them stale: their nodes run again. Given
  // device tensors (device-resident values) are used where they are, this
  // stream ordered after their producer; reads of another stream's memory
  // are marked for its free at the end (`foreign`).
  std::vector<std::shared_ptr<cudart::StreamMemory>> foreign;
  bool overridesWeights = takeGiven(*this, given, values, foreign);
  auto lookup = [&](const std::string &s) -> Val * {
    if (auto it = values.find(s); it != values.end()) return &it->second;
    if (auto it = weights.find(s); it != weights.end()) return &it->second;
    return nullptr;
  };
  // Fused groups run at the step of their last node (fusedSteps).
  std::vector<long> fusedAt = fusedSteps(*this, nodes, keep, values, overridesWeights, hook, hookNodes);
  std::map<std::string, size_t> last = lastReads(*this, nodes, fusedAt);
  // Per-node times (hetplan run --profile): CUDA events around device
  // work (the stream's time, not the host's launch time), steady_clock
  // around nodes that ran on the host.
  struct Timed {
    size_t node;
    cudaEvent_t begin = nullptr, end = nullptr;
    double hostSeconds = 0;
  };
  std::vector<Timed> timed;
  std::map<std::string, Tensor> out;
  auto releaseEvents = [&] {
    for (auto &t : timed) {
      if (t.begin) cudaEventDestroy(t.begin);
      if (t.end) cudaEventDestroy(t.end);
    }
  };
  // A fused group at its last node's step: its time goes to its first node
  // (the MatMul/Gemm), 0 to the others; the values inside it never exist.
  auto runFusedStep = [&](size_t step, size_t idx) {
    const CudaFusion &g = groups.at(groupOf.at(idx));
    const Node &head = model.nodes[g.nodes[0]];
    if (observer) {
      timed.push_back({g.nodes[0]});
      cudaCheck(cudaEventCreate(&timed.back().begin), "cudaEventCreate");
      cudaCheck(cudaEventCreate(&timed.back().end), "cudaEventCreate");
      cudaCheck(cudaEventRecord(timed.back().begin, stream), "cudaEventRecord");
    }
    Lookup find = [&](const std::string &s) { return lookup(s); };
    Val out;
    bool done = false;
    try {
      done = g.kind == CudaFusion::Kind::Attention ? runAttentionGroup(g, find, out) : runGemmGroup(g, find, out);
    } catch (const std::exception &e) {
      throw std::runtime_error(where(head) + "(fused) " + e.what());
    }
    if (!done) runGroupUnfused(g, find, out);
    if (observer) {
      cudaCheck(cudaEventRecord(timed.back().end, stream), "cudaEventRecord");
      for (size_t k = 1; k < g.nodes.size(); ++k) timed.push_back({g.nodes[k]}); // ran inside the group: 0 s
    }
    if (shapes) {
      std::vector<int64_t> inner = out.shape(); // GEMM: every value has the output's shape
      if (g.kind == CudaFusion::Kind::Attention && !inner.empty()) inner.back() = lookup(g.kT)->shape().back();
      for (size_t m : g.nodes)
        for (const auto &o : model.nodes[m].outputs)
          if (!o.empty()) (*shapes)[o] = o == g.output ? out.shape() : inner;
    }
    values[g.output] = std::move(out);
    for (size_t m : g.nodes)
      model.nodes[m].forEachRead([&](const std::string &s) {
        auto it = last.find(s);
        if (it != last.end() && it->second == step && !keep.count(s)) values.erase(s);
      });
  };
  try {
    for (size_t step = 0; step < nodes.size(); ++step) {
      size_t idx = nodes[step];
      if (isFolded[idx] && !overridesWeights) continue;
      if (fusedAt[step] >= 0) { // a fused group's node: the group runs at its last node's step
        if (fusedAt[step] == long(step)) runFusedStep(step, idx);
        continue;
      }
      const Node &n = model.nodes[idx];
      std::vector<Val *> ins;
      std::vector<DType> inTypes;
      bool anyFloat = false, anyDeviceOnly = false;
      gatherInputs(*this, n, lookup, ins, inTypes, anyFloat, anyDeviceOnly);
      std::vector<Val> outs(n.outputs.size());
      auto hostStart = std::chrono::steady_clock::now();
      if (observer) { // listed first, so that a failure below releases them
        timed.push_back({idx});
        cudaCheck(cudaEventCreate(&timed.back().begin), "cudaEventCreate");
        cudaCheck(cudaEventCreate(&timed.back().end), "cudaEventCreate");
        cudaCheck(cudaEventRecord(timed.back().begin, stream), "cudaEventRecord");
      }
      bool onDevice = dispatchNode(*this, n, idx, ins, inTypes, outs, anyFloat, anyDeviceOnly, hook, hookNodes);
      if (observer) {
        Timed &t = timed.back();
        cudaCheck(cudaEventRecord(t.end, stream), "cudaEventRecord");
        if (!onDevice) { // the host clock; no device work to time
          t.hostSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - hostStart).count();
          cudaEventDestroy(t.begin);
          cudaEventDestroy(t.end);
          t.begin = t.end = nullptr;
        }
      }
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!n.outputs[i].empty()) {
          if (!outs[i].defined()) throw std::runtime_error(where(n) + "output " + std::to_string(i) + " was not produced");
          if (shapes) (*shapes)[n.outputs[i]] = outs[i].shape();
          values[n.outputs[i]] = std::move(outs[i]);
        }
      n.forEachRead([&](const std::string &s) {
        auto it = last.find(s);
        if (it != last.end() && it->second == step && !keep.count(s)) values.erase(s);
      });
    }
    // Kept values: on the device where `resident` names them and they
    // have no host copy (ready after an event recorded now: another stream
    // or a host copy waits on it, this stream is already ordered), else
    // on the host.
    std::vector<cudart::StreamMemory *> produced = exportKept(*this, keep, values, resident, out);
    markRead(foreign);
    if (!produced.empty()) {
      std::shared_ptr<cudart::Event> ready = cudart::recordEvent(stream);
      for (cudart::StreamMemory *m : produced) m->setReady(ready);
    }
    // Host results were synchronized by their download; with device
    // results the host goes on while the stream computes (the next
    // instruction overlaps it), unless node times are wanted.
    if (!resident || observer) cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (const auto &t : timed) {
      float ms = 0;
      if (t.begin) cudaCheck(cudaEventElapsedTime(&ms, t.begin, t.end), "cudaEventElapsedTime");
      observer->nodeRan(t.node, t.begin ? double(ms) * 1e-3 : t.hostSeconds);
    }
  } catch (...) {
    releaseEvents();
    try {
      markRead(foreign); // their free still waits for the reads enqueued here
    } catch (...) {
    }
    throw;
  }
  releaseEvents();
  return out;
}

/// Offers node `n` to the plan executor's hook on host copies of its
/// inputs; true when the hook produced its outputs.
bool CudaExecutor::Impl::runHooked(const Node &n, size_t idx, const Executor::NodeHook &hook, std::vector<Val *> &ins,
                                   std::vector<Val> &outs) {
  KernelContext ctx{n, model.opset(""), {}, std::vector<Tensor>(n.outputs.size())};
  for (Val *v : ins) ctx.inputs.push_back(v ? &hostOf(*v) : nullptr);
  if (!hook(idx, ctx)) return false;
  for (size_t i = 0; i < outs.size(); ++i) outs[i].host = std::move(ctx.outputs[i]);
  return true;
}

/// The CPU kernel on host inputs. With `deviceView`, input 0 stays a device
/// view (shape-only ops); its outputs that view the same bytes stay device values.
void CudaExecutor::Impl::runHost(const Node &n, std::vector<Val *> &ins, std::vector<Val> &outs, bool deviceView) {
  const KernelInfo *k = findKernel(n.opType);
  if (!k) throw std::runtime_error("no kernel for " + n.opType);
  KernelContext ctx{n, model.opset(""), {}, std::vector<Tensor>(n.outputs.size())};
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i]) { ctx.inputs.push_back(nullptr); continue; }
    ctx.inputs.push_back(i == 0 && deviceView ? &ins[i]->dev : &hostOf(*ins[i]));
  }
  k->run(ctx);
  const void *devBytes = deviceView ? ins[0]->dev.raw() : nullptr;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!ctx.outputs[i].defined()) continue;
    if (devBytes && ctx.outputs[i].raw() == devBytes) outs[i].dev = std::move(ctx.outputs[i]);
    else outs[i].host = std::move(ctx.outputs[i]);
  }
}

/// Node n by its registered device kernel (CudaExecutorImpl.h).
void CudaExecutor::Impl::runDevice(const Node &n, std::vector<Val *> &ins, std::vector<Val> &outs) {
  const DeviceKernel *k = deviceKernels().find(n.opType);
  if (!k || !k->run) throw std::runtime_error("no CUDA kernel for " + n.opType);
  Call call{n, ins, outs};
  (this->*(k->run))(call);
}

CudaExecutor::CudaExecutor(const Model &model, int device) : impl_(std::make_unique<Impl>(model, device)) {
  impl_->order = topologicalOrder(impl_->model);
  impl_->foldConstants();
  impl_->types = inferTypes(model, impl_->order, impl_->weights);
}

CudaExecutor::~CudaExecutor() = default;

std::vector<std::string> CudaExecutor::check() const { return impl_->check(); }

cudart::Device &CudaExecutor::device() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->prepare();
  return *impl_;
}

std::vector<std::string> CudaExecutor::check(const std::vector<size_t> &nodes) const {
  std::set<size_t> only(nodes.begin(), nodes.end());
  return impl_->check(&only);
}

void CudaExecutor::setStage(const std::vector<size_t> &nodes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stageNodes = std::set<size_t>(nodes.begin(), nodes.end());
  if (impl_->prepared) impl_->decideFusions();
}

std::vector<CudaFusion> CudaExecutor::fusions() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->findGroups();
}

std::vector<CudaFusion> cudaFusions(const Model &model, const std::string &precision) {
  CudaExecutor e(model);
  e.setPrecision(precision);
  return e.fusions();
}

void CudaExecutor::setPrecision(const std::string &dtype) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  cublasComputeType_t c;
  if (dtype == "fp32" || dtype.empty()) c = CUBLAS_COMPUTE_32F;
  else if (dtype == "tf32") c = CUBLAS_COMPUTE_32F_FAST_TF32;
  else if (dtype == "fp16") c = CUBLAS_COMPUTE_32F_FAST_16F;
  else if (dtype == "bf16") c = CUBLAS_COMPUTE_32F_FAST_16BF;
  else throw std::runtime_error("CUDA executor: precision '" + dtype + "' (expected fp32, tf32, fp16 or bf16)");
  impl_->gemmCompute = c;
  impl_->precision = dtype.empty() ? "fp32" : dtype;
  if (impl_->prepared) impl_->decideFusions();
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
  impl_->convMath = c == CUBLAS_COMPUTE_32F ? cudnn::Math::Fp32 : cudnn::Math::TensorCores;
#endif
}

void CudaExecutor::prepare() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->prepare();
}

std::map<std::string, Tensor> CudaExecutor::run(const std::map<std::string, Tensor> &inputs) {
  return impl_->run(inputs);
}

std::map<std::string, Tensor> CudaExecutor::runNodes(const std::vector<size_t> &nodes,
                                                     std::map<std::string, Tensor> values,
                                                     const std::set<std::string> &keep,
                                                     std::map<std::string, std::vector<int64_t>> *shapes,
                                                     ExecutionObserver *observer, const Executor::NodeHook *hook,
                                                     const std::set<size_t> *hookNodes,
                                                     const std::set<std::string> *resident) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->prepare();
  return impl_->runNodes(nodes, std::move(values), keep, shapes, observer, hook, hookNodes, resident);
}

RankCompute::ValueTransfers CudaExecutor::valueTransfers() const {
  return {impl_->counts->toDevice.load(), impl_->counts->toHost.load()};
}

namespace {

std::vector<std::string> registeredOps(bool backward) {
  std::vector<std::string> out;
  const auto &r = CudaExecutor::Impl::deviceKernels();
  for (const std::string &op : r.opTypes())
    if (backward ? r.find(op)->backward != nullptr : r.find(op)->run != nullptr) out.push_back(op);
  return out;
}

} // namespace

std::vector<std::string> cudaForwardOpTypes() { return registeredOps(false); }
std::vector<std::string> cudaBackwardOpTypes() { return registeredOps(true); }

std::string cudaBackwardReads(const std::string &op) {
  const CudaExecutor::Impl::DeviceKernel *k = CudaExecutor::Impl::deviceKernels().find(op);
  if (!k || !k->backward) return "";
  switch (k->backwardReads) {
  case CudaExecutor::Impl::Reads::Nothing: return "nothing";
  case CudaExecutor::Impl::Reads::Inputs: return "inputs";
  case CudaExecutor::Impl::Reads::Output: return "output";
  case CudaExecutor::Impl::Reads::InputsAndOutput: return "inputs and output";
  }
  return "";
}

bool cudaDeviceAvailable(std::string *why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why)
      *why = err != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(err)
                                : std::string("no CUDA device: cudaGetDeviceCount found none");
    cudaGetLastError(); // clear the error for later calls
    return false;
  }
  return true;
}

} // namespace hetplan::runtime
