// Backward kernels (Gradients.h): every op's analytic input gradients against
// central finite differences of loss = sum_k sum(output_k * R_k) in float64,
// plus softmaxCrossEntropy, reduceGradToShape and the registry.
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

using namespace hetplan::runtime;

namespace {

std::mt19937_64 &rng() {
  static std::mt19937_64 g(20240607);
  return g;
}

Tensor rand64(std::vector<int64_t> shape, double lo = -1.0, double hi = 1.0) {
  Tensor t(DType::Float64, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng());
  return t;
}

Tensor randLike(const Tensor &like) {
  Tensor t = rand64(like.shape());
  if (like.dtype() == DType::Float32) {
    Tensor f(DType::Float32, like.shape());
    for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    return f;
  }
  return t;
}

Tensor i64(std::vector<int64_t> shape, std::vector<int64_t> v) {
  Tensor t(DType::Int64, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}
Tensor i64v(std::vector<int64_t> v) { return i64({static_cast<int64_t>(v.size())}, v); }

Tensor boolT(std::vector<int64_t> shape, std::vector<int> v) {
  Tensor t(DType::Bool, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

Tensor f64(std::vector<int64_t> shape, std::vector<double> v) {
  Tensor t(DType::Float64, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

Attribute intAttr(int64_t v) { Attribute a; a.kind = Attribute::Int; a.i = v; return a; }
Attribute floatAttr(float v) { Attribute a; a.kind = Attribute::Float; a.f = v; return a; }
Attribute intsAttr(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Ints; a.ints = std::move(v); return a; }
Attribute strAttr(std::string v) { Attribute a; a.kind = Attribute::String; a.s = std::move(v); return a; }

double valueAt(const Tensor &t, int64_t i) {
  return t.dtype() == DType::Float32 ? t.data<float>()[i] : t.data<double>()[i];
}

struct GradCase {
  std::string op;
  std::map<std::string, Attribute> attrs;
  std::vector<Tensor> inputs; // an undefined Tensor: an omitted optional input
  std::vector<size_t> wrt;    // inputs whose gradient is checked
  int64_t opset = 17;
  size_t nout = 1;
  std::vector<bool> outGrad; // which outputs get a gradient (default: every float one)

  Node node() const {
    Node n;
    n.opType = op;
    n.name = "n";
    n.attrs = attrs;
    for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i].defined() ? "x" + std::to_string(i) : "");
    for (size_t i = 0; i < nout; ++i) n.outputs.push_back("y" + std::to_string(i));
    return n;
  }
};

std::vector<Tensor> forward(const GradCase &gc, const Node &node, const std::vector<Tensor> &ins) {
  const KernelInfo *k = findKernel(gc.op);
  if (!k) throw std::runtime_error("no forward kernel for " + gc.op);
  KernelContext ctx{node, gc.opset, {}, std::vector<Tensor>(gc.nout)};
  for (const auto &t : ins) ctx.inputs.push_back(t.defined() ? &t : nullptr);
  k->run(ctx);
  return ctx.outputs;
}

double lossOf(const std::vector<Tensor> &outs, const std::vector<Tensor> &R) {
  double s = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!R[k].defined()) continue;
    for (int64_t i = 0; i < outs[k].numel(); ++i) s += valueAt(outs[k], i) * valueAt(R[k], i);
  }
  return s;
}

struct GradResult {
  std::vector<Tensor> analytic;          // per input (undefined when not checked)
  std::vector<std::vector<double>> fd;   // per input
};

/// Runs the backward kernel and finite differences; fails the test on structural problems.
GradResult computeGrads(const GradCase &gc, double eps = 1e-6) {
  GradResult res;
  Node node = gc.node();
  std::vector<Tensor> outs = forward(gc, node, gc.inputs);
  std::vector<Tensor> R(gc.nout);
  for (size_t k = 0; k < gc.nout; ++k) {
    bool want = gc.outGrad.empty() ? true : gc.outGrad[k];
    if (want && outs[k].defined() && isFloatType(outs[k].dtype())) {
      R[k] = randLike(outs[k]);
    }
  }
  const GradientInfo *info = findGradient(gc.op);
  EXPECT_NE(info, nullptr) << gc.op;
  if (!info) return res;
  if (info->check) {
    EXPECT_EQ(info->check(node, gc.opset), "") << gc.op;
  }
  for (size_t i : gc.wrt)
    EXPECT_TRUE(std::find(info->nonDifferentiable.begin(), info->nonDifferentiable.end(), i) ==
                info->nonDifferentiable.end())
        << gc.op << " input " << i << " is listed non-differentiable";
  GradientContext ctx{node, gc.opset, {}, {}, R, std::vector<bool>(gc.inputs.size(), false), {}};
  for (const auto &t : gc.inputs) ctx.inputs.push_back(t.defined() ? &t : nullptr);
  for (const auto &t : outs) ctx.outputs.push_back(&t);
  for (size_t i : gc.wrt) ctx.wantGrad[i] = true;
  info->run(ctx);
  res.analytic.resize(gc.inputs.size());
  res.fd.resize(gc.inputs.size());
  for (size_t i : gc.wrt) {
    EXPECT_LT(i, ctx.inputGrads.size()) << gc.op;
    if (i >= ctx.inputGrads.size()) continue;
    const Tensor &g = ctx.inputGrads[i];
    EXPECT_TRUE(g.defined()) << gc.op << ": no gradient for input " << i;
    if (!g.defined()) continue;
    EXPECT_EQ(g.shape(), gc.inputs[i].shape()) << gc.op << " input " << i;
    EXPECT_EQ(g.dtype(), gc.inputs[i].dtype()) << gc.op << " input " << i;
    if (g.shape() != gc.inputs[i].shape() || g.dtype() != gc.inputs[i].dtype()) continue;
    res.analytic[i] = g;
    std::vector<Tensor> ins = gc.inputs;
    for (auto &t : ins) t = t.defined() ? t.clone() : t;
    double *p = ins[i].data<double>();
    for (int64_t j = 0; j < ins[i].numel(); ++j) {
      double orig = p[j];
      p[j] = orig + eps;
      double lp = lossOf(forward(gc, node, ins), R);
      p[j] = orig - eps;
      double lm = lossOf(forward(gc, node, ins), R);
      p[j] = orig;
      res.fd[i].push_back((lp - lm) / (2 * eps));
    }
  }
  return res;
}

/// Number of elements where analytic and finite-difference gradients differ
/// by more than atol + rtol * |fd|.
int64_t mismatches(const GradResult &r, size_t i, double atol, double rtol, std::string *first = nullptr,
                   double scale = 1.0) {
  int64_t bad = 0;
  const Tensor &g = r.analytic[i];
  if (!g.defined()) return -1;
  for (size_t j = 0; j < r.fd[i].size(); ++j) {
    double a = valueAt(g, j) * scale, f = r.fd[i][j];
    if (!(std::fabs(a - f) <= atol + rtol * std::fabs(f))) {
      if (!bad && first)
        *first = "element " + std::to_string(j) + ": analytic " + std::to_string(a) + " vs numeric " + std::to_string(f);
      ++bad;
    }
  }
  return bad;
}

void expectGradOk(const GradCase &gc, double atol = 1e-6, double rtol = 1e-6) {
  SCOPED_TRACE(gc.op);
  GradResult r = computeGrads(gc);
  for (size_t i : gc.wrt) {
    if (i >= r.analytic.size() || !r.analytic[i].defined()) continue;
    std::string first;
    EXPECT_EQ(mismatches(r, i, atol, rtol, &first), 0) << gc.op << " input " << i << ": " << first;
    double mx = 0;
    for (double v : r.fd[i]) mx = std::max(mx, std::fabs(v));
    EXPECT_GT(mx, 1e-3) << gc.op << " input " << i << ": the numeric gradient is all zeros (vacuous check)";
  }
}

GradCase unary(const std::string &op, Tensor x, std::map<std::string, Attribute> attrs = {}) {
  return GradCase{op, std::move(attrs), {std::move(x)}, {0}};
}
GradCase binary(const std::string &op, Tensor a, Tensor b, std::vector<size_t> wrt = {0, 1}) {
  return GradCase{op, {}, {std::move(a), std::move(b)}, std::move(wrt)};
}

/// The float32 kernels (forward and backward) of `c64`, run on its inputs
/// rounded to float32, give the float64 gradients within 1e-4 (1 + |g|).
void expectFloat32MatchesFloat64(const GradCase &c64) {
  auto to32 = [](const Tensor &t) {
    Tensor f(DType::Float32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    return f;
  };
  SCOPED_TRACE(c64.op);
  Node n = c64.node();
  std::vector<Tensor> in32;
  for (auto &t : c64.inputs) in32.push_back(to32(t));
  GradCase c32 = c64;
  c32.inputs = in32;
  auto o64 = forward(c64, n, c64.inputs), o32 = forward(c32, n, in32);
  ASSERT_EQ(o32[0].dtype(), DType::Float32);
  ASSERT_EQ(o32[0].shape(), o64[0].shape());
  Tensor r64 = rand64(o64[0].shape());
  std::vector<bool> want(c64.inputs.size(), false);
  for (size_t i : c64.wrt) want[i] = true;
  GradientContext g64{n, c64.opset, {}, {&o64[0]}, {r64}, want, {}};
  GradientContext g32{n, c64.opset, {}, {&o32[0]}, {to32(r64)}, want, {}};
  for (auto &t : c64.inputs) g64.inputs.push_back(&t);
  for (auto &t : in32) g32.inputs.push_back(&t);
  findGradient(c64.op)->run(g64);
  findGradient(c64.op)->run(g32);
  for (size_t i : c64.wrt) {
    ASSERT_EQ(g32.inputGrads[i].dtype(), DType::Float32);
    ASSERT_EQ(g32.inputGrads[i].shape(), c64.inputs[i].shape());
    for (int64_t j = 0; j < g64.inputGrads[i].numel(); ++j)
      EXPECT_NEAR(g32.inputGrads[i].data<float>()[j], g64.inputGrads[i].data<double>()[j],
                  1e-4 * (1 + std::fabs(g64.inputGrads[i].data<double>()[j])))
          << "input " << i << " element " << j;
  }
}

} // namespace

// ---------------------------------------------------------------- elementwise

TEST(Gradients, BinaryArithmeticWithBroadcasting) {
  expectGradOk(binary("Add", rand64({2, 3, 4}), rand64({2, 3, 4})));
  expectGradOk(binary("Add", rand64({2, 3, 4}), rand64({4})));
  expectGradOk(binary("Add", rand64({1, 3, 1}), rand64({2, 1, 4})));
  expectGradOk(binary("Sub", rand64({2, 1, 4}), rand64({3, 1})));
  expectGradOk(binary("Sub", rand64({3}), rand64({2, 3})));
  expectGradOk(binary("Mul", rand64({2, 1, 4}), rand64({3, 1})));
  expectGradOk(binary("Mul", rand64({2, 3, 4}), rand64({})));
  expectGradOk(binary("Mul", rand64({2, 3}), rand64({2, 3})));
  expectGradOk(binary("Div", rand64({2, 3, 4}), rand64({3, 1}, 0.5, 2.0)));
  expectGradOk(binary("Div", rand64({4}), rand64({2, 4}, -2.0, -0.5)));
}

TEST(Gradients, Pow) {
  expectGradOk(binary("Pow", rand64({2, 3}, 0.5, 2.0), rand64({3}, -2.0, 3.0)));
  expectGradOk(binary("Pow", rand64({2, 3}, 0.5, 2.0), rand64({2, 3}, -2.0, 3.0)));
  // a constant exponent (GELU's x^3): only the base is asked for
  expectGradOk(binary("Pow", rand64({2, 3}), f64({}, {3.0}), {0}));
  expectGradOk(binary("Pow", rand64({2, 3}), i64({}, {2}), {0}));
  // a float32 exponent with a float64 base: the gradient keeps the exponent's type
  Tensor e(DType::Float32, {3});
  for (int i = 0; i < 3; ++i) e.data<float>()[i] = 1.5f + i;
  GradCase gc = binary("Pow", rand64({2, 3}, 0.5, 2.0), e, {0});
  expectGradOk(gc);
  Node n = gc.node();
  auto outs = forward(gc, n, gc.inputs);
  GradientContext ctx{n, 17, {&gc.inputs[0], &gc.inputs[1]}, {&outs[0]}, {randLike(outs[0])}, {true, true}, {}};
  findGradient("Pow")->run(ctx);
  ASSERT_EQ(ctx.inputGrads.size(), 2u);
  EXPECT_EQ(ctx.inputGrads[1].dtype(), DType::Float32);
  EXPECT_EQ(ctx.inputGrads[1].shape(), (std::vector<int64_t>{3}));
}

TEST(Gradients, UnaryOps) {
  expectGradOk(unary("Neg", rand64({2, 3})));
  expectGradOk(unary("Sqrt", rand64({2, 3}, 0.2, 3.0)));
  expectGradOk(unary("Exp", rand64({2, 3})));
  expectGradOk(unary("Log", rand64({2, 3}, 0.2, 3.0)));
  expectGradOk(unary("Tanh", rand64({2, 3}, -2, 2)));
  expectGradOk(unary("Sigmoid", rand64({2, 3}, -3, 3)));
  expectGradOk(unary("Erf", rand64({2, 3}, -2, 2)));
  expectGradOk(unary("Relu", rand64({3, 4})));
  expectGradOk(unary("LeakyRelu", rand64({3, 4}), {{"alpha", floatAttr(0.2f)}}));
  expectGradOk(unary("LeakyRelu", rand64({3, 4})));
  expectGradOk(unary("Gelu", rand64({3, 4}, -3, 3)));
  expectGradOk(unary("Gelu", rand64({3, 4}, -3, 3), {{"approximate", strAttr("none")}}));
  expectGradOk(unary("Gelu", rand64({3, 4}, -3, 3), {{"approximate", strAttr("tanh")}}));
  expectGradOk(unary("Reciprocal", rand64({2, 3}, 0.5, 2.0)));
  expectGradOk(unary("Abs", rand64({2, 3})));
  expectGradOk(unary("Sin", rand64({2, 3})));
  expectGradOk(unary("Cos", rand64({2, 3})));
  expectGradOk(unary("Softplus", rand64({2, 3})));
  expectGradOk(unary("Elu", rand64({2, 3}), {{"alpha", floatAttr(0.7f)}}));
  expectGradOk(unary("Identity", rand64({2, 3})));
  GradCase clip{"Clip", {}, {rand64({3, 4}), f64({}, {-0.5}), f64({}, {0.6})}, {0}};
  expectGradOk(clip);
  // Gelu's check refuses an unknown approximation
  Node bad;
  bad.opType = "Gelu";
  bad.attrs["approximate"] = strAttr("cubic");
  EXPECT_NE(findGradient("Gelu")->check(bad, 20), "");
}

TEST(Gradients, VariadicSumMeanMaxMin) {
  for (const char *op : {"Sum", "Mean", "Max", "Min"}) {
    // every input holds the extreme somewhere (max and min)
    GradCase gc{op, {}, {f64({2, 3}, {0.9, -0.5, 0.1, -0.8, 0.7, 0.2}), f64({3}, {0.3, 0.4, -0.9}), f64({2, 1}, {0.0, 0.5})},
                {0, 1, 2}};
    expectGradOk(gc);
  }
}

TEST(Gradients, WhereAndDropout) {
  GradCase where{"Where", {}, {boolT({2, 1, 4}, {1, 0, 0, 1, 0, 1, 1, 0}), rand64({3, 1}), rand64({2, 3, 4})}, {1, 2}};
  expectGradOk(where);
  GradCase where2{"Where", {}, {boolT({2, 3}, {1, 0, 1, 1, 0, 0}), rand64({2, 3}), rand64({})}, {1, 2}};
  expectGradOk(where2);
  EXPECT_EQ(findGradient("Where")->nonDifferentiable, (std::vector<size_t>{0}));
  // Dropout at inference: identity; the mask output gets no gradient
  GradCase drop{"Dropout", {}, {rand64({2, 3}), f64({}, {0.3}), Tensor()}, {0}, 13, 2};
  expectGradOk(drop);
  Node trainMode;
  trainMode.opType = "Dropout";
  trainMode.inputs = {"x", "r", "t"};
  EXPECT_NE(findGradient("Dropout")->check(trainMode, 13), "");
}

TEST(Gradients, CastBetweenFloatTypes) {
  GradCase same{"Cast", {{"to", intAttr(11)}}, {rand64({2, 3})}, {0}};
  expectGradOk(same);
  // float64 -> float32: the float32 gradient comes back as float64
  Node n;
  n.opType = "Cast";
  n.attrs["to"] = intAttr(1);
  Tensor x = rand64({2, 3});
  Tensor y(DType::Float32, {2, 3});
  Tensor dy = randLike(y);
  GradientContext ctx{n, 17, {&x}, {&y}, {dy}, {true}, {}};
  findGradient("Cast")->run(ctx);
  ASSERT_EQ(ctx.inputGrads.size(), 1u);
  ASSERT_EQ(ctx.inputGrads[0].dtype(), DType::Float64);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(ctx.inputGrads[0].data<double>()[i], dy.data<float>()[i]);
}

// ---------------------------------------------------------------- linalg

TEST(Gradients, MatMul) {
  expectGradOk(binary("MatMul", rand64({3, 4}), rand64({4, 5})));
  expectGradOk(binary("MatMul", rand64({2, 3, 4, 5}), rand64({5, 6})));
  expectGradOk(binary("MatMul", rand64({5}), rand64({2, 5, 3})));
  expectGradOk(binary("MatMul", rand64({2, 3, 4}), rand64({4})));
  expectGradOk(binary("MatMul", rand64({4}), rand64({4})));
  expectGradOk(binary("MatMul", rand64({2, 1, 3, 4}), rand64({3, 4, 2})));
  expectGradOk(binary("MatMul", rand64({3, 4}), rand64({2, 4, 5})));
  expectGradOk(binary("MatMul", rand64({2, 3, 4}), rand64({2, 4, 5})));
  expectGradOk(binary("MatMul", rand64({2, 3, 4}), rand64({1, 4, 5})));
  expectGradOk(binary("MatMul", rand64({2, 3, 4}), rand64({2, 4, 5}), {1}));
}

TEST(Gradients, Gemm) {
  expectGradOk(GradCase{"Gemm", {}, {rand64({3, 4}), rand64({4, 5}), rand64({5})}, {0, 1, 2}});
  expectGradOk(GradCase{"Gemm", {}, {rand64({3, 4}), rand64({4, 5})}, {0, 1}});
  expectGradOk(GradCase{"Gemm",
                        {{"transA", intAttr(1)}, {"alpha", floatAttr(0.5f)}, {"beta", floatAttr(2.0f)}},
                        {rand64({4, 3}), rand64({4, 5}), rand64({3, 1})},
                        {0, 1, 2}});
  expectGradOk(GradCase{"Gemm",
                        {{"transB", intAttr(1)}, {"alpha", floatAttr(-1.5f)}, {"beta", floatAttr(0.25f)}},
                        {rand64({3, 4}), rand64({5, 4}), rand64({})},
                        {0, 1, 2}});
  expectGradOk(GradCase{"Gemm",
                        {{"transA", intAttr(1)}, {"transB", intAttr(1)}, {"alpha", floatAttr(0.75f)}},
                        {rand64({4, 3}), rand64({5, 4}), rand64({3, 5})},
                        {0, 1, 2}});
}

TEST(Gradients, LayerNormalization) {
  expectGradOk(GradCase{"LayerNormalization", {}, {rand64({2, 3, 4}), rand64({4}), rand64({4})}, {0, 1, 2}});
  expectGradOk(GradCase{"LayerNormalization", {{"axis", intAttr(1)}, {"epsilon", floatAttr(1e-3f)}},
                        {rand64({2, 3, 4}), rand64({3, 4}), rand64({3, 4})}, {0, 1, 2}});
  // scale broadcast over the normalized shape, no bias
  expectGradOk(GradCase{"LayerNormalization", {{"axis", intAttr(1)}}, {rand64({2, 3, 4}), rand64({4})}, {0, 1}});
  // Mean and InvStdDev requested as outputs, with gradients of their own
  expectGradOk(GradCase{"LayerNormalization", {}, {rand64({3, 5}), rand64({5}), rand64({5})}, {0, 1, 2}, 17, 3});
  // only the statistics reach the loss
  expectGradOk(GradCase{"LayerNormalization", {}, {rand64({3, 5}), rand64({5}), rand64({5})}, {0}, 17, 3,
                        {false, true, true}});
}

TEST(Gradients, SoftmaxAndLogSoftmax) {
  expectGradOk(GradCase{"Softmax", {{"axis", intAttr(-1)}}, {rand64({2, 3, 4}, -2, 2)}, {0}, 13});
  expectGradOk(GradCase{"Softmax", {{"axis", intAttr(1)}}, {rand64({2, 3, 4}, -2, 2)}, {0}, 13});
  expectGradOk(GradCase{"Softmax", {}, {rand64({2, 3, 4}, -2, 2)}, {0}, 13});
  // opset < 13: coerced to 2-D at axis (default 1)
  expectGradOk(GradCase{"Softmax", {}, {rand64({2, 3, 4}, -2, 2)}, {0}, 11});
  expectGradOk(GradCase{"Softmax", {{"axis", intAttr(2)}}, {rand64({2, 3, 4}, -2, 2)}, {0}, 11});
  expectGradOk(GradCase{"LogSoftmax", {{"axis", intAttr(-1)}}, {rand64({2, 3, 4}, -2, 2)}, {0}, 13});
  expectGradOk(GradCase{"LogSoftmax", {{"axis", intAttr(0)}}, {rand64({2, 3, 4}, -2, 2)}, {0}, 13});
  expectGradOk(GradCase{"LogSoftmax", {}, {rand64({2, 3, 4}, -2, 2)}, {0}, 11});
}

// ---------------------------------------------------------------- tensor ops

TEST(Gradients, TopK) {
  // values scatter back to the selected positions (random values: no ties)
  expectGradOk(GradCase{"TopK", {}, {rand64({3, 5}), i64v({2})}, {0}, 17, 2});
  expectGradOk(GradCase{"TopK", {{"axis", intAttr(0)}, {"largest", intAttr(0)}}, {rand64({4, 2, 3}), i64v({3})}, {0}, 17, 2});
  EXPECT_EQ(findGradient("TopK")->nonDifferentiable, (std::vector<size_t>{1}));
}

TEST(Gradients, GatherND) {
  // repeated and negative indices add up; batch_dims = 1 indexes within each batch
  expectGradOk(GradCase{"GatherND", {}, {rand64({3, 4, 2}), i64({3, 2}, {0, 1, 2, -1, 0, 1})}, {0}});
  expectGradOk(GradCase{"GatherND", {}, {rand64({3, 4}), i64({2, 1}, {2, 2})}, {0}});
  expectGradOk(GradCase{"GatherND", {{"batch_dims", intAttr(1)}}, {rand64({2, 4, 3}), i64({2, 2, 1}, {3, 0, 1, 1})}, {0}});
  EXPECT_EQ(findGradient("GatherND")->nonDifferentiable, (std::vector<size_t>{1}));
}

TEST(Gradients, Gather) {
  expectGradOk(GradCase{"Gather", {}, {rand64({5, 3}), i64({2, 3}, {0, 2, 0, 4, -1, 1})}, {0}});
  expectGradOk(GradCase{"Gather", {{"axis", intAttr(1)}}, {rand64({2, 4, 3}), i64v({3, -4, 1, 0})}, {0}});
  expectGradOk(GradCase{"Gather", {{"axis", intAttr(-1)}}, {rand64({2, 4, 3}), i64({}, {-1})}, {0}});
  EXPECT_EQ(findGradient("Gather")->nonDifferentiable, (std::vector<size_t>{1}));
}

TEST(Gradients, ReshapeLike) {
  expectGradOk(GradCase{"Reshape", {}, {rand64({2, 3, 4}), i64v({4, -1})}, {0}});
  expectGradOk(GradCase{"Flatten", {{"axis", intAttr(2)}}, {rand64({2, 3, 4})}, {0}});
  expectGradOk(GradCase{"Squeeze", {}, {rand64({2, 1, 3}), i64v({1})}, {0}, 13});
  expectGradOk(GradCase{"Squeeze", {{"axes", intsAttr({1})}}, {rand64({2, 1, 3})}, {0}, 11});
  expectGradOk(GradCase{"Unsqueeze", {}, {rand64({2, 3}), i64v({0, 3})}, {0}, 13});
  expectGradOk(GradCase{"Transpose", {{"perm", intsAttr({1, 2, 0})}}, {rand64({2, 3, 4})}, {0}});
  expectGradOk(GradCase{"Transpose", {{"perm", intsAttr({0, 2, 1, 3})}}, {rand64({2, 3, 4, 2})}, {0}});
  expectGradOk(GradCase{"Transpose", {}, {rand64({2, 3, 4})}, {0}});
  expectGradOk(GradCase{"Expand", {}, {rand64({3, 1}), i64v({2, 3, 4})}, {0}});
  expectGradOk(GradCase{"Tile", {}, {rand64({2, 3}), i64v({2, 3})}, {0}});
}

TEST(Gradients, SplitAndConcat) {
  // uneven split; the middle output does not reach the loss (zeros)
  expectGradOk(GradCase{"Split", {{"axis", intAttr(1)}}, {rand64({2, 7, 3}), i64v({2, 4, 1})}, {0}, 13, 3,
                        {true, false, true}});
  expectGradOk(GradCase{"Split", {{"axis", intAttr(-1)}}, {rand64({2, 6})}, {0}, 13, 3});
  expectGradOk(GradCase{"Split", {{"split", intsAttr({1, 2})}}, {rand64({3, 2})}, {0}, 11, 2});
  // uneven split without sizes (last piece smaller)
  expectGradOk(GradCase{"Split", {{"axis", intAttr(0)}}, {rand64({5, 2})}, {0}, 13, 2});
  expectGradOk(GradCase{"Concat", {{"axis", intAttr(1)}}, {rand64({2, 2, 3}), rand64({2, 1, 3}), rand64({2, 3, 3})},
                        {0, 1, 2}});
  expectGradOk(GradCase{"Concat", {{"axis", intAttr(-1)}}, {rand64({2, 2}), rand64({2, 3})}, {1}});
}

TEST(Gradients, Slice) {
  expectGradOk(GradCase{"Slice", {}, {rand64({5, 6}), i64v({1, 0}), i64v({4, 5})}, {0}});
  // negative and positive steps, ends past the bounds, explicit axes
  expectGradOk(GradCase{"Slice", {},
                        {rand64({5, 6}), i64v({4, 1}), i64v({-100, 100}), i64v({0, 1}), i64v({-2, 2})}, {0}});
  expectGradOk(GradCase{"Slice", {}, {rand64({2, 5, 4}), i64v({-1}), i64v({0}), i64v({1}), i64v({-1})}, {0}});
  expectGradOk(GradCase{"Slice", {}, {rand64({2, 5, 4}), i64v({1}), i64v({3}), i64v({-1})}, {0}});
  // opset < 10: attributes
  expectGradOk(GradCase{"Slice", {{"starts", intsAttr({1})}, {"ends", intsAttr({3})}, {"axes", intsAttr({1})}},
                        {rand64({2, 5})}, {0}, 9});
}

TEST(Gradients, Reductions) {
  expectGradOk(GradCase{"ReduceSum", {{"keepdims", intAttr(0)}}, {rand64({2, 3, 4}), i64v({0, 2})}, {0}, 13});
  expectGradOk(GradCase{"ReduceSum", {}, {rand64({2, 3, 4}), i64v({-1})}, {0}, 13});
  expectGradOk(GradCase{"ReduceSum", {}, {rand64({2, 3, 4})}, {0}, 13});
  expectGradOk(GradCase{"ReduceSum", {{"noop_with_empty_axes", intAttr(1)}}, {rand64({2, 3})}, {0}, 13});
  expectGradOk(GradCase{"ReduceSum", {{"axes", intsAttr({1})}, {"keepdims", intAttr(0)}}, {rand64({2, 3, 4})}, {0}, 11});
  expectGradOk(GradCase{"ReduceMean", {{"axes", intsAttr({1})}}, {rand64({2, 3, 4})}, {0}, 13});
  expectGradOk(GradCase{"ReduceMean", {{"keepdims", intAttr(0)}}, {rand64({2, 3, 4})}, {0}, 13});
  expectGradOk(GradCase{"ReduceMean", {{"keepdims", intAttr(0)}}, {rand64({2, 3, 4}), i64v({-1, 0})}, {0}, 18});
}

// ---------------------------------------------------------------- convnets

namespace {
using Attrs = std::map<std::string, Attribute>;
GradCase conv(Tensor x, Tensor w, Tensor b, Attrs attrs) {
  std::vector<size_t> wrt = b.defined() ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 1};
  std::vector<Tensor> ins = {std::move(x), std::move(w)};
  if (b.defined()) ins.push_back(std::move(b));
  return GradCase{"Conv", std::move(attrs), std::move(ins), wrt, 11};
}
} // namespace

TEST(Gradients, Conv2D) {
  // plain 3x3, bias
  expectGradOk(conv(rand64({2, 3, 5, 5}), rand64({4, 3, 3, 3}), rand64({4}), {}));
  // pads + strides + dilations (asymmetric pads)
  expectGradOk(conv(rand64({2, 3, 7, 6}), rand64({4, 3, 3, 2}), rand64({4}),
                    {{"pads", intsAttr({1, 0, 2, 1})}, {"strides", intsAttr({2, 1})}, {"dilations", intsAttr({2, 1})}}));
  expectGradOk(conv(rand64({1, 2, 8, 7}), rand64({3, 2, 3, 3}), Tensor(),
                    {{"pads", intsAttr({1, 1, 1, 1})}, {"strides", intsAttr({2, 3})}, {"dilations", intsAttr({1, 2})}}));
  // auto_pad SAME_UPPER / SAME_LOWER / VALID with strides
  expectGradOk(conv(rand64({1, 2, 6, 5}), rand64({3, 2, 3, 2}), rand64({3}),
                    {{"auto_pad", strAttr("SAME_UPPER")}, {"strides", intsAttr({2, 2})}}));
  expectGradOk(conv(rand64({1, 2, 6, 5}), rand64({3, 2, 2, 3}), Tensor(),
                    {{"auto_pad", strAttr("SAME_LOWER")}, {"strides", intsAttr({1, 2})}}));
  expectGradOk(conv(rand64({1, 2, 6, 5}), rand64({3, 2, 3, 3}), Tensor(),
                    {{"auto_pad", strAttr("VALID")}, {"strides", intsAttr({2, 1})}}));
  // 1x1 (pointwise: the GEMM on the input itself) and 1x1 with a stride
  expectGradOk(conv(rand64({2, 4, 3, 3}), rand64({5, 4, 1, 1}), rand64({5}), {}));
  expectGradOk(conv(rand64({2, 4, 5, 5}), rand64({3, 4, 1, 1}), Tensor(), {{"strides", intsAttr({2, 2})}}));
  // explicit kernel_shape
  expectGradOk(conv(rand64({1, 2, 5, 5}), rand64({2, 2, 3, 3}), Tensor(), {{"kernel_shape", intsAttr({3, 3})}}));
}

TEST(Gradients, ConvGroups) {
  // group = 2 (the GEMM path per group)
  expectGradOk(conv(rand64({2, 4, 5, 5}), rand64({6, 2, 3, 3}), rand64({6}),
                    {{"group", intAttr(2)}, {"pads", intsAttr({1, 1, 1, 1})}, {"strides", intsAttr({2, 2})}}));
  // depthwise (one input channel per group), stride + pads + dilation
  expectGradOk(conv(rand64({2, 3, 6, 6}), rand64({3, 1, 3, 3}), rand64({3}),
                    {{"group", intAttr(3)}, {"pads", intsAttr({1, 2, 1, 0})}, {"strides", intsAttr({2, 1})},
                     {"dilations", intsAttr({1, 2})}}));
  // depthwise with a channel multiplier of 2
  expectGradOk(conv(rand64({2, 2, 5, 5}), rand64({4, 1, 3, 3}), Tensor(),
                    {{"group", intAttr(2)}, {"pads", intsAttr({1, 1, 1, 1})}}));
  // depthwise 1x1 (pointwise path with Cg = 1)
  expectGradOk(conv(rand64({2, 3, 3, 3}), rand64({3, 1, 1, 1}), rand64({3}), {{"group", intAttr(3)}}));
  // only the weight wanted / only the bias wanted
  GradCase onlyW = conv(rand64({1, 4, 4, 4}), rand64({4, 2, 2, 2}), rand64({4}), {{"group", intAttr(2)}});
  onlyW.wrt = {1};
  expectGradOk(onlyW);
  GradCase onlyB = conv(rand64({1, 3, 4, 4}), rand64({3, 1, 2, 2}), rand64({3}), {{"group", intAttr(3)}});
  onlyB.wrt = {2};
  expectGradOk(onlyB);
}

TEST(Gradients, Conv1DAnd3D) {
  expectGradOk(conv(rand64({2, 3, 9}), rand64({4, 3, 3}), rand64({4}),
                    {{"pads", intsAttr({2, 1})}, {"strides", intsAttr({2})}, {"dilations", intsAttr({2})}}));
  expectGradOk(conv(rand64({2, 4, 7}), rand64({4, 1, 3}), Tensor(), {{"group", intAttr(4)}, {"pads", intsAttr({1, 1})}}));
  expectGradOk(conv(rand64({1, 2, 4, 5, 4}), rand64({3, 2, 2, 3, 2}), rand64({3}),
                    {{"pads", intsAttr({1, 0, 1, 0, 1, 1})}, {"strides", intsAttr({2, 1, 2})}}));
}

TEST(Gradients, MaxPool) {
  expectGradOk(GradCase{"MaxPool", {{"kernel_shape", intsAttr({2, 2})}, {"strides", intsAttr({2, 2})}},
                        {rand64({2, 3, 4, 6})}, {0}, 11});
  // overlapping windows, pads (never the max: padding is -inf), strides
  expectGradOk(GradCase{"MaxPool",
                        {{"kernel_shape", intsAttr({3, 3})}, {"strides", intsAttr({2, 2})}, {"pads", intsAttr({1, 0, 1, 1})}},
                        {rand64({2, 2, 7, 6})}, {0}, 11});
  // ceil_mode: the last windows hang over the end
  expectGradOk(GradCase{"MaxPool",
                        {{"kernel_shape", intsAttr({3, 2})}, {"strides", intsAttr({2, 2})}, {"ceil_mode", intAttr(1)}},
                        {rand64({1, 2, 6, 5})}, {0}, 11});
  expectGradOk(GradCase{"MaxPool",
                        {{"kernel_shape", intsAttr({2, 2})}, {"dilations", intsAttr({2, 1})}, {"auto_pad", strAttr("SAME_UPPER")},
                         {"strides", intsAttr({2, 1})}},
                        {rand64({1, 2, 5, 5})}, {0}, 11});
  // 1-D; the Indices output (int64) gets no gradient
  expectGradOk(GradCase{"MaxPool", {{"kernel_shape", intsAttr({3})}, {"strides", intsAttr({2})}, {"pads", intsAttr({1, 1})}},
                        {rand64({2, 3, 8})}, {0}, 11, 2});
  // ties: the first maximum of each window gets the whole gradient
  GradCase tie{"MaxPool", {{"kernel_shape", intsAttr({2, 2})}, {"strides", intsAttr({2, 2})}},
               {f64({1, 1, 2, 4}, {0.5, 0.5, 1.0, 0.0, 0.5, 0.5, 0.0, 1.0})}, {0}, 11};
  Node n = tie.node();
  auto outs = forward(tie, n, tie.inputs);
  GradientContext ctx{n, 11, {&tie.inputs[0]}, {&outs[0]}, {f64({1, 1, 1, 2}, {3.0, 7.0})}, {true}, {}};
  findGradient("MaxPool")->run(ctx);
  ASSERT_EQ(ctx.inputGrads.size(), 1u);
  std::vector<double> want = {3, 0, 7, 0, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ctx.inputGrads[0].data<double>()[i], want[i]) << i;
}

TEST(Gradients, AveragePool) {
  for (int include = 0; include < 2; ++include) {
    SCOPED_TRACE(include);
    Attribute inc = intAttr(include);
    expectGradOk(GradCase{"AveragePool",
                          {{"kernel_shape", intsAttr({3, 3})}, {"strides", intsAttr({2, 2})}, {"pads", intsAttr({1, 1, 1, 0})},
                           {"count_include_pad", inc}},
                          {rand64({2, 2, 6, 5})}, {0}, 11});
    expectGradOk(GradCase{"AveragePool",
                          {{"kernel_shape", intsAttr({3, 2})}, {"strides", intsAttr({2, 2})}, {"pads", intsAttr({1, 0, 0, 1})},
                           {"ceil_mode", intAttr(1)}, {"count_include_pad", inc}},
                          {rand64({1, 2, 6, 6})}, {0}, 11});
    // ceil_mode windows that hang past the end padding (not counted either way)
    expectGradOk(GradCase{"AveragePool",
                          {{"kernel_shape", intsAttr({2, 3})}, {"strides", intsAttr({2, 2})}, {"pads", intsAttr({0, 1, 0, 0})},
                           {"ceil_mode", intAttr(1)}, {"count_include_pad", inc}},
                          {rand64({1, 2, 5, 6})}, {0}, 11});
    expectGradOk(GradCase{"AveragePool",
                          {{"kernel_shape", intsAttr({3})}, {"auto_pad", strAttr("SAME_LOWER")}, {"count_include_pad", inc}},
                          {rand64({2, 2, 7})}, {0}, 11});
  }
  // the two modes differ at the border (so the attribute is not ignored)
  GradCase a{"AveragePool", {{"kernel_shape", intsAttr({3, 3})}, {"pads", intsAttr({1, 1, 1, 1})}}, {rand64({1, 1, 3, 3})}, {0}, 11};
  GradCase b = a;
  b.attrs["count_include_pad"] = intAttr(1);
  GradResult ra = computeGrads(a), rb = computeGrads(b);
  EXPECT_GT(std::fabs(valueAt(ra.analytic[0], 0) - valueAt(rb.analytic[0], 0)), 0.0);
}

TEST(Gradients, GlobalPools) {
  expectGradOk(GradCase{"GlobalAveragePool", {}, {rand64({2, 3, 4, 5})}, {0}});
  expectGradOk(GradCase{"GlobalAveragePool", {}, {rand64({2, 3, 7})}, {0}});
  expectGradOk(GradCase{"GlobalMaxPool", {}, {rand64({2, 3, 4, 5})}, {0}});
  expectGradOk(GradCase{"GlobalMaxPool", {}, {rand64({2, 3, 2, 2, 3})}, {0}});
}

TEST(Gradients, BatchNormalizationInference) {
  expectGradOk(GradCase{"BatchNormalization", {{"epsilon", floatAttr(1e-3f)}},
                        {rand64({2, 3, 4, 5}), rand64({3}), rand64({3}), rand64({3}), rand64({3}, 0.5, 2.0)},
                        {0, 1, 2}, 9});
  expectGradOk(GradCase{"BatchNormalization", {},
                        {rand64({3, 4}), rand64({4}), rand64({4}), rand64({4}), rand64({4}, 0.5, 2.0)}, {0, 1, 2}, 15});
  expectGradOk(GradCase{"BatchNormalization", {},
                        {rand64({2, 2, 3}), rand64({2}), rand64({2}), rand64({2}), rand64({2}, 0.5, 2.0)}, {1}, 15});
  EXPECT_EQ(findGradient("BatchNormalization")->nonDifferentiable, (std::vector<size_t>{3, 4}));
  Node train;
  train.opType = "BatchNormalization";
  train.outputs = {"y"};
  EXPECT_EQ(findGradient("BatchNormalization")->check(train, 15), "");
  train.attrs["training_mode"] = intAttr(1);
  EXPECT_NE(findGradient("BatchNormalization")->check(train, 15), "");
  Node legacy;
  legacy.opType = "BatchNormalization";
  legacy.outputs = {"y", "mean", "var", "saved_mean", "saved_var"};
  EXPECT_NE(findGradient("BatchNormalization")->check(legacy, 9), "");
}

TEST(Gradients, LRN) {
  expectGradOk(GradCase{"LRN", {{"size", intAttr(3)}, {"alpha", floatAttr(0.5f)}, {"beta", floatAttr(0.75f)}, {"bias", floatAttr(1.5f)}},
                        {rand64({2, 5, 3, 2}, -2, 2)}, {0}, 11});
  expectGradOk(GradCase{"LRN", {{"size", intAttr(4)}, {"alpha", floatAttr(0.3f)}, {"beta", floatAttr(0.6f)}},
                        {rand64({1, 6, 4}, -2, 2)}, {0}, 11});
}

TEST(Gradients, ConvAndPoolFloat32MatchFloat64) {
  std::vector<GradCase> cases = {
      conv(rand64({2, 4, 6, 6}), rand64({4, 2, 3, 3}), rand64({4}),
           {{"group", intAttr(2)}, {"pads", intsAttr({1, 1, 1, 1})}, {"strides", intsAttr({2, 1})}}),
      conv(rand64({2, 3, 5, 5}), rand64({3, 1, 3, 3}), rand64({3}), {{"group", intAttr(3)}, {"pads", intsAttr({1, 1, 1, 1})}}),
      GradCase{"MaxPool", {{"kernel_shape", intsAttr({3, 3})}, {"strides", intsAttr({2, 2})}, {"pads", intsAttr({1, 1, 1, 1})}},
               {rand64({2, 3, 6, 6})}, {0}, 11},
      GradCase{"AveragePool", {{"kernel_shape", intsAttr({3, 3})}, {"strides", intsAttr({2, 2})}, {"pads", intsAttr({1, 1, 1, 1})}},
               {rand64({2, 3, 6, 6})}, {0}, 11},
      GradCase{"BatchNormalization", {}, {rand64({2, 3, 4, 4}), rand64({3}), rand64({3}), rand64({3}), rand64({3}, 0.5, 2.0)},
               {0, 1, 2}, 15},
      GradCase{"LRN", {{"size", intAttr(3)}, {"alpha", floatAttr(0.5f)}}, {rand64({2, 5, 3})}, {0}, 11},
  };
  for (const GradCase &c64 : cases) expectFloat32MatchesFloat64(c64);
}

TEST(Gradients, ConvHarnessDetectsAWrongGradient) {
  // a Conv gradient off by 0.1% fails the comparison (per input)
  GradResult r = computeGrads(conv(rand64({1, 2, 5, 5}), rand64({3, 2, 3, 3}), rand64({3}),
                                   {{"pads", intsAttr({1, 1, 1, 1})}, {"strides", intsAttr({2, 2})}}));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(mismatches(r, i, 1e-6, 1e-6), 0) << i;
    EXPECT_GT(mismatches(r, i, 1e-6, 1e-6, nullptr, 1.001), 0) << i;
  }
}

