//===- KernelUtil.h - helpers shared by the CPU kernels ---------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace hetplan::runtime::cpu {

#define HP_CASE(DTE, TY, ...) case DType::DTE: { using T = TY; __VA_ARGS__; } break;
#define HP_NUMERIC_CASES(...)                                                           \
  HP_CASE(Float32, float, __VA_ARGS__) HP_CASE(Float64, double, __VA_ARGS__)            \
  HP_CASE(Int8, int8_t, __VA_ARGS__) HP_CASE(UInt8, uint8_t, __VA_ARGS__)               \
  HP_CASE(Int16, int16_t, __VA_ARGS__) HP_CASE(UInt16, uint16_t, __VA_ARGS__)           \
  HP_CASE(Int32, int32_t, __VA_ARGS__) HP_CASE(UInt32, uint32_t, __VA_ARGS__)           \
  HP_CASE(Int64, int64_t, __VA_ARGS__) HP_CASE(UInt64, uint64_t, __VA_ARGS__)
#define HP_DISPATCH_NUMERIC(DT, ...)                                                    \
  switch (DT) {                                                                         \
    HP_NUMERIC_CASES(__VA_ARGS__)                                                       \
  default: throw std::runtime_error(std::string("unsupported element type ") + dtypeName(DT)); \
  }
#define HP_DISPATCH_ALL(DT, ...)                                                        \
  switch (DT) {                                                                         \
    HP_NUMERIC_CASES(__VA_ARGS__)                                                       \
    HP_CASE(Bool, bool, __VA_ARGS__)                                                    \
  default: throw std::runtime_error(std::string("unsupported element type ") + dtypeName(DT)); \
  }
#define HP_DISPATCH_FLOAT(DT, ...)                                                      \
  switch (DT) {                                                                         \
    HP_CASE(Float32, float, __VA_ARGS__) HP_CASE(Float64, double, __VA_ARGS__)          \
  default: throw std::runtime_error(std::string("unsupported element type ") + dtypeName(DT)); \
  }

/// The calling thread's kernel threads when > 0 (Session's threads option
/// sets it around its runs, SessionOptions::threads); 0: kernelThreads()'s default.
inline int &kernelThreadsOverride() {
  thread_local int n = 0;
  return n;
}

/// Threads a kernel may use: the calling thread's kernelThreadsOverride()
/// when set, else OMP_NUM_THREADS when set (> 0), else the hardware
/// concurrency (read once).
inline int kernelThreads() {
  if (int o = kernelThreadsOverride(); o > 0) return o;
  static const int n = [] {
    if (const char *e = std::getenv("OMP_NUM_THREADS")) {
      int v = std::atoi(e);
      if (v > 0) return v;
    }
    unsigned h = std::thread::hardware_concurrency();
    return h ? static_cast<int>(h) : 1;
  }();
  return n;
}

/// Calls f(begin, end) over [0, n) split into contiguous chunks of at least
/// `grain` items, one per thread (the caller runs the first chunk). Each
/// index is visited exactly once, so results do not depend on the split.
/// With OpenMP (HETPLAN_HAVE_OPENMP, built with oneDNN) the chunks run on the
/// calling thread's OpenMP team, the same threads oneDNN's GEMM/Conv use (no
/// thread start per call, no idle oneDNN threads spinning against kernel
/// threads); without it, plain std::threads started per call: use only for
/// work that dwarfs a thread start (tens of microseconds). Never around a
/// GEMM call (the GEMM library has its own threads).
template <typename F>
void parallelFor(int64_t n, int64_t grain, F f) {
  int64_t chunks = std::min<int64_t>(kernelThreads(), grain > 0 ? n / grain : n);
  if (chunks <= 1) {
    if (n > 0) f(int64_t(0), n);
    return;
  }
  std::vector<std::exception_ptr> errors(chunks);
  auto bound = [&](int64_t c) { return n * c / chunks; };
#ifdef HETPLAN_HAVE_OPENMP
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    try { f(bound(c), bound(c + 1)); } catch (...) { errors[c] = std::current_exception(); }
  }
