//===- Quantize.cpp - QDQ and QOperator kernels ---------------------------===//
//
// QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked; 8- and
// 16-bit integers), DynamicQuantizeLinear, and the integer ops MatMulInteger,
// ConvInteger, QLinearMatMul, QLinearConv. Rounding is ONNX's: round half to
// even, then saturate to the output type.
//
// The integer ops subtract the zero points and run the float MatMul/Conv
// kernels on the shifted values: every product and partial sum is an integer,
// so float32 is exact while K * max|a| * max|b| < 2^24 (K = the reduced
// length); past that the kernels run in float64 (exact below 2^53). The
// float accumulators are then exact int32 values.
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"
#include "OpKernels.h"

#include <cmath>
#include <limits>

namespace hetplan::runtime::cpu {
namespace {

bool isQuantType(DType t) { return t == DType::Int8 || t == DType::UInt8 || t == DType::Int16 || t == DType::UInt16; }

#define HP_DISPATCH_QUANT(DT, ...)                                                      \
  switch (DT) {                                                                         \
    HP_CASE(Int8, int8_t, __VA_ARGS__) HP_CASE(UInt8, uint8_t, __VA_ARGS__)             \
    HP_CASE(Int16, int16_t, __VA_ARGS__) HP_CASE(UInt16, uint16_t, __VA_ARGS__)         \
  default: throw std::runtime_error(std::string("unsupported quantized type ") + dtypeName(DT)); \
  }

/// Round half to even, then saturate to T.
template <typename T> inline T saturateRound(double v) {
  v = std::nearbyint(v);
  constexpr double lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  if (!(v >= lo)) return std::isnan(v) ? T(0) : std::numeric_limits<T>::lowest();
  if (v > hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

/// Which scale/zero-point element each element of x uses: per tensor, per
/// axis, or per block of `block` along the axis.
struct QuantLayout {
  int64_t outer = 1, len = 1, inner = 1, scaleLen = 1, block = 0;
  bool perTensor = true;
  int64_t at(int64_t i) const {
    if (perTensor) return 0;
    int64_t in = i % inner, a = (i / inner) % len, o = i / (inner * len);
    if (block == 0) return a;
    return (o * scaleLen + a / block) * inner + in;
  }
};

QuantLayout quantLayout(const KernelContext &c, const Tensor &x, const Tensor &scale) {
  QuantLayout q;
  int64_t block = c.opset >= 21 ? c.node.getInt("block_size", 0) : 0;
  if (scale.numel() == 1 && block == 0 && scale.rank() <= 1) return q;
  q.perTensor = false;
  int64_t axis = normAxis(c.node.getInt("axis", 1), x.rank());
  for (int64_t d = 0; d < axis; ++d) q.outer *= x.dim(d);
  q.len = x.dim(axis);
  for (int64_t d = axis + 1; d < x.rank(); ++d) q.inner *= x.dim(d);
  if (block > 0) {
    q.block = block;
    if (scale.rank() != x.rank()) throw std::runtime_error("blocked quantization: scale rank must equal input rank");
    q.scaleLen = scale.dim(axis);
    if (q.scaleLen != (q.len + block - 1) / block)
      throw std::runtime_error("blocked quantization: scale dim " + std::to_string(q.scaleLen) + " != ceil(" +
                               std::to_string(q.len) + " / " + std::to_string(block) + ")");
    if (scale.numel() != q.outer * q.scaleLen * q.inner) throw std::runtime_error("blocked quantization: scale shape does not match input");
  } else if (scale.rank() != 1 || scale.numel() != q.len) {
    throw std::runtime_error("scale " + scale.describe() + " is neither one value nor one per element of axis " +
                             std::to_string(axis) + " of " + x.describe());
  }
  return q;
}

std::vector<double> asDoubles(const Tensor &t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.scalarAsDouble(i);
  return v;
}

/// The quantized output type: the zero point's, else output_dtype, else uint8.
DType quantOutType(const Node &n, DType zp) {
  if (zp != DType::Undefined) return zp;
  int64_t od = n.getInt("output_dtype", 0);
  return od ? static_cast<DType>(od) : DType::UInt8;
}

void quantizeLinear(KernelContext &c) {
  const Tensor &x = c.in(0);
  Tensor scale = castTensor(c.in(1), DType::Float32);
  const Tensor *zp = c.hasInput(2) ? &c.in(2) : nullptr;
  DType ot = quantOutType(c.node, zp ? zp->dtype() : DType::Undefined);
  QuantLayout q = quantLayout(c, x, scale);
  if (zp && zp->numel() != scale.numel()) throw std::runtime_error("zero point and scale differ in size");
  std::vector<double> zpv = zp ? asDoubles(*zp) : std::vector<double>(scale.numel(), 0.0);
  Tensor xf = x.dtype() == DType::Int32 ? Tensor() : castTensor(x, DType::Float32);
  const float *ps = scale.data<float>();
  Tensor out(ot, x.shape());
  HP_DISPATCH_QUANT(ot, {
    T *po = out.data<T>();
    int64_t n = x.numel();
    if (x.dtype() == DType::Int32) {
      const int32_t *px = x.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) { int64_t k = q.at(i); po[i] = saturateRound<T>(std::nearbyint(px[i] / static_cast<double>(ps[k])) + zpv[k]); }
    } else {
      const float *px = xf.data<float>();
      parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          int64_t k = q.at(i);
          po[i] = saturateRound<T>(static_cast<double>(std::nearbyint(px[i] / ps[k])) + zpv[k]); // float32 division, as ONNX's reference
        }
      });
    }
  });
  c.outputs[0] = std::move(out);
}

