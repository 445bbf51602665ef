//===- Numerics.cpp - Det, DFT, MeanVarianceNormalization -----------------===//
//
// Det: LU factorization with partial pivoting per matrix, in double.
// DFT (opset 17: axis attribute; opset 20+: axis input, default -2): a
// direct O(n * k) transform per line (k output frequencies) over a double
// twiddle table, not an FFT: enough for conformance and short signals, slow
// for long ones. Real (last dim 1) or complex (last dim 2) input, dft_length
// (zero-pad or truncate), onesided (the first n/2 + 1 frequencies), inverse
// (conjugate twiddles, scaled by 1/n). Inverse with onesided (an inverse
// real FFT) is refused at load.
// MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes`
// (default 0, 2, 3), statistics in double, as ONNX's function body.
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"

#include <cmath>
#include <set>

namespace hetplan::runtime::cpu {
namespace {

void det(KernelContext &c) {
  const Tensor &x = c.in(0);
  if (x.rank() < 2 || x.dim(-1) != x.dim(-2))
    throw std::runtime_error("Det needs square matrices in the last two dims, got " + shapeString(x.shape()));
  std::vector<int64_t> batch(x.shape().begin(), x.shape().end() - 2);
  int64_t M = x.dim(-1), B = shapeNumel(batch);
  Tensor out(x.dtype(), batch);
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>();
    T *po = out.data<T>();
    std::vector<double> a(static_cast<size_t>(M * M));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < M * M; ++i) a[i] = px[b * M * M + i];
      double d = 1;
      for (int64_t col = 0; col < M && d != 0; ++col) {
        int64_t piv = col;
        for (int64_t r = col + 1; r < M; ++r)
          if (std::fabs(a[r * M + col]) > std::fabs(a[piv * M + col])) piv = r;
        if (a[piv * M + col] == 0) { d = 0; break; }
        if (piv != col) {
          for (int64_t j = 0; j < M; ++j) std::swap(a[piv * M + j], a[col * M + j]);
          d = -d;
        }
        double p = a[col * M + col];
        d *= p;
        for (int64_t r = col + 1; r < M; ++r) {
          double f = a[r * M + col] / p;
          if (f == 0) continue;
          for (int64_t j = col; j < M; ++j) a[r * M + j] -= f * a[col * M + j];
        }
      }
      po[b] = static_cast<T>(d);
    }
  });
  c.outputs[0] = std::move(out);
}

int64_t dftAxis(const KernelContext &c, int64_t rank) {
  int64_t axis = c.opset >= 20 ? (c.hasInput(2) ? c.in(2).toInt64Vector().at(0) : -2) : c.node.getInt("axis", 1);
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank - 1)
    throw std::runtime_error("DFT axis " + std::to_string(axis) + " is not a signal dim of a rank-" + std::to_string(rank) + " input");
  return a;
}

void dft(KernelContext &c) {
  const Tensor &x = c.in(0);
  const int64_t R = x.rank();
  if (R < 2 || (x.dim(-1) != 1 && x.dim(-1) != 2))
    throw std::runtime_error("DFT input must end in a dim of 1 (real) or 2 (complex), got " + shapeString(x.shape()));
  const int64_t axis = dftAxis(c, R), cin = x.dim(-1);
  const bool inverse = c.node.getInt("inverse", 0) != 0, onesided = c.node.getInt("onesided", 0) != 0;
  const int64_t L = x.dim(axis);
  int64_t n = L;
  if (c.hasInput(1) && c.in(1).numel() > 0) n = c.in(1).toInt64Vector().at(0);
  if (n < 1) throw std::runtime_error("DFT dft_length must be >= 1, got " + std::to_string(n));
  const int64_t K = onesided ? n / 2 + 1 : n, used = std::min(L, n);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < R - 1; ++d) inner *= x.dim(d);
  std::vector<int64_t> outShape = x.shape();
  outShape[axis] = K;
  outShape.back() = 2;
  Tensor out(x.dtype(), outShape);
  // Twiddles e^{-+2 pi i m / n}, m = (j * k) mod n.
  std::vector<double> cs(n), sn(n);
  const double sign = inverse ? 1.0 : -1.0, pi = 3.14159265358979323846;
  for (int64_t m = 0; m < n; ++m) {
    double ang = 2 * pi * double(m) / double(n);
    cs[m] = std::cos(ang), sn[m] = sign * std::sin(ang);
  }
  const double scale = inverse ? 1.0 / double(n) : 1.0;
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>();
    T *po = out.data<T>();
    parallelFor(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, used * K)), [&](int64_t lo, int64_t hi) {
      std::vector<double> re(used), im(used);
      for (int64_t line = lo; line < hi; ++line) {
        int64_t o = line / inner, i = line % inner;
        for (int64_t j = 0; j < used; ++j) {
          const T *e = px + ((o * L + j) * inner + i) * cin;
          re[j] = e[0], im[j] = cin == 2 ? double(e[1]) : 0.0;
        }
        for (int64_t k = 0; k < K; ++k) {
          double sr = 0, si = 0;
          int64_t m = 0, step = k % n;
          for (int64_t j = 0; j < used; ++j) {
            sr += re[j] * cs[m] - im[j] * sn[m];
            si += re[j] * sn[m] + im[j] * cs[m];
            m += step;
            if (m >= n) m -= n;
          }
          T *dst = po + ((o * K + k) * inner + i) * 2;
          dst[0] = static_cast<T>(sr * scale), dst[1] = static_cast<T>(si * scale);
        }
      }
    });
  });
  c.outputs[0] = std::move(out);
}

