//===- DeviceValuesTest.cpp - device-resident values, on CPUs ------------===//
//
// The plan executor's side of device-resident values (docs/gpu.md): what a
// rank whose compute keeps values on its device sends, stashes, receives
// and copies to the host. The device is a stand-in: its tensors keep their
// bytes where Tensor::raw() does not point (raw() is a buffer of 0xff
// bytes: NaN floats, -1 indices), so a host read of a device tensor other
// than through Tensor::toHost gives wrong results. The CUDA ranks' own
// tests (CudaPlan.*DeviceValues*) need a GPU.
//
//===----------------------------------------------------------------------===//

#include "PlanFixtures.h"

#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/PlanExecutor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

using namespace hetplan::runtime;
namespace plan = hetplan::plan;

namespace {

struct Counts {
  std::atomic<uint64_t> toDevice{0}, toHost{0}, deviceInputs{0}, deviceInputBytes{0};
};

/// Stand-in device memory: the real bytes in `real`, raw() in `poison`.
class FakeMemory final : public DeviceMemory {
public:
  FakeMemory(const Tensor &host, Counts &counts)
      : real_(host.clone()), poison_(host.dtype(), host.shape()), counts_(counts) {
    if (poison_.nbytes()) std::memset(poison_.raw(), 0xff, poison_.nbytes());
  }
  int device() const override { return 0; }
  void copyToHost(void *dst, const void *src, size_t bytes) const override {
    counts_.toHost += bytes;
    read(dst, src, bytes);
  }
  /// The bytes at `src` as the device would read them (not a transfer).
  void read(void *dst, const void *src, size_t bytes) const {
    size_t at = size_t(static_cast<const char *>(src) - static_cast<const char *>(poison_.raw()));
    if (at + bytes > real_.nbytes()) throw std::logic_error("read outside the fake device memory");
    std::memcpy(dst, static_cast<const char *>(real_.raw()) + at, bytes);
  }
  void *raw() { return poison_.raw(); }

private:
  Tensor real_, poison_;
  Counts &counts_;
};

Tensor toFakeDevice(const Tensor &host, Counts &counts) {
  auto m = std::make_shared<FakeMemory>(host, counts);
  void *p = m->raw();
  return Tensor::onDevice(host.dtype(), host.shape(), p, std::move(m));
}

/// A device tensor's values, read "on the device" (no transfer counted).
Tensor onDeviceRead(const Tensor &t) {
  auto *m = dynamic_cast<FakeMemory *>(t.deviceMemory().get());
  if (!m) throw std::logic_error("not a fake device tensor");
  Tensor h(t.dtype(), t.shape());
  if (t.nbytes()) m->read(h.raw(), t.raw(), t.nbytes());
  return h;
}

/// A rank compute with device-resident values on the stand-in device: it
/// runs the CPU kernels on the real bytes, counts the host bytes of its
/// inputs that a device would upload and of the results it returns on the
/// host, and returns the `resident` results as device tensors.
class FakeDeviceCompute final : public RankCompute {
public:
  FakeDeviceCompute(const Model &model, const Executor &cpu) : model_(model), cpu_(cpu) {}
  std::map<std::string, Tensor> runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
                                         const std::set<std::string> &keep,
                                         std::map<std::string, std::vector<int64_t>> *shapes,
                                         ExecutionObserver *observer, const Executor::NodeHook *hook,
                                         const std::set<size_t> *, const std::set<std::string> *resident) override {
    std::set<std::string> read, onHost;
    for (size_t i : nodes) model_.nodes[i].forEachRead([&](const std::string &v) { read.insert(v); });
    for (auto &[name, t] : values) {
      if (!t.isDevice()) onHost.insert(name);
      if (t.isDevice()) {
        t = onDeviceRead(t);
        ++counts.deviceInputs;
        counts.deviceInputBytes += t.nbytes();
      } else if (read.count(name) && !model_.initializers.count(name)) {
        counts.toDevice += t.nbytes();
      }
    }
    auto out = cpu_.runNodes(nodes, std::move(values), keep, shapes, observer, hook);
    for (auto &[name, t] : out) {
      // As the CUDA executor: a value given on the host comes back there.
      if (onHost.count(name)) continue;
      if (resident && resident->count(name)) t = toFakeDevice(t, counts);
      else counts.toHost += t.nbytes();
    }
    return out;
  }
  std::string describe() const override { return "fake-device"; }
  bool deviceValues() const override { return true; }
  void backward(const Model &model, const std::vector<size_t> &nodes,
                const std::function<const Tensor *(const std::string &)> &value, const std::set<std::string> &requires,
                std::map<std::string, Tensor> &grads, const GradientHook *hook,
                const std::set<size_t> *hookNodes) override {
    std::map<std::string, Tensor> read; // forward values, read on the device
    auto onDevice = [&](const std::string &v) -> const Tensor * {
      const Tensor *t = value(v);
      if (!t || !t->isDevice()) return t;
      auto it = read.find(v);
      if (it == read.end()) it = read.emplace(v, onDeviceRead(*t)).first;
      return &it->second;
    };
    RankCompute::backward(model, nodes, onDevice, requires, grads, hook, hookNodes);
  }
  ValueTransfers valueTransfers() const override { return {counts.toDevice.load(), counts.toHost.load()}; }
  Counts counts;

private:
  const Model &model_;
  const Executor &cpu_;
};

