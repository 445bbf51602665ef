//===- CudaExecutorImpl.h - the CUDA executor's state, for its kernel files -*- C++ -*-===//
//
// CudaExecutor::Impl (CudaExecutor.cpp) and what its device kernels share.
// Op families' device kernels live in their own files (CudaElementwise.cpp,
// CudaLinalg.cpp, CudaPooling.cpp, CudaMovement.cpp) as Impl members and
// register by op type, forward and backward, with what they support
// (Impl::deviceKernels); runDevice, deviceCheck and the backward sweep
// (CudaTraining.cpp) dispatch by lookup.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/CudaBackend.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Kernels.h"

#include "../model/OpRegistry.h"
#include "CublasLt.h"
#include "CudaDevice.h"
#include "CudaFusion.h"
#include "CudaKernels.h"
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
#include "Cudnn.h"
#include "CudnnAttention.h"
#endif

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace hetplan::runtime {

namespace cudart {
class Sweep; // CudaSweep.h
}

namespace cudaexec {

/// A value: a host copy, a device copy (a view of device memory), or both.
/// `given`: a FORWARD's input (its transfers are counted), not a weight.
struct Val {
  Tensor host, dev;
  bool given = false;
  const Tensor &any() const { return host.defined() ? host : dev; }
  DType dtype() const { return any().dtype(); }
  const std::vector<int64_t> &shape() const { return any().shape(); }
  bool defined() const { return host.defined() || dev.defined(); }
};

/// "" when node `n` (input element types `t`) runs on the device, else why not.
std::string deviceCheck(const Node &n, const std::vector<DType> &t);
/// Element types data movement takes: 1, 2, 4 or 8 bytes (Undefined: not known).
bool movableType(DType t);
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape);
/// axis + rank for a negative axis; throws when out of range.
int64_t normAxis(int64_t axis, int64_t rank);
/// The convolution/pooling window (the CPU kernels' makeWindow) in the
/// device kernels' fixed-size form.
cudak::Window makeWindow(const Node &n, const std::vector<int64_t> &in, std::vector<int64_t> kernel, bool pool,
                         std::vector<int64_t> &outSpatial);

} // namespace cudaexec

using cudaexec::Val;

struct CudaExecutor::Impl : cudart::Device {
  const Model &model;
  std::vector<size_t> order;
  std::vector<bool> isFolded;
  std::map<std::string, DType> types;  // inferred element types (check())
  std::map<std::string, Val> weights;  // initializers and folded values
  std::mutex mutex;
  bool prepared = false;
  /// setStage(): prepare() uploads only the weights these nodes read (a
  /// plan rank's stage; others are uploaded on first use).
  std::set<size_t> stageNodes;
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
  std::unique_ptr<cudnn::Context> dnn; // convolution and pooling (prepare())
  cudnn::Math convMath = cudnn::Math::Fp32;
  std::unique_ptr<cudnn::Attention> sdpa; // fused attention (prepare())
#endif
  /// The plan's dtype (setPrecision): fp32, tf32, fp16 or bf16.
  std::string precision = "fp32";
  /// Fused groups (docs/gpu.md, "Fused on the GPU"), decided in prepare()
  /// for the stage and precision; groupOf: node -> index into groups.
  std::vector<CudaFusion> groups;
  std::map<size_t, size_t> groupOf;
  std::unique_ptr<cublaslt::Context> lt; // GEMM epilogues (prepare())
  bool sdpaNoted = false, ltNoted = false; // a fallback was logged once

  Impl(const Model &m, int dev) : model(m) { device = dev; }
  ~Impl() {
    if (!prepared) return;
    cudaSetDevice(device);
#if defined(HETPLAN_HAVE_CUDNN) && HETPLAN_HAVE_CUDNN
    sdpa.reset();
    dnn.reset();
#endif
    lt.reset();
    weights.clear(); // frees device copies (cudaFreeAsync on `stream`)
    cudaStreamSynchronize(stream);
    cublasDestroy(blas);
    cudaStreamDestroy(stream);
  }