std::string quantizeCheck(const CheckContext &c) {
  DType x = c.in(0), s = c.in(1), zp = c.in(2);
  if (x != DType::Undefined && !isFloatType(x) && x != DType::Int32)
    return std::string("QuantizeLinear input of element type ") + dtypeName(x) + " is not supported";
  if (s != DType::Undefined && !isFloatType(s)) return std::string("QuantizeLinear scale of element type ") + dtypeName(s) + " is not supported";
  int64_t od = c.node.getInt("output_dtype", 0);
  DType ot = zp != DType::Undefined ? zp : (od ? static_cast<DType>(od) : (c.node.inputs.size() > 2 && !c.node.inputs[2].empty() ? DType::Undefined : DType::UInt8));
  if (ot != DType::Undefined && !isQuantType(ot))
    return std::string("QuantizeLinear to element type ") + typeLabel(ot) +
           " is not supported (int8/uint8/int16/uint16)";
  return "";
}

void dequantizeLinear(KernelContext &c) {
  const Tensor &x = c.in(0), &scaleIn = c.in(1);
  Tensor scale = castTensor(scaleIn, DType::Float32);
  const Tensor *zp = c.hasInput(2) ? &c.in(2) : nullptr;
  QuantLayout q = quantLayout(c, x, scale);
  if (zp && zp->numel() != scale.numel()) throw std::runtime_error("zero point and scale differ in size");
  std::vector<float> zpv(scale.numel(), 0.f);
  if (zp) for (int64_t i = 0; i < zp->numel(); ++i) zpv[i] = static_cast<float>(zp->scalarAsDouble(i));
  const float *ps = scale.data<float>();
  Tensor out(DType::Float32, x.shape());
  float *po = out.data<float>();
  int64_t n = x.numel();
  auto body = [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.data<T>();
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        int64_t k = q.at(i);
        po[i] = (static_cast<float>(px[i]) - zpv[k]) * ps[k];
      }
    });
  };
  switch (x.dtype()) {
  case DType::Int8: body(int8_t()); break;
  case DType::UInt8: body(uint8_t()); break;
  case DType::Int16: body(int16_t()); break;
  case DType::UInt16: body(uint16_t()); break;
  case DType::Int32: { // float32 of (x - zp) may round for |x| > 2^24, as in the reference
    const int32_t *px = x.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) { int64_t k = q.at(i); po[i] = static_cast<float>(static_cast<double>(px[i]) - zpv[k]) * ps[k]; }
    break;
  }
  default: throw std::runtime_error(std::string("DequantizeLinear of ") + dtypeName(x.dtype()) + " is not supported");
  }
  int64_t od = c.node.getInt("output_dtype", 0);
  DType ot = od ? static_cast<DType>(od) : scaleIn.dtype();
  c.outputs[0] = ot == DType::Float32 ? std::move(out) : castTensor(out, ot);
}

