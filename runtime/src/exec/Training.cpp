//===- Training.cpp - the pieces of a training step -----------------------===//
#include "Training.h"

#include "hetplan/runtime/Gradients.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace hetplan::runtime {
namespace train {

bool isNonDifferentiable(const std::string &op) {
  static const std::set<std::string> kOps = {
      "Shape", "Size", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And",
      "Or", "Xor", "ArgMax", "ArgMin", "NonZero", "IsNaN", "IsInf", "Sign", "Floor", "Ceil",
      "Round", "ConstantOfShape", "Range", "EyeLike", "RandomNormal", "RandomUniform",
      "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "OneHot", "BitShift",
      "Mod"};
  return kOps.count(op) != 0;
}

std::vector<bool> differentiableInputs(const Node &n) {
  std::vector<bool> out(n.inputs.size(), false);
  if (isNonDifferentiable(n.opType)) return out;
  const GradientInfo *g = findGradient(n.opType);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    out[i] = !g || std::find(g->nonDifferentiable.begin(), g->nonDifferentiable.end(), i) ==
                       g->nonDifferentiable.end();
  }
  return out;
}

namespace {
/// Whether a value in `req` feeds `n` at an input a gradient can flow through.
bool gradientReaches(const Node &n, const std::set<std::string> &req) {
  std::vector<bool> diff = differentiableInputs(n);
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (diff[i] && req.count(n.inputs[i])) return true;
  // Values read inside subgraphs (If/Loop/Scan): no backward kernel runs
  // subgraphs, so such a node on a gradient path is refused.
  for (const auto &s : n.implicitInputs)
    if (req.count(s)) return true;
  return false;
}
} // namespace

std::set<std::string> trainableParameters(const Model &model) {
  std::set<std::string> out;
  for (const Node &n : model.nodes) {
    std::vector<bool> diff = differentiableInputs(n);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!diff[i]) continue;
      auto it = model.initializers.find(n.inputs[i]);
      // Constant nodes' values stay constants (masks, scales; Paddle's
      // weights are trained where they were made, not here).
      if (it != model.initializers.end() && it->second.dtype() == DType::Float32 &&
          it->second.numel() >= 2 && !model.constants.count(it->first))
        out.insert(it->first);
    }
    for (const auto &s : n.implicitInputs) {
      auto it = model.initializers.find(s);
      if (it != model.initializers.end() && it->second.dtype() == DType::Float32 && it->second.numel() >= 2)
        out.insert(it->first);
    }
  }
  return out;
}

std::vector<std::string> checkBackward(const Model &model, const std::vector<size_t> &nodes,
                                       const std::set<std::string> &seeds) {
  std::vector<std::string> problems;
  std::set<std::string> req = seeds;
  int64_t opset = model.opset("");
  for (size_t idx : nodes) {
    const Node &n = model.nodes[idx];
    if (!gradientReaches(n, req)) continue;
    std::string where = model.path + ": " + n.describe() + ": ";
    const GradientInfo *g = findGradient(n.opType);
    if (!g || (!n.domain.empty() && n.domain != "ai.onnx")) {
      problems.push_back(where + "no backward kernel for " + n.opType +
                         " (training needs one on every path from a parameter to the loss)");
      continue;
    }
    if (g->check) {
      std::string why = g->check(n, opset);
      if (!why.empty()) {
        problems.push_back(where + "backward: " + why);
        continue;
      }
    }
    for (const auto &o : n.outputs)
      if (!o.empty()) req.insert(o);
  }
  return problems;
}

std::set<std::string> requiresGrad(const Model &model, const std::vector<size_t> &nodes,
                                   const std::set<std::string> &seeds,
                                   const std::function<const Tensor *(const std::string &)> &value) {
  std::set<std::string> req = seeds;
  for (size_t idx : nodes) {
    const Node &n = model.nodes[idx];
    if (!gradientReaches(n, req)) continue;
    for (const auto &o : n.outputs) {
      if (o.empty()) continue;
      const Tensor *t = value(o);
      if (t && isFloatType(t->dtype())) req.insert(o);
    }
  }
  return req;
}

