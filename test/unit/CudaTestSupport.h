//===- CudaTestSupport.h - helpers the CUDA test files share ---*- C++ -*-===//
//
// What CudaTest.cpp and CudaFusionTest.cpp both use: the skip without a
// device, random inputs and tensors, small graphs, attribute makers.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_TEST_UNIT_CUDATESTSUPPORT_H
#define HETPLAN_TEST_UNIT_CUDATESTSUPPORT_H

#include "hetplan/runtime/CudaBackend.h"
#include "hetplan/runtime/Model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#define REQUIRE_CUDA_DEVICE()                                                                      \
  do {                                                                                             \
    std::string why_;                                                                              \
    if (!cudaDeviceAvailable(&why_)) GTEST_SKIP() << why_;                                         \
  } while (0)

namespace hetplan::test::cuda {

using namespace hetplan::runtime;

/// "" when `got` matches `want` (floats within 1e-4 relative, 1e-4 absolute
/// near zero; NaN equals NaN; other types exactly), else the first difference.
inline std::string compareTensors(const Tensor &got, const Tensor &want) {
  if (got.dtype() != want.dtype()) return std::string("dtype ") + dtypeName(got.dtype()) + " vs " + dtypeName(want.dtype());
  if (got.shape() != want.shape()) return "shape " + shapeString(got.shape()) + " vs " + shapeString(want.shape());
  if (got.dtype() == DType::Float32 || got.dtype() == DType::Float64) {
    for (int64_t i = 0; i < got.numel(); ++i) {
      double a = got.dtype() == DType::Float32 ? got.data<float>()[i] : got.data<double>()[i];
      double b = want.dtype() == DType::Float32 ? want.data<float>()[i] : want.data<double>()[i];
      if (std::isnan(a) && std::isnan(b)) continue;
      if (a == b) continue; // infinities
      if (!(std::fabs(a - b) <= 1e-4 * (1.0 + std::fabs(b)))) {
        std::ostringstream os;
        os << "element " << i << ": " << a << " vs " << b;
        return os.str();
      }
    }
    return "";
  }
  if (got.nbytes() && std::memcmp(got.raw(), want.raw(), got.nbytes()) != 0) return "bytes differ";
  return "";
}

inline void expectSame(const std::map<std::string, Tensor> &got, const std::map<std::string, Tensor> &want,
                const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto &[name, t] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": output " << name << " missing";
    std::string diff = compareTensors(it->second, t);
    EXPECT_EQ(diff, "") << what << ": output " << name;
  }
}

/// Random inputs for a model: int64 token ids below 100 (token types 0/1,
/// attention masks of ones with trailing zeros), floats in [0, 1).
inline std::map<std::string, Tensor> randomInputs(const Model &m, int64_t batch, int64_t seq, unsigned seed) {
  std::mt19937 rng(seed);
  std::map<std::string, Tensor> in;
  for (const auto &v : m.inputs) {
    std::vector<int64_t> shape = v.shape;
    if (!v.hasShape) shape = {batch, seq};
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] < 0) shape[d] = d == 0 ? batch : seq;
    Tensor t(v.dtype, shape);
    if (v.dtype == DType::Int64) {
      int64_t *p = t.data<int64_t>();
      int64_t last = shape.empty() ? 1 : shape.back();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (v.name.find("mask") != std::string::npos) p[i] = (i % last) < last - 2 ? 1 : 0;
        else if (v.name.find("type") != std::string::npos) p[i] = int64_t(rng() % 2);
        else p[i] = int64_t(rng() % 100);
      }
    } else if (v.dtype == DType::Float32) {
      std::uniform_real_distribution<float> u(0.f, 1.f);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    }
    in[v.name] = t;
  }
  return in;
}

/// max|got - want| / max|want| over every float output.
inline double relativeError(const std::map<std::string, Tensor> &got, const std::map<std::string, Tensor> &want) {
  double err = 0, scale = 0;
  for (const auto &[name, w] : want) {
    const Tensor &g = got.at(name);
    if (w.dtype() != DType::Float32) continue;
    for (int64_t i = 0; i < w.numel(); ++i) {
      err = std::max(err, double(std::fabs(g.data<float>()[i] - w.data<float>()[i])));
      scale = std::max(scale, double(std::fabs(w.data<float>()[i])));
    }
  }
  return scale > 0 ? err / scale : err;
}

inline Tensor randomTensor(DType dt, const std::vector<int64_t> &shape, std::mt19937 &rng, float lo = -2.f, float hi = 2.f) {
  Tensor t(dt, shape);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

inline Attribute intsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Ints;
  a.ints = std::move(v);
  return a;
}

inline Attribute intAttr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Int;
  a.i = v;
  return a;
}

inline Attribute floatAttr(float v) {
  Attribute a;
  a.kind = Attribute::Float;
  a.f = v;
  return a;
}

/// A graph of nodes over the graph inputs `inputs` (opset 17), its outputs
/// the given names.
inline Model graphOf(std::vector<Node> nodes, const std::map<std::string, Tensor> &inputs,
              const std::vector<std::string> &outputs) {
  Model m;
  m.path = "grad-case";
  m.opsets[""] = 17;
  m.nodes = std::move(nodes);
  for (const auto &[name, t] : inputs) {
    m.inputs.push_back({name, t.dtype(), true, true, t.shape()});
    m.valueTypes[name] = t.dtype();
  }
  for (const auto &o : outputs) m.outputs.push_back({o, DType::Float32, true, false, {}});
  return m;
}

} // namespace hetplan::test::cuda

#endif
