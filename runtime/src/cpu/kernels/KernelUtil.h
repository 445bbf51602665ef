//===- KernelUtil.h - helpers shared by the CPU kernels ---------*- C++ -*-===//
#pragma once

#include "hetplan/runtime/Kernels.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace hetplan::runtime::cpu {

#define HP_CASE(DTE, TY, ...) case DType::DTE: { using T = TY; __VA_ARGS__; } break;
#define HP_DISPATCH_NUMERIC(DT, ...)                                                    \
  switch (DT) {                                                                         \
    HP_CASE(Float32, float, __VA_ARGS__) HP_CASE(Float64, double, __VA_ARGS__)          \
    HP_CASE(Int8, int8_t, __VA_ARGS__) HP_CASE(UInt8, uint8_t, __VA_ARGS__)             \
    HP_CASE(Int16, int16_t, __VA_ARGS__) HP_CASE(UInt16, uint16_t, __VA_ARGS__)         \
    HP_CASE(Int32, int32_t, __VA_ARGS__) HP_CASE(UInt32, uint32_t, __VA_ARGS__)         \
    HP_CASE(Int64, int64_t, __VA_ARGS__) HP_CASE(UInt64, uint64_t, __VA_ARGS__)         \
  default: throw std::runtime_error(std::string("unsupported element type ") + dtypeName(DT)); \
  }
#define HP_DISPATCH_ALL(DT, ...)                                                        \
  switch (DT) {                                                                         \
    HP_CASE(Float32, float, __VA_ARGS__) HP_CASE(Float64, double, __VA_ARGS__)          \
    HP_CASE(Int8, int8_t, __VA_ARGS__) HP_CASE(UInt8, uint8_t, __VA_ARGS__)             \
    HP_CASE(Int16, int16_t, __VA_ARGS__) HP_CASE(UInt16, uint16_t, __VA_ARGS__)         \
    HP_CASE(Int32, int32_t, __VA_ARGS__) HP_CASE(UInt32, uint32_t, __VA_ARGS__)         \
    HP_CASE(Int64, int64_t, __VA_ARGS__) HP_CASE(UInt64, uint64_t, __VA_ARGS__)         \
    HP_CASE(Bool, bool, __VA_ARGS__)                                                    \
  default: throw std::runtime_error(std::string("unsupported element type ") + dtypeName(DT)); \
  }
#define HP_DISPATCH_FLOAT(DT, ...)                                                      \
  switch (DT) {                                                                         \
    HP_CASE(Float32, float, __VA_ARGS__) HP_CASE(Float64, double, __VA_ARGS__)          \
  default: throw std::runtime_error(std::string("unsupported element type ") + dtypeName(DT)); \
  }

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

/// out = f(a, b) with numpy broadcasting; A, B input element types, O output.
template <typename A, typename B, typename O, typename F>
Tensor binaryBroadcast(const Tensor &a, const Tensor &b, DType outType, F f) {
  auto shape = broadcastShapes(a.shape(), b.shape());
  Tensor out(outType, shape);
  const A *pa = a.data<A>(); const B *pb = b.data<B>(); O *po = out.data<O>();
  int64_t n = out.numel();
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
  } else if (b.numel() == 1) {
    B vb = pb[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
  } else {
    forEachBroadcast2(shape, broadcastStrides(a.shape(), shape), broadcastStrides(b.shape(), shape),
                      [&](int64_t i, int64_t oa, int64_t ob) { po[i] = f(pa[oa], pb[ob]); });
  }
  return out;
}

inline int64_t normAxis(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    throw std::runtime_error("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return a;
}

/// Converts any numeric tensor to another element type (Cast semantics).
Tensor castTensor(const Tensor &t, DType to);

} // namespace hetplan::runtime::cpu
