//===- Recurrent.cpp - LSTM, GRU and RNN ----------------------------------===//
//
// X [seq, batch, input] (layout 0) or [batch, seq, input] (layout 1);
// W [dirs, gates * hidden, input]; R [dirs, gates * hidden, hidden]. Y is
// [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden] in layout 1), the
// last states [dirs, batch, hidden] ([batch, dirs, hidden]).
//
//===----------------------------------------------------------------------===//
#include "ops/defs/Defs.h"

namespace hetplan::ops::defs {
namespace {

bool recurrentShape(const ShapeIn &in, std::vector<OutShape> &out, std::string &why) {
  std::vector<int64_t> x;
  if (!requireShape(in, 0, x, why))
    return why.empty();
  if (x.size() != 3)
    return (why = "recurrent input must be [seq, batch, input]", false);
  int64_t hidden = in.attrs.intOr("hidden_size", kUnknownDim);
  int64_t dirs = in.attrs.stringOr("direction", "forward") == "bidirectional" ? 2 : 1;
  bool batchFirst = in.attrs.intOr("layout", 0) == 1;
  int64_t seq = batchFirst ? x[1] : x[0], batch = batchFirst ? x[0] : x[1];
  if (out.size() > 0)
    out[0] = like(batchFirst ? std::vector<int64_t>{batch, seq, dirs, hidden}
                             : std::vector<int64_t>{seq, dirs, batch, hidden});
  for (size_t i = 1; i < out.size(); ++i)
    out[i] = like(batchFirst ? std::vector<int64_t>{batch, dirs, hidden} : std::vector<int64_t>{dirs, batch, hidden});
  return true;
}

enum class Cell { LSTM, GRU, RNN };

// Per step and direction: the gate products X W^T and H R^T, then the
// elementwise gate math per hidden unit: LSTM 8 bias adds + 3 sigmoids +
// 2 tanh + 4 products/sums; GRU 6 bias adds + 2 sigmoids + 1 tanh + 4;
// RNN 2 bias adds + tanh.
template <Cell C> Cost recurrentCost(const CostIn &in) {
  Cost r;
  r.engine = Engine::Matrix;
  auto x = staticInput(in, 0), w = staticInput(in, 1);
  if (!x || !w || x->size() != 3 || w->size() != 3)
    return r;
  double gates = C == Cell::LSTM ? 4 : C == Cell::GRU ? 3 : 1;
  bool batchFirst = in.attrs.intOr("layout", 0) == 1;
  double seq = double(batchFirst ? (*x)[1] : (*x)[0]);
  double batch = double(batchFirst ? (*x)[0] : (*x)[1]);
  double input = double((*x)[2]);
  double dirs = double((*w)[0]);
  double hidden = double(in.attrs.intOr("hidden_size", int64_t(double((*w)[1]) / gates)));
  double pointwise = C == Cell::LSTM ? 8 + 5 * kTranscendental + 4
                     : C == Cell::GRU ? 6 + 3 * kTranscendental + 4
                                      : 2 + kTranscendental;
  if (C == Cell::LSTM && given(in, 7))
    pointwise += 6; // peepholes
  r.flops = seq * dirs * batch * (2 * gates * hidden * (input + hidden) + pointwise * hidden);
  return r;
}

} // namespace

void addRecurrentOps(std::vector<OpDef> &out) {
  auto cell = [&](const char *type, int maxInputs, const char *summary, CostFn cost) {
    out.push_back(define("", type, 1, 3, maxInputs, summary, recurrentShape, cost));
  };
  cell("LSTM", 8, "long short-term memory over a sequence (4 gates, optional peepholes)",
       recurrentCost<Cell::LSTM>);
  cell("GRU", 6, "gated recurrent unit over a sequence (3 gates)", recurrentCost<Cell::GRU>);
  cell("RNN", 6, "a simple recurrent layer over a sequence", recurrentCost<Cell::RNN>);
}

} // namespace hetplan::ops::defs
