//===- RankProgram.h - one rank's program, by instruction -*- C++ -*-===//
//
// PlanExecutor::runProgram's interpreter (internal to hetplan_exec): the
// state one rank's step shares between its instruction handlers, set up
// once per step, and one handler per instruction kind. The handlers live
// by theme: Transfers.cpp (SEND_*/RECV_*), Forward.cpp (FORWARD and the
// loss), Backward.cpp (BACKWARD), Optimizer.cpp (ALLREDUCE_GRADIENTS,
// OPTIMIZER_STEP, ZeRO), TensorParallel.cpp (split nodes, both ways);
// Program.cpp sets up and dispatches.
//
//===----------------------------------------------------------------------===//
#pragma once
#include "hetplan/runtime/PlanExecutor.h"
#include "../PlanSupport.h"
#include "../Training.h"

#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace hetplan::runtime {

/// The training side of one rank's step (null for inference).
struct PlanExecutor::TrainRun {
  const Tensor &labels;
  RankTrainState &state;
  const TrainOptions &options;
  double denominator = 0;
  double lossPiece = 0;
  std::map<uint32_t, std::map<std::string, Tensor>> stash;  // mb -> forward values
  std::map<uint32_t, std::set<std::string>> requires;       // mb -> values carrying gradients
  std::map<uint32_t, std::map<std::string, Tensor>> seeds;  // mb -> loss/received gradients
  std::map<uint32_t, std::vector<bool>> inFlags;            // mb -> received values carrying gradients
  std::map<uint32_t, std::vector<bool>> outFlags;           // mb -> sent values carrying gradients
  std::map<uint32_t, std::map<std::string, Tensor>> gradOut; // mb -> gradients of received values
  std::map<uint32_t, std::map<int64_t, std::vector<Tensor>>> gradIn; // mb -> sender offset -> pieces
  std::set<size_t> summed;                                   // sumGroups_ done
  std::vector<std::regex> freeze;                            // options.freeze, compiled
  bool frozen(const std::string &p) const {
    for (const auto &re : freeze)
      if (std::regex_search(p, re)) return true;
    return false;
  }
};

class PlanExecutor::RankProgram {
public:
  /// Sets up rank `comm.rank()`'s step; the rank is not idle.
  RankProgram(const PlanExecutor &exec, Communicator &comm, const std::map<std::string, Tensor> &inputs,
              RankTiming *timing, TrainRun *train);
  /// Runs the program; returns what the rank computed of the graph outputs.
  OutputPieces run();

private:
  // ---- instruction handlers, one per kind ----
  void onRecvActivation(const plan::Instruction &ins);
  void onForward(const plan::Instruction &ins);
  void onSendActivation(const plan::Instruction &ins);
  void onRecvGradient(const plan::Instruction &ins);
  void onBackward(const plan::Instruction &ins);
  void onSendGradient(const plan::Instruction &ins);
  void onAllReduceGradients(const plan::Instruction &ins);
  void onOptimizerStep(const plan::Instruction &ins);

  // ---- transfers (Transfers.cpp) ----
  const plan::Worker &workerOf(const plan::Stage &s, uint32_t r) const;
  void receive(uint32_t mb, uint32_t peer);
  void send(uint32_t mb, uint32_t peer); // to one rank of a next-stage worker
  void receiveGradient(uint32_t mb, uint32_t peer);
  void sendGradient(uint32_t mb, uint32_t peer);

  // ---- FORWARD (Forward.cpp) ----
  /// With `replay` (recomputation, before a BACKWARD): runs the nodes again
  /// from the kept inputs in *replay and leaves every value there.
  void forward(uint32_t mb, std::map<std::string, Tensor> *replay = nullptr);
  /// The received values of micro-batch `mb` into `values` (and the values
  /// without a batch dim recomputed from them); their per-sample shapes
  /// into `perSample`, those carrying gradients into `seeds`.
  void takeReceived(uint32_t mb, std::map<std::string, Tensor> &values,
                    std::map<std::string, std::vector<int64_t>> &perSample, std::set<std::string> &seeds);
  /// The stage's nodes on this rank's compute (the CUDA executor on a
  /// CUDA rank); its split nodes may go to the hook.
  std::map<std::string, Tensor> runStage(std::map<std::string, Tensor> vals, const std::set<std::string> &keeping,
                                         std::map<std::string, std::vector<int64_t>> *shp, ExecutionObserver *obs,
                                         const Executor::NodeHook *h, const std::set<std::string> &resident);
  /// What the next stage gets of micro-batch `mb`, into the outbox.
  void passOn(uint32_t mb, std::map<std::string, Tensor> &result,
              const std::map<std::string, std::vector<int64_t>> &shapes,
              std::map<std::string, std::vector<int64_t>> &perSample, const std::set<std::string> &requires);
  /// The loss on this worker's samples; its gradient seeds BACKWARD.
  void loss(uint32_t mb, int64_t base, std::map<std::string, Tensor> &result,
            const std::set<std::string> &requires, const std::map<std::string, Tensor> *replay);

  // ---- BACKWARD (Backward.cpp) ----
  void backwardStep(uint32_t mb);

