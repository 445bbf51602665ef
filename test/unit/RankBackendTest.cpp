//===- RankBackendTest.cpp - where each rank computes, without a GPU -------===//
//
// placeRanks (RankBackend.h) decides per rank between the CUDA executor and
// the CPU from the plan's devices, `--device` and what this build and host
// have; here with every combination of those faked, so it is tested on
// machines without a GPU. PlanExecutor::setCompute is checked with a
// stand-in compute that counts its calls.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/RankBackend.h"

#include "PlanFixtures.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>

using namespace hetplan::runtime;
using hetplan::test::errorOf;
namespace plan = hetplan::plan;

namespace {

/// A plan whose ranks are on the devices `types` (one rank each).
plan::Plan planOn(const std::vector<std::string> &types) {
  plan::Plan p;
  for (size_t r = 0; r < types.size(); ++r) {
    p.add_ranks()->set_rank(uint32_t(r));
    auto *d = p.mutable_cluster()->add_devices();
    d->set_rank(uint32_t(r));
    d->set_type(types[r]);
  }
  return p;
}

LocalDevices gpus(int n, bool nccl = true) {
  LocalDevices l;
  l.cudaBuilt = true;
  l.ncclBuilt = nccl;
  l.cudaDevices = n;
  if (!n) l.whyNoCuda = "no CUDA device: cudaGetDeviceCount found none";
  return l;
}

} // namespace

TEST(RankBackend, DeviceChoiceParses) {
  EXPECT_EQ(parseDeviceChoice("auto"), DeviceChoice::Auto);
  EXPECT_EQ(parseDeviceChoice("cpu"), DeviceChoice::Cpu);
  EXPECT_EQ(parseDeviceChoice("cuda"), DeviceChoice::Cuda);
  EXPECT_EQ(errorOf([] { parseDeviceChoice("tpu"); }), "--device tpu: expected auto, cpu or cuda");
}

TEST(RankBackend, VendorFromTheCatalogName) {
  plan::Plan p = planOn({"A100-SXM-80GB", "MI250X", "CPU-2S-AVX512", "T4"});
  EXPECT_EQ(plannedDevice(p, 0).vendor, Vendor::Nvidia);
  EXPECT_EQ(plannedDevice(p, 1).vendor, Vendor::Amd);
  EXPECT_EQ(plannedDevice(p, 2).vendor, Vendor::Cpu);
  EXPECT_EQ(plannedDevice(p, 3).type, "T4");
  // A rank the cluster does not list is a CPU rank.
  EXPECT_EQ(plannedDevice(p, 9).vendor, Vendor::Cpu);
}

