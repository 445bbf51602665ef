//===- PlanExecutor.h - runs a plan's step across ranks ---------*- C++ -*-===//
//
// A PlanExecutor runs one step of a compiled plan: every rank follows its
// program (RECV_ACTIVATION, FORWARD over its stage's node range,
// SEND_ACTIVATION; for training plans also RECV_GRADIENT, BACKWARD,
// SEND_GRADIENT, ALLREDUCE_GRADIENTS and OPTIMIZER_STEP) on its samples of
// every micro-batch, talking to the other ranks through a Communicator. run() starts one thread per rank with a
// ThreadCommunicator; runRank() runs one rank's program with any
// communicator (MpiCommunicator, NcclCommunicator); setCompute() puts a
// rank's FORWARDs on another backend (the CUDA executor). Outputs are the same as running
// the whole model on one rank (docs/runtime.md, "Running plans"); so are the
// losses and weights of training plans with recomputation, ZeRO stages or
// optimizer offload (docs/runtime.md, "Training memory").
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_RUNTIME_PLANEXECUTOR_H
#define HETPLAN_RUNTIME_PLANEXECUTOR_H

#include "hetplan/runtime/Communicator.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Gradients.h"
#include "hetplan/runtime/Model.h"
#include "hetplan/runtime/Plan.h"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hetplan::runtime {

/// Where a rank's stage computes: the CPU Executor unless the rank is
/// given another (PlanExecutor::setCompute; a CUDA rank gets the CUDA
/// executor's, RankBackend.h). runNodes: Executor::runNodes' contract, plus
/// `hookNodes`: the only nodes `hook` may claim, and, for a compute with
/// deviceValues(), device-resident values (docs/gpu.md): `values` may hold
/// device tensors (Tensor::isDevice) and the kept values named in
/// `resident` (null: none) may come back as device tensors. backward and
/// optimizerUpdate default to the host (the CPU gradient kernels,
/// train::optimizerUpdate).
class RankCompute {
public:
  virtual ~RankCompute() = default;
  virtual std::map<std::string, Tensor> runNodes(const std::vector<size_t> &nodes,
                                                 std::map<std::string, Tensor> values,
                                                 const std::set<std::string> &keep,
                                                 std::map<std::string, std::vector<int64_t>> *shapes,
                                                 ExecutionObserver *observer, const Executor::NodeHook *hook,
                                                 const std::set<size_t> *hookNodes,
                                                 const std::set<std::string> *resident) = 0;
  /// "cpu", "cuda:0", ...: for messages and profiles.
  virtual std::string describe() const = 0;
  /// True when values may stay in this compute's device memory between
  /// instructions: runNodes takes and returns device tensors, and so does
  /// backward's `value` (a FORWARD's results). The plan executor then
  /// keeps what the rank sends, stashes or feeds to a FORWARD again as
  /// the FORWARD left it, and receives activations with
  /// Communicator::recvDeviceInGroup. Default false (host tensors only).
  virtual bool deviceValues() const { return false; }
  /// Bytes of forward values (a FORWARD's inputs and results, the values
  /// a BACKWARD reads) this compute moved between host and device: its
  /// uploads and downloads, and host copies of its device tensors made
  /// elsewhere (Tensor::toHost: a host-staged send, a host consumer).
  /// Weights, parameters, gradients and optimizer state are not counted.
  struct ValueTransfers {
    uint64_t toDevice = 0, toHost = 0;
  };
  virtual ValueTransfers valueTransfers() const { return {}; }
  /// A BACKWARD over the stage's nodes `nodes` (in forward order; swept in
  /// reverse): `grads` holds the seeds on entry and, on return, the
  /// gradient of every value in `requires` that reaches them (summed over
  /// uses; the nodes' outputs' gradients are dropped), host tensors both
  /// ways. `value` finds a forward value (on the host, or on the device
  /// with deviceValues()). `hook`, when given, is
  /// offered the nodes in `hookNodes` first, on host tensors. The default
  /// runs the CPU gradient kernels (train::backward).
  virtual void backward(const Model &model, const std::vector<size_t> &nodes,
                        const std::function<const Tensor *(const std::string &)> &value,
                        const std::set<std::string> &requires, std::map<std::string, Tensor> &grads,
                        const GradientHook *hook, const std::set<size_t> *hookNodes);
  /// One optimizer update (settings.kind) of the host tensors `param` (in
  /// place) and its state `m` (momentum buffer or Adam's first moment), `v`
  /// (Adam's second moment), made as zeros when undefined and the
  /// optimizer keeps them, from `grad` at step `step`, of the element
  /// ranges (begin, count) `pieces`, all of it when empty. The default is
  /// train::optimizerUpdate on the host.
  virtual void optimizerUpdate(Tensor &param, const Tensor &grad, Tensor &m, Tensor &v, int64_t step,
                               const OptimizerSettings &settings,
                               const std::vector<std::pair<int64_t, int64_t>> &pieces);
};

