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

namespace hetplan::runtime::cpu {

namespace {
bool isHalf(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
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
        wide[i] = castTensor(*c.inputs[i], DType::Float32);
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
