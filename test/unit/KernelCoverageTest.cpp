// Kernels added for real exported models (issue 8) on hand-computed cases the
// ONNX 1.12 node tests do not cover: ScatterND/ScatterElements reductions,
// negative indices, quantization rounding/saturation, per-axis and blocked
// scales, the float64 path of integer GEMM, float16/bfloat16 through the
// float32 kernels, and the load-time refusals.
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Kernels.h"
#include "hetplan/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace hetplan::runtime;

namespace {
template <typename T> Tensor make(DType dt, std::vector<int64_t> shape, std::vector<T> v) {
  Tensor t(dt, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(T));
  return t;
}
Tensor f32(std::vector<int64_t> s, std::vector<float> v) { return make<float>(DType::Float32, s, v); }
Tensor i64(std::vector<int64_t> s, std::vector<int64_t> v) { return make<int64_t>(DType::Int64, s, v); }
Tensor u8(std::vector<int64_t> s, std::vector<uint8_t> v) { return make<uint8_t>(DType::UInt8, s, v); }
Tensor i8(std::vector<int64_t> s, std::vector<int8_t> v) { return make<int8_t>(DType::Int8, s, v); }
Tensor half(DType dt, std::vector<int64_t> s, std::vector<float> v) {
  Tensor t(dt, s);
  for (size_t i = 0; i < v.size(); ++i) t.data<uint16_t>()[i] = dt == DType::Float16 ? floatToHalf(v[i]) : floatToBfloat16(v[i]);
  return t;
}

Attribute intAttr(int64_t v) { Attribute a; a.kind = Attribute::Int; a.i = v; return a; }
Attribute strAttr(std::string v) { Attribute a; a.kind = Attribute::String; a.s = std::move(v); return a; }

std::vector<Tensor> runOp(const std::string &op, std::vector<Tensor> ins, std::map<std::string, Attribute> attrs = {},
                          int64_t opset = 21, size_t nout = 1) {
  Node node;
  node.opType = op;
  node.attrs = std::move(attrs);
  node.outputs.assign(nout, "y");
  const KernelInfo *k = findKernel(op);
  EXPECT_NE(k, nullptr) << op;
  KernelContext c{node, opset, {}, std::vector<Tensor>(nout)};
  for (auto &t : ins) c.inputs.push_back(t.defined() ? &t : nullptr);
  k->run(c);
  return c.outputs;
}

template <typename T> std::vector<T> vals(const Tensor &t) { return std::vector<T>(t.data<T>(), t.data<T>() + t.numel()); }
std::vector<double> asD(const Tensor &t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.scalarAsDouble(i));
  return v;
}

/// Load-time check of a one-node model; "" when accepted.
std::string checkOne(const std::string &op, std::vector<DType> inTypes, std::map<std::string, Attribute> attrs, int64_t opset = 21) {
  Model m;
  m.path = "m.onnx";
  m.opsets[""] = opset;
  Node n;
  n.name = "n0";
  n.opType = op;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inTypes.size(); ++i) {
    std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    ValueInfo v;
    v.name = name;
    v.dtype = inTypes[i];
    m.inputs.push_back(v);
    m.valueTypes[name] = inTypes[i];
  }
  n.outputs = {"y"};
  ValueInfo y;
  y.name = "y";
  m.outputs.push_back(y);
  m.nodes.push_back(n);
  Executor e(m);
  auto p = e.check();
  return p.empty() ? "" : p[0];
}
} // namespace

TEST(IndexingKernels, GatherNDNegativeIndicesAndBatchDims) {
  auto y = runOp("GatherND", {f32({2, 2}, {0, 1, 2, 3}), i64({2, 1}, {-1, 0})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{2, 3, 0, 1}));
  // batch_dims=1: data [2,2,2], indices [2,1,2] -> [2,1]
  y = runOp("GatherND", {f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i64({2, 1, 2}, {0, 1, 1, 0})}, {{"batch_dims", intAttr(1)}});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{1, 6}));
  EXPECT_THROW(runOp("GatherND", {f32({2}, {0, 1}), i64({1, 1}, {2})}), std::runtime_error);
}

