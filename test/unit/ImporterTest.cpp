//===- ImporterTest.cpp - ONNX import through the C++ API -----------------===//

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxImporter.h"
#include "ProtoWriter.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace hetplan;
using namespace hetplan::het;

namespace {

/// Writes `bytes` to a fresh temporary file and removes it at the end.
struct TempFile {
  llvm::SmallString<128> path;
  explicit TempFile(const std::string &bytes, const char *suffix = "onnx") {
    int fd;
    EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("hetplan-test", suffix, fd, path));
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << bytes;
  }
  ~TempFile() { llvm::sys::fs::remove(path); }
};

std::string readAt(llvm::StringRef path, int64_t offset, int64_t length) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return (*buffer)->getBuffer().substr(offset, length).str();
}

} // namespace

TEST(Importer, LargeWeightIsReferencedNotCopied) {
  std::string weight;
  for (int i = 0; i < 1024; ++i) // 1024 distinct floats
    weight.append(reinterpret_cast<const char *>(&i), 4);
  TempFile file(test::addModel(weight));
  mlir::MLIRContext context;
  std::string error;
  auto module = import::importOnnxFile(file.path, &context, {}, error);
  ASSERT_TRUE(module) << error;

  auto graph = *module->getOps<GraphOp>().begin();
  auto weights = llvm::to_vector(graph.getBody().getOps<WeightOp>());
  ASSERT_EQ(weights.size(), 1u);
  WeightOp w = weights.front();
  EXPECT_EQ(w.getSymName(), "w");
  EXPECT_FALSE(w.getValueAttr());
  ExternAttr ext = w.getLocationAttr();
  ASSERT_TRUE(ext);
  EXPECT_EQ(ext.getFile(), "");
  EXPECT_EQ(ext.getEncoding(), "raw");
  EXPECT_EQ(ext.getLength(), 4096);
  // The reference points at exactly the weight's bytes in the file.
  EXPECT_EQ(readAt(file.path, ext.getOffset(), ext.getLength()), weight);
}

TEST(Importer, SymbolicDimsStayNamed) {
  TempFile file(test::addModel(std::string(16, '\0')));
  mlir::MLIRContext context;
  std::string error;
  auto module = import::importOnnxFile(file.path, &context, {}, error);
  ASSERT_TRUE(module) << error;
  auto graph = *module->getOps<GraphOp>().begin();
  auto input = llvm::cast<mlir::RankedTensorType>(graph.getArgumentTypes()[0]);
  EXPECT_TRUE(input.isDynamicDim(0));
  EXPECT_EQ(input.getDimSize(1), 4);
  auto dims = llvm::dyn_cast_or_null<DimsAttr>(input.getEncoding());
  ASSERT_TRUE(dims);
  EXPECT_EQ(dims.getNames()[0].getValue(), "batch");
  EXPECT_EQ(dims.getNames()[1].getValue(), "");
}

TEST(Importer, ErrorsNameTheFileAndNode) {
  mlir::MLIRContext context;
  std::string error;

  EXPECT_FALSE(import::importOnnxFile("/nonexistent/m.onnx", &context, {}, error));
  EXPECT_NE(error.find("/nonexistent/m.onnx: cannot open"), std::string::npos) << error;

  TempFile newer(test::addModel(std::string(16, '\0'), /*irVersion=*/99));
  EXPECT_FALSE(import::importOnnxFile(newer.path, &context, {}, error));
  EXPECT_NE(error.find("IR version 99 is not supported"), std::string::npos) << error;

  TempFile domain(test::addModel(std::string(16, '\0'), 8, "org.example"));
  EXPECT_FALSE(import::importOnnxFile(domain.path, &context, {}, error));
  EXPECT_NE(error.find("node 'add0' (Add): unknown domain 'org.example'"),
            std::string::npos)
      << error;
}

TEST(Importer, TextFormat) {
  TempFile file(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[batch, 2] x) => (float[batch, 2] y) {
  y = Relu(x)
})",
                "onnxtext");
  mlir::MLIRContext context;
  std::string error;
  auto module = import::importOnnxFile(file.path, &context, {}, error);
  ASSERT_TRUE(module) << error;
  auto graph = *module->getOps<GraphOp>().begin();
  auto nodes = llvm::to_vector(graph.getBody().getOps<NodeOp>());
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].getOpType(), "Relu");
  EXPECT_EQ(nodes[0].getOpset(), 17);
}
