//===- Gradients.cpp - the backward-kernel registry, shared helpers -------===//
#include "GradUtil.h"
#include "../model/OpRegistry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

namespace hetplan::runtime {

namespace {
OpRegistry<GradientInfo> &registry() {
  static OpRegistry<GradientInfo> r;
  return r;
}
void ensureRegistered() {
  static std::once_flag once;
  std::call_once(once, [] {
    train::registerElementwiseGradients();
    train::registerMatMulGradients();
    train::registerNormalizationGradients();
    train::registerLinalgGradients();
    train::registerTensorGradients();
    train::registerGatherGradients();
    train::registerConvGradients();
  });
}
} // namespace

const Tensor &GradientContext::in(size_t i) const {
  if (!hasInput(i))
    throw std::runtime_error(node.describe() + ": backward: missing input " + std::to_string(i));
  return *inputs[i];
}

const Tensor &GradientContext::out(size_t i) const {
  if (i >= outputs.size() || !outputs[i] || !outputs[i]->defined())
    throw std::runtime_error(node.describe() + ": backward: missing forward output " + std::to_string(i));
  return *outputs[i];
}

void registerGradient(const std::string &opType, GradientInfo info) { registry().add(opType, std::move(info)); }

const GradientInfo *findGradient(const std::string &opType) {
  ensureRegistered();
  return registry().find(opType);
}

std::vector<std::string> registeredGradientOpTypes() {
  ensureRegistered();
  return registry().opTypes();
}

namespace {
template <typename T>
void reduceTyped(const Tensor &grad, const std::vector<int64_t> &shape, Tensor &out) {
  const auto &gs = grad.shape();
  int64_t r = static_cast<int64_t>(gs.size());
  auto st = broadcastStrides(shape, gs);
  // Collapse dims into runs that are all kept or all reduced (size-1 dims
  // drop out): kept dims are contiguous in the target, reduced ones stride 0.
  std::vector<int64_t> size, stride;
  std::vector<bool> kept;
  for (int64_t d = 0; d < r; ++d) {
    if (gs[d] == 1) continue;
    bool k = st[d] != 0;
    if (!size.empty() && kept.back() == k) {
      size.back() *= gs[d];
      stride.back() = st[d];
    } else {
      size.push_back(gs[d]); stride.push_back(st[d]); kept.push_back(k);
    }
  }
  int64_t nt = out.numel(), n = grad.numel();
  std::vector<double> acc(static_cast<size_t>(nt), 0.0);
  const T *pg = grad.data<T>();
  if (size.empty()) { // every dim is 1
    if (n) acc[0] = pg[0];
  } else {
    int64_t rr = static_cast<int64_t>(size.size()), inner = size.back(), istride = stride.back();
    bool innerKept = kept.back();
    std::vector<int64_t> idx(rr - 1, 0);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i += inner) {
      const T *row = pg + i;
      if (innerKept) {
        double *a = acc.data() + off;
        for (int64_t j = 0; j < inner; ++j) a[j * istride] += row[j];
      } else {
        double s = 0;
        for (int64_t j = 0; j < inner; ++j) s += row[j];
        acc[off] += s;
      }
      for (int64_t d = rr - 2; d >= 0; --d) {
        if (++idx[d] < size[d]) { off += stride[d]; break; }
        off -= stride[d] * (size[d] - 1); idx[d] = 0;
      }
    }
  }
  T *po = out.data<T>();
  for (int64_t i = 0; i < nt; ++i) po[i] = static_cast<T>(acc[i]);
}
} // namespace

Tensor reduceGradToShape(const Tensor &grad, const std::vector<int64_t> &shape) {
  if (grad.shape() == shape) return grad.clone();
  if (broadcastShapes(shape, grad.shape()) != grad.shape())
    throw std::runtime_error("reduceGradToShape: " + shapeString(shape) + " does not broadcast to " +
                             shapeString(grad.shape()));
  Tensor out(grad.dtype(), shape);
  HP_DISPATCH_FLOAT(grad.dtype(), reduceTyped<T>(grad, shape, out));
  return out;
}

