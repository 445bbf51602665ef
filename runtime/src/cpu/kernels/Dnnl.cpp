//===- Dnnl.cpp - oneDNN convolution with cached primitives ---------------===//
#include "Dnnl.h"

#include <oneapi/dnnl/dnnl.hpp>

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

/// A convolution primitive for one geometry, with the reorders between the
/// caller's plain layout and the layouts the primitive chose.
struct ConvEntry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc xUser, wUser, yUser;
  bool xReorder = false, wReorder = false, yReorder = false;
  dnnl::reorder xToPrim, wToPrim, yToUser, sumToPrim;
};

/// The reordered weights of one node, and the sampled values they came from.
struct WeightsEntry {
  std::vector<float> sample;
  const float *src = nullptr;
  std::shared_ptr<dnnl::memory> mem;
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

std::shared_ptr<ConvEntry> makeConv(const ConvShape &s, bool hasBias) {
  auto &eng = cpuEngine();
  size_t r = s.x.size() - 2;
  auto e = std::make_shared<ConvEntry>();
  e->xUser = dnnl::memory::desc(dims(s.x), dt::f32, plainTag(s.x.size()));
  e->yUser = dnnl::memory::desc(dims(s.y), dt::f32, plainTag(s.y.size()));
  std::vector<int64_t> wd = s.w;
  if (s.group > 1) { // [G, M/G, C/G, k...]
    wd[0] = s.w[0] / s.group;
    wd.insert(wd.begin(), s.group);
  }
  e->wUser = dnnl::memory::desc(dims(wd), dt::f32, plainTag(wd.size()));
  dnnl::memory::dims strides(r), dilates(r), padL(r), padR(r);
  for (size_t i = 0; i < r; ++i) {
    strides[i] = s.stride[i];
    dilates[i] = s.dil[i] - 1; // oneDNN counts the holes
    padL[i] = s.padBegin[i];
    padR[i] = s.padEnd[i];
  }
  dnnl::memory::desc xAny(dims(s.x), dt::f32, tag::any), yAny(dims(s.y), dt::f32, tag::any),
      wAny(dims(wd), dt::f32, tag::any), bMd({s.w[0]}, dt::f32, tag::a);
  auto desc = hasBias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, xAny, wAny, bMd,
                                                        yAny, strides, dilates, padL, padR)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, xAny, wAny, yAny,
                                                        strides, dilates, padL, padR);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.postSum || s.postRelu) {
    dnnl::post_ops ops;
    if (s.postSum) ops.append_sum(1.f);
    if (s.postRelu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(ops);
  }
  e->pd = dnnl::convolution_forward::primitive_desc(desc, attr, eng);
  e->prim = dnnl::convolution_forward(e->pd);
  if (e->pd.src_desc() != e->xUser) {
    e->xReorder = true;
    e->xToPrim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e->xUser, eng, e->pd.src_desc()));
  }
  if (e->pd.weights_desc() != e->wUser) {
    e->wReorder = true;
    e->wToPrim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e->wUser, eng, e->pd.weights_desc()));
  }
  if (e->pd.dst_desc() != e->yUser) {
    e->yReorder = true;
    e->yToUser = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e->pd.dst_desc(), eng, e->yUser));
    if (s.postSum)
      e->sumToPrim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e->yUser, eng, e->pd.dst_desc()));
  }
  return e;
}

/// Up to 256 weight values spread over the tensor (first and last included).
std::vector<float> sampleOf(const float *w, int64_t n) {
  int64_t k = std::min<int64_t>(n, 256);
  std::vector<float> s(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) s[i] = w[k > 1 ? i * (n - 1) / (k - 1) : 0];
  return s;
}

} // namespace

