// The CPU runtime's Tensor, broadcasting and kernels on small hand-computed cases.
#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Tensor.h"

#include <gtest/gtest.h>

using namespace hetplan::runtime;

namespace {
Tensor f32(std::vector<int64_t> shape, std::vector<float> v) {
  Tensor t(DType::Float32, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

std::vector<Tensor> runOp(const std::string &op, std::vector<Tensor> ins, Node node = {}, int64_t opset = 17, size_t nout = 1) {
  node.opType = op;
  node.outputs.assign(nout, "y");
  const KernelInfo *k = findKernel(op);
  EXPECT_NE(k, nullptr) << op;
  KernelContext c{node, opset, {}, std::vector<Tensor>(nout)};
  for (auto &t : ins) c.inputs.push_back(&t);
  k->run(c);
  return c.outputs;
}

std::vector<float> values(const Tensor &t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }
} // namespace

TEST(RuntimeTensor, OwnedViewReshape) {
  Tensor t(DType::Float32, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_FALSE(t.isView());
  auto mem = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  Tensor v = Tensor::view(DType::Float32, {4}, mem->data(), mem);
  EXPECT_TRUE(v.isView());
  mem.reset(); // the view keeps the memory alive
  EXPECT_EQ(v.reshaped({2, 2}).data<float>()[3], 4.0f);
  EXPECT_THROW(v.reshaped({3}), std::runtime_error);
  EXPECT_EQ(v.describe(), "float32[4]");
}

TEST(RuntimeTensor, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f})
    EXPECT_EQ(halfToFloat(floatToHalf(f)), f);
}

TEST(RuntimeTensor, Broadcasting) {
  EXPECT_EQ(broadcastShapes({2, 1, 3}, {4, 1}), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(broadcastStrides({4, 1}, {2, 4, 3}), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_THROW(broadcastShapes({2, 3}, {4}), std::runtime_error);
  auto y = runOp("Add", {f32({2, 1}, {10, 20}), f32({3}, {1, 2, 3})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values(y[0]), (std::vector<float>{11, 12, 13, 21, 22, 23}));
}

// Every broadcast pattern (scalars either side, per-channel [C,1,1] against
// [N,C,H,W], middle and mixed broadcasts, size-1 dims) against a plain
// index-by-index reference, with sizes past the threading grain.
TEST(RuntimeKernels, BroadcastPatternsMatchReference) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{4, 16, 40, 40}, {16, 1, 1}}, {{16, 1, 1}, {4, 16, 40, 40}}, {{1}, {3, 5, 7}},
      {{3, 5, 7}, {}},               {{4, 1, 6, 5}, {3, 1, 5}},    {{2, 3, 1, 5}, {2, 1, 4, 1}},
      {{8, 1, 1, 300}, {8, 20, 30, 1}}, {{1, 7, 1}, {5, 1, 9}},    {{2, 64, 256}, {1, 64, 1}},
      {{6, 1}, {1, 6}},              {{2, 3, 4, 5, 6}, {3, 1, 5, 1}}};
  for (auto &[sa, sb] : cases) {
    Tensor a(DType::Float32, sa), b(DType::Float32, sb);
    for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = float(i % 97) * 0.5f - 7;
    for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = float(i % 13) + 1;
    auto shape = broadcastShapes(sa, sb);
    auto ta = broadcastStrides(sa, shape), tb = broadcastStrides(sb, shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (const char *op : {"Sub", "Div"}) {
      auto y = runOp(op, {a, b});
      ASSERT_EQ(y[0].shape(), shape);
      std::vector<int64_t> idx(shape.size(), 0);
      for (int64_t i = 0; i < n; ++i) {
        int64_t oa = 0, ob = 0;
        for (size_t d = 0; d < shape.size(); ++d) oa += idx[d] * ta[d], ob += idx[d] * tb[d];
        float x = a.data<float>()[oa], z = b.data<float>()[ob];
        float want = std::string(op) == "Sub" ? x - z : x / z;
        ASSERT_EQ(y[0].data<float>()[i], want) << op << " element " << i;
        for (size_t d = shape.size(); d-- > 0;)
          if (++idx[d] < shape[d]) break; else idx[d] = 0;
      }
    }
  }
}

TEST(RuntimeKernels, MatMulBatchBroadcast) {
  // [2,1,2] x [2,1]: batch broadcast over A, B shared
  auto y = runOp("MatMul", {f32({2, 1, 2}, {1, 2, 3, 4}), f32({2, 1}, {5, 6})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(values(y[0]), (std::vector<float>{17, 39}));
  // vector x matrix
  auto v = runOp("MatMul", {f32({2}, {1, 1}), f32({2, 2}, {1, 2, 3, 4})});
  EXPECT_EQ(v[0].shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(values(v[0]), (std::vector<float>{4, 6}));
}

TEST(RuntimeKernels, GemmTransposeBias) {
  Node n;
  n.attrs["transB"].i = 1;
  n.attrs["alpha"].f = 2.0f;
  n.attrs["beta"].f = 1.0f;
  auto y = runOp("Gemm", {f32({1, 2}, {1, 2}), f32({2, 2}, {1, 0, 0, 1}), f32({2}, {10, 20})}, n);
  EXPECT_EQ(values(y[0]), (std::vector<float>{12, 24}));
}

TEST(RuntimeKernels, ConvPaddedStrided) {
  // 1x1x3x3 input 1..9, 2x2 kernel of ones, pad 1, stride 2 -> 2x2
  Node n;
  n.attrs["pads"].ints = {1, 1, 1, 1};
  n.attrs["strides"].ints = {2, 2};
  auto y = runOp("Conv", {f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), f32({1, 1, 2, 2}, {1, 1, 1, 1})}, n);
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(values(y[0]), (std::vector<float>{1, 5, 11, 28}));
}

TEST(RuntimeKernels, ConvGroupsBias) {
  Node n;
  n.attrs["group"].i = 2;
  auto y = runOp("Conv", {f32({1, 2, 1, 2}, {1, 2, 3, 4}), f32({2, 1, 1, 1}, {2, 3}), f32({2}, {1, -1})}, n);
  EXPECT_EQ(values(y[0]), (std::vector<float>{3, 5, 8, 11}));
}

TEST(RuntimeKernels, SoftmaxLegacyAndNew) {
  Tensor x = f32({1, 2, 2}, {0, 0, 0, 0});
  auto a = runOp("Softmax", {x}, {}, 11); // coerced to 2-D at axis 1: 4 values
  EXPECT_FLOAT_EQ(a[0].data<float>()[0], 0.25f);
  auto b = runOp("Softmax", {x}, {}, 13); // last axis: 2 values
  EXPECT_FLOAT_EQ(b[0].data<float>()[0], 0.5f);
}

TEST(RuntimeKernels, UnknownOpHasNoKernel) { EXPECT_EQ(findKernel("NoSuchOp"), nullptr); }

// A node's output takes the buffer that an earlier, released tensor of its
// size class held (no malloc and page faults per node); a zeroing tensor is
// zero even so; the cap frees what it no longer allows.
TEST(HostBufferPool, ReleasedBuffersAreReusedAndZeroed) {
  if (!hostBufferPoolEnabled()) GTEST_SKIP() << "pool off (sanitizer build or HETPLAN_HOST_POOL_BYTES=0)";
  setHostBufferPoolLimit(size_t(1) << 30);
  const int64_t n = 100000; // 400,000 bytes: pooled
  const void *first;
  {
    Tensor a = Tensor::uninitialized(DType::Float32, {n});
    for (int64_t i = 0; i < n; ++i) a.data<float>()[i] = 7.f;
    first = a.raw();
  }
  EXPECT_GE(hostBufferPoolBytes(), size_t(n) * 4);
  Tensor b(DType::Float32, {n - 5}); // same size class
  EXPECT_EQ(b.raw(), first);
  for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.data<float>()[i], 0.f) << i;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 64, 0u);
  b = Tensor();
  setHostBufferPoolLimit(0);
  EXPECT_EQ(hostBufferPoolBytes(), 0u);
  setHostBufferPoolLimit(size_t(1) << 30);
  Tensor small(DType::Float32, {16}); // below 64 KiB: plain new, never cached
  small = Tensor();
  EXPECT_EQ(hostBufferPoolBytes(), 0u);
}

// A trained Conv's small weights are an owned tensor updated in place at the
// same address, run by the same node: the cached reordered copy must not
// serve the old values (small weights are compared value for value).
TEST(RuntimeKernels, ConvSeesSmallWeightsUpdatedInPlace) {
  Node node;
  node.opType = "Conv";
  node.outputs = {"y"};
  node.attrs["pads"].kind = Attribute::Ints;
  node.attrs["pads"].ints = {1, 1, 1, 1};
  Tensor x(DType::Float32, {2, 8, 6, 6}), w(DType::Float32, {8, 8, 3, 3}); // 576 weights: owned, not a view
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 13) * 0.1f - 0.6f;
  const KernelInfo *k = findKernel("Conv");
  ASSERT_NE(k, nullptr);
  auto run = [&] {
    KernelContext c{node, 17, {&x, &w}, std::vector<Tensor>(1)};
    k->run(c);
    return c.outputs[0];
  };
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.01f * float(i % 7);
  Tensor a = run();
  // In place, one value off any sampling grid (an SGD step may move few).
  w.data<float>()[301] += 0.5f;
  w.data<float>()[302] -= 0.25f;
  Tensor b = run();
  // The reference: the second weights in a fresh tensor at another address.
  Tensor w2 = w.clone();
  KernelContext c{node, 17, {&x, &w2}, std::vector<Tensor>(1)};
  k->run(c);
  ASSERT_EQ(b.numel(), c.outputs[0].numel());
  EXPECT_NE(values(a), values(b));
  for (int64_t i = 0; i < b.numel(); ++i) ASSERT_NEAR(b.data<float>()[i], c.outputs[0].data<float>()[i], 1e-5f) << i;
}
