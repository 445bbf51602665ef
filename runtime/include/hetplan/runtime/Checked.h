//===- Checked.h - checked arithmetic for sizes -----------------*- C++ -*-===//
//
// One place for the arithmetic of element counts and byte sizes that come
// from files (model dims, .npy headers, external-data offsets, C API
// shapes): every product and sum is checked, and an overflow is an error
// (std::runtime_error with one line), never a wrapped value that a kernel
// would later index with.
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

} // namespace hetplan::runtime