bool conv(const ConvShape &s, const float *x, const float *w, const float *bias, float *y, const void *weightsKey,
          const float *sum) {
  size_t r = s.x.size();
  if (r < 3 || r > 5 || s.w.size() != r || s.y.size() != r || s.group < 1) return false;
  if (s.postSum != (sum != nullptr)) return false;
  std::string key;
  key.reserve(128);
  appendDims(key, s.x); appendDims(key, s.w); appendDims(key, s.y); appendDims(key, s.stride);
  appendDims(key, s.dil); appendDims(key, s.padBegin); appendDims(key, s.padEnd);
  key += std::to_string(s.group) + (bias ? "b" : "n") + (s.postSum ? "s" : "") + (s.postRelu ? "r" : "");
  std::shared_ptr<ConvEntry> e;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = gConvs.find(key);
    if (it != gConvs.end()) e = it->second;
  }
  if (!e) {
    try {
      e = makeConv(s, bias != nullptr);
    } catch (const dnnl::error &) {
      return false;
    }
    std::lock_guard<std::mutex> lock(gMutex);
    if (gConvs.size() >= kMaxConvs) gConvs.clear();
    gConvs.emplace(key, e);
  }
  auto &eng = cpuEngine();
  dnnl::stream strm(eng);
  int64_t wn = 1;
  for (int64_t d : s.w) wn *= d;

  // Weights in the primitive's layout: cached per (node, geometry) while the
  // sampled values match; reordered per call otherwise.
  std::shared_ptr<dnnl::memory> wMem;
  if (e->wReorder && !weightsKey) { // weights that may change: reorder every call
    wMem = std::make_shared<dnnl::memory>(e->pd.weights_desc(), eng);
    dnnl::memory wu(e->wUser, eng, const_cast<float *>(w));
    e->wToPrim.execute(strm, wu, *wMem);
  } else if (e->wReorder) {
    std::string wkey = std::to_string(reinterpret_cast<uintptr_t>(weightsKey)) + '|' + key;
    std::vector<float> sample = sampleOf(w, wn);
    {
      std::lock_guard<std::mutex> lock(gMutex);
      auto it = gWeights.find(wkey);
      if (it != gWeights.end() && it->second->src == w && it->second->sample == sample) wMem = it->second->mem;
    }
    if (!wMem) {
      wMem = std::make_shared<dnnl::memory>(e->pd.weights_desc(), eng);
      dnnl::memory wu(e->wUser, eng, const_cast<float *>(w));
      e->wToPrim.execute(strm, wu, *wMem);
      strm.wait();
      auto we = std::make_shared<WeightsEntry>();
      we->sample = std::move(sample);
      we->src = w;
      we->mem = wMem;
      size_t bytes = e->pd.weights_desc().get_size();
      std::lock_guard<std::mutex> lock(gMutex);
      if (gWeightBytes + bytes > kMaxWeightBytes) { gWeights.clear(); gWeightBytes = 0; }
      auto [it, fresh] = gWeights.insert_or_assign(wkey, we);
      (void)it; (void)fresh;
      gWeightBytes += bytes;
    }
  } else {
    wMem = std::make_shared<dnnl::memory>(e->wUser, eng, const_cast<float *>(w));
  }

  dnnl::memory xu(e->xUser, eng, const_cast<float *>(x)), yu(e->yUser, eng, y);
  dnnl::memory xp = xu, yp = yu;
  if (e->xReorder) {
    xp = dnnl::memory(e->pd.src_desc(), eng);
    e->xToPrim.execute(strm, xu, xp);
  }
  if (e->yReorder) yp = dnnl::memory(e->pd.dst_desc(), eng);
  if (sum) { // the sum post-op adds what dst holds
    dnnl::memory su(e->yUser, eng, const_cast<float *>(sum));
    if (e->yReorder) e->sumToPrim.execute(strm, su, yp);
    else if (sum != y) {
      int64_t yn = 1;
      for (int64_t d : s.y) yn *= d;
      std::memcpy(y, sum, static_cast<size_t>(yn) * sizeof(float));
    }
  }
  dnnl::memory scratch(e->pd.scratchpad_desc(), eng);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, xp}, {DNNL_ARG_WEIGHTS, *wMem},
                                             {DNNL_ARG_DST, yp}, {DNNL_ARG_SCRATCHPAD, scratch}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{s.w[0]}, dt::f32, tag::a}, eng, const_cast<float *>(bias)));
  e->prim.execute(strm, args);
  if (e->yReorder) e->yToUser.execute(strm, yp, yu);
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
  key += std::to_string(static_cast<int>(kind));
  std::shared_ptr<PoolEntry> e;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = gPools.find(key);
    if (it != gPools.end()) e = it->second;
  }
  auto &eng = cpuEngine();
  if (!e) {
    try {
      e = std::make_shared<PoolEntry>();
      e->xUser = dnnl::memory::desc(dims(s.x), dt::f32, plainTag(r));
      e->yUser = dnnl::memory::desc(dims(s.y), dt::f32, plainTag(r));
      dnnl::algorithm alg = kind == PoolKind::Max             ? dnnl::algorithm::pooling_max
                            : kind == PoolKind::AvgIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                              : dnnl::algorithm::pooling_avg_exclude_padding;
      dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, alg, e->xUser, e->yUser, dims(s.stride),
                                       dims(s.kernel), dims(s.padBegin), dims(s.padEnd));
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      e->pd = dnnl::pooling_forward::primitive_desc(desc, attr, eng);
      e->prim = dnnl::pooling_forward(e->pd);
    } catch (const dnnl::error &) {
      return false;
    }
    std::lock_guard<std::mutex> lock(gMutex);
    if (gPools.size() >= kMaxConvs) gPools.clear();
    gPools.emplace(key, e);
  }
  dnnl::stream strm(eng);
  dnnl::memory xu(e->xUser, eng, const_cast<float *>(x)), yu(e->yUser, eng, y);
  dnnl::memory scratch(e->pd.scratchpad_desc(), eng);
  e->prim.execute(strm, {{DNNL_ARG_SRC, xu}, {DNNL_ARG_DST, yu}, {DNNL_ARG_SCRATCHPAD, scratch}});
  strm.wait();
  return true;
}

} // namespace hetplan::runtime::cpu::onednn