namespace {
template <typename T> void addTo(Tensor &acc, const Tensor &g) {
  T *a = acc.data<T>();
  const T *b = g.data<T>();
  for (int64_t i = 0, e = acc.numel(); i < e; ++i) a[i] += b[i];
}
} // namespace

void accumulate(Tensor &acc, const Tensor &g) {
  if (!acc.defined()) {
    acc = g.clone();
    return;
  }
  if (acc.shape() != g.shape() || acc.dtype() != g.dtype())
    throw std::runtime_error("gradient " + g.describe() + " does not add to " + acc.describe());
  if (acc.dtype() == DType::Float32) addTo<float>(acc, g);
  else if (acc.dtype() == DType::Float64) addTo<double>(acc, g);
  else throw std::runtime_error(std::string("gradients of ") + dtypeName(acc.dtype()) + " values are not supported");
}

std::string backwardWhere(const Model &model, const Node &n) {
  return model.path + ": " + n.describe() + ": backward: ";
}

void backwardSweep(const Model &model, const std::vector<size_t> &nodes, const std::set<std::string> &requires,
                   const std::function<bool(const std::string &)> &hasGrad,
                   const std::function<void(size_t, const std::vector<bool> &)> &step,
                   const std::function<void(const std::string &)> &done) {
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node &n = model.nodes[*it];
    bool anyOut = false;
    for (const auto &o : n.outputs) anyOut |= !o.empty() && hasGrad(o);
    if (!anyOut) continue;
    std::vector<bool> diff = differentiableInputs(n);
    std::vector<bool> want(n.inputs.size(), false);
    bool anyWant = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      want[i] = diff[i] && requires.count(n.inputs[i]);
      anyWant |= want[i];
    }
    if (anyWant) step(*it, want);
    // An output's gradient is complete once its producer ran: free it.
    for (const auto &o : n.outputs)
      if (!o.empty()) done(o);
  }
}

std::vector<Tensor> hostNodeGradient(const Model &model, size_t idx, const std::vector<bool> &want,
                                     const std::function<const Tensor *(const std::string &)> &value,
                                     const std::function<Tensor(const std::string &)> &outGrad,
                                     const GradientHook *hook) {
  const Node &n = model.nodes[idx];
  std::string where = backwardWhere(model, n);
  const GradientInfo *g = findGradient(n.opType);
  if (!g) throw std::runtime_error(where + "no backward kernel for " + n.opType);
  GradientContext ctx{n, model.opset(""), {}, {}, {}, want, std::vector<Tensor>(n.inputs.size())};
  for (const auto &s : n.inputs) {
    const Tensor *t = s.empty() ? nullptr : value(s);
    if (!s.empty() && !t) throw std::runtime_error(where + "forward value '" + s + "' was not kept");
    ctx.inputs.push_back(t);
  }
  for (const auto &o : n.outputs) {
    ctx.outputs.push_back(o.empty() ? nullptr : value(o));
    ctx.outputGrads.push_back(o.empty() ? Tensor() : outGrad(o));
  }
  try {
    if (!hook || !(*hook)(idx, ctx)) g->run(ctx);
  } catch (const std::exception &e) {
    throw std::runtime_error(where + e.what());
  }
  ctx.inputGrads.resize(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!want[i] || !ctx.inputGrads[i].defined()) {
      ctx.inputGrads[i] = Tensor();
      continue;
    }
    const Tensor &gi = ctx.inputGrads[i];
    if (gi.shape() != ctx.inputs[i]->shape())
      throw std::runtime_error(where + "gradient of input " + std::to_string(i) + " is " + gi.describe() +
                               ", the input is " + ctx.inputs[i]->describe());
  }
  return std::move(ctx.inputGrads);
}

