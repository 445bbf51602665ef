//===- DialectTest.cpp - building and printing het IR from C++ ------------===//

#include "dialects/het/IR/HetOps.h"
#include "passes/GraphSummary.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace hetplan::het;

namespace {

std::string print(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

/// A graph y = MatMul(x, w) built through the C++ API.
OwningOpRef<ModuleOp> buildMatMul(MLIRContext &ctx) {
  ctx.loadDialect<HetDialect>();
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  auto dims = DimsAttr::get(&ctx, {b.getStringAttr("batch"), b.getStringAttr("")});
  auto x = RankedTensorType::get({ShapedType::kDynamic, 4}, b.getF32Type(), dims);
  auto y = RankedTensorType::get({ShapedType::kDynamic, 2}, b.getF32Type(), dims);
  auto w = RankedTensorType::get({4, 2}, b.getF32Type());
  auto graph = GraphOp::create(b, loc, "mm", b.getFunctionType({x}, {y}));
  Block *block = new Block();
  graph.getBody().push_back(block);
  Value arg = block->addArgument(x, loc);
  b.setInsertionPointToEnd(block);
  auto weight = WeightOp::create(b, loc, w, b.getStringAttr("w"), ElementsAttr(),
                                 ExternAttr::get(&ctx, "", 128, 32, "raw"));
  OperationState state(loc, NodeOp::getOperationName());
  state.addOperands({arg, weight});
  state.addTypes(y);
  state.addAttribute("op_type", b.getStringAttr("MatMul"));
  state.addAttribute("opset", b.getI64IntegerAttr(17));
  Operation *node = b.create(state);
  ReturnOp::create(b, loc, node->getResults());
  return module;
}

} // namespace

TEST(Dialect, BuiltGraphVerifiesAndRoundTrips) {
  MLIRContext ctx;
  auto module = buildMatMul(ctx);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::string first = print(*module);
  auto reparsed = parseSourceString<ModuleOp>(first, &ctx);
  ASSERT_TRUE(reparsed);
  EXPECT_EQ(print(*reparsed), first);
}

TEST(Dialect, SummaryCountsParametersAndDims) {
  MLIRContext ctx;
  auto module = buildMatMul(ctx);
  auto graph = *module->getOps<GraphOp>().begin();
  GraphSummary s = summarizeGraph(graph);
  EXPECT_EQ(s.numNodes, 1);
  EXPECT_EQ(s.numWeights, 1);
  EXPECT_EQ(s.numParameters, 8);
  EXPECT_EQ(s.parameterBytes, 32);
  EXPECT_EQ(s.opCounts["MatMul"], 1);
  ASSERT_EQ(s.symbolicDims.size(), 1u);
  EXPECT_EQ(s.symbolicDims[0], "batch");
  ASSERT_EQ(s.inputs.size(), 1u);
  EXPECT_EQ(s.inputs[0].type, "batch x 4 x f32");
}

TEST(Dialect, WrongExternLengthFailsVerification) {
  MLIRContext ctx;
  auto module = buildMatMul(ctx);
  auto graph = *module->getOps<GraphOp>().begin();
  auto weight = *graph.getBody().getOps<WeightOp>().begin();
  weight.setLocationAttr(ExternAttr::get(&ctx, "", 128, 31, "raw"));
  std::string message;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  EXPECT_TRUE(failed(verify(*module)));
  EXPECT_NE(message.find("refers to 31 bytes"), std::string::npos) << message;
}
