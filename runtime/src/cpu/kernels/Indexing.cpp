//===- Indexing.cpp - GatherND, ScatterND, ScatterElements, OneHot, ... ---===//
//
// Index-driven data movement that PyTorch's exporters emit (dynamo's
// GatherND masks, index_put as ScatterND, scatter_ as ScatterElements),
// OneHot, NonZero, EyeLike and a generic Einsum. Negative indices count from
// the end (as ONNX allows); an index out of range is an error naming it.
//
//===----------------------------------------------------------------------===//
#include "KernelUtil.h"

#include <cmath>
#include <map>
#include <set>

namespace hetplan::runtime::cpu {
namespace {


int64_t wrapIndex(int64_t i, int64_t n, const char *op) {
  int64_t k = i < 0 ? i + n : i;
  if (k < 0 || k >= n)
    throw std::runtime_error(std::string(op) + " index " + std::to_string(i) + " out of range [" +
                             std::to_string(-n) + ", " + std::to_string(n) + ")");
  return k;
}

std::string indexTypeCheck(const CheckContext &c, size_t i) {
  DType t = c.in(i);
  if (t != DType::Undefined && t != DType::Int64 && t != DType::Int32)
    return std::string("indices of element type ") + dtypeName(t) + " are not supported (int32/int64)";
  return "";
}

// ---- GatherND -------------------------------------------------------------

void gatherND(KernelContext &c) {
  const Tensor &x = c.in(0), &it = c.in(1);
  int64_t b = c.node.getInt("batch_dims", 0), r = x.rank(), q = it.rank();
  if (q < 1 || b < 0 || b >= std::min(r, q)) throw std::runtime_error("GatherND: batch_dims " + std::to_string(b) + " out of range");
  int64_t k = it.dim(-1);
  if (k < 1 || k > r - b) throw std::runtime_error("GatherND: indices' last dim " + std::to_string(k) + " exceeds data rank - batch_dims");
  for (int64_t d = 0; d < b; ++d)
    if (x.dim(d) != it.dim(d)) throw std::runtime_error("GatherND: batch dims of data and indices differ");
  std::vector<int64_t> outShape(it.shape().begin(), it.shape().end() - 1);
  outShape.insert(outShape.end(), x.shape().begin() + b + k, x.shape().end());
  int64_t batch = 1, slice = 1, outer = 1;
  for (int64_t d = 0; d < b; ++d) batch *= x.dim(d);
  for (int64_t d = b + k; d < r; ++d) slice *= x.dim(d);
  for (int64_t d = b; d < q - 1; ++d) outer *= it.dim(d);
  int64_t perBatch = 1;
  for (int64_t d = b; d < r; ++d) perBatch *= x.dim(d);
  std::vector<int64_t> st(k); // element strides of the indexed dims
  for (int64_t t = k; t-- > 0;) st[t] = t == k - 1 ? slice : st[t + 1] * x.dim(b + t + 1);
  auto idx = it.toInt64Vector();
  Tensor out(x.dtype(), outShape);
  size_t es = dtypeSize(x.dtype()), bytes = static_cast<size_t>(slice) * es;
  const char *px = static_cast<const char *>(x.raw());
  char *po = static_cast<char *>(out.raw());
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t j = 0; j < outer; ++j) {
      const int64_t *ix = idx.data() + (bi * outer + j) * k;
      int64_t off = bi * perBatch;
      for (int64_t t = 0; t < k; ++t) off += wrapIndex(ix[t], x.dim(b + t), "GatherND") * st[t];
      if (bytes) std::memcpy(po + (bi * outer + j) * bytes, px + off * es, bytes);
    }
  c.outputs[0] = std::move(out);
}

// ---- ScatterND / ScatterElements -----------------------------------------

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parseReduction(const std::string &s) {
  if (s == "none") return Reduction::None;
  if (s == "add") return Reduction::Add;
  if (s == "mul") return Reduction::Mul;
  if (s == "max") return Reduction::Max;
  if (s == "min") return Reduction::Min;
  throw std::runtime_error("reduction '" + s + "' is not supported");
}

std::string reductionCheck(const CheckContext &c) {
  std::string r = c.node.getString("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    return c.node.opType + " reduction '" + r + "' is not supported (none/add/mul/max/min)";
  if ((r == "max" || r == "min") && c.opset < 18)
    return c.node.opType + " reduction '" + r + "' needs opset 18";
  if (r != "none" && c.in(0) != DType::Undefined && !isFloatType(c.in(0)) && !isIntegerType(c.in(0)))
    return c.node.opType + " reduction '" + r + "' on element type " + dtypeName(c.in(0)) + " is not supported";
  if (c.in(0) != DType::Undefined && c.in(2) != DType::Undefined && c.in(0) != c.in(2))
    return std::string("updates of element type ") + dtypeName(c.in(2)) + " differ from data's " + dtypeName(c.in(0));
  return indexTypeCheck(c, 1);
}

/// dst[i] = combine(dst[i], src[j]) over `n` elements.
template <typename T> inline void combine(T *dst, const T *src, int64_t n, Reduction red) {
  for (int64_t i = 0; i < n; ++i) {
    switch (red) {
    case Reduction::None: dst[i] = src[i]; break;
    case Reduction::Add: dst[i] = static_cast<T>(dst[i] + src[i]); break;
    case Reduction::Mul: dst[i] = static_cast<T>(dst[i] * src[i]); break;
    case Reduction::Max: dst[i] = std::max(dst[i], src[i]); break;
    case Reduction::Min: dst[i] = std::min(dst[i], src[i]); break;
    }
  }
}

void scatterND(KernelContext &c) {
  const Tensor &x = c.in(0), &it = c.in(1), &up = c.in(2);
  Reduction red = parseReduction(c.node.getString("reduction", "none"));
  int64_t r = x.rank(), q = it.rank();
  if (q < 1) throw std::runtime_error("ScatterND: indices must have rank >= 1");
  int64_t k = it.dim(-1);
  if (k < 1 || k > r) throw std::runtime_error("ScatterND: indices' last dim exceeds data rank");
  int64_t slice = 1;
  for (int64_t d = k; d < r; ++d) slice *= x.dim(d);
  int64_t n = k ? it.numel() / k : 0;
  if (up.numel() != n * slice) throw std::runtime_error("ScatterND: updates shape " + shapeString(up.shape()) + " does not match");
  if (up.dtype() != x.dtype()) throw std::runtime_error("ScatterND: updates element type differs from data's");
  auto xs = stridesOf(x.shape());
  auto idx = it.toInt64Vector();
  Tensor out = x.clone();
  size_t es = dtypeSize(x.dtype());
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t t = 0; t < k; ++t) off += wrapIndex(idx[i * k + t], x.dim(t), "ScatterND") * xs[t];
    if (red == Reduction::None) {
      std::memcpy(static_cast<char *>(out.raw()) + off * es, static_cast<const char *>(up.raw()) + i * slice * es, slice * es);
      continue;
    }
    HP_DISPATCH_NUMERIC(x.dtype(), combine<T>(out.data<T>() + off, up.data<T>() + i * slice, slice, red));
  }
  c.outputs[0] = std::move(out);
}