  std::string where(const Node &n) const { return model.path + ": " + n.describe() + ": "; }

  // device memory, GEMMs: cudart::Device (CudaDevice.h)
  const Tensor &devOf(Val &v) {
    if (!v.dev.defined()) v.dev = v.given ? valueUpload(v.host) : upload(v.host);
    return v.dev;
  }
  const Tensor &hostOf(Val &v) {
    if (!v.host.defined()) v.host = v.given ? valueDownload(v.dev) : download(v.dev);
    return v.host;
  }

  void foldConstants();
  /// check(); `only`: just these nodes (a plan rank's stage).
  std::vector<std::string> check(const std::set<size_t> *only = nullptr) const;
  void prepare();
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs);
  std::map<std::string, Tensor> runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> given,
                                         const std::set<std::string> &keep,
                                         std::map<std::string, std::vector<int64_t>> *shapes,
                                         ExecutionObserver *observer, const Executor::NodeHook *hook,
                                         const std::set<size_t> *hookNodes, const std::set<std::string> *resident);
  bool runHooked(const Node &n, size_t idx, const Executor::NodeHook &hook, std::vector<Val *> &ins,
                 std::vector<Val> &outs);
  void runHost(const Node &n, std::vector<Val *> &ins, std::vector<Val> &outs, bool deviceView);
  void runDevice(const Node &n, std::vector<Val *> &ins, std::vector<Val> &outs);
  // device ops
  void matmul(const Tensor &a, const Tensor &b, Val &out);
  void gemm(const Node &n, const Tensor &a, const Tensor &b, const Tensor *c, Val &out);
  void conv(const Node &n, const Tensor &x, const Tensor &w, const Tensor *bias, Val &out);
  // fused groups (CudaFusion.h)
  using Lookup = std::function<Val *(const std::string &)>;
  std::vector<CudaFusion> findGroups() const;
  void decideFusions();
  /// The group's output from one library call; false (nothing computed)
  /// when the library declines the shapes, types or math.
  bool runGemmGroup(const CudaFusion &g, const Lookup &lookup, Val &out);
  bool runAttentionGroup(const CudaFusion &g, const Lookup &lookup, Val &out);
  /// The group's nodes one by one (the fallback); the output into `out`.
  void runGroupUnfused(const CudaFusion &g, const Lookup &lookup, Val &out);
  Tensor scratch(size_t bytes) { return alloc(DType::UInt8, {int64_t(bytes)}); }

  // The CUDA kernel registry: one entry per op type, filled by the family
  // files (CudaElementwise.cpp, CudaLinalg.cpp, CudaPooling.cpp,
  // CudaMovement.cpp) and read by runDevice/deviceCheck (the forward) and
  // CudaTraining.cpp's sweep (the backward). Building it touches no CUDA API.
  struct Call {
    const Node &n;
    std::vector<Val *> &ins;
    std::vector<Val> &outs;
  };
  /// The forward kernel: outs from ins on the device.
  using Forward = void (Impl::*)(Call &);
  /// The element types a forward kernel takes (deviceCheck).
  enum class Types {
    Float32, // every input float32 (or not known), but those `hostInput` names
    Movable, // input 0 of any element type of 1, 2, 4 or 8 bytes (data movement)
    Own,     // `check` alone decides
  };
  /// "" when the forward kernel does the node's case (input element types
  /// `t`, Undefined: not known), else why not.
  using Check = std::string (*)(const Node &n, const std::vector<DType> &t);
  /// The backward kernel (CudaSweep.h): the node's input gradients as device
  /// tensors (undefined where none or not wanted).
  using Backward = std::vector<Tensor> (*)(cudart::Sweep &s, const Node &n, const std::vector<bool> &want);
  /// "" when the backward kernel does the node's case (after the sweep's
  /// generic checks: float32 values, rank), else why the host runs it.
  using BackwardCheck = std::string (*)(cudart::Sweep &s, const Node &n, const std::vector<bool> &want);
  /// What a backward kernel reads of the forward pass beyond shapes: the
  /// float values of the node's inputs, of its outputs, or both (integer and
  /// bool inputs such as indices, split sizes or a condition aside, as the op
  /// table's `keeps`). OpTableTest checks it against the table's `keeps`.
  enum class Reads { Nothing, Inputs, Output, InputsAndOutput };
  struct DeviceKernel {
    Forward run = nullptr; // null: no forward kernel (shape-only ops, or a backward kernel alone)
    Types types = Types::Float32;
    /// Types::Float32: inputs read on the host (shapes, axes, scalars), of any type.
    bool (*hostInput)(size_t i) = nullptr;
    Check check = nullptr;
    bool boolOutput = false; // its outputs are bool (the executor's type inference)
    /// Its CPU kernel reads only input 0's shape: it runs on the host on a
    /// device view of input 0 (no copy); `run` is null.
    bool shapeOnly = false;
    Backward backward = nullptr;
    BackwardCheck backwardCheck = nullptr;
    Reads backwardReads = Reads::Nothing;
  };
  static const OpRegistry<DeviceKernel> &deviceKernels();
  // CudaElementwise.cpp: unary, binary, variadic, comparison, Not, Where,
  // Cast, Clip and the reductions.
  static void registerElementwiseKernels(OpRegistry<DeviceKernel> &r);
  void runUnary(Call &c);
  void runClip(Call &c);
  void runBinary(Call &c);
  void runVariadic(Call &c);
  void runCompare(Call &c);
  void runNot(Call &c);
  void runWhere(Call &c);
  void runCast(Call &c);
  void runReduce(Call &c);
  // CudaLinalg.cpp: the products, Softmax/LogSoftmax, LayerNormalization and
  // the fusion patterns over them (cudafuse::fusionPatterns).
  static void registerLinalgKernels(OpRegistry<DeviceKernel> &r);
  void runMatMul(Call &c);
  void runGemm(Call &c);
  void runConv(Call &c);
  void runSoftmax(Call &c);
  void runLayerNorm(Call &c);
  // CudaPooling.cpp: BatchNormalization, the pools, LRN.
  static void registerPoolingKernels(OpRegistry<DeviceKernel> &r);
  void runBatchNorm(Call &c);
  void runWindowPool(Call &c);
  void runGlobalPool(Call &c);
  void runLrn(Call &c);
  // CudaMovement.cpp: Transpose, Expand, Slice, Split, Concat, Gather and the
  // shape-only ops (marked shapeOnly, with their backward).
  static void registerMovementKernels(OpRegistry<DeviceKernel> &r);
  void runTranspose(Call &c);
  void runExpand(Call &c);
  void runSlice(Call &c);
  void runSplit(Call &c);
  void runConcat(Call &c);
  void runGather(Call &c);
};