TEST(IndexingKernels, ScatterNDReductions) {
  Tensor data = f32({4}, {1, 2, 3, 4}), idx = i64({3, 1}, {0, 2, 0}), up = f32({3}, {5, 1, 7});
  EXPECT_EQ(vals<float>(runOp("ScatterND", {data, idx, up}, {{"reduction", strAttr("add")}})[0]), (std::vector<float>{13, 2, 4, 4}));
  EXPECT_EQ(vals<float>(runOp("ScatterND", {data, idx, up}, {{"reduction", strAttr("mul")}})[0]), (std::vector<float>{35, 2, 3, 4}));
  EXPECT_EQ(vals<float>(runOp("ScatterND", {data, idx, up}, {{"reduction", strAttr("max")}})[0]), (std::vector<float>{7, 2, 3, 4}));
  EXPECT_EQ(vals<float>(runOp("ScatterND", {data, idx, up}, {{"reduction", strAttr("min")}})[0]), (std::vector<float>{1, 2, 1, 4}));
  // slices: data [2,2], one row replaced, negative index
  EXPECT_EQ(vals<float>(runOp("ScatterND", {f32({2, 2}, {1, 2, 3, 4}), i64({1, 1}, {-1}), f32({1, 2}, {9, 8})})[0]),
            (std::vector<float>{1, 2, 9, 8}));
}

TEST(IndexingKernels, ScatterElementsReductionsAndHalf) {
  Tensor data = f32({2, 2}, {1, 2, 3, 4}), idx = i64({2, 1}, {1, -2}), up = f32({2, 1}, {10, 20});
  std::map<std::string, Attribute> a = {{"axis", intAttr(1)}, {"reduction", strAttr("add")}};
  EXPECT_EQ(vals<float>(runOp("ScatterElements", {data, idx, up}, a)[0]), (std::vector<float>{1, 12, 23, 4}));
  a["reduction"] = strAttr("max");
  EXPECT_EQ(vals<float>(runOp("ScatterElements", {data, idx, up}, a)[0]), (std::vector<float>{1, 10, 20, 4}));
  // float16 data through the float32 kernel, output stays float16
  auto y = runOp("ScatterElements", {half(DType::Float16, {2, 2}, {1, 2, 3, 4}), idx, half(DType::Float16, {2, 1}, {10, 20})},
                 {{"axis", intAttr(1)}, {"reduction", strAttr("mul")}});
  EXPECT_EQ(y[0].dtype(), DType::Float16);
  EXPECT_EQ(asD(y[0]), (std::vector<double>{1, 20, 60, 4}));
}

TEST(IndexingKernels, OneHotNonZeroEinsum) {
  auto y = runOp("OneHot", {i64({3}, {0, -1, 5}), i64({}, {3}), f32({2}, {0, 1})}, {}, 11);
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0})); // 5 is out of range: all off
  y = runOp("NonZero", {f32({2, 2}, {0, 1, -0.0f, 2})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(vals<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 1, 1}));
  // attention-style scores: bhqd,bhkd->bhqk
  Tensor q = f32({1, 1, 2, 2}, {1, 2, 3, 4}), k = f32({1, 1, 2, 2}, {1, 0, 0, 1});
  y = runOp("Einsum", {q, k}, {{"equation", strAttr("bhqd,bhkd->bhqk")}}, 12);
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{1, 2, 3, 4}));
  y = runOp("Einsum", {f32({2, 2}, {1, 2, 3, 4})}, {{"equation", strAttr("ii")}}, 12); // trace, implicit scalar
  EXPECT_EQ(y[0].rank(), 0);
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{5}));
}

