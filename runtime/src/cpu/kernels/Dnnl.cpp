//===- Dnnl.cpp - oneDNN convolution with cached primitives ---------------===//
#include "Dnnl.h"

#include "hetplan/runtime/Tensor.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hetplan::runtime::cpu::onednn {

namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine &cpuEngine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

/// A primitive's scratchpad in a buffer of the host pool: the same warm
/// pages call after call, not an allocation (and page faults) per call.
struct Scratchpad {
  Tensor buf;
  dnnl::memory mem;
  Scratchpad(const dnnl::memory::desc &d, dnnl::engine &eng)
      : buf(Tensor::uninitialized(DType::UInt8, {static_cast<int64_t>(d.get_size())})),
        mem(d, eng, buf.raw()) {}
};

/// The reorders between the caller's plain layouts (x, w, y) and the
/// layouts a primitive chose.
struct Reorders {
  dnnl::memory::desc xUser, wUser, yUser;
  bool xReorder = false, wReorder = false, yReorder = false;
  dnnl::reorder xToPrim, wToPrim, yToUser;
  /// The caller's x and y, and the primitive's src (x reordered in when
  /// the layouts differ) and dst (a temporary then: see finish()).
  struct Io {
    dnnl::memory xu, yu, xp, yp;
  };
  template <typename PD> Io io(const PD &pd, dnnl::engine &eng, const float *x, float *y, dnnl::stream &strm) const {
    Io m{dnnl::memory(xUser, eng, const_cast<float *>(x)), dnnl::memory(yUser, eng, y), {}, {}};
    m.xp = m.xu;
    m.yp = m.yu;
    if (xReorder) {
      m.xp = dnnl::memory(pd.src_desc(), eng);
      xToPrim.execute(strm, m.xu, m.xp);
    }
    if (yReorder) m.yp = dnnl::memory(pd.dst_desc(), eng);
    return m;
  }
  /// Copies dst back to the caller's y when they differ.
  void finish(Io &m, dnnl::stream &strm) const {
    if (yReorder) yToUser.execute(strm, m.yp, m.yu);
  }
  template <typename PD> void plan(const PD &pd, dnnl::engine &eng) {
    if (pd.src_desc() != xUser) {
      xReorder = true;
      xToPrim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, xUser, eng, pd.src_desc()));
    }
    if (pd.weights_desc() != wUser) {
      wReorder = true;
      wToPrim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, wUser, eng, pd.weights_desc()));
    }
    if (pd.dst_desc() != yUser) {
      yReorder = true;
      yToUser = dnnl::reorder(dnnl::reorder::primitive_desc(eng, pd.dst_desc(), eng, yUser));
    }
  }
};

/// A convolution primitive for one geometry.
struct ConvEntry : Reorders {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::reorder sumToPrim;
};

/// The reordered weights of one node, the layout they are in, and the
/// sampled values they came from.
struct WeightsEntry {
  dnnl::memory::desc md;
  std::vector<float> sample;
  const float *src = nullptr;
  std::shared_ptr<dnnl::memory> mem;
  size_t bytes = 0;
};

std::mutex gMutex;
std::unordered_map<std::string, std::shared_ptr<ConvEntry>> gConvs;
std::unordered_map<std::string, std::shared_ptr<WeightsEntry>> gWeights;
size_t gWeightBytes = 0;
constexpr size_t kMaxConvs = 4096;
constexpr size_t kMaxWeightBytes = size_t(2) << 30;

void appendDims(std::string &k, const std::vector<int64_t> &v) {
  for (int64_t d : v) k += std::to_string(d) + ',';
  k += ';';
}

/// The entry cached under `key` in `cache`, made by `make` on first use;
/// null when oneDNN refuses the geometry (dnnl::error).
template <typename Entry, typename Make>
std::shared_ptr<Entry> cachedEntry(std::unordered_map<std::string, std::shared_ptr<Entry>> &cache,
                                   const std::string &key, Make &&make) {
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<Entry> e;
  try {
    e = make();
  } catch (const dnnl::error &) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(gMutex);
  if (cache.size() >= kMaxConvs) cache.clear();
  cache.emplace(key, e);
  return e;
}

dnnl::memory::dims dims(const std::vector<int64_t> &v) { return dnnl::memory::dims(v.begin(), v.end()); }

tag plainTag(size_t rank) {
  switch (rank) {
  case 3: return tag::abc;
  case 4: return tag::abcd;
  case 5: return tag::abcde;
  case 6: return tag::abcdef;
  default: return tag::undef;
  }
}

