//===- Optimizers.h - the optimizers a training plan may name ---*- C++ -*-===//
//
// The optimizers of a training plan (Settings.optimizer): their names, the
// fp32 state buffers each keeps per parameter, and their hyper-parameters.
// Header-only, no dependencies: the planner prices the same state the
// runtime keeps (docs/cost-model.md, "Training and memory"; docs/runtime.md,
// "Optimizers").
//
//===----------------------------------------------------------------------===//

#ifndef HETPLAN_RUNTIME_OPTIMIZERS_H
#define HETPLAN_RUNTIME_OPTIMIZERS_H

#include <optional>
#include <string>

namespace hetplan::runtime {

/// PyTorch's torch.optim.SGD without momentum (weight decay as L2), SGD
/// with momentum (dampening 0, no Nesterov), torch.optim.Adam (L2 weight
/// decay added to the gradient) and torch.optim.AdamW (decoupled decay).
enum class Optimizer { SGD, Momentum, Adam, AdamW };

/// "sgd", "momentum", "adam", "adamw": the plan's Settings.optimizer and
/// `hetplan compile --optimizer`.
inline const char *optimizerName(Optimizer o) {
  switch (o) {
  case Optimizer::SGD: return "sgd";
  case Optimizer::Momentum: return "momentum";
  case Optimizer::Adam: return "adam";
  case Optimizer::AdamW: return "adamw";
  }
  return "adam";
}

/// The names optimizerName gives, for messages.
inline const char *optimizerNames() { return "sgd, momentum, adam or adamw"; }

/// The optimizer named `name` (optimizerName's spelling), or nothing.
inline std::optional<Optimizer> parseOptimizer(const std::string &name) {
  for (Optimizer o : {Optimizer::SGD, Optimizer::Momentum, Optimizer::Adam, Optimizer::AdamW})
    if (name == optimizerName(o)) return o;
  return std::nullopt;
}

/// fp32 buffers the optimizer keeps per parameter: none for SGD, the
/// momentum buffer, Adam's first and second moments (m, v).
inline int optimizerStateBuffers(Optimizer o) {
  switch (o) {
  case Optimizer::SGD: return 0;
  case Optimizer::Momentum: return 1;
  case Optimizer::Adam:
  case Optimizer::AdamW: return 2;
  }
  return 2;
}

/// One optimizer's hyper-parameters (PyTorch's defaults, except the
/// momentum of `Momentum`, which torch leaves at 0, and AdamW's weight
/// decay, 0 here as for the others). `momentum` is read by Momentum only;
/// beta1, beta2 and eps by Adam and AdamW only. weightDecay: added to the
/// gradient (L2) by SGD, Momentum and Adam; AdamW multiplies the parameter
/// by 1 - lr * weightDecay before its step.
struct OptimizerSettings {
  Optimizer kind = Optimizer::Adam;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0, momentum = 0.9;
};

} // namespace hetplan::runtime

#endif