// ---------------------------------------------------------------- float32

TEST(Gradients, Float32MatchesFloat64) {
  expectFloat32MatchesFloat64(binary("MatMul", rand64({2, 3, 4}), rand64({4, 5})));
  expectFloat32MatchesFloat64(binary("MatMul", rand64({2, 3, 4}), rand64({2, 4, 5})));
  expectFloat32MatchesFloat64(GradCase{"LayerNormalization", {}, {rand64({4, 6}), rand64({6}), rand64({6})}, {0, 1, 2}});
}

// ---------------------------------------------------------------- the harness

TEST(Gradients, HarnessDetectsAWrongGradient) {
  // the comparison is not vacuous: a gradient off by 0.1% fails it
  GradResult r = computeGrads(binary("Mul", rand64({2, 3}), rand64({2, 3})));
  EXPECT_EQ(mismatches(r, 0, 1e-6, 1e-6), 0);
  EXPECT_GT(mismatches(r, 0, 1e-6, 1e-6, nullptr, 1.001), 0);
}

// ---------------------------------------------------------------- helpers

TEST(Gradients, ReduceGradToShape) {
  Tensor g = rand64({2, 3, 4});
  auto sumOver = [&](auto keep) {
    std::map<std::vector<int64_t>, double> m;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 4; ++c) m[keep(a, b, c)] += g.data<double>()[(a * 3 + b) * 4 + c];
    return m;
  };
  Tensor r1 = reduceGradToShape(g, {3, 1});
  auto m1 = sumOver([](int64_t, int64_t b, int64_t) { return std::vector<int64_t>{b}; });
  ASSERT_EQ(r1.shape(), (std::vector<int64_t>{3, 1}));
  for (int64_t b = 0; b < 3; ++b) EXPECT_NEAR(r1.data<double>()[b], m1[{b}], 1e-12);
  Tensor r2 = reduceGradToShape(g, {1, 1, 4});
  auto m2 = sumOver([](int64_t, int64_t, int64_t c) { return std::vector<int64_t>{c}; });
  for (int64_t c = 0; c < 4; ++c) EXPECT_NEAR(r2.data<double>()[c], m2[{c}], 1e-12);
  Tensor r3 = reduceGradToShape(g, {});
  auto m3 = sumOver([](int64_t, int64_t, int64_t) { return std::vector<int64_t>{}; });
  EXPECT_NEAR(r3.data<double>()[0], m3[{}], 1e-12);
  Tensor r4 = reduceGradToShape(g, {2, 1, 4});
  auto m4 = sumOver([](int64_t a, int64_t, int64_t c) { return std::vector<int64_t>{a, c}; });
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 4; ++c) EXPECT_NEAR(r4.data<double>()[a * 4 + c], (m4[{a, c}]), 1e-12);
  Tensor same = reduceGradToShape(g, {2, 3, 4});
  EXPECT_NE(same.raw(), g.raw()); // a copy, never an alias
  EXPECT_EQ(same.data<double>()[5], g.data<double>()[5]);
  EXPECT_THROW(reduceGradToShape(g, {5}), std::runtime_error);
  Tensor f(DType::Float32, {4, 2});
  for (int i = 0; i < 8; ++i) f.data<float>()[i] = static_cast<float>(i);
  Tensor rf = reduceGradToShape(f, {2});
  EXPECT_EQ(rf.dtype(), DType::Float32);
  EXPECT_EQ(rf.data<float>()[0], 0 + 2 + 4 + 6);
  EXPECT_EQ(rf.data<float>()[1], 1 + 3 + 5 + 7);
}

