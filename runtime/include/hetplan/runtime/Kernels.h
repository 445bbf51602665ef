//===- Kernels.h - CPU kernels, registered by ONNX op type ------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Model.h"

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hetplan::runtime {

struct KernelContext {
  const Node &node;
  int64_t opset;
  std::vector<const Tensor *> inputs; // nullptr for an omitted optional input
  std::vector<Tensor> outputs;        // one per node output; the kernel fills them
  /// For kernels that run subgraphs (If, Loop, Scan): the values of the
  /// enclosing scopes by name (null when unknown). Set by the executors for
  /// nodes with implicitInputs; null otherwise.
  const std::function<const Tensor *(const std::string &)> *scope = nullptr;

  bool hasInput(size_t i) const { return i < inputs.size() && inputs[i] && inputs[i]->defined(); }
  const Tensor &in(size_t i) const {
    if (!hasInput(i))
      throw std::runtime_error("missing input " + std::to_string(i));
    return *inputs[i];
  }
  size_t numOutputs() const { return outputs.size(); }
};

/// What the load-time check sees: the node, the opset, and the element types
/// of its inputs where known (Undefined where not).
struct CheckContext {
  const Node &node;
  int64_t opset;
  std::vector<DType> inputTypes;
  DType in(size_t i) const { return i < inputTypes.size() ? inputTypes[i] : DType::Undefined; }
};

/// How a kernel meets float16/bfloat16 tensors (the one mechanism for
/// half-precision models, applied by registerKernel):
///   Auto    Upcast when `types` lists float32, else Native.
///   Upcast  the kernel computes in float32: float16/bfloat16 inputs are
///           converted to float32, the float32 kernel runs, and its float32
///           outputs are converted back to the (first) half input type;
///           float16 and bfloat16 join `types`.
///   Native  the kernel sees half tensors as they are (byte movers such as
///           Reshape/Gather, Cast, or kernels that read half scales).
enum class HalfPolicy { Auto, Upcast, Native };

struct KernelInfo {
  std::function<void(KernelContext &)> run;
  /// Returns "" when the node is supported, else why not.
  std::function<std::string(const CheckContext &)> check;
  /// Element types accepted for input 0 (empty: any); checked when known.
  std::vector<DType> types;
  HalfPolicy half = HalfPolicy::Auto;
  /// Takes inputs 0 and 3 with channels-last bytes (Tensor::channelsLast)
  /// as they are (Conv, pooling: the executor makes them plain for others).
  bool readsChannelsLast = false;
  /// Writes channels-last bytes when the executor marks the node (every
  /// reader of its output reads them: Fusion.h's kChannelsLastOutput; Conv).
  bool writesChannelsLast = false;
};

void registerKernel(const std::string &opType, KernelInfo info);
/// A kernel of another domain than ONNX's (com.microsoft contrib ops).
void registerKernel(const std::string &domain, const std::string &opType, KernelInfo info);
/// nullptr when no kernel exists for the op type (default domain).
const KernelInfo *findKernel(const std::string &opType);
/// The kernel of the node's op type in the node's domain ("" and "ai.onnx"
/// are ONNX's); nullptr when there is none.
const KernelInfo *findKernel(const Node &n);
/// Registered op types; those of other domains as "domain:OpType".
std::vector<std::string> registeredOpTypes();

/// Common type sets.
extern const std::vector<DType> kFloatTypes;   // float32, float64
extern const std::vector<DType> kNumericTypes; // floats and all integers
extern const std::vector<DType> kAllTypes;     // numeric + bool

} // namespace hetplan::runtime