namespace {
template <typename T, typename L>
double crossEntropyTyped(const Tensor &logits, const L *labels, int64_t rows, int64_t C, double denominator,
                         int64_t ignoreIndex, float *grad) {
  const T *px = logits.data<T>();
  std::vector<double> rowLoss(static_cast<size_t>(rows), 0.0);
  double scale = denominator > 0 ? 1.0 / denominator : 0.0;
  int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(C, 1));
  cpu::parallelFor(rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T *x = px + r * C;
      float *g = grad ? grad + r * C : nullptr;
      int64_t label = static_cast<int64_t>(labels[r]);
      if (label == ignoreIndex) {
        if (g) std::fill(g, g + C, 0.0f);
        continue;
      }
      if (label < 0 || label >= C)
        throw std::runtime_error("softmaxCrossEntropy: label " + std::to_string(label) + " out of range [0, " +
                                 std::to_string(C) + ")");
      T mx = x[0];
      for (int64_t k = 1; k < C; ++k) mx = std::max(mx, x[k]);
      // exp once per logit (in T: float logits use expf), the sum in double
      double sum = 0;
      if (g) {
        for (int64_t k = 0; k < C; ++k) {
          T e = std::exp(x[k] - mx);
          g[k] = static_cast<float>(e);
          sum += e;
        }
        float f = static_cast<float>(scale / sum);
        for (int64_t k = 0; k < C; ++k) g[k] *= f;
        g[label] = static_cast<float>((std::exp(static_cast<double>(x[label]) - mx) / sum - 1.0) * scale);
      } else {
        for (int64_t k = 0; k < C; ++k) sum += std::exp(x[k] - mx);
      }
      rowLoss[r] = static_cast<double>(mx) + std::log(sum) - static_cast<double>(x[label]);
    }
  });
  double total = 0;
  for (double v : rowLoss) total += v;
  return total * scale;
}
} // namespace

double softmaxCrossEntropy(const Tensor &logits, const Tensor &labels, double denominator, int64_t ignoreIndex,
                           Tensor *gradLogits) {
  if (logits.rank() < 1)
    throw std::runtime_error("softmaxCrossEntropy: logits " + logits.describe() + " have no class dimension");
  int64_t C = logits.dim(-1), rows = C ? logits.numel() / C : 0;
  if (labels.numel() != rows)
    throw std::runtime_error("softmaxCrossEntropy: labels " + labels.describe() + " do not match logits " +
                             logits.describe());
  if (labels.dtype() != DType::Int32 && labels.dtype() != DType::Int64)
    throw std::runtime_error(std::string("softmaxCrossEntropy: labels must be int32 or int64, not ") +
                             dtypeName(labels.dtype()));
  float *g = nullptr;
  if (gradLogits) {
    *gradLogits = Tensor(DType::Float32, logits.shape());
    g = gradLogits->data<float>();
  }
  double loss = 0;
  HP_DISPATCH_FLOAT(logits.dtype(), {
    if (labels.dtype() == DType::Int32)
      loss = crossEntropyTyped<T>(logits, labels.data<int32_t>(), rows, C, denominator, ignoreIndex, g);
    else
      loss = crossEntropyTyped<T>(logits, labels.data<int64_t>(), rows, C, denominator, ignoreIndex, g);
  });
  return loss;
}

double binaryCrossEntropy(const Tensor &probs, const Tensor &labels, double denominator, Tensor *gradProbs) {
  if (labels.numel() != probs.numel())
    throw std::runtime_error("float labels select binary cross-entropy, which needs one target per output "
                             "element (labels shaped like the output); for softmax cross-entropy give int64 "
                             "class indices shaped like the output without its last axis");
  if (labels.dtype() != DType::Float32 && labels.dtype() != DType::Float64)
    throw std::runtime_error(std::string("binaryCrossEntropy: labels must be float32 or float64, not ") +
                             dtypeName(labels.dtype()));
  int64_t n = probs.numel();
  float *g = nullptr;
  if (gradProbs) {
    *gradProbs = Tensor(DType::Float32, probs.shape());
    g = gradProbs->data<float>();
  }
  double total = 0, scale = 1.0 / denominator;
  for (int64_t i = 0; i < n; ++i) {
    double pi = probs.scalarAsDouble(i), yi = labels.scalarAsDouble(i);
    if (!(yi >= 0 && yi <= 1))
      throw std::runtime_error("binaryCrossEntropy: label " + std::to_string(yi) + " at " + std::to_string(i) +
                               " is not in [0, 1]");
    if (!(pi >= 0 && pi <= 1))
      throw std::runtime_error("binaryCrossEntropy: probability " + std::to_string(pi) + " at " +
                               std::to_string(i) + " is not in [0, 1] (the loss output must be a Sigmoid's)");
    total -= yi * std::max(std::log(pi), -100.0) + (1 - yi) * std::max(std::log1p(-pi), -100.0);
    if (g) g[i] = static_cast<float>((pi - yi) / std::max(pi * (1 - pi), 1e-12) * scale);
  }
  return total * scale;
}

} // namespace hetplan::runtime