TEST(QuantKernels, QuantizeRoundsHalfToEvenAndSaturates) {
  auto y = runOp("QuantizeLinear", {f32({6}, {2.5f, 3.5f, -2.5f, 300.f, -300.f, 0.49f}), f32({}, {1.f}), u8({}, {0})});
  EXPECT_EQ(vals<uint8_t>(y[0]), (std::vector<uint8_t>{2, 4, 0, 255, 0, 0}));
  y = runOp("QuantizeLinear", {f32({4}, {2.5f, -2.5f, -1000.f, 1000.f}), f32({}, {1.f}), i8({}, {0})});
  EXPECT_EQ(vals<int8_t>(y[0]), (std::vector<int8_t>{2, -2, -128, 127}));
  // no zero point: uint8; output_dtype int16 (opset 21)
  y = runOp("QuantizeLinear", {f32({2}, {1.f, 700.f}), f32({}, {0.5f})});
  EXPECT_EQ(y[0].dtype(), DType::UInt8);
  EXPECT_EQ(vals<uint8_t>(y[0]), (std::vector<uint8_t>{2, 255}));
  y = runOp("QuantizeLinear", {f32({2}, {1.f, 700.f}), f32({}, {0.5f})}, {{"output_dtype", intAttr(5)}});
  EXPECT_EQ(y[0].dtype(), DType::Int16);
  EXPECT_EQ(asD(y[0]), (std::vector<double>{2, 1400}));
}

TEST(QuantKernels, PerAxisAndBlocked) {
  // per axis 1 of [2,2]: scales 1, 2; zero points 0, 10
  auto y = runOp("QuantizeLinear", {f32({2, 2}, {1, 4, 3, 8}), f32({2}, {1, 2}), u8({2}, {0, 10})}, {{"axis", intAttr(1)}});
  EXPECT_EQ(vals<uint8_t>(y[0]), (std::vector<uint8_t>{1, 12, 3, 14}));
  auto x = runOp("DequantizeLinear", {y[0], f32({2}, {1, 2}), u8({2}, {0, 10})}, {{"axis", intAttr(1)}});
  EXPECT_EQ(vals<float>(x[0]), (std::vector<float>{1, 4, 3, 8}));
  // blocked: [1,4] along axis 1, block 2 -> scale [1,2]
  x = runOp("DequantizeLinear", {i8({1, 4}, {1, 2, 3, 4}), f32({1, 2}, {1, 10})}, {{"axis", intAttr(1)}, {"block_size", intAttr(2)}});
  EXPECT_EQ(vals<float>(x[0]), (std::vector<float>{1, 2, 30, 40}));
  // float16 scale: float16 output
  x = runOp("DequantizeLinear", {i8({2}, {-3, 4}), half(DType::Float16, {}, {0.5f})});
  EXPECT_EQ(x[0].dtype(), DType::Float16);
  EXPECT_EQ(asD(x[0]), (std::vector<double>{-1.5, 2}));
}

TEST(QuantKernels, MatMulIntegerExactPastFloat32) {
  // K = 300 products of 255 * 255 exceed 2^24: the float64 path.
  const int64_t K = 300;
  Tensor a(DType::UInt8, {1, K}), b(DType::UInt8, {K, 2});
  for (int64_t k = 0; k < K; ++k) {
    a.data<uint8_t>()[k] = 255;
    b.data<uint8_t>()[2 * k] = 255;
    b.data<uint8_t>()[2 * k + 1] = static_cast<uint8_t>(k % 7);
  }
  auto y = runOp("MatMulInteger", {a, b, Tensor(), u8({2}, {0, 3})}, {}, 10);
  ASSERT_EQ(y[0].dtype(), DType::Int32);
  int64_t want1 = 0;
  for (int64_t k = 0; k < K; ++k) want1 += 255 * (k % 7 - 3);
  EXPECT_EQ(vals<int32_t>(y[0]), (std::vector<int32_t>{255 * 255 * 300, static_cast<int32_t>(want1)}));
}

TEST(QuantKernels, QLinearMatMulSaturatesInt8) {
  // [1,2]x[2,1]: (10*10 + 10*10) * (1*1/1) = 200 -> 127 for int8
  auto y = runOp("QLinearMatMul", {i8({1, 2}, {10, 10}), f32({}, {1}), i8({}, {0}), i8({2, 1}, {10, 10}), f32({}, {1}), i8({}, {0}),
                                   f32({}, {1}), i8({}, {0})}, {}, 10);
  EXPECT_EQ(vals<int8_t>(y[0]), (std::vector<int8_t>{127}));
  // half-way values round to even: 5 * 0.5 = 2.5 -> 2
  y = runOp("QLinearMatMul", {u8({1, 1}, {5}), f32({}, {0.5f}), u8({}, {0}), u8({1, 1}, {1}), f32({}, {1}), u8({}, {0}),
                              f32({}, {1}), u8({}, {0})}, {}, 10);
  EXPECT_EQ(vals<uint8_t>(y[0]), (std::vector<uint8_t>{2}));
}

