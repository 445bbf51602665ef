//===- Planner.cpp - split layers and batches across a mixed cluster ------===//

//
// The planner's public entry points: option names, the checks every caller
// passes, and the search (Search.h; each of its decisions in its own file,
// docs/planner.md "Where the search lives").
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Planner.h"
#include "passes/planner/Search.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <string>

namespace hetplan::planner {

const char *const kTensorParallelRule =
    "tensor parallelism stays within one node: a tensor-parallel worker's devices share a "
    "node (its all-reduces run every layer, over the node's links), while stages and "
    "data-parallel workers span nodes";

const char *strategyName(Strategy s) {
  switch (s) {
  case Strategy::Hetplan: return "hetplan";
  case Strategy::DataParallel: return "dp-even";
  case Strategy::EvenPipeline: return "pp-even";
  case Strategy::Homogeneous: return "homogeneous";
  case Strategy::Pinned: return "pinned";
  }
  return "?";
}

const char *scheduleName(Schedule s) {
  return s == Schedule::OneFOneB ? "1f1b" : "gpipe";
}

llvm::Expected<Strategy> parseStrategy(llvm::StringRef name) {
  for (Strategy s : {Strategy::Hetplan, Strategy::DataParallel, Strategy::EvenPipeline,
                     Strategy::Homogeneous})
    if (name == strategyName(s))
      return s;
  return llvm::createStringError("--strategy must be hetplan, dp-even, pp-even or "
                                 "homogeneous, not '" + name.str() + "'");
}

llvm::Expected<Schedule> parseSchedule(llvm::StringRef name) {
  for (Schedule s : {Schedule::OneFOneB, Schedule::GPipe})
    if (name == scheduleName(s))
      return s;
  return llvm::createStringError("--schedule must be 1f1b or gpipe, not '" + name.str() + "'");
}

llvm::Expected<Pin> parsePin(llvm::StringRef text) {
  Pin pin;
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    auto [key, value] = part.trim().split('=');
    int v;
    if (value.getAsInteger(10, v) || v <= 0)
      return llvm::createStringError("--pin: '" + part.str() +
                                     "' needs a positive whole number (e.g. pp=4,dp=4,mb=8)");
    if (key == "pp") pin.pp = v;
    else if (key == "dp") pin.dp = v;
    else if (key == "mb") pin.mb = v;
    else if (key == "tp") pin.tp = v;
    else if (key == "mbs") pin.mbs = v;
    else
      return llvm::createStringError("--pin: unknown key '" + key.str() +
                                     "' (known: pp, dp, mb (micro-batch count), mbs (micro-batch "
                                     "size), tp)");
  }
  if (!pin.pp && !pin.dp && !pin.mb && !pin.tp && !pin.mbs)
    return llvm::createStringError("--pin: give at least one of pp, dp, mb, mbs, tp");
  return pin;
}

/// The batch every entry point checks first (the CLI's check is not the
/// only one: the Python package and the C++ API call in here directly).
static llvm::Error checkBatch(int64_t batch) {
  if (batch <= 0)
    return llvm::createStringError("the batch must be at least 1");
  if (batch > kMaxSamples)
    return llvm::createStringError(llvm::formatv(
        "a batch of {0} is too large (at most {1} samples per step)", batch, kMaxSamples));
  return llvm::Error::success();
}

llvm::Expected<Plan> evaluateLayout(const cost::ModelCost &model,
                                    const cluster::Cluster &cluster,
                                    const Options &options, const Layout &layout) {
  if (auto err = checkBatch(options.globalBatch))
    return std::move(err);
  if (layout.microBatches < 1 || layout.microBatches > options.globalBatch)
    return llvm::createStringError(llvm::formatv(
        "{0} micro-batches for a batch of {1}", layout.microBatches, options.globalBatch));
  if (options.globalBatch % std::max(1, layout.microBatches))
    return llvm::createStringError("micro-batches must divide the batch");
  detail::Search search(model, cluster, options);
  return search.evaluate(layout);
}

llvm::Expected<Plan> makePlan(const cost::ModelCost &model,
                              const cluster::Cluster &cluster,
                              const Options &options) {
  if (auto err = checkBatch(options.globalBatch))
    return std::move(err);
  if (options.strategy == Strategy::Pinned && options.pin.mbs) {
    // The micro-batch size, as Megatron and DeepSpeed users give it, is
    // the count the search takes: mb = batch / mbs.
    const Pin &pin = options.pin;
    if (options.globalBatch % pin.mbs)
      return llvm::createStringError(llvm::formatv(
          "--pin mbs={0} (micro-batch size) does not divide the batch of {1}", pin.mbs,
          options.globalBatch));
    int count = int(options.globalBatch / pin.mbs);
    if (pin.mb && pin.mb != count)
      return llvm::createStringError(llvm::formatv(
          "--pin mb={0} (micro-batch count) and mbs={1} (micro-batch size) make {2} samples, "
          "not the batch of {3}",
          pin.mb, pin.mbs, int64_t(pin.mb) * pin.mbs, options.globalBatch));
    Options resolved = options;
    resolved.pin.mb = count;
    resolved.pin.mbs = 0;
    return makePlan(model, cluster, resolved);
  }
  if (!options.splitBatch && options.strategy == Strategy::Pinned &&
      (options.pin.dp > 1 || options.pin.mb > 1))
    return llvm::createStringError(
        "--pin dp or mb above 1 splits the batch, which this model does not allow");
  if (options.strategy == Strategy::Pinned) {
    const Pin &pin = options.pin;
    if (pin.mb && options.globalBatch % pin.mb)
      return llvm::createStringError(
          llvm::formatv("--pin mb={0} does not divide the batch of {1}", pin.mb,
                        options.globalBatch));
    if (pin.pp > int(model.layers.size()))
      return llvm::createStringError(
          llvm::formatv("--pin pp={0} asks for more stages than the model's {1} layers",
                        pin.pp, model.layers.size()));
    if (pin.tp > 1) {
      std::map<std::pair<int, std::string>, int> perNode;  // (node, type) -> devices
      int most = 0;
      for (const auto &d : cluster.devices)
        most = std::max(most, ++perNode[{d.node, d.type->name}]);
      if (most < pin.tp)
        return llvm::createStringError(llvm::formatv(
            "--pin tp={0}: no node has {0} devices of one type (at most {1}); {2}", pin.tp,
            most, kTensorParallelRule));
    }
    int64_t need = int64_t(std::max(pin.pp, 1)) * std::max(pin.dp, 1) * std::max(pin.tp, 1);
    if (need > int64_t(cluster.devices.size()))
      return llvm::createStringError(
          llvm::formatv("--pin needs {0} devices (pp x dp x tp) but the cluster has {1}",
                        need, cluster.devices.size()));
  }
  detail::Search search(model, cluster, options);
  return search.run();
}

} // namespace hetplan::planner
