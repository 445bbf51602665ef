//===- PlanFixtures.h - small plans and helpers for runtime tests -*- C++ -*-===//
#ifndef HETPLAN_TEST_UNIT_PLANFIXTURES_H
#define HETPLAN_TEST_UNIT_PLANFIXTURES_H

#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanExecutor.h"
#include "hetplan/runtime/PlanFile.h"

#include <functional>
#include <string>

namespace hetplan::test {

/// The message of what `f` throws, "" when it does not.
inline std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

/// A one-rank plan of the model at `path` on a `deviceType` (mode infer or
/// train, `batch` samples, one micro-batch): what the plan executor runs,
/// without the compiler.
inline plan::Plan oneRankPlan(const std::string &path, const std::string &mode, int64_t batch,
                              const std::string &deviceType = "A100-SXM-80GB", const std::string &dtype = "fp32") {
  runtime::Model m = runtime::loadModel(path);
  plan::Plan p;
  p.set_schema_version(runtime::kPlanSchemaVersion);
  p.mutable_model()->set_path(path);
  p.mutable_model()->set_sha256(runtime::fileSha256(path));
  for (const auto &n : m.nodes) p.mutable_model()->add_node_names(n.name);
  auto *layer = p.mutable_model()->add_layers();
  layer->set_first_node(0);
  layer->set_last_node(uint32_t(m.nodes.size() - 1));
  auto *d = p.mutable_cluster()->add_devices();
  d->set_rank(0);
  d->set_type(deviceType);
  p.mutable_settings()->set_mode(mode);
  p.mutable_settings()->set_dtype(dtype);
  p.mutable_settings()->set_global_batch(batch);
  p.mutable_settings()->set_micro_batches(1);
  return runtime::PlanExecutor::singleRankPlan(p);
}

} // namespace hetplan::test

#endif