#else
  std::vector<std::thread> threads;
  for (int64_t c = 1; c < chunks; ++c)
    threads.emplace_back([&, c] {
      try { f(bound(c), bound(c + 1)); } catch (...) { errors[c] = std::current_exception(); }
    });
  try { f(int64_t(0), bound(1)); } catch (...) { errors[0] = std::current_exception(); }
  for (auto &t : threads) t.join();
#endif
  for (auto &e : errors)
    if (e) std::rethrow_exception(e);
}

/// Elements per thread below which elementwise kernels stay on one thread
/// (smaller on an OpenMP team, which starts no thread per call).
#ifdef HETPLAN_HAVE_OPENMP
constexpr int64_t kElementwiseGrain = 1 << 14;
#else
constexpr int64_t kElementwiseGrain = 1 << 16;
#endif

/// Visits every element of `outShape` with the offsets of two broadcast inputs.
template <typename F>
void forEachBroadcast2(const std::vector<int64_t> &outShape, const std::vector<int64_t> &sa,
                       const std::vector<int64_t> &sb, F f) {
  int64_t n = shapeNumel(outShape), r = static_cast<int64_t>(outShape.size());
  std::vector<int64_t> idx(r, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, oa, ob);
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < outShape[d]) { oa += sa[d]; ob += sb[d]; break; }
      oa -= sa[d] * (outShape[d] - 1); ob -= sb[d] * (outShape[d] - 1); idx[d] = 0;
    }
  }
}

/// When `s` broadcast to `out` is out's trailing dims repeated (s, leading
/// 1s aside, equals out's last dims): the element count of s (> 0); else 0.
inline int64_t broadcastInner(const std::vector<int64_t> &s, const std::vector<int64_t> &out) {
  size_t i = 0;
  while (i < s.size() && s[i] == 1) ++i;
  size_t k = s.size() - i;
  if (k > out.size() || !std::equal(s.begin() + i, s.end(), out.end() - k)) return 0;
  int64_t n = 1;
  for (size_t j = i; j < s.size(); ++j) n *= s[j];
  return n > 0 ? n : 0;
}

/// When `s` broadcast to `out` is one value per row (s right-aligned equals
/// out's leading dims followed by 1s, at least one of them broadcast): the
/// row length (> 1); else 0.
inline int64_t broadcastRowInner(const std::vector<int64_t> &s, const std::vector<int64_t> &out) {
  if (s.size() > out.size()) return 0;
  size_t pad = out.size() - s.size(), k = out.size();
  auto dimOf = [&](size_t d) { return d < pad ? int64_t(1) : s[d - pad]; };
  while (k > 0 && dimOf(k - 1) == 1) --k; // trailing 1s of s
  int64_t inner = 1;
  for (size_t d = k; d < out.size(); ++d) inner *= out[d];
  for (size_t d = 0; d < k; ++d)
    if (dimOf(d) != out[d]) return 0;
  return inner > 1 ? inner : 0;
}

/// The trailing run of a broadcast two operands share: the last dims over
/// which each operand is either contiguous (it has them all) or one value
/// (it broadcasts them all). `inner` elements of the output per row; `aOne`/
/// `bOne` say which operand is one value per row. inner = 1 when no such
/// run exists (the last dim mixes kinds), `outer` the leading dims left.
struct BroadcastRun {
  int64_t inner = 1;
  size_t outerDims = 0;  // out dims [0, outerDims) index the rows
  bool aOne = false, bOne = false;
};
inline BroadcastRun broadcastRun(const std::vector<int64_t> &shape, const std::vector<int64_t> &sa,
                                 const std::vector<int64_t> &sb) {
  BroadcastRun run;
  size_t d = shape.size();
  int kindA = -1, kindB = -1;  // 0: broadcast (stride 0), 1: contiguous
  while (d > 0) {
    size_t k = d - 1;
    if (shape[k] == 1) { --d; continue; }
    int ka = sa[k] == 0 ? 0 : sa[k] == run.inner ? 1 : 2;
    int kb = sb[k] == 0 ? 0 : sb[k] == run.inner ? 1 : 2;
    if (ka == 2 || kb == 2 || (kindA >= 0 && (ka != kindA || kb != kindB)))
      break;
    kindA = ka, kindB = kb;
    run.inner *= shape[k];
    --d;
  }
  run.outerDims = d;
  run.aOne = kindA == 0;
  run.bOne = kindB == 0;
  return run;
}