class PlanExecutor {
public:
  /// Loads the plan's model (`modelPath`, or the plan's model.path when
  /// empty) and checks, before anything runs, with one-line errors
  /// (std::runtime_error): validatePlan; for training
  /// plans, a backward kernel on every path from a parameter to the outputs
  /// and a complete program (FORWARD and BACKWARD once per micro-batch,
  /// ALLREDUCE_GRADIENTS among the stage's workers, OPTIMIZER_STEP last); the model file's SHA-256 equals
  /// plan.model.sha256 ("model file changed since the plan was compiled");
  /// the model's nodes are the plan's node_names, in topological order;
  /// every node has a CPU kernel (Executor::check); programs hold exactly
  /// one FORWARD per micro-batch over the stage's nodes and the sends and
  /// receives that the workers' sample ranges call for.
  explicit PlanExecutor(plan::Plan plan, const std::string &modelPath = "");
  /// readPlan + the constructor.
  static std::unique_ptr<PlanExecutor> load(const std::string &planPath,
                                            const std::string &modelPath = "");
  ~PlanExecutor();

  const plan::Plan &plan() const { return plan_; }
  const Model &model() const { return *model_; }
  const Executor &executor() const { return *executor_; }
  int ranks() const { return plan_.ranks_size(); }

  /// Runs rank `rank`'s FORWARDs, BACKWARDs and (without optimizer
  /// offload) optimizer updates on `compute` (null: the CPU Executor and
  /// gradient kernels, the default). A compute with deviceValues() keeps
  /// activations on its device between instructions; the loss and the
  /// gradient sums run on the host either way. Set before a run; one
  /// compute may serve one rank at a time only.
  void setCompute(int rank, std::shared_ptr<RankCompute> compute);
  const RankCompute *compute(int rank) const;

  /// Moves stage `stage`'s data-parallel shares between steps (Rebalance.h):
  /// worker w gets `samples[w]` samples of every micro-batch (each >= 1,
  /// summing to the micro-batch), the workers' ranges laid out in the order
  /// of their current offsets, and the FORWARD/BACKWARD instructions say so.
  /// The programs must still match the new ranges (a worker of a
  /// neighbouring stage may not gain or lose a peer); otherwise nothing
  /// changes and the reason comes back (empty on success). Not during a step.
  std::string setShares(uint32_t stage, const std::vector<int64_t> &samples);
  /// Test only (hetplan run --test-slow-rank): after each FORWARD and
  /// BACKWARD, rank `rank` sleeps `fraction` times what the instruction
  /// took, a straggler on purpose. rank < 0: none.
  void setTestSlowdown(int rank, double fraction) { slowRank_ = rank, slowFraction_ = fraction; }

  /// Checks the step's inputs: every graph input given (and nothing else),
  /// its declared element type and non-batch dims, and dim 0 equal to the
  /// plan's global batch. Throws one line.
  void checkInputs(const std::map<std::string, Tensor> &inputs) const;

