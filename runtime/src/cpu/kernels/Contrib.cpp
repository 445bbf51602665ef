//===- Contrib.cpp - com.microsoft ops of onnxruntime-optimized models ----===//
//
// The fused ops that onnxruntime's transformer optimizer writes into the
// models it exports (onnxruntime.transformers: GPT-2 with past key/values,
// BERT): EmbedLayerNormalization, SkipLayerNormalization, FastGelu and the
// packed-QKV Attention with a KV cache (`past` in, `present` out). Semantics
// follow onnxruntime's contrib op documentation (docs/ContribOperators.md)
// and its CPU kernels: mask positions and future positions add
// mask_filter_value to the scores; the scale is 1/sqrt(head size).
//
//===----------------------------------------------------------------------===//
#include "FastMath.h"
#include "Gemm.h"
#include "KernelUtil.h"

#include <cmath>

namespace hetplan::runtime::cpu {

namespace {

int64_t indexAt(const Tensor &t, int64_t i) {
  if (t.dtype() == DType::Int32) return t.data<int32_t>()[i];
  if (t.dtype() == DType::Int64) return t.data<int64_t>()[i];
  throw std::runtime_error("index tensor " + t.describe() + " must be int32 or int64");
}

void requireFloat(const Tensor &t, const char *op, const char *what) {
  if (t.dtype() != DType::Float32)
    throw std::runtime_error(std::string(op) + " " + what + " " + t.describe() + " must be float32");
}

/// out[r, :] = LayerNorm(x[r, :]) * gamma + beta over rows of `hidden`: the
/// LayerNormalization kernel's vectorised row (FastMath.h).
void layerNormRows(const float *x, float *out, int64_t rows, int64_t hidden, const float *gamma,
                   const float *beta, double eps) {
  float mean, inv;
  for (int64_t r = 0; r < rows; ++r)
    fastmath::layerNormRow(x + r * hidden, out + r * hidden, hidden, gamma, beta, float(eps), &mean, &inv);
}

void requireVector(const KernelContext &c, size_t i, int64_t hidden, const char *op, const char *what) {
  if (!c.hasInput(i)) return;
  const Tensor &t = c.in(i);
  requireFloat(t, op, what);
  if (t.numel() != hidden)
    throw std::runtime_error(std::string(op) + " " + what + " " + t.describe() + " needs " +
                             std::to_string(hidden) + " elements (the hidden size)");
}

// EmbedLayerNormalization(input_ids, segment_ids?, word_embedding,
// position_embedding, segment_embedding?, gamma, beta, mask?, position_ids?)
//   -> output, mask_index (int32 [B]: ones of each mask row), embedding_sum?
void embedLayerNorm(KernelContext &c) {
  const char *op = "EmbedLayerNormalization";
  const Tensor &ids = c.in(0), &word = c.in(2), &pos = c.in(3);
  if (ids.rank() != 2) throw std::runtime_error(std::string(op) + " input_ids " + ids.describe() + " must be [batch, sequence]");
  requireFloat(word, op, "word_embedding");
  requireFloat(pos, op, "position_embedding");
  if (word.rank() != 2 || pos.rank() != 2 || pos.dim(1) != word.dim(1))
    throw std::runtime_error(std::string(op) + " embeddings " + word.describe() + " and " + pos.describe() +
                             " must be [rows, hidden] of one hidden size");
  int64_t B = ids.dim(0), S = ids.dim(1), H = word.dim(1);
  requireVector(c, 5, H, op, "gamma");
  requireVector(c, 6, H, op, "beta");
  const Tensor *seg = c.hasInput(1) && c.hasInput(4) ? &c.in(1) : nullptr;
  const Tensor *segEmb = seg ? &c.in(4) : nullptr;
  if (seg && (seg->shape() != ids.shape() || segEmb->rank() != 2 || segEmb->dim(1) != H))
    throw std::runtime_error(std::string(op) + " segment_ids/segment_embedding do not match input_ids and hidden size");
  const Tensor *posIds = c.hasInput(8) ? &c.in(8) : nullptr;
  if (posIds && !(posIds->rank() == 2 && posIds->dim(1) == S && (posIds->dim(0) == B || posIds->dim(0) == 1)))
    throw std::runtime_error(std::string(op) + " position_ids " + posIds->describe() + " must be [batch or 1, sequence]");
  const Tensor *mask = c.hasInput(7) ? &c.in(7) : nullptr;
  if (mask && mask->shape() != ids.shape())
    throw std::runtime_error(std::string(op) + " mask " + mask->describe() + " must have input_ids' shape");
  Tensor sum(DType::Float32, {B, S, H}), out(DType::Float32, {B, S, H});
  float *ps = sum.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      int64_t w = indexAt(ids, b * S + s);
      int64_t p = posIds ? indexAt(*posIds, (posIds->dim(0) == 1 ? 0 : b * S) + s) : s;
      if (w < 0 || w >= word.dim(0))
        throw std::runtime_error(std::string(op) + ": token id " + std::to_string(w) + " is outside the vocabulary of " +
                                 std::to_string(word.dim(0)));
      if (p < 0 || p >= pos.dim(0))
        throw std::runtime_error(std::string(op) + ": position " + std::to_string(p) + " is outside the " +
                                 std::to_string(pos.dim(0)) + " position embeddings");
      float *row = ps + (b * S + s) * H;
      const float *pw = word.data<float>() + w * H, *pp = pos.data<float>() + p * H;
      for (int64_t i = 0; i < H; ++i) row[i] = pw[i] + pp[i];
      if (seg) {
        int64_t g = indexAt(*seg, b * S + s);
        if (g < 0 || g >= segEmb->dim(0))
          throw std::runtime_error(std::string(op) + ": segment id " + std::to_string(g) + " is out of range");
        const float *pg = segEmb->data<float>() + g * H;
        for (int64_t i = 0; i < H; ++i) row[i] += pg[i];
      }
    }
  layerNormRows(ps, out.data<float>(), B * S, H, c.in(5).data<float>(),
                c.hasInput(6) ? c.in(6).data<float>() : nullptr, c.node.getFloat("epsilon", 1e-12f));
  Tensor maskIndex(DType::Int32, {B});
  for (int64_t b = 0; b < B; ++b) {
    int32_t n = 0;
    if (mask)
      for (int64_t s = 0; s < S; ++s) n += indexAt(*mask, b * S + s) != 0;
    maskIndex.data<int32_t>()[b] = n;
  }
  c.outputs[0] = std::move(out);
  if (c.numOutputs() > 1) c.outputs[1] = std::move(maskIndex);
  if (c.numOutputs() > 2) c.outputs[2] = std::move(sum);
}

// SkipLayerNormalization(input, skip, gamma, beta?, bias?)
//   -> output, mean?, inv_std_var?, input_skip_bias_sum?
void skipLayerNorm(KernelContext &c) {
  const char *op = "SkipLayerNormalization";
  const Tensor &x = c.in(0), &skip = c.in(1);
  requireFloat(x, op, "input");
  requireFloat(skip, op, "skip");
  if (x.rank() < 1) throw std::runtime_error(std::string(op) + " input must have a hidden axis");
  int64_t H = x.dim(x.rank() - 1), rows = H ? x.numel() / H : 0;
  // skip: the input's shape, or [sequence, hidden] / [hidden] broadcast over rows.
  if (skip.numel() == 0 || skip.dim(skip.rank() - 1) != H || x.numel() % skip.numel() != 0)
    throw std::runtime_error(std::string(op) + " skip " + skip.describe() + " does not match input " + x.describe());
  requireVector(c, 2, H, op, "gamma");
  requireVector(c, 3, H, op, "beta");
  requireVector(c, 4, H, op, "bias");
  Tensor sum(DType::Float32, x.shape()), out(DType::Float32, x.shape());
  const float *px = x.data<float>(), *pk = skip.data<float>(), *pb = c.hasInput(4) ? c.in(4).data<float>() : nullptr;
  float *ps = sum.data<float>();
  int64_t skipN = skip.numel();
  for (int64_t i = 0; i < x.numel(); ++i) ps[i] = px[i] + pk[i % skipN] + (pb ? pb[i % H] : 0.0f);
  layerNormRows(ps, out.data<float>(), rows, H, c.in(2).data<float>(), c.hasInput(3) ? c.in(3).data<float>() : nullptr,
                c.node.getFloat("epsilon", 1e-12f));
  c.outputs[0] = std::move(out);
  // mean and inv_std_var are training outputs no exported inference graph reads.
  if (c.numOutputs() > 3) c.outputs[3] = std::move(sum);
}

// FastGelu(X, bias?): the tanh approximation of GELU of X + bias.
void fastGelu(KernelContext &c) {
  const Tensor &x = c.in(0);
  requireFloat(x, "FastGelu", "input");
  int64_t H = x.rank() ? x.dim(x.rank() - 1) : 1;
  requireVector(c, 1, H, "FastGelu", "bias");
  const float *pb = c.hasInput(1) ? c.in(1).data<float>() : nullptr;
  Tensor out(DType::Float32, x.shape());
  const float *px = x.data<float>();
  float *po = out.data<float>();
  const float k = 0.7978845608028654f; // sqrt(2/pi)
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = px[i] + (pb ? pb[i % H] : 0.0f);
    po[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
  c.outputs[0] = std::move(out);
}

// Attention(input [B,S,D], weights [D,3D], bias [3D], mask_index?, past?
// [2,B,N,P,D/N]) -> output [B,S,D], present [2,B,N,P+S,D/N].
void attention(KernelContext &c) {
  const char *op = "Attention";
  const Tensor &x = c.in(0), &w = c.in(1);
  requireFloat(x, op, "input");
  requireFloat(w, op, "weights");
  if (x.rank() != 3) throw std::runtime_error(std::string(op) + " input " + x.describe() + " must be [batch, sequence, hidden]");
  int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), N = c.node.getInt("num_heads", 0);
  if (c.node.has("qkv_hidden_sizes") || c.node.getInt("do_rotary", 0) || c.node.getInt("past_present_share_buffer", 0))
    throw std::runtime_error(std::string(op) + ": qkv_hidden_sizes, do_rotary and past_present_share_buffer are not supported");
  if (N <= 0 || w.rank() != 2 || w.dim(0) != D || w.dim(1) % 3 != 0 || (w.dim(1) / 3) % N != 0)
    throw std::runtime_error(std::string(op) + " weights " + w.describe() + " must be [" + std::to_string(D) +
                             ", 3 x hidden] with hidden divisible by num_heads " + std::to_string(N));
  int64_t Dh = w.dim(1) / 3, Hd = Dh / N;
  requireVector(c, 2, 3 * Dh, op, "bias");
  const Tensor *past = c.hasInput(4) ? &c.in(4) : nullptr;
  int64_t P = 0;
  if (past) {
    requireFloat(*past, op, "past");
    if (past->rank() != 5 || past->dim(0) != 2 || past->dim(1) != B || past->dim(2) != N || past->dim(4) != Hd)
      throw std::runtime_error(std::string(op) + " past " + past->describe() + " must be [2, " + std::to_string(B) + ", " +
                               std::to_string(N) + ", past, " + std::to_string(Hd) + "]");
    P = past->dim(3);
  }
  int64_t T = P + S;
  const Tensor *mask = c.hasInput(3) ? &c.in(3) : nullptr;
  if (mask && !(mask->rank() == 2 && mask->dim(0) == B && mask->dim(1) == T) && !(mask->rank() == 1 && mask->dim(0) == B))
    throw std::runtime_error(std::string(op) + " mask_index " + mask->describe() + " must be [batch, past + sequence] or [batch]");
  float filter = c.node.getFloat("mask_filter_value", -10000.0f);
  float scale = c.node.getFloat("scale", 0.0f);
  if (scale == 0.0f) scale = 1.0f / std::sqrt(float(Hd));
  bool causal = c.node.getInt("unidirectional", 0) != 0;

  // qkv = x W + b: [B*S, 3*Dh].
  Tensor qkv(DType::Float32, {B * S, 3 * Dh});
  float *pq = qkv.data<float>();
  if (c.hasInput(2)) {
    const float *pb = c.in(2).data<float>();
    for (int64_t r = 0; r < B * S; ++r) std::memcpy(pq + r * 3 * Dh, pb, sizeof(float) * size_t(3 * Dh));
  }
  gemm<float>(false, false, B * S, 3 * Dh, D, 1.0f, x.data<float>(), D, w.data<float>(), 3 * Dh,
              c.hasInput(2) ? 1.0f : 0.0f, pq, 3 * Dh);
  // present = concat(past, new K/V) along the sequence.
  Tensor present(DType::Float32, {2, B, N, T, Hd});
  float *pp = present.data<float>();
  for (int64_t kv = 0; kv < 2; ++kv)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h) {
        float *dst = pp + (((kv * B + b) * N + h) * T) * Hd;
        if (P) std::memcpy(dst, past->data<float>() + (((kv * B + b) * N + h) * P) * Hd, sizeof(float) * size_t(P * Hd));
        for (int64_t s = 0; s < S; ++s)
          std::memcpy(dst + (P + s) * Hd, pq + (b * S + s) * 3 * Dh + (kv + 1) * Dh + h * Hd, sizeof(float) * size_t(Hd));
      }
  Tensor out(DType::Float32, {B, S, Dh});
  float *po = out.data<float>();
  parallelFor(B * N, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> q(size_t(S * Hd)), scores(size_t(S * T)), ctx(size_t(S * Hd));
    for (int64_t bh = lo; bh < hi; ++bh) {
      int64_t b = bh / N, h = bh % N;
      for (int64_t s = 0; s < S; ++s)
        std::memcpy(q.data() + s * Hd, pq + (b * S + s) * 3 * Dh + h * Hd, sizeof(float) * size_t(Hd));
      const float *K = pp + (((0 * B + b) * N + h) * T) * Hd, *V = pp + (((1 * B + b) * N + h) * T) * Hd;
      gemm<float>(false, true, S, T, Hd, scale, q.data(), Hd, K, Hd, 0.0f, scores.data(), T);
      for (int64_t s = 0; s < S; ++s) {
        float *row = scores.data() + s * T;
        for (int64_t t = 0; t < T; ++t) {
          if (mask) {
            bool keep = mask->rank() == 2 ? indexAt(*mask, b * T + t) != 0 : t < indexAt(*mask, b);
            if (!keep) row[t] += filter;
          }
          if (causal && t > P + s) row[t] += filter;
        }
        float mx = row[0];
        for (int64_t t = 1; t < T; ++t) mx = std::max(mx, row[t]);
        double sum = 0;
        for (int64_t t = 0; t < T; ++t) sum += (row[t] = std::exp(row[t] - mx));
        for (int64_t t = 0; t < T; ++t) row[t] = float(row[t] / sum);
      }
      gemm<float>(false, false, S, Hd, T, 1.0f, scores.data(), T, V, Hd, 0.0f, ctx.data(), Hd);
      for (int64_t s = 0; s < S; ++s)
        std::memcpy(po + (b * S + s) * Dh + h * Hd, ctx.data() + s * Hd, sizeof(float) * size_t(Hd));
    }
  });
  c.outputs[0] = std::move(out);
  if (c.numOutputs() > 1) c.outputs[1] = std::move(present);
}

} // namespace

void registerContribKernels() {
  registerKernel("com.microsoft", "EmbedLayerNormalization", {embedLayerNorm, nullptr, {DType::Int32, DType::Int64}});
  registerKernel("com.microsoft", "SkipLayerNormalization", {skipLayerNorm, nullptr, {DType::Float32}});
  registerKernel("com.microsoft", "FastGelu", {fastGelu, nullptr, {DType::Float32}});
  registerKernel("com.microsoft", "Attention", {attention, nullptr, {DType::Float32}});
}

} // namespace hetplan::runtime::cpu
