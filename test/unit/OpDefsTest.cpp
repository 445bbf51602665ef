// The op table's definitions (ops/defs/*.cpp) on plain shapes: the rules
// moved out of passes/ShapeRules.cpp, passes/cost/OpCosts.cpp and
// runtime/src/model/ModelVerifier.cpp give what those gave (the plan digests
// of the test suite check the same end to end).
#include "ops/OpTable.h"

#include <gtest/gtest.h>

#include <map>

using namespace hetplan;

namespace {

class TestAttrs : public ops::Attrs {
public:
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::vector<int64_t>> lists;
  std::map<std::string, std::string> strings;
  std::optional<int64_t> getInt(const std::string &n) const override {
    auto it = ints.find(n);
    return it == ints.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  std::optional<std::vector<int64_t>> getInts(const std::string &n) const override {
    auto it = lists.find(n);
    return it == lists.end() ? std::nullopt : std::optional<std::vector<int64_t>>(it->second);
  }
  std::optional<std::string> getString(const std::string &n) const override {
    auto it = strings.find(n);
    return it == strings.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  bool has(const std::string &n) const override { return ints.count(n) || lists.count(n) || strings.count(n); }
};

ops::ValueShape known(std::vector<int64_t> dims) {
  ops::ValueShape v;
  v.present = v.ranked = v.typed = true;
  v.dims = std::move(dims);
  return v;
}
ops::ValueShape absent() { return {}; }

const ops::OpDef &def(const std::string &type, const std::string &domain = "") {
  const ops::OpDef *d = ops::findOp(domain, type);
  EXPECT_NE(d, nullptr) << domain << "." << type;
  static ops::OpDef none;
  return d ? *d : none;
}

struct Shaped {
  bool ok;
  std::string why;
  std::vector<ops::OutShape> out;
};
Shaped shape(const ops::OpDef &d, const std::vector<ops::ValueShape> &in, size_t outputs,
             const ops::Attrs &attrs = TestAttrs(), int64_t opset = 21) {
  Shaped s{false, "", std::vector<ops::OutShape>(outputs)};
  s.ok = d.shape({attrs, in, opset}, s.out, s.why);
  return s;
}

ops::CostIn costIn(const ops::Attrs &attrs, std::vector<std::optional<std::vector<int64_t>>> inputs,
                   std::vector<double> outputElems) {
  ops::CostIn in{attrs, inputs, std::vector<bool>(inputs.size(), true), {}, outputElems};
  for (const auto &s : inputs) {
    double n = 1;
    for (int64_t d : s.value_or(std::vector<int64_t>{})) n *= double(d);
    in.inputElems.push_back(s ? n : 0);
  }
  return in;
}

TEST(OpTableDefs, IntegerProductsKeepTheFloatRulesOverTheirDataOperands) {
  auto mi = shape(def("MatMulInteger"), {known({2, 3}), known({3, 4})}, 1);
  ASSERT_TRUE(mi.ok);
  EXPECT_EQ(mi.out[0].dims, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(mi.out[0].element, ops::Element::Int32);

  // A, a_scale, a_zp, B, b_scale, b_zp, y_scale, y_zp: B at 3, y_zp at 7.
  std::vector<ops::ValueShape> q = {known({2, 3}), known({}), known({}), known({3, 5}),
                                    known({}),     known({}), known({}), known({})};
  auto ql = shape(def("QLinearMatMul"), q, 1);
  ASSERT_TRUE(ql.ok);
  EXPECT_EQ(ql.out[0].dims, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(ql.out[0].element, ops::Element::OfInput);
  EXPECT_EQ(ql.out[0].elementOf, 7);
  q[7].typed = false; // a zero point of unknown type: the input's type
  EXPECT_EQ(shape(def("QLinearMatMul", "com.microsoft"), q, 1).out[0].elementOf, 0);

  auto bad = shape(def("QLinearMatMul"), {known({2, 3}), known({}), known({}), known({4, 5})}, 1);
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.why, "contraction sizes differ: 3 and 4");
  auto missing = shape(def("QLinearMatMul"), {known({2, 3})}, 1);
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.why, "needs input #3");

  TestAttrs none;
  auto in = costIn(none, {std::vector<int64_t>{2, 3}, std::vector<int64_t>{3, 4}}, {8});
  EXPECT_EQ(def("MatMulInteger").cost(in).flops, def("MatMul").cost(in).flops);
  EXPECT_EQ(def("MatMulInteger").cost(in).engine, ops::Engine::Matrix);
}

TEST(OpTableDefs, QGemmIsFloat32WithoutAnOutputScale) {
  std::vector<ops::ValueShape> q = {known({2, 3}), known({}), known({}), known({3, 4}), known({}), known({})};
  auto g = shape(def("QGemm", "com.microsoft"), q, 1);
  ASSERT_TRUE(g.ok);
  EXPECT_EQ(g.out[0].dims, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(g.out[0].element, ops::Element::Float32);
  q.push_back(absent());
  q.push_back(known({}));
  q.push_back(known({}));
  EXPECT_EQ(shape(def("QGemm", "com.microsoft"), q, 1).out[0].elementOf, 8);
}

TEST(OpTableDefs, IntegerConvolutionsPriceAsConvolutions) {
  TestAttrs none;
  std::vector<std::optional<std::vector<int64_t>>> x = {std::vector<int64_t>{1, 3, 8, 8},
                                                        std::vector<int64_t>{4, 3, 3, 3}};
  auto in = costIn(none, x, {4 * 6 * 6});
  EXPECT_EQ(def("ConvInteger").cost(in).flops, ops::convolutionCost(in, 1, 2).flops);
  auto ci = shape(def("ConvInteger"), {known({1, 3, 8, 8}), known({4, 3, 3, 3})}, 1);
  ASSERT_TRUE(ci.ok);
  EXPECT_EQ(ci.out[0].dims, (std::vector<int64_t>{1, 4, 6, 6}));
  EXPECT_EQ(ci.out[0].element, ops::Element::Int32);
  EXPECT_EQ(def("QLinearConv", "com.microsoft").check, nullptr);
}

TEST(OpTableDefs, WeightProductsAreTheMatrixProducts) {
  for (const ops::OpDef *d : ops::allOps()) {
    bool product = d->domain.empty() &&
                   (d->type == "MatMul" || d->type == "Gemm" || d->type == "MatMulInteger" || d->type == "Einsum");
    EXPECT_EQ(d->weightProduct, product) << d->type;
  }
}

TEST(OpTableDefs, DataDependentSizesCarryTheirUpperBound) {
  auto nz = shape(def("NonZero"), {known({3, 4})}, 1);
  ASSERT_TRUE(nz.ok);
  EXPECT_EQ(nz.out[0].dims, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(nz.out[0].upperBound, "the number of nonzero elements is known only at run time; planned with its "
                                  "upper bound 12 (every element of the input)");
  ops::ValueShape c = known({2, 2});
  c.ints = std::vector<int64_t>{0, 5, 0, 7};
  auto folded = shape(def("NonZero"), {c}, 1);
  EXPECT_EQ(folded.out[0].dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(folded.out[0].ints, (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_TRUE(folded.out[0].upperBound.empty());
}

TEST(OpTableDefs, RecurrentAndAttentionShapes) {
  TestAttrs a;
  a.ints["hidden_size"] = 5;
  a.strings["direction"] = "bidirectional";
  auto l = shape(def("LSTM"), {known({7, 2, 3}), known({2, 20, 3}), known({2, 20, 5})}, 3, a);
  ASSERT_TRUE(l.ok);
  EXPECT_EQ(l.out[0].dims, (std::vector<int64_t>{7, 2, 2, 5}));
  EXPECT_EQ(l.out[2].dims, (std::vector<int64_t>{2, 2, 5}));

  TestAttrs heads;
  heads.ints["num_heads"] = 2;
  auto f = shape(def("Attention", "com.microsoft"), {known({1, 4, 8}), known({8, 24})}, 2, heads);
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.out[0].dims, (std::vector<int64_t>{1, 4, 8}));
  EXPECT_EQ(f.out[1].dims, (std::vector<int64_t>{2, 1, 2, 4, 4}));
  auto o = shape(def("Attention"), {known({1, 2, 4, 8}), known({1, 2, 6, 8}), known({1, 2, 6, 3})}, 1);
  ASSERT_TRUE(o.ok);
  EXPECT_EQ(o.out[0].dims, (std::vector<int64_t>{1, 2, 4, 3}));
}

TEST(OpTableDefs, InstanceNormalizationChecksItsScale) {
  TestAttrs none;
  ops::CheckIn in{none, 17, {std::vector<int64_t>{1, 3, 4, 4}, std::vector<int64_t>{4}, std::vector<int64_t>{4}}};
  EXPECT_EQ(def("InstanceNormalization").check(in, "InstanceNormalization"), "scale has 4 values for 3 channels");
}

} // namespace