  /// Measured times of one rank's step (hetplan run --profile): every
  /// kernel of its stage's FORWARDs timed with steady_clock (the nodes a
  /// receiver re-runs for values without a batch dim are not counted).
  struct RankTiming {
    std::vector<double> nodeSeconds;    // per model node, summed over micro-batches
    std::vector<int64_t> nodeSamples;   // samples those runs processed, summed
    std::vector<double> forwardSeconds; // per micro-batch: the stage's node range
    /// Tensor-parallel collectives this rank joined (summed over
    /// micro-batches) and the elements of the whole tensors they produced
    /// (an all-gather's gathered output): to check against the plan's
    /// Stage.tensor_parallel_traffic.
    /// Per instruction of the rank's program, in order: (start, end) in
    /// seconds of a steady clock (a trace subtracts the step's first start).
    std::vector<std::pair<double, double>> instructionSpans;
    int64_t forwardAllReduces = 0, forwardAllGathers = 0, backwardAllReduces = 0;
    double forwardAllReduceElements = 0, forwardAllGatherElements = 0,
           backwardAllReduceElements = 0;
  };
  /// A timed step: per rank (idle ranks empty) and the wall time of run().
  struct StepTiming {
    std::vector<RankTiming> ranks;
    double wallSeconds = 0;
  };

