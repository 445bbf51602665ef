//===- SyntheticModel.h - layer costs and clusters for planner tests -*- C++ -*-===//
#ifndef HETPLAN_TEST_UNIT_SYNTHETICMODEL_H
#define HETPLAN_TEST_UNIT_SYNTHETICMODEL_H

#include "passes/cluster/Cluster.h"
#include "passes/cost/CostModel.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <string>

namespace hetplan::test {

/// `layers` identical transformer-like layers of one big MatMul each:
/// `params` parameters, `activationBytes` kept for the backward pass per
/// sample, a quarter of that crossing to the next layer (and entering the
/// first).
inline cost::ModelCost uniformModel(int layers, double flopsPerSample, int64_t params,
                                    double activationBytes) {
  cost::ModelCost m;
  m.graphName = "synthetic";
  for (int i = 0; i < layers; ++i) {
    cost::LayerCost l;
    l.name = "layer" + std::to_string(i);
    l.firstNode = i;
    l.lastNode = i;
    cost::OpCost op;
    op.name = l.name + ".matmul";
    op.opType = "MatMul";
    op.flopsPerSample = flopsPerSample;
    op.bytesPerSample = activationBytes;
    op.weightBytes = double(params) * 2;
    op.matrixEngine = true;
    l.ops.push_back(op);
    l.parameters = params;
    l.parameterBytes = double(params) * 2;
    l.stashBytesPerSample = activationBytes;
    l.outputBytesPerSample = activationBytes / 4;
    m.layers.push_back(l);
    m.nodeNames.push_back(l.name);
    m.parameters += params;
  }
  m.inputBytesPerSample = activationBytes / 4;
  return m;
}

inline cluster::Cluster clusterOf(llvm::StringRef spec) {
  auto c = cluster::Cluster::fromSpec(spec, cluster::DeviceCatalog::builtin());
  EXPECT_TRUE(bool(c)) << llvm::toString(c.takeError());
  return std::move(*c);
}

} // namespace hetplan::test

#endif