/// out = f(a, b) over a broadcast no simpler path covers (a per-channel
/// [C,1,1] against [N,C,H,W]): rows of the shared trailing run in
/// parallel, each row's operand offsets stepped like an odometer.
template <typename A, typename B, typename O, typename F>
void broadcastRows(const std::vector<int64_t> &shape, const std::vector<int64_t> &sa,
                   const std::vector<int64_t> &sb, const BroadcastRun &run, const A *pa,
                   const B *pb, O *po, F f) {
  int64_t inner = run.inner, rows = shapeNumel(shape) / inner;
  size_t od = run.outerDims;
  parallelFor(rows, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
    // The offsets of row `lo`, then stepped one row at a time.
    std::vector<int64_t> idx(od, 0);
    int64_t oa = 0, ob = 0, rest = lo;
    for (size_t d = od; d-- > 0;) {
      idx[d] = rest % shape[d];
      rest /= shape[d];
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    for (int64_t r = lo; r < hi; ++r) {
      O *o = po + r * inner;
      if (run.aOne && run.bOne) {
        O v = f(pa[oa], pb[ob]);
        for (int64_t j = 0; j < inner; ++j) o[j] = v;
      } else if (run.aOne) {
        A va = pa[oa];
        const B *b = pb + ob;
        for (int64_t j = 0; j < inner; ++j) o[j] = f(va, b[j]);
      } else if (run.bOne) {
        B vb = pb[ob];
        const A *a = pa + oa;
        for (int64_t j = 0; j < inner; ++j) o[j] = f(a[j], vb);
      } else {
        const A *a = pa + oa;
        const B *b = pb + ob;
        for (int64_t j = 0; j < inner; ++j) o[j] = f(a[j], b[j]);
      }
      for (size_t d = od; d-- > 0;) {
        if (++idx[d] < shape[d]) { oa += sa[d]; ob += sb[d]; break; }
        oa -= sa[d] * (shape[d] - 1); ob -= sb[d] * (shape[d] - 1); idx[d] = 0;
      }
    }
  });
}

