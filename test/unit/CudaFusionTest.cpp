//===- CudaFusionTest.cpp - fused GPU groups against the CPU executor ------===//
//
// Part of hetplan-cuda-tests: the fusion matcher's decisions (run
// everywhere) and the fused results against the CPU (need a device).
//
//===----------------------------------------------------------------------===//

#include "CudaTestSupport.h"

#include "hetplan/runtime/CudaBackend.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace hetplan::runtime;
using namespace hetplan::test::cuda;

// --- fused groups (docs/gpu.md, "Fused on the GPU") -------------------------
// The matcher's decisions run everywhere; the fused results against the CPU
// need a device.

namespace {

Attribute stringAttr(const std::string &v) {
  Attribute a;
  a.kind = Attribute::String;
  a.s = v;
  return a;
}

Node nodeOf(const std::string &op, std::vector<std::string> ins, std::vector<std::string> outs,
            std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = outs.empty() ? op : outs[0];
  n.opType = op;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  return n;
}

/// x [2, 3, 16] -> MatMul W [16, 32] -> Add b [32] -> Gelu(approximate) ->
/// y; `biasInput`: b is a graph input, not a constant; `extraReader`: the
/// value that a second output (Neg) also reads ("" none).
Model mlpModel(const std::string &approximate, bool biasInput = false, const std::string &extraReader = "") {
  std::mt19937 rng(3);
  std::map<std::string, Tensor> inputs = {{"x", randomTensor(DType::Float32, {2, 3, 16}, rng)}};
  Tensor b = randomTensor(DType::Float32, {32}, rng);
  if (biasInput) inputs["b"] = b;
  std::vector<Node> nodes = {nodeOf("MatMul", {"x", "W"}, {"mm"}), nodeOf("Add", {"mm", "b"}, {"pre"}),
                             nodeOf("Gelu", {"pre"}, {"y"}, {{"approximate", stringAttr(approximate)}})};
  std::vector<std::string> outs = {"y"};
  if (!extraReader.empty()) {
    nodes.push_back(nodeOf("Neg", {extraReader}, {"z"}));
    outs.push_back("z");
  }
  Model m = graphOf(nodes, inputs, outs);
  m.path = "mlp";
  m.opsets[""] = 20; // Gelu
  m.initializers["W"] = randomTensor(DType::Float32, {16, 32}, rng, -0.5f, 0.5f);
  if (!biasInput) m.initializers["b"] = b;
  return m;
}

/// Q [1, 2, 8, d], K [1, 2, 8, d] (transposed in the graph), V [1, 2, 8, d],
/// mask [1, 1, 1, 8]: MatMul(Q, Kᵀ) / sqrt(d) + mask, Softmax, MatMul V.
Model attentionModel(int64_t d, bool mask = true) {
  std::mt19937 rng(5);
  std::map<std::string, Tensor> inputs = {{"q", randomTensor(DType::Float32, {1, 2, 8, d}, rng)},
                                          {"k", randomTensor(DType::Float32, {1, 2, 8, d}, rng)},
                                          {"v", randomTensor(DType::Float32, {1, 2, 8, d}, rng)}};
  if (mask) {
    Tensor mk(DType::Float32, {1, 1, 1, 8});
    for (int64_t i = 0; i < 8; ++i) mk.data<float>()[i] = i < 6 ? 0.f : -3.4e38f; // two padded keys
    inputs["mask"] = mk;
  }
  std::vector<Node> nodes = {nodeOf("Transpose", {"k"}, {"kT"}, {{"perm", intsAttr({0, 1, 3, 2})}}),
                             nodeOf("MatMul", {"q", "kT"}, {"s"}), nodeOf("Div", {"s", "scale"}, {"s1"})};
  std::string sm = "s1";
  if (mask) {
    nodes.push_back(nodeOf("Add", {"s1", "mask"}, {"s2"}));
    sm = "s2";
  }
  nodes.push_back(nodeOf("Softmax", {sm}, {"p"}, {{"axis", intAttr(-1)}}));
  nodes.push_back(nodeOf("MatMul", {"p", "v"}, {"o"}));
  Model m = graphOf(nodes, inputs, {"o"});
  m.path = "attention";
  Tensor scale(DType::Float32, {});
  *scale.data<float>() = std::sqrt(float(d));
  m.initializers["scale"] = scale;
  return m;
}

std::vector<std::string> opsOf(const Model &m, const CudaFusion &f) {
  std::vector<std::string> ops;
  for (size_t i : f.nodes) ops.push_back(m.nodes[i].opType);
  return ops;
}

using Ops = std::vector<std::string>;

} // namespace