  /// One step: one thread per rank, ThreadCommGroup channels. Returns the
  /// graph outputs for the whole batch, in the original sample order.
  /// `timing`, when given, receives measured times (without it no clock is
  /// read around kernels).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs,
                                    StepTiming *timing = nullptr) const;

  /// The pieces of the graph outputs one rank produced: (micro-batch,
  /// worker) -> output name -> tensor of that worker's samples.
  using OutputPieces = std::map<std::pair<uint32_t, uint32_t>, std::map<std::string, Tensor>>;
  /// Runs rank `comm.rank()`'s program. `inputs` are the global inputs (each
  /// rank slices its own samples). Returns what the rank computed of the
  /// graph outputs (only ranks of the last stage compute any).
  OutputPieces runRank(Communicator &comm, const std::map<std::string, Tensor> &inputs,
                       RankTiming *timing = nullptr) const;
  /// Assembles the last stage's pieces into whole-batch outputs.
  std::map<std::string, Tensor> gatherOutputs(const std::vector<OutputPieces> &pieces) const;

  /// What crosses from stage j-1 into stage j (for tests and docs): the
  /// batched values sent, the values without a batch dim the receiving rank
  /// recomputes, and the values whose per-sample shape it is told.
  struct StageIO {
    std::vector<std::string> received;   // batched, sent sliced on dim 0
    std::vector<size_t> metaNodes;       // earlier nodes re-run by the receiver
    std::vector<std::string> shapes;     // per-sample shapes sent along
  };
  const StageIO &stageIO(size_t stage) const { return io_[stage]; }

  // ---- Training plans (docs/runtime.md, "Training plans") ----
  bool training() const { return plan_.settings().mode() == "train"; }
  /// The plan's Settings.optimizer (validatePlan admits the names of
  /// Optimizers.h; "" is Adam, as plans before the choice were written).
  Optimizer optimizer() const;
  /// Hyper-parameters of the plan's optimizer (OptimizerSettings): lr and
  /// weightDecay for all, momentum for `momentum`, beta1, beta2 and eps
  /// for adam and adamw.
  struct TrainOptions {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0, momentum = 0.9;
    /// The graph output the loss is computed on ("" = the first one):
    /// softmax cross-entropy over its last axis against integer labels of
    /// its other dims, mean over the labels that are not `ignoreIndex`.
    std::string lossOutput;
    int64_t ignoreIndex = -100;
    /// Parameters whose name matches one of these (ECMAScript regex,
    /// searched) are not updated: buffers that ONNX stores like weights,
    /// such as Llama's rotary tables (`rotary_emb`).
    std::vector<std::string> freeze;
  };
  /// A rank's training state: float32 copies of the parameters its stage
  /// reads (updated in place by OPTIMIZER_STEP), the optimizer's state
  /// (adamM: the momentum buffer or Adam's first moment, adamV: Adam's
  /// second moment; none for SGD), the step
  /// count, and the summed gradients of the last step (after the
  /// all-reduce, before the update; kept for tests and tools).
  struct RankTrainState {
    std::map<std::string, Tensor> params, grads, adamM, adamV;
    int64_t step = 0;
    /// ZeRO (Settings.zero_stage >= 1), per group of ranks holding the same
    /// parameters that this rank is in (keys as in zeroShards()): at stage
    /// >= 2 the summed gradient of this rank's flat range (`grads` then
    /// lacks the group's parameters), at stage 3 the range's parameter
    /// values (`params` then holds the group's parameters only while a
    /// FORWARD or BACKWARD runs). The optimizer state of the range is
    /// adamM/adamV["zero:<group>"].
    struct Shard {
      Tensor grad, param;
    };
    std::map<size_t, Shard> shards;
    /// Settings.offload_optimizer: the optimizer state lives here, in host
    /// memory, and adamM/adamV stay empty. OPTIMIZER_STEP copies the
    /// gradient and the parameter (or their ZeRO range) down, updates them
    /// here, and copies the parameter back (docs/runtime.md, "Optimizer
    /// offload").
    struct HostStore {
      std::map<std::string, Tensor> adamM, adamV;
    } host;
    /// Measured during the last step.
    struct Stats {
      /// The most bytes of activations held at once between FORWARDs and
      /// their BACKWARDs: every micro-batch's stash (with recompute, the
      /// stage's inputs; during a BACKWARD, also the rebuilt values), the
      /// values waiting to be sent and the loss gradients. Parameters and
      /// model constants are not counted; shared bytes count once.
      uint64_t peakStashedBytes = 0;
      /// Optimizer offload: bytes copied between the rank and the host store.
      uint64_t offloadBytes = 0;
      /// ZeRO-3: parameter bytes all-gathered before FORWARDs and BACKWARDs.
      uint64_t gatheredParameterBytes = 0;
    } stats;
  };
  /// The trained parameters (float32 initializers with >= 2 elements that a
  /// gradient can reach: the compiler's parameter rule).
  const std::set<std::string> &parameters() const { return trainable_; }
  /// The parameters stage `stage` reads (its nodes and the ones its ranks
  /// re-run), and the stages that read `param`.
  const std::set<std::string> &stageParameters(size_t stage) const { return stageParams_[stage]; }
  /// Fresh state for `rank` from the model's initializers.
  RankTrainState initialTrainState(uint32_t rank) const;
  /// One training step of rank `comm.rank()`: its program, then the sum of
  /// the loss pieces over all ranks (every rank, idle ones too, must call
  /// it). `labels`: the global batch's labels ([global batch, ...]).
  /// Returns the step's loss (before the update).
  double trainRank(Communicator &comm, const std::map<std::string, Tensor> &inputs,
                   const Tensor &labels, RankTrainState &state, const TrainOptions &options,
                   RankTiming *timing = nullptr) const;
  /// One training step on all ranks (threads). `states` has one entry per
  /// rank (made with initialTrainState when empty) and carries over steps.
  double train(const std::map<std::string, Tensor> &inputs, const Tensor &labels,
               std::vector<RankTrainState> &states, const TrainOptions &options,
               StepTiming *timing = nullptr) const;
  /// ZeRO's partition (Settings.zero_stage >= 1) for `rank`: per group of
  /// ranks that hold the same parameters (a stage's data-parallel workers
  /// at one tensor-parallel position, or every holder of a parameter
  /// several stages read, such as a tied embedding), keyed by the group's
  /// index: its parameters flattened in `params` order (each starting at
  /// `offsets[i]`, `offsets.back()` elements in all) and split into
  /// contiguous element ranges by bytes, member k of `ranks` holding
  /// [bounds[k], bounds[k+1]). `paramsSharded`: stage 3 and the group is
  /// one stage's workers (a group spanning stages keeps its parameters
  /// whole: gathering them at each FORWARD would make one stage wait for
  /// another's). Empty at zero_stage 0 or for an idle rank.
  struct ZeroShard {
    std::vector<int> ranks;
    std::vector<std::string> params;
    std::vector<int64_t> offsets, bounds;
    bool paramsSharded = false;
    int64_t lo = 0, hi = 0; // this rank's range
  };
  std::map<size_t, ZeroShard> zeroShards(uint32_t rank) const;
  uint32_t zeroStage() const { return plan_.settings().zero_stage(); }

  /// The current parameters: each from the first worker of the first stage
  /// that reads it (after a step, every holder has the same values; at
  /// ZeRO-3 assembled from the holders' ranges).
  std::map<std::string, Tensor> collectParameters(const std::vector<RankTrainState> &states) const;
  /// The same over MPI ranks: rank 0 receives every parameter (others
  /// return an empty map); every rank must call it.
  std::map<std::string, Tensor> gatherParameters(Communicator &comm, const RankTrainState &state) const;
  /// The plan reduced to one rank: one stage over all nodes, one worker,
  /// one micro-batch (the single-device reference a step must agree with).
  static plan::Plan singleRankPlan(const plan::Plan &plan);

  /// The part of a parameter a rank computes and updates: index ranges
  /// [lo, hi) along `axis` (a tensor-parallel stage's columns or rows of a
  /// weight), or all of it when `axis` < 0. Its gradient and values
  /// elsewhere are zero / stale.
  struct Held {
    int axis = -1;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    bool whole() const { return axis < 0; }
  };
  /// A piece of a parameter's current value and the rank holding it.
  struct ParamSource {
    std::string name;
    uint32_t rank;
    Held held;
  };
  std::vector<ParamSource> parameterSources() const;
  Held held(uint32_t rank, const std::string &param) const;
  /// The elements of `t` that `h` names (a copy; `t` itself when whole).
  static Tensor heldPart(const Tensor &t, const Held &h);

