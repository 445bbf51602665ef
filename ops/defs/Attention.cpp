//===- Attention.cpp - ONNX Attention and com.microsoft's fused Attention -===//
//
// Q K^T and P V are 2 FLOPs per multiply-add; the scale, softmax (a
// transcendental and 4 FLOPs) and mask add per score.
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops::defs {
namespace {

// ONNX Attention (opset 23): Q, K, V as [B, H, S, D] or [B, S, H*D].
bool attentionShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> q, v;
  if (!requireShape(in, 0, q, why) || !requireShape(in, 2, v, why))
    return why.empty();
  std::vector<int64_t> result;
  if (q.size() == 4 && v.size() == 4) {
    result = {q[0], q[1], q[2], v[3]};
  } else if (q.size() == 3 && v.size() == 3) {
    int64_t qHeads = in.attrs.intOr("q_num_heads", kUnknownDim);
    int64_t kvHeads = in.attrs.intOr("kv_num_heads", kUnknownDim);
    int64_t headV = (isUnknown(v[2]) || isUnknown(kvHeads) || kvHeads == 0) ? kUnknownDim : v[2] / kvHeads;
    result = {q[0], q[1], mulDims(qHeads, headV)};
  } else {
    return (why = "Q and V must both be rank 3 or rank 4", false);
  }
  out[0] = like(result);
  return true;
}

// Q [B, Hq, S, D] or [B, S, Hq*D]; K [B, Hkv, T, D] or [B, T, Hkv*D]; V
// likewise with Dv; past_key (input 4) adds its T.
Cost attentionCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  auto q = staticInput(in, 0), k = staticInput(in, 1), v = staticInput(in, 2);
  if (!q || !k || !v || q->size() != k->size() || q->size() != v->size())
    return r;
  double b, h, s, t, d, dv;
  if (q->size() == 4) {
    b = (*q)[0], h = (*q)[1], s = (*q)[2], d = (*q)[3];
    t = (*k)[2], dv = (*v)[3];
  } else if (q->size() == 3) {
    double hq = double(in.attrs.intOr("q_num_heads", 1));
    double hkv = double(in.attrs.intOr("kv_num_heads", int64_t(hq)));
    if (hq <= 0 || hkv <= 0)
      return r;
    b = (*q)[0], s = (*q)[1], h = hq, d = double((*q)[2]) / hq;
    t = (*k)[1], dv = double((*v)[2]) / hkv;
  } else {
    return r;
  }
  if (given(in, 4))
    if (auto past = staticInput(in, 4); past && past->size() == 4)
      t += double((*past)[2]);
  double scores = b * h * s * t;
  r.flops = 2 * scores * (d + dv) + scores * (1 + kTranscendental + 4) + (given(in, 3) ? scores : 0);
  return r;
}

// com.microsoft Attention (onnxruntime's fused GPT-2/BERT attention): input
// [B, S, D], packed QKV weights [D, 3 Dh], optional past [2, B, N, P, Dh/N]
// -> output [B, S, Dh] and present [2, B, N, P + S, Dh/N].
bool fusedAttentionShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x, w;
  if (!requireShape(in, 0, x, why) || !requireShape(in, 1, w, why))
    return why.empty();
  if (x.size() != 3 || w.size() != 2)
    return (why = "needs input [batch, sequence, hidden] and weights [hidden, 3 x hidden]", false);
  if (in.attrs.has("qkv_hidden_sizes"))
    return (why = "qkv_hidden_sizes is not supported", false);
  int64_t heads = in.attrs.intOr("num_heads", 0);
  if (heads <= 0)
    return (why = "num_heads must be positive", false);
  int64_t hidden = isUnknown(w[1]) ? kUnknownDim : w[1] / 3;
  out[0] = like({x[0], x[1], hidden});
  if (out.size() > 1) {
    int64_t past = 0;
    if (in.inputs.size() > 4 && in.inputs[4].present) {
      std::vector<int64_t> p;
      if (!requireShape(in, 4, p, why))
        return why.empty();
      if (p.size() != 5)
        return (why = "past must be [2, batch, heads, past, head size]", false);
      past = p[3];
    }
    int64_t head = isUnknown(hidden) ? kUnknownDim : hidden / heads;
    out[1] = like({2, x[0], heads, addDims(past, x[1]), head});
  }
  return true;
}

// The packed QKV projection, then Q K^T and P V over past + new keys, scale,
// mask, softmax.
Cost fusedAttentionCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  auto x = staticInput(in, 0), w = staticInput(in, 1);
  int64_t heads = in.attrs.intOr("num_heads", 0);
  if (!x || !w || x->size() != 3 || w->size() != 2 || heads <= 0) {
    r.estimated = true;
    r.flops = in.totalOutputElems();
    return r;
  }
  double b = double((*x)[0]), s = double((*x)[1]), d = double((*x)[2]), dh = double((*w)[1]) / 3;
  double t = s;
  if (given(in, 4))
    if (auto past = staticInput(in, 4); past && past->size() == 5)
      t += double((*past)[3]);
  double scores = b * double(heads) * s * t;
  r.flops = 2 * b * s * d * 3 * dh + 2 * scores * 2 * (dh / double(heads)) + scores * (1 + kTranscendental + 4) +
            (given(in, 3) ? scores : 0);
  return r;
}

} // namespace

void addAttentionOps(std::vector<OpDef> &out) {
  out.push_back(define("", "Attention", 23, 3, 6,
                       "scaled dot-product attention over Q, K, V (heads, mask, past keys and values)",
                       attentionShape, attentionCost));
  out.push_back(define("com.microsoft", "Attention", 1, 2, 10,
                       "onnxruntime's fused attention: packed QKV projection, past keys and values in `present`",
                       fusedAttentionShape, fusedAttentionCost));
}

} // namespace hetplan::ops::defs