std::string gpt2() { return std::string(HETPLAN_EXAMPLES) + "/gpt2-tiny.onnx"; }

hetplan::test::TwoStageLayout layout(const std::string &schedule) {
  hetplan::test::TwoStageLayout l;
  l.firstNodeOfStage1 = "h.1.ln_1";
  l.shares = {{2}, {2}};
  l.micro = 3;
  l.schedule = schedule;
  return l;
}

std::map<std::string, Tensor> tokens(const Model &m, int64_t batch, int64_t seq) {
  std::map<std::string, Tensor> inputs;
  std::mt19937 rng(5);
  for (const auto &in : m.inputs) {
    Tensor t(DType::Int64, {batch, seq});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = int64_t(rng() % 50);
    inputs[in.name] = t;
  }
  return inputs;
}

double maxDiff(const std::map<std::string, Tensor> &a, const std::map<std::string, Tensor> &b) {
  double d = 0;
  for (const auto &[name, x] : b) {
    const Tensor &y = a.at(name);
    if (x.numel() != y.numel() || x.dtype() != DType::Float32 || y.dtype() != DType::Float32) return INFINITY;
    for (int64_t i = 0; i < x.numel(); ++i) {
      double e = std::fabs(double(x.data<float>()[i]) - y.data<float>()[i]);
      if (!(e <= d)) d = std::isnan(e) ? INFINITY : e;
    }
  }
  return d;
}

} // namespace

// Two stages on the stand-in device: stage 0's activations go to stage 1
// without a host copy (ThreadComm hands device tensors over as they are)
// and the outputs are the CPU plan's.
TEST(PlanDeviceValues, InferenceActivationsStayOnTheDevice) {
  PlanExecutor exec(hetplan::test::twoStagePlan(gpt2(), layout("gpipe"), "infer"));
  auto inputs = tokens(exec.model(), 6, 8);
  auto want = exec.run(inputs);
  auto first = std::make_shared<FakeDeviceCompute>(exec.model(), exec.executor());
  auto second = std::make_shared<FakeDeviceCompute>(exec.model(), exec.executor());
  exec.setCompute(0, first);
  exec.setCompute(1, second);
  auto got = exec.run(inputs);
  EXPECT_EQ(maxDiff(got, want), 0);
  EXPECT_EQ(first->counts.toHost, 0u) << "stage 0's activations were copied to the host";
  EXPECT_GE(second->counts.deviceInputs, 3u) << "stage 1 did not receive device tensors";
  // What stage 1 uploads: the small values it recomputes (shapes, masks).
  EXPECT_LT(second->counts.toDevice, second->counts.deviceInputBytes) << "stage 1 uploaded its activations";
  EXPECT_GT(second->counts.toHost, 0u); // the graph outputs
}

// A CPU rank receiving from a device rank gets host tensors: the thread
// communicator copies them (the host-staged path of mixed jobs).
TEST(PlanDeviceValues, CpuRankReceivesHostCopies) {
  PlanExecutor exec(hetplan::test::twoStagePlan(gpt2(), layout("gpipe"), "infer"));
  auto inputs = tokens(exec.model(), 6, 8);
  auto want = exec.run(inputs);
  auto first = std::make_shared<FakeDeviceCompute>(exec.model(), exec.executor());
  exec.setCompute(0, first);
  auto got = exec.run(inputs);
  EXPECT_EQ(maxDiff(got, want), 0);
  EXPECT_GT(first->counts.toHost, 0u) << "the activations reached the CPU rank without a host copy";
}

// 1F1B training, with and without recomputation: stage 0 keeps its
// activations on the device for the send, the stash and BACKWARD (and,
// recomputing, for the FORWARD run again); losses and weights are the CPU
// plan's.
TEST(PlanDeviceValues, TrainingMatchesCpu) {
  for (bool recompute : {false, true}) {
    hetplan::test::TwoStageLayout l = layout("1f1b");
    l.recompute = {recompute, recompute};
    PlanExecutor exec(hetplan::test::twoStagePlan(gpt2(), l));
    auto inputs = tokens(exec.model(), 6, 8);
    Tensor labels = hetplan::test::cyclicLabels(exec.model(), inputs);
    PlanExecutor::TrainOptions options;
    std::vector<PlanExecutor::RankTrainState> cpu, dev;
    double cpuLoss[2], devLoss[2];
    for (int step = 0; step < 2; ++step) cpuLoss[step] = exec.train(inputs, labels, cpu, options);
    auto first = std::make_shared<FakeDeviceCompute>(exec.model(), exec.executor());
    auto second = std::make_shared<FakeDeviceCompute>(exec.model(), exec.executor());
    exec.setCompute(0, first);
    exec.setCompute(1, second);
    for (int step = 0; step < 2; ++step) devLoss[step] = exec.train(inputs, labels, dev, options);
    for (int step = 0; step < 2; ++step) EXPECT_EQ(devLoss[step], cpuLoss[step]) << "recompute " << recompute;
    EXPECT_EQ(maxDiff(exec.collectParameters(dev), exec.collectParameters(cpu)), 0) << "recompute " << recompute;
    EXPECT_EQ(first->counts.toHost, 0u) << "stage 0 copied forward values to the host, recompute " << recompute;
    EXPECT_GE(second->counts.deviceInputs, 6u) << "recompute " << recompute;
  }
}
