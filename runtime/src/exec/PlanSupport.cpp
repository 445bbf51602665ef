//===- PlanSupport.cpp - helpers of the plan executor ---------------------===//
#include "PlanSupport.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace hetplan::runtime::planexec {

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

const char *tpProductOp() {
  static const std::string type = [] {
    const ops::OpDef *found = nullptr;
    for (const ops::OpDef *d : ops::allOps()) {
      if (!d->domain.empty() || d->tp != ops::TpRole::Product) continue;
      if (found && found->type != d->type)
        throw std::logic_error("the op table has two tensor-parallel product ops (" + found->type + ", " + d->type +
                               "); the plan executor splits one");
      found = d;
    }
    if (!found) throw std::logic_error("the op table has no tensor-parallel product op");
    return found->type;
  }();
  return type.c_str();
}

/// Rows [lo, lo + count) of dim 0, viewed (no copy).
Tensor sliceRows(const Tensor &t, int64_t lo, int64_t count) {
  if (t.rank() < 1) fail("cannot slice a scalar on dim 0");
  std::vector<int64_t> shape = t.shape();
  size_t row = shape[0] ? t.nbytes() / size_t(shape[0]) : 0;
  shape[0] = count;
  const char *base = static_cast<const char *>(t.raw());
  if (t.isDevice()) // the same device memory
    return Tensor::onDevice(t.dtype(), shape, const_cast<char *>(base) + row * size_t(lo), t.deviceMemory());
  auto holder = std::make_shared<Tensor>(t);
  return Tensor::view(t.dtype(), shape, base ? base + row * size_t(lo) : nullptr, holder);
}

