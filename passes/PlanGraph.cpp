//===- PlanGraph.cpp - the het-plan pass ----------------------------------===//

#include "passes/Passes.h"
#include "passes/cluster/Cluster.h"
#include "passes/cost/ExtractModelCost.h"
#include "passes/planner/Planner.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace hetplan::het {

#define GEN_PASS_DEF_HETPLAN
#include "passes/Passes.h.inc"

namespace {

struct PlanPass : impl::HetPlanBase<PlanPass> {
  using HetPlanBase::HetPlanBase;

  LogicalResult readOptions(ModuleOp module, planner::Options &o) {
    if (clusterSpec.empty())
      return module.emitError("het-plan needs a cluster (cluster=4xA100-80G,12xT4)");
    if (batch <= 0)
      return module.emitError("het-plan: batch must be at least 1");
    o.globalBatch = batch;
    if (mode == "train")
      o.mode = cost::Mode::Train;
    else if (mode == "infer")
      o.mode = cost::Mode::Infer;
    else
      return module.emitError("het-plan: mode must be train or infer, not '") << mode << "'";
    auto d = cluster::parseDType(dtype);
    if (!d || *d == cluster::DType::INT8)
      return module.emitError("het-plan: dtype must be fp32, tf32, fp16 or bf16");
    o.dtype = *d;
    auto sched = planner::parseSchedule(schedule);
    if (!sched)
      return module.emitError("het-plan: ") << llvm::toString(sched.takeError());
    o.schedule = *sched;
    auto strat = planner::parseStrategy(strategy);
    if (!strat)
      return module.emitError("het-plan: ") << llvm::toString(strat.takeError());
    o.strategy = *strat;
    if (!pin.empty()) {
      auto p = planner::parsePin(pin);
      if (!p)
        return module.emitError(llvm::toString(p.takeError()));
      o.strategy = planner::Strategy::Pinned;
      o.pin = *p;
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    planner::Options options;
    if (failed(readOptions(module, options)))
      return signalPassFailure();
    auto cl = cluster::parseClusterSpec(clusterSpec, cluster::DeviceCatalog::builtin());
    if (!cl) {
      module.emitError(llvm::toString(cl.takeError()));
      return signalPassFailure();
    }
    for (auto graph : module.getOps<GraphOp>()) {
      cost::ExtractOptions extract;
      extract.dtype = options.dtype;
      extract.training = options.mode == cost::Mode::Train;
      extract.fusedAttention = cl->stack().fusedAttention;
      auto model = cost::extractModelCost(graph, extract);
      if (!model) {
        graph.emitError(llvm::toString(model.takeError()));
        return signalPassFailure();
      }
      auto plan = planner::makePlan(*model, *cl, options);
      if (!plan) {
        graph.emitError(llvm::toString(plan.takeError()));
        return signalPassFailure();
      }
      annotate(graph, *model, *cl, *plan);
    }
  }

  void annotate(GraphOp graph, const cost::ModelCost &model, const cluster::Cluster &cl,
                const planner::Plan &plan) {
    Builder b(graph.getContext());
    // Stage of every top-level node, from its layer's stage.
    std::vector<int> stageOfNode(model.nodeNames.size(), -1);
    for (auto [j, st] : llvm::enumerate(plan.stages))
      for (int l = st.firstLayer; l <= st.lastLayer; ++l)
        for (int n = model.layers[l].firstNode; n <= model.layers[l].lastNode; ++n)
          stageOfNode[n] = int(j);
    int index = 0;
    for (auto node : graph.getBody().front().getOps<NodeOp>()) {
      if (index < int(stageOfNode.size()) && stageOfNode[index] >= 0)
        node->setAttr("het.stage", b.getI64IntegerAttr(stageOfNode[index]));
      ++index;
    }
    SmallVector<Attribute> stages;
    for (const auto &st : plan.stages) {
      SmallVector<Attribute> workers;
      for (const auto &w : st.workers) {
        SmallVector<int64_t> ranks(w.ranks.begin(), w.ranks.end());
        workers.push_back(b.getDictionaryAttr({
            b.getNamedAttr("ranks", b.getDenseI64ArrayAttr(ranks)),
            b.getNamedAttr("type", b.getStringAttr(cl.devices[w.ranks[0]].type->name)),
            b.getNamedAttr("samples", b.getI64IntegerAttr(w.samples))}));
      }
      stages.push_back(b.getDictionaryAttr({
          b.getNamedAttr("first_layer", b.getI64IntegerAttr(st.firstLayer)),
          b.getNamedAttr("last_layer", b.getI64IntegerAttr(st.lastLayer)),
          b.getNamedAttr("tensor_parallel", b.getI64IntegerAttr(st.tensorParallel)),
          b.getNamedAttr("workers", b.getArrayAttr(workers)),
          b.getNamedAttr("forward_s", b.getF64FloatAttr(st.forwardSeconds)),
          b.getNamedAttr("backward_s", b.getF64FloatAttr(st.backwardSeconds)),
          b.getNamedAttr("allreduce_s", b.getF64FloatAttr(st.allReduceSeconds)),
          b.getNamedAttr("send_s", b.getF64FloatAttr(st.sendSeconds))}));
    }
    SmallVector<Attribute> memory;
    for (size_t r = 0; r < plan.memory.size(); ++r)
      if (plan.stageOfRank[r] >= 0)
        memory.push_back(b.getDictionaryAttr({
            b.getNamedAttr("rank", b.getI64IntegerAttr(int64_t(r))),
            b.getNamedAttr("peak_bytes", b.getI64IntegerAttr(int64_t(plan.memory[r].peak()))),
            b.getNamedAttr("capacity_bytes",
                           b.getI64IntegerAttr(int64_t(plan.memory[r].capacity)))}));
    graph->setAttr("het.plan",
                   b.getDictionaryAttr({
                       b.getNamedAttr("strategy", b.getStringAttr(planner::strategyName(plan.strategy))),
                       b.getNamedAttr("schedule", b.getStringAttr(planner::scheduleName(plan.schedule))),
                       b.getNamedAttr("micro_batches", b.getI64IntegerAttr(plan.microBatches)),
                       b.getNamedAttr("stages", b.getArrayAttr(stages)),
                       b.getNamedAttr("memory", b.getArrayAttr(memory)),
                       b.getNamedAttr("step_time_s", b.getF64FloatAttr(plan.stepSeconds)),
                       b.getNamedAttr("samples_per_s", b.getF64FloatAttr(plan.samplesPerSecond)),
                       b.getNamedAttr("bubble", b.getF64FloatAttr(plan.bubbleFraction)),
                       b.getNamedAttr("mfu", b.getF64FloatAttr(plan.modelFlopsUtilization)),
                   }));
  }
};

} // namespace
} // namespace hetplan::het
