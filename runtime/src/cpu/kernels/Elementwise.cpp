//===- Elementwise.cpp - unary, binary, variadic elementwise kernels ------===//
#include "KernelUtil.h"

#include <cmath>
#include <limits>

namespace hetplan::runtime::cpu {

namespace {
template <typename D> struct CastTo {
  template <typename S> static void run(const S *s, D *d, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<D, bool>) d[i] = s[i] != 0;
      else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
        // out-of-range float -> int is UB in C++; saturate like most runtimes
        double v = static_cast<double>(s[i]);
        if (std::isnan(v)) d[i] = 0;
        else if (v >= static_cast<double>(std::numeric_limits<D>::max())) d[i] = std::numeric_limits<D>::max();
        else if (v <= static_cast<double>(std::numeric_limits<D>::lowest())) d[i] = std::numeric_limits<D>::lowest();
        else d[i] = static_cast<D>(s[i]);
      } else d[i] = static_cast<D>(s[i]);
    }
  }
};

template <typename S> void castFrom(const S *s, Tensor &out) {
  int64_t n = out.numel();
  switch (out.dtype()) {
  case DType::Float32: CastTo<float>::run(s, out.data<float>(), n); break;
  case DType::Float64: CastTo<double>::run(s, out.data<double>(), n); break;
  case DType::Int8: CastTo<int8_t>::run(s, out.data<int8_t>(), n); break;
  case DType::UInt8: CastTo<uint8_t>::run(s, out.data<uint8_t>(), n); break;
  case DType::Int16: CastTo<int16_t>::run(s, out.data<int16_t>(), n); break;
  case DType::UInt16: CastTo<uint16_t>::run(s, out.data<uint16_t>(), n); break;
  case DType::Int32: CastTo<int32_t>::run(s, out.data<int32_t>(), n); break;
  case DType::UInt32: CastTo<uint32_t>::run(s, out.data<uint32_t>(), n); break;
  case DType::Int64: CastTo<int64_t>::run(s, out.data<int64_t>(), n); break;
  case DType::UInt64: CastTo<uint64_t>::run(s, out.data<uint64_t>(), n); break;
  case DType::Bool: CastTo<bool>::run(s, out.data<bool>(), n); break;
  case DType::Float16: {
    uint16_t *d = out.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = floatToHalf(static_cast<float>(s[i]));
    break;
  }
  default: throw std::runtime_error(std::string("cannot cast to ") + dtypeName(out.dtype()));
  }
}
} // namespace

Tensor castTensor(const Tensor &t, DType to) {
  if (t.dtype() == to) return t;
  Tensor out(to, t.shape());
  if (t.dtype() == DType::Float16) {
    std::vector<float> tmp(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) tmp[i] = halfToFloat(t.data<uint16_t>()[i]);
    castFrom(tmp.data(), out);
    return out;
  }
  HP_DISPATCH_ALL(t.dtype(), castFrom(t.data<T>(), out));
  return out;
}