void scatterElements(KernelContext &c) {
  const Tensor &x = c.in(0), &it = c.in(1), &up = c.in(2);
  Reduction red = parseReduction(c.node.getString("reduction", "none"));
  int64_t r = x.rank();
  int64_t axis = normAxis(c.node.getInt("axis", 0), r);
  if (it.shape() != up.shape() || it.rank() != r)
    throw std::runtime_error(c.node.opType + ": indices " + shapeString(it.shape()) + " and updates " + shapeString(up.shape()) +
                             " must have one shape of data's rank");
  if (up.dtype() != x.dtype()) throw std::runtime_error(c.node.opType + ": updates element type differs from data's");
  auto xs = stridesOf(x.shape());
  auto idx = it.toInt64Vector();
  Tensor out = x.clone();
  size_t es = dtypeSize(x.dtype());
  int64_t n = it.numel();
  std::vector<int64_t> pos(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      int64_t p = d == axis ? wrapIndex(idx[i], x.dim(d), c.node.opType.c_str()) : pos[d];
      if (p >= x.dim(d)) throw std::runtime_error(c.node.opType + ": indices shape exceeds data's");
      off += p * xs[d];
    }
    if (red == Reduction::None)
      std::memcpy(static_cast<char *>(out.raw()) + off * es, static_cast<const char *>(up.raw()) + i * es, es);
    else
      HP_DISPATCH_NUMERIC(x.dtype(), combine<T>(out.data<T>() + off, up.data<T>() + i, 1, red));
    for (int64_t d = r - 1; d >= 0; --d) { if (++pos[d] < it.dim(d)) break; pos[d] = 0; }
  }
  c.outputs[0] = std::move(out);
}

// ---- OneHot, NonZero, EyeLike --------------------------------------------