void backward(const Model &model, const std::vector<size_t> &nodes,
              const std::function<const Tensor *(const std::string &)> &value,
              const std::set<std::string> &requires, std::map<std::string, Tensor> &grads,
              const GradientHook *hook) {
  // Gradients first stored as a kernel returned them may share bytes with
  // another (Add hands the same tensor to both inputs): copied before the
  // first in-place sum.
  std::set<std::string> owned;
  auto add = [&](const std::string &name, Tensor g) {
    auto it = grads.find(name);
    if (it == grads.end() || !it->second.defined()) {
      grads[name] = std::move(g);
      owned.erase(name);
      return;
    }
    if (!owned.count(name)) {
      it->second = it->second.clone();
      owned.insert(name);
    }
    accumulate(it->second, g);
  };
  backwardSweep(
      model, nodes, requires,
      [&](const std::string &o) {
        auto it = grads.find(o);
        return it != grads.end() && it->second.defined();
      },
      [&](size_t idx, const std::vector<bool> &want) {
        auto outGrad = [&](const std::string &o) {
          auto it = grads.find(o);
          return it == grads.end() ? Tensor() : it->second;
        };
        std::vector<Tensor> g = hostNodeGradient(model, idx, want, value, outGrad, hook);
        const Node &n = model.nodes[idx];
        for (size_t i = 0; i < n.inputs.size(); ++i)
          if (g[i].defined()) add(n.inputs[i], std::move(g[i]));
      },
      [&](const std::string &o) {
        grads.erase(o);
        owned.erase(o);
      });
}

Tensor flattenForSum(const std::vector<Tensor *> &tensors) {
  DType type = tensors.empty() ? DType::Float32 : tensors.front()->dtype();
  int64_t total = 0;
  for (const Tensor *t : tensors) {
    if (t->dtype() != type || (type != DType::Float32 && type != DType::Float64))
      throw std::runtime_error("group sums take float32 or float64 tensors of one type");
    total += t->numel();
  }
  Tensor flat(type, {total});
  auto *f = static_cast<char *>(flat.raw());
  for (const Tensor *t : tensors) {
    std::memcpy(f, t->raw(), t->nbytes());
    f += t->nbytes();
  }
  return flat;
}

void unflattenSum(const Tensor &flat, const std::vector<Tensor *> &tensors) {
  const auto *src = static_cast<const char *>(flat.raw());
  for (Tensor *t : tensors) {
    std::memcpy(t->raw(), src, t->nbytes());
    src += t->nbytes();
  }
}

namespace {
/// groupSum/groupMax: the lowest rank combines the others' values in rank
/// order and sends the result back, so every member ends with the same bits.
void groupReduce(Communicator &comm, const std::vector<int> &group, int64_t tag,
                 const std::vector<Tensor *> &tensors, bool takeMax) {
  if (group.size() <= 1 || tensors.empty()) return;
  Tensor flat = flattenForSum(tensors);
  DType type = flat.dtype();
  int64_t total = flat.numel();
  auto combine = [&](const Tensor &part) {
    if (!takeMax) return accumulate(flat, part);
    if (type == DType::Float32) {
      float *a = flat.data<float>();
      const float *b = part.data<float>();
      for (int64_t i = 0; i < total; ++i) a[i] = std::max(a[i], b[i]);
    } else {
      double *a = flat.data<double>();
      const double *b = part.data<double>();
      for (int64_t i = 0; i < total; ++i) a[i] = std::max(a[i], b[i]);
    }
  };
  int me = comm.rank(), leader = group.front();
  if (me == leader) {
    for (size_t k = 1; k < group.size(); ++k) {
      Tensor part = comm.recv(group[k], tag);
      if (part.dtype() != type || part.numel() != total)
        throw std::runtime_error("rank " + std::to_string(group[k]) + " sent " + part.describe() +
                                 " to a group sum of " + std::to_string(total) + " elements");
      combine(part);
    }
    for (size_t k = 1; k < group.size(); ++k) comm.send(group[k], tag + 1, flat);
  } else {
    comm.send(leader, tag, flat);
    flat = comm.recv(leader, tag + 1);
    if (flat.dtype() != type || flat.numel() != total)
      throw std::runtime_error("group sum came back as " + flat.describe());
  }
  unflattenSum(flat, tensors);
}
} // namespace