/// The locals a device kernel's body reads (as runDevice has them): the node
/// `n`, its `op`, the default-domain `opset`, `ins`/`outs`, has(i), D(i)
/// (device copy), H(i) (host copy), launch(cudaError_t).
#define HP_DEVICE_CALL(c)                                                                          \
  const Node &n = (c).n;                                                                           \
  const std::string &op = n.opType;                                                                \
  int64_t opset = model.opset("");                                                                 \
  std::vector<Val *> &ins = (c).ins;                                                               \
  std::vector<Val> &outs = (c).outs;                                                               \
  auto has = [&](size_t i) { return i < ins.size() && ins[i] && ins[i]->defined(); };             \
  auto D = [&](size_t i) -> const Tensor & {                                                       \
    if (!has(i)) throw std::runtime_error("missing input " + std::to_string(i));                   \
    return devOf(*ins[i]);                                                                         \
  };                                                                                               \
  auto H = [&](size_t i) -> const Tensor & {                                                       \
    if (!has(i)) throw std::runtime_error("missing input " + std::to_string(i));                   \
    return hostOf(*ins[i]);                                                                        \
  };                                                                                               \
  auto launch = [&](cudaError_t e) { cudart::cudaCheck(e, (op + " kernel").c_str()); };           \
  (void)op, (void)opset, (void)outs, (void)D, (void)H, (void)launch

} // namespace hetplan::runtime