private:
  struct TrainRun;
  /// One rank's program, one handler per instruction kind (src/exec/program/).
  class RankProgram;
  OutputPieces runProgram(Communicator &comm, const std::map<std::string, Tensor> &inputs,
                          RankTiming *timing, TrainRun *train) const;
  /// The constructor's analysis: what crosses each stage boundary (io_),
  /// the split nodes and weights (tpNodes_, tpParams_, vocabHeads_), the
  /// ranks' programs, and for training plans the gradient sums and ZeRO.
  void findStageIO(const std::string &modelPath);
  void checkTensorParallelNodes();
  void checkPrograms();
  void checkTraining();
  std::map<int, std::shared_ptr<RankCompute>> computes_;
  int slowRank_ = -1;
  double slowFraction_ = 0;
  plan::Plan plan_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Executor> executor_;
  std::vector<StageIO> io_;                // per stage; io_[0] empty
  std::set<std::string> graphOutputs_;
  int64_t microBatch_ = 0;
  /// The plan keeps the batch whole (Settings.whole_batch): values pass
  /// between stages unsliced and need no batch on dim 0.
  bool whole_ = false;
  /// Graph inputs without a batch dim (scalars, per-plan constants): whole to every rank.
  std::set<std::string> unbatchedInputs_;
  std::set<std::string> trainable_;
  std::vector<std::set<std::string>> stageParams_;   // per stage
  std::vector<std::vector<size_t>> stageNodes_;      // per stage: re-run nodes, then its range
  /// Gradient sums: the parameters read by exactly the ranks `first` (the
  /// stage's workers, or for a parameter several stages read, such as tied
  /// embeddings, all of theirs), in a fixed order every rank agrees on.
  std::vector<std::pair<std::vector<int>, std::vector<std::string>>> sumGroups_;
  /// Per sumGroups_ entry (zero_stage >= 1): its ZeRO partition.
  struct ZeroGroup {
    std::vector<int64_t> offsets, bounds;
    bool paramsSharded = false;
  };
  std::vector<ZeroGroup> zero_;
  ZeroShard zeroShard(size_t group, uint32_t rank) const;
  /// Per sum group: (rank, source) pairs -- for a parameter read by stages
  /// of different tensor parallelism, the workers' first ranks sum it and
  /// each sends the sum to its worker's other ranks.
  std::vector<std::vector<std::pair<int, int>>> sumFollowers_;
  /// Per stage: how each split node runs on the tensor-parallel ranks (the
  /// plan's Stage.tensor_parallel_nodes); the others run whole.
  std::vector<std::map<size_t, plan::TensorParallelNode>> tpNodes_;
  /// Per stage: the parameters its ranks hold a part of -> (axis,
  /// segments): the part of tensor-parallel rank k of t is the k-th 1/t of
  /// each of `segments` equal parts of that axis.
  std::vector<std::map<std::string, std::pair<int, int>>> tpParams_;
  /// Per stage, the VOCAB node's trained parameter (its input 1, or what
  /// that input transposes) and whether the node reads it transposed: the
  /// gradient of its columns is summed over the worker and added there.
  struct VocabHead {
    std::string param;
    bool transposed = false;
  };
  std::vector<std::map<size_t, VocabHead>> vocabHeads_;
};

} // namespace hetplan::runtime

#endif
