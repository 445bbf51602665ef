//===- ServePlanner.h - LLM serving plans on mixed GPUs ---------*- C++ -*-===//
//
// A serving plan answers: which devices to use (and rent), how to place the
// model on them as replicas (a pipeline of stages, each `tp` devices of one
// type; the stages of one type, or across types when no type holds the
// model alone), how many requests each replica serves at once (its KV cache and the
// per-token latency target bound it), and which share of the request rate
// goes to each, so that the rate is met within latency targets at the lowest
// price. Prefill and decode are priced apart with the cost model's roofline:
// prefill of P prompt tokens is compute-bound; a decode step reads every
// weight once for the whole batch and each request's KV cache. A
// discrete-event simulation of the workload (Poisson, gamma or a trace;
// seeded, deterministic) predicts TTFT, TPOT and end-to-end percentiles. docs/serving.md gives the equations
// and their sources.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_PLANNER_SERVEPLANNER_H
#define HETPLAN_PASSES_PLANNER_SERVEPLANNER_H

#include "passes/cluster/Cluster.h"
#include "passes/cost/CostModel.h"
#include "passes/planner/PlanExport.h"
#include "passes/planner/ServeWorkload.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace hetplan::planner::serve {

struct Options {
  double rate = 1;              // requests per second
  /// Per request; with a length distribution or a trace, their means
  /// (what capacity and memory are sized for).
  int64_t promptTokens = 128;
  int64_t outputTokens = 128;
  /// The arrivals and lengths the simulation replays (Poisson at `rate`,
  /// every request promptTokens + outputTokens, by default).
  Workload workload;
  double ttftTarget = 0;        // seconds at `percentile`; 0: none
  double tpotTarget = 0;
  double budget = 0;            // $/h; 0: none
  int percentile = 90;          // the percentile the targets bound
  /// Choose the cheapest subset of the cluster's devices (Mélange's
  /// question). Types in `optionalTypes` may be used in part or not at all;
  /// the others are used whole. Empty with pickDevices: every type optional.
  bool pickDevices = false;
  std::set<const cluster::DeviceType *> optionalTypes;
  cost::DType dtype = cost::DType::FP16;
  /// Share of device memory weights, KV cache and buffers may fill (vLLM's
  /// gpu_memory_utilization default).
  double memoryUtilization = 0.9;
  double deviceContextBytes = 512.0 * (1 << 20);
  /// Prompt tokens one prefill iteration takes at most (vLLM's
  /// max_num_batched_tokens scale); at least one request.
  int64_t maxPrefillTokens = 8192;
  int maxBatchPerGroup = 256;   // vLLM's max_num_seqs default
  /// A decode-step-only export (input_ids fixed at c tokens per run, often
  /// 1): the prompt is prefilled in runs of c, each priced as a decode step
  /// (the cost of one c-token run) over the growing cache. 0: the whole
  /// prompt in one run, priced by `prefill`.
  int64_t prefillChunk = 0;
  /// Host seconds per kernel. Serving engines replay decode as CUDA graphs
  /// (vLLM, TensorRT-LLM), so the eager per-op dispatch the catalog's
  /// `achieved.kernel_us` measures for training does not apply; this is the
  /// cost model's plain default (5 us). Negative: the catalog's figure.
  double kernelSeconds = 5e-6;
  int maxTensorParallel = 8;
  /// Pipeline depths tried: every count from 1 to this (and to the layer
  /// and device counts), so a type's devices need not be a power of two.
  int maxPipelineStages = 64;
  /// Every replica has exactly these (0: searched): `--pin pp=N,tp=T`.
  int pinPipelineStages = 0;
  int pinTensorParallel = 0;
  /// `--layout FILE`: exactly these replicas (nothing searched; shares by
  /// capacity as ever).
  std::vector<ServeLayoutReplica> layout;
  uint64_t seed = 1;
  uint64_t simulatedRequests = 0;  // 0: rate x 120 s, within [2000, 20000]
  std::vector<cost::Profile> profiles;
};

//===----------------------------------------------------------------------===//
// The simulator
//===----------------------------------------------------------------------===//

/// A replica as the simulator sees it: `groups` request groups in flight
/// (one per pipeline stage), each of at most `groupBatch` requests, sharing
/// one queue; iteration times from the cost model.
struct SimReplica {
  int groups = 1;
  int groupBatch = 1;
  int prefillBatch = 1;  // requests one prefill iteration takes at most
  /// Seconds of a prefill iteration of k requests (prompt to first token).
  std::function<double(int k)> prefillSeconds;
  /// Seconds of a decode iteration of k requests whose contexts sum to
  /// `contextTokens` (one token each).
  std::function<double(int k, double contextTokens)> decodeSeconds;
  double share = 1;      // of the arrivals
};

