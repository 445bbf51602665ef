//===- AnnotateCosts.cpp - the het-annotate-costs pass --------------------===//
//
// Attaches each top-level node's forward cost (het.cost) and, per device
// type, its time (het.time); see Passes.td and docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/cost/CostModel.h"
#include "passes/cost/OpCosts.h"

#include "llvm/ADT/StringMap.h"

#include <cstdio>
#include <cstdlib>

using namespace mlir;

namespace hetplan::het {

#define GEN_PASS_DEF_HETANNOTATECOSTS
#include "passes/Passes.h.inc"

namespace {

using cost::DType;

struct AnnotateCostsPass : impl::HetAnnotateCostsBase<AnnotateCostsPass> {
  using HetAnnotateCostsBase::HetAnnotateCostsBase;
  const cluster::Stack *softwareStack = nullptr;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto graphs = llvm::to_vector(module.getOps<GraphOp>());
    Operation *anchor = graphs.empty() ? module.getOperation() : graphs.front().getOperation();

    std::optional<DType> runType;
    if (dtype != "auto") {
      runType = cluster::parseDType(dtype);
      if (!runType) {
        anchor->emitError() << "het-annotate-costs: unknown dtype '" << dtype
                            << "' (expected fp32, tf32, fp16, bf16, int8 or auto)";
        return signalPassFailure();
      }
    }
    if (samples < 0) {
      anchor->emitError() << "het-annotate-costs: samples must be >= 0";
      return signalPassFailure();
    }

    const cluster::DeviceCatalog &catalog = cluster::DeviceCatalog::builtin();
    std::vector<const cluster::DeviceType *> types;
    for (const std::string &name : devices) {
      auto type = catalog.lookup(name);
      if (!type) {
        anchor->emitError() << "het-annotate-costs: " << llvm::toString(type.takeError());
        return signalPassFailure();
      }
      types.push_back(*type);
    }
    auto stackFound = catalog.lookupStack(stack);
    if (!stackFound) {
      anchor->emitError() << "het-annotate-costs: " << llvm::toString(stackFound.takeError());
      return signalPassFailure();
    }
    softwareStack = *stackFound;

    std::vector<cost::Profile> loaded;
    std::vector<std::string> loadedFrom;
    for (const std::string &path : profiles) {
      auto profile = cost::Profile::load(path);
      if (!profile) {
        anchor->emitError() << "het-annotate-costs: " << llvm::toString(profile.takeError());
        return signalPassFailure();
      }
      if (auto known = catalog.lookup(profile->device); !known) {
        anchor->emitError() << "het-annotate-costs: " << path << ": "
                            << llvm::toString(known.takeError());
        return signalPassFailure();
      }
      loaded.push_back(std::move(*profile));
      loadedFrom.push_back(path);
    }

    for (GraphOp graph : graphs)
      if (failed(annotate(graph, runType, types, loaded, loadedFrom)))
        return signalPassFailure();
  }

  LogicalResult annotate(GraphOp graph, std::optional<DType> runType,
                         ArrayRef<const cluster::DeviceType *> types,
                         ArrayRef<cost::Profile> loaded, ArrayRef<std::string> loadedFrom) {
    MLIRContext *ctx = &getContext();
    cost::GraphInfo info(graph, samples);
    if (auto bad = info.findNonStatic())
      return bad->first->emitError() << bad->second;
    DType type = runType.value_or(cost::graphDType(info));

    std::vector<cost::Profile> applicable;
    for (auto [profile, path] : llvm::zip(loaded, loadedFrom)) {
      if (profile.dtype != type) {
        graph.emitWarning() << "profile " << path << " was measured in "
                            << cluster::dtypeName(profile.dtype) << ", the model is priced in "
                            << cluster::dtypeName(type) << ": ignored";
        continue;
      }
      applicable.push_back(profile);
    }

    // Six significant digits: what the IR printer shows in decimal.
    auto f64 = [&](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%.5e", v);
      return FloatAttr::get(Float64Type::get(ctx), std::strtod(text, nullptr));
    };
    auto i64 = [&](int64_t v) { return IntegerAttr::get(IntegerType::get(ctx, 64), v); };
    double n = double(info.samples);
    double totalFlops = 0;
    std::vector<double> totalTime(types.size(), 0);
    llvm::StringMap<int> estimated, estimatedBodies;
    for (auto [index, node] : llvm::enumerate(info.nodes)) {
      cost::OpCost c = cost::computeOpCost(node, info, type);
      if (!c.note.empty())
        node.emitWarning() << "node " << cost::describeNode(node, int(index)) << ": "
                           << c.note;
      if (c.estimated)
        ++(node->getNumRegions() ? estimatedBodies : estimated)[c.opType];
      totalFlops += c.flops(n);
      SmallVector<NamedAttribute> fields = {
          {StringAttr::get(ctx, "flops"), f64(c.flops(n))},
          {StringAttr::get(ctx, "bytes"), f64(c.bytesPerSample * n)},
          {StringAttr::get(ctx, "weight_bytes"), f64(c.weightBytes)},
          {StringAttr::get(ctx, "flops_per_sample"), f64(c.flopsPerSample)},
          {StringAttr::get(ctx, "bytes_per_sample"), f64(c.bytesPerSample)}};
      if (c.matrixEngine)
        fields.push_back({StringAttr::get(ctx, "matrix"), UnitAttr::get(ctx)});
      node->setAttr("het.cost", DictionaryAttr::get(ctx, fields));
      if (types.empty())
        continue;
      SmallVector<NamedAttribute> times;
      for (auto [k, device] : llvm::enumerate(types)) {
        double t = cost::opTime(c, n, *device, type, cost::efficiency(*device, *softwareStack),
                                applicable);
        totalTime[k] += t;
        times.push_back({StringAttr::get(ctx, device->name), f64(t)});
      }
      node->setAttr("het.time", DictionaryAttr::get(ctx, times));
    }
    if (!estimated.empty()) {
      InFlightDiagnostic d = graph.emitWarning() << "no cost rule for";
      for (auto &e : estimated)
        d << " " << e.getKey() << " x" << e.getValue();
      d << "; priced as one FLOP per output element";
    }
    if (!estimatedBodies.empty()) {
      InFlightDiagnostic d = graph.emitWarning() << "subgraph costs are estimates for";
      for (auto &e : estimatedBodies)
        d << " " << e.getKey() << " x" << e.getValue();
      d << " (trip count or body shapes unknown: bodies counted once)";
    }

    int64_t params = 0;
    for (const cost::Parameter &p : info.parameters)
      params += p.elements;
    graph->setAttr("het.total_flops", f64(totalFlops));
    graph->setAttr("het.total_flops_per_sample", f64(totalFlops / std::max(n, 1.0)));
    graph->setAttr("het.total_params", i64(params));
    graph->setAttr("het.samples", i64(info.samples));
    if (!types.empty()) {
      SmallVector<NamedAttribute> times;
      for (auto [k, device] : llvm::enumerate(types))
        times.push_back({StringAttr::get(ctx, device->name), f64(totalTime[k])});
      graph->setAttr("het.total_time", DictionaryAttr::get(ctx, times));
    }
    return success();
  }
};

} // namespace
} // namespace hetplan::het