/// Runs a com.microsoft contrib kernel (found by the node's domain).
std::vector<Tensor> runMs(const std::string &op, std::vector<Tensor> ins, std::map<std::string, Attribute> attrs = {}) {
  Node node;
  node.opType = op;
  node.domain = "com.microsoft";
  node.attrs = std::move(attrs);
  node.outputs = {"y"};
  const KernelInfo *k = findKernel(node);
  EXPECT_NE(k, nullptr) << op;
  if (!k) return {};
  KernelContext c{node, 17, {}, std::vector<Tensor>(1)};
  for (auto &t : ins) c.inputs.push_back(t.defined() ? &t : nullptr);
  k->run(c);
  return c.outputs;
}
Tensor f32s(float v) { return f32({}, {v}); }
Tensor u8s(uint8_t v) { return u8({}, {v}); }

TEST(QuantKernels, ContribOpsAreFoundByDomain) {
  Node n;
  n.opType = "QLinearAdd";
  EXPECT_EQ(findKernel(n), nullptr); // not an ONNX op
  n.domain = "com.microsoft";
  EXPECT_NE(findKernel(n), nullptr);
  n.opType = "Relu"; // an ONNX op is not a contrib op
  EXPECT_EQ(findKernel(n), nullptr);
  n.domain = "ai.onnx";
  EXPECT_NE(findKernel(n), nullptr);
}

TEST(QuantKernels, QLinearAddMulBroadcastAndRequantize) {
  // A = ({10, 20} - 10) * 0.5 = {0, 5}; B = 4 * 0.25 = 1; C: scale 0.5, zero point 2.
  auto add = runMs("QLinearAdd", {u8({2}, {10, 20}), f32s(0.5f), u8s(10), u8({1}, {4}), f32s(0.25f), u8s(0), f32s(0.5f), u8s(2)});
  EXPECT_EQ(vals<uint8_t>(add[0]), (std::vector<uint8_t>{4, 14}));
  auto mul = runMs("QLinearMul", {u8({2}, {10, 20}), f32s(0.5f), u8s(10), u8({1}, {4}), f32s(0.25f), u8s(0), f32s(0.5f), u8s(2)});
  EXPECT_EQ(vals<uint8_t>(mul[0]), (std::vector<uint8_t>{2, 12}));
  // int8 saturates: 100 * 1 + 100 * 1 = 200 > 127
  auto sat = runMs("QLinearAdd", {i8({1}, {100}), f32s(1), i8({}, {0}), i8({1}, {100}), f32s(1), i8({}, {0}), f32s(1), i8({}, {0})});
  EXPECT_EQ(vals<int8_t>(sat[0]), (std::vector<int8_t>{127}));
}

TEST(QuantKernels, QLinearSoftmaxRowsAndHugeScales) {
  // (q - max) * ln(3) / 2 = {-ln 3, 0}: softmax {1/4, 3/4} at scale 1/256.
  auto y = runMs("QLinearSoftmax", {u8({1, 2}, {0, 2}), f32s(std::log(3.f) / 2), u8s(7), f32s(1 / 256.f), u8s(0)},
                 {{"axis", intAttr(-1)}, {"opset", intAttr(13)}});
  EXPECT_EQ(vals<uint8_t>(y[0]), (std::vector<uint8_t>{64, 192}));
  // A mask's scale (1e36): only the largest values share the mass.
  auto m = runMs("QLinearSoftmax", {u8({3}, {0, 255, 255}), f32s(1e36f), u8s(255), f32s(1 / 256.f), u8s(0)},
                 {{"axis", intAttr(-1)}, {"opset", intAttr(13)}});
  EXPECT_EQ(vals<uint8_t>(m[0]), (std::vector<uint8_t>{0, 128, 128}));
}

