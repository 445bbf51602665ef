//===- TensorParallel.cpp - split nodes, forward and backward -------------===//
#include "RankProgram.h"


namespace hetplan::runtime {

using namespace planexec;

PlanExecutor::RankProgram::Part PlanExecutor::RankProgram::mineOf(const Node &n, size_t input, const Tensor &w) const {
  auto [axis, segments] = tpParams_[j].at(n.inputs[input]);
  Ranges ranges = shardRanges(w.dim(axis), segments, tpIndex, tp);
  Tensor value = slices(w, axis, ranges);
  return Part{axis, std::move(ranges), std::move(value)};
}

Ranges PlanExecutor::RankProgram::vocabRanges(const Tensor &w) const {
  if (w.rank() != 2) fail(who + "a vocab-parallel head multiplies by " + w.describe() + ", not a matrix");
  return shardRanges(w.dim(1), 1, tpIndex, tp);
}

// Split nodes (the plan's tensor_parallel_nodes): column MatMuls keep
// their columns of the output, row MatMuls all-reduce their partial
// sums, gathered ones all-gather; biases, Splits and Reshapes work on
// this rank's slice; the rest runs unchanged on the slices.
bool PlanExecutor::RankProgram::tpForward(uint32_t mb, size_t node, KernelContext &ctx) {
  auto it = splitNodes.find(node);
  if (it == splitNodes.end()) return false;
  const plan::TensorParallelNode &tn = it->second;
  const Node &n = model_->nodes[node];
  auto run = [&](const char *op, std::vector<const Tensor *> in) {
    KernelContext part{ctx.node, ctx.opset, std::move(in), std::vector<Tensor>(ctx.outputs.size())};
    findKernel(op)->run(part);
    return std::move(part.outputs);
  };
  switch (tn.role()) {
  case plan::TensorParallelNode::COLUMN: {
    Part w = mineOf(n, 1, ctx.in(1));
    ctx.outputs[0] = std::move(run(tpProductOp(), {ctx.inputs[0], &w.value})[0]);
    return true;
  }
  case plan::TensorParallelNode::ROW: {
    Part w = mineOf(n, 1, ctx.in(1));
    Tensor y = std::move(run(tpProductOp(), {ctx.inputs[0], &w.value})[0]);
    train::groupSum(comm, tpGroup, tpTag(mb, node, numNodes, 0), {&y});
    if (timing) {
      timing->forwardAllReduces++;
      timing->forwardAllReduceElements += double(y.numel());
    }
    ctx.outputs[0] = std::move(y);
    return true;
  }
  case plan::TensorParallelNode::BIAS: {
    size_t b = size_t(tn.axis());
    Part bias = mineOf(n, b, ctx.in(b));
    ctx.outputs[0] = std::move(run(kAddOp, bias.in(ctx.inputs, b))[0]);
    return true;
  }
  case plan::TensorParallelNode::VOCAB: {
    // This rank's columns (vocabulary entries) of the logits; the loss
    // below works on them.
    if (!train || n.outputs[0] != lossOutput)
      fail(who + n.describe() + " is a vocab-parallel head; its output must be the loss output");
    Tensor w = slices(ctx.in(1), 1, vocabRanges(ctx.in(1)));
    ctx.outputs[0] = std::move(run(tpProductOp(), {ctx.inputs[0], &w})[0]);
    return true;
  }
  case plan::TensorParallelNode::SPLIT: {
    const Tensor &x = ctx.in(0);
    int axis = int(tn.axis()), parts = int(ctx.outputs.size());
    int64_t width = x.dim(axis) / parts;
    if (width * parts != x.dim(axis))
      fail(who + n.describe() + ": " + x.describe() + " does not split into " + std::to_string(parts) + " equal parts");
    for (int i = 0; i < parts; ++i) ctx.outputs[size_t(i)] = slices(x, axis, {{i * width, (i + 1) * width}});
    return true;
  }
  case plan::TensorParallelNode::RESHAPE: {
    // The whole tensor's target (0 copies a dim, -1 takes the rest),
    // then its split dim divided among the ranks.
    const Tensor &x = ctx.in(0);
    std::vector<int64_t> target = ctx.in(1).toInt64Vector();
    int64_t whole = x.numel() * tp, known = 1;
    int rest = -1;
    for (size_t d = 0; d < target.size(); ++d) {
      if (target[d] == 0 && !n.getInt("allowzero", 0) && int64_t(d) < x.rank()) target[d] = x.dim(int64_t(d));
      if (target[d] == -1) rest = int(d);
      else known *= target[d];
    }
    if (rest >= 0 && known > 0) target[size_t(rest)] = whole / known;
    size_t axis = size_t(tn.axis());
    if (axis >= target.size() || target[axis] % tp != 0 || shapeNumel(target) != whole)
      fail(who + n.describe() + ": cannot split the reshape of " + x.describe() + " to " +
           shapeString(target) + " on dim " + std::to_string(axis) + " over " + std::to_string(tp) + " ranks");
    target[axis] /= tp;
    ctx.outputs[0] = x.reshaped(target);
    return true;
  }
  case plan::TensorParallelNode::GATHER: {
    const Tensor &w = ctx.in(1);
    Part mine = mineOf(n, 1, w);
    Tensor piece = std::move(run(tpProductOp(), {ctx.inputs[0], &mine.value})[0]);
    int64_t tag = tpTag(mb, node, numNodes, 0);
    // One group: every rank sends before it receives (NCCL-safe).
    std::vector<Tensor> pieces(static_cast<size_t>(tp));
    comm.groupStart();
    for (int k = 0; k < tp; ++k)
      if (k != tpIndex) comm.send(tpRanks[size_t(k)], tag, piece);
    for (int k = 0; k < tp; ++k)
      if (k != tpIndex) comm.recvInGroup(tpRanks[size_t(k)], tag, &pieces[size_t(k)]);
    comm.groupEnd();
    std::vector<int64_t> shape = piece.shape();
    shape.back() = w.dim(1);
    Tensor full(piece.dtype(), shape);
    for (int k = 0; k < tp; ++k) {
      Tensor got = k == tpIndex ? piece : std::move(pieces[size_t(k)]);
      Ranges theirs = shardRanges(w.dim(1), tpParams_[j].at(n.inputs[1]).second, k, tp);
      int64_t width = 0;
      for (auto [lo, hi] : theirs) width += hi - lo;
      if (got.shape().back() != width || got.numel() / std::max<int64_t>(width, 1) != full.numel() / w.dim(1))
        fail(who + "tensor-parallel piece " + got.describe() + " from rank " +
             std::to_string(tpRanks[size_t(k)]) + " does not fit " + full.describe());
      putSlices(full, got, int(full.rank()) - 1, theirs);
    }
    if (timing) {
      timing->forwardAllGathers++;
      timing->forwardAllGatherElements += double(full.numel());
    }
    ctx.outputs[0] = std::move(full);
    return true;
  }
  default:
    return false;  // LOCAL: the kernel runs on the slices as they are
  }
}

// Split nodes backward: a column MatMul's slice of dY gives its weight
// columns' gradient and a partial dX, summed over the worker's ranks
// (Megatron's backward all-reduce); a row MatMul's whole dY gives its
// rows' gradient and the slice of dX; a sliced bias or Split puts its
// slice's gradient back in place. Parameter gradients are zero outside
// this rank's part.
bool PlanExecutor::RankProgram::tpBackward(uint32_t mb, size_t node, GradientContext &ctx) {
  auto it = splitNodes.find(node);
  if (it == splitNodes.end()) return false;
  const plan::TensorParallelNode &tn = it->second;
  const Node &n = model_->nodes[node];
  auto run = [&](const char *op, std::vector<const Tensor *> in, std::vector<Tensor> dy) {
    GradientContext part{ctx.node, ctx.opset, std::move(in), ctx.outputs, std::move(dy),
                         ctx.wantGrad, std::vector<Tensor>(ctx.inputs.size())};
    findGradient(op)->run(part);
    part.inputGrads.resize(ctx.inputs.size());
    return std::move(part.inputGrads);
  };
  auto sumDx = [&](Tensor &dx) {
    train::groupSum(comm, tpGroup, tpTag(mb, node, numNodes, 2), {&dx});
    if (timing) {
      timing->backwardAllReduces++;
      timing->backwardAllReduceElements += double(dx.numel());
    }
  };
  switch (tn.role()) {
  case plan::TensorParallelNode::COLUMN:
  case plan::TensorParallelNode::ROW:
  case plan::TensorParallelNode::GATHER: {
    const Tensor &w = ctx.in(1);
    Part mine = mineOf(n, 1, w);
    Tensor dy = ctx.outputGrads.at(0);
    if (tn.role() == plan::TensorParallelNode::GATHER) dy = slices(dy, int(dy.rank()) - 1, mine.ranges);
    auto g = run(tpProductOp(), {ctx.inputs[0], &mine.value}, {dy});
    ctx.inputGrads.assign(2, Tensor());
    if (ctx.wantGrad[0]) {
      Tensor dx = g[0].defined() ? g[0] : Tensor(DType::Float32, ctx.in(0).shape());
      if (tn.role() != plan::TensorParallelNode::ROW) sumDx(dx);
      ctx.inputGrads[0] = std::move(dx);
    }
    if (ctx.wantGrad[1] && g[1].defined()) ctx.inputGrads[1] = zerosWith(w.shape(), g[1], mine.axis, mine.ranges);
    return true;
  }
  case plan::TensorParallelNode::VOCAB: {
    // dY is this rank's columns: dX is a partial sum over the worker;
    // the weight's columns gradient waits for finishVocabGrads (not
    // back through the sweep: the rest of the weight's gradient, an
    // embedding's, is the same on every rank and must not be summed).
    const Tensor &w = ctx.in(1);
    Ranges cols = vocabRanges(w);
    Tensor mine = slices(w, 1, cols);
    auto g = run(tpProductOp(), {ctx.inputs[0], &mine}, {ctx.outputGrads.at(0)});
    ctx.inputGrads.assign(2, Tensor());
    if (ctx.wantGrad[0]) {
      Tensor dx = g[0].defined() ? g[0] : Tensor(DType::Float32, ctx.in(0).shape());
      sumDx(dx);
      ctx.inputGrads[0] = std::move(dx);
    }
    if (g[1].defined()) train::accumulate(vocabGrads[node], zerosWith(w.shape(), g[1], 1, cols));
    return true;
  }
  case plan::TensorParallelNode::BIAS: {
    size_t b = size_t(tn.axis());
    Part bias = mineOf(n, b, ctx.in(b));
    auto g = run(kAddOp, bias.in(ctx.inputs, b), ctx.outputGrads);
    if (g[b].defined()) g[b] = zerosWith(ctx.in(b).shape(), g[b], bias.axis, bias.ranges);
    ctx.inputGrads = std::move(g);
    return true;
  }
  case plan::TensorParallelNode::SPLIT: {
    const Tensor &x = ctx.in(0);
    int axis = int(tn.axis());
    int64_t width = x.dim(axis) / int64_t(ctx.outputGrads.size());
    Tensor dx(x.dtype(), x.shape());
    for (size_t i = 0; i < ctx.outputGrads.size(); ++i)
      if (ctx.outputGrads[i].defined())
        putSlices(dx, ctx.outputGrads[i], axis, {{int64_t(i) * width, int64_t(i + 1) * width}});
    ctx.inputGrads.assign(ctx.inputs.size(), Tensor());
    if (ctx.wantGrad[0]) ctx.inputGrads[0] = std::move(dx);
    return true;
  }
  default:
    return false;  // LOCAL and RESHAPE: the usual gradient on the slices
  }
}

void PlanExecutor::RankProgram::finishVocabGrads() {
  if (vocabGradsDone) return;
  vocabGradsDone = true;
  for (auto &[node, g] : vocabGrads) {
    const VocabHead &head = vocabHeads_[j].at(node);
    train::groupSum(comm, tpGroup, tpTag(plan_.settings().micro_batches(), node, numNodes, 0), {&g});
    Tensor add = g;
    if (head.transposed) {
      // The head read Transpose(param): the gradient goes back transposed.
      int64_t a = g.dim(0), b = g.dim(1);
      add = Tensor(DType::Float32, {b, a});
      const float *src = g.data<float>();
      float *dst = add.data<float>();
      for (int64_t r = 0; r < a; ++r)
        for (int64_t c = 0; c < b; ++c) dst[c * a + r] = src[r * b + c];
    }
    train::accumulate(train->state.grads[head.param], add);
  }
}

} // namespace hetplan::runtime