void oneHot(KernelContext &c) {
  const Tensor &ind = c.in(0), &vals = c.in(2);
  if (c.in(1).numel() != 1) throw std::runtime_error("OneHot: depth must have one element");
  int64_t depth = static_cast<int64_t>(c.in(1).scalarAsDouble(0));
  if (depth < 1) throw std::runtime_error("OneHot: depth " + std::to_string(depth) + " must be positive");
  if (vals.numel() != 2) throw std::runtime_error("OneHot: values must have 2 elements [off, on]");
  int64_t r = ind.rank() + 1, axis = normAxis(c.node.getInt("axis", -1), r);
  std::vector<int64_t> shape = ind.shape();
  shape.insert(shape.begin() + axis, depth);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= ind.dim(d);
  for (int64_t d = axis; d < ind.rank(); ++d) inner *= ind.dim(d);
  Tensor out(vals.dtype(), shape);
  size_t es = dtypeSize(vals.dtype());
  const char *off = static_cast<const char *>(vals.raw()), *on = off + es;
  char *po = static_cast<char *>(out.raw());
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(po + i * es, off, es);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double v = ind.scalarAsDouble(o * inner + j);
      int64_t k = static_cast<int64_t>(v);
      if (k < 0) k += depth;
      if (k < 0 || k >= depth) continue; // out of range: all off
      std::memcpy(po + ((o * depth + k) * inner + j) * es, on, es);
    }
  c.outputs[0] = std::move(out);
}

void nonZero(KernelContext &c) {
  const Tensor &x = c.in(0);
  int64_t r = x.rank(), n = x.numel();
  std::vector<int64_t> hits;
  size_t es = dtypeSize(x.dtype());
  const unsigned char *p = static_cast<const unsigned char *>(x.raw());
  bool isHalfT = x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16;
  for (int64_t i = 0; i < n; ++i) {
    bool nz;
    if (isFloatType(x.dtype()) && !isHalfT) nz = x.scalarAsDouble(i) != 0.0; // -0.0 is zero
    else if (isHalfT) nz = (x.data<uint16_t>()[i] & 0x7fffu) != 0;
    else { nz = false; for (size_t b = 0; b < es; ++b) nz = nz || p[i * es + b]; }
    if (nz) hits.push_back(i);
  }
  int64_t nnz = static_cast<int64_t>(hits.size());
  Tensor out(DType::Int64, {std::max<int64_t>(r, 1), nnz}); // a scalar: numpy's [1, nnz] of zeros
  auto st = stridesOf(x.shape());
  int64_t *po = out.data<int64_t>();
  for (int64_t j = 0; j < nnz; ++j)
    for (int64_t d = 0; d < r; ++d) po[d * nnz + j] = (hits[j] / st[d]) % x.dim(d);
  c.outputs[0] = std::move(out);
}

void eyeLike(KernelContext &c) {
  const Tensor &x = c.in(0);
  if (x.rank() != 2) throw std::runtime_error("EyeLike: input must be 2-D");
  DType dt = c.node.has("dtype") ? static_cast<DType>(c.node.getInt("dtype", 1)) : x.dtype();
  int64_t k = c.node.getInt("k", 0), R = x.dim(0), C = x.dim(1);
  Tensor out(dt, x.shape());
  Tensor one = castTensor(Tensor::scalar<float>(DType::Float32, 1.0f), dt);
  size_t es = dtypeSize(dt);
  for (int64_t i = 0; i < R; ++i)
    if (int64_t j = i + k; j >= 0 && j < C) std::memcpy(static_cast<char *>(out.raw()) + (i * C + j) * es, one.raw(), es);
  c.outputs[0] = std::move(out);
}

// ---- Einsum ---------------------------------------------------------------

struct EinsumSpec {
  std::vector<std::string> terms; // per operand: labels, ellipsis as digits
  std::string out;
};