std::string dequantizeCheck(const CheckContext &c) {
  DType x = c.in(0), s = c.in(1);
  if (x != DType::Undefined && !isQuantType(x) && x != DType::Int32)
    return std::string("DequantizeLinear of element type ") + typeLabel(x) +
           " is not supported (int8/uint8/int16/uint16/int32)";
  if (s != DType::Undefined && !isFloatType(s)) return std::string("DequantizeLinear scale of element type ") + dtypeName(s) + " is not supported";
  int64_t od = c.node.getInt("output_dtype", 0);
  if (od && !isFloatType(static_cast<DType>(od))) return "DequantizeLinear output_dtype " + std::to_string(od) + " is not supported";
  return "";
}

void dynamicQuantizeLinear(KernelContext &c) {
  Tensor x = castTensor(c.in(0), DType::Float32);
  const float *px = x.data<float>();
  int64_t n = x.numel();
  float mn = 0.f, mx = 0.f;
  for (int64_t i = 0; i < n; ++i) { mn = std::min(mn, px[i]); mx = std::max(mx, px[i]); }
  float scale = (mx - mn) / 255.0f;
  uint8_t zp = 0;
  if (scale != 0.f) zp = saturateRound<uint8_t>(std::clamp(0.0f - mn / scale, 0.0f, 255.0f));
  Tensor y(DType::UInt8, x.shape());
  uint8_t *py = y.data<uint8_t>();
  if (scale != 0.f)
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) py[i] = saturateRound<uint8_t>(static_cast<double>(std::nearbyint(px[i] / scale)) + zp);
    });
  c.outputs[0] = std::move(y);
  if (c.numOutputs() > 1) c.outputs[1] = Tensor::scalar<float>(DType::Float32, scale);
  if (c.numOutputs() > 2) c.outputs[2] = Tensor::scalar<uint8_t>(DType::UInt8, zp);
}

// ---- integer MatMul / Conv through the float kernels -----------------------

/// q - zp as `ft` (Float32/Float64); zp is one value, or one per index of
/// `axis` of q (axis < 0: none). Also returns max |q - zp|.
Tensor shifted(const Tensor &q, const Tensor *zp, int64_t axis, DType ft, double &maxAbs) {
  std::vector<double> z = zp ? asDoubles(*zp) : std::vector<double>{0.0};
  if (z.empty()) throw std::runtime_error("zero point " + zp->describe() + " is empty");
  int64_t inner = 1, len = 1;
  if (z.size() > 1) {
    if (axis < 0 || axis >= q.rank() || q.dim(axis) != static_cast<int64_t>(z.size()))
      throw std::runtime_error("zero point " + zp->describe() + " does not match " + q.describe());
    len = q.dim(axis);
    for (int64_t d = axis + 1; d < q.rank(); ++d) inner *= q.dim(d);
  }
  Tensor out(ft, q.shape());
  maxAbs = 0;
  int64_t n = q.numel();
  HP_DISPATCH_FLOAT(ft, {
    T *po = out.data<T>();
    HP_DISPATCH_QUANT(q.dtype(), {
      using Q = T;
      const Q *pq = q.data<Q>();
      for (int64_t i = 0; i < n; ++i) {
        double v = static_cast<double>(pq[i]) - z[z.size() > 1 ? (i / inner) % len : 0];
        maxAbs = std::max(maxAbs, std::fabs(v));
        po[i] = static_cast<decltype(po[0] + 0)>(v);
      }
    });
  });
  return out;
}

/// Exact float type for sums of `K` products bounded by ma * mb.
DType exactType(int64_t K, double ma, double mb) {
  return static_cast<double>(K) * ma * mb < 16777216.0 ? DType::Float32 : DType::Float64;
}

/// (A - a_zp) x (B - b_zp) as float accumulators (exact integers).
/// a_zp: one value or one per row of A (its dim -2); b_zp: one value or one per column (dim -1).
Tensor integerMatMul(const KernelContext &c, const Tensor &a, const Tensor *azp, const Tensor &b, const Tensor *bzp) {
  requireMatMulOperands(a, b);
  int64_t K = a.dim(-1);
  double ma = 0, mb = 0;
  Tensor af = shifted(a, azp, a.rank() - 2, DType::Float64, ma), bf = shifted(b, bzp, b.rank() - 1, DType::Float64, mb);
  if (exactType(K, ma, mb) == DType::Float32) { af = castTensor(af, DType::Float32); bf = castTensor(bf, DType::Float32); }
  return runFloatMatMul(c, af, bf);
}

