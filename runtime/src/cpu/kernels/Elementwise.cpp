//===- Elementwise.cpp - binary, variadic elementwise kernels, casts -------===//
//
// The float32 fast-math loops (FastMath.h) and casts live here too; the
// unary math/activation table is Unary.cpp.
//
//===----------------------------------------------------------------------===//
#include "ElementwiseChain.h"
#include "FastMath.h"
#include "KernelUtil.h"
#include "OpKernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <type_traits>

#include <cmath>
#include <limits>

namespace hetplan::runtime::cpu::fastmath {

namespace {
HP_INLINE float asFloat(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
HP_INLINE int32_t asInt(float f) { int32_t i; std::memcpy(&i, &f, 4); return i; }

/// Cephes expf: x = n ln2 + r, |r| <= ln2/2, degree-7 polynomial, times 2^n.
HP_INLINE float expOne(float x) {
  float xc = x < -87.5f ? -87.5f : (x > 88.72283935546875f ? 88.72283935546875f : x);
  xc = x != x ? 0.0f : xc;  // NaN: computed on 0, returned as NaN below (no shift of garbage)
  float t = xc * 1.44269504088896341f + 12582912.f; // round to nearest
  int32_t n = asInt(t) - 0x4B400000;
  float fx = t - 12582912.f;
  float r = xc - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t n1 = n > 127 ? 127 : n; // n in [-126, 128]: 2^n = 2^n1 (* 2)
  y = y * asFloat(int32_t(uint32_t(n1 + 127) << 23)) * (n > 127 ? 2.0f : 1.0f);
  y = x > 88.72283935546875f ? __builtin_inff() : y;
  y = x < -87.5f ? 0.0f : y;
  return x != x ? x : y;
}

/// Rational tanh (Eigen's generic_fast_tanh_float), |x| clamped to 7.9053.
HP_INLINE float tanhOne(float x) {
  float xc = x < -7.90531110763549805f ? -7.90531110763549805f : (x > 7.90531110763549805f ? 7.90531110763549805f : x);
  float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * xc;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  float y = p / q;
  y = (x < 0.0004f && x > -0.0004f) ? x : y;
  return x != x ? x : y;
}

/// Rational erf (as in Eigen/XLA), x clamped to [-4, 4].
HP_INLINE float erfOne(float x) {
  float xc = x < -4.f ? -4.f : (x > 4.f ? 4.f : x);
  float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * xc;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  float y = p / q;
  return x != x ? x : y;
}
} // namespace

HP_CLONES void exp(const float *x, float *y, int64_t n) {
  HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = expOne(x[i]);
}
HP_CLONES void erf(const float *x, float *y, int64_t n) {
  HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = erfOne(x[i]);
}
HP_CLONES void tanh(const float *x, float *y, int64_t n) {
  HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = tanhOne(x[i]);
}
HP_CLONES void sigmoid(const float *x, float *y, int64_t n) {
  HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + expOne(-x[i]));
}
HP_CLONES static void geluErfFast(const float *x, float *y, int64_t n) {
  HP_SIMD for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + erfOne(v * 0.70710678118654752f));
  }
}
void geluErf(const float *x, float *y, int64_t n) {
  geluErfFast(x, y, n);
  // 1 + erf(v / sqrt 2) cancels for v << 0: those few again in double.
  for (int64_t i = 0; i < n; ++i)
    if (x[i] < -3.0f) {
      double v = x[i];
      y[i] = static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
    }
}
HP_CLONES void geluTanh(const float *x, float *y, int64_t n) {
  HP_SIMD for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhOne(0.79788456080286536f * (v + 0.044715f * v * v * v)));
  }
}
HP_CLONES void softmaxRow(const float *x, float *y, int64_t n, bool log) {
  float mx = -__builtin_inff();
  HP_SIMD_MAX_MX for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  if (mx == -__builtin_inff() || mx != mx) { // all -inf, or NaN: the exact formula
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx;
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(y[i]);
    for (int64_t i = 0; i < n; ++i) y[i] = log ? y[i] - std::log(sum) : std::exp(y[i]) / sum;
    return;
  }
  float sum = 0;
  if (log) {
    HP_SIMD_SUM_SUM for (int64_t i = 0; i < n; ++i) sum += expOne(x[i] - mx);
    float ls = std::log(sum);
    HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx - ls;
    return;
  }
  HP_SIMD_SUM_SUM for (int64_t i = 0; i < n; ++i) {
    float e = expOne(x[i] - mx);
    y[i] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

HP_CLONES void layerNormRow(const float *x, float *y, int64_t n, const float *scale, const float *bias, float eps,
                            float *meanOut, float *invOut) {
  float sum = 0;
  HP_SIMD_SUM_SUM for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float var = 0;
  HP_SIMD_SUM_VAR for (int64_t i = 0; i < n; ++i) {
    float d = x[i] - mean;
    var += d * d;
  }
  var /= static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(var + eps);
  if (bias) {
    HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
  } else {
    HP_SIMD for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i];
  }
  *meanOut = mean;
  *invOut = inv;
}

} // namespace hetplan::runtime::cpu::fastmath

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
    for (int64_t i = 0; i < n; ++i) d[i] = doubleToHalf(static_cast<double>(s[i]));
    break;
  }
  case DType::BFloat16: {
    uint16_t *d = out.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = floatToBfloat16(static_cast<float>(s[i]));
    break;
  }
  default: throw std::runtime_error(std::string("cannot cast to ") + dtypeName(out.dtype()));
  }
}
} // namespace

