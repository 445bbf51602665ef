//===- ElementwiseGrad.cpp - backward of binary/variadic ops, Clip, Where -===//
//
// The unary ops' backward sits next to their forward in
// cpu/kernels/Unary.cpp (registerUnaryGradients).
//
//===----------------------------------------------------------------------===//
#include "GradUtil.h"

#include <cmath>
#include <limits>

namespace hetplan::runtime::train {
namespace {

Tensor negated(Tensor t) {
  HP_DISPATCH_FLOAT(t.dtype(), {
    T *p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = -p[i];
  });
  return t;
}

/// Gradients of a broadcasting binary op out = f(a, b):
/// dA = reduce(dY * fa(a, b, y)), dB = reduce(dY * fb(a, b, y)), computed in T.
template <typename T, typename FA, typename FB>
void binaryGrad(GradientContext &c, const Tensor &a, const Tensor &b, const Tensor *y, const Tensor &dy, bool wantA,
                bool wantB, FA fa, FB fb) {
  const auto &shape = dy.shape();
  const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = dy.data<T>();
  const T *py = y ? y->data<T>() : nullptr;
  Tensor ga, gb;
  if (wantA) ga = Tensor(dy.dtype(), shape);
  if (wantB) gb = Tensor(dy.dtype(), shape);
  T *pga = wantA ? ga.data<T>() : nullptr, *pgb = wantB ? gb.data<T>() : nullptr;
  auto one = [&](int64_t i, int64_t oa, int64_t ob) {
    double va = pa[oa], vb = pb[ob], vy = py ? static_cast<double>(py[i]) : 0.0, g = pg[i];
    if (pga) pga[i] = static_cast<T>(g * fa(va, vb, vy));
    if (pgb) pgb[i] = static_cast<T>(g * fb(va, vb, vy));
  };
  int64_t n = dy.numel();
  if (a.shape() == shape && b.shape() == shape) {
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i, i, i);
    });
  } else if (a.shape() == shape && b.numel() == 1) {
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i, i, 0);
    });
  } else {
    cpu::forEachBroadcast2(shape, broadcastStrides(a.shape(), shape), broadcastStrides(b.shape(), shape), one);
  }
  if (wantA) c.inputGrads[0] = a.shape() == shape ? std::move(ga) : reduceGradToShape(ga, a.shape());
  if (wantB) c.inputGrads[1] = b.shape() == shape ? std::move(gb) : reduceGradToShape(gb, b.shape());
}

/// Mul, Div, Pow: elementwise products.
template <typename FA, typename FB> void regBinary(const std::string &name, bool usesY, FA fa, FB fb) {
  registerGradient(name, {[usesY, fa, fb](GradientContext &c) {
                            c.inputGrads.resize(c.inputs.size());
                            bool wa = wants(c, 0), wb = wants(c, 1);
                            if (!wa && !wb) return;
                            const Tensor &a = c.in(0);
                            Tensor dy = outGrad(c, 0, a.dtype());
                            if (!dy.defined()) return;
                            // Pow's exponent may have another element type
                            Tensor b = c.in(1).dtype() == a.dtype() ? c.in(1) : cpu::castTensor(c.in(1), a.dtype());
                            DType bType = c.in(1).dtype();
                            if (wb && !isFloatType(bType)) wb = false;
                            const Tensor *y = usesY ? &c.out(0) : nullptr;
                            HP_DISPATCH_FLOAT(a.dtype(), binaryGrad<T>(c, a, b, y, dy, wa, wb, fa, fb));
                            if (wb && c.inputGrads[1].defined() && bType != a.dtype())
                              c.inputGrads[1] = cpu::castTensor(c.inputGrads[1], bType);
                          },
                          nullptr, {}});
}

/// Add, Sub: the gradient is dY (negated for Sub's B), reduced to each shape.
void regAddSub(const std::string &name, bool sub) {
  registerGradient(name, {[sub](GradientContext &c) {
                            c.inputGrads.resize(c.inputs.size());
                            for (size_t i = 0; i < 2; ++i) {
                              if (!wants(c, i)) continue;
                              Tensor dy = outGrad(c, 0, c.in(i).dtype());
                              if (!dy.defined()) return;
                              Tensor g = reduceGradToShape(dy, c.in(i).shape());
                              c.inputGrads[i] = sub && i == 1 ? negated(std::move(g)) : std::move(g);
                            }
                          },
                          nullptr, {}});
}