TEST(RankBackend, ThreadsShareTheVisibleGpus) {
  plan::Plan p = planOn({"A100-SXM-80GB", "A100-SXM-80GB", "T4", "CPU-2S-AVX512"});
  Placement a = placeRanks(p, DeviceChoice::Auto, gpus(2), false);
  EXPECT_EQ(a.cuda, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(a.device, (std::vector<int>{0, 1, 0, -1}));
  EXPECT_EQ(a.comm, CommKind::Threads);
  EXPECT_EQ(a.summary, "ranks 0-2 on CUDA (devices 0-1), ranks 3 on CPU, threads");
}

TEST(RankBackend, DeviceCpuPutsEveryRankOnTheCpu) {
  plan::Plan p = planOn({"A100-SXM-80GB", "T4"});
  for (bool mpi : {false, true}) {
    Placement c = placeRanks(p, DeviceChoice::Cpu, gpus(8), mpi);
    EXPECT_EQ(c.cuda, (std::vector<bool>{false, false}));
    EXPECT_EQ(c.comm, mpi ? CommKind::Mpi : CommKind::Threads);
  }
}

// auto where CUDA is missing: the CPU path exactly as before.
TEST(RankBackend, AutoWithoutCudaRunsOnTheCpu) {
  plan::Plan p = planOn({"A100-SXM-80GB", "MI300X"});
  for (const LocalDevices &l : {LocalDevices{}, gpus(0)}) {
    Placement a = placeRanks(p, DeviceChoice::Auto, l, false);
    EXPECT_EQ(a.cuda, (std::vector<bool>{false, false}));
    EXPECT_EQ(a.summary, "ranks 0-1 on CPU, threads");
  }
  // An AMD rank has no backend here: the CPU, beside a CUDA rank.
  Placement mixed = placeRanks(p, DeviceChoice::Auto, gpus(1), false);
  EXPECT_EQ(mixed.cuda, (std::vector<bool>{true, false}));
}

TEST(RankBackend, DeviceCudaSaysWhyNot) {
  plan::Plan p = planOn({"CPU-2S-AVX512", "A100-SXM-80GB"});
  EXPECT_EQ(errorOf([&] { placeRanks(p, DeviceChoice::Cuda, LocalDevices{}, false); }),
            "rank 1 is planned on a A100-SXM-80GB, but this hetplan was built without CUDA; run it on CPUs "
            "with --device cpu");
  EXPECT_EQ(errorOf([&] { placeRanks(p, DeviceChoice::Cuda, gpus(0), false); }),
            "rank 1 is planned on a A100-SXM-80GB, but no CUDA device: cudaGetDeviceCount found none; run it "
            "on CPUs with --device cpu");
  EXPECT_EQ(errorOf([&] { placeRanks(planOn({"MI250X"}), DeviceChoice::Cuda, gpus(1), false); }),
            "rank 0 is planned on a MI250X (AMD): this runtime has no ROCm backend; run it on CPUs with "
            "--device cpu");
  // A CPU rank stays on the CPU under --device cuda.
  Placement c = placeRanks(p, DeviceChoice::Cuda, gpus(1), false);
  EXPECT_EQ(c.cuda, (std::vector<bool>{false, true}));
}

// One process per rank: NCCL only when every rank is a CUDA rank (and the
// processes agree, mpiCommKind), host-staged MPI otherwise.
TEST(RankBackend, MpiJobsPickTheirCommunicator) {
  plan::Plan gpuOnly = planOn({"H100-SXM", "H100-SXM", "A100-SXM-80GB"});
  Placement n = placeRanks(gpuOnly, DeviceChoice::Auto, gpus(2), true, /*localRank=*/3);
  EXPECT_EQ(n.comm, CommKind::Nccl);
  EXPECT_EQ(n.device[0], 1); // local rank 3 of a 2-GPU node
  EXPECT_EQ(placeRanks(gpuOnly, DeviceChoice::Auto, gpus(2, /*nccl=*/false), true).comm, CommKind::Mpi);
  plan::Plan mixed = planOn({"H100-SXM", "CPU-2S-AVX512"});
  EXPECT_EQ(placeRanks(mixed, DeviceChoice::Auto, gpus(2), true).comm, CommKind::Mpi);
  plan::Plan vendors = planOn({"H100-SXM", "MI300X"});
  EXPECT_EQ(placeRanks(vendors, DeviceChoice::Auto, gpus(2), true).comm, CommKind::Mpi);
  // A process checks its own rank only: its peers decide theirs.
  EXPECT_EQ(placeRanks(vendors, DeviceChoice::Cuda, gpus(1), true, 0, /*mpiRank=*/0).cuda[0], true);
  EXPECT_NE(errorOf([&] { placeRanks(vendors, DeviceChoice::Cuda, gpus(1), true, 0, 1); }), "");
  EXPECT_EQ(mpiCommKind(false, gpus(2)), CommKind::Mpi);
  EXPECT_EQ(mpiCommKind(true, gpus(2)), CommKind::Nccl);
}

namespace {
/// Runs on the CPU Executor, counting calls: stands in for the CUDA one.
class CountingCompute final : public RankCompute {
public:
  explicit CountingCompute(const Executor &cpu) : cpu_(cpu) {}
  std::map<std::string, Tensor> runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
                                         const std::set<std::string> &keep,
                                         std::map<std::string, std::vector<int64_t>> *shapes,
                                         ExecutionObserver *observer, const Executor::NodeHook *hook,
                                         const std::set<size_t> *, const std::set<std::string> *) override {
    ++calls;
    return cpu_.runNodes(nodes, std::move(values), keep, shapes, observer, hook);
  }
  std::string describe() const override { return "counting"; }
  std::atomic<int> calls{0};

private:
  const Executor &cpu_;
};
} // namespace

TEST(RankBackend, SetComputeRunsTheRanksForwardOnIt) {
  const std::string path = std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx";
  PlanExecutor exec(hetplan::test::oneRankPlan(path, "infer", 2));
  Tensor ids(DType::Int64, {2, 8});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = i % 50;
  auto cpu = exec.run({{"input_ids", ids}});
  auto counting = std::make_shared<CountingCompute>(exec.executor());
  exec.setCompute(0, counting);
  EXPECT_EQ(exec.compute(0), counting.get());
  auto other = exec.run({{"input_ids", ids}});
  EXPECT_EQ(counting->calls, 1); // one FORWARD
  const Tensor &a = cpu.begin()->second, &b = other.begin()->second;
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
  exec.setCompute(0, nullptr);
  EXPECT_EQ(exec.compute(0), nullptr);
  EXPECT_THROW(exec.setCompute(5, counting), std::runtime_error);
}
