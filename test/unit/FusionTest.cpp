// Load-time fusions of the CPU executor: elementwise chains run as one
// program (bit for bit the unfused nodes' result), chains and residuals
// after a Conv as its post-ops, Conv outputs handed to the next Conv with
// channels-last bytes. Each fused run is compared with the same model run
// unfused (runNodes with a NodeHook, which turns fusion off).
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace hetplan::runtime;

namespace {

struct Builder {
  Model m;
  std::mt19937 rng{7};
  int n = 0;
  Builder() { m.opsets[""] = 17; m.path = "fusion-test"; }
  std::string op(const std::string &type, std::vector<std::string> ins, std::map<std::string, Attribute> attrs = {}) {
    Node node;
    node.name = type + "_" + std::to_string(n);
    node.opType = type;
    node.inputs = std::move(ins);
    node.outputs = {"v" + std::to_string(n++)};
    node.attrs = std::move(attrs);
    m.nodes.push_back(node);
    return m.nodes.back().outputs[0];
  }
  std::string scalar(float v) {
    std::string name = "c" + std::to_string(n++);
    m.initializers[name] = Tensor::scalar<float>(DType::Float32, v);
    return name;
  }
  std::string weight(std::vector<int64_t> shape, float scale) {
    std::string name = "w" + std::to_string(n++);
    Tensor t(DType::Float32, shape);
    std::normal_distribution<float> d(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
    m.initializers[name] = t;
    return name;
  }
  void io(const std::string &in, DType t, const std::string &out) {
    m.inputs.push_back({in, t, true, false, {}});
    m.outputs.push_back({out, DType::Undefined, true, false, {}});
  }
  std::string hardSwish(const std::string &x) {
    auto t = op("Clip", {op("Add", {x, scalar(3.f)}), scalar(0.f), scalar(6.f)});
    return op("Div", {op("Mul", {x, t}), scalar(6.f)});
  }
};

Attribute ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Ints;
  a.ints = std::move(v);
  return a;
}

struct Counter : ExecutionObserver {
  int nodes = 0;
  void nodeRan(size_t, double) override { ++nodes; }
};

Tensor randomTensor(DType t, std::vector<int64_t> shape, float lo, float hi) {
  Tensor x(t, shape);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (t == DType::Float32) x.data<float>()[i] = d(rng);
    else if (t == DType::Float64) x.data<double>()[i] = d(rng);
    else x.data<int32_t>()[i] = static_cast<int32_t>(d(rng));
  }
  return x;
}

/// The outputs of a fused run and of the unfused run, and how many nodes
/// each ran.
struct Runs {
  std::map<std::string, Tensor> fused, plain;
  int fusedNodes = 0, plainNodes = 0;
};

Runs runBoth(const Model &m, const std::string &in, const Tensor &x) {
  Executor ex(m);
  EXPECT_TRUE(ex.check().empty());
  Runs r;
  Counter a, b;
  r.fused = ex.run({{in, x}}, &a);
  std::vector<size_t> all;
  std::set<std::string> keep;
  for (size_t i : topologicalOrder(m)) {
    all.push_back(i);
    for (const auto &o : m.nodes[i].outputs) keep.insert(o);
  }
  // A NodeHook (here one that never takes a node) runs every node as it is:
  // no fusion, plain bytes throughout.
  Executor::NodeHook none = [](size_t, KernelContext &) { return false; };
  r.plain = ex.runNodes(all, {{in, x}}, keep, nullptr, &b, &none);
  r.fusedNodes = a.nodes;
  r.plainNodes = b.nodes;
  return r;
}

/// Equal within float32 rounding (oneDNN's post-ops round differently),
/// plain bytes.
void expectClose(const Tensor &f, const Tensor &p, const std::string &what) {
  ASSERT_EQ(f.shape(), p.shape()) << what;
  EXPECT_FALSE(f.channelsLast()) << what;
  double worst = 0;
  for (int64_t i = 0; i < f.numel(); ++i)
    worst = std::max(worst, std::fabs(double(f.data<float>()[i]) - p.data<float>()[i]) /
                                std::max(1.0, std::fabs(double(p.data<float>()[i]))));
  EXPECT_LT(worst, 1e-5) << what;
}

} // namespace