void sparseRowSum(Communicator &comm, const std::vector<int> &group, int64_t tag, Tensor &grad,
                  int64_t rowLength) {
  if (group.size() <= 1) return;
  if (grad.dtype() != DType::Float32 || rowLength <= 0 || grad.numel() % rowLength)
    throw std::runtime_error("sparse row sum of " + grad.describe() + " in rows of " + std::to_string(rowLength));
  int64_t rows = grad.numel() / rowLength;
  float *g = grad.data<float>();
  auto nonzero = [&]() {
    std::vector<int64_t> idx;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < rowLength; ++e)
        if (g[r * rowLength + e] != 0.0f) {
          idx.push_back(r);
          break;
        }
    Tensor at(DType::Int64, {int64_t(idx.size())}), values(DType::Float32, {int64_t(idx.size()), rowLength});
    for (size_t i = 0; i < idx.size(); ++i) {
      at.data<int64_t>()[i] = idx[i];
      std::copy(g + idx[i] * rowLength, g + (idx[i] + 1) * rowLength, values.data<float>() + int64_t(i) * rowLength);
    }
    return std::make_pair(at, values);
  };
  auto check = [&](const Tensor &at, const Tensor &values, int from) {
    bool ok = at.dtype() == DType::Int64 && values.dtype() == DType::Float32 && at.rank() == 1 &&
              values.numel() == at.numel() * rowLength;
    for (int64_t i = 0; ok && i < at.numel(); ++i) ok = at.data<int64_t>()[i] >= 0 && at.data<int64_t>()[i] < rows;
    if (!ok)
      throw std::runtime_error("rank " + std::to_string(from) + " sent rows " + at.describe() + ", " +
                               values.describe() + " to a sparse sum of " + grad.describe());
  };
  int me = comm.rank(), leader = group.front();
  if (me == leader) {
    for (size_t k = 1; k < group.size(); ++k) {
      Tensor at = comm.recv(group[k], tag), values = comm.recv(group[k], tag);
      check(at, values, group[k]);
      for (int64_t i = 0; i < at.numel(); ++i) {
        float *dst = g + at.data<int64_t>()[i] * rowLength;
        const float *src = values.data<float>() + i * rowLength;
        for (int64_t e = 0; e < rowLength; ++e) dst[e] += src[e];
      }
    }
    auto [at, values] = nonzero();
    for (size_t k = 1; k < group.size(); ++k) {
      comm.send(group[k], tag + 1, at);
      comm.send(group[k], tag + 1, values);
    }
  } else {
    auto [at, values] = nonzero();
    comm.send(leader, tag, at);
    comm.send(leader, tag, values);
    Tensor sumAt = comm.recv(leader, tag + 1), sum = comm.recv(leader, tag + 1);
    check(sumAt, sum, leader);
    std::fill(g, g + grad.numel(), 0.0f);
    for (int64_t i = 0; i < sumAt.numel(); ++i)
      std::copy(sum.data<float>() + i * rowLength, sum.data<float>() + (i + 1) * rowLength,
                g + sumAt.data<int64_t>()[i] * rowLength);
  }
}

void groupSum(Communicator &comm, const std::vector<int> &group, int64_t tag,
              const std::vector<Tensor *> &tensors) {
  comm.groupAllReduceSum(group, tensors, tag);
}

void groupMax(Communicator &comm, const std::vector<int> &group, int64_t tag,
              const std::vector<Tensor *> &tensors) {
  groupReduce(comm, group, tag, tensors, true);
}