TEST(Gradients, SoftmaxCrossEntropyHandComputed) {
  Tensor logits = f64({1, 3}, {1, 2, 3});
  Tensor labels = i64({1}, {2});
  Tensor grad;
  double loss = softmaxCrossEntropy(logits, labels, 1.0, -100, &grad);
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(loss, lse - 3.0, 1e-12);
  EXPECT_NEAR(loss, 0.4076059644443804, 1e-12);
  ASSERT_EQ(grad.dtype(), DType::Float32);
  ASSERT_EQ(grad.shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_NEAR(grad.data<float>()[0], std::exp(1.0 - lse), 1e-6);
  EXPECT_NEAR(grad.data<float>()[1], std::exp(2.0 - lse), 1e-6);
  EXPECT_NEAR(grad.data<float>()[2], std::exp(3.0 - lse) - 1.0, 1e-6);
  // numerically stable: huge logits stay finite
  Tensor big(DType::Float32, {2, 3});
  float bv[] = {1000, 0, -1000, 1000, 0, -1000};
  std::copy(bv, bv + 6, big.data<float>());
  Tensor bl(DType::Int32, {2});
  bl.data<int32_t>()[0] = 0;
  bl.data<int32_t>()[1] = 1;
  double bigLoss = softmaxCrossEntropy(big, bl, 2.0, -100, &grad);
  EXPECT_NEAR(bigLoss, (0.0 + 1000.0) / 2.0, 1e-9);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(grad.data<float>()[i]));
  EXPECT_NEAR(grad.data<float>()[3], 0.5f, 1e-6);  // (1 - 0) / 2... softmax 1 at class 0
  EXPECT_NEAR(grad.data<float>()[4], -0.5f, 1e-6); // (0 - 1) / 2
  // the loss alone (no gradient asked)
  EXPECT_NEAR(softmaxCrossEntropy(logits, labels, 2.0, -100, nullptr), (lse - 3.0) / 2.0, 1e-12);
}

