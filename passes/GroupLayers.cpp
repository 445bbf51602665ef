//===- GroupLayers.cpp - the het-group-layers pass ------------------------===//
//
// Cuts each graph into layers (passes/cost/LayerGrouping.cpp) and records
// them: het.layer on each top-level node, het.layers on the graph.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/cost/LayerGrouping.h"

using namespace mlir;

namespace hetplan::het {

#define GEN_PASS_DEF_HETGROUPLAYERS
#include "passes/Passes.h.inc"

namespace {

struct GroupLayersPass : impl::HetGroupLayersBase<GroupLayersPass> {
  using HetGroupLayersBase::HetGroupLayersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    if (maxLayers < 0) {
      module.emitError() << "het-group-layers: max-layers must be >= 0 (0: automatic)";
      return signalPassFailure();
    }
    auto i64 = [&](int64_t v) { return IntegerAttr::get(IntegerType::get(ctx, 64), v); };
    for (GraphOp graph : module.getOps<GraphOp>()) {
      cost::GraphInfo info(graph);
      std::vector<cost::LayerRange> layers =
          cost::groupLayers(info, {/*maxLayers=*/int(maxLayers)});
      SmallVector<Attribute> entries;
      for (auto [index, layer] : llvm::enumerate(layers)) {
        for (int i = layer.first; i <= layer.last; ++i)
          info.nodes[i]->setAttr("het.layer", i64(int64_t(index)));
        entries.push_back(DictionaryAttr::get(
            ctx, {{StringAttr::get(ctx, "name"), StringAttr::get(ctx, layer.name)},
                  {StringAttr::get(ctx, "first"), i64(layer.first)},
                  {StringAttr::get(ctx, "last"), i64(layer.last)}}));
      }
      graph->setAttr("het.layers", ArrayAttr::get(ctx, entries));
    }
  }
};

} // namespace
} // namespace hetplan::het
