//===- FuzzModel.h - limits shared by the model fuzz targets ----*- C++ -*-===//
//
// The model targets load (and run) arbitrary ONNX bytes. Two kinds of input
// are legitimate but would make a fuzzer report an out-of-memory or a
// timeout rather than a bug, so they are refused before anything runs:
// models whose declared sizes exceed a budget, and Loop nodes (ONNX lets a
// Loop run until a kernel fails, with no iteration limit). Every tensor the
// runtime allocates is capped too (setMaxTensorBytes): a size computed at
// run time (ConstantOfShape, Expand, Tile, Resize...) beyond it is a
// one-line error, as it would be in an embedder that sets the same limit.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Model.h"

#include <cstdint>

namespace hetplan::fuzz {

/// What the model targets' LLVMFuzzerInitialize does: caps tensor
/// allocations (kMaxTensorBytes) and kernel threads once, before the first
/// input, and silences protobuf's per-parse logging.
void initModelTarget();

/// External data resolves below a folder that does not exist.
inline constexpr const char *kModelPath = "/nonexistent-hetplan-fuzz/model.onnx";
/// Largest tensor any kernel may allocate while fuzzing. Small: the bugs
/// are in shapes, attributes and indices, not in sizes, and under ASan a
/// kernel's time grows with its elements (1 MiB and 2^16 declared elements
/// run the target about 3x faster than 4 MiB and 2^18).
inline constexpr size_t kMaxTensorBytes = size_t(1) << 20;
/// Largest declared element count of one value; largest node count.
inline constexpr int64_t kMaxDeclaredElements = int64_t(1) << 16;
inline constexpr size_t kMaxNodes = 256;

/// Reads the model (parseModel; throws its one-line errors) and says
/// whether it is within the budget below.
bool loadWithinBudget(const uint8_t *data, size_t size, runtime::Model &model);
/// False for a model the targets do not run: over the budget, or with a
/// Loop anywhere (subgraphs included).
bool withinBudget(const runtime::Model &model);
/// Small deterministic inputs for every graph input: declared dims, unknown
/// ones 2 (nothing above kMaxDeclaredElements elements); false when an
/// input has a type the runtime has no values for.
bool makeInputs(const runtime::Model &model, std::map<std::string, runtime::Tensor> &inputs);
/// A tensor of `shape` holding small deterministic values (integers
/// 0..levels-1, floats -0.5 up in steps of 0.25): valid as indices into most
/// dims. makeInputs' values (levels 5).
runtime::Tensor smallTensor(runtime::DType dtype, const std::vector<int64_t> &shape, int levels = 5);

} // namespace hetplan::fuzz