TEST(Gradients, SoftmaxCrossEntropyFiniteDifferences) {
  Tensor logits = rand64({2, 3, 5}, -3, 3);
  Tensor labels = i64({2, 3}, {0, 4, -100, 2, 2, 1});
  double denom = 7.0; // e.g. counted positions across the global batch
  Tensor grad;
  double loss = softmaxCrossEntropy(logits, labels, denom, -100, &grad);
  ASSERT_EQ(grad.shape(), logits.shape());
  double manual = 0;
  for (int64_t r = 0; r < 6; ++r) {
    int64_t l = labels.data<int64_t>()[r];
    if (l == -100) continue;
    double s = 0;
    for (int64_t k = 0; k < 5; ++k) s += std::exp(logits.data<double>()[r * 5 + k]);
    manual += std::log(s) - logits.data<double>()[r * 5 + l];
  }
  EXPECT_NEAR(loss, manual / denom, 1e-12);
  const double eps = 1e-6;
  Tensor p = logits.clone();
  for (int64_t j = 0; j < p.numel(); ++j) {
    double orig = p.data<double>()[j];
    p.data<double>()[j] = orig + eps;
    double lp = softmaxCrossEntropy(p, labels, denom, -100, nullptr);
    p.data<double>()[j] = orig - eps;
    double lm = softmaxCrossEntropy(p, labels, denom, -100, nullptr);
    p.data<double>()[j] = orig;
    double fd = (lp - lm) / (2 * eps);
    EXPECT_NEAR(grad.data<float>()[j], fd, 1e-6 + 1e-5 * std::fabs(fd)) << "element " << j;
    if (j / 5 == 2) {
      EXPECT_EQ(grad.data<float>()[j], 0.0f) << "ignored position " << j;
    }
  }
  // pieces computed separately add up to the whole
  Tensor l1 = logits.reshaped({6, 5});
  Tensor a = Tensor(DType::Float64, {3, 5}), b = Tensor(DType::Float64, {3, 5});
  std::copy(l1.data<double>(), l1.data<double>() + 15, a.data<double>());
  std::copy(l1.data<double>() + 15, l1.data<double>() + 30, b.data<double>());
  Tensor la = i64({3}, {0, 4, -100}), lb = i64({3}, {2, 2, 1});
  EXPECT_NEAR(softmaxCrossEntropy(a, la, denom, -100, nullptr) + softmaxCrossEntropy(b, lb, denom, -100, nullptr), loss,
              1e-12);
}

