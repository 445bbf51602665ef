//===- FuzzModel.cpp - limits shared by the model fuzz targets ------------===//
#include "FuzzModel.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdlib>

namespace hetplan::fuzz {
using namespace runtime;

bool loadWithinBudget(const uint8_t *data, size_t size, Model &model) {
  model = parseModel(data, size, kModelPath);
  return withinBudget(model);
}

namespace {
bool declaredWithin(const ValueInfo &v) {
  if (!v.hasShape) return true;
  int64_t n = 1;
  for (int64_t d : v.shape) {
    int64_t dim = d < 0 ? 2 : d;
    if (dim == 0) return true;
    if (__builtin_mul_overflow(n, dim, &n) || n > kMaxDeclaredElements) return false;
  }
  return true;
}

bool graphWithin(const std::vector<Node> &nodes, size_t &count) {
  for (const Node &n : nodes) {
    if (++count > kMaxNodes || n.opType == "Loop") return false;
    for (const auto &[name, a] : n.attrs) {
      if (a.g && !graphWithin(a.g->nodes, count)) return false;
      for (const auto &g : a.graphs)
        if (g && !graphWithin(g->nodes, count)) return false;
    }
  }
  return true;
}
} // namespace

bool withinBudget(const Model &model) {
  size_t count = 0;
  if (!graphWithin(model.nodes, count)) return false;
  for (const auto &v : model.inputs)
    if (!declaredWithin(v)) return false;
  for (const auto &v : model.outputs)
    if (!declaredWithin(v)) return false;
  return true;
}

Tensor smallTensor(DType dtype, const std::vector<int64_t> &shape, int levels) {
  Tensor t(dtype, shape);
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = i % levels; // small values: valid as indices into most dims
    switch (dtype) {
    case DType::Float32: t.data<float>()[i] = 0.25f * float(k) - 0.5f; break;
    case DType::Float64: t.data<double>()[i] = 0.25 * double(k) - 0.5; break;
    case DType::Float16: t.data<uint16_t>()[i] = floatToHalf(0.25f * float(k)); break;
    case DType::BFloat16: t.data<uint16_t>()[i] = floatToBfloat16(0.25f * float(k)); break;
    case DType::Int64: t.data<int64_t>()[i] = k; break;
    case DType::Int32: t.data<int32_t>()[i] = int32_t(k); break;
    case DType::UInt64: t.data<uint64_t>()[i] = uint64_t(k); break;
    case DType::UInt32: t.data<uint32_t>()[i] = uint32_t(k); break;
    case DType::Int16: case DType::UInt16: t.data<uint16_t>()[i] = uint16_t(k); break;
    case DType::Bool: t.data<uint8_t>()[i] = uint8_t(k & 1); break;
    default: t.data<uint8_t>()[i] = uint8_t(k); break;
    }
  }
  return t;
}

bool makeInputs(const Model &model, std::map<std::string, Tensor> &inputs) {
  for (const ValueInfo &v : model.inputs) {
    if (!v.isTensor || dtypeSize(v.dtype) == 0) return false;
    std::vector<int64_t> shape;
    if (v.hasShape)
      for (int64_t d : v.shape) shape.push_back(d < 0 ? 2 : d);
    inputs[v.name] = smallTensor(v.dtype, shape);
  }
  return true;
}

void initModelTarget() {
  hetplan::runtime::setMaxTensorBytes(kMaxTensorBytes);
  // One kernel thread: findings reproduce, and the fuzzer does not compete
  // with itself for the cores.
  setenv("OMP_NUM_THREADS", "1", 0);
  google::protobuf::SetLogHandler(nullptr); // invalid UTF-8 in strings is logged per parse
}

} // namespace hetplan::fuzz