TEST(CudaFusionMatch, GemmBiasGeluTanhFusesWhole) {
  Model m = mlpModel("tanh");
  for (const char *p : {"fp32", "tf32", "fp16", "bf16"}) {
    auto f = cudaFusions(m, p);
    ASSERT_EQ(f.size(), 1u) << p;
    EXPECT_EQ(f[0].kind, CudaFusion::Kind::GemmBiasGelu) << p;
    EXPECT_EQ(opsOf(m, f[0]), (Ops{"MatMul", "Add", "Gelu"})) << p;
    EXPECT_EQ(f[0].bias, "b");
    EXPECT_EQ(f[0].output, "y");
  }
}

TEST(CudaFusionMatch, ExactGeluKeepsItsNode) {
  // cuBLASLt's GELU epilogue is the tanh approximation: an exact Gelu runs apart.
  Model m = mlpModel("none");
  auto f = cudaFusions(m, "fp32");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, CudaFusion::Kind::GemmBias);
  EXPECT_EQ(opsOf(m, f[0]), (Ops{"MatMul", "Add"}));
  EXPECT_EQ(f[0].output, "pre");
}

TEST(CudaFusionMatch, ValuesReadElsewhereAreNotFusedAway) {
  EXPECT_TRUE(cudaFusions(mlpModel("tanh", false, "mm"), "fp32").empty()); // the pre-bias product
  auto f = cudaFusions(mlpModel("tanh", false, "pre"), "fp32");              // the pre-GELU value
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, CudaFusion::Kind::GemmBias);
  EXPECT_EQ(f[0].output, "pre");
  // a graph output inside the group
  Model m = mlpModel("tanh");
  m.outputs.push_back({"mm", DType::Float32, true, false, {}});
  EXPECT_TRUE(cudaFusions(m, "fp32").empty());
}

TEST(CudaFusionMatch, NonConstantBiasIsNotFused) {
  EXPECT_TRUE(cudaFusions(mlpModel("tanh", /*biasInput=*/true), "fp32").empty());
}

TEST(CudaFusionMatch, GemmWithItsBiasAsC) {
  std::mt19937 rng(4);
  auto build = [&](float beta) {
    Model m = graphOf({nodeOf("Gemm", {"x", "W", "c"}, {"y"}, {{"transB", intAttr(1)}, {"beta", floatAttr(beta)}})},
                      {{"x", randomTensor(DType::Float32, {4, 16}, rng)}}, {"y"});
    m.initializers["W"] = randomTensor(DType::Float32, {8, 16}, rng);
    m.initializers["c"] = randomTensor(DType::Float32, {8}, rng);
    return m;
  };
  Model m = build(1.f);
  auto f = cudaFusions(m, "fp32");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(opsOf(m, f[0]), (Ops{"Gemm"}));
  EXPECT_EQ(f[0].bias, "");
  EXPECT_TRUE(cudaFusions(build(0.5f), "fp32").empty()); // the epilogue adds the bias unscaled
}

TEST(CudaFusionMatch, AttentionAtHalfPrecisionOnly) {
  Model m = attentionModel(64);
  for (const char *p : {"fp16", "bf16"}) {
    auto f = cudaFusions(m, p);
    ASSERT_EQ(f.size(), 1u) << p;
    EXPECT_EQ(f[0].kind, CudaFusion::Kind::Attention);
    EXPECT_EQ(opsOf(m, f[0]), (Ops{"MatMul", "Div", "Add", "Softmax", "MatMul"}));
    EXPECT_EQ(f[0].q, "q");
    EXPECT_EQ(f[0].kT, "kT");
    EXPECT_EQ(f[0].v, "v");
    EXPECT_EQ(f[0].mask, "mask");
    EXPECT_FLOAT_EQ(f[0].scale, 0.125f);
    EXPECT_EQ(f[0].output, "o");
  }
  // cuDNN's flash attention takes half inputs: fp32 and tf32 keep the nodes
  EXPECT_TRUE(cudaFusions(m, "fp32").empty());
  EXPECT_TRUE(cudaFusions(m, "tf32").empty());
  // without a mask
  Model nm = attentionModel(64, false);
  auto f = cudaFusions(nm, "fp16");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(opsOf(nm, f[0]), (Ops{"MatMul", "Div", "Softmax", "MatMul"}));
  EXPECT_EQ(f[0].mask, "");
}

TEST(CudaFusionMatch, AttentionHeadDimsCudnnCannotTake) {
  EXPECT_TRUE(cudaFusions(attentionModel(160), "fp16").empty()); // > 128
  EXPECT_TRUE(cudaFusions(attentionModel(20), "fp16").empty());  // not a multiple of 8
  EXPECT_EQ(cudaFusions(attentionModel(128), "fp16").size(), 1u);
}

TEST(CudaFusionMatch, AttentionProbabilitiesReadElsewhere) {
  Model m = attentionModel(64);
  m.outputs.push_back({"p", DType::Float32, true, false, {}});
  EXPECT_TRUE(cudaFusions(m, "fp16").empty());
}