/// N, spatial..., C (Tensor::channelsLast).
tag channelsLastTag(size_t rank) {
  switch (rank) {
  case 3: return tag::acb;
  case 4: return tag::acdb;
  case 5: return tag::acdeb;
  default: return tag::undef;
  }
}

/// A convolution's window in oneDNN's terms (shared by conv and deconv).
struct Window {
  dnnl::memory::dims strides, dilates, padL, padR;
  explicit Window(const ConvShape &s) {
    for (size_t i = 0; i + 2 < s.x.size(); ++i) {
      strides.push_back(s.stride[i]);
      dilates.push_back(s.dil[i] - 1); // oneDNN counts the holes
      padL.push_back(s.padBegin[i]);
      padR.push_back(s.padEnd[i]);
    }
  }
};

/// The shapes and window of `s`, for primitive cache keys.
void appendConvGeometry(std::string &key, const ConvShape &s) {
  appendDims(key, s.x); appendDims(key, s.w); appendDims(key, s.y); appendDims(key, s.stride);
  appendDims(key, s.dil); appendDims(key, s.padBegin); appendDims(key, s.padEnd);
}

/// EwEltwise::Kind (ElementwiseChain.h) as oneDNN's algorithm.
dnnl::algorithm eltwiseAlgorithm(int64_t kind) {
  switch (kind) {
  case 1: return dnnl::algorithm::eltwise_relu;
  case 2: return dnnl::algorithm::eltwise_clip;
  case 3: return dnnl::algorithm::eltwise_hardswish;
  case 4: return dnnl::algorithm::eltwise_swish;
  case 5: return dnnl::algorithm::eltwise_logistic;
  case 6: return dnnl::algorithm::eltwise_tanh;
  case 7: return dnnl::algorithm::eltwise_gelu_erf;
  default: throw std::runtime_error("internal error: eltwise post-op " + std::to_string(kind));
  }
}

std::shared_ptr<ConvEntry> makeConv(const ConvShape &s, bool hasBias) {
  auto &eng = cpuEngine();
  auto e = std::make_shared<ConvEntry>();
  e->xUser = dnnl::memory::desc(dims(s.x), dt::f32, s.xChannelsLast ? channelsLastTag(s.x.size()) : plainTag(s.x.size()));
  e->yUser = dnnl::memory::desc(dims(s.y), dt::f32, s.yChannelsLast ? channelsLastTag(s.y.size()) : plainTag(s.y.size()));
  std::vector<int64_t> wd = s.w;
  if (s.group > 1) { // [G, M/G, C/G, k...]
    wd[0] = s.w[0] / s.group;
    wd.insert(wd.begin(), s.group);
  }
  e->wUser = dnnl::memory::desc(dims(wd), dt::f32, plainTag(wd.size()));
  Window win(s);
  dnnl::memory::desc xAny(dims(s.x), dt::f32, tag::any), yAny(dims(s.y), dt::f32, tag::any),
      wAny(dims(wd), dt::f32, tag::any), bMd({s.w[0]}, dt::f32, tag::a);
  auto desc = hasBias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, xAny, wAny, bMd,
                                                        yAny, win.strides, win.dilates, win.padL, win.padR)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, xAny, wAny, yAny,
                                                        win.strides, win.dilates, win.padL, win.padR);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.postSum || s.postRelu || s.postEltwise) {
    dnnl::post_ops ops;
    if (s.postSum) ops.append_sum(1.f);
    if (s.postRelu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    if (s.postEltwise) ops.append_eltwise(1.f, eltwiseAlgorithm(s.postEltwise), s.postAlpha, s.postBeta);
    attr.set_post_ops(ops);
  }
  e->pd = dnnl::convolution_forward::primitive_desc(desc, attr, eng);
  e->prim = dnnl::convolution_forward(e->pd);
  e->plan(e->pd, eng);
  if (e->yReorder && s.postSum)
    e->sumToPrim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e->yUser, eng, e->pd.dst_desc()));
  return e;
}

/// Up to 256 weight values spread over the tensor (first and last included).
std::vector<float> sampleOf(const float *w, int64_t n) {
  // Every value of small weights (then the cache is exact even for
  // parameters updated in place: see kExactWeights), 256 of larger ones.
  int64_t k = n <= kExactWeights ? n : 256;
  std::vector<float> s(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) s[i] = w[k > 1 ? i * (n - 1) / (k - 1) : 0];
  return s;
}

