//===- Unary.cpp - the unary math/activation table, forward and backward --===//
//
// One entry per op: its forward kernel (float ops computed in double, with a
// vectorised float32 loop where FastMath.h has one; numeric ops per type) in
// registerUnaryKernels and, for the differentiable ones, its backward
// dX = dY * f'(x, y) in registerUnaryGradients; and the steps these ops are
// in fused elementwise chains (ElementwiseChain.h).
//
//===----------------------------------------------------------------------===//
#include "ElementwiseChain.h"
#include "FastMath.h"
#include "KernelUtil.h"
#include "OpKernels.h"
#include "../../train/GradUtil.h"

#include <cmath>
#include <type_traits>

namespace hetplan::runtime::cpu {

namespace {

using FastFn = void (*)(const float *, float *, int64_t);
using FastSel = FastFn (*)(const Node &);

/// A float unary op: makeFn(node) returns the per-element function; `fast`,
/// when given, returns a vectorised float32 loop for the node (or null).
template <typename Make> void regFloatUnary(const std::string &name, Make makeFn, FastSel fast = nullptr) {
  registerKernel(name, {[makeFn, fast](KernelContext &c) {
                          const Tensor &x = c.in(0);
                          Tensor out(x.dtype(), x.shape());
                          if (FastFn ff = fast && x.dtype() == DType::Float32 ? fast(c.node) : nullptr) {
                            const float *px = x.data<float>(); float *po = out.data<float>();
                            parallelFor(x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) { ff(px + lo, po + lo, hi - lo); });
                            c.outputs[0] = std::move(out);
                            return;
                          }
                          auto fn = makeFn(c.node);
                          HP_DISPATCH_FLOAT(x.dtype(), {
                            const T *px = x.data<T>(); T *po = out.data<T>();
                            parallelFor(x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
                              for (int64_t i = lo; i < hi; ++i) po[i] = static_cast<T>(fn(px[i]));
                            });
                          });
                          c.outputs[0] = std::move(out);
                        },
                        nullptr, kFloatTypes});
}

template <typename Make> void regNumericUnary(const std::string &name, Make makeFn, std::vector<DType> types) {
  registerKernel(name, {[makeFn](KernelContext &c) {
                          const Tensor &x = c.in(0);
                          Tensor out(x.dtype(), x.shape());
                          HP_DISPATCH_NUMERIC(x.dtype(), {
                            auto fn = makeFn(T());
                            const T *px = x.data<T>(); T *po = out.data<T>();
                            parallelFor(x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
                              for (int64_t i = lo; i < hi; ++i) po[i] = static_cast<T>(fn(px[i]));
                            });
                          });
                          c.outputs[0] = std::move(out);
                        },
                        nullptr, types});
}

double erfGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

} // namespace