struct SimResult {
  double ttftP50 = 0, ttftP90 = 0, ttftP99 = 0;
  double tpotP50 = 0, tpotP90 = 0, tpotP99 = 0;
  double e2eP50 = 0, e2eP90 = 0, e2eP99 = 0;  // arrival to last token
  double ttftMean = 0, tpotMean = 0;
  double requestsPerSecond = 0, outputTokensPerSecond = 0;
  uint64_t requests = 0;
  /// The percentile `p` (50, 90 or 99) of TTFT / TPOT.
  double ttft(int p) const { return p >= 99 ? ttftP99 : p >= 90 ? ttftP90 : ttftP50; }
  double tpot(int p) const { return p >= 99 ? tpotP99 : p >= 90 ? tpotP90 : tpotP50; }
};

/// Poisson arrivals at `rate` (seeded; same inputs, same result), routed by
/// smooth weighted round-robin on the shares, served with continuous
/// batching (a free group admits waiting requests up to its batch and runs
/// their prefill, else one decode step for the requests it holds).
/// Percentiles leave out the first 10% of requests (the empty start).
SimResult simulate(const std::vector<SimReplica> &replicas, double rate,
                   int64_t promptTokens, int64_t outputTokens, uint64_t requests,
                   uint64_t seed);

/// The same for `workload`: its arrivals (Poisson or gamma at `rate`, or
/// its trace with the gaps scaled to `rate`) and lengths (drawn from its
/// distributions, or the trace's). A prefill iteration's seconds scale
/// with its prompt tokens over `promptTokens` per request (the length
/// SimReplica::prefillSeconds was priced at). A trace is replayed once.
SimResult simulate(const std::vector<SimReplica> &replicas, double rate, const Workload &workload,
                   int64_t promptTokens, int64_t outputTokens, uint64_t requests, uint64_t seed);

//===----------------------------------------------------------------------===//
// The planner
//===----------------------------------------------------------------------===//

struct ReplicaStage {
  int firstLayer = 0, lastLayer = 0;
  const cluster::DeviceType *type = nullptr;  // of its devices
  std::vector<int> ranks;  // tp ranks
  double weightBytes = 0, kvBytesPerToken = 0, kvBytes = 0, capacityBytes = 0,
         peakBytes = 0;      // per device
};

struct Replica {
  const cluster::DeviceType *type = nullptr;  // the first stage's
  /// "L4", or for a pipeline across types "A100-SXM-40GB+T4" (stage order).
  std::string typeName;
  int tensorParallel = 1;
  std::vector<ReplicaStage> stages;
  int maxBatch = 1;          // all groups together
  std::string limitedBy;     // "memory", "tpot" or "batch cap"
  double capacity = 0;       // requests/s at maxBatch
  double prefillSeconds = 0; // one request
  double decodeStepSeconds = 0;
  double pricePerHour = 0;
  int unpriced = 0;          // devices without a price
  double share = 0, rate = 0;
  /// The replica as the simulator sees it; its iteration times read the
  /// models, cluster and options given to planServing, which must outlive it.
  SimReplica sim;
};

struct ServePlan {
  /// The rate planned for: the rate asked, or the capacity when that is
  /// less (the plan at capacity, with a note).
  double rate = 0;
  std::vector<Replica> replicas;
  SimResult predicted;
  double capacity = 0;
  /// The replicas' devices when picked, the whole cluster otherwise (idle
  /// devices are paid for too).
  double pricePerHour = 0;
  double pricePerMillionTokens = 0;
  int unpricedDevices = 0;
  double kvBytesPerToken = 0;  // whole model
  uint64_t seed = 0;
  /// Device types the plan leaves idle and why (no replica shape fits
  /// them, and the depth that would), for the user.
  std::vector<std::string> notes;
};

/// Plans serving `prefill` (the model costed at one sample of the prompt
/// length) and `decode` (the same model costed at one sample of one token;
/// the same layers) on `cluster`. Errors name the target that fails and by
/// how much.
llvm::Expected<ServePlan> planServing(const cost::ModelCost &prefill,
                                      const cost::ModelCost &decode,
                                      const cluster::Cluster &cluster, const Options &options);

/// The serving plan as a plan file (settings.mode "serve", Plan.serving).
plan::Plan exportServePlan(const ServePlan &plan, const cost::ModelCost &model,
                           const cluster::Cluster &cluster, const Options &options,
                           const ExportInfo &info);

} // namespace hetplan::planner::serve

#endif