/// conv(x - x_zp, w - w_zp[m]) as float accumulators; w_zp one value or one per output channel.
Tensor integerConv(const KernelContext &c, const Tensor &x, const Tensor *xzp, const Tensor &w, const Tensor *wzp) {
  if (xzp && xzp->numel() != 1) throw std::runtime_error("input zero point must be one value");
  requireConvWeight(w);
  int64_t K = 1;
  for (int64_t d = 1; d < w.rank(); ++d) K *= w.dim(d);
  double mx = 0, mw = 0;
  Tensor xf = shifted(x, xzp, -1, DType::Float64, mx), wf = shifted(w, wzp, 0, DType::Float64, mw);
  if (exactType(K, mx, mw) == DType::Float32) { xf = castTensor(xf, DType::Float32); wf = castTensor(wf, DType::Float32); }
  return runFloatConv(c, xf, wf);
}

Tensor toInt32(const Tensor &acc) {
  Tensor out(DType::Int32, acc.shape());
  int32_t *po = out.data<int32_t>();
  HP_DISPATCH_FLOAT(acc.dtype(), {
    const T *p = acc.data<T>();
    for (int64_t i = 0; i < acc.numel(); ++i) po[i] = static_cast<int32_t>(static_cast<int64_t>(p[i]));
  });
  return out;
}

/// y = saturate(rint(acc * (s_a * s_b[ch] / s_y)) + y_zp); `bias` (int32, per
/// channel) is added to the accumulator first. ch = index along `chAxis`
/// of acc (or 0 when s_b has one value).
void requantize(KernelContext &c, const Tensor &acc, const Tensor &sa, const Tensor &sb, const Tensor &sy,
                const Tensor *yzp, int64_t chAxis, const Tensor *bias) {
  if (sa.numel() != 1 || sy.numel() != 1) throw std::runtime_error("input and output scales must be one value (per tensor)");
  if (yzp && yzp->numel() != 1) throw std::runtime_error("output zero point must be one value (per tensor)");
  float fa = static_cast<float>(sa.scalarAsDouble(0)), fy = static_cast<float>(sy.scalarAsDouble(0));
  int64_t nch = sb.numel();
  int64_t inner = 1, len = 1;
  if (nch > 1 || bias) {
    len = acc.dim(chAxis);
    for (int64_t d = chAxis + 1; d < acc.rank(); ++d) inner *= acc.dim(d);
    if (nch > 1 && nch != len) throw std::runtime_error("per-channel scale " + sb.describe() + " does not match " + std::to_string(len) + " channels");
    if (bias && bias->numel() != len) throw std::runtime_error("bias " + bias->describe() + " does not match " + std::to_string(len) + " channels");
  }
  std::vector<double> mult(std::max<int64_t>(nch, 1));
  for (int64_t k = 0; k < nch; ++k) mult[k] = static_cast<float>(fa * static_cast<float>(sb.scalarAsDouble(k)) / fy); // float32, as the reference
  std::vector<double> bv = bias ? asDoubles(*bias) : std::vector<double>();
  double zp = yzp ? yzp->scalarAsDouble(0) : 0.0;
  DType ot = yzp ? yzp->dtype() : DType::UInt8;
  Tensor out(ot, acc.shape());
  int64_t n = acc.numel();
  HP_DISPATCH_FLOAT(acc.dtype(), {
    const T *pa = acc.data<T>();
    auto store = [&](auto tag) {
      using Q = decltype(tag);
      Q *po = out.data<Q>();
      for (int64_t i = 0; i < n; ++i) {
        int64_t ch = (i / inner) % len;
        double v = static_cast<double>(pa[i]) + (bias ? bv[ch] : 0.0);
        po[i] = saturateRound<Q>(std::nearbyint(v * mult[nch > 1 ? ch : 0]) + zp);
      }
    };
    switch (ot) {
    case DType::Int8: store(int8_t()); break;
    case DType::UInt8: store(uint8_t()); break;
    default: throw std::runtime_error(std::string("output type ") + dtypeName(ot) + " is not supported");
    }
  });
  c.outputs[0] = std::move(out);
}

const Tensor *opt(const KernelContext &c, size_t i) { return c.hasInput(i) ? &c.in(i) : nullptr; }

void matMulInteger(KernelContext &c) { c.outputs[0] = toInt32(integerMatMul(c, c.in(0), opt(c, 2), c.in(1), opt(c, 3))); }
void convInteger(KernelContext &c) { c.outputs[0] = toInt32(integerConv(c, c.in(0), opt(c, 2), c.in(1), opt(c, 3))); }