namespace {
// float16 <-> float32 with the F16C instructions when the CPU has them
// (x86-64; checked once): exact up-cast, round-to-nearest-even down-cast,
// as halfToFloat/floatToHalf (NaN payloads aside).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) void halfToFloatF16c(const uint16_t *h, float *d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
  for (; i < n; ++i) d[i] = halfToFloat(h[i]);
}
__attribute__((target("avx,f16c"))) void floatToHalfF16c(const float *s, uint16_t *d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) d[i] = floatToHalf(s[i]);
}
bool haveF16c() {
#if defined(__clang__) && __clang_major__ < 15
  // (clang before 15 has no "f16c" for __builtin_cpu_supports: ask CPUID,
  // with the OS saving AVX state; the fuzz build uses Debian's clang 14)
  static const bool yes = [] {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX) && (c & bit_OSXSAVE);
  }();
#else
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif
  return yes;
}
#else
void halfToFloatF16c(const uint16_t *h, float *d, int64_t n) { for (int64_t i = 0; i < n; ++i) d[i] = halfToFloat(h[i]); }
void floatToHalfF16c(const float *s, uint16_t *d, int64_t n) { for (int64_t i = 0; i < n; ++i) d[i] = floatToHalf(s[i]); }
bool haveF16c() { return false; }
#endif
} // namespace

Tensor castTensor(const Tensor &t, DType to) {
  if (t.dtype() == to) return t;
  Tensor out(to, t.shape());
  if (t.dtype() == DType::Float16 || t.dtype() == DType::BFloat16) {
    const uint16_t *h = t.data<uint16_t>();
    int64_t n = t.numel();
    if (to == DType::Float32) { // the common up-cast: straight into the output
      float *d = out.data<float>();
      if (t.dtype() == DType::Float16 && haveF16c())
        parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) { halfToFloatF16c(h + lo, d + lo, hi - lo); });
      else if (t.dtype() == DType::Float16)
        parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) d[i] = halfToFloat(h[i]); });
      else
        parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) d[i] = bfloat16ToFloat(h[i]); });
      return out;
    }
    std::vector<float> tmp(n);
    for (int64_t i = 0; i < n; ++i) tmp[i] = t.dtype() == DType::Float16 ? halfToFloat(h[i]) : bfloat16ToFloat(h[i]);
    castFrom(tmp.data(), out);
    return out;
  }
  if (t.dtype() == DType::Float32 && (to == DType::Float16 || to == DType::BFloat16)) { // the common down-cast
    const float *s = t.data<float>();
    uint16_t *d = out.data<uint16_t>();
    if (to == DType::Float16 && haveF16c())
      parallelFor(t.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) { floatToHalfF16c(s + lo, d + lo, hi - lo); });
    else if (to == DType::Float16)
      parallelFor(t.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) d[i] = floatToHalf(s[i]); });
    else
      parallelFor(t.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) d[i] = floatToBfloat16(s[i]); });
    return out;
  }
  HP_DISPATCH_ALL(t.dtype(), castFrom(t.data<T>(), out));
  return out;
}

const std::vector<DType> kSignedAndFloat = {DType::Float32, DType::Float64, DType::Int8, DType::Int16,
                                            DType::Int32, DType::Int64};

namespace {

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
                          if (a.dtype() != b.dtype())
                            throw std::runtime_error(std::string("mixed element types ") + dtypeName(a.dtype()) + " and " + dtypeName(b.dtype()));
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
                            if (c.in(i).dtype() != acc.dtype())
                              throw std::runtime_error(std::string("mixed element types ") + dtypeName(acc.dtype()) + " and " +
                                                       dtypeName(c.in(i).dtype()));
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
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return 0; // INT_MIN % -1 traps on x86
    T r = static_cast<T>(x % y);
    if constexpr (std::is_signed_v<T>)
      if (!fmodMode && r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
    return r;
  }
}