/// Unary math and activations: float-only ones computed in double, then the
/// numeric ones per type.
void registerUnaryKernels() {
  auto plain = [](double (*f)(double)) { return [f](const Node &) { return [f](double x) { return f(x); }; }; };
  regFloatUnary("Sqrt", plain([](double x) { return std::sqrt(x); }));
  regFloatUnary("Exp", plain([](double x) { return std::exp(x); }), [](const Node &) -> FastFn { return fastmath::exp; });
  regFloatUnary("Log", plain([](double x) { return std::log(x); }));
  regFloatUnary("Erf", plain([](double x) { return std::erf(x); }), [](const Node &) -> FastFn { return fastmath::erf; });
  regFloatUnary("Tanh", plain([](double x) { return std::tanh(x); }), [](const Node &) -> FastFn { return fastmath::tanh; });
  regFloatUnary("Sigmoid", plain([](double x) { return 1.0 / (1.0 + std::exp(-x)); }), [](const Node &) -> FastFn { return fastmath::sigmoid; });
  regFloatUnary("Floor", plain([](double x) { return std::floor(x); }));
  regFloatUnary("Ceil", plain([](double x) { return std::ceil(x); }));
  regFloatUnary("Round", plain([](double x) { return std::nearbyint(x); }));
  regFloatUnary("Reciprocal", plain([](double x) { return 1.0 / x; }));
  regFloatUnary("Sin", plain([](double x) { return std::sin(x); }));
  regFloatUnary("Cos", plain([](double x) { return std::cos(x); }));
  regFloatUnary("Tan", plain([](double x) { return std::tan(x); }));
  regFloatUnary("Asin", plain([](double x) { return std::asin(x); }));
  regFloatUnary("Acos", plain([](double x) { return std::acos(x); }));
  regFloatUnary("Atan", plain([](double x) { return std::atan(x); }));
  regFloatUnary("Sinh", plain([](double x) { return std::sinh(x); }));
  regFloatUnary("Cosh", plain([](double x) { return std::cosh(x); }));
  regFloatUnary("Asinh", plain([](double x) { return std::asinh(x); }));
  regFloatUnary("Acosh", plain([](double x) { return std::acosh(x); }));
  regFloatUnary("Atanh", plain([](double x) { return std::atanh(x); }));
  regFloatUnary("Softplus", plain([](double x) { return std::log1p(std::exp(x)); }));
  regFloatUnary("Softsign", plain([](double x) { return x / (1.0 + std::fabs(x)); }));
  regFloatUnary("Mish", plain([](double x) { return x * std::tanh(std::log1p(std::exp(x))); }));
  regFloatUnary("HardSwish", plain([](double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); }));
  regFloatUnary("Gelu", [](const Node &n) {
    bool tanhApprox = n.getString("approximate", "none") == "tanh";
    return [tanhApprox](double x) {
      if (!tanhApprox) return erfGelu(x);
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    };
  }, [](const Node &n) -> FastFn { return n.getString("approximate", "none") == "tanh" ? fastmath::geluTanh : fastmath::geluErf; });
  regFloatUnary("LeakyRelu", [](const Node &n) { double a = n.getFloat("alpha", 0.01f); return [a](double x) { return x < 0 ? a * x : x; }; });
  regFloatUnary("Elu", [](const Node &n) { double a = n.getFloat("alpha", 1.0f); return [a](double x) { return x < 0 ? a * (std::exp(x) - 1) : x; }; });
  regFloatUnary("Celu", [](const Node &n) { double a = n.getFloat("alpha", 1.0f); return [a](double x) { return std::max(0.0, x) + std::min(0.0, a * (std::exp(x / a) - 1)); }; });
  regFloatUnary("Selu", [](const Node &n) {
    double a = n.getFloat("alpha", 1.67326319217681884765625f), g = n.getFloat("gamma", 1.05070102214813232421875f);
    return [a, g](double x) { return x <= 0 ? g * (a * std::exp(x) - a) : g * x; };
  });
  regFloatUnary("HardSigmoid", [](const Node &n) {
    double a = n.getFloat("alpha", 0.2f), b = n.getFloat("beta", 0.5f);
    return [a, b](double x) { return std::max(0.0, std::min(1.0, a * x + b)); };
  });
  regFloatUnary("ThresholdedRelu", [](const Node &n) { double a = n.getFloat("alpha", 1.0f); return [a](double x) { return x > a ? x : 0.0; }; });
  regFloatUnary("Shrink", [](const Node &n) {
    double b = n.getFloat("bias", 0.0f), l = n.getFloat("lambd", 0.5f);
    return [b, l](double x) { return x < -l ? x + b : (x > l ? x - b : 0.0); };
  });
  regNumericUnary("Relu", [](auto z) { using T = decltype(z); return [](T x) { return x < T(0) ? T(0) : x; }; }, kSignedAndFloat);
  regNumericUnary("Neg", [](auto z) { using T = decltype(z); return [](T x) { return wrapSub(T(0), x); }; }, kSignedAndFloat);
  regNumericUnary("Abs", [](auto z) { using T = decltype(z); return [](T x) { if constexpr (std::is_unsigned_v<T>) return x; else return x < T(0) ? wrapSub(T(0), x) : x; }; }, kNumericTypes);
  regNumericUnary("Sign", [](auto z) { using T = decltype(z); return [](T x) { return static_cast<T>(x > T(0) ? 1 : (x < T(0) ? -1 : 0)); }; }, kNumericTypes);
  // Steps of fused elementwise chains (ElementwiseChain.h): the same math.
  registerElementwiseStep("Relu", {EwStep::relu});
  registerElementwiseStep("Neg", {EwStep::neg});
  registerElementwiseStep("Abs", {EwStep::abs});
  registerElementwiseStep("Sigmoid", {EwStep::sigmoid, true});
  registerElementwiseStep("Tanh", {EwStep::tanh, true});
  registerElementwiseStep("Erf", {EwStep::erf, true});
  registerElementwiseStep("Exp", {EwStep::exp, true});
  registerElementwiseStep("Sqrt", {EwStep::sqrt, true});
  registerElementwiseStep("HardSwish", {EwStep::hard_swish, true});
  registerElementwiseStep("LeakyRelu", {EwStep::leaky_relu, true, [](const Node &n, EwStep &st) { st.ka = n.getFloat("alpha", 0.01f); }});
  registerElementwiseStep("HardSigmoid", {EwStep::hard_sigmoid, true, [](const Node &n, EwStep &st) {
                            st.ka = n.getFloat("alpha", 0.2f);
                            st.kb = n.getFloat("beta", 0.5f);
                          }});
}


} // namespace hetplan::runtime::cpu

