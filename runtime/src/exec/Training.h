//===- Training.h - the pieces of a training step (internal) ----*- C++ -*-===//
//
// What PlanExecutor's training programs are made of: which initializers are
// trained, the backward sweep over a node list, sums over a group of ranks,
// and the optimizers. Internal to hetplan_exec (docs/runtime.md, "Training plans").
//
//===----------------------------------------------------------------------===//
#pragma once
#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Model.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hetplan::runtime::train {

/// Ops whose outputs carry no gradient (shapes, comparisons, indices,
/// piecewise-constant functions): backward stops there.
bool isNonDifferentiable(const std::string &opType);

/// Inputs of `n` through which a gradient can flow (backward's rule, for
/// other sweeps such as the CUDA rank's).
std::vector<bool> differentiableInputs(const Node &n);

/// The trained parameters: float32 initializers with at least 2 elements
/// (the compiler's parameter rule) read by some node at an input that can
/// carry a gradient.
std::set<std::string> trainableParameters(const Model &model);

/// Every problem that stops backward over `nodes` (op without a backward
/// kernel on a path from a parameter, unsupported attributes), one line
/// each naming the node. `seeds`: values that carry gradients on entry.
std::vector<std::string> checkBackward(const Model &model, const std::vector<size_t> &nodes,
                                       const std::set<std::string> &seeds);

/// Values that carry gradients after a forward over `nodes`: the seeds, and
/// every float output of a differentiable node with a differentiable input
/// that carries one. `value` finds a forward value (nullptr if none).
std::set<std::string> requiresGrad(const Model &model, const std::vector<size_t> &nodes,
                                   const std::set<std::string> &seeds,
                                   const std::function<const Tensor *(const std::string &)> &value);

/// Reverse-mode sweep: `grads` holds gradients of some values on entry
/// (the loss output's, received ones); on return it also holds the
/// gradient of every value in `requires` that reaches them (summed over
/// uses). Float32/float64 values only.
/// `hook`, when given, is offered every node first (tensor-parallel
/// MatMuls): true when it filled ctx.inputGrads itself.
using runtime::GradientHook; // Gradients.h
void backward(const Model &model, const std::vector<size_t> &nodes,
              const std::function<const Tensor *(const std::string &)> &value,
              const std::set<std::string> &requires, std::map<std::string, Tensor> &grads,
              const GradientHook *hook = nullptr);

/// The skeleton of a backward sweep, shared by backward() and the CUDA
/// rank's (RankCompute::backward): over `nodes` in reverse, a node with an
/// output gradient (`hasGrad`) and a wanted input (differentiable, in
/// `requires`) gets step(node, want); then done(output) for each of its
/// outputs (its gradient is complete and may be freed).
void backwardSweep(const Model &model, const std::vector<size_t> &nodes, const std::set<std::string> &requires,
                   const std::function<bool(const std::string &)> &hasGrad,
                   const std::function<void(size_t, const std::vector<bool> &)> &step,
                   const std::function<void(const std::string &)> &done);
/// One node's backward on the host: `hook` (when given) or the node's
/// gradient kernel on its forward values (`value`) and output gradients
/// (`outGrad`: undefined where none). Returns per input its gradient
/// (undefined where not wanted or zero), each checked to have its input's
/// shape. Errors start with backwardWhere().
std::vector<Tensor> hostNodeGradient(const Model &model, size_t node, const std::vector<bool> &want,
                                     const std::function<const Tensor *(const std::string &)> &value,
                                     const std::function<Tensor(const std::string &)> &outGrad,
                                     const GradientHook *hook);
/// "model: node: backward: ", the start of a backward error.
std::string backwardWhere(const Model &model, const Node &n);

/// acc += g (same shape and type); an undefined `acc` becomes a copy of g.
void accumulate(Tensor &acc, const Tensor &g);

/// groupSum of one float32 embedding table's gradient `grad` (host memory)
/// whose rows of `rowLength` elements are mostly zero: each member sends
/// only its nonzero rows (indices and values) to the lowest rank, which adds
/// them in rank order and sends the nonzero rows of the sum back; every
/// member ends with the bits a dense groupSum gives, and only looked-up rows
/// move (sparse embedding updates). Uses `tag` and `tag + 1`.
void sparseRowSum(Communicator &comm, const std::vector<int> &group, int64_t tag, Tensor &grad,
                  int64_t rowLength);

/// Sums `tensors` (all float32 or all float64) elementwise over the ranks `group` (sorted,
/// containing comm.rank()), in place: the lowest rank adds the others'
/// values in rank order and sends the sum back, so every member ends with
/// the same bits. `tag` must be the same on every member and unused by
/// other traffic between them.
void groupSum(Communicator &comm, const std::vector<int> &group, int64_t tag,
              const std::vector<Tensor *> &tensors);
/// A group sum's tensors (all float32 or all float64, else throws) in one
/// 1-D tensor, in order; unflattenSum copies such a tensor back into them.
Tensor flattenForSum(const std::vector<Tensor *> &tensors);
void unflattenSum(const Tensor &flat, const std::vector<Tensor *> &tensors);
/// The same with the elementwise maximum (tags `tag` and `tag + 1`).
void groupMax(Communicator &comm, const std::vector<int> &group, int64_t tag,
              const std::vector<Tensor *> &tensors);

/// Megatron's vocab-parallel cross entropy (Shoeybi et al. 2019, 3.): each
/// rank of `group` holds columns [lo, lo + logits.dim(-1)) of the `vocab`
/// classes. The row maxima (groupMax, tag `tagMax`), then each row's sum of
/// exponentials and its label's logit (groupSum, `tagSum`) are combined
/// over the group: 3 values per row in two collectives. Every rank returns
/// the same loss (summed over rows, divided by `denominator`; rows labelled
/// `ignoreIndex` count nothing) and, when `grad` is given, the gradient of
/// its own columns, as softmaxCrossEntropy would give for the whole logits.
double vocabParallelCrossEntropy(Communicator &comm, const std::vector<int> &group, int64_t tagMax,
                                 int64_t tagSum, const Tensor &logits, const Tensor &labels, int64_t lo,
                                 int64_t vocab, double denominator, int64_t ignoreIndex, Tensor *grad);

using runtime::OptimizerSettings; // Optimizers.h
/// One optimizer step (`s.kind`, PyTorch's formulas: docs/runtime.md,
/// "Optimizers") of `param` at step `step` (1-based), in place; of its
/// elements [begin, begin + count) only when count >= 0 (a ZeRO shard's
/// piece of one parameter). `m` is the momentum buffer or Adam's first
/// moment, `v` Adam's second moment; the buffers the optimizer keeps
/// (optimizerStateBuffers) are made (zeros) when undefined, the others
/// stay undefined.
void optimizerUpdate(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                     const OptimizerSettings &s, int64_t begin = 0, int64_t count = -1);
/// The optimizer's checks (float32 parameter and gradient of one size,
/// state that fits), making its buffers (zeros) when undefined; throws one
/// line.
void prepareOptimizer(const Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, Optimizer kind);
/// optimizerUpdate of the element ranges (begin, count) `pieces`, or of the
/// whole parameter when empty.
void optimizerUpdatePieces(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                           const OptimizerSettings &s, const std::vector<std::pair<int64_t, int64_t>> &pieces);

} // namespace hetplan::runtime::train