/// out = f(a, b) with numpy broadcasting; A, B input element types, O output.
template <typename A, typename B, typename O, typename F>
Tensor binaryBroadcast(const Tensor &a, const Tensor &b, DType outType, F f) {
  // The operands' bytes are read as A and B: their element sizes must be
  // those (a model can give any types; only the kernel knows which it takes).
  if (dtypeSize(a.dtype()) != sizeof(A) || dtypeSize(b.dtype()) != sizeof(B))
    throw std::runtime_error("operands " + a.describe() + " and " + b.describe() +
                             " do not have the element types the op needs");
  auto shape = broadcastShapes(a.shape(), b.shape());
  Tensor out(outType, shape);
  const A *pa = a.data<A>(); const B *pb = b.data<B>(); O *po = out.data<O>();
  int64_t n = out.numel();
  if (a.shape() == b.shape()) {
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pa[i], pb[i]);
    });
  } else if (b.numel() == 1) {
    B vb = pb[0];
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pa[i], vb);
    });
  } else if (a.numel() == 1) {
    A va = pa[0];
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(va, pb[i]);
    });
  } else if (int64_t inner = 0; a.shape() == shape && (inner = broadcastInner(b.shape(), shape)) > 0) {
    // b repeats along the leading dims (a bias) or is one value per row
    // (a row statistic, inner < 0 below): rows in parallel.
    parallelFor(n / inner, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        for (int64_t j = 0; j < inner; ++j) po[r * inner + j] = f(pa[r * inner + j], pb[j]);
    });
  } else if (b.shape() == shape && (inner = broadcastInner(a.shape(), shape)) > 0) {
    parallelFor(n / inner, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        for (int64_t j = 0; j < inner; ++j) po[r * inner + j] = f(pa[j], pb[r * inner + j]);
    });
  } else if (a.shape() == shape && (inner = broadcastRowInner(b.shape(), shape)) > 0) {
    parallelFor(n / inner, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        B vb = pb[r];
        for (int64_t j = 0; j < inner; ++j) po[r * inner + j] = f(pa[r * inner + j], vb);
      }
    });
  } else if (b.shape() == shape && (inner = broadcastRowInner(a.shape(), shape)) > 0) {
    parallelFor(n / inner, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        A va = pa[r];
        for (int64_t j = 0; j < inner; ++j) po[r * inner + j] = f(va, pb[r * inner + j]);
      }
    });
  } else if (auto sa = broadcastStrides(a.shape(), shape), sb = broadcastStrides(b.shape(), shape);
             n > 0) {
    BroadcastRun run = broadcastRun(shape, sa, sb);
    if (run.inner >= 4)
      broadcastRows(shape, sa, sb, run, pa, pb, po, f);
    else
      forEachBroadcast2(shape, sa, sb, [&](int64_t i, int64_t oa, int64_t ob) { po[i] = f(pa[oa], pb[ob]); });
  }
  return out;
}

/// Integer arithmetic that wraps (two's complement, as numpy and ONNX's
/// reference do) instead of overflowing, which is undefined in C++; floats
/// as usual. Integer division by zero gives 0 (numpy's result) and
/// INT_MIN / -1 wraps, where the CPU would trap.
template <typename T> T wrapAdd(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(W(U(x)) + W(U(y))));
  } else return static_cast<T>(x + y);
}
template <typename T> T wrapSub(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(W(U(x)) - W(U(y))));
  } else return static_cast<T>(x - y);
}
template <typename T> T wrapMul(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(W(U(x)) * W(U(y))));
  } else return static_cast<T>(x * y);
}
template <typename T> T safeDiv(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<T>)
      if (y == -1) return wrapSub<T>(0, x);
    return static_cast<T>(x / y);
  } else return static_cast<T>(x / y);
}

inline int64_t normAxis(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  // Strictly inside the rank: callers index per-dim arrays with the result
  // (a rank-0 tensor has no axis; callers that treat a scalar as rank 1
  // pass max(rank, 1)).
  if (a < 0 || a >= rank)
    throw std::runtime_error("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

/// dtypeName, or the ONNX name of a type the runtime has no DType for
/// (float8, int4, complex...), for load-time messages.
inline std::string typeLabel(DType t) {
  static const char *kOnnx[] = {"", "", "", "", "", "", "", "", "string", "", "", "", "", "", "complex64", "complex128",
                                "", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4",
                                "float4e2m1", "float8e8m0", "uint2", "int2"};
  std::string n = dtypeName(t);
  if (n != "undefined") return n;
  int v = static_cast<int>(t);
  if (v > 0 && v < static_cast<int>(sizeof(kOnnx) / sizeof(kOnnx[0])) && kOnnx[v][0]) return kOnnx[v];
  return "ONNX type " + std::to_string(v);
}

/// Row-major element strides of `shape`.
inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

/// Converts any numeric tensor to another element type (Cast semantics).
Tensor castTensor(const Tensor &t, DType to);

} // namespace hetplan::runtime::cpu
