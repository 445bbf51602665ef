//===- PlanSupport.h - helpers of the plan executor (internal) --*- C++ -*-===//
//
// What PlanExecutor.cpp, PlanParameters.cpp and the program interpreter
// (program/) share: row slices and concatenation, tensor-parallel index
// ranges, flat parameter ranges (ZeRO), the message tags of a step, and
// the op types the tensor-parallel code runs by name. Internal to hetplan_exec.
//
//===----------------------------------------------------------------------===//
#pragma once
#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/Tensor.h"
#include "ops/OpTable.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hetplan::runtime::planexec {

[[noreturn]] void fail(const std::string &msg);

/// The op type tensor parallelism splits by columns and rows (the plan's
/// COLUMN, ROW, GATHER and VOCAB nodes): the op table's one default-domain
/// op whose role is ops::TpRole::Product. Throws std::logic_error if the
/// table has none or several.
const char *tpProductOp();
/// Op types the tensor-parallel code checks and runs by name (not in the op
/// table yet).
inline constexpr const char kAddOp[] = "Add", kSplitOp[] = "Split", kReshapeOp[] = "Reshape",
                            kTransposeOp[] = "Transpose";

/// Rows [lo, lo + count) of dim 0, viewed (no copy).
Tensor sliceRows(const Tensor &t, int64_t lo, int64_t count);
/// Device pieces (device-resident values) are concatenated on the host.
Tensor concatRows(const std::vector<Tensor> &parts);
/// Writes rows [0, part.dim(0)) of `part` at row `at` of `dst`.
void putRows(Tensor &dst, int64_t at, const Tensor &part);

// ---- message tags of one step ----
constexpr int64_t kTagsPerMicroBatch = int64_t(1) << 20;
inline int64_t dataTag(uint32_t mb, size_t i) { return int64_t(mb) * kTagsPerMicroBatch + 2 * int64_t(i); }
inline int64_t shapeTag(uint32_t mb, size_t i) { return int64_t(mb) * kTagsPerMicroBatch + 2 * int64_t(i) + 1; }

// Training traffic: gradients of the values a stage received (and, with
// the activations, which of them carry gradients), then the gradient sums.
// All below 2^31 (MPI's usual tag bound) for micro-batches < 2^16.
constexpr int64_t kTrainTagBase = int64_t(1) << 30;
constexpr int64_t kTrainTagsPerMicroBatch = 8192;
inline int64_t gradTag(uint32_t mb, size_t i) {
  return kTrainTagBase + int64_t(mb) * kTrainTagsPerMicroBatch + int64_t(i);
}
inline int64_t flagTag(uint32_t mb) {
  return kTrainTagBase + int64_t(mb) * kTrainTagsPerMicroBatch + kTrainTagsPerMicroBatch - 1;
}
constexpr int64_t kSumTagBase = (int64_t(1) << 30) + (int64_t(1) << 29);
inline int64_t sumTag(size_t group) { return kSumTagBase + 2 * int64_t(group); }
// ZeRO's parameter all-gathers: per (micro-batch, phase: 0 FORWARD,
// 1 BACKWARD, 2 after OPTIMIZER_STEP, group); checkTraining bounds them.
constexpr int64_t kZeroTagBase = kSumTagBase + (int64_t(1) << 28);
inline int64_t zeroTag(uint32_t mb, int phase, size_t group, size_t groups) {
  return kZeroTagBase + (int64_t(mb) * 3 + phase) * int64_t(groups) + int64_t(group);
}
// A sum handed to a worker's other tensor-parallel ranks (sumFollowers_):
// between the sums (below 2^27 above kSumTagBase) and ZeRO's gathers.
inline int64_t followTag(size_t group) { return kSumTagBase + (int64_t(1) << 27) + int64_t(group); }

// Tensor-parallel traffic inside a worker: per (micro-batch, node), the
// forward sum or all-gather (phase 0), the backward sum (2), a vocab-parallel
// loss's max (4) and sums (6); a group sum uses its tag and the next. Above
// `hetplan run`'s MPI output gather (2^29), below the training tags (2^30).
constexpr int64_t kTpTagBase = (int64_t(1) << 29) + (int64_t(1) << 20);
int64_t tpTag(uint32_t mb, size_t node, size_t nodes, int phase);

// ---- tensor-parallel index ranges ----
using Ranges = std::vector<std::pair<int64_t, int64_t>>;
/// The index ranges of `axis` in `t`, back to back (a copy).
Tensor slices(const Tensor &t, int axis, const Ranges &ranges);
/// Writes `part` (the ranges back to back) into `dst`'s ranges of `axis`.
void putSlices(Tensor &dst, const Tensor &part, int axis, const Ranges &ranges);
/// A tensor of `shape` that is zero except for `part` in `ranges` of `axis`.
Tensor zerosWith(const std::vector<int64_t> &shape, const Tensor &part, int axis, const Ranges &ranges);
/// What tensor-parallel rank k of t holds of an axis of size n: the k-th
/// 1/t of each of `segments` equal parts (one part: a contiguous 1/t).
Ranges shardRanges(int64_t n, int64_t segments, int64_t k, int64_t t);

// ---- flat parameter ranges (ZeRO) ----
/// Elements [lo, hi) of the tensors `names` (in `values`; offsets[i]: where
/// names[i] starts in the list laid end to end) as one float32 tensor; a
/// missing tensor reads as zeros (a gradient no micro-batch reached).
Tensor flatRange(const std::map<std::string, Tensor> &values, const std::vector<std::string> &names,
                 const std::vector<int64_t> &offsets, int64_t lo, int64_t hi);
/// Writes `flat`, elements [lo, lo + flat.numel()) of that list, into the
/// tensors of `values`; a missing one is made (zeros) with `shapes`' shape.
void scatterFlat(const Tensor &flat, int64_t lo, const std::vector<std::string> &names,
                 const std::vector<int64_t> &offsets, std::map<std::string, Tensor> &values,
                 const std::map<std::string, Tensor> &shapes);

} // namespace hetplan::runtime::planexec