namespace {
template <typename T>
double vocabParallelTyped(Communicator &comm, const std::vector<int> &group, int64_t tagMax, int64_t tagSum,
                          const Tensor &logits, const std::vector<int64_t> &label, int64_t lo, int64_t vocab,
                          double denominator, int64_t ignoreIndex, float *grad) {
  int64_t C = logits.dim(-1), rows = int64_t(label.size());
  const T *px = logits.data<T>();
  Tensor maxima(DType::Float64, {rows}), sums(DType::Float64, {rows, 2});
  double *mx = maxima.data<double>(), *st = sums.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < C; ++k) m = std::max(m, double(px[r * C + k]));
    mx[r] = m;
  }
  groupMax(comm, group, tagMax, {&maxima});
  for (int64_t r = 0; r < rows; ++r) {
    const T *x = px + r * C;
    double s = 0;
    for (int64_t k = 0; k < C; ++k) s += std::exp(double(x[k]) - mx[r]);
    st[2 * r] = s;
    int64_t l = label[size_t(r)] - lo;
    st[2 * r + 1] = l >= 0 && l < C ? double(x[l]) : 0.0;
  }
  groupSum(comm, group, tagSum, {&sums});
  double scale = denominator > 0 ? 1.0 / denominator : 0.0, total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float *g = grad ? grad + r * C : nullptr;
    if (label[size_t(r)] == ignoreIndex) {
      if (g) std::fill(g, g + C, 0.0f);
      continue;
    }
    total += mx[r] + std::log(st[2 * r]) - st[2 * r + 1];
    if (!g) continue;
    const T *x = px + r * C;
    for (int64_t k = 0; k < C; ++k) g[k] = float(std::exp(double(x[k]) - mx[r]) / st[2 * r] * scale);
    int64_t l = label[size_t(r)] - lo;
    if (l >= 0 && l < C) g[l] = float((std::exp(double(x[l]) - mx[r]) / st[2 * r] - 1.0) * scale);
  }
  return total * scale;
}
} // namespace

double vocabParallelCrossEntropy(Communicator &comm, const std::vector<int> &group, int64_t tagMax,
                                 int64_t tagSum, const Tensor &logits, const Tensor &labels, int64_t lo,
                                 int64_t vocab, double denominator, int64_t ignoreIndex, Tensor *grad) {
  if (logits.rank() < 1)
    throw std::runtime_error("vocab-parallel cross entropy: logits " + logits.describe() + " have no class dimension");
  int64_t C = logits.dim(-1), rows = C ? logits.numel() / C : 0;
  if (labels.numel() != rows)
    throw std::runtime_error("labels " + labels.describe() + " do not match logits " + logits.describe());
  if (labels.dtype() != DType::Int32 && labels.dtype() != DType::Int64)
    throw std::runtime_error(std::string("labels must be int32 or int64, not ") + dtypeName(labels.dtype()));
  std::vector<int64_t> label = labels.toInt64Vector();
  // Every rank sees the same labels: all refuse a bad one before any collective.
  for (int64_t l : label)
    if (l != ignoreIndex && (l < 0 || l >= vocab))
      throw std::runtime_error("label " + std::to_string(l) + " out of range [0, " + std::to_string(vocab) + ")");
  float *g = nullptr;
  if (grad) {
    *grad = Tensor(DType::Float32, logits.shape());
    g = grad->data<float>();
  }
  if (logits.dtype() == DType::Float32)
    return vocabParallelTyped<float>(comm, group, tagMax, tagSum, logits, label, lo, vocab, denominator, ignoreIndex, g);
  if (logits.dtype() == DType::Float64)
    return vocabParallelTyped<double>(comm, group, tagMax, tagSum, logits, label, lo, vocab, denominator, ignoreIndex, g);
  throw std::runtime_error(std::string("vocab-parallel cross entropy takes float32 or float64 logits, not ") +
                           dtypeName(logits.dtype()));
}