/// The weights `w` (n floats, plain layout) in the primitive's layout
/// `primDesc`. Immutable weights (`key` set: the node) are reordered once and
/// cached per (key, geometry) while the address and sampled values match;
/// others (key null: trained parameters) are reordered on every call.
std::shared_ptr<dnnl::memory> primitiveWeights(const Reorders &e, const dnnl::memory::desc &primDesc,
                                               const float *w, int64_t n, const void *key,
                                               const std::string &geometry, dnnl::stream &strm) {
  auto &eng = cpuEngine();
  if (!e.wReorder) return std::make_shared<dnnl::memory>(e.wUser, eng, const_cast<float *>(w));
  auto reorder = [&] {
    auto mem = std::make_shared<dnnl::memory>(primDesc, eng);
    dnnl::memory wu(e.wUser, eng, const_cast<float *>(w));
    e.wToPrim.execute(strm, wu, *mem);
    return mem;
  };
  if (!key) return reorder();
  std::string wkey = std::to_string(reinterpret_cast<uintptr_t>(key)) + '|' + geometry;
  std::vector<float> sample = sampleOf(w, n);
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = gWeights.find(wkey);
    if (it != gWeights.end() && it->second->src == w && it->second->md == primDesc && it->second->sample == sample)
      return it->second->mem;
  }
  auto we = std::make_shared<WeightsEntry>();
  we->mem = reorder();
  strm.wait();
  we->md = primDesc;
  we->sample = std::move(sample);
  we->src = w;
  we->bytes = primDesc.get_size();
  std::lock_guard<std::mutex> lock(gMutex);
  auto it = gWeights.find(wkey);
  if (it != gWeights.end()) gWeightBytes -= std::min(gWeightBytes, it->second->bytes);
  if (gWeightBytes + we->bytes > kMaxWeightBytes) {
    gWeights.clear();
    gWeightBytes = 0;
  }
  gWeightBytes += we->bytes;
  gWeights.insert_or_assign(wkey, we);
  return we->mem;
}

} // namespace

bool conv(const ConvShape &s, const float *x, const float *w, const float *bias, float *y, const void *weightsKey,
          const float *sum) {
  size_t r = s.x.size();
  if (r < 3 || r > 5 || s.w.size() != r || s.y.size() != r || s.group < 1) return false;
  if (s.postSum != (sum != nullptr)) return false;
  std::string key;
  key.reserve(128);
  appendConvGeometry(key, s);
  key += std::to_string(s.group) + (bias ? "b" : "n") + (s.postSum ? "s" : "") + (s.postRelu ? "r" : "") +
         (s.xChannelsLast ? "X" : "") + (s.yChannelsLast ? "Y" : "");
  if (s.postEltwise) {
    uint32_t a, b; // exact bits: two alphas that print alike are different primitives
    std::memcpy(&a, &s.postAlpha, 4);
    std::memcpy(&b, &s.postBeta, 4);
    key += "e" + std::to_string(s.postEltwise) + ":" + std::to_string(a) + ":" + std::to_string(b);
  }
  std::shared_ptr<ConvEntry> e = cachedEntry(gConvs, key, [&] { return makeConv(s, bias != nullptr); });
  if (!e) return false;
  auto &eng = cpuEngine();
  dnnl::stream strm(eng);
  int64_t wn = 1;
  for (int64_t d : s.w) wn *= d;

  std::shared_ptr<dnnl::memory> wMem = primitiveWeights(*e, e->pd.weights_desc(), w, wn, weightsKey, key, strm);

  Reorders::Io m = e->io(e->pd, eng, x, y, strm);
  if (sum) { // the sum post-op adds what dst holds
    dnnl::memory su(e->yUser, eng, const_cast<float *>(sum));
    if (e->yReorder) e->sumToPrim.execute(strm, su, m.yp);
    else if (sum != y) {
      int64_t yn = 1;
      for (int64_t d : s.y) yn *= d;
      std::memcpy(y, sum, static_cast<size_t>(yn) * sizeof(float));
    }
  }
  Scratchpad scratchBuf(e->pd.scratchpad_desc(), eng);
  dnnl::memory &scratch = scratchBuf.mem;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, m.xp}, {DNNL_ARG_WEIGHTS, *wMem},
                                             {DNNL_ARG_DST, m.yp}, {DNNL_ARG_SCRATCHPAD, scratch}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{s.w[0]}, dt::f32, tag::a}, eng, const_cast<float *>(bias)));
  e->prim.execute(strm, args);
  e->finish(m, strm);
  strm.wait();
  return true;
}