/// Device pieces (device-resident values) are concatenated on the host.
Tensor concatRows(const std::vector<Tensor> &parts) {
  if (parts.size() == 1) return parts[0];
  for (const Tensor &p : parts)
    if (p.isDevice()) {
      std::vector<Tensor> host;
      for (const Tensor &q : parts) host.push_back(q.toHost());
      return concatRows(host);
    }
  std::vector<int64_t> shape = parts.at(0).shape();
  int64_t rows = 0;
  for (const Tensor &p : parts) {
    std::vector<int64_t> a = p.shape(), b = shape;
    a[0] = b[0] = 0;
    if (a != b || p.dtype() != parts[0].dtype())
      fail("pieces " + parts[0].describe() + " and " + p.describe() + " do not concatenate on dim 0");
    rows += p.dim(0);
  }
  shape[0] = rows;
  Tensor out(parts[0].dtype(), shape);
  char *dst = static_cast<char *>(out.raw());
  for (const Tensor &p : parts) {
    if (p.nbytes()) std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

int64_t tpTag(uint32_t mb, size_t node, size_t nodes, int phase) {
  int64_t tag = kTpTagBase + (int64_t(mb) * int64_t(nodes) + int64_t(node)) * 8 + phase;
  if (tag >= kTrainTagBase) fail("too many micro-batches x nodes for tensor-parallel message tags");
  return tag;
}

namespace {
/// Copies between `whole` and `part` the index ranges `ranges` of `axis`
/// (part holds them back to back): part from whole, or whole from part.
void copyRanges(const Tensor &whole, int axis, const Ranges &ranges, Tensor &part, bool toPart) {
  const auto &shape = whole.shape();
  int64_t outer = 1, inner = 1, n = shape.at(size_t(axis)), w = 0;
  for (int d = 0; d < axis; ++d) outer *= shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  for (auto [lo, hi] : ranges) w += hi - lo;
  size_t e = dtypeSize(whole.dtype()) * size_t(inner);
  char *big = static_cast<char *>(const_cast<void *>(whole.raw()));
  char *small = static_cast<char *>(part.raw());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (auto [lo, hi] : ranges) {
      char *b = big + size_t(o * n + lo) * e, *p = small + size_t(o * w + at) * e;
      if (toPart) std::memcpy(p, b, size_t(hi - lo) * e);
      else std::memcpy(b, p, size_t(hi - lo) * e);
      at += hi - lo;
    }
  }
}
} // namespace

/// The index ranges of `axis` in `t`, back to back (a copy).
Tensor slices(const Tensor &t, int axis, const Ranges &ranges) {
  std::vector<int64_t> shape = t.shape();
  int64_t w = 0;
  for (auto [lo, hi] : ranges) w += hi - lo;
  shape.at(size_t(axis)) = w;
  Tensor out(t.dtype(), shape);
  copyRanges(t, axis, ranges, out, true);
  return out;
}

/// Writes `part` (the ranges back to back) into `dst`'s ranges of `axis`.
void putSlices(Tensor &dst, const Tensor &part, int axis, const Ranges &ranges) {
  copyRanges(dst, axis, ranges, const_cast<Tensor &>(part), false);
}

/// A tensor of `shape` that is zero except for `part` in `ranges` of `axis`.
Tensor zerosWith(const std::vector<int64_t> &shape, const Tensor &part, int axis, const Ranges &ranges) {
  Tensor out(part.dtype(), shape);
  putSlices(out, part, axis, ranges);
  return out;
}

/// What tensor-parallel rank k of t holds of an axis of size n: the k-th
/// 1/t of each of `segments` equal parts (one part: a contiguous 1/t).
Ranges shardRanges(int64_t n, int64_t segments, int64_t k, int64_t t) {
  Ranges out;
  int64_t part = n / std::max<int64_t>(segments, 1);
  for (int64_t s = 0; s < std::max<int64_t>(segments, 1); ++s)
    out.push_back({s * part + part * k / t, s * part + part * (k + 1) / t});
  return out;
}

/// Elements [lo, hi) of the tensors `names` (in `values`; offsets[i]: where
/// names[i] starts in the list laid end to end) as one float32 tensor; a
/// missing tensor reads as zeros (a gradient no micro-batch reached).
Tensor flatRange(const std::map<std::string, Tensor> &values, const std::vector<std::string> &names,
                 const std::vector<int64_t> &offsets, int64_t lo, int64_t hi) {
  Tensor out(DType::Float32, {hi - lo});
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t a = std::max(lo, offsets[i]), b = std::min(hi, offsets[i + 1]);
    if (a >= b) continue;
    auto it = values.find(names[i]);
    if (it == values.end() || !it->second.defined()) continue;
    if (it->second.dtype() != DType::Float32 || it->second.numel() != offsets[i + 1] - offsets[i])
      fail("'" + names[i] + "' is " + it->second.describe() + ", not the parameter's float32 size");
    std::memcpy(out.data<float>() + (a - lo), it->second.data<float>() + (a - offsets[i]), size_t(b - a) * sizeof(float));
  }
  return out;
}

/// Writes `flat`, elements [lo, lo + flat.numel()) of that list, into the
/// tensors of `values`; a missing one is made (zeros) with `shapes`' shape.
void scatterFlat(const Tensor &flat, int64_t lo, const std::vector<std::string> &names,
                 const std::vector<int64_t> &offsets, std::map<std::string, Tensor> &values,
                 const std::map<std::string, Tensor> &shapes) {
  int64_t hi = lo + flat.numel();
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t a = std::max(lo, offsets[i]), b = std::min(hi, offsets[i + 1]);
    if (a >= b) continue;
    Tensor &t = values[names[i]];
    if (!t.defined()) t = Tensor(DType::Float32, shapes.at(names[i]).shape());
    std::memcpy(t.data<float>() + (a - offsets[i]), flat.data<float>() + (a - lo), size_t(b - a) * sizeof(float));
  }
}

/// Writes rows [0, part.dim(0)) of `part` at row `at` of `dst`.
void putRows(Tensor &dst, int64_t at, const Tensor &part) {
  if (part.numel() == 0) return;
  size_t row = dst.dim(0) ? dst.nbytes() / size_t(dst.dim(0)) : 0;
  if (part.nbytes() != row * size_t(part.dim(0)) || part.dtype() != dst.dtype())
    fail("gradient piece " + part.describe() + " does not fit " + dst.describe());
  std::memcpy(static_cast<char *>(dst.raw()) + row * size_t(at), part.raw(), part.nbytes());
}

} // namespace hetplan::runtime::planexec
