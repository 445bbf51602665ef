//===- Checked.h - checked arithmetic for sizes -----------------*- C++ -*-===//
//
// One place for the arithmetic of element counts and byte sizes that come
// from files (model dims, .npy headers, external-data offsets, C API
// shapes): every product and sum is checked, and an overflow is an error
// (std::runtime_error with one line), never a wrapped value that a kernel
// would later index with.
//
// The inline, non-throwing forms below serve the compiler side, built
// without exceptions: the het dialect's verifier (tensor sizes), the shape
// rules, and the planner's batch and memory arithmetic.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// a * b, or throws "WHAT overflows" (`what` names the quantity).
int64_t checkedMul(int64_t a, int64_t b, const std::string &what);
/// a + b, or throws "WHAT overflows".
int64_t checkedAdd(int64_t a, int64_t b, const std::string &what);
/// The element count of `shape`. Throws when a dim is negative or when the
/// product of its non-zero dims exceeds INT64_MAX (so every stride and
/// partial product computed from the shape fits int64 as well, even when
/// another dim is 0).
int64_t checkedNumel(const std::vector<int64_t> &shape);
/// `count` elements of `elemSize` bytes, or throws when that exceeds
/// PTRDIFF_MAX bytes (what an allocation or pointer offset can hold).
size_t checkedBytes(int64_t count, size_t elemSize, const std::string &what);

/// a * b into `out`; false when that overflows int64 (`out` is then unusable).
inline bool mulInto(int64_t a, int64_t b, int64_t &out) {
  return !__builtin_mul_overflow(a, b, &out);
}
/// a + b into `out`; false when that overflows int64.
inline bool addInto(int64_t a, int64_t b, int64_t &out) {
  return !__builtin_add_overflow(a, b, &out);
}
/// The element count of `rank` dims into `out`; false when a dim is negative
/// or the product of the non-zero dims overflows int64 (as checkedNumel).
inline bool numelInto(const int64_t *dims, size_t rank, int64_t &out) {
  int64_t nonZero = 1;
  bool zero = false;
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) return false;
    if (dims[i] == 0) zero = true;
    else if (!mulInto(nonZero, dims[i], nonZero)) return false;
  }
  out = zero ? 0 : nonZero;
  return true;
}
/// `value` (a count of bytes or samples computed in double) as int64 into
/// `out`; false when it is NaN, negative or not below 2^63 (where the cast
/// would be undefined).
inline bool countInto(double value, int64_t &out) {
  if (!(value >= 0.0) || !(value < 9223372036854775808.0)) return false;
  out = static_cast<int64_t>(value);
  return true;
}
/// `value` as a count for a report field: NaN and negatives give 0, and
/// anything from 2^63 on gives INT64_MAX, never an undefined cast.
inline int64_t saturatedCount(double value) {
  int64_t out = 0;
  if (countInto(value, out)) return out;
  return value > 0.0 ? INT64_MAX : 0;
}

} // namespace hetplan::runtime