void qlinearMatMul(KernelContext &c) {
  // a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp
  const Tensor &a = c.in(0), &b = c.in(3);
  if (c.in(1).numel() != 1) throw std::runtime_error("QLinearMatMul: per-row a_scale is not supported");
  Tensor acc = integerMatMul(c, a, opt(c, 2), b, opt(c, 5));
  requantize(c, acc, c.in(1), c.in(4), c.in(6), opt(c, 7), acc.rank() - 1, nullptr);
}

void qlinearConv(KernelContext &c) {
  // x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B
  Tensor acc = integerConv(c, c.in(0), opt(c, 2), c.in(3), opt(c, 5));
  requantize(c, acc, c.in(1), c.in(4), c.in(6), opt(c, 7), 1, opt(c, 8));
}

std::string int8Inputs(const CheckContext &c, std::initializer_list<size_t> idx) {
  for (size_t i : idx)
    if (DType t = c.in(i); t != DType::Undefined && t != DType::Int8 && t != DType::UInt8)
      return c.node.opType + " input " + std::to_string(i) + " of element type " + dtypeName(t) + " is not supported (int8/uint8)";
  return "";
}

std::string scaleInputs(const CheckContext &c, std::initializer_list<size_t> idx) {
  for (size_t i : idx)
    if (DType t = c.in(i); t != DType::Undefined && !isFloatType(t))
      return c.node.opType + " scale input " + std::to_string(i) + " of element type " + dtypeName(t) + " is not supported";
  return "";
}

std::string convAttrCheck(const CheckContext &c) {
  std::string ap = c.node.getString("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" && ap != "SAME_LOWER") return c.node.opType + " auto_pad '" + ap + "' is not supported";
  return "";
}

// ---- com.microsoft QOperator contrib ops (onnxruntime's quantizer) ---------
//
// Semantics of onnxruntime/docs/ContribOperators.md: every quantized operand
// is per tensor (one scale, one zero point) unless stated; the elementwise
// ops dequantize, compute in float32 and requantize with the output's scale
// and zero point (whose type, else the first operand's, is the output type).

float scalarScale(const Tensor &s, const char *what) {
  if (s.numel() != 1) throw std::runtime_error(std::string(what) + " must be one value (per tensor), got " + s.describe());
  return static_cast<float>(s.scalarAsDouble(0));
}

/// (q - zp) * scale as float32; zp absent: 0.
Tensor dequantPerTensor(const Tensor &q, const Tensor &scale, const Tensor *zp) {
  float s = scalarScale(scale, "scale");
  if (zp && zp->numel() != 1) throw std::runtime_error("zero point must be one value (per tensor), got " + zp->describe());
  float z = zp ? static_cast<float>(zp->scalarAsDouble(0)) : 0.f;
  Tensor out(DType::Float32, q.shape());
  float *po = out.data<float>();
  int64_t n = q.numel();
  HP_DISPATCH_QUANT(q.dtype(), {
    const T *pq = q.data<T>();
    for (int64_t i = 0; i < n; ++i) po[i] = (static_cast<float>(pq[i]) - z) * s;
  });
  return out;
}

/// saturate(rint(v / scale) + zp) as `ot` (zp's type when given).
Tensor quantPerTensor(const Tensor &v, const Tensor &scale, const Tensor *zp, DType ot) {
  float s = scalarScale(scale, "output scale");
  if (zp && zp->numel() != 1) throw std::runtime_error("output zero point must be one value (per tensor), got " + zp->describe());
  if (zp) ot = zp->dtype();
  double z = zp ? zp->scalarAsDouble(0) : 0.0;
  Tensor vf = castTensor(v, DType::Float32);
  const float *pv = vf.data<float>();
  Tensor out(ot, v.shape());
  int64_t n = v.numel();
  HP_DISPATCH_QUANT(ot, {
    T *po = out.data<T>();
    parallelFor(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = saturateRound<T>(static_cast<double>(std::nearbyint(pv[i] / s)) + z);
    });
  });
  return out;
}