namespace hetplan::runtime::train {
namespace {

constexpr double kPi = 3.14159265358979323846;

/// A float unary op: dX = dY * f'(x, y); makeFn(node) returns f'(x, y).
/// `usesY`: the derivative reads the forward output.
template <typename Make>
void regUnary(const std::string &name, bool usesY, Make makeFn,
              std::function<std::string(const Node &, int64_t)> check = nullptr) {
  registerGradient(name, {[usesY, makeFn](GradientContext &c) {
                            Tensor dy = firstOutGrad(c);
                            if (!dy.defined()) return;
                            const Tensor &x = c.in(0);
                            const Tensor *y = usesY ? &c.out(0) : nullptr;
                            auto fn = makeFn(c.node);
                            Tensor dx(x.dtype(), x.shape());
                            HP_DISPATCH_FLOAT(x.dtype(), {
                              const T *px = x.data<T>(), *pg = dy.data<T>();
                              const T *py = y ? y->data<T>() : px;
                              T *pd = dx.data<T>();
                              parallelFor(x.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
                                for (int64_t i = lo; i < hi; ++i)
                                  pd[i] = static_cast<T>(static_cast<double>(pg[i]) * fn(static_cast<double>(px[i]), static_cast<double>(py[i])));
                              });
                            });
                            c.inputGrads[0] = std::move(dx);
                          },
                          std::move(check), {}});
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

} // namespace

void registerUnaryGradients() {
  auto plain = [](double (*f)(double, double)) { return [f](const Node &) { return f; }; };
  regUnary("Neg", false, plain([](double, double) { return -1.0; }));
  regUnary("Sqrt", true, plain([](double, double y) { return 0.5 / y; }));
  regUnary("Exp", true, plain([](double, double y) { return y; }));
  regUnary("Log", false, plain([](double x, double) { return 1.0 / x; }));
  regUnary("Tanh", true, plain([](double, double y) { return 1.0 - y * y; }));
  regUnary("Sigmoid", true, plain([](double, double y) { return y * (1.0 - y); }));
  regUnary("Erf", false, plain([](double x, double) { return 2.0 / std::sqrt(kPi) * std::exp(-x * x); }));
  // y > 0 exactly where x > 0: reads the output, as ops/defs/Activation.cpp declares.
  regUnary("Relu", true, plain([](double, double y) { return y > 0 ? 1.0 : 0.0; }));
  regUnary("Reciprocal", true, plain([](double, double y) { return -y * y; }));
  regUnary("Abs", false, plain([](double x, double) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }));
  regUnary("Sin", false, plain([](double x, double) { return std::cos(x); }));
  regUnary("Cos", false, plain([](double x, double) { return -std::sin(x); }));
  regUnary("Softplus", false, plain([](double x, double) { return sigmoid(x); }));
  regUnary("LeakyRelu", false, [](const Node &n) {
    double a = n.getFloat("alpha", 0.01f);
    return [a](double x, double) { return x < 0 ? a : 1.0; };
  });
  regUnary("Elu", true, [](const Node &n) {
    double a = n.getFloat("alpha", 1.0f);
    return [a](double x, double y) { return x < 0 ? y + a : 1.0; };
  });
  regUnary(
      "Gelu", false,
      [](const Node &n) {
        bool tanhApprox = n.getString("approximate", "none") == "tanh";
        return [tanhApprox](double x, double) {
          if (!tanhApprox) {
            double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
            double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
            return cdf + x * pdf;
          }
          double k = std::sqrt(2.0 / kPi), x2 = x * x;
          double t = std::tanh(k * (x + 0.044715 * x2 * x));
          return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x2);
        };
      },
      [](const Node &n, int64_t) -> std::string {
        std::string a = n.getString("approximate", "none");
        if (a != "none" && a != "tanh") return "Gelu approximate='" + a + "' has no backward";
        return "";
      });
}

} // namespace hetplan::runtime::train
