//===- Resize.cpp - Resize and Upsample -----------------------------------===//
//
// Registered by registerTensorKernels (TensorOps.cpp), at the place these
// kernels always had in its list.
//
//===----------------------------------------------------------------------===//
#include "FastMath.h"
#include "KernelUtil.h"
#include "ViewParams.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

namespace hetplan::runtime::cpu {
namespace {

/// floor(length * scale) for a finite, positive scale (else a one-line error).
int64_t resizedLength(int64_t length, double scale, int64_t axis) {
  double v = std::floor(double(length) * scale);
  if (!(scale > 0) || !std::isfinite(scale) || !(v < 9.0e15))
    throw std::runtime_error("Resize scale " + std::to_string(scale) + " for axis " + std::to_string(axis) +
                             " must be finite and positive");
  return static_cast<int64_t>(v);
}

/// A Resize's output shape and how its output coordinates map to the
/// input's (the coordinate transformation as ONNX defines it, in double).
struct ResizeGeometry {
  int64_t r = 0;
  std::string mode, ctm, nearestMode;
  std::vector<double> scales, outLen, roi;
  std::vector<int64_t> outShape;
  bool crop = false;
  /// The input coordinate of output index `o` of dim `d` of `x`.
  double src(const Tensor &x, int64_t d, int64_t o) const {
  double s = scales[d], L = outLen[d], in = double(x.dim(d));
  if (ctm == "asymmetric") return o / s;
  if (ctm == "tf_half_pixel_for_nn") return (o + 0.5) / s;
  if (ctm == "align_corners") return L == 1 ? 0.0 : o * (in - 1) / (L - 1);
  if (ctm == "pytorch_half_pixel") return L == 1 ? -0.5 : (o + 0.5) / s - 0.5;
  if (crop) {
    double a = roi[d], b = roi[r + d];
    return (L == 1 ? (b - a) * (in - 1) / 2 : o * (b - a) * (in - 1) / (L - 1)) + a * (in - 1);
  }
  return (o + 0.5) / s - 0.5; // half_pixel
  }
};

/// The attributes and inputs of Resize/Upsample `c`, checked.
ResizeGeometry resizeGeometry(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank();
  std::string mode = c.node.getString("mode", "nearest");
  std::string ctm = c.node.getString("coordinate_transformation_mode", "half_pixel");
  std::string nearestMode = c.node.getString("nearest_mode", "round_prefer_floor");
  std::vector<double> scales(r, 1.0);
  std::vector<int64_t> outShape = x.shape();
  bool upsample = c.node.opType == "Upsample", sizesGiven = false;
  if (upsample) {
    ctm = "asymmetric"; nearestMode = "floor";
    std::vector<float> s = c.opset < 9 ? c.node.getFloats("scales") : std::vector<float>{};
    if (c.opset >= 9) { Tensor st = castTensor(c.in(1), DType::Float32); s.assign(st.data<float>(), st.data<float>() + st.numel()); }
    if (static_cast<int64_t>(s.size()) != r)
      throw std::runtime_error("Upsample has " + std::to_string(s.size()) + " scales for " + x.describe());
    for (int64_t i = 0; i < r; ++i) { scales[i] = s[i]; outShape[i] = resizedLength(x.dim(i), s[i], i); }
  } else {
    size_t scalesIdx = c.opset >= 11 ? 2 : 1, sizesIdx = 3;
    if (c.hasInput(sizesIdx) && c.in(sizesIdx).numel() > 0) {
      sizesGiven = true;
      auto sz = c.in(sizesIdx).toInt64Vector();
      if (static_cast<int64_t>(sz.size()) != r)
        throw std::runtime_error("Resize has " + std::to_string(sz.size()) + " sizes for " + x.describe());
      for (int64_t i = 0; i < r; ++i) { outShape[i] = sz[i]; scales[i] = double(sz[i]) / x.dim(i); }
    } else if (c.hasInput(scalesIdx) && c.in(scalesIdx).numel() > 0) {
      Tensor st = castTensor(c.in(scalesIdx), DType::Float32);
      if (st.numel() != r) throw std::runtime_error("Resize has " + std::to_string(st.numel()) + " scales for " + x.describe());
      for (int64_t i = 0; i < r; ++i) { scales[i] = st.data<float>()[i]; outShape[i] = resizedLength(x.dim(i), scales[i], i); }
    }
  }
  // Scales finite and positive, sizes representable, and no output index
  // that would read an empty input dim.
  for (int64_t d = 0; d < r; ++d) {
    if (!sizesGiven && (!(scales[d] > 0) || !std::isfinite(scales[d]) || double(x.dim(d)) * scales[d] > 9.0e15))
      throw std::runtime_error("Resize scale " + std::to_string(scales[d]) + " for axis " + std::to_string(d) +
                               " must be finite and positive");
    if (outShape[d] < 0 || (outShape[d] > 0 && x.dim(d) == 0))
      throw std::runtime_error("Resize cannot make axis " + std::to_string(d) + " of " + x.describe() + " " +
                               std::to_string(outShape[d]) + " long");
  }
  if (mode == "linear" && ctm == "half_pixel" && c.opset < 11 && !upsample) ctm = "asymmetric";
  // The resized length as ONNX's reference defines it: scale * length, not
  // necessarily an integer (it matters to align_corners, pytorch_half_pixel
  // and tf_crop_and_resize); the given size when sizes are given.
  std::vector<double> outLen(r);
  for (int64_t d = 0; d < r; ++d) outLen[d] = sizesGiven ? double(outShape[d]) : scales[d] * double(x.dim(d));
  const bool crop = ctm == "tf_crop_and_resize";
  std::vector<double> roi;
  if (crop) {
    if (c.hasInput(1) && c.in(1).numel() == 2 * r) {
      Tensor rt = castTensor(c.in(1), DType::Float64);
      roi.assign(rt.data<double>(), rt.data<double>() + 2 * r);
    } else {
      roi.assign(2 * r, 0.0);
      for (int64_t d = 0; d < r; ++d) roi[r + d] = 1.0;
    }
  }
  return ResizeGeometry{r,      std::move(mode),   std::move(ctm),      std::move(nearestMode), std::move(scales),
                        std::move(outLen), std::move(roi), std::move(outShape), crop};
}

/// Per-dim tables of where each output index reads (resizeTables).
struct ResizeTables {
  bool nearest = false, cubic = false;
  double extrapolation = 0;
  std::vector<std::vector<int64_t>> lo, hi;
  std::vector<std::vector<double>> fr;
  std::vector<std::vector<char>> outside;
  std::vector<std::vector<std::array<int64_t, 4>>> ctap;
  std::vector<std::vector<std::array<double, 4>>> cw;
};

ResizeTables resizeTables(KernelContext &c, const Tensor &x, const ResizeGeometry &g) {
  const int64_t r = g.r;
  const std::string &mode = g.mode, &nearestMode = g.nearestMode;
  const std::vector<double> &scales = g.scales;
  const std::vector<int64_t> &outShape = g.outShape;
  const bool crop = g.crop;
  auto src = [&](int64_t d, int64_t o) { return g.src(x, d, o); };
  auto sx = stridesOf(x.shape());
  // Per-dim tables, computed once (the coordinate transformation and the
  // rounding as ONNX defines them, in double): nearest, the source index of
  // each output index; linear, the two neighbours and the fraction; cubic,
  // four taps and their weights. tf_crop_and_resize: which output indices
  // fall outside the input (extrapolation_value there).
  const bool nearest = mode == "nearest", cubic = mode == "cubic";
  std::vector<std::vector<int64_t>> lo(r), hi(r);
  std::vector<std::vector<double>> fr(r);
  std::vector<std::vector<char>> outside(r);
  std::vector<std::vector<std::array<int64_t, 4>>> ctap(r);
  std::vector<std::vector<std::array<double, 4>>> cw(r);
  const double A = c.node.getFloat("cubic_coeff_a", -0.75f);
  const bool excludeOutside = c.node.getInt("exclude_outside", 0) != 0;
  const double extrapolation = c.node.getFloat("extrapolation_value", 0.0f);
  for (int64_t d = 0; d < r; ++d) {
    if (crop) outside[d].assign(outShape[d], 0);
    if (cubic) {
      ctap[d].resize(outShape[d]), cw[d].resize(outShape[d]);
    } else {
      lo[d].resize(outShape[d]);
      if (!nearest) hi[d].resize(outShape[d]), fr[d].resize(outShape[d]);
    }
    for (int64_t o = 0; o < outShape[d]; ++o) {
      if (crop) {
        double p = src(d, o);
        if (p < 0 || p > x.dim(d) - 1) outside[d][o] = 1;
      }
      if (cubic) {
        // Keys' cubic convolution over the four inputs nearest p (ties to
        // the lower ones): ceil(p)-2 .. ceil(p)+1, t = p - (ceil(p)-1) in
        // (0, 1]; edge-padded, or with exclude_outside the weights of
        // outside taps dropped and the rest renormalized.
        double p = src(d, o);
        int64_t base = (int64_t)std::ceil(p) - 2;
        double t = p - double(base + 1);
        std::array<double, 4> w = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                                   ((A + 2) * t - (A + 3)) * t * t + 1,
                                   ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
                                   ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A};
        if (excludeOutside) {
          double sum = 0;
          for (int k = 0; k < 4; ++k) {
            int64_t i = base + k;
            if (i < 0 || i >= x.dim(d)) w[k] = 0;
            sum += w[k];
          }
          for (int k = 0; k < 4; ++k) w[k] = sum != 0 ? w[k] / sum : 0;
        }
        for (int k = 0; k < 4; ++k) {
          ctap[d][o][k] = std::clamp<int64_t>(base + k, 0, x.dim(d) - 1) * sx[d];
          cw[d][o][k] = w[k];
        }
      } else if (nearest) {
        double p = src(d, o);
        int64_t q;
        if (nearestMode == "floor") q = (int64_t)std::floor(p);
        else if (nearestMode == "ceil") q = (int64_t)std::ceil(p);
        else if (nearestMode == "round_prefer_ceil") q = (int64_t)std::floor(p + 0.5);
        else q = (p - std::floor(p) == 0.5) ? (int64_t)std::floor(p) : (int64_t)std::round(p);
        lo[d][o] = std::clamp<int64_t>(q, 0, x.dim(d) - 1) * sx[d];
      } else {
        double p = x.dim(d) == outShape[d] && scales[d] == 1.0 && !crop ? o : src(d, o);
        p = std::clamp<double>(p, 0, x.dim(d) - 1);
        int64_t l = (int64_t)std::floor(p);
        lo[d][o] = l * sx[d];
        hi[d][o] = std::min(l + 1, x.dim(d) - 1) * sx[d];
        fr[d][o] = p - l;
      }
    }
  }
  return ResizeTables{nearest, cubic, extrapolation, std::move(lo), std::move(hi), std::move(fr),
                      std::move(outside), std::move(ctap), std::move(cw)};
}

/// Cubic (and tf_crop_and_resize in any mode): output rows in parallel;
/// the leading dims give up to 4^(r-1) weighted source rows (zero
/// weights dropped), the last dim its four taps.
void resizeByTaps(const Tensor &x, const ResizeGeometry &g, const ResizeTables &t, Tensor &out) {
  const int64_t r = g.r;
  const std::vector<int64_t> &outShape = g.outShape;
  const bool crop = g.crop, nearest = t.nearest, cubic = t.cubic;
  const double extrapolation = t.extrapolation;
  const auto &lo = t.lo, &hi = t.hi;
  const auto &fr = t.fr;
  const auto &outside = t.outside;
  const auto &ctap = t.ctap;
  const auto &cw = t.cw;
  int64_t W = r ? outShape[r - 1] : 1, rows = W ? out.numel() / W : 0;
  HP_DISPATCH_FLOAT(x.dtype(), {
    const T *px = x.data<T>();
    T *po = out.data<T>();
    parallelFor(rows, std::max<int64_t>(1, 1024 / std::max<int64_t>(1, W)), [&](int64_t rlo, int64_t rhi) {
      std::vector<int64_t> idx(r > 0 ? r - 1 : 0);
      std::vector<std::pair<int64_t, double>> corners, next;
      auto taps = [&](int64_t d, int64_t o, auto &&emit) {
        if (cubic) {
          for (int k = 0; k < 4; ++k) emit(ctap[d][o][k], cw[d][o][k]);
        } else if (nearest) {
          emit(lo[d][o], 1.0);
        } else {
          emit(lo[d][o], 1 - fr[d][o]);
          emit(hi[d][o], fr[d][o]);
        }
      };
      for (int64_t row = rlo; row < rhi; ++row) {
        int64_t f = row;
        for (int64_t d = r - 2; d >= 0; --d) { idx[d] = f % outShape[d]; f /= outShape[d]; }
        T *dst = po + row * W;
        if (r == 0) { dst[0] = px[0]; continue; }
        bool rowOutside = false;
        for (int64_t d = 0; d + 1 < r; ++d) rowOutside = rowOutside || (crop && outside[d][idx[d]]);
        if (rowOutside) {
          for (int64_t j = 0; j < W; ++j) dst[j] = static_cast<T>(extrapolation);
          continue;
        }
        corners.assign(1, {0, 1.0});
        for (int64_t d = 0; d + 1 < r; ++d) {
          next.clear();
          for (const auto &corner : corners) // (no structured binding: clang < 16 cannot capture one)
            taps(d, idx[d], [&, off = corner.first, wgt = corner.second](int64_t toff, double tw) {
              if (wgt * tw != 0) next.push_back({off + toff, wgt * tw});
            });
          corners.swap(next);
        }
        for (int64_t j = 0; j < W; ++j) {
          if (crop && outside[r - 1][j]) { dst[j] = static_cast<T>(extrapolation); continue; }
          double acc = 0;
          for (const auto &corner : corners)
            taps(r - 1, j, [&, off = corner.first, wgt = corner.second](int64_t toff, double tw) {
              acc += wgt * tw * double(px[off + toff]);
            });
          dst[j] = static_cast<T>(acc);
        }
      }
    });
  });
}

/// Nearest and linear without tf_crop_and_resize.
void resizeNearestLinear(const Tensor &x, const ResizeGeometry &g, const ResizeTables &t, Tensor &out) {
  const int64_t r = g.r;
  const std::vector<int64_t> &outShape = g.outShape;
  const bool nearest = t.nearest;
  const auto &lo = t.lo, &hi = t.hi;
  const auto &fr = t.fr;
  // Output rows (every dim but the last) in parallel; within a row, the
  // leading dims give a base offset (nearest) or up to 2^(r-1) weighted
  // source rows (linear, zero weights dropped), the last dim its table.
  int64_t W = r ? outShape[r - 1] : 1, rows = W ? out.numel() / W : 0;
  // Quantized (int8/uint8) images round and saturate; floats store as is.
  auto body = [&](auto tag) {
    using T = decltype(tag);
    auto store = [](double v) -> T {
      if constexpr (std::is_integral_v<T>)
        return static_cast<T>(std::clamp<double>(std::nearbyint(v), std::numeric_limits<T>::lowest(),
                                                 std::numeric_limits<T>::max()));
      else
        return static_cast<T>(v);
    };
    const T *px = x.data<T>();
    T *po = out.data<T>();
    parallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, W)), [&](int64_t rlo, int64_t rhi) {
      std::vector<int64_t> idx(r > 0 ? r - 1 : 0);
      std::vector<std::pair<int64_t, double>> corners, next;
      for (int64_t row = rlo; row < rhi; ++row) {
        int64_t f = row;
        for (int64_t d = r - 2; d >= 0; --d) { idx[d] = f % outShape[d]; f /= outShape[d]; }
        T *dst = po + row * W;
        if (r == 0) { dst[0] = px[0]; continue; }
        if (nearest) {
          int64_t base = 0;
          for (int64_t d = 0; d + 1 < r; ++d) base += lo[d][idx[d]];
          const int64_t *tab = lo[r - 1].data();
          for (int64_t j = 0; j < W; ++j) dst[j] = px[base + tab[j]];
          continue;
        }
        corners.assign(1, {0, 1.0});
        for (int64_t d = 0; d + 1 < r; ++d) {
          double fd = fr[d][idx[d]];
          next.clear();
          for (auto [off, wgt] : corners) {
            if (wgt * (1 - fd) != 0) next.push_back({off + lo[d][idx[d]], wgt * (1 - fd)});
            if (wgt * fd != 0) next.push_back({off + hi[d][idx[d]], wgt * fd});
          }
          corners.swap(next);
        }
        const int64_t *tl = lo[r - 1].data(), *th = hi[r - 1].data();
        const double *tf = fr[r - 1].data();
        if (corners.size() == 1) {
          const T *s0 = px + corners[0].first;
          double w0 = corners[0].second;
          for (int64_t j = 0; j < W; ++j) {
            double a = s0[tl[j]], b = s0[th[j]];
            dst[j] = store(w0 * ((1 - tf[j]) * a + tf[j] * b));
          }
        } else if (corners.size() == 2) {
          const T *s0 = px + corners[0].first, *s1 = px + corners[1].first;
          double w0 = corners[0].second, w1 = corners[1].second;
          for (int64_t j = 0; j < W; ++j) {
            double f1 = tf[j], f0 = 1 - f1;
            dst[j] = store(w0 * (f0 * s0[tl[j]] + f1 * s0[th[j]]) + w1 * (f0 * s1[tl[j]] + f1 * s1[th[j]]));
          }
        } else {
          for (int64_t j = 0; j < W; ++j) {
            double f1 = tf[j], f0 = 1 - f1, acc = 0;
            for (auto [off, wgt] : corners) acc += wgt * (f0 * px[off + tl[j]] + f1 * px[off + th[j]]);
            dst[j] = store(acc);
          }
        }
      }
    });
  };
  switch (x.dtype()) {
  case DType::Float32: body(float()); break;
  case DType::Float64: body(double()); break;
  case DType::UInt8: body(uint8_t()); break;
  case DType::Int8: body(int8_t()); break;
  default: throw std::runtime_error(std::string("Resize of ") + dtypeName(x.dtype()) + " is not supported");
  }
}

