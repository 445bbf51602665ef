//===- CudaFusion.h - which nodes the CUDA executor fuses ----*- C++ -*-===//
//
// Internal to runtime/src/cuda: the pattern matcher behind
// CudaExecutor::fusions() and cudaFusions() (CudaBackend.h). Plain C++ (no
// CUDA header): it looks at the graph, the constants and the declared shapes
// only, so its decisions are tested without a device. docs/gpu.md, "Fused
// on the GPU".
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/CudaBackend.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace hetplan::runtime::cudafuse {

/// cuDNN's fused flash attention takes head dims that are multiples of 8
/// up to 128 (cuDNN 9 developer guide, "Fused Flash Attention fprop";
/// larger dims only on some architectures and versions: not used).
inline bool sdpaHeadDimOk(int64_t d) { return d > 0 && d % 8 == 0 && d <= 128; }

/// True for the precisions at which attention groups are formed (fp16,
/// bf16: cuDNN's flash attention takes half-precision Q, K, V).
inline bool sdpaPrecision(const std::string &p) { return p == "fp16" || p == "bf16"; }

/// The groups of `m`'s nodes (in `order`, not folded, in `stage` unless
/// empty) that run fused at `precision`. `constant(name)`: the constant
/// float32 value of that name (initializer or folded value) or null.
std::vector<CudaFusion> findFusions(const Model &m, const std::vector<size_t> &order,
                                    const std::vector<bool> &isFolded,
                                    const std::function<const Tensor *(const std::string &)> &constant,
                                    const std::string &precision, const std::set<size_t> &stage);

} // namespace hetplan::runtime::cudafuse
