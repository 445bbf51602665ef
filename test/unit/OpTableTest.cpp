// The op table (ops/OpTable.h) against itself and against the kernels that
// register by op type: every cost rule has a shape rule, every backward
// kernel a forward one, and each CPU backward kernel reads no more of its
// forward pass than the definition's `keeps` says (the memory model prices
// training with that declaration): it runs once with every forward value
// and once with the values it does not declare poisoned with NaN, and the
// gradients must be the same. In CUDA builds, the CUDA kernel registry
// (runtime/src/cuda) too: every CUDA kernel has a CPU twin and names an op
// of the table (or is listed as not in it yet).
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Tensor.h"
#include "ops/OpTable.h"
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
#include "hetplan/runtime/CudaBackend.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace hetplan;
using namespace hetplan::runtime;

namespace {

Tensor randomF32(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(DType::Float32, std::move(shape));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(g);
  return t;
}

Tensor int64s(std::vector<int64_t> shape, std::vector<int64_t> v) {
  Tensor t(DType::Int64, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

Attribute intAttr(int64_t v) {
  Attribute a;
  a.kind = Attribute::Int;
  a.i = v;
  return a;
}

Attribute intsAttr(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Ints;
  a.ints = std::move(v);
  return a;
}

/// A small, valid instance of an op for running its kernels.
struct Sample {
  std::vector<Tensor> inputs;
  std::map<std::string, Attribute> attrs;
  size_t outputs = 1;
};

/// One sample per op of the table that has a CPU backward kernel; the test
/// fails for a table op with a backward kernel and no sample here.
std::map<std::string, std::function<Sample()>> samples() {
  return {
      {"MatMul", [] { return Sample{{randomF32({2, 3, 4}, 1), randomF32({4, 5}, 2)}}; }},
      {"Gemm", [] { return Sample{{randomF32({3, 4}, 3), randomF32({5, 4}, 4), randomF32({5}, 5)}, {{"transB", intAttr(1)}}}; }},
      {"Conv", [] { return Sample{{randomF32({1, 2, 5, 5}, 6), randomF32({3, 2, 3, 3}, 7), randomF32({3}, 8)}}; }},
      {"LayerNormalization", [] { return Sample{{randomF32({2, 6}, 9), randomF32({6}, 10), randomF32({6}, 11)}}; }},
      {"Softmax", [] { return Sample{{randomF32({3, 7}, 12)}}; }},
      {"LogSoftmax", [] { return Sample{{randomF32({3, 7}, 13)}}; }},
      {"Relu", [] { return Sample{{randomF32({4, 5}, 14)}}; }},
      {"Gather", [] { return Sample{{randomF32({5, 3}, 15), int64s({4}, {0, 3, 3, 1})}}; }},
      {"Reshape", [] { return Sample{{randomF32({2, 6}, 17), int64s({2}, {3, 4})}}; }},
      {"Flatten", [] { return Sample{{randomF32({2, 3, 4}, 18)}}; }},
      {"Squeeze", [] { return Sample{{randomF32({2, 1, 3}, 19), int64s({1}, {1})}}; }},
      {"Unsqueeze", [] { return Sample{{randomF32({2, 3}, 20), int64s({1}, {0})}}; }},
      {"Transpose", [] { return Sample{{randomF32({2, 3, 4}, 21)}}; }},
      {"Concat", [] { return Sample{{randomF32({2, 3}, 22), randomF32({2, 2}, 23)}, {{"axis", intAttr(1)}}}; }},
      {"Split", [] { return Sample{{randomF32({4, 3}, 24)}, {}, 2}; }},
      {"Slice",
       [] { return Sample{{randomF32({4, 5}, 25), int64s({1}, {1}), int64s({1}, {4}), int64s({1}, {1})}}; }},
      {"Expand", [] { return Sample{{randomF32({3, 1}, 26), int64s({3}, {2, 3, 4})}}; }},
      {"Tile", [] { return Sample{{randomF32({2, 3}, 27), int64s({2}, {2, 1})}}; }},
      {"Einsum",
       [] {
         Attribute eq;
         eq.kind = Attribute::String;
         eq.s = "ij,jk->ik";
         return Sample{{randomF32({2, 3}, 28), randomF32({3, 4}, 29)}, {{"equation", eq}}};
       }},
      {"MaxPool", [] { return Sample{{randomF32({1, 2, 4, 4}, 30)}, {{"kernel_shape", intsAttr({2, 2})}}}; }},
      {"AveragePool", [] { return Sample{{randomF32({1, 2, 4, 4}, 31)}, {{"kernel_shape", intsAttr({2, 2})}}}; }},
      {"GlobalMaxPool", [] { return Sample{{randomF32({1, 2, 3, 3}, 32)}}; }},
      {"GlobalAveragePool", [] { return Sample{{randomF32({1, 2, 3, 3}, 33)}}; }},
      {"ReduceSum", [] { return Sample{{randomF32({2, 3}, 34), int64s({1}, {1})}}; }},
      {"ReduceMean", [] { return Sample{{randomF32({2, 3}, 35)}, {{"axes", intsAttr({1})}}}; }},
      {"Pad", [] { return Sample{{randomF32({2, 3}, 36), int64s({4}, {0, 1, 1, 0})}}; }},
      {"DepthToSpace", [] { return Sample{{randomF32({1, 4, 2, 2}, 37)}, {{"blocksize", intAttr(2)}}}; }},
      {"SpaceToDepth", [] { return Sample{{randomF32({1, 1, 4, 4}, 38)}, {{"blocksize", intAttr(2)}}}; }},
      {"GatherND", [] { return Sample{{randomF32({3, 2}, 39), int64s({2, 1}, {2, 0})}}; }},
      {"ScatterND",
       [] { return Sample{{randomF32({4, 2}, 40), int64s({2, 1}, {3, 1}), randomF32({2, 2}, 41)}}; }},
      {"ScatterElements",
       [] { return Sample{{randomF32({3, 2}, 42), int64s({1, 2}, {2, 0}), randomF32({1, 2}, 43)}}; }},
      {"GatherElements",
       [] { return Sample{{randomF32({3, 2}, 16), int64s({3, 2}, {0, 1, 2, 0, 1, 1})}}; }},
  };
}

Tensor poisoned(const Tensor &t) {
  Tensor p = t.clone();
  if (p.dtype() == DType::Float32)
    for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = std::nanf("");
  return p;
}

/// Input gradients of the op's backward over `ins`/`outs`.
std::vector<Tensor> backward(const Node &n, const std::vector<Tensor> &ins, const std::vector<Tensor> &outs,
                             const std::vector<Tensor> &dy) {
  const GradientInfo *g = findGradient(n.opType);
  GradientContext c{n, 17, {}, {}, dy, std::vector<bool>(ins.size(), false), {}};
  for (const auto &t : ins) c.inputs.push_back(&t);
  for (const auto &t : outs) c.outputs.push_back(&t);
  for (size_t i = 0; i < ins.size(); ++i)
    c.wantGrad[i] = ins[i].dtype() == DType::Float32 &&
                    std::find(g->nonDifferentiable.begin(), g->nonDifferentiable.end(), i) == g->nonDifferentiable.end();
  c.inputGrads.resize(ins.size());
  g->run(c);
  return c.inputGrads;
}

TEST(OpTable, EveryCostRuleHasAShapeRule) {
  for (const ops::OpDef *d : ops::allOps()) {
    if (d->cost) {
      EXPECT_NE(d->shape, nullptr) << d->type;
    }
  }
}

TEST(OpTable, LookupIsByDomainTypeAndOpset) {
  const ops::OpDef *m = ops::findOp("", "MatMul");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ops::findOp("ai.onnx", "MatMul"), m);
  EXPECT_EQ(ops::findOp("com.microsoft", "MatMul"), nullptr);
  const ops::OpDef *ln = ops::findOp("", "LayerNormalization");
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ops::findOp("", "LayerNormalization", ln->sinceVersion - 1), nullptr);
  EXPECT_EQ(ops::findOp("", "LayerNormalization", ln->sinceVersion), ln);
}

TEST(OpTable, EveryBackwardKernelHasAForwardKernel) {
  for (const std::string &op : registeredGradientOpTypes()) EXPECT_NE(findKernel(op), nullptr) << op;
}

// docs/ops.md lists each op once per opset range, with what it is.
TEST(OpTable, DefinitionsAreWellFormed) {
  for (const ops::OpDef *d : ops::allOps()) {
    EXPECT_FALSE(d->summary.empty()) << d->type;
    EXPECT_LE(d->minInputs, d->maxInputs) << d->type;
    EXPECT_LE(d->sinceVersion, d->untilVersion) << d->type;
    for (const ops::OpDef *e : ops::allOps())
      if (d != e && d->domain == e->domain && d->type == e->type) {
        EXPECT_TRUE(d->untilVersion < e->sinceVersion || e->untilVersion < d->sinceVersion)
            << d->type << ": two definitions for one opset";
      }
  }
}

TEST(OpTable, BackwardReadsOnlyWhatItKeeps) {
  auto all = samples();
  int checked = 0;
  for (const ops::OpDef *d : ops::allOps()) {
    if (!findGradient(d->type)) continue;
    auto it = all.find(d->type);
    ASSERT_NE(it, all.end()) << d->type << " has a backward kernel: add a sample";
    Sample s = it->second();
    Node n;
    n.opType = d->type;
    n.name = "n";
    n.attrs = s.attrs;
    for (size_t i = 0; i < s.inputs.size(); ++i) n.inputs.push_back("x" + std::to_string(i));
    for (size_t i = 0; i < s.outputs; ++i) n.outputs.push_back("y" + std::to_string(i));
    KernelContext k{n, 17, {}, std::vector<Tensor>(s.outputs)};
    for (const auto &t : s.inputs) k.inputs.push_back(&t);
    findKernel(d->type)->run(k);
    std::vector<Tensor> dy;
    for (size_t i = 0; i < k.outputs.size(); ++i) dy.push_back(randomF32(k.outputs[i].shape(), 100 + i));
    std::vector<Tensor> want = backward(n, s.inputs, k.outputs, dy);

    bool keepIn = d->keeps == ops::Keeps::Inputs, keepOut = d->keeps == ops::Keeps::Output;
    std::vector<Tensor> ins, outs;
    for (const auto &t : s.inputs) ins.push_back(keepIn ? t.clone() : poisoned(t));
    for (const auto &t : k.outputs) outs.push_back(keepOut ? t.clone() : poisoned(t));
    std::vector<Tensor> got = backward(n, ins, outs, dy);
    ASSERT_EQ(got.size(), want.size()) << d->type;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].defined(), want[i].defined()) << d->type << " input " << i;
      if (!want[i].defined()) continue;
      ASSERT_EQ(got[i].numel(), want[i].numel());
      for (int64_t e = 0; e < want[i].numel(); ++e)
        ASSERT_EQ(got[i].data<float>()[e], want[i].data<float>()[e])
            << d->type << " input " << i << " element " << e
            << ": its backward reads a forward value its definition does not keep";
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
// The CUDA kernel registry needs no device: these run on any machine of a
// CUDA build.
TEST(OpTable, EveryCudaForwardKernelHasACpuForwardKernel) {
  std::vector<std::string> ops = cudaForwardOpTypes();
  EXPECT_FALSE(ops.empty());
  for (const std::string &op : ops) EXPECT_NE(findKernel(op), nullptr) << op;
}

TEST(OpTable, EveryCudaBackwardKernelHasACpuBackwardKernel) {
  std::vector<std::string> ops = cudaBackwardOpTypes();
  EXPECT_FALSE(ops.empty());
  for (const std::string &op : ops) EXPECT_NE(findGradient(op), nullptr) << op;
}

// The memory model keeps what the table's `keeps` says: a CUDA backward
// kernel must declare it reads no more (its float forward values).
TEST(OpTable, CudaBackwardReadsOnlyWhatItKeeps) {
  int checked = 0;
  for (const std::string &op : cudaBackwardOpTypes()) {
    const ops::OpDef *d = ops::findOp("", op);
    if (!d) continue;
    std::string reads = cudaBackwardReads(op);
    bool ok = reads == "nothing" || (reads == "inputs" && d->keeps == ops::Keeps::Inputs) ||
              (reads == "output" && d->keeps == ops::Keeps::Output);
    EXPECT_TRUE(ok) << op << ": the CUDA backward reads " << reads << ", more than the definition keeps";
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

TEST(OpTable, EveryCudaKernelNamesAnOpOfTheTable) {
  // Ops with CUDA kernels that have no definition in ops/defs yet; a test
  // below fails once one gets one, so that it leaves this list.
  static const std::set<std::string> kNotInTable = {
      "Abs", "Add", "BatchNormalization", "Cast", "Clip", "Cos", "Div", "Dropout", "Elu",
      "Equal", "Erf", "Exp", "Gelu", "Greater", "GreaterOrEqual",
      "Identity", "LRN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mul", "Neg",
      "Pow", "Reciprocal", "Sigmoid", "Sin", "Softplus", "Sqrt",
      "Sub", "Sum", "Tanh", "Where"};
  std::set<std::string> ops;
  for (const std::string &op : cudaForwardOpTypes()) ops.insert(op);
  for (const std::string &op : cudaBackwardOpTypes()) ops.insert(op);
  for (const std::string &op : ops) {
    bool inTable = ops::findOp("", op) != nullptr;
    EXPECT_TRUE(inTable || kNotInTable.count(op)) << op << ": a CUDA kernel for an op the table does not know";
    EXPECT_FALSE(inTable && kNotInTable.count(op)) << op << " is in the table now: take it off kNotInTable";
  }
  for (const std::string &op : kNotInTable) EXPECT_TRUE(ops.count(op)) << op << " has no CUDA kernel";
}
#endif

} // namespace