TEST(Gradients, SoftmaxCrossEntropyIgnoreIndex) {
  Tensor logits = rand64({3, 4});
  Tensor grad;
  // everything ignored: no loss, no gradient
  EXPECT_EQ(softmaxCrossEntropy(logits, i64({3}, {-1, -1, -1}), 3.0, -1, &grad), 0.0);
  for (int64_t i = 0; i < grad.numel(); ++i) EXPECT_EQ(grad.data<float>()[i], 0.0f);
  // a custom ignore index that is a valid class id is still ignored
  double withIgnore = softmaxCrossEntropy(logits, i64({3}, {3, 1, 0}), 1.0, 3, &grad);
  double onlyTwo = softmaxCrossEntropy(logits, i64({3}, {-7, 1, 0}), 1.0, -7, nullptr);
  EXPECT_NEAR(withIgnore, onlyTwo, 1e-12);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(grad.data<float>()[k], 0.0f);
  // an out-of-range label that is not ignored is an error
  EXPECT_THROW(softmaxCrossEntropy(logits, i64({3}, {4, 0, 0}), 1.0, -100, nullptr), std::runtime_error);
  EXPECT_THROW(softmaxCrossEntropy(logits, i64({2}, {0, 0}), 1.0, -100, nullptr), std::runtime_error);
}

