//===- ModelVerifierTest.cpp - ONNX's rules at load, checked sizes --------===//
//
// The runtime's model verifier (ModelVerifier.h) refuses nodes that break
// ONNX's rules before any kernel runs, naming the node, the op and the rule;
// sizes from files go through checked arithmetic (Checked.h). Models are
// built in memory: each test states the one rule it breaks.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Checked.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/ModelVerifier.h"
#include "hetplan/runtime/Npy.h"

#include <gtest/gtest.h>

#include <cmath>

#include <cstring>

using namespace hetplan::runtime;

namespace {

Attribute ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Attribute::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute one(int64_t v) {
  Attribute a;
  a.kind = Attribute::Int;
  a.i = v;
  return a;
}
Attribute text(std::string v) {
  Attribute a;
  a.kind = Attribute::String;
  a.s = std::move(v);
  return a;
}

Tensor int64s(std::vector<int64_t> v) {
  Tensor t(DType::Int64, {int64_t(v.size())});
  std::memcpy(t.raw(), v.data(), v.size() * 8);
  return t;
}
Tensor floats(std::vector<int64_t> shape) { return Tensor(DType::Float32, std::move(shape)); }

/// A model with graph input "x" of `shape` (no shape when empty and
/// `ranked` is false), the initializers given and one node.
struct OneNode {
  Model m;
  OneNode(const std::string &op, std::vector<std::string> inputs, std::vector<int64_t> xShape,
          std::map<std::string, Attribute> attrs = {}, std::map<std::string, Tensor> inits = {},
          int64_t opset = 17) {
    m.path = "m.onnx";
    m.opsets[""] = opset;
    ValueInfo x;
    x.name = "x";
    x.dtype = DType::Float32;
    x.hasShape = true;
    x.shape = std::move(xShape);
    m.inputs.push_back(x);
    m.valueTypes["x"] = DType::Float32;
    for (auto &[name, t] : inits) {
      m.valueTypes[name] = t.dtype();
      m.initializers[name] = t;
    }
    Node n;
    n.name = "n";
    n.opType = op;
    n.inputs = std::move(inputs);
    n.outputs = {"y"};
    n.attrs = std::move(attrs);
    m.nodes.push_back(n);
    ValueInfo y;
    y.name = "y";
    y.dtype = DType::Float32;
    m.outputs.push_back(y);
  }
  std::string problem() const {
    auto p = verifyModel(m);
    return p.empty() ? "" : p[0];
  }
};

TEST(ModelVerifier, AcceptsValidNodes) {
  EXPECT_EQ(OneNode("Transpose", {"x"}, {2, 3, 4}, {{"perm", ints({2, 0, 1})}}).problem(), "");
  EXPECT_EQ(OneNode("Conv", {"x", "w"}, {1, 4, 8, 8},
                    {{"strides", ints({1, 1})}, {"pads", ints({1, 1, 1, 1})}, {"group", one(2)}},
                    {{"w", floats({6, 2, 3, 3})}})
                .problem(),
            "");
  EXPECT_EQ(OneNode("Tile", {"x", "r"}, {2, 3}, {}, {{"r", int64s({2, 1})}}).problem(), "");
  EXPECT_EQ(OneNode("Pad", {"x", "p"}, {2, 3}, {}, {{"p", int64s({0, 1, 0, 1})}}).problem(), "");
  EXPECT_EQ(OneNode("Concat", {"x", "x"}, {2, 3}, {{"axis", one(-2)}}).problem(), "");
}

TEST(ModelVerifier, TransposePermMustBeAPermutationOfTheInputsDims) {
  EXPECT_EQ(OneNode("Transpose", {"x"}, {2, 3}, {{"perm", ints({0, 0})}}).problem(),
            "m.onnx: node 'n' (Transpose): perm [0,0] is not a permutation of 0..1");
  EXPECT_EQ(OneNode("Transpose", {"x"}, {2, 3}, {{"perm", ints({0, 5})}}).problem(),
            "m.onnx: node 'n' (Transpose): perm [0,5] is not a permutation of 0..1");
  EXPECT_EQ(OneNode("Transpose", {"x"}, {2, 3, 4}, {{"perm", ints({1, 0})}}).problem(),
            "m.onnx: node 'n' (Transpose): perm [1,0] has 2 entries for a rank-3 input");
}

TEST(ModelVerifier, ConvGeometryPositiveAndConsistent) {
  auto w = std::map<std::string, Tensor>{{"w", floats({4, 4, 3, 3})}};
  EXPECT_EQ(OneNode("Conv", {"x", "w"}, {1, 4, 8, 8}, {{"strides", ints({1, 0})}}, w).problem(),
            "m.onnx: node 'n' (Conv): strides [1,0] must be positive");
  EXPECT_EQ(OneNode("Conv", {"x", "w"}, {1, 4, 8, 8}, {{"pads", ints({1, 1})}}, w).problem(),
            "m.onnx: node 'n' (Conv): pads [1,1] needs 4 values (input rank 4)");
  EXPECT_EQ(OneNode("Conv", {"x", "w"}, {1, 4, 8, 8}, {{"pads", ints({0, -1, 0, 0})}}, w).problem(),
            "m.onnx: node 'n' (Conv): pads [0,-1,0,0] must not be negative");
  EXPECT_EQ(OneNode("Conv", {"x", "w"}, {1, 4, 8, 8}, {{"kernel_shape", ints({5, 5})}}, w).problem(),
            "m.onnx: node 'n' (Conv): kernel_shape [5,5] differs from the weight's spatial dims");
  EXPECT_EQ(OneNode("Conv", {"x", "w"}, {1, 3, 8, 8}, {}, w).problem(),
            "m.onnx: node 'n' (Conv): weight dim 1 4 does not match 3 input channels in 1 groups");
  EXPECT_EQ(OneNode("ConvTranspose", {"x", "w"}, {1, 4, 8, 8}, {{"output_padding", ints({1})}}, w).problem(),
            "m.onnx: node 'n' (ConvTranspose): output_padding [1] needs 2 values (input rank 4)");
  EXPECT_EQ(OneNode("MaxPool", {"x"}, {1, 4, 8, 8}, {{"strides", ints({1, 1})}}).problem(),
            "m.onnx: node 'n' (MaxPool): kernel_shape is required");
  EXPECT_EQ(OneNode("AveragePool", {"x"}, {1, 4, 8, 8}, {{"kernel_shape", ints({2, 2})}, {"dilations", ints({0, 1})}})
                .problem(),
            "m.onnx: node 'n' (AveragePool): dilations [0,1] must be positive");
}

TEST(ModelVerifier, BatchNormParametersOnePerChannel) {
  std::map<std::string, Tensor> p{{"s", floats({4})}, {"b", floats({4})}, {"m", floats({3})}, {"v", floats({4})}};
  EXPECT_EQ(OneNode("BatchNormalization", {"x", "s", "b", "m", "v"}, {2, 4, 5}, {}, p).problem(),
            "m.onnx: node 'n' (BatchNormalization): input_mean has 3 values for 4 channels");
  p["m"] = floats({4});
  EXPECT_EQ(OneNode("BatchNormalization", {"x", "s", "b", "m", "v"}, {2, 4, 5}, {}, p).problem(), "");
  p["s"] = floats({2, 2});
  EXPECT_EQ(OneNode("BatchNormalization", {"x", "s", "b", "m", "v"}, {2, 4, 5}, {}, p).problem(),
            "m.onnx: node 'n' (BatchNormalization): scale must be 1-D (one value per channel), it has rank 2");
}

TEST(ModelVerifier, PadTileTopKResizeConcatReduce) {
  EXPECT_EQ(OneNode("Pad", {"x", "p"}, {2, 3}, {}, {{"p", int64s({0, 1, 0})}}).problem(),
            "m.onnx: node 'n' (Pad): pads [0,1,0] must hold two values per padded axis");
  EXPECT_EQ(OneNode("Pad", {"x", "p"}, {2, 3}, {}, {{"p", int64s({0, 1})}}).problem(),
            "m.onnx: node 'n' (Pad): pads [0,1] needs 4 values for rank 2");
  EXPECT_EQ(OneNode("Pad", {"x"}, {2, 3}, {{"mode", text("mirror")}}).problem(),
            "m.onnx: node 'n' (Pad): mode 'mirror' is not constant, reflect, edge or wrap");
  EXPECT_EQ(OneNode("Tile", {"x", "r"}, {2, 3}, {}, {{"r", int64s({2, -1})}}).problem(),
            "m.onnx: node 'n' (Tile): repeats [2,-1] must not be negative");
  EXPECT_EQ(OneNode("Tile", {"x", "r"}, {2, 3}, {}, {{"r", int64s({2})}}).problem(),
            "m.onnx: node 'n' (Tile): repeats [2] needs one value per dim of the rank-2 input");
  EXPECT_EQ(OneNode("TopK", {"x", "k"}, {2, 3}, {}, {{"k", int64s({-1})}}).problem(),
            "m.onnx: node 'n' (TopK): K -1 must not be negative");
  EXPECT_EQ(OneNode("TopK", {"x", "k"}, {2, 3}, {}, {{"k", int64s({4})}}).problem(),
            "m.onnx: node 'n' (TopK): K 4 exceeds the axis length 3");
  Tensor scales(DType::Float32, {2});
  scales.data<float>()[0] = 1;
  scales.data<float>()[1] = 0;
  EXPECT_EQ(OneNode("Resize", {"x", "", "s"}, {2, 3}, {}, {{"s", scales}}).problem(),
            "m.onnx: node 'n' (Resize): scales must be finite and positive");
  EXPECT_EQ(OneNode("Concat", {"x", "x"}, {2, 3}).problem(), "m.onnx: node 'n' (Concat): axis is required");
  EXPECT_EQ(OneNode("Concat", {"x", "x"}, {2, 3}, {{"axis", one(2)}}).problem(),
            "m.onnx: node 'n' (Concat): axis 2 is out of range for rank 2 (must be in [-2, 1])");
  EXPECT_EQ(OneNode("ReduceSum", {"x"}, {2, 3}, {{"axes", ints({1, -1})}}, {}, 11).problem(),
            "m.onnx: node 'n' (ReduceSum): axes [1,-1] repeats axis -1");
  EXPECT_EQ(OneNode("Softmax", {"x"}, {2, 3}, {{"axis", one(-3)}}).problem(),
            "m.onnx: node 'n' (Softmax): axis -3 is out of range for rank 2 (must be in [-2, 1])");
}

TEST(ModelVerifier, CheckReportsItAndFoldingSkipsTheNode) {
  // A Transpose of a constant with a bad perm: constant folding would run
  // the kernel at construction; it must not, and check() names the rule.
  OneNode bad("Transpose", {"c"}, {1}, {{"perm", ints({3, 7})}}, {{"c", floats({2, 3})}});
  Executor ex(bad.m);
  auto problems = ex.check();
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems[0], "m.onnx: node 'n' (Transpose): perm [3,7] is not a permutation of 0..1");
}

