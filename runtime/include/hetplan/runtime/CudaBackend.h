//===- CudaBackend.h - runs a loaded ONNX model on one CUDA GPU --*- C++ -*-===//
//
// CudaExecutor mirrors Executor (Executor.h) on one GPU: float32 compute on
// the device (cuBLAS GEMMs, cuDNN convolutions and pooling where cuDNN
// expresses the window, im2col + cuBLAS and own kernels otherwise, CUDA
// kernels for the rest; stream-ordered allocation), small integer shape computations (Shape, Range,
// ConstantOfShape, int64 arithmetic feeding Reshape/Slice) on the host with
// the CPU kernels. Built only when CMake finds a CUDA toolkit (target
// hetplan_cuda, HETPLAN_HAVE_CUDA=1); this header includes no CUDA header.
// docs/runtime.md, "CUDA backend".
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_CUDABACKEND_H
#define HETPLAN_RUNTIME_CUDABACKEND_H

#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/RankBackend.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace hetplan::runtime {

namespace cudart {
struct Device; // runtime/src/cuda/CudaDevice.h
}

/// A group of ONNX nodes the CUDA executor runs as one library call
/// (docs/gpu.md, "Fused on the GPU"). `nodes` are indices into
/// Model::nodes in graph order; `nodes[0]` is the node the group's time is
/// attributed to (the MatMul/Gemm; the Q·Kᵀ MatMul of an attention), the
/// others run as part of it and are timed 0. Every value between the nodes
/// has its group as its only reader and is no graph output.
struct CudaFusion {
  enum class Kind {
    GemmBias,     ///< MatMul/Gemm + bias: one cublasLtMatmul, CUBLASLT_EPILOGUE_BIAS
    GemmBiasGelu, ///< ... + Gelu(approximate="tanh"): CUBLASLT_EPILOGUE_GELU_BIAS
    Attention,    ///< MatMul(Q, Kᵀ) [* or / scale] [+ mask] Softmax(-1) [Cast] MatMul(., V): cuDNN SDPA
  };
  Kind kind = Kind::GemmBias;
  std::vector<size_t> nodes;
  std::string output; ///< the value the group produces (its last node's output)
  // GemmBias(Gelu): the 1-D bias value (a constant); the Gemm's own C when empty
  std::string bias;
  // Attention: the values Q, Kᵀ (as the graph has it: [.., d, s_kv]), V,
  // the additive mask ("" none), and the scale the scores are multiplied by.
  std::string q, kT, v, mask;
  float scale = 1.f;
};

/// Which nodes of `model` the CUDA executor fuses at `precision` (fp32,
/// tf32, fp16 or bf16): the pattern matcher alone, no device needed.
/// Attention groups only at fp16/bf16 (cuDNN's flash attention needs half
/// inputs). The executor decides the same in prepare() for its stage.
std::vector<CudaFusion> cudaFusions(const Model &model, const std::string &precision = "fp32");