/// Sum, Mean, Max, Min over any number of broadcast inputs.
void regVariadic(const std::string &name, int kind /*0 sum, 1 mean, 2 max, 3 min*/) {
  registerGradient(name, {[kind](GradientContext &c) {
                            c.inputGrads.resize(c.inputs.size());
                            size_t count = 0;
                            for (size_t i = 0; i < c.inputs.size(); ++i) count += c.hasInput(i);
                            DType dt = DType::Undefined;
                            for (size_t i = 0; i < c.inputs.size() && dt == DType::Undefined; ++i)
                              if (c.hasInput(i)) dt = c.in(i).dtype();
                            Tensor dy = outGrad(c, 0, dt);
                            if (!dy.defined()) return;
                            const auto &shape = dy.shape();
                            if (kind <= 1) {
                              for (size_t i = 0; i < c.inputs.size(); ++i) {
                                if (!wants(c, i)) continue;
                                Tensor g = reduceGradToShape(dy, c.in(i).shape());
                                if (kind == 1) HP_DISPATCH_FLOAT(dt, {
                                  T *p = g.data<T>();
                                  for (int64_t k = 0; k < g.numel(); ++k) p[k] = static_cast<T>(p[k] / static_cast<T>(count));
                                });
                                c.inputGrads[i] = std::move(g);
                              }
                              return;
                            }
                            // Max/Min: each output element's gradient goes to the
                            // first input that holds the extreme value.
                            std::vector<Tensor> full(c.inputs.size());
                            for (size_t i = 0; i < c.inputs.size(); ++i)
                              if (c.hasInput(i)) full[i] = broadcastTo(c.in(i), shape);
                            std::vector<Tensor> g(c.inputs.size());
                            for (size_t i = 0; i < c.inputs.size(); ++i)
                              if (wants(c, i)) g[i] = Tensor(dt, shape);
                            HP_DISPATCH_FLOAT(dt, {
                              const T *py = c.out(0).data<T>(), *pg = dy.data<T>();
                              for (int64_t e = 0; e < dy.numel(); ++e)
                                for (size_t i = 0; i < full.size(); ++i) {
                                  if (!full[i].defined() || full[i].data<T>()[e] != py[e]) continue;
                                  if (g[i].defined()) g[i].data<T>()[e] = pg[e];
                                  break;
                                }
                            });
                            for (size_t i = 0; i < c.inputs.size(); ++i)
                              if (g[i].defined()) c.inputGrads[i] = reduceGradToShape(g[i], c.in(i).shape());
                          },
                          nullptr, {}});
}

} // namespace

/// Identity-like: the gradient is dY (a copy), shaped like input 0.
void regPassThrough(const std::string &name, std::vector<size_t> nonDiff,
                    std::function<std::string(const Node &, int64_t)> check) {
  registerGradient(name, {[](GradientContext &c) {
                            Tensor dy = firstOutGrad(c);
                            if (!dy.defined()) return;
                            const Tensor &x = c.in(0);
                            c.inputGrads[0] = reshapedCopy(dy, x.shape());
                          },
                          std::move(check), std::move(nonDiff)});
}