namespace {
/// A deconvolution (ConvTranspose) primitive for one geometry.
struct DeconvEntry : Reorders {
  dnnl::deconvolution_forward::primitive_desc pd;
  dnnl::deconvolution_forward prim;
};
std::unordered_map<std::string, std::shared_ptr<DeconvEntry>> gDeconvs;

/// Plain layouts of ONNX ConvTranspose weights [C, M/G, k...] as oneDNN's
/// deconvolution weights (logical [OC, IC, k...], or [G, OC/G, IC/G, k...]).
tag ioTag(size_t rank, bool grouped) {
  if (!grouped) {
    switch (rank) {
    case 3: return tag::bac;
    case 4: return tag::bacd;
    case 5: return tag::bacde;
    default: return tag::undef;
    }
  }
  switch (rank) { // rank counts the group dim
  case 4: return tag::acbd;
  case 5: return tag::acbde;
  case 6: return tag::acbdef;
  default: return tag::undef;
  }
}

std::shared_ptr<DeconvEntry> makeDeconv(const ConvShape &s, bool hasBias) {
  auto &eng = cpuEngine();
  auto e = std::make_shared<DeconvEntry>();
  e->xUser = dnnl::memory::desc(dims(s.x), dt::f32, plainTag(s.x.size()));
  e->yUser = dnnl::memory::desc(dims(s.y), dt::f32, plainTag(s.y.size()));
  int64_t C = s.w[0], Mg = s.w[1], G = s.group;
  std::vector<int64_t> wd = {Mg * G, C};
  if (G > 1) wd = {G, Mg, C / G};
  wd.insert(wd.end(), s.w.begin() + 2, s.w.end());
  e->wUser = dnnl::memory::desc(dims(wd), dt::f32, ioTag(wd.size(), G > 1));
  Window win(s);
  dnnl::memory::desc xAny(dims(s.x), dt::f32, tag::any), yAny(dims(s.y), dt::f32, tag::any),
      wAny(dims(wd), dt::f32, tag::any), bMd({Mg * G}, dt::f32, tag::a);
  auto desc = hasBias ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                          dnnl::algorithm::deconvolution_direct, xAny, wAny, bMd,
                                                          yAny, win.strides, win.dilates, win.padL, win.padR)
                      : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                          dnnl::algorithm::deconvolution_direct, xAny, wAny, yAny,
                                                          win.strides, win.dilates, win.padL, win.padR);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  e->pd = dnnl::deconvolution_forward::primitive_desc(desc, attr, eng);
  e->prim = dnnl::deconvolution_forward(e->pd);
  e->plan(e->pd, eng);
  return e;
}
} // namespace

bool deconv(const ConvShape &s, const float *x, const float *w, const float *bias, float *y,
            const void *weightsKey) {
  size_t r = s.x.size();
  if (r < 3 || r > 5 || s.w.size() != r || s.y.size() != r || s.group < 1 || s.w[0] % s.group) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (s.padBegin[i] < 0 || s.padEnd[i] < 0) return false;
  std::string key = "d";
  key.reserve(128);
  appendConvGeometry(key, s);
  key += std::to_string(s.group) + (bias ? "b" : "n");
  std::shared_ptr<DeconvEntry> e = cachedEntry(gDeconvs, key, [&] { return makeDeconv(s, bias != nullptr); });
  if (!e) return false;
  auto &eng = cpuEngine();
  dnnl::stream strm(eng);
  int64_t wn = 1;
  for (int64_t d : s.w) wn *= d;
  std::shared_ptr<dnnl::memory> wMem = primitiveWeights(*e, e->pd.weights_desc(), w, wn, weightsKey, key, strm);
  Reorders::Io m = e->io(e->pd, eng, x, y, strm);
  Scratchpad scratchBuf(e->pd.scratchpad_desc(), eng);
  dnnl::memory &scratch = scratchBuf.mem;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, m.xp}, {DNNL_ARG_WEIGHTS, *wMem},
                                             {DNNL_ARG_DST, m.yp}, {DNNL_ARG_SCRATCHPAD, scratch}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{s.w[1] * s.group}, dt::f32, tag::a}, eng, const_cast<float *>(bias)));
  e->prim.execute(strm, args);
  e->finish(m, strm);
  strm.wait();
  return true;
}

namespace {
struct MatMulEntry : Reorders {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};
std::unordered_map<std::string, std::shared_ptr<MatMulEntry>> gMatMuls;
} // namespace