class CudaExecutor {
public:
  /// Orders the nodes topologically and folds constant subgraphs on the CPU
  /// (as Executor does). Touches no CUDA API: check() works without a device.
  /// `model` must outlive the executor.
  explicit CudaExecutor(const Model &model, int device = 0);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor &) = delete;
  CudaExecutor &operator=(const CudaExecutor &) = delete;

  /// Every node the backend cannot run, one line each naming the node (an
  /// op without a CUDA kernel, a floating-point type other than float32, an
  /// unsupported attribute). Empty when the model can run. Needs no device.
  std::vector<std::string> check() const;
  /// The same for the nodes `nodes` only (a plan rank's stage).
  std::vector<std::string> check(const std::vector<size_t> &nodes) const;

  /// The math of GEMMs and convolutions: "fp32" (the default: IEEE FP32,
  /// results within 1e-4 of the CPU), or "tf32" / "fp16" / "bf16" (a plan's
  /// dtype): float32 tensors whose products run on tensor cores at that
  /// precision with FP32 accumulation (cuBLAS compute types
  /// CUBLAS_COMPUTE_32F_FAST_*, cuDNN CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION).
  /// Storage stays float32. Throws on another name.
  void setPrecision(const std::string &dtype);

  /// The groups of nodes this executor runs fused at its precision and
  /// stage (cudaFusions). Needs no device.
  std::vector<CudaFusion> fusions() const;

  /// The nodes this executor will run (a plan rank's stage): prepare()
  /// uploads only their weights, so each GPU holds its stage's parameters,
  /// not the whole model's. Others are uploaded on first use. Before prepare().
  void setStage(const std::vector<size_t> &nodes);

  /// Selects the device, creates the stream and cuBLAS handle and uploads
  /// the float32 weights (initializers and folded constants), once. run()
  /// calls it; throws std::runtime_error ("no CUDA device: ...") without one.
  void prepare();

  /// Runs the graph on host tensors in, host tensors out (every graph input
  /// by name). Calls are serialized (one stream, one cuBLAS handle); errors
  /// are one line naming the model and the node.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs);

  /// Executor::runNodes on the GPU (a plan's stage on a CUDA rank): host
  /// tensors in and out, everything between on the device; but given
  /// device tensors (Tensor::isDevice: device-resident values, docs/gpu.md)
  /// are read where they are, and kept values named in `resident` come back
  /// as device tensors where they are on the device (the host does not
  /// then wait for the stream). Given values may
  /// replace initializers (a training rank's parameters; the values folded
  /// from them are then computed again). Nodes in `hookNodes` are first
  /// offered to `hook` on host copies of their inputs (the plan executor's
  /// tensor-parallel nodes). With `observer`, every node's time: CUDA
  /// events around device work, the host clock around host nodes.
  std::map<std::string, Tensor> runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
                                         const std::set<std::string> &keep,
                                         std::map<std::string, std::vector<int64_t>> *shapes = nullptr,
                                         ExecutionObserver *observer = nullptr,
                                         const Executor::NodeHook *hook = nullptr,
                                         const std::set<size_t> *hookNodes = nullptr,
                                         const std::set<std::string> *resident = nullptr);
  /// Bytes of forward values moved so far (RankCompute::valueTransfers).
  RankCompute::ValueTransfers valueTransfers() const;

  /// prepare(), then the device, stream and cuBLAS handle this executor
  /// computes on (internal: a CUDA rank's backward and Adam share them,
  /// runtime/src/cuda/CudaTraining.cpp).
  cudart::Device &device();

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

/// A plan rank's compute on CUDA device `device` (PlanExecutor::setCompute):
/// its own CudaExecutor over `model` (which must outlive it). `prepare`
/// uploads the weights now (throws "no CUDA device: ..." without one).
/// `precision`: setPrecision's (a plan's dtype). `stage`, when given: the
/// nodes the rank will run are checked first (check()); their problems go
/// to `*problems` and null is returned.
std::shared_ptr<RankCompute> makeCudaRankCompute(const Model &model, int device, bool prepare = true,
                                                 const std::string &precision = "fp32",
                                                 const std::vector<size_t> *stage = nullptr,
                                                 std::vector<std::string> *problems = nullptr);

/// This build and host for placeRanks (RankBackend.h): CUDA built, NCCL
/// if the NCCL communicator is, and the visible devices.
LocalDevices cudaLocalDevices();

/// The op types with a CUDA forward kernel, and those with a CUDA backward
/// kernel (the CUDA kernel registry, sorted). Needs no device: docs/ops.md
/// and test/unit/OpTableTest.cpp read them.
std::vector<std::string> cudaForwardOpTypes();
std::vector<std::string> cudaBackwardOpTypes();
/// What the CUDA backward kernel of `op` declares it reads of the forward
/// pass (float values): "nothing", "inputs", "output" or "inputs and
/// output"; "" when there is no CUDA backward kernel for `op`.
std::string cudaBackwardReads(const std::string &op);

/// True when a CUDA device is usable; else false with `why` set
/// ("no CUDA device: ..."). For tests that skip without a GPU.
bool cudaDeviceAvailable(std::string *why = nullptr);

} // namespace hetplan::runtime

#endif
