//===- HostBufferPool.cpp -------------------------------------------------===//
#include "HostBufferPool.h"

#include "hetplan/runtime/Tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HETPLAN_POOL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define HETPLAN_POOL_SANITIZED 1
#endif
#endif

namespace hetplan::runtime {
namespace {

constexpr size_t kMinPooled = size_t(64) << 10;
constexpr size_t kAlign = 64;

/// `bytes` rounded up to its size class: a multiple of a quarter of the
/// largest power of two not above it.
size_t sizeClass(size_t bytes) {
  size_t p = size_t(1) << (63 - __builtin_clzll(bytes));
  size_t step = p / 4;
  return (bytes + step - 1) / step * step;
}

class Pool {
public:
  static Pool &get() {
    static Pool *pool = new Pool(); // never destroyed: buffers may outlive static destructors
    return *pool;
  }

  bool enabled() const { return enabled_; }

  void *take(size_t cls) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void *p = it->second.back();
        it->second.pop_back();
        cached_ -= cls;
        return p;
      }
    }
    void *p = std::aligned_alloc(kAlign, cls); // cls is a multiple of 64 (>= 64 KiB)
    if (!p) throw std::bad_alloc();
    return p;
  }

  void give(void *p, size_t cls) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + cls <= limit_) {
        free_[cls].push_back(p);
        cached_ += cls;
        return;
      }
    }
    std::free(p);
  }

  size_t cached() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

  void setLimit(size_t bytes) {
    std::vector<void *> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = bytes;
      for (auto it = free_.begin(); it != free_.end() && cached_ > limit_; ++it)
        while (!it->second.empty() && cached_ > limit_) {
          drop.push_back(it->second.back());
          it->second.pop_back();
          cached_ -= it->first;
        }
    }
    for (void *p : drop) std::free(p);
  }

private:
  Pool() {
#ifdef HETPLAN_POOL_SANITIZED
    enabled_ = false;
#endif
    // HETPLAN_HOST_POOL_BYTES: the cap on cached bytes; 0 turns the pool off.
    if (const char *e = std::getenv("HETPLAN_HOST_POOL_BYTES")) {
      char *end = nullptr;
      unsigned long long v = std::strtoull(e, &end, 10);
      if (end != e && *end == '\0' && e[0] != '-') {
        limit_ = size_t(v);
        enabled_ = enabled_ && v > 0;
      } else {
        // Once per process (the pool is made once): the setting is kept.
        std::fprintf(stderr,
                     "hetplan: warning: HETPLAN_HOST_POOL_BYTES='%s' is not a byte count (0 turns the pool "
                     "off); the default cap of %zu bytes stays\n",
                     e, limit_);
      }
    }
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void *>> free_;
  size_t cached_ = 0;
  size_t limit_ = size_t(1) << 30;
  bool enabled_ = true;
};

} // namespace

std::shared_ptr<uint8_t> takeHostBuffer(size_t bytes, bool zero) {
  Pool &pool = Pool::get();
  if (bytes < kMinPooled || !pool.enabled()) {
    uint8_t *p = zero ? new uint8_t[bytes]() : new uint8_t[bytes];
    return std::shared_ptr<uint8_t>(p, std::default_delete<uint8_t[]>());
  }
  size_t cls = sizeClass(bytes);
  auto *p = static_cast<uint8_t *>(pool.take(cls));
  if (zero) std::memset(p, 0, bytes);
  return std::shared_ptr<uint8_t>(p, [cls](uint8_t *q) { Pool::get().give(q, cls); });
}

bool hostBufferPoolEnabled() { return Pool::get().enabled(); }

size_t hostBufferPoolBytes() { return Pool::get().cached(); }

void setHostBufferPoolLimit(size_t bytes) { Pool::get().setLimit(bytes); }

} // namespace hetplan::runtime