TEST(ModelVerifier, KernelsRecheckShapesMetAtRunTime) {
  // The input's rank is not declared, so only the kernel can see that the
  // perm does not fit: an error naming the rule, not a read out of bounds.
  OneNode m("Transpose", {"x"}, {}, {{"perm", ints({1, 0})}});
  m.m.inputs[0].hasShape = false;
  Executor ex(m.m);
  EXPECT_TRUE(ex.check().empty());
  std::map<std::string, Tensor> in{{"x", floats({2, 3, 4})}};
  try {
    ex.run(in);
    FAIL() << "ran";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("perm [1,0]"), std::string::npos) << e.what();
  }
}

TEST(CheckedArithmetic, OverflowIsAnError) {
  EXPECT_EQ(checkedMul(int64_t(1) << 31, 4, "x"), int64_t(1) << 33);
  EXPECT_THROW(checkedMul(int64_t(1) << 62, 4, "x"), std::runtime_error);
  EXPECT_THROW(checkedAdd(INT64_MAX, 1, "x"), std::runtime_error);
  EXPECT_EQ(checkedNumel({2, 3, 4}), 24);
  EXPECT_EQ(checkedNumel({0, int64_t(1) << 40}), 0);
  // The non-zero dims must fit even when another is 0 (strides).
  EXPECT_THROW(checkedNumel({0, int64_t(1) << 40, int64_t(1) << 40}), std::runtime_error);
  EXPECT_THROW(checkedNumel({2, -1}), std::runtime_error);
  EXPECT_THROW(checkedBytes(int64_t(1) << 61, 8, "x"), std::runtime_error);
  EXPECT_EQ(checkedBytes(10, 4, "x"), 40u);
  // The non-throwing forms the compiler side uses agree.
  int64_t out = 0;
  EXPECT_TRUE(mulInto(int64_t(1) << 31, 4, out));
  EXPECT_EQ(out, int64_t(1) << 33);
  EXPECT_FALSE(mulInto(int64_t(1) << 62, 4, out));
  EXPECT_FALSE(addInto(INT64_MAX, 1, out));
  const int64_t big[] = {0, int64_t(1) << 40, int64_t(1) << 40}, ok[] = {2, 3, 4}, neg[] = {2, -1};
  EXPECT_FALSE(numelInto(big, 3, out));
  EXPECT_FALSE(numelInto(neg, 2, out));
  ASSERT_TRUE(numelInto(ok, 3, out));
  EXPECT_EQ(out, 24);
  EXPECT_TRUE(countInto(1e18, out));
  EXPECT_FALSE(countInto(9.3e18, out));
  EXPECT_FALSE(countInto(std::nan(""), out));
  EXPECT_FALSE(countInto(-1.0, out));
  EXPECT_EQ(saturatedCount(1e300), INT64_MAX);
  EXPECT_EQ(saturatedCount(std::nan("")), 0);
  EXPECT_EQ(saturatedCount(4096.7), 4096);
  // Tensors: a shape whose bytes overflow is refused before allocating.
  EXPECT_THROW(Tensor(DType::Float32, {int64_t(1) << 62, 4}), std::runtime_error);
  EXPECT_THROW(Tensor(DType::Float64, {14, int64_t(1) << 61}), std::runtime_error);
}