namespace {

const std::vector<DType> kSignedAndFloat = {DType::Float32, DType::Float64, DType::Int8, DType::Int16,
                                            DType::Int32, DType::Int64};

/// A float unary op: makeFn(node) returns the per-element function.
template <typename Make> void regFloatUnary(const std::string &name, Make makeFn) {
  registerKernel(name, {[makeFn](KernelContext &c) {
                          const Tensor &x = c.in(0);
                          auto fn = makeFn(c.node);
                          Tensor out(x.dtype(), x.shape());
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

/// Binary arithmetic with broadcasting, same element type in and out.
template <typename F> void regArith(const std::string &name, F f, std::vector<DType> types = kNumericTypes) {
  registerKernel(name, {[f](KernelContext &c) {
                          const Tensor &a = c.in(0), &b = c.in(1);
                          if (a.dtype() != b.dtype())
                            throw std::runtime_error(std::string("mixed element types ") + dtypeName(a.dtype()) + " and " + dtypeName(b.dtype()));
                          HP_DISPATCH_NUMERIC(a.dtype(), c.outputs[0] = binaryBroadcast<T, T, T>(a, b, a.dtype(), [&](T x, T y) { return static_cast<T>(f(x, y)); }));
                        },
                        nullptr, types});
}

template <typename F> void regCompare(const std::string &name, F f, std::vector<DType> types) {
  registerKernel(name, {[f](KernelContext &c) {
                          const Tensor &a = c.in(0), &b = c.in(1);
                          HP_DISPATCH_ALL(a.dtype(), c.outputs[0] = binaryBroadcast<T, T, bool>(a, b, DType::Bool, [&](T x, T y) { return f(x, y); }));
                        },
                        nullptr, types});
}

template <typename F> void regVariadic(const std::string &name, F f, bool mean = false) {
  registerKernel(name, {[f, mean](KernelContext &c) {
                          Tensor acc = c.in(0);
                          size_t count = 0;
                          for (size_t i = 0; i < c.inputs.size(); ++i) {
                            if (!c.hasInput(i)) continue;
                            ++count;
                            if (i == 0) continue;
                            HP_DISPATCH_NUMERIC(acc.dtype(), acc = binaryBroadcast<T, T, T>(acc, c.in(i), acc.dtype(), [&](T x, T y) { return static_cast<T>(f(x, y)); }));
                          }
                          if (mean) {
                            acc = acc.clone();
                            HP_DISPATCH_FLOAT(acc.dtype(), {
                              T *p = acc.data<T>();
                              for (int64_t i = 0; i < acc.numel(); ++i) p[i] /= static_cast<T>(count);
                            });
                          } else if (count == 1) acc = acc.clone();
                          c.outputs[0] = std::move(acc);
                        },
                        nullptr, mean ? kFloatTypes : kNumericTypes});
}

template <typename T> T modOp(T x, T y, bool fmodMode) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(std::fmod(x, y));
  else {
    if (y == 0) return 0;
    T r = static_cast<T>(x % y);
    if constexpr (std::is_signed_v<T>)
      if (!fmodMode && r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
    return r;
  }
}

double erfGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

} // namespace

void registerElementwiseKernels() {
  auto plain = [](double (*f)(double)) { return [f](const Node &) { return [f](double x) { return f(x); }; }; };
  regFloatUnary("Sqrt", plain([](double x) { return std::sqrt(x); }));
  regFloatUnary("Exp", plain([](double x) { return std::exp(x); }));
  regFloatUnary("Log", plain([](double x) { return std::log(x); }));
  regFloatUnary("Erf", plain([](double x) { return std::erf(x); }));
  regFloatUnary("Tanh", plain([](double x) { return std::tanh(x); }));
  regFloatUnary("Sigmoid", plain([](double x) { return 1.0 / (1.0 + std::exp(-x)); }));
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
  });
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
  regNumericUnary("Neg", [](auto z) { using T = decltype(z); return [](T x) { return static_cast<T>(-x); }; }, kSignedAndFloat);
  regNumericUnary("Abs", [](auto z) { using T = decltype(z); return [](T x) { if constexpr (std::is_unsigned_v<T>) return x; else return static_cast<T>(x < T(0) ? -x : x); }; }, kNumericTypes);
  regNumericUnary("Sign", [](auto z) { using T = decltype(z); return [](T x) { return static_cast<T>(x > T(0) ? 1 : (x < T(0) ? -1 : 0)); }; }, kNumericTypes);

  regArith("Add", [](auto x, auto y) { return x + y; });
  regArith("Sub", [](auto x, auto y) { return x - y; });
  regArith("Mul", [](auto x, auto y) { return x * y; });
  regArith("Div", [](auto x, auto y) { return x / y; });
  registerKernel("Mod", {[](KernelContext &c) {
                           const Tensor &a = c.in(0), &b = c.in(1);
                           bool fmodMode = c.node.getInt("fmod", 0) != 0;
                           HP_DISPATCH_NUMERIC(a.dtype(), c.outputs[0] = binaryBroadcast<T, T, T>(a, b, a.dtype(), [&](T x, T y) { return modOp<T>(x, y, fmodMode); }));
                         },
                         [](const CheckContext &c) -> std::string {
                           if (isFloatType(c.in(0)) && c.node.getInt("fmod", 0) == 0) return "Mod with fmod=0 on floats is not allowed";
                           return "";
                         },
                         kNumericTypes});
  registerKernel("Pow", {[](KernelContext &c) {
                           const Tensor &a = c.in(0);
                           Tensor b = castTensor(c.in(1), a.dtype());
                           HP_DISPATCH_NUMERIC(a.dtype(), c.outputs[0] = binaryBroadcast<T, T, T>(a, b, a.dtype(), [](T x, T y) {
                             return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
                           }));
                         },
                         nullptr, {DType::Float32, DType::Float64, DType::Int32, DType::Int64}});
  registerKernel("PRelu", {[](KernelContext &c) {
                             const Tensor &a = c.in(0), &b = c.in(1);
                             HP_DISPATCH_NUMERIC(a.dtype(), c.outputs[0] = binaryBroadcast<T, T, T>(a, b, a.dtype(), [](T x, T s) { return x < T(0) ? static_cast<T>(x * s) : x; }));
                           },
                           nullptr, kSignedAndFloat});
  regCompare("Equal", [](auto x, auto y) { return x == y; }, kAllTypes);
  regCompare("Less", [](auto x, auto y) { return x < y; }, kNumericTypes);
  regCompare("Greater", [](auto x, auto y) { return x > y; }, kNumericTypes);
  regCompare("LessOrEqual", [](auto x, auto y) { return x <= y; }, kNumericTypes);
  regCompare("GreaterOrEqual", [](auto x, auto y) { return x >= y; }, kNumericTypes);
  regCompare("And", [](auto x, auto y) { return x && y; }, {DType::Bool});
  regCompare("Or", [](auto x, auto y) { return x || y; }, {DType::Bool});
  regCompare("Xor", [](auto x, auto y) { return x != y; }, {DType::Bool});
  registerKernel("Not", {[](KernelContext &c) {
                           const Tensor &x = c.in(0);
                           Tensor out(DType::Bool, x.shape());
                           for (int64_t i = 0; i < x.numel(); ++i) out.data<bool>()[i] = !x.data<bool>()[i];
                           c.outputs[0] = std::move(out);
                         },
                         nullptr, {DType::Bool}});
  auto isX = [](bool inf) {
    return [inf](KernelContext &c) {
      const Tensor &x = c.in(0);
      bool neg = c.node.getInt("detect_negative", 1), pos = c.node.getInt("detect_positive", 1);
      Tensor out(DType::Bool, x.shape());
      HP_DISPATCH_FLOAT(x.dtype(), {
        for (int64_t i = 0; i < x.numel(); ++i) {
          T v = x.data<T>()[i];
          out.data<bool>()[i] = inf ? (std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg))) : std::isnan(v);
        }
      });
      c.outputs[0] = std::move(out);
    };
  };
  registerKernel("IsNaN", {isX(false), nullptr, kFloatTypes});
  registerKernel("IsInf", {isX(true), nullptr, kFloatTypes});
  registerKernel("Where", {[](KernelContext &c) {
                             const Tensor &cond = c.in(0), &x = c.in(1), &y = c.in(2);
                             auto shape = broadcastShapes(broadcastShapes(cond.shape(), x.shape()), y.shape());
                             Tensor out(x.dtype(), shape);
                             auto sc = broadcastStrides(cond.shape(), shape), sx = broadcastStrides(x.shape(), shape),
                                  sy = broadcastStrides(y.shape(), shape);
                             size_t es = dtypeSize(x.dtype());
                             int64_t r = shape.size(), n = out.numel();
                             std::vector<int64_t> idx(r, 0);
                             const bool *pc = cond.data<bool>();
                             const char *px = static_cast<const char *>(x.raw()), *py = static_cast<const char *>(y.raw());
                             char *po = static_cast<char *>(out.raw());
                             for (int64_t i = 0; i < n; ++i) {
                               int64_t oc = 0, ox = 0, oy = 0;
                               for (int64_t d = 0; d < r; ++d) { oc += idx[d] * sc[d]; ox += idx[d] * sx[d]; oy += idx[d] * sy[d]; }
                               std::memcpy(po + i * es, pc[oc] ? px + ox * es : py + oy * es, es);
                               for (int64_t d = r - 1; d >= 0; --d) { if (++idx[d] < shape[d]) break; idx[d] = 0; }
                             }
                             c.outputs[0] = std::move(out);
                           },
                           nullptr, {DType::Bool}});
  regVariadic("Max", [](auto x, auto y) { return x > y ? x : y; });
  regVariadic("Min", [](auto x, auto y) { return x < y ? x : y; });
  regVariadic("Sum", [](auto x, auto y) { return x + y; });
  regVariadic("Mean", [](auto x, auto y) { return x + y; }, true);
  registerKernel("Clip", {[](KernelContext &c) {
                            const Tensor &x = c.in(0);
                            Tensor out(x.dtype(), x.shape());
                            HP_DISPATCH_NUMERIC(x.dtype(), {
                              T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
                              if (c.opset < 11) {
                                lo = static_cast<T>(c.node.getFloat("min", -std::numeric_limits<float>::max()));
                                hi = static_cast<T>(c.node.getFloat("max", std::numeric_limits<float>::max()));
                              } else {
                                if (c.hasInput(1)) lo = c.in(1).data<T>()[0];
                                if (c.hasInput(2)) hi = c.in(2).data<T>()[0];
                              }
                              for (int64_t i = 0; i < x.numel(); ++i) {
                                T v = x.data<T>()[i];
                                out.data<T>()[i] = v < lo ? lo : (v > hi ? hi : v);
                              }
                            });
                            c.outputs[0] = std::move(out);
                          },
                          nullptr, kNumericTypes});
  registerKernel("Cast", {[](KernelContext &c) { c.outputs[0] = castTensor(c.in(0), static_cast<DType>(c.node.getInt("to", 0))); },
                          [](const CheckContext &c) -> std::string {
                            DType to = static_cast<DType>(c.node.getInt("to", 0));
                            DType from = c.in(0);
                            auto ok = [](DType t) { return t == DType::Float16 || t == DType::Bool || isFloatType(t) && t != DType::BFloat16 || isIntegerType(t); };
                            if (!ok(to)) return std::string("Cast to ") + dtypeName(to) + " is not supported";
                            if (from != DType::Undefined && !ok(from)) return std::string("Cast from ") + dtypeName(from) + " is not supported";
                            return "";
                          },
                          {}});
  auto identity = [](KernelContext &c) {
    c.outputs[0] = c.in(0);
    if (c.numOutputs() > 1) { // Dropout's mask: all true at inference
      c.outputs[1] = Tensor(DType::Bool, c.in(0).shape());
      std::memset(c.outputs[1].raw(), 1, c.outputs[1].nbytes());
    }
  };
  registerKernel("Identity", {identity, nullptr, {}});
  registerKernel("Dropout", {identity, [](const CheckContext &c) -> std::string {
                               if (c.opset >= 12 && c.node.inputs.size() > 2 && !c.node.inputs[2].empty())
                                 return "Dropout with a training_mode input is not supported (inference only)";
                               return "";
                             },
                             {}});
}

} // namespace hetplan::runtime::cpu