/// Dequantizes the (x, scale, zp) triples starting at `firsts`, runs the float
/// kernel `op` (the node's attributes, opset `opset`) on them and quantizes its
/// output with (inputs[ys], inputs[yzp]).
void dequantRunQuant(KernelContext &c, const char *op, std::vector<size_t> firsts, size_t ys, size_t yzp, int64_t opset) {
  std::vector<Tensor> deq;
  deq.reserve(firsts.size());
  for (size_t f : firsts) deq.push_back(dequantPerTensor(c.in(f), c.in(f + 1), opt(c, f + 2)));
  std::vector<const Tensor *> ins;
  for (const auto &t : deq) ins.push_back(&t);
  const KernelInfo *k = findKernel(op);
  if (!k) throw std::runtime_error(std::string("no ") + op + " kernel");
  KernelContext inner{c.node, opset, std::move(ins), std::vector<Tensor>(1)};
  k->run(inner);
  c.outputs[0] = quantPerTensor(inner.outputs[0], c.in(ys), opt(c, yzp), c.in(firsts[0]).dtype());
}

void qlinearAdd(KernelContext &c) { dequantRunQuant(c, "Add", {0, 3}, 6, 7, 14); }
void qlinearMul(KernelContext &c) { dequantRunQuant(c, "Mul", {0, 3}, 6, 7, 14); }
void qlinearLeakyRelu(KernelContext &c) { dequantRunQuant(c, "LeakyRelu", {0}, 3, 4, 16); }
void qlinearSigmoid(KernelContext &c) { dequantRunQuant(c, "Sigmoid", {0}, 3, 4, 13); }

void qlinearGlobalAveragePool(KernelContext &c) {
  if (c.node.getInt("channels_last", 0)) throw std::runtime_error("QLinearGlobalAveragePool with channels_last = 1 is not supported");
  dequantRunQuant(c, "GlobalAveragePool", {0}, 3, 4, 13);
}

void qlinearConcat(KernelContext &c) {
  // Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per operand.
  std::vector<size_t> firsts;
  for (size_t i = 2; i + 2 < c.inputs.size() + 1 && i < c.inputs.size(); i += 3) firsts.push_back(i);
  if (firsts.empty()) throw std::runtime_error("QLinearConcat needs at least one operand");
  dequantRunQuant(c, "Concat", firsts, 0, 1, 13);
}

/// Softmax of the dequantized values, quantized: the input's zero point
/// cancels (softmax is shift invariant), so each row is exp((q - max q) *
/// x_scale) / sum, in double (x_scale may be huge: masks).
void qlinearSoftmax(KernelContext &c) {
  // X, X_scale, X_zero_point, Y_scale, Y_zero_point; attributes axis, opset.
  const Tensor &x = c.in(0);
  double xs = scalarScale(c.in(1), "X_scale");
  const Tensor &ysT = c.in(3);
  double ys = scalarScale(ysT, "Y_scale");
  const Tensor *yzp = opt(c, 4);
  if (yzp && yzp->numel() != 1) throw std::runtime_error("Y_zero_point must be one value (per tensor)");
  double z = yzp ? yzp->scalarAsDouble(0) : 0.0;
  DType ot = yzp ? yzp->dtype() : x.dtype();
  int64_t rank = x.rank();
  int64_t semantics = c.node.getInt("opset", 1);
  int64_t axis = normAxis(c.node.getInt("axis", semantics >= 13 ? -1 : 1), std::max<int64_t>(rank, 1));
  int64_t outer = 1, len = 1, inner = 1;
  if (semantics >= 13) {
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    len = rank ? x.dim(axis) : 1;
    for (int64_t d = axis + 1; d < rank; ++d) inner *= x.dim(d);
  } else { // the dims from `axis` on form one row
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis; d < rank; ++d) len *= x.dim(d);
  }
  std::vector<double> qv = asDoubles(x);
  Tensor out(ot, x.shape());
  HP_DISPATCH_QUANT(ot, {
    T *po = out.data<T>();
    parallelFor(outer * inner, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> e(len);
      for (int64_t r = lo; r < hi; ++r) {
        int64_t o = r / inner, in = r % inner, base = o * len * inner + in;
        double mx = qv[base];
        for (int64_t j = 1; j < len; ++j) mx = std::max(mx, qv[base + j * inner]);
        double sum = 0;
        for (int64_t j = 0; j < len; ++j) sum += (e[j] = std::exp((qv[base + j * inner] - mx) * xs));
        for (int64_t j = 0; j < len; ++j) po[base + j * inner] = saturateRound<T>(std::nearbyint(e[j] / sum / ys) + z);
      }
    });
  });
  c.outputs[0] = std::move(out);
}