/// Binary arithmetic with broadcasting.
void registerArithmeticKernels() {
  regArith("Add", [](auto x, auto y) { return wrapAdd(x, y); });
  regArith("Sub", [](auto x, auto y) { return wrapSub(x, y); });
  regArith("Mul", [](auto x, auto y) { return wrapMul(x, y); });
  regArith("Div", [](auto x, auto y) { return safeDiv(x, y); });
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
                           // x^2 (RMSNorm/T5 LayerNorm, variance): x * x is
                           // the same correctly rounded square as pow.
                           if ((a.dtype() == DType::Float32 || a.dtype() == DType::Float64) && b.numel() == 1 &&
                               b.rank() <= a.rank()) {
                             bool square = a.dtype() == DType::Float32 ? b.data<float>()[0] == 2.f : b.data<double>()[0] == 2.0;
                             if (square) {
                               HP_DISPATCH_FLOAT(a.dtype(), c.outputs[0] = binaryBroadcast<T, T, T>(a, b, a.dtype(), [](T x, T) { return x * x; }));
                               return;
                             }
                           }
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
}

/// Comparisons, logic and the float classifiers.
void registerLogicKernels() {
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
}

/// Where: a select with broadcasting, by bytes.
void registerWhereKernel() {
  registerKernel("Where", {[](KernelContext &c) {
                             const Tensor &cond = c.in(0), &x = c.in(1), &y = c.in(2);
                             auto shape = broadcastShapes(broadcastShapes(cond.shape(), x.shape()), y.shape());
                             Tensor out(x.dtype(), shape);
                             auto sc = broadcastStrides(cond.shape(), shape), sx = broadcastStrides(x.shape(), shape),
                                  sy = broadcastStrides(y.shape(), shape);
                             size_t es = dtypeSize(x.dtype());
                             int64_t r = shape.size(), n = out.numel();
                             // Fast path: every operand the full shape, one value, or out's
                             // trailing dims repeated (a mask); rows of the shortest repeat.
                             {
                               int64_t L = n, ks[3];
                               bool ok = n > 0 && (es == 1 || es == 2 || es == 4 || es == 8);
                               const Tensor *ops[3] = {&cond, &x, &y};
                               for (int k = 0; k < 3 && ok; ++k) {
                                 int64_t m = ops[k]->numel();
                                 ks[k] = m == 1 ? 0 : m == n && ops[k]->shape() == shape ? n : broadcastInner(ops[k]->shape(), shape);
                                 if (m != 1 && ks[k] <= 0) ok = false;
                                 else if (ks[k] > 0) L = std::min(L, ks[k]);
                               }
                               for (int k = 0; k < 3 && ok; ++k) ok = ks[k] == 0 || ks[k] % L == 0;
                               if (ok) {
                                 auto body = [&](auto tag) {
                                   using E = decltype(tag);
                                   const E *px = static_cast<const E *>(x.raw()), *py = static_cast<const E *>(y.raw());
                                   const bool *pc = cond.data<bool>();
                                   E *po = static_cast<E *>(out.raw());
                                   parallelFor(n / L, std::max<int64_t>(1, kElementwiseGrain / L), [&](int64_t lo, int64_t hi) {
                                     for (int64_t row = lo; row < hi; ++row) {
                                       int64_t o = row * L;
                                       const bool *c0 = pc + (ks[0] ? o % ks[0] : 0);
                                       const E *x0 = px + (ks[1] ? o % ks[1] : 0), *y0 = py + (ks[2] ? o % ks[2] : 0);
                                       int64_t ic = ks[0] ? 1 : 0, ix = ks[1] ? 1 : 0, iy = ks[2] ? 1 : 0;
                                       E *d = po + o;
                                       // Unit or zero steps as constants, both values loaded: the
                                       // compiler vectorises the select.
                                       auto loop = [c0, x0, y0, d, L](auto IC, auto IX, auto IY) {
                                         const bool *__restrict cc = c0;
                                         const E *__restrict xx = x0, *__restrict yy = y0;
                                         E *__restrict dd = d;
                                         for (int64_t j = 0; j < L; ++j) {
                                           E xv = xx[IX ? j : 0], yv = yy[IY ? j : 0];
                                           E m = static_cast<E>(E(0) - static_cast<E>(cc[IC ? j : 0]));
                                           dd[j] = static_cast<E>((xv & m) | (yv & static_cast<E>(~m)));
                                         }
                                       };
                                       using B1 = std::true_type; using B0 = std::false_type;
                                       switch (ic * 4 + ix * 2 + iy) {
                                       case 7: loop(B1(), B1(), B1()); break;
                                       case 6: loop(B1(), B1(), B0()); break;
                                       case 5: loop(B1(), B0(), B1()); break;
                                       case 4: loop(B1(), B0(), B0()); break;
                                       case 3: loop(B0(), B1(), B1()); break;
                                       case 2: loop(B0(), B1(), B0()); break;
                                       case 1: loop(B0(), B0(), B1()); break;
                                       default: loop(B0(), B0(), B0()); break;
                                       }
                                     }
                                   });
                                 };
                                 if (es == 1) body(uint8_t()); else if (es == 2) body(uint16_t());
                                 else if (es == 4) body(uint32_t()); else body(uint64_t());
                                 c.outputs[0] = std::move(out);
                                 return;
                               }
                             }
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
}

/// Max, Min, Sum, Mean over any number of inputs, and Clip.
void registerVariadicKernels() {
  regVariadic("Max", [](auto x, auto y) { return x > y ? x : y; });
  regVariadic("Min", [](auto x, auto y) { return x < y ? x : y; });
  regVariadic("Sum", [](auto x, auto y) { return wrapAdd(x, y); });
  regVariadic("Mean", [](auto x, auto y) { return x + y; }, true);
  registerKernel("Clip", {[](KernelContext &c) {
                            const Tensor &x = c.in(0);
                            Tensor out(x.dtype(), x.shape());
                            HP_DISPATCH_NUMERIC(x.dtype(), {
                              T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
                              if (c.opset < 11) {
                                // Float attributes: saturated into T's range (a cast of an
                                // out-of-range float to an integer is undefined).
                                auto bound = [](float v, T otherwise) -> T {
                                  if (std::isnan(v)) return otherwise;
                                  if constexpr (std::is_integral_v<T>) {
                                    if (v <= static_cast<float>(std::numeric_limits<T>::lowest()))
                                      return std::numeric_limits<T>::lowest();
                                    if (v >= static_cast<float>(std::numeric_limits<T>::max()))
                                      return std::numeric_limits<T>::max();
                                  }
                                  return static_cast<T>(v);
                                };
                                lo = bound(c.node.getFloat("min", -std::numeric_limits<float>::max()), lo);
                                hi = bound(c.node.getFloat("max", std::numeric_limits<float>::max()), hi);
                              } else {
                                // min and max: scalars of the input's type (what is read below).
                                for (size_t k : {size_t(1), size_t(2)})
                                  if (c.hasInput(k) && (c.in(k).dtype() != x.dtype() || c.in(k).numel() != 1))
                                    throw std::runtime_error(std::string("Clip ") + (k == 1 ? "min " : "max ") +
                                                             c.in(k).describe() + " is not one " +
                                                             dtypeName(x.dtype()) + " value");
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
}

/// Casts and the identities (Identity, Dropout at inference).
void registerCastKernels() {
  registerKernel("Cast", {[](KernelContext &c) { c.outputs[0] = castTensor(c.in(0), static_cast<DType>(c.node.getInt("to", 0))); },
                          [](const CheckContext &c) -> std::string {
                            DType to = static_cast<DType>(c.node.getInt("to", 0));
                            DType from = c.in(0);
                            auto ok = [](DType t) { return t == DType::Bool || isFloatType(t) || isIntegerType(t); };
                            if (!ok(to)) return "Cast to " + typeLabel(to) + " is not supported";
                            if (from != DType::Undefined && !ok(from)) return "Cast from " + typeLabel(from) + " is not supported";
                            return "";
                          },
                          {}, HalfPolicy::Native});
  // CastLike (opset 15): Cast to the element type of input 1.
  registerKernel("CastLike", {[](KernelContext &c) { c.outputs[0] = castTensor(c.in(0), c.in(1).dtype()); },
                              [](const CheckContext &c) -> std::string {
                                auto ok = [](DType t) { return t == DType::Undefined || t == DType::Bool || isFloatType(t) || isIntegerType(t); };
                                if (!ok(c.in(0))) return "CastLike from " + typeLabel(c.in(0)) + " is not supported";
                                if (!ok(c.in(1))) return "CastLike to " + typeLabel(c.in(1)) + " is not supported";
                                return "";
                              },
                              {}, HalfPolicy::Native});
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

} // namespace

void registerElementwiseKernels() {
  // Steps of fused elementwise chains (ElementwiseChain.h): the same math.
  for (auto [op, step] : {std::pair<const char *, EwStep::Op>{"Add", EwStep::add}, {"Sub", EwStep::sub},
                          {"Mul", EwStep::mul}, {"Div", EwStep::div}, {"Max", EwStep::max}, {"Min", EwStep::min},
                          {"Pow", EwStep::square}, {"Clip", EwStep::clip}})
    registerElementwiseStep(op, {step});
  registerUnaryKernels();
  registerArithmeticKernels();
  registerLogicKernels();
  registerWhereKernel();
  registerVariadicKernels();
  registerCastKernels();
}

} // namespace hetplan::runtime::cpu