bool matmulConstWeights(int64_t M, int64_t K, int64_t N, const float *x, const float *w, float *y,
                        const void *weightsKey) {
  if (M <= 0 || K <= 0 || N <= 0 || !weightsKey) return false;
  std::string key = std::to_string(M) + ',' + std::to_string(K) + ',' + std::to_string(N);
  auto &eng = cpuEngine();
  std::shared_ptr<MatMulEntry> e = cachedEntry(gMatMuls, key, [&] {
      auto e = std::make_shared<MatMulEntry>();
      e->xUser = dnnl::memory::desc({M, K}, dt::f32, tag::ab);
      e->wUser = dnnl::memory::desc({K, N}, dt::f32, tag::ab);
      e->yUser = dnnl::memory::desc({M, N}, dt::f32, tag::ab);
      dnnl::memory::desc wAny({K, N}, dt::f32, tag::any);
      dnnl::matmul::desc desc(e->xUser, wAny, e->yUser);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      e->pd = dnnl::matmul::primitive_desc(desc, attr, eng);
      e->prim = dnnl::matmul(e->pd);
      e->plan(e->pd, eng);
      return e;
  });
  if (!e) return false;
  dnnl::stream strm(eng);
  std::shared_ptr<dnnl::memory> wMem =
      primitiveWeights(*e, e->pd.weights_desc(), w, K * N, weightsKey, "mm" + std::to_string(K) + ',' + std::to_string(N), strm);
  Reorders::Io m = e->io(e->pd, eng, x, y, strm);
  Scratchpad scratchBuf(e->pd.scratchpad_desc(), eng);
  dnnl::memory &scratch = scratchBuf.mem;
  e->prim.execute(strm, {{DNNL_ARG_SRC, m.xp}, {DNNL_ARG_WEIGHTS, *wMem}, {DNNL_ARG_DST, m.yp}, {DNNL_ARG_SCRATCHPAD, scratch}});
  e->finish(m, strm);
  strm.wait();
  return true;
}

namespace {
struct PoolEntry {
  dnnl::pooling_forward::primitive_desc pd;
  dnnl::pooling_forward prim;
  dnnl::memory::desc xUser, yUser;
};
std::unordered_map<std::string, std::shared_ptr<PoolEntry>> gPools;
} // namespace

bool pool(const PoolShape &s, PoolKind kind, const float *x, float *y) {
  size_t r = s.x.size();
  if (r < 3 || r > 5 || s.y.size() != r) return false;
  std::string key;
  appendDims(key, s.x); appendDims(key, s.y); appendDims(key, s.kernel); appendDims(key, s.stride);
  appendDims(key, s.padBegin); appendDims(key, s.padEnd);
  key += std::to_string(static_cast<int>(kind)) + (s.channelsLast ? "c" : "");
  auto &eng = cpuEngine();
  std::shared_ptr<PoolEntry> e = cachedEntry(gPools, key, [&] {
      auto e = std::make_shared<PoolEntry>();
      e->xUser = dnnl::memory::desc(dims(s.x), dt::f32, s.channelsLast ? channelsLastTag(r) : plainTag(r));
      e->yUser = dnnl::memory::desc(dims(s.y), dt::f32, s.channelsLast ? channelsLastTag(r) : plainTag(r));
      dnnl::algorithm alg = kind == PoolKind::Max             ? dnnl::algorithm::pooling_max
                            : kind == PoolKind::AvgIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                              : dnnl::algorithm::pooling_avg_exclude_padding;
      dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, alg, e->xUser, e->yUser, dims(s.stride),
                                       dims(s.kernel), dims(s.padBegin), dims(s.padEnd));
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      e->pd = dnnl::pooling_forward::primitive_desc(desc, attr, eng);
      e->prim = dnnl::pooling_forward(e->pd);
      return e;
  });
  if (!e) return false;
  dnnl::stream strm(eng);
  dnnl::memory xu(e->xUser, eng, const_cast<float *>(x)), yu(e->yUser, eng, y);
  Scratchpad scratchBuf(e->pd.scratchpad_desc(), eng);
  dnnl::memory &scratch = scratchBuf.mem;
  e->prim.execute(strm, {{DNNL_ARG_SRC, xu}, {DNNL_ARG_DST, yu}, {DNNL_ARG_SCRATCHPAD, scratch}});
  strm.wait();
  return true;
}

} // namespace hetplan::runtime::cpu::onednn
