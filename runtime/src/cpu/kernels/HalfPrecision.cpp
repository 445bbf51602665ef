//===- HalfPrecision.cpp - float16/bfloat16 through float32 kernels -------===//
//
// The one mechanism for half-precision models: registerKernel passes every
// KernelInfo through applyHalfPolicy. A kernel whose policy resolves to
// Upcast (by default every kernel that lists float32 among its types) gets a
// wrapper that converts its float16/bfloat16 inputs to float32 (exact), runs
// the float32 kernel, and rounds its float32 outputs back to the half type
// (round half to even). Kernels that move bytes (Reshape, Gather, Concat...)
// or read half values themselves (Cast, DequantizeLinear) stay Native.
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace hetplan::runtime::cpu {

namespace {
bool isHalf(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

/// float32 copies of half inputs that are views (weights in the model file,
/// folded constants; also graph inputs handed over as views of the caller's
/// memory), made once per (node, input) and reused while the source bytes
/// are the same (a full compare against a copy of them: a view is not
/// guaranteed immutable). The copy is handed to the kernel as a view, so
/// the kernel's own caches (reordered Conv/MatMul weights) hit too; when the
/// bytes changed, the kernel gets a fresh owned copy (no caching) and the
/// entry is replaced. At most 1 GiB of copies; the cache is dropped when
/// it would exceed.
struct Widened {
  DType dtype = DType::Undefined;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  std::shared_ptr<Tensor> wide;
};
std::mutex gWideMutex;
std::map<std::pair<const void *, size_t>, Widened> gWide;
size_t gWideBytes = 0;
constexpr size_t kMaxWideBytes = size_t(1) << 30;

Tensor widenConstant(const Node &node, size_t input, const Tensor &t) {
  auto key = std::make_pair(static_cast<const void *>(&node), input);
  {
    std::lock_guard<std::mutex> lock(gWideMutex);
    auto it = gWide.find(key);
    if (it != gWide.end() && it->second.dtype == t.dtype() && it->second.shape == t.shape() &&
        it->second.bytes.size() == t.nbytes() && std::memcmp(it->second.bytes.data(), t.raw(), t.nbytes()) == 0) {
      auto w = it->second.wide;
      return Tensor::view(DType::Float32, w->shape(), w->raw(), w);
    }
  }
  Tensor wide = castTensor(t, DType::Float32);
  auto w = std::make_shared<Tensor>(wide.clone());
  const char *src = static_cast<const char *>(t.raw());
  std::lock_guard<std::mutex> lock(gWideMutex);
  auto it = gWide.find(key);
  if (it != gWide.end()) gWideBytes -= std::min(gWideBytes, it->second.wide->nbytes() + it->second.bytes.size());
  size_t add = w->nbytes() + t.nbytes();
  if (gWideBytes + add > kMaxWideBytes) {
    gWide.clear();
    gWideBytes = 0;
  }
  gWideBytes += add;
  gWide[key] = Widened{t.dtype(), t.shape(), std::vector<char>(src, src + t.nbytes()), w};
  return wide;
}
} // namespace

KernelInfo applyHalfPolicy(KernelInfo info) {
  bool upcast = info.half == HalfPolicy::Upcast ||
                (info.half == HalfPolicy::Auto &&
                 std::find(info.types.begin(), info.types.end(), DType::Float32) != info.types.end());
  if (!upcast || !info.run) return info;
  if (!info.types.empty())
    for (DType h : {DType::Float16, DType::BFloat16})
      if (std::find(info.types.begin(), info.types.end(), h) == info.types.end()) info.types.push_back(h);
  auto run = std::move(info.run);
  info.run = [run](KernelContext &c) {
    DType half = DType::Undefined;
    for (size_t i = 0; i < c.inputs.size() && half == DType::Undefined; ++i)
      if (c.hasInput(i) && isHalf(c.inputs[i]->dtype())) half = c.inputs[i]->dtype();
    if (half == DType::Undefined) {
      run(c);
      return;
    }
    std::vector<Tensor> wide(c.inputs.size());
    KernelContext inner{c.node, c.opset, c.inputs, std::vector<Tensor>(c.outputs.size())};
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (c.hasInput(i) && isHalf(c.inputs[i]->dtype())) {
        const Tensor &t = *c.inputs[i];
        wide[i] = t.isView() && t.numel() >= 64 ? widenConstant(c.node, i, t) : castTensor(t, DType::Float32);
        inner.inputs[i] = &wide[i];
      }
    run(inner);
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      Tensor &o = inner.outputs[i];
      c.outputs[i] = o.defined() && o.dtype() == DType::Float32 ? castTensor(o, half) : std::move(o);
    }
  };
  return info;
}

} // namespace hetplan::runtime::cpu