TEST(Fusion, ElementwiseChainsEqualTheUnfusedNodesBitForBit) {
  Builder b;
  // hard-swish, then GELU as torch exports it, then SiLU, then x^2 - x
  auto h = b.hardSwish("x");
  auto e = b.op("Add", {b.op("Erf", {b.op("Div", {h, b.scalar(1.41421356f)})}), b.scalar(1.f)});
  auto g = b.op("Mul", {b.op("Mul", {h, e}), b.scalar(0.5f)});
  auto s = b.op("Mul", {g, b.op("Sigmoid", {g})});
  auto y = b.op("Sub", {b.op("Pow", {s, b.scalar(2.f)}), s});
  b.io("x", DType::Float32, y);
  Tensor x = randomTensor(DType::Float32, {2, 3, 17, 19}, -8.f, 8.f);
  Runs r = runBoth(b.m, "x", x);
  const Tensor &f = r.fused.at(y), &p = r.plain.at(y);
  ASSERT_EQ(f.shape(), p.shape());
  EXPECT_EQ(std::memcmp(f.raw(), p.raw(), f.nbytes()), 0);
  EXPECT_EQ(r.plainNodes, 13);
  EXPECT_EQ(r.fusedNodes, 1); // one program for the 13 nodes
}

TEST(Fusion, AValueReadOutsideTheChainEndsIt) {
  Builder b;
  auto t = b.op("Sigmoid", {"x"});
  auto u = b.op("Mul", {t, b.scalar(2.f)});
  auto v = b.op("Add", {u, b.scalar(1.f)});
  auto w = b.op("Add", {v, u}); // u read again: u's chain (Sigmoid, Mul) cannot skip it
  b.io("x", DType::Float32, w);
  b.m.outputs.push_back({t, DType::Undefined, true, false, {}}); // t is a graph output
  Tensor x = randomTensor(DType::Float32, {5, 7}, -3.f, 3.f);
  Runs r = runBoth(b.m, "x", x);
  for (const std::string &o : {w, t})
    EXPECT_EQ(std::memcmp(r.fused.at(o).raw(), r.plain.at(o).raw(), r.fused.at(o).nbytes()), 0) << o;
  EXPECT_LT(r.fusedNodes, r.plainNodes);
}

TEST(Fusion, IntegerAndFloat64ChainsRunAsTheirKernelsDo) {
  {
    Builder b; // Relu/Neg/Abs also take integers: such a chain stays unfused
    auto y = b.op("Abs", {b.op("Neg", {b.op("Relu", {"x"})})});
    b.io("x", DType::Int32, y);
    Tensor x = randomTensor(DType::Int32, {4, 9}, -50.f, 50.f);
    Runs r = runBoth(b.m, "x", x);
    ASSERT_EQ(r.fused.at(y).dtype(), DType::Int32);
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(r.fused.at(y).data<int32_t>()[i], std::max(0, x.data<int32_t>()[i]));
    EXPECT_EQ(r.fusedNodes, 3);
  }
  {
    Builder b; // float-only ops: fused, and in double as the kernels compute float64
    auto y = b.op("Tanh", {b.op("Sigmoid", {b.op("Relu", {"x"})})});
    b.io("x", DType::Float64, y);
    Tensor x = randomTensor(DType::Float64, {3, 11}, -4.f, 4.f);
    Runs r = runBoth(b.m, "x", x);
    ASSERT_EQ(r.fused.at(y).dtype(), DType::Float64);
    EXPECT_EQ(std::memcmp(r.fused.at(y).raw(), r.plain.at(y).raw(), r.fused.at(y).nbytes()), 0);
    EXPECT_EQ(r.fusedNodes, 1);
  }
}

