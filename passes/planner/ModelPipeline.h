//===- ModelPipeline.h - from a model file to its layer costs ---*- C++ -*-===//
//
// What `hetplan compile` does before it searches: import the model (or parse
// het IR), bind the batch to one sample, the sequence and any input shapes,
// run het-bind-shapes and het-group-layers, and extract the layer costs.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_MODELPIPELINE_H
#define HETPLAN_PASSES_PLANNER_MODELPIPELINE_H

#include "passes/cost/CostModel.h"
#include "passes/planner/PlanExport.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace hetplan::planner {

/// How symbolic dims get their sizes (what `hetplan compile` documents):
///
/// - The batch dim(s): the dims at the axes `batchAxes` declares
///   (INPUT=AXIS, or INPUT=none for an input without a batch axis); else
///   every dim named like a batch (`batch`, `batch_size`, any name holding
///   "batch", or exactly `N`, `B`, `bs`, `bsz`), wherever it sits; else the
///   leading symbolic dim of the first input that has one (unless it is
///   named like a sequence). Costs are per sample, so they are bound to 1;
///   the plan records `batch`.
/// - `dims`: NAME=VALUE binds a dim by name (VALUE >= 0; 0 for an empty
///   KV cache). Naming a batch dim is allowed when VALUE equals `batch`.
/// - `shapes`: INPUT=D0xD1x... binds a whole input; its batch axis (as
///   above; axis 0 when that dim is dynamic and unnamed) must hold `batch`.
///   Dims it fixes by name bind that name everywhere.
/// - `sequence` binds one dim: the first dim, in input order, named like a
///   sequence (holding "seq", "len", "token" or "time", or exactly `s`/`t`)
///   and not qualified as a cache or total length (holding "past",
///   "total", "cache", "present", "prev", "max", "kv", or an expression
///   such as "a + 1"), among dims not bound otherwise. Other sequence-like
///   dims (past_sequence_length, total_sequence_length, a second
///   encoder_sequence_length) stay unbound: give them with `dims`.
/// - Any dim left unbound is an error that names each with its input and
///   says which flag binds it.
struct PipelineOptions {
  std::string path;                    // .onnx, .onnxtext or .mlir
  int64_t batch = 1;                   // the global batch (checked against shapes)
  int64_t sequence = 0;                // binds the sequence dim
  std::vector<std::string> shapes;     // INPUT=D0xD1x..., batch axis = batch
  std::vector<std::string> dims;       // NAME=VALUE
  std::vector<std::string> batchAxes;  // INPUT=AXIS or INPUT=none
  /// INPUT=VALUE: an integer scalar input's value, folded like a constant
  /// (an If on it takes one branch); the plan records it and run checks it.
  std::vector<std::string> values;
  bool allowMissingWeights = false;
  /// >= 0: a KV-cache length. Unbound input dims named like a past/cache
  /// length take it, and those named like a total take it plus `sequence`
  /// (serve mode prices prefill and decode of a decoder exported with its
  /// cache at cacheLength 0: the serve planner adds the cache reads itself).
  int64_t cacheLength = -1;
  cluster::DType dtype = cluster::DType::FP16;
  /// Costs for training (an LM head splits by vocabulary with the loss:
  /// cost::ExtractOptions::training).
  bool training = false;
  /// The software stack fuses attention (cost::ExtractOptions::fusedAttention).
  bool fusedAttention = false;
  /// The stack fuses elementwise chains (cost::ExtractOptions::fusedElementwise).
  bool fusedElementwise = false;
};

struct CostedModel {
  cost::ModelCost cost;
  std::map<std::string, int64_t> boundDims;  // as the plan records them
  std::vector<IoShape> inputs, outputs;
  /// Empty when the batch may be split (samples stay apart and the batch is
  /// on dim 0 of every input and output); else why it may not.
  std::string wholeBatchReason;
  /// One line each: sizes planned with an upper bound (NonZero, Unique, a
  /// TopK whose k is computed), subgraphs priced under an assumption (an
  /// unknown trip count, body values of unknown shape), --seq binding nothing.
  std::vector<std::string> warnings;
  /// The dim `sequence` bound (empty: none; e.g. a decode-step-only export
  /// whose input_ids is fixed at one token).
  std::string sequenceDim;
};

/// One-line errors name the file (and node, for shape errors).
llvm::Expected<CostedModel> costModelFile(const PipelineOptions &options);

/// `message` on one line: control characters (a newline in a node or value
/// name the model chose, say) written as \xNN. Bytes of 0x80 and above stay
/// (UTF-8 names print as they are).
std::string oneLineMessage(llvm::StringRef message);

} // namespace hetplan::planner

#endif