TEST(QuantKernels, QGemmBiasPerColumnScaleAndFloatOutput) {
  // A - 1 = {2, 4}; B^T columns {1, 2}, {3, -1}: products {10, 2}; C {10, 2}: {20, 4}.
  Tensor a = u8({1, 2}, {3, 5}), b = i8({2, 2}, {1, 2, 3, -1});
  Tensor bias = make<int32_t>(DType::Int32, {2}, {10, 2});
  std::map<std::string, Attribute> tb = {{"transB", intAttr(1)}};
  auto fl = runMs("QGemm", {a, f32s(0.5f), u8s(1), b, f32({2}, {0.1f, 0.2f}), i8({}, {0}), bias}, tb);
  ASSERT_EQ(fl[0].dtype(), DType::Float32);
  EXPECT_NEAR(fl[0].data<float>()[0], 1.0f, 1e-6);
  EXPECT_NEAR(fl[0].data<float>()[1], 0.4f, 1e-6);
  // Requantized: {1.0, 0.4} / 0.2 + 128
  auto q = runMs("QGemm", {a, f32s(0.5f), u8s(1), b, f32({2}, {0.1f, 0.2f}), i8({}, {0}), bias, f32s(0.2f), u8s(128)}, tb);
  EXPECT_EQ(vals<uint8_t>(q[0]), (std::vector<uint8_t>{133, 130}));
}

TEST(QuantKernels, ResizeOfUint8RoundsLinear) {
  // asymmetric x2: positions 0, 0.5, 1, 1.5 -> 0, 1.5 (rounds to 2), 3, 3
  auto y = runOp("Resize", {u8({1, 1, 1, 2}, {0, 3}), Tensor(), f32({4}, {1, 1, 1, 2})},
                 {{"mode", strAttr("linear")}, {"coordinate_transformation_mode", strAttr("asymmetric")}}, 13);
  EXPECT_EQ(vals<uint8_t>(y[0]), (std::vector<uint8_t>{0, 2, 3, 3}));
}

TEST(HalfPrecision, FloatKernelsRunOnFloat16AndBfloat16) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    auto y = runOp("Add", {half(dt, {2}, {1.5f, 2}), half(dt, {2}, {0.25f, 4})});
    EXPECT_EQ(y[0].dtype(), dt);
    EXPECT_EQ(asD(y[0]), (std::vector<double>{1.75, 6}));
    y = runOp("MatMul", {half(dt, {1, 2}, {1, 2}), half(dt, {2, 1}, {3, 4})});
    EXPECT_EQ(y[0].dtype(), dt);
    EXPECT_EQ(asD(y[0]), (std::vector<double>{11}));
    y = runOp("ArgMax", {half(dt, {3}, {1, 5, 2})}, {{"axis", intAttr(0)}, {"keepdims", intAttr(0)}});
    EXPECT_EQ(y[0].dtype(), DType::Int64); // non-float outputs are left alone
    EXPECT_EQ(vals<int64_t>(y[0]), (std::vector<int64_t>{1}));
  }
  // the load-time check accepts float16 for float kernels
  EXPECT_EQ(checkOne("Softmax", {DType::Float16}, {}, 17), "");
  EXPECT_EQ(checkOne("LayerNormalization", {DType::BFloat16, DType::BFloat16, DType::BFloat16}, {}, 17), "");
}

