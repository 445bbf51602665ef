//===- ModelLoadTest.cpp - the runtime's ONNX loader ----------------------===//
//
// What loadModel takes from a file and what it refuses: Constant nodes are
// values (as in the compiler's het IR), external data stays inside the
// model's folder.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Model.h"

#include <gtest/gtest.h>

using namespace hetplan::runtime;

namespace {

std::string loadError(const std::string &path) {
  try {
    loadModel(path);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

TEST(ModelLoad, ConstantNodesAreValuesNotNodes) {
  // The TorchScript GPT-2 export: 481 nodes, 186 of them Constants. het IR
  // has 295 nodes, and so must the runtime (plans index nodes).
  Model m = loadModel(std::string(HETPLAN_SOURCE_DIR) + "/models/hf/gpt2.onnx");
  EXPECT_EQ(m.nodes.size(), 295u);
  EXPECT_EQ(m.constants.size(), 186u);
  for (const Node &n : m.nodes) EXPECT_NE(n.opType, "Constant");
  for (const std::string &c : m.constants) EXPECT_TRUE(m.initializers.count(c)) << c;
}

TEST(ModelLoad, ExternalDataStaysInTheModelsFolder) {
  std::string dir = std::string(HETPLAN_SOURCE_DIR) + "/test/import/Inputs/";
  EXPECT_EQ(loadError(dir + "add_external.onnx"), "");
  EXPECT_NE(loadError(dir + "add_external_abs.onnx")
                .find("external data at '/etc/passwd' is outside the model's folder"),
            std::string::npos);
  EXPECT_NE(loadError(dir + "add_external_up.onnx")
                .find("external data at '../Inputs/add_external.bin' is outside the model's folder"),
            std::string::npos);
  EXPECT_NE(loadError(dir + "add_external_huge_offset.onnx").find("is too short (offset 9223372036854775000"),
            std::string::npos);
}

} // namespace