void prepareOptimizer(const Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, Optimizer kind) {
  const char *name = optimizerName(kind);
  if (param.dtype() != DType::Float32 || grad.dtype() != DType::Float32 || grad.numel() != param.numel())
    throw std::runtime_error(std::string(name) + " takes float32 parameters and gradients of the same size");
  int buffers = optimizerStateBuffers(kind);
  Tensor *state[] = {&m, &v};
  for (int k = 0; k < buffers; ++k) {
    if (!state[k]->defined()) *state[k] = Tensor(DType::Float32, param.shape());
    if (state[k]->dtype() != DType::Float32 || state[k]->numel() != param.numel())
      throw std::runtime_error(std::string(name) + " state " + state[k]->describe() +
                               " does not fit the parameter " + param.describe());
  }
}

namespace {
/// torch.optim.SGD (dampening 0, nesterov off): g += wd * p; with momentum
/// mu, buf = mu * buf + g (buf starts at zero, so step 1 gives buf = g as
/// torch's clone does), g = buf; p -= lr * g.
void sgdRange(float *p, const float *g, float *buf, int64_t begin, int64_t end, const OptimizerSettings &s) {
  for (int64_t i = begin; i < end; ++i) {
    double gi = double(g[i]) + s.weightDecay * double(p[i]);
    if (buf) {
      gi = s.momentum * double(buf[i]) + gi;
      buf[i] = float(gi);
    }
    p[i] = float(double(p[i]) - s.lr * gi);
  }
}

/// torch.optim.Adam (g += wd * p) or, `decoupled`, torch.optim.AdamW
/// (p *= 1 - lr * wd first); then the bias-corrected moments' step.
void adamRange(float *p, const float *g, float *mm, float *vv, int64_t begin, int64_t end, int64_t step,
               const OptimizerSettings &s, bool decoupled) {
  double c1 = 1 - std::pow(s.beta1, double(step)), c2 = 1 - std::pow(s.beta2, double(step));
  for (int64_t i = begin; i < end; ++i) {
    double pi = double(p[i]), gi = double(g[i]);
    if (decoupled) pi *= 1 - s.lr * s.weightDecay;
    else gi += s.weightDecay * pi;
    double mi = s.beta1 * mm[i] + (1 - s.beta1) * gi;
    double vi = s.beta2 * vv[i] + (1 - s.beta2) * gi * gi;
    mm[i] = float(mi);
    vv[i] = float(vi);
    p[i] = float(pi - s.lr * (mi / c1) / (std::sqrt(vi / c2) + s.eps));
  }
}
} // namespace

void optimizerUpdate(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                     const OptimizerSettings &s, int64_t begin, int64_t count) {
  prepareOptimizer(param, grad, m, v, s.kind);
  int64_t end = count < 0 ? param.numel() : begin + count;
  if (begin < 0 || end > param.numel())
    throw std::runtime_error(std::string(optimizerName(s.kind)) + ": element range outside the parameter");
  float *p = param.data<float>();
  const float *g = grad.data<float>();
  switch (s.kind) {
  case Optimizer::SGD: sgdRange(p, g, nullptr, begin, end, s); break;
  case Optimizer::Momentum: sgdRange(p, g, m.data<float>(), begin, end, s); break;
  case Optimizer::Adam:
  case Optimizer::AdamW:
    adamRange(p, g, m.data<float>(), v.data<float>(), begin, end, step, s, s.kind == Optimizer::AdamW);
    break;
  }
}

void optimizerUpdatePieces(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                           const OptimizerSettings &s, const std::vector<std::pair<int64_t, int64_t>> &pieces) {
  if (pieces.empty()) optimizerUpdate(param, grad, m, v, step, s);
  for (auto [begin, count] : pieces) optimizerUpdate(param, grad, m, v, step, s, begin, count);
}

} // namespace train

// The communicators' default (point-to-point) gradient sum.
void Communicator::groupAllReduceSum(const std::vector<int> &group, const std::vector<Tensor *> &tensors,
                                     int64_t tag) {
  train::groupReduce(*this, group, tag, tensors, false);
}

} // namespace hetplan::runtime
