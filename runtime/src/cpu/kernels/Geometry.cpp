//===- Geometry.cpp - shapes of MatMul and of conv/pool windows -----------===//
#include "Geometry.h"

#include <algorithm>
#include <stdexcept>

namespace hetplan::runtime::cpu {

MatMulShape matmulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  MatMulShape m;
  auto as = a, bs = b;
  m.aVec = as.size() == 1;
  m.bVec = bs.size() == 1;
  if (m.aVec) as.insert(as.begin(), 1);
  if (m.bVec) bs.push_back(1);
  if (as.size() < 2 || bs.size() < 2) throw std::runtime_error("MatMul of scalars");
  m.M = as[as.size() - 2];
  m.K = as.back();
  m.N = bs.back();
  if (bs[bs.size() - 2] != m.K)
    throw std::runtime_error("MatMul shapes " + shapeString(a) + " and " + shapeString(b) + " do not match");
  m.aBatch.assign(as.begin(), as.end() - 2);
  m.bBatch.assign(bs.begin(), bs.end() - 2);
  m.batch = broadcastShapes(m.aBatch, m.bBatch);
  m.out = m.batch;
  if (!m.aVec) m.out.push_back(m.M);
  if (!m.bVec) m.out.push_back(m.N);
  return m;
}

Window makeWindow(const Node &n, const std::vector<int64_t> &inSpatial, std::vector<int64_t> kernel, bool pool) {
  size_t r = inSpatial.size();
  Window w;
  w.in = inSpatial;
  w.kernel = std::move(kernel);
  w.stride = n.getInts("strides", std::vector<int64_t>(r, 1));
  w.dil = n.getInts("dilations", std::vector<int64_t>(r, 1));
  auto pads = n.getInts("pads", std::vector<int64_t>(2 * r, 0));
  if (w.kernel.size() != r || w.stride.size() != r || w.dil.size() != r || pads.size() != 2 * r)
    throw std::runtime_error("kernel_shape/strides/dilations/pads do not match the input rank");
  w.padBegin.assign(pads.begin(), pads.begin() + r);
  w.padEnd.assign(pads.begin() + r, pads.end());
  std::string autoPad = n.getString("auto_pad", "NOTSET");
  bool ceilMode = pool && n.getInt("ceil_mode", 0);
  w.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t ek = (w.kernel[i] - 1) * w.dil[i] + 1;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t o = (w.in[i] + w.stride[i] - 1) / w.stride[i];
      int64_t total = std::max<int64_t>(0, (o - 1) * w.stride[i] + ek - w.in[i]);
      w.padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.padEnd[i] = total - w.padBegin[i];
      w.out[i] = o;
      continue;
    }
    if (autoPad == "VALID") w.padBegin[i] = w.padEnd[i] = 0;
    int64_t span = w.in[i] + w.padBegin[i] + w.padEnd[i] - ek;
    if (ceilMode) {
      int64_t o = (span + w.stride[i] - 1) / w.stride[i] + 1;
      if ((o - 1) * w.stride[i] >= w.in[i] + w.padBegin[i]) --o;
      w.out[i] = o;
    } else w.out[i] = span / w.stride[i] + 1;
    if (w.out[i] < 0) w.out[i] = 0;
  }
  return w;
}

} // namespace hetplan::runtime::cpu