TEST(Fusion, ConvChainsAndChannelsLastMatchTheUnfusedRun) {
  Builder b;
  auto pad = ints({1, 1, 1, 1});
  // Conv + hard-swish; Conv 1x1 + residual Add + Relu; depthwise Conv + SiLU;
  // a Conv whose output is the graph output and another whose MaxPool a
  // Softmax reads (plain bytes for both)
  auto c1 = b.hardSwish(b.op("Conv", {"x", b.weight({8, 4, 3, 3}, 0.3f), b.weight({8}, 0.1f)}, {{"pads", pad}}));
  auto c2 = b.op("Relu", {b.op("Add", {b.op("Conv", {c1, b.weight({8, 8, 1, 1}, 0.3f)}), c1})});
  Attribute group;
  group.kind = Attribute::Int;
  group.i = 8;
  auto d = b.op("Conv", {c2, b.weight({8, 1, 3, 3}, 0.3f), b.weight({8}, 0.1f)}, {{"pads", pad}, {"group", group}});
  auto c3 = b.op("Mul", {d, b.op("Sigmoid", {d})});
  auto c4 = b.op("Conv", {c3, b.weight({6, 8, 3, 3}, 0.2f)}, {{"pads", pad}, {"strides", ints({2, 2})}});
  auto pooled = b.op("MaxPool", {b.op("Conv", {c3, b.weight({5, 8, 1, 1}, 0.3f)})},
                     {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}});
  auto soft = b.op("Softmax", {pooled}); // (the pool keeps channels-last bytes: the Softmax gets plain ones)
  b.io("x", DType::Float32, c4);
  b.m.outputs.push_back({soft, DType::Undefined, true, false, {}});
  Tensor x = randomTensor(DType::Float32, {2, 4, 13, 11}, -2.f, 2.f);
  Runs r = runBoth(b.m, "x", x);
  for (const std::string &o : {c4, soft}) expectClose(r.fused.at(o), r.plain.at(o), o);
  EXPECT_EQ(r.plainNodes, 15);
  EXPECT_EQ(r.fusedNodes, 7); // five Convs with their post-ops, the MaxPool, the Softmax

  // A run that keeps an inner Conv output gets it with plain bytes.
  Executor ex(b.m);
  std::vector<size_t> all = topologicalOrder(b.m);
  auto kept = ex.runNodes(all, {{"x", x}}, {c3, c4});
  ASSERT_TRUE(kept.count(c3));
  expectClose(kept.at(c3), r.plain.at(c3), c3);
}

TEST(Fusion, MatMulBiasAndChainMatchTheUnfusedRun) {
  Builder b;
  // [B, S, K] x [K, N] + bias, GELU as exported; then bias + MatMul (the
  // bias first) and Sigmoid * 3
  auto h = b.op("Add", {b.op("MatMul", {"x", b.weight({64, 96}, 0.2f)}), b.weight({96}, 0.1f)});
  auto e = b.op("Add", {b.op("Erf", {b.op("Div", {h, b.scalar(1.41421356f)})}), b.scalar(1.f)});
  auto g = b.op("Mul", {b.op("Mul", {h, e}), b.scalar(0.5f)});
  auto h2 = b.op("Add", {b.weight({32}, 0.1f), b.op("MatMul", {g, b.weight({96, 32}, 0.2f)})});
  auto y = b.op("Mul", {b.op("Sigmoid", {h2}), b.scalar(3.f)});
  b.io("x", DType::Float32, y);
  Tensor x = randomTensor(DType::Float32, {3, 40, 64}, -2.f, 2.f);
  Runs r = runBoth(b.m, "x", x);
  // bit for bit: the bias and chain run after the product as the nodes do
  // (a plan that cuts the chain between stages computes the same values)
  ASSERT_EQ(r.fused.at(y).shape(), r.plain.at(y).shape());
  EXPECT_EQ(std::memcmp(r.fused.at(y).raw(), r.plain.at(y).raw(), r.fused.at(y).nbytes()), 0);
  EXPECT_EQ(r.plainNodes, 11);
  EXPECT_EQ(r.fusedNodes, 2); // each MatMul with its bias and chain
}

// Conv fusion takes float32 constant weights only: a float64 Conv stays its
// own node, its chain fuses alone and runs in double, bit-equal.
TEST(Fusion, AFloat64ConvRunsItsChainInDouble) {
  Builder b;
  Tensor w(DType::Float64, {3, 2, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<double>()[i] = 0.05 * double(i % 7) - 0.15;
  b.m.initializers["w64"] = w;
  auto y = b.op("Tanh", {b.op("Sigmoid", {b.op("Conv", {"x", "w64"}, {{"pads", ints({1, 1, 1, 1})}})})});
  b.io("x", DType::Float64, y);
  Tensor x = randomTensor(DType::Float64, {2, 2, 5, 6}, -2.f, 2.f);
  Runs r = runBoth(b.m, "x", x);
  ASSERT_EQ(r.fused.at(y).dtype(), DType::Float64);
  EXPECT_EQ(std::memcmp(r.fused.at(y).raw(), r.plain.at(y).raw(), r.fused.at(y).nbytes()), 0);
  EXPECT_EQ(r.fusedNodes, 2);
}