TEST(CudaFusionMatch, ExampleModels) {
  // bert-tiny: MatMul -> Div -> Add(mask) -> Softmax -> MatMul per layer;
  // gpt2-tiny masks with Where (not matched): no attention group.
  auto count = [](const std::vector<CudaFusion> &f, CudaFusion::Kind k) {
    return std::count_if(f.begin(), f.end(), [&](const CudaFusion &x) { return x.kind == k; });
  };
  Model bert = loadModel(std::string(HETPLAN_EXAMPLES) + "/bert-tiny.onnx");
  EXPECT_EQ(count(cudaFusions(bert, "fp16"), CudaFusion::Kind::Attention), 2);
  EXPECT_EQ(count(cudaFusions(bert, "fp32"), CudaFusion::Kind::Attention), 0);
  EXPECT_GT(cudaFusions(bert, "fp32").size(), 0u); // projections + bias
  Model gpt2 = loadModel(std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx");
  EXPECT_EQ(count(cudaFusions(gpt2, "fp16"), CudaFusion::Kind::Attention), 0);
}

namespace {
struct NodeTimes final : ExecutionObserver {
  std::map<size_t, std::vector<double>> seconds;
  void nodeRan(size_t node, double s) override { seconds[node].push_back(s); }
};
} // namespace

// The fused GEMM (one cublasLtMatmul with the bias / bias+GELU epilogue)
// against the CPU: 1e-4 per element at fp32, max|diff|/max|ref| < 1e-2 at fp16.
TEST(CudaFusionRun, GemmEpiloguesMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  for (const char *approx : {"tanh", "none"}) {
    Model m = mlpModel(approx);
    std::mt19937 rng(9);
    std::map<std::string, Tensor> in = {{"x", randomTensor(DType::Float32, {2, 3, 16}, rng)}};
    auto want = Executor(m).run(in);
    CudaExecutor fp32(m);
    expectSame(fp32.run(in), want, std::string("fp32 gelu ") + approx);
    CudaExecutor fp16(m);
    fp16.setPrecision("fp16");
    EXPECT_LT(relativeError(fp16.run(in), want), 1e-2) << approx;
    // the pre-bias product read elsewhere: unfused, still right
    Model side = mlpModel(approx, false, "mm");
    CudaExecutor gs(side);
    expectSame(gs.run(in), Executor(side).run(in), std::string("side reader ") + approx);
  }
}

// Profiles see every ONNX node: the group's time on the MatMul, 0 on the rest.
TEST(CudaFusionRun, ObserverSeesEveryNode) {
  REQUIRE_CUDA_DEVICE();
  Model m = mlpModel("tanh");
  std::mt19937 rng(2);
  CudaExecutor gpu(m);
  NodeTimes times;
  std::vector<size_t> all = {0, 1, 2};
  auto out = gpu.runNodes(all, {{"x", randomTensor(DType::Float32, {2, 3, 16}, rng)}}, {"y"}, nullptr, &times);
  ASSERT_EQ(out.count("y"), 1u);
  ASSERT_EQ(times.seconds.size(), 3u);
  for (size_t i : all) ASSERT_EQ(times.seconds[i].size(), 1u) << i;
  EXPECT_GT(times.seconds[0][0], 0.0);
  EXPECT_EQ(times.seconds[1][0], 0.0);
  EXPECT_EQ(times.seconds[2][0], 0.0);
}

// cuDNN's fused attention (fp16/bf16 Q, K, V) against the CPU's float32
// attention: max|diff| / max|ref| below 1e-2 (fp16) and 3e-2 (bf16).
TEST(CudaFusionRun, AttentionMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (bool mask : {true, false}) {
    Model m = attentionModel(64, mask);
    std::mt19937 rng(13);
    std::map<std::string, Tensor> in;
    for (const auto &v : m.inputs)
      if (v.name != "mask") in[v.name] = randomTensor(DType::Float32, v.shape, rng);
    if (mask) { // two padded keys, as exported masks (-FLT_MAX) have them
      Tensor mk(DType::Float32, {1, 1, 1, 8});
      for (int64_t i = 0; i < 8; ++i) mk.data<float>()[i] = i < 6 ? 0.f : -3.4e38f;
      in["mask"] = mk;
    }
    auto want = Executor(m).run(in);
    for (auto [dtype, tol] : {std::pair<const char *, double>{"fp16", 1e-2}, {"bf16", 3e-2}}) {
      CudaExecutor gpu(m);
      gpu.setPrecision(dtype);
      EXPECT_LT(relativeError(gpu.run(in), want), tol) << dtype << (mask ? " masked" : "");
    }
  }
  // bert-tiny end to end at fp16 (its two attentions fused)
  Model bert = loadModel(std::string(HETPLAN_EXAMPLES) + "/bert-tiny.onnx");
  auto inputs = randomInputs(bert, 2, 16, 7);
  CudaExecutor gpu(bert);
  gpu.setPrecision("fp16");
  EXPECT_LT(relativeError(gpu.run(inputs), Executor(bert).run(inputs)), 1e-2);
}
