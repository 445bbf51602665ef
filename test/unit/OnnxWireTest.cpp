//===- OnnxWireTest.cpp - stripping weight payloads -----------------------===//

#include "dialects/het/import/OnnxWire.h"
#include "ProtoWriter.h"

#include <gtest/gtest.h>

using namespace hetplan;

TEST(OnnxWire, LargePayloadIsReplacedByItsLocation) {
  std::string weight(4096, '\x7f');
  std::string model = test::addModel(weight);
  std::string stripped, error;
  ASSERT_TRUE(import::stripLargePayloads(model, stripped, error)) << error;
  // The copy is small: the 4 KiB payload is gone.
  EXPECT_LT(stripped.size(), 400u);
  EXPECT_EQ(stripped.find(weight.substr(0, 300)), std::string::npos);
  // ... and the note says exactly where the payload starts in the file.
  size_t offset = model.find(weight);
  ASSERT_NE(offset, std::string::npos);
  EXPECT_NE(stripped.find(import::kOffsetKey), std::string::npos);
  EXPECT_NE(stripped.find(std::to_string(offset)), std::string::npos);
  EXPECT_NE(stripped.find("4096"), std::string::npos);
}

TEST(OnnxWire, SmallPayloadStays) {
  std::string weight(64, '\x01'); // 16 floats: shape-sized data
  std::string model = test::addModel(weight);
  std::string stripped, error;
  ASSERT_TRUE(import::stripLargePayloads(model, stripped, error)) << error;
  EXPECT_EQ(stripped, model);
}

TEST(OnnxWire, TruncatedFileIsAnError) {
  std::string model = test::addModel(std::string(1024, '\0'));
  std::string stripped, error;
  EXPECT_FALSE(import::stripLargePayloads(
      std::string_view(model).substr(0, model.size() - 100), stripped, error));
  EXPECT_NE(error.find("not a valid ONNX protobuf"), std::string::npos) << error;
  EXPECT_NE(error.find("claims"), std::string::npos) << error;
}

TEST(OnnxWire, GarbageIsAnError) {
  std::string stripped, error;
  EXPECT_FALSE(import::stripLargePayloads("\x0f\x0f\x0f", stripped, error));
  EXPECT_NE(error.find("wire type"), std::string::npos) << error;
}
