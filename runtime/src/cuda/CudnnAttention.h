//===- CudnnAttention.h - fused attention with cuDNN's graph API -*- C++ -*-===//
//
// Internal to runtime/src/cuda: scaled dot-product attention (the CUDA
// executor's attention groups, CudaFusion.h) as one cuDNN operation graph,
// built with the backend descriptor API (cudnn_graph.h) in the shape of
// cuDNN's fused flash attention forward: Q·Kᵀ -> * scale -> [+ bias] ->
// softmax (max, sub, exp, sum, log + add for the statistics, div) -> ·V.
// Q, K, V, bias and O are packed half (or bfloat16) device tensors; the
// executor converts float32 values to half and back. Only compiled with
// cuDNN (HETPLAN_HAVE_CUDNN).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <tuple>

struct cudnnContext; // cudnnHandle_t

namespace hetplan::runtime::cudnn {

/// One attention: Q [B, H, Sq, D], K [B, H, Skv, D], V [B, H, Skv, Dv] and
/// O [B, H, Sq, Dv], packed; bias [biasB ? B : 1, biasH ? H : 1, Sq, Skv]
/// (null: none), added to the scaled scores before the softmax.
struct Sdpa {
  int64_t B = 1, H = 1, Sq = 0, Skv = 0, D = 0, Dv = 0;
  bool bf16 = false;
  float scale = 1.f;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *bias = nullptr;
  bool biasB = false, biasH = false;
  void *o = nullptr;
};

/// A cuDNN handle on the executor's stream and an execution plan per shape.
class Attention {
public:
  explicit Attention(cudaStream_t stream);
  ~Attention();
  Attention(const Attention &) = delete;
  Attention &operator=(const Attention &) = delete;

  /// Runs `a`; `scratch` allocates the stream-ordered workspace. False,
  /// launching nothing, when cuDNN builds no plan for the shape (no engine
  /// from the heuristics finalizes: unsupported head dim, architecture or
  /// version), with the reason in `*why`; the refusal is cached. Throws on
  /// an error executing a finalized plan.
  bool run(const Sdpa &a, const std::function<Tensor(size_t bytes)> &scratch, std::string *why);

  struct Plan;

private:
  cudnnContext *handle_ = nullptr;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;
  std::map<Key, std::shared_ptr<Plan>> plans_; // null: refused
  std::map<Key, std::string> refused_;
};

} // namespace hetplan::runtime::cudnn