TEST(CheckedArithmetic, TensorAllocationLimit) {
  setMaxTensorBytes(1024);
  EXPECT_NO_THROW(Tensor(DType::Float32, {256}));
  try {
    Tensor t(DType::Float32, {257});
    FAIL();
  } catch (const std::runtime_error &e) {
    EXPECT_STREQ(e.what(), "tensor float32[257] needs 1028 bytes, more than the limit of 1024");
  }
  setMaxTensorBytes(0);
  EXPECT_NO_THROW(Tensor(DType::Float32, {257}));
}

std::string npyHeader(const std::string &dict) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(h.size() & 0xff);
  out += char(h.size() >> 8);
  return out + h;
}

TEST(CheckedArithmetic, NpyShapesAreCheckedAgainstTheBytes) {
  // 128 bytes claiming (14, 2^61) float32: the element count overflows.
  std::string b = npyHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (14, 2305843009213693952), }") +
                  std::string(128, '\0');
  try {
    decodeNpy(b, "x.npy");
    FAIL();
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()), "x.npy: shape (14, 2305843009213693952) overflows the size of a tensor");
  }
  // A shape of 3e9 elements with 128 bytes: refused before allocating.
  b = npyHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (3000000000,), }") + std::string(128, '\0');
  EXPECT_THROW(decodeNpy(b, "x.npy"), std::runtime_error);
  b = npyHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }");
  EXPECT_THROW(decodeNpy(b, "x.npy"), std::runtime_error);
  b = npyHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }") + std::string(16, '\0');
  EXPECT_EQ(decodeNpy(b, "x.npy").shape(), (std::vector<int64_t>{2, 2}));
}

} // namespace