void registerElementwiseGradients() {
  registerUnaryGradients(); // cpu/kernels/Unary.cpp
  // Clip: the bounds (inputs 1, 2, or attributes before opset 11) get no gradient.
  registerGradient("Clip", {[](GradientContext &c) {
                              Tensor dy = firstOutGrad(c);
                              if (!dy.defined()) return;
                              const Tensor &x = c.in(0);
                              double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
                              if (c.opset < 11) {
                                lo = c.node.getFloat("min", -std::numeric_limits<float>::max());
                                hi = c.node.getFloat("max", std::numeric_limits<float>::max());
                              } else {
                                if (c.hasInput(1)) lo = c.in(1).scalarAsDouble();
                                if (c.hasInput(2)) hi = c.in(2).scalarAsDouble();
                              }
                              Tensor dx(x.dtype(), x.shape());
                              HP_DISPATCH_FLOAT(x.dtype(), {
                                const T *px = x.data<T>(), *pg = dy.data<T>();
                                T *pd = dx.data<T>();
                                for (int64_t i = 0; i < x.numel(); ++i)
                                  pd[i] = px[i] >= static_cast<T>(lo) && px[i] <= static_cast<T>(hi) ? pg[i] : T(0);
                              });
                              c.inputGrads[0] = std::move(dx);
                            },
                            nullptr, {1, 2}});

  regAddSub("Add", false);
  regAddSub("Sub", true);
  regBinary("Mul", false, [](double, double b, double) { return b; }, [](double a, double, double) { return a; });
  regBinary("Div", true, [](double, double b, double) { return 1.0 / b; },
            [](double, double b, double y) { return -y / b; });
  // d(a^b)/da = b a^(b-1); d(a^b)/db = a^b ln a, taken as 0 where a <= 0
  // (no real derivative; keeps NaN out of an exponent that is trained).
  regBinary("Pow", true, [](double a, double b, double) { return b == 0 ? 0.0 : b * std::pow(a, b - 1); },
            [](double a, double, double y) { return a > 0 ? y * std::log(a) : 0.0; });
  regVariadic("Sum", 0);
  regVariadic("Mean", 1);
  regVariadic("Max", 2);
  regVariadic("Min", 3);

  registerGradient("Where", {[](GradientContext &c) {
                               c.inputGrads.resize(c.inputs.size());
                               bool wx = wants(c, 1), wy = wants(c, 2);
                               if (!wx && !wy) return;
                               const Tensor &cond = c.in(0), &x = c.in(1), &y = c.in(2);
                               Tensor dy = outGrad(c, 0, x.dtype());
                               if (!dy.defined()) return;
                               const auto &shape = dy.shape();
                               auto sc = broadcastStrides(cond.shape(), shape);
                               int64_t r = shape.size(), n = dy.numel();
                               Tensor gx, gy;
                               if (wx) gx = Tensor(x.dtype(), shape);
                               if (wy) gy = Tensor(y.dtype(), shape);
                               const bool *pc = cond.data<bool>();
                               HP_DISPATCH_FLOAT(x.dtype(), {
                                 const T *pg = dy.data<T>();
                                 T *pgx = wx ? gx.data<T>() : nullptr, *pgy = wy ? gy.data<T>() : nullptr;
                                 std::vector<int64_t> idx(r, 0);
                                 int64_t oc = 0;
                                 for (int64_t i = 0; i < n; ++i) {
                                   bool take = pc[oc];
                                   if (pgx) pgx[i] = take ? pg[i] : T(0);
                                   if (pgy) pgy[i] = take ? T(0) : pg[i];
                                   for (int64_t d = r - 1; d >= 0; --d) {
                                     if (++idx[d] < shape[d]) { oc += sc[d]; break; }
                                     oc -= sc[d] * (shape[d] - 1); idx[d] = 0;
                                   }
                                 }
                               });
                               if (wx) c.inputGrads[1] = reduceGradToShape(gx, x.shape());
                               if (wy) c.inputGrads[2] = reduceGradToShape(gy, y.shape());
                             },
                             nullptr, {0}});

  // Cast between float types: the gradient is cast back.
  registerGradient("Cast", {[](GradientContext &c) {
                              c.inputGrads.resize(c.inputs.size());
                              if (!wants(c, 0) || !c.hasOutputGrad(0)) return;
                              const Tensor &x = c.in(0);
                              const Tensor &dy = c.outputGrads[0];
                              if (!isFloatType(x.dtype()) || !isFloatType(dy.dtype())) return;
                              c.inputGrads[0] = dy.dtype() == x.dtype() ? dy.clone() : cpu::castTensor(dy, x.dtype());
                            },
                            nullptr, {}});
  regPassThrough("Identity", {}, nullptr);
  regPassThrough("Dropout", {1, 2}, [](const Node &n, int64_t opset) -> std::string {
    if (opset >= 12 && n.inputs.size() > 2 && !n.inputs[2].empty())
      return "Dropout with a training_mode input has no backward (inference-mode Dropout only)";
    return "";
  });
}

} // namespace hetplan::runtime::train