/// Parses the equation for operands of the given ranks. The ellipsis becomes
/// labels '0'.. (right-aligned across operands, broadcast).
EinsumSpec parseEinsum(std::string eq, const std::vector<int64_t> &ranks) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  std::string lhs = eq, rhs;
  bool explicitOut = false;
  if (auto p = eq.find("->"); p != std::string::npos) { lhs = eq.substr(0, p); rhs = eq.substr(p + 2); explicitOut = true; }
  std::vector<std::string> raw;
  for (size_t s = 0;;) {
    size_t e = lhs.find(',', s);
    raw.push_back(lhs.substr(s, e == std::string::npos ? std::string::npos : e - s));
    if (e == std::string::npos) break;
    s = e + 1;
  }
  if (raw.size() != ranks.size())
    throw std::runtime_error("Einsum: equation has " + std::to_string(raw.size()) + " operands, node has " + std::to_string(ranks.size()));
  int64_t maxEll = 0;
  std::vector<int64_t> ell(raw.size(), -1);
  for (size_t i = 0; i < raw.size(); ++i) {
    auto p = raw[i].find("...");
    if (p == std::string::npos) continue;
    int64_t letters = static_cast<int64_t>(raw[i].size()) - 3;
    ell[i] = ranks[i] - letters;
    if (ell[i] < 0) throw std::runtime_error("Einsum: operand " + std::to_string(i) + " has too few dims for its term");
    maxEll = std::max(maxEll, ell[i]);
  }
  if (maxEll > 10) throw std::runtime_error("Einsum: more than 10 ellipsis dims");
  auto ellLabels = [&](int64_t n) { std::string s; for (int64_t j = maxEll - n; j < maxEll; ++j) s += char('0' + j); return s; };
  EinsumSpec spec;
  for (size_t i = 0; i < raw.size(); ++i) {
    std::string t = raw[i];
    if (auto p = t.find("..."); p != std::string::npos) t = t.substr(0, p) + ellLabels(ell[i]) + t.substr(p + 3);
    if (static_cast<int64_t>(t.size()) != ranks[i])
      throw std::runtime_error("Einsum: term '" + raw[i] + "' does not match operand rank " + std::to_string(ranks[i]));
    for (char ch : t)
      if (!std::isalpha(static_cast<unsigned char>(ch)) && !std::isdigit(static_cast<unsigned char>(ch)))
        throw std::runtime_error(std::string("Einsum: bad label '") + ch + "'");
    spec.terms.push_back(t);
  }
  if (explicitOut) {
    if (auto p = rhs.find("..."); p != std::string::npos) rhs = rhs.substr(0, p) + ellLabels(maxEll) + rhs.substr(p + 3);
    spec.out = rhs;
  } else { // ellipsis dims, then the labels seen once, alphabetically
    std::map<char, int> count;
    for (auto &t : spec.terms) for (char ch : t) ++count[ch];
    spec.out = ellLabels(maxEll);
    for (auto &[ch, n] : count) if (n == 1 && std::isalpha(static_cast<unsigned char>(ch))) spec.out += ch;
  }
  return spec;
}

void einsum(KernelContext &c) {
  std::vector<const Tensor *> ops;
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < c.inputs.size(); ++i) { ops.push_back(&c.in(i)); ranks.push_back(c.in(i).rank()); }
  EinsumSpec spec = parseEinsum(c.node.getString("equation", ""), ranks);
  DType dt = ops[0]->dtype();
  for (auto *t : ops)
    if (t->dtype() != dt) throw std::runtime_error("Einsum: operands of different element types");
  // Label sizes (1 broadcasts against anything).
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t d = 0; d < spec.terms[i].size(); ++d) {
      char l = spec.terms[i][d];
      int64_t n = ops[i]->dim(d);
      auto it = size.find(l);
      if (it == size.end() || it->second == 1) size[l] = n;
      else if (n != 1 && n != it->second)
        throw std::runtime_error(std::string("Einsum: label '") + l + "' has sizes " + std::to_string(it->second) + " and " + std::to_string(n));
    }
  std::string loop = spec.out;
  std::set<char> inOut(spec.out.begin(), spec.out.end());
  for (auto &[l, n] : size) if (!inOut.count(l)) loop += l;
  for (char l : spec.out)
    if (!size.count(l)) throw std::runtime_error(std::string("Einsum: output label '") + l + "' is on no input");
  int64_t L = loop.size(), nOut = spec.out.size();
  std::vector<int64_t> ext(L);
  for (int64_t j = 0; j < L; ++j) ext[j] = size[loop[j]];
  // Per operand: its element stride along each loop label (repeats add up: diagonals).
  std::vector<std::vector<int64_t>> strides(ops.size(), std::vector<int64_t>(L, 0));
  for (size_t i = 0; i < ops.size(); ++i) {
    auto st = stridesOf(ops[i]->shape());
    for (size_t d = 0; d < spec.terms[i].size(); ++d) {
      if (ops[i]->dim(d) == 1 && size[spec.terms[i][d]] != 1) continue; // broadcast
      strides[i][loop.find(spec.terms[i][d])] += st[d];
    }
  }
  std::vector<int64_t> outShape(ext.begin(), ext.begin() + nOut);
  int64_t nRed = 1;
  for (int64_t j = nOut; j < L; ++j) nRed *= ext[j];
  Tensor out(dt, outShape);
  HP_DISPATCH_NUMERIC(dt, {
    std::vector<const T *> ptr;
    for (auto *t : ops) ptr.push_back(t->data<T>());
    T *po = out.data<T>();
    int64_t no = out.numel();
    std::vector<int64_t> idx(L, 0), off(ops.size(), 0);
    for (int64_t o = 0; o < no; ++o) {
      // off[] holds the operands' offsets at reduction index 0 for output o.
      std::vector<int64_t> cur = off;
      std::fill(idx.begin() + nOut, idx.end(), 0);
      double acc = 0;
      for (int64_t rI = 0; rI < nRed; ++rI) {
        double p = 1;
        for (size_t i = 0; i < ops.size(); ++i) p *= static_cast<double>(ptr[i][cur[i]]);
        acc += p;
        for (int64_t d = L - 1; d >= nOut; --d) {
          if (++idx[d] < ext[d]) { for (size_t i = 0; i < ops.size(); ++i) cur[i] += strides[i][d]; break; }
          for (size_t i = 0; i < ops.size(); ++i) cur[i] -= strides[i][d] * (ext[d] - 1);
          idx[d] = 0;
        }
      }
      po[o] = static_cast<T>(acc);
      for (int64_t d = nOut - 1; d >= 0; --d) {
        if (++idx[d] < ext[d]) { for (size_t i = 0; i < ops.size(); ++i) off[i] += strides[i][d]; break; }
        for (size_t i = 0; i < ops.size(); ++i) off[i] -= strides[i][d] * (ext[d] - 1);
        idx[d] = 0;
      }
    }
  });
  c.outputs[0] = std::move(out);
}

