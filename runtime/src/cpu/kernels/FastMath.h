//===- FastMath.h - vectorised float32 transcendental loops -----*- C++ -*-===//
//
// Branch-free float polynomial/rational approximations the compiler
// vectorises (defined in Elementwise.cpp, compiled as target clones for
// AVX-512F, AVX2 and baseline x86-64 where the compiler supports it).
// Accuracy against libm on float32: exp ~1-2 ulp; tanh/erf a few ulp
// (absolute error < 1e-6); results that would be subnormal are flushed to 0.
// y may alias x (not for geluErf).
#pragma once

#include <cstdint>

// Loops compiled as target clones (AVX-512F, AVX2, baseline) and vectorised.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__ELF__) && !defined(__SANITIZE_ADDRESS__)
#define HP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HP_CLONES
#endif
#if defined(__GNUC__)
#define HP_INLINE inline __attribute__((always_inline))
#else
#define HP_INLINE inline
#endif
#ifdef _OPENMP
#define HP_SIMD _Pragma("omp simd")
#define HP_SIMD_MAX_MX _Pragma("omp simd reduction(max : mx)")
#define HP_SIMD_SUM_SUM _Pragma("omp simd reduction(+ : sum)")
#define HP_SIMD_SUM_VAR _Pragma("omp simd reduction(+ : var)")
#else
#define HP_SIMD
#define HP_SIMD_MAX_MX
#define HP_SIMD_SUM_SUM
#define HP_SIMD_SUM_VAR
#endif

namespace hetplan::runtime::cpu::fastmath {

void exp(const float *x, float *y, int64_t n);
void erf(const float *x, float *y, int64_t n);
void tanh(const float *x, float *y, int64_t n);
void sigmoid(const float *x, float *y, int64_t n);
/// 0.5 x (1 + erf(x / sqrt 2)); elements below -3 in double (precision of 1 + erf).
void geluErf(const float *x, float *y, int64_t n);
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void geluTanh(const float *x, float *y, int64_t n);
/// One softmax row: y = exp(x - max) / sum (log: x - max - log(sum)).
void softmaxRow(const float *x, float *y, int64_t n, bool log);
/// One LayerNormalization row in float: mean, then variance around it (two
/// passes over x), then y = (x - mean) * inv * scale (+ bias; bias may be
/// null), inv = 1 / sqrt(var + eps). Writes the statistics to *mean, *inv.
void layerNormRow(const float *x, float *y, int64_t n, const float *scale, const float *bias, float eps,
                  float *mean, float *inv);

} // namespace hetplan::runtime::cpu::fastmath