void resize(KernelContext &c) {
  const Tensor &x = c.in(0);
  ResizeGeometry g = resizeGeometry(c);
  Tensor out(x.dtype(), g.outShape);
  ResizeTables t = resizeTables(c, x, g);
  if (t.cubic || g.crop) resizeByTaps(x, g, t, out);
  else resizeNearestLinear(x, g, t, out);
  c.outputs[0] = std::move(out);
}

std::string resizeCheck(const CheckContext &c) {
  std::string mode = c.node.getString("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") return "Resize mode '" + mode + "' is not supported";
  std::string ctm = c.node.getString("coordinate_transformation_mode", "half_pixel");
  if (ctm != "half_pixel" && ctm != "asymmetric" && ctm != "align_corners" && ctm != "pytorch_half_pixel" &&
      ctm != "tf_crop_and_resize" && ctm != "tf_half_pixel_for_nn")
    return "coordinate_transformation_mode '" + ctm + "' is not supported";
  if (ctm == "tf_crop_and_resize" && c.opset < 11) return "tf_crop_and_resize needs the roi input (opset 11+)";
  if (c.node.has("antialias") && c.node.getInt("antialias", 0)) return "antialias is not supported";
  if (c.node.has("axes")) return "Resize axes are not supported";
  if (c.node.getString("keep_aspect_ratio_policy", "stretch") != "stretch") return "keep_aspect_ratio_policy is not supported";
  return "";
}

} // namespace

void registerResizeKernels() {
  registerKernel("Resize", {resize, resizeCheck, {DType::Float32, DType::Float64, DType::UInt8, DType::Int8}, HalfPolicy::Upcast});
  registerKernel("Upsample", {resize, resizeCheck, kFloatTypes});
}

} // namespace hetplan::runtime::cpu