/// QGemm: Y = alpha * a_scale * b_scale[n] * ((A - a_zp)' (B - b_zp[n])' + C),
/// C int32 (scale alpha * a_scale * b_scale, zero point 0), broadcast to
/// [M, N]; b_scale and b_zp per tensor or per column. Float32 output without
/// y_scale, else requantized with (y_scale, y_zp).
void qgemm(KernelContext &c) {
  const Tensor &a = c.in(0), &b = c.in(3);
  if (a.rank() != 2 || b.rank() != 2) throw std::runtime_error("QGemm operands must be matrices");
  bool transA = c.node.getInt("transA", 0), transB = c.node.getInt("transB", 0);
  double alpha = c.node.getFloat("alpha", 1.f);
  double sa = scalarScale(c.in(1), "a_scale");
  const Tensor *azp = opt(c, 2);
  if (azp && azp->numel() != 1) throw std::runtime_error("a_zero_point must be one value (per tensor)");
  int64_t K = transA ? a.dim(0) : a.dim(1);
  int64_t N = transB ? b.dim(0) : b.dim(1);
  double ma = 0, mb = 0;
  Tensor af = shifted(a, azp, -1, DType::Float64, ma);
  Tensor bf = shifted(b, opt(c, 5), transB ? 0 : 1, DType::Float64, mb);
  if (exactType(K, ma, mb) == DType::Float32) { af = castTensor(af, DType::Float32); bf = castTensor(bf, DType::Float32); }
  // The float Gemm on the shifted operands, without alpha (kept exact).
  Node plain = c.node;
  plain.attrs.erase("alpha");
  plain.attrs.erase("beta");
  const KernelInfo *k = findKernel("Gemm");
  if (!k) throw std::runtime_error("no Gemm kernel");
  KernelContext inner{plain, 13, {&af, &bf}, std::vector<Tensor>(1)};
  k->run(inner);
  Tensor acc = castTensor(inner.outputs[0], DType::Float64);
  int64_t M = acc.dim(0);
  if (acc.dim(1) != N) throw std::runtime_error("QGemm: unexpected product shape " + acc.describe());
  const Tensor &sbT = c.in(4);
  int64_t nsb = sbT.numel();
  if (nsb != 1 && nsb != N) throw std::runtime_error("b_scale " + sbT.describe() + " is neither one value nor one per column");
  std::vector<double> sb = asDoubles(sbT);
  const Tensor *bias = opt(c, 6);
  std::vector<double> cv = bias ? asDoubles(*bias) : std::vector<double>();
  auto biasAt = [&](int64_t m, int64_t n) -> double {
    if (!bias) return 0.0;
    int64_t cn = bias->numel();
    if (cn == 1) return cv[0];
    if (cn == N && (bias->rank() == 1 || bias->dim(0) == 1)) return cv[n];
    if (cn == M && bias->rank() == 2 && bias->dim(1) == 1) return cv[m];
    if (cn == M * N) return cv[m * N + n];
    throw std::runtime_error("QGemm: C " + bias->describe() + " does not broadcast to [" + std::to_string(M) + ", " + std::to_string(N) + "]");
  };
  const double *pa = acc.data<double>();
  Tensor y(DType::Float32, {M, N});
  float *py = y.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      py[m * N + n] = static_cast<float>(alpha * sa * sb[nsb > 1 ? n : 0] * (pa[m * N + n] + biasAt(m, n)));
  if (!c.hasInput(7)) {
    c.outputs[0] = std::move(y);
    return;
  }
  c.outputs[0] = quantPerTensor(y, c.in(7), opt(c, 8), a.dtype());
}

std::string qlinearCheck(const CheckContext &c, std::initializer_list<size_t> quantized, std::initializer_list<size_t> scales) {
  std::string why = int8Inputs(c, quantized);
  return why.empty() ? scaleInputs(c, scales) : why;
}

} // namespace

