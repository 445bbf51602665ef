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
#include <map>
#include <optional>
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

/// What the fusion patterns ask of the graph (findFusions builds one per
/// search; the patterns share `taken`).
struct Matcher {
  const Model &m;
  const std::vector<size_t> &order;
  const std::vector<bool> &isFolded;
  const std::function<const Tensor *(const std::string &)> &constant;
  const std::string &precision;
  const std::set<size_t> &stage;
  int64_t opset = 0;
  std::map<std::string, std::vector<size_t>> readers;
  std::set<std::string> graphOut;
  std::vector<char> taken; // nodes already in a group

  /// Not folded, in the stage, not taken, default-domain, no subgraph.
  bool usable(size_t i) const;
  /// The one node reading `v` (usable, v no graph output), else -1.
  long sole(const std::string &v) const;
  /// Not known to be something other than float32.
  bool maybeFloat(const std::string &v) const;
  /// Declared shape (graph input/output with every dim known) or a constant's.
  std::optional<std::vector<int64_t>> knownShape(const std::string &v) const;
  /// One output, named.
  static bool unaryOut(const Node &n) { return n.outputs.size() == 1 && !n.outputs[0].empty(); }
};

/// A fusion pattern: appends the groups it finds (in `order`) to `out` and
/// marks their nodes taken.
using FusionPattern = void (*)(Matcher &mt, std::vector<CudaFusion> &out);

/// The patterns in the order they are tried, registered by the kernel family
/// that owns the fused ops (CudaLinalg.cpp).
const std::vector<FusionPattern> &fusionPatterns();

/// The groups of `m`'s nodes (in `order`, not folded, in `stage` unless
/// empty) that run fused at `precision`. `constant(name)`: the constant
/// float32 value of that name (initializer or folded value) or null.
std::vector<CudaFusion> findFusions(const Model &m, const std::vector<size_t> &order,
                                    const std::vector<bool> &isFolded,
                                    const std::function<const Tensor *(const std::string &)> &constant,
                                    const std::string &precision, const std::set<size_t> &stage);

} // namespace hetplan::runtime::cudafuse
