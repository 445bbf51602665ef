//===- CudaRankCompute.cpp - a plan rank's stage on the CUDA executor -----===//
//
// The plan executor hands a CUDA rank's FORWARDs, BACKWARDs and optimizer
// updates here (RankCompute). FORWARD values stay on the device
// (deviceValues(): device-resident values, docs/gpu.md); parameters,
// gradients and optimizer state cross as host tensors.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/CudaBackend.h"

#include "CudaTraining.h"

#include <cuda_runtime_api.h>

namespace hetplan::runtime {

namespace {
class CudaRankCompute final : public RankCompute {
public:
  CudaRankCompute(const Model &model, int device) : exec_(model, device), device_(device) {}
  std::map<std::string, Tensor> runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
                                         const std::set<std::string> &keep,
                                         std::map<std::string, std::vector<int64_t>> *shapes,
                                         ExecutionObserver *observer, const Executor::NodeHook *hook,
                                         const std::set<size_t> *hookNodes,
                                         const std::set<std::string> *resident) override {
    return exec_.runNodes(nodes, std::move(values), keep, shapes, observer, hook, hookNodes, resident);
  }
  std::string describe() const override { return "cuda:" + std::to_string(device_); }
  bool deviceValues() const override { return true; }
  ValueTransfers valueTransfers() const override { return exec_.valueTransfers(); }
  void backward(const Model &model, const std::vector<size_t> &nodes,
                const std::function<const Tensor *(const std::string &)> &value, const std::set<std::string> &requires,
                std::map<std::string, Tensor> &grads, const GradientHook *hook,
                const std::set<size_t> *hookNodes) override {
    cudart::backward(exec_.device(), model, nodes, value, requires, grads, hook, hookNodes);
  }
  void optimizerUpdate(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                       const OptimizerSettings &settings,
                       const std::vector<std::pair<int64_t, int64_t>> &pieces) override {
    cudart::optimizerUpdate(exec_.device(), param, grad, m, v, step, settings, pieces);
  }
  CudaExecutor &executor() { return exec_; }

private:
  CudaExecutor exec_;
  int device_;
};
} // namespace

std::shared_ptr<RankCompute> makeCudaRankCompute(const Model &model, int device, bool prepare,
                                                 const std::string &precision, const std::vector<size_t> *stage,
                                                 std::vector<std::string> *problems) {
  auto c = std::make_shared<CudaRankCompute>(model, device);
  if (stage) {
    std::vector<std::string> found = c->executor().check(*stage);
    if (!found.empty()) {
      if (problems) *problems = std::move(found);
      return nullptr;
    }
  }
  c->executor().setPrecision(precision);
  if (stage) c->executor().setStage(*stage);
  if (prepare) c->executor().prepare(); // uploads the weights before the step's clock starts
  return c;
}

LocalDevices cudaLocalDevices() {
  LocalDevices local;
  local.cudaBuilt = true;
#if defined(HETPLAN_HAVE_NCCL_COMMUNICATOR) && HETPLAN_HAVE_NCCL_COMMUNICATOR
  local.ncclBuilt = true;
#endif
  if (cudaDeviceAvailable(&local.whyNoCuda)) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess) local.cudaDevices = count;
  }
  return local;
}

} // namespace hetplan::runtime
