//===- Gradients.h - backward kernels, registered by ONNX op type -*- C++ -*-===//
//
// Training plans run BACKWARD over a stage's nodes in reverse order: for each
// node, the gradient kernel of its op type turns the gradients of the node's
// outputs into gradients of its float inputs (reverse-mode autodiff, one op
// at a time, the way PyTorch's autograd formulas are written). The forward
// values the formulas need (the node's inputs and outputs) were kept by the
// FORWARD of the same micro-batch.
//
//===----------------------------------------------------------------------===//
#pragma once
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/Optimizers.h"
#include <functional>
#include <string>
#include <vector>

namespace hetplan::runtime {

struct GradientContext {
  const Node &node;
  int64_t opset;
  /// The forward inputs and outputs of the node (nullptr / undefined for an
  /// omitted optional one).
  std::vector<const Tensor *> inputs;
  std::vector<const Tensor *> outputs;
  /// Gradient of the loss w.r.t. each output; undefined (default Tensor)
  /// when that output does not reach the loss. At least one is defined.
  std::vector<Tensor> outputGrads;
  /// Which input gradients are wanted (float inputs on a path from a
  /// parameter or a received activation). The kernel fills inputGrads[i]
  /// for every wanted i with a tensor of exactly inputs[i]'s shape and
  /// dtype (broadcasting reduced away); it may leave one undefined when the
  /// gradient is zero everywhere (e.g. an output that does not depend on it).
  /// The tensors are freshly allocated (never views of outputGrads or of
  /// forward values), so the caller may accumulate into them in place. An
  /// output gradient of another float type than its output is cast first.
  std::vector<bool> wantGrad;
  std::vector<Tensor> inputGrads;

  bool hasInput(size_t i) const { return i < inputs.size() && inputs[i] && inputs[i]->defined(); }
  const Tensor &in(size_t i) const;
  const Tensor &out(size_t i) const;
  bool hasOutputGrad(size_t i) const { return i < outputGrads.size() && outputGrads[i].defined(); }
};

struct GradientInfo {
  std::function<void(GradientContext &)> run;
  /// "" when the node's backward is supported (attributes, dtypes), else why
  /// not; null means always supported. Checked when a training plan loads.
  std::function<std::string(const Node &, int64_t opset)> check;
  /// Inputs that never get a gradient (indices, shapes, axes, masks): the
  /// executor does not ask for them. Any input not listed may be asked for
  /// when it is float.
  std::vector<size_t> nonDifferentiable;
};

/// Offered a node of a backward sweep before its gradient kernel (the plan
/// executor's tensor-parallel nodes): true when it filled ctx.inputGrads.
using GradientHook = std::function<bool(size_t node, GradientContext &ctx)>;

void registerGradient(const std::string &opType, GradientInfo info);
/// nullptr when the op type has no backward kernel (default domain).
const GradientInfo *findGradient(const std::string &opType);
std::vector<std::string> registeredGradientOpTypes();

/// Sums `grad` (shape broadcastShapes(...) of an elementwise op's output)
/// down to `shape` (the input's shape before broadcasting). float32/float64.
Tensor reduceGradToShape(const Tensor &grad, const std::vector<int64_t> &shape);

/// Softmax cross-entropy of `logits` [..., C] against integer `labels` [...]
/// (int32/int64; positions equal to `ignoreIndex` count for nothing),
/// summed over positions and divided by `denominator` (the number of
/// counted positions in the whole global batch, so that pieces computed on
/// different ranks add up to the mean). Returns the loss piece; `gradLogits`,
/// when given, receives d(loss piece)/d(logits), float32.
double softmaxCrossEntropy(const Tensor &logits, const Tensor &labels, double denominator,
                           int64_t ignoreIndex, Tensor *gradLogits);

/// Binary cross-entropy of probabilities `probs` (a Sigmoid's output, e.g.
/// a recommender's click probability) against float `labels` in [0, 1] of
/// as many elements, as PyTorch's BCELoss computes it (each log clamped at
/// -100; the gradient (p - y) / max(p (1 - p), 1e-12)), summed and divided by
/// `denominator` (the global batch's label count). Returns the loss piece;
/// `gradProbs`, when given, receives d(loss piece)/d(probs), float32.
double binaryCrossEntropy(const Tensor &probs, const Tensor &labels, double denominator,
                          Tensor *gradProbs);

/// The optimizers and their hyper-parameters (Optimizers.h): train::
/// optimizerUpdate on the host, the fused kernels of a CUDA rank
/// (RankCompute::optimizerUpdate). AdamSettings is their former name.
using AdamSettings = OptimizerSettings;

} // namespace hetplan::runtime