  // ---- split nodes (TensorParallel.cpp) ----
  /// This rank's part of the weight a split node reads as input `input`
  /// (tpParams_): where it lies along which axis, and a copy.
  struct Part {
    int axis;
    planexec::Ranges ranges;
    Tensor value;
    /// `inputs` with input `i` replaced by this part.
    std::vector<const Tensor *> in(std::vector<const Tensor *> inputs, size_t i) const {
      inputs[i] = &value;
      return inputs;
    }
  };
  Part mineOf(const Node &n, size_t input, const Tensor &w) const;
  /// A vocab-parallel head's columns on this rank (of the [hidden, vocab]
  /// matrix it multiplies by).
  planexec::Ranges vocabRanges(const Tensor &w) const;
  /// The forward hook: runs split node `node` of micro-batch `mb` on this
  /// rank's part; false for a node that runs as it is.
  bool tpForward(uint32_t mb, size_t node, KernelContext &ctx);
  /// The backward hook, likewise.
  bool tpBackward(uint32_t mb, size_t node, GradientContext &ctx);
  /// Sums the VOCAB heads' column gradients over the worker, once.
  void finishVocabGrads();

  // ---- gradients, optimizer, ZeRO (Optimizer.cpp) ----
  void noteStash();
  std::vector<int64_t> zeroCounts(size_t g) const;
  /// ZeRO-3: the whole parameters of the sharded groups exist only while a
  /// FORWARD or BACKWARD (phase 0 / 1) runs.
  void gatherShards(uint32_t mb, int phase);
  void dropGathered();
  /// Sums every group of parameter gradients this rank belongs to that
  /// `select` picks, in sumGroups_ order (the same on every rank).
  void sumGradients(const std::function<bool(const std::vector<int> &)> &select);
  /// One update by the plan's optimizer of `param` (its element ranges
  /// `pieces`, all when empty) with its state under `key`. With optimizer
  /// offload the state lives in the host store and the update runs there
  /// on copies of the gradient and the parameter; the parameter is copied
  /// back.
  void optimizerStep(const std::string &key, Tensor &param, const Tensor &grad,
                     const std::vector<std::pair<int64_t, int64_t>> &pieces);
  /// ZeRO: the update of this rank's range of group g, then (unless the
  /// group keeps its parameters sharded) the all-gather of the new values.
  void zeroStep(size_t g);
  /// Whether `name` is one of this stage's sparse embedding tables
  /// (Stage.sparse_parameters): updated only on its looked-up rows.
  bool sparseParameter(const std::string &name) const;

  // ---- the executor's plan analysis, under the names it has there ----
  const PlanExecutor &exec_;
  const plan::Plan &plan_;
  const std::unique_ptr<Model> &model_;
  const std::unique_ptr<Executor> &executor_;
  const std::vector<StageIO> &io_;
  const std::set<std::string> &graphOutputs_;
  const int64_t microBatch_;
  const bool whole_;
  const std::set<std::string> &unbatchedInputs_;
  const std::vector<std::set<std::string>> &stageParams_;
  const std::vector<std::vector<size_t>> &stageNodes_;
  const std::vector<std::pair<std::vector<int>, std::vector<std::string>>> &sumGroups_;
  const std::vector<ZeroGroup> &zero_;
  const std::vector<std::vector<std::pair<int, int>>> &sumFollowers_;
  const std::vector<std::map<std::string, std::pair<int, int>>> &tpParams_;
  const std::vector<std::map<size_t, VocabHead>> &vocabHeads_;
  uint32_t zeroStage() const { return exec_.zeroStage(); }
  ZeroShard zeroShard(size_t g, uint32_t r) const { return exec_.zeroShard(g, r); }

  // ---- this rank's step ----
  Communicator &comm;
  const std::map<std::string, Tensor> &inputs;
  RankTiming *timing;
  TrainRun *train;
  OutputPieces pieces;
  uint32_t me;
  RankCompute *compute = nullptr;
  // Device-resident values (docs/gpu.md): what this rank's FORWARDs make
  // stays where its compute left it, host copies only for host consumers.
  bool onDevice;
  const plan::Rank &rank;
  size_t j, S;
  const plan::Stage &st;
  const plan::Worker &self;
  int64_t off, n;
  std::string who;
  const StageIO *in, *out;
  int tp, tpIndex = 0;
  std::vector<int> tpRanks;
  std::vector<int> tpGroup; // sorted: groupSum's order
  const std::map<size_t, plan::TensorParallelNode> &splitNodes;
  std::set<size_t> splitNodeSet; // the nodes the backward hook claims
  size_t numNodes;
  std::vector<size_t> nodes;
  std::set<std::string> keep;
  std::string lossOutput;
  // The gradient of a VOCAB head's columns, summed over micro-batches;
  // summed over the worker (whole on every rank) before the gradient sums.
  std::map<size_t, Tensor> vocabGrads;
  bool vocabGradsDone = false;
  // The VOCAB node making the loss output, if any (its logits are split).
  std::optional<size_t> vocabLossNode;
  struct Received { std::vector<Tensor> data, shapes; Tensor flags; };
  std::map<uint32_t, std::map<int64_t, Received>> pending; // mb -> sender offset -> data
  struct Produced {
    std::map<std::string, Tensor> values;
    std::map<std::string, std::vector<int64_t>> perSample; // shapes to pass on
  };
  std::map<uint32_t, Produced> outbox;
  // ---- training memory: recomputation, ZeRO-3's gathered parameters ----
  bool recompute;
  // SEND_ACTIVATIONs still to run per micro-batch: a training rank drops
  // the values it sends once they are sent (the stash keeps what BACKWARD needs).
  std::map<uint32_t, int> sendsLeft;
  std::vector<size_t> myGroups;  // the sumGroups_ this rank is in
  std::vector<int> stageRanks;   // the stage's ranks at this rank's tensor-parallel position
};

} // namespace hetplan::runtime
