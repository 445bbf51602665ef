//===- RunPlanCuda.cpp - a plan's GPU ranks on the CUDA executor ----------===//
#include "hetplan/runtime/RunPlan.h"
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
#include "hetplan/runtime/CudaBackend.h"
#endif

namespace hetplan::runtime {

void placeCudaRanks(PlanExecutor &exec, Placement &placement, int rank, bool uploadWeights,
                    const std::function<void(int, const std::vector<std::string> &)> &refused) {
  for (int r = 0; r < exec.ranks(); ++r) {
    if ((rank >= 0 && r != rank) || !placement.cuda[size_t(r)]) continue;
#if defined(HETPLAN_HAVE_CUDA_BACKEND) && HETPLAN_HAVE_CUDA_BACKEND
    const auto &st = exec.plan().stages(int(exec.plan().ranks(r).stage()));
    std::vector<size_t> nodes;
    for (size_t i = st.first_node(); i <= st.last_node(); ++i) nodes.push_back(i);
    std::vector<std::string> problems;
    auto compute = makeCudaRankCompute(exec.model(), placement.device[size_t(r)], uploadWeights,
                                       exec.plan().settings().dtype(), &nodes, &problems);
    if (!compute) {
      refused(r, problems);
      placement.cuda[size_t(r)] = false;
      placement.device[size_t(r)] = -1;
      continue;
    }
    exec.setCompute(r, std::move(compute));
#else
    (void)uploadWeights, (void)refused;
#endif
  }
}

} // namespace hetplan::runtime