std::string einsumCheck(const CheckContext &c) {
  std::string eq = c.node.getString("equation", "");
  if (eq.empty()) return "Einsum without an equation";
  size_t commas = std::count(eq.begin(), eq.end(), ',');
  if (commas + 1 != c.node.inputs.size())
    return "Einsum equation '" + eq + "' names " + std::to_string(commas + 1) + " operands, the node has " + std::to_string(c.node.inputs.size());
  return "";
}

} // namespace

void registerIndexingKernels() {
  registerKernel("GatherND", {gatherND, [](const CheckContext &c) -> std::string {
                                if (c.node.getInt("batch_dims", 0) < 0) return "GatherND batch_dims must be >= 0";
                                return indexTypeCheck(c, 1);
                              },
                              {}, HalfPolicy::Native});
  registerKernel("ScatterND", {scatterND, reductionCheck, {}, HalfPolicy::Upcast});
  registerKernel("ScatterElements", {scatterElements, reductionCheck, {}, HalfPolicy::Upcast});
  registerKernel("Scatter", {scatterElements, [](const CheckContext &c) { return indexTypeCheck(c, 1); }, {}, HalfPolicy::Upcast});
  registerKernel("OneHot", {oneHot, [](const CheckContext &c) -> std::string {
                              for (size_t i : {0, 1})
                                if (DType t = c.in(i); t != DType::Undefined && !isFloatType(t) && !isIntegerType(t))
                                  return std::string("OneHot input ") + std::to_string(i) + " of element type " + dtypeName(t) + " is not supported";
                              return "";
                            },
                            {}, HalfPolicy::Native});
  registerKernel("NonZero", {nonZero, [](const CheckContext &c) -> std::string {
                               DType t = c.in(0);
                               if (t != DType::Undefined && !isFloatType(t) && !isIntegerType(t) && t != DType::Bool)
                                 return std::string("NonZero of element type ") + dtypeName(t) + " is not supported";
                               return "";
                             },
                             {}, HalfPolicy::Native});
  registerKernel("EyeLike", {eyeLike, [](const CheckContext &c) -> std::string {
                               DType t = c.node.has("dtype") ? static_cast<DType>(c.node.getInt("dtype", 1)) : c.in(0);
                               if (t != DType::Undefined && !isFloatType(t) && !isIntegerType(t) && t != DType::Bool)
                                 return std::string("EyeLike to element type ") + dtypeName(t) + " is not supported";
                               return "";
                             },
                             {}, HalfPolicy::Native});
  registerKernel("Einsum", {einsum, einsumCheck, kNumericTypes});
}

} // namespace hetplan::runtime::cpu
