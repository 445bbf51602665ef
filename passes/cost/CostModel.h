//===- CostModel.h - what each op costs on each device type -----*- C++ -*-===//
//
// The contract between the cost annotation / layer grouping passes and the
// planner: per-op costs per sample, grouped into layers (cut points), and the
// roofline that turns a cost into a time on a device type. Equations and
// their sources are in docs/cost-model.md.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_COST_COSTMODEL_H
#define HETPLAN_PASSES_COST_COSTMODEL_H

#include "passes/cluster/DeviceCatalog.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hetplan::cost {

enum class Mode { Train, Infer };

/// The numeric format the model runs in (cluster::DType: fp32, tf32, fp16,
/// bf16) selects the device's peak rate and the bytes per element.
using cluster::DType;
/// Bytes of one element in this format (TF32 is stored as fp32, int8 as 1).
int dtypeBytes(DType d);

/// The forward cost of one op. Per-sample figures scale with the samples
/// processed; weight bytes are read once per call whatever the batch.
struct OpCost {
  std::string name;             // ONNX node name or op type
  std::string opType;
  double flopsPerSample = 0;    // multiply-add = 2 FLOPs
  double bytesPerSample = 0;    // activations read + written
  double weightBytes = 0;       // parameters read (once per call)
  bool matrixEngine = false;    // runs on tensor cores (MatMul/Gemm/Conv/attention)
};

/// A contiguous range of top-level nodes that the planner may place as a unit
/// (a transformer block, a ResNet stage, ...).
struct LayerCost {
  std::string name;
  int firstNode = 0;            // index among the graph's top-level nodes
  int lastNode = 0;             // inclusive
  std::vector<OpCost> ops;
  int64_t parameters = 0;       // elements of the weights the layer owns
  double parameterBytes = 0;    // at the model dtype
  double stashBytesPerSample = 0;   // activations kept for backward
  double outputBytesPerSample = 0;  // what crosses the cut after this layer
  /// Tensor parallelism (Megatron style): the share of FLOPs it splits and
  /// the activation bytes all-reduced per sample when it does (0 = none).
  double tensorParallelFraction = 0;
  double tensorParallelAllReduceBytesPerSample = 0;
  /// Inference with a KV cache: bytes per sample of cached keys and values.
  double kvCacheBytesPerSample = 0;

  double flopsPerSample() const;
};

struct ModelCost {
  std::string graphName;
  std::vector<std::string> nodeNames;  // top-level nodes in order
  std::vector<LayerCost> layers;
  double inputBytesPerSample = 0;      // graph inputs, per sample
  int64_t parameters = 0;
  double forwardFlopsPerSample() const;
};

/// Per-device efficiency: the share of the datasheet peak a real kernel
/// reaches. Defaults documented in docs/cost-model.md; a profile replaces
/// the roofline with measured times.
struct Efficiency {
  double matrix = 0.6;     // MatMul/Conv on tensor cores or SIMD FMA
  double vector = 0.3;     // elementwise/reductions: of peak FLOP/s
  double memory = 0.8;     // of peak memory bandwidth
  double launchSeconds = 5e-6;  // fixed cost per op (kernel launch)
};

/// Roofline time of `op` processing `samples` samples on `device`.
double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype, const Efficiency &eff = {});

/// Forward time of a layer for `samples` samples; backward is taken as twice
/// the forward (two matrix products per forward one), see docs.
double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff = {});

} // namespace hetplan::cost

#endif
