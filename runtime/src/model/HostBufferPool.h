//===- HostBufferPool.h - Host tensor buffers kept for reuse -----*- C++ -*-===//
//
// The executor drops every intermediate after its last reader (its liveness
// plan); without a pool each drop is a free() and the next node's output a
// fresh malloc, which for large buffers is an mmap whose pages fault in again
// on first touch (~20% of a 2.6 ms MatMul on an FFN layer). Released buffers
// of 64 KiB and more go back to a free list by size class (a quarter of a
// power of two: at most 25% slack), capped in total bytes, so that from the
// second run on a node's output takes a warm buffer that the same node (or
// another of that size) used before. Sanitizer builds and
// HETPLAN_HOST_POOL_BYTES=0 bypass it (each buffer then is plain new/delete, so
// use-after-free stays visible).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hetplan::runtime {

/// A buffer of at least `bytes` (64-byte aligned when pooled), zeroed when
/// `zero`; the deleter returns it to the pool.
std::shared_ptr<uint8_t> takeHostBuffer(size_t bytes, bool zero);

} // namespace hetplan::runtime
