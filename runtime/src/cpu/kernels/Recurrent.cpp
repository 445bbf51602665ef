//===- Recurrent.cpp - RNN, GRU, LSTM (inference, float32) ----------------===//
//
// X [seq, batch, input] (layout 0) or [batch, seq, input] (layout 1). The input
// projection X·Wᵀ (+ biases) is one sgemm (gemm<float>, Gemm.h) over all time steps per direction;
// the recurrence then does one H·Rᵀ sgemm per step. sequence_lens may differ
// per batch entry: a batch entry's steps past its length leave Y zero and its
// hidden state unchanged (reverse runs from its own last step).
#include "FastMath.h"
#include "KernelUtil.h"

#include <algorithm>
#include <cmath>

#include "Gemm.h"

namespace hetplan::runtime::cpu {

namespace {
/// memcpy that accepts empty ranges (a zero batch or hidden size leaves the
/// buffers without storage: memcpy with a null pointer is undefined even for
/// zero bytes).
inline void copyBytes(void *dst, const void *src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

enum class Act { Sigmoid, Tanh, Relu, Softsign, Softplus };

bool parseAct(const std::string &s, Act &a) {
  if (s == "Sigmoid") a = Act::Sigmoid;
  else if (s == "Tanh") a = Act::Tanh;
  else if (s == "Relu") a = Act::Relu;
  else if (s == "Softsign") a = Act::Softsign;
  else if (s == "Softplus") a = Act::Softplus;
  else return false;
  return true;
}

inline float applyAct(Act a, float x) {
  switch (a) {
  case Act::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
  case Act::Tanh: return std::tanh(x);
  case Act::Relu: return x > 0 ? x : 0.0f;
  case Act::Softsign: return x / (1.0f + std::fabs(x));
  case Act::Softplus: return std::log1p(std::exp(x));
  }
  return x;
}

enum class Kind { RNN, GRU, LSTM };

int64_t numGates(Kind k) { return k == Kind::RNN ? 1 : k == Kind::GRU ? 3 : 4; }
int64_t numActs(Kind k) { return k == Kind::RNN ? 1 : k == Kind::GRU ? 2 : 3; }

std::vector<std::string> actNames(const Node &n, Kind k, int64_t dirs) {
  auto it = n.attrs.find("activations");
  if (it != n.attrs.end() && !it->second.strings.empty()) {
    auto v = it->second.strings;
    if (static_cast<int64_t>(v.size()) == numActs(k) && dirs == 2) v.insert(v.end(), v.begin(), v.end());
    return v;
  }
  std::vector<std::string> d = k == Kind::RNN ? std::vector<std::string>{"Tanh"}
                               : k == Kind::GRU ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  std::vector<std::string> out;
  for (int64_t i = 0; i < dirs; ++i) out.insert(out.end(), d.begin(), d.end());
  return out;
}

int64_t numDirs(const Node &n) { return n.getString("direction", "forward") == "bidirectional" ? 2 : 1; }

std::string recurrentCheck(const CheckContext &c, Kind k) {
  const Node &n = c.node;
  if (c.in(0) != DType::Undefined && c.in(0) != DType::Float32)
    return n.opType + " supports float32 only";
  std::string dir = n.getString("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    return n.opType + " direction '" + dir + "' is not supported";
  int64_t layout = n.getInt("layout", 0);
  if (layout != 0 && layout != 1) return n.opType + " layout " + std::to_string(layout) + " is not supported";
  if (n.has("activation_alpha") || n.has("activation_beta"))
    return n.opType + " activation_alpha/activation_beta are not supported";
  auto acts = actNames(n, k, numDirs(n));
  if (static_cast<int64_t>(acts.size()) != numActs(k) * numDirs(n))
    return n.opType + " expects " + std::to_string(numActs(k) * numDirs(n)) + " activations";
  for (const auto &a : acts) {
    Act x;
    if (!parseAct(a, x)) return n.opType + " activation '" + a + "' is not supported";
  }
  if (k == Kind::LSTM && n.getInt("input_forget", 0) != 0) return "LSTM input_forget=1 is not supported";
  if (k == Kind::GRU) {
    int64_t lbr = n.getInt("linear_before_reset", 0);
    if (lbr != 0 && lbr != 1) return "GRU linear_before_reset must be 0 or 1";
  }
  return "";
}

/// [a, b, c] -> [b, a, c]
Tensor swap01(const Tensor &t) {
  int64_t A = t.dim(0), B = t.dim(1), C = t.numel() / std::max<int64_t>(A * B, 1);
  std::vector<int64_t> s = t.shape();
  std::swap(s[0], s[1]);
  Tensor out(DType::Float32, s);
  const float *p = t.data<float>();
  float *o = out.data<float>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b) copyBytes(o + (b * A + a) * C, p + (a * B + b) * C, C * sizeof(float));
  return out;
}

float clipTo(float v, float clip) { return clip >= 0 ? std::min(std::max(v, -clip), clip) : v; }

/// One row's step of the cell: hs (and cs, LSTM) from its projected input
/// xr and recurrence hb; tmpRow: GRU's (r ⊙ H)·Rhᵀ row.
void cellRow(Kind k, const Act &f, const Act &g, const Act &hact, float clip, bool lbr, int64_t H,
             const float *xr, const float *hb, const float *rb, const float *p, const float *tmpRow, float *hs,
             float *cs) {
  auto clipv = [&](float v) { return clipTo(v, clip); };
  if (k == Kind::RNN) {
    for (int64_t j = 0; j < H; ++j) hs[j] = applyAct(f, clipv(xr[j] + hb[j]));
  } else if (k == Kind::GRU) {
    for (int64_t j = 0; j < H; ++j) {
      float z = applyAct(f, clipv(xr[j] + hb[j]));
      float rbh = rb ? rb[2 * H + j] : 0.0f;
      float pre;
      if (lbr) {
        float rr = applyAct(f, clipv(xr[H + j] + hb[H + j]));
        pre = xr[2 * H + j] + rr * (hb[2 * H + j] + rbh);
      } else {
        pre = xr[2 * H + j] + tmpRow[j] + rbh;
      }
      float hh = applyAct(g, clipv(pre));
      hs[j] = (1.0f - z) * hh + z * hs[j];
    }
  } else {
    for (int64_t j = 0; j < H; ++j) {
      float cp = cs[j];
      float ii = applyAct(f, clipv(xr[j] + hb[j] + (p ? p[j] * cp : 0.0f)));
      float ff = applyAct(f, clipv(xr[2 * H + j] + hb[2 * H + j] + (p ? p[2 * H + j] * cp : 0.0f)));
      float cc = applyAct(g, clipv(xr[3 * H + j] + hb[3 * H + j]));
      float cn = ff * cp + ii * cc;
      float oo = applyAct(f, clipv(xr[H + j] + hb[H + j] + (p ? p[H + j] * cn : 0.0f)));
      cs[j] = cn;
      hs[j] = oo * applyAct(hact, cn);
    }
  }
}

/// Y [S, D, B, H] -> [B, S, D, H]; Y_h/Y_c [D, B, H] -> [B, D, H] (layout 1).
void toBatchFirst(Tensor &Y, Tensor &Yh, Tensor &Yc, int64_t S, int64_t D, int64_t Bn, int64_t H) {
  const float *y = Y.data<float>();
  Tensor y1(DType::Float32, {Bn, S, D, H});
  float *o = y1.data<float>();
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < Bn; ++b)
        copyBytes(o + ((b * S + t) * D + d) * H, y + ((t * D + d) * Bn + b) * H, H * sizeof(float));
  Y = std::move(y1);
  Yh = swap01(Yh);
  Yc = swap01(Yc);
}

void recurrent(KernelContext &c, Kind k) {
  const Node &n = c.node;
  const int64_t layout = n.getInt("layout", 0);
  // Every float input is float32 and X has rank 3 before anything indexes.
  for (size_t i : {0, 1, 2, 3, 5, 6, 7})
    if (c.hasInput(i) && c.in(i).dtype() != DType::Float32)
      throw std::runtime_error(n.opType + ": input " + std::to_string(i) + " is " + c.in(i).describe() + ", not float32");
  if (c.in(0).rank() != 3) throw std::runtime_error(n.opType + ": X must be rank 3, it is " + c.in(0).describe());
  Tensor X = layout == 1 ? swap01(c.in(0)) : c.in(0);
  const Tensor &W = c.in(1), &R = c.in(2);
  if (X.rank() != 3 || W.rank() != 3 || R.rank() != 3)
    throw std::runtime_error(n.opType + ": X, W and R must be rank 3");
  const int64_t S = X.dim(0), Bn = X.dim(1), I = X.dim(2);
  const int64_t D = numDirs(n), G = numGates(k);
  const int64_t H = n.getInt("hidden_size", R.dim(2));
  const int64_t GH = G * H;
  if (W.dim(0) != D || W.dim(1) != GH || W.dim(2) != I || R.dim(0) != D || R.dim(1) != GH || R.dim(2) != H)
    throw std::runtime_error(n.opType + ": W " + shapeString(W.shape()) + " / R " + shapeString(R.shape()) +
                             " do not match X " + shapeString(X.shape()) + " and hidden_size " + std::to_string(H));
  // B is [D, 2*G*H], P (LSTM peepholes) [D, 3*H].
  if (c.hasInput(3) && c.in(3).numel() != D * 2 * GH)
    throw std::runtime_error(n.opType + ": B " + c.in(3).describe() + " needs " + std::to_string(D * 2 * GH) + " values");
  if (k == Kind::LSTM && c.hasInput(7) && c.in(7).numel() != D * 3 * H)
    throw std::runtime_error(n.opType + ": P " + c.in(7).describe() + " needs " + std::to_string(D * 3 * H) + " values");
  const bool reverseOnly = n.getString("direction", "forward") == "reverse";
  const float clip = n.has("clip") ? n.getFloat("clip", 0) : -1.0f;
  const bool lbr = k == Kind::GRU && n.getInt("linear_before_reset", 0) != 0;
  std::vector<Act> acts;
  for (const auto &s : actNames(n, k, D)) {
    Act a;
    if (!parseAct(s, a)) throw std::runtime_error(n.opType + ": activation " + s);
    acts.push_back(a);
  }
  const int64_t NA = numActs(k);

  std::vector<int64_t> lens(Bn, S);
  if (c.hasInput(4)) {
    lens = c.in(4).toInt64Vector();
    if (static_cast<int64_t>(lens.size()) != Bn) throw std::runtime_error(n.opType + ": sequence_lens size");
    for (auto &l : lens)
      if (l < 0 || l > S) throw std::runtime_error(n.opType + ": sequence_lens value out of range");
  }
  auto stateIn = [&](size_t i) -> Tensor {
    if (!c.hasInput(i)) return Tensor(DType::Float32, {D, Bn, H});
    if (c.in(i).rank() != 3) throw std::runtime_error(n.opType + ": initial state " + c.in(i).describe() + " must be rank 3");
    Tensor t = layout == 1 ? swap01(c.in(i)) : c.in(i);
    if (t.numel() != D * Bn * H) throw std::runtime_error(n.opType + ": initial state shape " + shapeString(c.in(i).shape()));
    return t;
  };
  Tensor h0 = stateIn(5);
  Tensor c0 = k == Kind::LSTM ? stateIn(6) : Tensor();

  Tensor Y(DType::Float32, {S, D, Bn, H});
  Tensor Yh(DType::Float32, {D, Bn, H});
  Tensor Yc(DType::Float32, {D, Bn, H});
  float *y = Y.data<float>();

  auto clipv = [&](float v) { return clipTo(v, clip); };

  // One direction (its own scratch: the two of a bidirectional node run in
  // parallel, each GEMM then on one thread).
  auto direction = [&](int64_t d) {
  std::vector<float> xw(static_cast<size_t>(S * Bn * GH));
  std::vector<float> hr(static_cast<size_t>(Bn * GH)), hstate(Bn * H), cstate(Bn * H), rh(Bn * H), tmp(Bn * H);
  std::vector<float> gates(static_cast<size_t>(GH)), cellTanh(static_cast<size_t>(H));
  {
    const bool rev = reverseOnly || d == 1;
    const float *w = W.data<float>() + d * GH * I;
    const float *r = R.data<float>() + d * GH * H;
    const float *wb = c.hasInput(3) ? c.in(3).data<float>() + d * 2 * GH : nullptr;
    const float *rb = wb ? wb + GH : nullptr;
    const float *p = k == Kind::LSTM && c.hasInput(7) ? c.in(7).data<float>() + d * 3 * H : nullptr;
    const Act f = acts[d * NA], g = NA > 1 ? acts[d * NA + 1] : f, hact = NA > 2 ? acts[d * NA + 2] : f;
    const bool fastLstm = k == Kind::LSTM && f == Act::Sigmoid && g == Act::Tanh && hact == Act::Tanh && !p &&
                          !(clip >= 0);

    // Input projection over all steps at once, plus the biases that are plain sums.
    gemm<float>(false, true, S * Bn, GH, I, 1.0f, X.data<float>(), I, w, I, 0.0f, xw.data(), GH);
    if (wb)
      for (int64_t row = 0; row < S * Bn; ++row)
        for (int64_t j = 0; j < GH; ++j) {
          float bias = wb[j];
          if (!(k == Kind::GRU && j >= 2 * H)) bias += rb[j]; // GRU's Rbh goes with the recurrence
          xw[row * GH + j] += bias;
        }
    if (Bn * H > 0) {
      copyBytes(hstate.data(), h0.data<float>() + d * Bn * H, Bn * H * sizeof(float));
      if (k == Kind::LSTM) copyBytes(cstate.data(), c0.data<float>() + d * Bn * H, Bn * H * sizeof(float));
    }

    for (int64_t s = 0; s < S; ++s) {
      // H·Rᵀ for every gate (GRU without linear_before_reset: z and r only).
      const int64_t ncols = (k == Kind::GRU && !lbr) ? 2 * H : GH;
      gemm<float>(false, true, Bn, ncols, H, 1.0f, hstate.data(), H, r, H, 0.0f, hr.data(), GH);
      if (k == Kind::GRU && !lbr) {
        // r first, then (r ⊙ H)·Rhᵀ.
        for (int64_t b = 0; b < Bn; ++b) {
          if (s >= lens[b]) continue;
          int64_t t = rev ? lens[b] - 1 - s : s;
          const float *xr = xw.data() + (t * Bn + b) * GH;
          for (int64_t j = 0; j < H; ++j)
            rh[b * H + j] = applyAct(f, clipv(xr[H + j] + hr[b * GH + H + j])) * hstate[b * H + j];
        }
        gemm<float>(false, true, Bn, H, H, 1.0f, rh.data(), H, r + 2 * H * H, H, 0.0f, tmp.data(), H);
      }
      for (int64_t b = 0; b < Bn; ++b) {
        if (s >= lens[b]) continue;
        const int64_t t = rev ? lens[b] - 1 - s : s;
        const float *xr = xw.data() + (t * Bn + b) * GH;
        const float *hb = hr.data() + b * GH;
        float *hs = hstate.data() + b * H;
        if (fastLstm) {
          // The default LSTM (sigmoid, tanh, tanh; no clip, no peepholes):
          // gates i, o, f, c (ONNX's order) through the vectorised loops.
          float *cs = cstate.data() + b * H;
          for (int64_t j = 0; j < GH; ++j) gates[j] = xr[j] + hb[j];
          fastmath::sigmoid(gates.data(), gates.data(), 3 * H);
          fastmath::tanh(gates.data() + 3 * H, gates.data() + 3 * H, H);
          for (int64_t j = 0; j < H; ++j) cs[j] = gates[2 * H + j] * cs[j] + gates[j] * gates[3 * H + j];
          fastmath::tanh(cs, cellTanh.data(), H);
          for (int64_t j = 0; j < H; ++j) hs[j] = gates[H + j] * cellTanh[j];
        } else {
          cellRow(k, f, g, hact, clip, lbr, H, xr, hb, rb, p, tmp.data() + b * H, hs, cstate.data() + b * H);
        }
        copyBytes(y + ((t * D + d) * Bn + b) * H, hs, H * sizeof(float));
      }
    }
    if (Bn * H > 0) {
      copyBytes(Yh.data<float>() + d * Bn * H, hstate.data(), Bn * H * sizeof(float));
      if (k == Kind::LSTM) copyBytes(Yc.data<float>() + d * Bn * H, cstate.data(), Bn * H * sizeof(float));
    }
  }

  };
#ifdef HETPLAN_HAVE_OPENMP
  if (D == 2 && S * Bn * GH >= (1 << 14)) parallelFor(2, 1, [&](int64_t lo, int64_t hi) { for (int64_t d = lo; d < hi; ++d) direction(d); });
  else
#endif
    for (int64_t d = 0; d < D; ++d) direction(d);
  if (layout == 1) toBatchFirst(Y, Yh, Yc, S, D, Bn, H);
  if (c.numOutputs() > 0) c.outputs[0] = std::move(Y);
  if (c.numOutputs() > 1) c.outputs[1] = std::move(Yh);
  if (k == Kind::LSTM && c.numOutputs() > 2) c.outputs[2] = std::move(Yc);
}

} // namespace

void registerRecurrentKernels() {
  const std::vector<DType> f32 = {DType::Float32};
  registerKernel("RNN", {[](KernelContext &c) { recurrent(c, Kind::RNN); },
                         [](const CheckContext &c) { return recurrentCheck(c, Kind::RNN); }, f32});
  registerKernel("GRU", {[](KernelContext &c) { recurrent(c, Kind::GRU); },
                         [](const CheckContext &c) { return recurrentCheck(c, Kind::GRU); }, f32});
  registerKernel("LSTM", {[](KernelContext &c) { recurrent(c, Kind::LSTM); },
                          [](const CheckContext &c) { return recurrentCheck(c, Kind::LSTM); }, f32});
}

} // namespace hetplan::runtime::cpu