// ---------------------------------------------------------------- registry

TEST(Gradients, Registry) {
  auto ops = registeredGradientOpTypes();
  std::set<std::string> have(ops.begin(), ops.end());
  for (const char *op :
       {"Add", "Sub", "Mul", "Div", "Neg", "Pow", "Sqrt", "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Relu",
        "LeakyRelu", "Gelu", "Softmax", "LogSoftmax", "LayerNormalization", "MatMul", "Gemm", "Gather", "Reshape",
        "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Split", "Concat", "Slice", "Where", "Cast",
        "ReduceMean", "ReduceSum", "Expand", "Tile", "Dropout", "Max", "Min", "Conv", "MaxPool", "AveragePool",
        "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization", "LRN"})
    EXPECT_TRUE(have.count(op)) << op;
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  for (const auto &op : ops) {
    if (op == "TestOnlyOp") continue; // registered below
    EXPECT_NE(findKernel(op), nullptr) << op << " has a backward but no forward kernel";
    EXPECT_NE(findGradient(op), nullptr) << op;
  }
  EXPECT_EQ(findGradient("NoSuchOp"), nullptr);
  EXPECT_EQ(findGradient("ArgMax"), nullptr);
  // registerGradient adds (or replaces) an entry
  registerGradient("TestOnlyOp", {[](GradientContext &) {}, nullptr, {0}});
  ASSERT_NE(findGradient("TestOnlyOp"), nullptr);
  EXPECT_EQ(findGradient("TestOnlyOp")->nonDifferentiable, (std::vector<size_t>{0}));
}

