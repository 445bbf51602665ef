//===- RuntimeTest.cpp - the runtime's device layer -----------------------===//
//
// Built against hetplan_runtime alone: the runtime must link without MLIR.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Devices.h"

#include <gtest/gtest.h>

using namespace hetplan::runtime;

TEST(RuntimeDevices, CpuHostIsAlwaysThere) {
  auto devices = enumerateDevices();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices[0].kind, DeviceKind::Cpu);
  EXPECT_GT(devices[0].computeUnits, 0);
  EXPECT_GT(devices[0].memoryBytes, int64_t(1) << 28);
}

TEST(RuntimeDevices, CudaSelfTestAddsOnTheGpu) {
  std::string why;
  auto gpus = cudaDevices(&why);
  if (gpus.empty())
    GTEST_SKIP() << "no CUDA device: " << why;
  std::vector<float> a(1000), b(1000), out;
  for (int i = 0; i < 1000; ++i) {
    a[i] = float(i);
    b[i] = 0.5f * float(i);
  }
  std::string error;
  ASSERT_TRUE(cudaSelfTestAdd(0, a, b, out, error)) << error;
  ASSERT_EQ(out.size(), a.size());
  for (int i = 0; i < 1000; ++i)
    EXPECT_FLOAT_EQ(out[i], 1.5f * float(i));
}

TEST(RuntimeDevices, WithoutCudaTheSelfTestSaysWhy) {
  if (!cudaDevices().empty())
    GTEST_SKIP() << "a CUDA device is present";
  std::vector<float> out;
  std::string error;
  EXPECT_FALSE(cudaSelfTestAdd(0, {1.f}, {2.f}, out, error));
  EXPECT_FALSE(error.empty());
}