std::string dftCheck(const CheckContext &c) {
  if (c.node.getInt("inverse", 0) && c.node.getInt("onesided", 0))
    return "DFT inverse with onesided=1 (inverse real DFT) is not supported";
  if (c.node.inputs.size() > 1 && !c.node.inputs[1].empty())
    if (DType t = c.in(1); t != DType::Undefined && !isIntegerType(t))
      return std::string("DFT dft_length of element type ") + typeLabel(t) + " is not supported";
  return "";
}

void meanVarianceNorm(KernelContext &c) {
  const Tensor &x = c.in(0);
  const int64_t R = x.rank();
  std::set<int64_t> axes;
  for (int64_t a : c.node.getInts("axes", {0, 2, 3})) {
    int64_t n = normAxis(a, R);
    if (n < 0 || n >= R)
      throw std::runtime_error("MeanVarianceNormalization: axis " + std::to_string(a) + " is out of range for " +
                               x.describe());
    axes.insert(n);
  }
  // An empty input: an empty output (its other dims may be huge; nothing
  // below may size a table by them).
  if (x.numel() == 0) {
    c.outputs[0] = Tensor(x.dtype(), x.shape());
    return;
  }
  // Offsets of the reduced positions within a group and of the groups.
  std::vector<int64_t> st(R, 1);
  for (int64_t d = R - 1; d > 0; --d) st[d - 1] = st[d] * x.dim(d);
  std::vector<int64_t> red{0}, keep{0};
  for (int64_t d = 0; d < R; ++d) {
    auto &v = axes.count(d) ? red : keep;
    std::vector<int64_t> next;
    next.reserve(v.size() * x.dim(d));
    for (int64_t b : v)
      for (int64_t i = 0; i < x.dim(d); ++i) next.push_back(b + i * st[d]);
    v.swap(next);
  }
  Tensor out(x.dtype(), x.shape());
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>();
    T *po = out.data<T>();
    const double cnt = double(red.size());
    parallelFor(static_cast<int64_t>(keep.size()), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t g = lo; g < hi; ++g) {
        const T *s = px + keep[g];
        double mean = 0, var = 0;
        for (int64_t o : red) mean += s[o];
        mean = cnt > 0 ? mean / cnt : 0;
        for (int64_t o : red) var += (s[o] - mean) * (s[o] - mean);
        var = cnt > 0 ? var / cnt : 0;
        double den = std::sqrt(var) + 1e-9;
        for (int64_t o : red) po[keep[g] + o] = static_cast<T>((s[o] - mean) / den);
      }
    });
  });
  c.outputs[0] = std::move(out);
}

} // namespace

void registerNumericsKernels() {
  registerKernel("Det", {det, nullptr, kFloatTypes, HalfPolicy::Upcast});
  registerKernel("DFT", {dft, dftCheck, kFloatTypes, HalfPolicy::Upcast});
  registerKernel("MeanVarianceNormalization", {meanVarianceNorm, nullptr, kFloatTypes, HalfPolicy::Upcast});
}

} // namespace hetplan::runtime::cpu