TEST(Gradients, BinaryCrossEntropyIsPyTorchsBceLoss) {
  // A recommender's click probabilities (a Sigmoid's output) against 0/1
  // targets: torch.nn.BCELoss(reduction="sum") / denominator, hand-computed.
  Tensor probs = f64({3, 1}, {0.9, 0.2, 0.5});
  Tensor targets = f64({3, 1}, {1, 0, 1});
  Tensor grad;
  double loss = binaryCrossEntropy(probs, targets, 4.0, &grad);
  EXPECT_NEAR(loss, -(std::log(0.9) + std::log(0.8) + std::log(0.5)) / 4.0, 1e-12);
  ASSERT_EQ(grad.dtype(), DType::Float32);
  ASSERT_EQ(grad.shape(), probs.shape());
  EXPECT_NEAR(grad.data<float>()[0], (0.9 - 1) / (0.9 * 0.1) / 4.0, 1e-6);
  EXPECT_NEAR(grad.data<float>()[1], 0.2 / (0.2 * 0.8) / 4.0, 1e-6);
  // Central differences agree; certain predictions stay finite (log clamped
  // at -100, as PyTorch does).
  const double eps = 1e-7;
  for (int j = 0; j < 3; ++j) {
    Tensor p = probs.clone();
    p.data<double>()[j] += eps;
    double lp = binaryCrossEntropy(p, targets, 4.0, nullptr);
    p.data<double>()[j] -= 2 * eps;
    double lm = binaryCrossEntropy(p, targets, 4.0, nullptr);
    EXPECT_NEAR(grad.data<float>()[j], (lp - lm) / (2 * eps), 1e-4) << j;
  }
  Tensor sure = f64({2}, {0.0, 1.0});
  EXPECT_NEAR(binaryCrossEntropy(sure, f64({2}, {1, 0}), 1.0, &grad), 200.0, 1e-9);
  EXPECT_TRUE(std::isfinite(grad.data<float>()[0]));
  // Integer targets, targets outside [0, 1] and non-probabilities are errors.
  EXPECT_THROW(binaryCrossEntropy(probs, i64({3}, {1, 0, 1}), 1.0, nullptr), std::runtime_error);
  EXPECT_THROW(binaryCrossEntropy(probs, f64({3}, {2, 0, 1}), 1.0, nullptr), std::runtime_error);
  EXPECT_THROW(binaryCrossEntropy(f64({1}, {3.0}), f64({1}, {1}), 1.0, nullptr), std::runtime_error);
}