TEST(HalfPrecision, CastRoundsHalfToEven) {
  EXPECT_EQ(floatToBfloat16(bfloat16ToFloat(0x3ef5)), 0x3ef5);
  uint32_t bits = 0x3ef5eeb0u; // above the half-way point: up
  float f; std::memcpy(&f, &bits, 4);
  EXPECT_EQ(floatToBfloat16(f), 0x3ef6);
  bits = 0x3ef48000u; // exactly half-way, even below: stays
  std::memcpy(&f, &bits, 4);
  EXPECT_EQ(floatToBfloat16(f), 0x3ef4);
  bits = 0x3ef58000u; // exactly half-way, odd below: up to even
  std::memcpy(&f, &bits, 4);
  EXPECT_EQ(floatToBfloat16(f), 0x3ef6);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(std::nanf("")))));
  EXPECT_EQ(doubleToHalf(65504.0), 0x7bff);
  EXPECT_EQ(doubleToHalf(65519.99), 0x7bff);
  EXPECT_EQ(doubleToHalf(65520.0), 0x7c00);
  EXPECT_EQ(doubleToHalf(-5.960464477539063e-08), 0x8001); // smallest subnormal
  EXPECT_EQ(doubleToHalf(1.0 + 1.0 / 2048), 0x3c00);        // tie: to even
  auto y = runOp("Cast", {f32({2}, {1.f, -2.5f})}, {{"to", intAttr(16)}}, 13);
  EXPECT_EQ(y[0].dtype(), DType::BFloat16);
  y = runOp("Cast", {y[0]}, {{"to", intAttr(1)}}, 13);
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{1.f, -2.5f}));
}

TEST(LoadChecks, RefusalsNameOpTypeAndReason) {
  std::string why = checkOne("QuantizeLinear", {DType::Float32, DType::Float32, static_cast<DType>(17)}, {});
  EXPECT_NE(why.find("(QuantizeLinear)"), std::string::npos) << why;
  EXPECT_NE(why.find("float8e4m3fn"), std::string::npos) << why;
  why = checkOne("DequantizeLinear", {static_cast<DType>(22), DType::Float32}, {});
  EXPECT_NE(why.find("int4"), std::string::npos) << why;
  why = checkOne("ScatterND", {DType::Float32, DType::Int64, DType::Float32}, {{"reduction", strAttr("mean")}});
  EXPECT_NE(why.find("reduction 'mean'"), std::string::npos) << why;
  why = checkOne("ScatterElements", {DType::Float32, DType::Int64, DType::Float32}, {{"reduction", strAttr("max")}}, 16);
  EXPECT_NE(why.find("opset 18"), std::string::npos) << why;
  why = checkOne("MatMulInteger", {DType::Int16, DType::UInt8}, {}, 10);
  EXPECT_NE(why.find("int16"), std::string::npos) << why;
  why = checkOne("GatherND", {DType::Float32, DType::Float32}, {}, 13);
  EXPECT_NE(why.find("indices of element type float32"), std::string::npos) << why;
  EXPECT_EQ(checkOne("GatherND", {DType::Float16, DType::Int64}, {{"batch_dims", intAttr(1)}}, 13), "");
  EXPECT_EQ(checkOne("QLinearConv", {DType::UInt8, DType::Float32, DType::UInt8, DType::Int8, DType::Float32, DType::Int8,
                                     DType::Float32, DType::UInt8, DType::Int32}, {}, 10), "");
}

#ifdef HETPLAN_HF_MODELS
// Dynamo (opset 18) exports need GatherND; they must run and agree with the
// TorchScript (opset 17) export of the same weights.
TEST(ExportedModels, DynamoExportsRunAndMatchTorchScript) {
  for (std::string name : {"gpt2", "llama"}) {
    std::map<std::string, Tensor> in;
    in["input_ids"] = i64({2, 5}, {1, 7, 3, 9, 4, 2, 8, 6, 5, 0});
    in["attention_mask"] = i64({2, 5}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    Model a = loadModel(std::string(HETPLAN_HF_MODELS) + "/" + name + ".onnx");
    Model b = loadModel(std::string(HETPLAN_HF_MODELS) + "/" + name + "-opset18.onnx");
    Executor ea(a), eb(b);
    ASSERT_TRUE(eb.check().empty()) << eb.check()[0];
    Tensor la = ea.run(in).at("logits"), lb = eb.run(in).at("logits");
    ASSERT_EQ(la.shape(), lb.shape()) << name;
    double worst = 0;
    for (int64_t i = 0; i < la.numel(); ++i) worst = std::max(worst, std::fabs(la.scalarAsDouble(i) - lb.scalarAsDouble(i)));
    EXPECT_LT(worst, 1e-4) << name;
  }
}
#endif