void registerQuantKernels() {
  registerKernel("QuantizeLinear", {quantizeLinear, quantizeCheck, {}, HalfPolicy::Native});
  registerKernel("DequantizeLinear", {dequantizeLinear, dequantizeCheck, {}, HalfPolicy::Native});
  registerKernel("DynamicQuantizeLinear", {dynamicQuantizeLinear, [](const CheckContext &c) -> std::string {
                                             DType t = c.in(0);
                                             if (t != DType::Undefined && !isFloatType(t))
                                               return std::string("DynamicQuantizeLinear of element type ") + dtypeName(t) + " is not supported";
                                             return "";
                                           },
                                           {}, HalfPolicy::Native});
  registerKernel("MatMulInteger", {matMulInteger, [](const CheckContext &c) { return int8Inputs(c, {0, 1, 2, 3}); }, {}, HalfPolicy::Native});
  registerKernel("ConvInteger", {convInteger, [](const CheckContext &c) {
                                   std::string why = int8Inputs(c, {0, 1, 2, 3});
                                   return why.empty() ? convAttrCheck(c) : why;
                                 },
                                 {}, HalfPolicy::Native});
  KernelInfo qMatMul{qlinearMatMul, [](const CheckContext &c) {
                        std::string why = int8Inputs(c, {0, 2, 3, 5, 7});
                        return why.empty() ? scaleInputs(c, {1, 4, 6}) : why;
                      },
                      {}, HalfPolicy::Native};
  KernelInfo qConv{qlinearConv, [](const CheckContext &c) {
                     std::string why = int8Inputs(c, {0, 2, 3, 5, 7});
                     if (why.empty()) why = scaleInputs(c, {1, 4, 6});
                     if (why.empty() && c.in(8) != DType::Undefined && c.in(8) != DType::Int32)
                       why = std::string("QLinearConv bias of element type ") + dtypeName(c.in(8)) + " is not supported (int32)";
                     return why.empty() ? convAttrCheck(c) : why;
                   },
                   {}, HalfPolicy::Native};
  registerKernel("QLinearMatMul", qMatMul);
  registerKernel("QLinearConv", qConv);

  // com.microsoft contrib ops of onnxruntime's QOperator quantizer.
  const std::string ms = "com.microsoft";
  registerKernel(ms, "QLinearAdd", {qlinearAdd, [](const CheckContext &c) { return qlinearCheck(c, {0, 2, 3, 5, 7}, {1, 4, 6}); }, {}, HalfPolicy::Native});
  registerKernel(ms, "QLinearMul", {qlinearMul, [](const CheckContext &c) { return qlinearCheck(c, {0, 2, 3, 5, 7}, {1, 4, 6}); }, {}, HalfPolicy::Native});
  registerKernel(ms, "QLinearSoftmax", {qlinearSoftmax, [](const CheckContext &c) { return qlinearCheck(c, {0, 2, 4}, {1, 3}); }, {}, HalfPolicy::Native});
  registerKernel(ms, "QLinearLeakyRelu", {qlinearLeakyRelu, [](const CheckContext &c) { return qlinearCheck(c, {0, 2, 4}, {1, 3}); }, {}, HalfPolicy::Native});
  registerKernel(ms, "QLinearSigmoid", {qlinearSigmoid, [](const CheckContext &c) { return qlinearCheck(c, {0, 2, 4}, {1, 3}); }, {}, HalfPolicy::Native});
  registerKernel(ms, "QLinearGlobalAveragePool", {qlinearGlobalAveragePool, [](const CheckContext &c) -> std::string {
                                                   if (c.node.getInt("channels_last", 0)) return "QLinearGlobalAveragePool with channels_last = 1 is not supported";
                                                   return qlinearCheck(c, {0, 2, 4}, {1, 3});
                                                 },
                                                 {}, HalfPolicy::Native});
  registerKernel(ms, "QLinearConcat", {qlinearConcat, [](const CheckContext &c) -> std::string {
                                         for (size_t i = 2; i < c.inputTypes.size(); i += 3) {
                                           std::string why = qlinearCheck(c, {i, i + 2}, {i + 1});
                                           if (!why.empty()) return why;
                                         }
                                         return qlinearCheck(c, {1}, {0});
                                       },
                                       {}, HalfPolicy::Native});
  registerKernel(ms, "QGemm", {qgemm, [](const CheckContext &c) -> std::string {
                                 std::string why = qlinearCheck(c, {0, 2, 3, 5, 8}, {1, 4, 7});
                                 if (why.empty() && c.in(6) != DType::Undefined && c.in(6) != DType::Int32)
                                   why = std::string("QGemm C of element type ") + dtypeName(c.in(6)) + " is not supported (int32)";
                                 return why;
                               },
                               {}, HalfPolicy::Native});
  // The ONNX-domain integer ops, as onnxruntime also registers them there.
  registerKernel(ms, "QLinearConv", qConv);
  registerKernel(ms, "QLinearMatMul", qMatMul);
}

} // namespace hetplan::runtime::cpu
