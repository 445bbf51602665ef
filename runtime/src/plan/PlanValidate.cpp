//===- PlanValidate.cpp - structural checks of a plan ---------------------===//
//
// What the runtime relies on when it runs a plan; see validatePlan in
// PlanFile.h. Each check stops at the first problem with one line that says
// where it is.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/Optimizers.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace hetplan::runtime {
namespace {

using std::to_string;

std::string layerName(const plan::Plan &p, uint32_t i) {
  const auto &name = p.model().layers(int(i)).name();
  return "layer " + to_string(i) + (name.empty() ? "" : " ('" + name + "')");
}

const char *kindName(int kind) {
  if (!plan::Instruction::Kind_IsValid(kind))
    return "unknown kind";
  // Kind_Name returns a reference to a string that lives as long as the program.
  return plan::Instruction::Kind_Name(plan::Instruction::Kind(kind)).c_str();
}

bool perMicroBatch(plan::Instruction::Kind kind) {
  switch (kind) {
  case plan::Instruction::FORWARD:
  case plan::Instruction::BACKWARD:
  case plan::Instruction::SEND_ACTIVATION:
  case plan::Instruction::RECV_ACTIVATION:
  case plan::Instruction::SEND_GRADIENT:
  case plan::Instruction::RECV_GRADIENT:
    return true;
  default:
    return false;
  }
}

struct Owner {
  int stage = -1;
  int worker = -1;
};

/// A serving plan (docs/plan-format.md, "Serving plans"): no training
/// stages; replicas whose stages cover the layers in order on ranks of their
/// device type that no other replica uses; shares that sum to 1.
bool validateServing(const plan::Plan &p, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  const auto &s = p.serving();
  const uint32_t numRanks = uint32_t(p.cluster().devices_size());
  const uint32_t numLayers = uint32_t(p.model().layers_size());
  if (!p.has_serving())
    return fail("a serving plan (settings.mode serve) without serving settings");
  if (p.stages_size() > 0)
    return fail("a serving plan lists " + to_string(p.stages_size()) +
                " training/inference stages (its replicas carry their own)");
  if (!(s.rate_rps() > 0) || s.prompt_tokens() < 1 || s.output_tokens() < 1)
    return fail("serving.rate_rps, prompt_tokens and output_tokens must be positive");
  if (s.replicas_size() == 0)
    return fail("the serving plan has no replicas");
  std::vector<int> owner(numRanks, -1);
  double shares = 0;
  for (int i = 0; i < s.replicas_size(); ++i) {
    const auto &r = s.replicas(i);
    const std::string at = "replica " + to_string(i);
    if (r.index() != uint32_t(i))
      return fail(at + " has index " + to_string(r.index()));
    if (r.tensor_parallel() == 0)
      return fail(at + " has tensor_parallel 0 (1 when there is none)");
    if (r.stages_size() == 0)
      return fail(at + " has no stages");
    if (r.max_batch() == 0)
      return fail(at + " serves no request at once (max_batch 0)");
    if (!(r.share() >= 0) || r.share() > 1 + 1e-9)
      return fail(at + " has share " + std::to_string(r.share()) + " (0..1)");
    shares += r.share();
    for (int k = 0; k < r.stages_size(); ++k) {
      const auto &st = r.stages(k);
      const std::string where = at + " stage " + to_string(k);
      uint32_t expected = k == 0 ? 0 : r.stages(k - 1).last_layer() + 1;
      if (st.first_layer() != expected || st.last_layer() < st.first_layer() ||
          st.last_layer() >= numLayers)
        return fail(where + " has layers " + to_string(st.first_layer()) + ".." +
                    to_string(st.last_layer()) + ", expected to start at " + to_string(expected) +
                    " within the model's " + to_string(numLayers) + " layers");
      if (st.first_node() != p.model().layers(int(st.first_layer())).first_node() ||
          st.last_node() != p.model().layers(int(st.last_layer())).last_node())
        return fail(where + " has nodes " + to_string(st.first_node()) + ".." +
                    to_string(st.last_node()) + " that are not its layers' nodes");
      if (uint32_t(st.ranks_size()) != r.tensor_parallel())
        return fail(where + " has " + to_string(st.ranks_size()) +
                    " ranks, but the replica's tensor_parallel is " +
                    to_string(r.tensor_parallel()));
      for (uint32_t rank : st.ranks()) {
        if (rank >= numRanks)
          return fail(where + ": rank " + to_string(rank) + " does not exist (the cluster has " +
                      to_string(numRanks) + " devices)");
        if (owner[rank] >= 0)
          return fail(where + ": rank " + to_string(rank) + " already serves replica " +
                      to_string(owner[rank]));
        owner[rank] = i;
        const std::string &type = st.device_type().empty() ? r.device_type() : st.device_type();
        if (p.cluster().devices(int(rank)).type() != type)
          return fail(where + ": rank " + to_string(rank) + " is a " +
                      p.cluster().devices(int(rank)).type() + ", not a " + type);
      }
    }
    if (r.stages(r.stages_size() - 1).last_layer() != numLayers - 1)
      return fail(at + "'s stages end at layer " +
                  to_string(r.stages(r.stages_size() - 1).last_layer()) + ", but the model has " +
                  to_string(numLayers) + " layers");
  }
  if (std::fabs(shares - 1) > 1e-6)
    return fail("the replicas' shares of the request rate sum to " + std::to_string(shares) +
                ", not 1");
  for (const auto &rank : p.ranks())
    if (rank.program_size() > 0)
      return fail("rank " + to_string(rank.rank()) +
                  " has a program in a serving plan (serving plans carry none yet)");
  return true;
}

/// The model: layers tile node_names.
bool validateModel(const plan::Plan &p, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  const auto &model = p.model();
  const uint32_t numNodes = uint32_t(model.node_names_size());
  const uint32_t numLayers = uint32_t(model.layers_size());
  if (numNodes == 0)
    return fail("the model lists no nodes (ModelRef.node_names is empty)");
  if (numLayers == 0)
    return fail("the model has no layers (ModelRef.layers is empty)");
  for (uint32_t i = 0; i < numLayers; ++i) {
    const auto &layer = model.layers(int(i));
    uint32_t expected = i == 0 ? 0 : model.layers(int(i - 1)).last_node() + 1;
    if (layer.first_node() > layer.last_node())
      return fail(layerName(p, i) + " has nodes " + to_string(layer.first_node()) +
                  ".." + to_string(layer.last_node()) + " (first after last)");
    if (layer.last_node() >= numNodes)
      return fail(layerName(p, i) + " ends at node " + to_string(layer.last_node()) +
                  ", but the model has " + to_string(numNodes) + " nodes");
    if (layer.first_node() != expected)
      return fail(layerName(p, i) + " starts at node " + to_string(layer.first_node()) +
                  ", expected " + to_string(expected) +
                  " (layers must be contiguous and cover every node)");
  }
  if (model.layers(int(numLayers - 1)).last_node() != numNodes - 1)
    return fail("the layers end at node " +
                to_string(model.layers(int(numLayers - 1)).last_node()) +
                ", but the model has " + to_string(numNodes) +
                " nodes (layers must cover every node)");
  return true;
}

/// A whole-batch plan never splits the batch; inputs' and outputs' batch
/// axes exist.
bool validateBatching(const plan::Plan &p, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  if (p.settings().whole_batch()) {
    if (p.settings().micro_batches() != 1)
      return fail("the plan keeps the batch whole but has " +
                  to_string(p.settings().micro_batches()) + " micro-batches");
    for (const auto &stage : p.stages())
      if (stage.workers_size() != 1)
        return fail("the plan keeps the batch whole but stage " + to_string(stage.index()) +
                    " has " + to_string(stage.workers_size()) + " workers");
  }
  for (const auto *ios : {&p.settings().inputs(), &p.settings().outputs()})
    for (const auto &io : *ios)
      if (io.batch_axis() < -1 || io.batch_axis() >= io.dims_size())
        return fail("'" + io.name() + "' has batch axis " + std::to_string(io.batch_axis()) +
                    " but rank " + to_string(io.dims_size()));
  return true;
}

/// The cluster: devices and ranks numbered 0..n-1.
bool validateCluster(const plan::Plan &p, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  const auto &cluster = p.cluster();
  const uint32_t numRanks = uint32_t(cluster.devices_size());
  if (numRanks == 0)
    return fail("the cluster has no devices");
  for (uint32_t i = 0; i < numRanks; ++i) {
    const auto &device = cluster.devices(int(i));
    if (device.rank() != i)
      return fail("device " + to_string(i) + " has rank " + to_string(device.rank()) +
                  " (devices must be listed by rank 0.." + to_string(numRanks - 1) + ")");
    if (cluster.nodes_size() > 0 && device.node() >= uint32_t(cluster.nodes_size()))
      return fail("device " + to_string(i) + " is on node " + to_string(device.node()) +
                  ", but the cluster has " + to_string(cluster.nodes_size()) + " nodes");
  }
  for (int n = 0; n < cluster.nodes_size(); ++n)
    for (uint32_t r : cluster.nodes(n).ranks())
      if (r >= numRanks)
        return fail("node " + to_string(n) + " lists rank " + to_string(r) +
                    ", but the cluster has " + to_string(numRanks) + " devices");
  if (uint32_t(p.ranks_size()) != numRanks)
    return fail("the plan has " + to_string(p.ranks_size()) + " ranks for " +
                to_string(numRanks) + " devices (one rank per device)");
  for (uint32_t i = 0; i < numRanks; ++i)
    if (p.ranks(int(i)).rank() != i)
      return fail("ranks entry " + to_string(i) + " has rank " +
                  to_string(p.ranks(int(i)).rank()) + " (ranks must be listed 0.." +
                  to_string(numRanks - 1) + ")");
  return true;
}

/// Training-memory settings (docs/plan-format.md). Stage.recompute in an
/// inference plan is ignored: inference keeps nothing for a backward.
bool validateMemorySettings(const plan::Settings &settings, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  if (settings.zero_stage() > 3)
    return fail("settings.zero_stage is " + to_string(settings.zero_stage()) +
                "; ZeRO stages are 0 (off), 1 (optimizer state sharded), 2 (also gradients) and 3 "
                "(also parameters)");
  if (settings.mode() != "train" && settings.zero_stage() > 0)
    return fail("settings.zero_stage is " + to_string(settings.zero_stage()) +
                " in an inference plan (ZeRO shards training state: optimizer state, gradients, parameters)");
  if (settings.mode() != "train" && settings.offload_optimizer())
    return fail("settings.offload_optimizer is set in an inference plan (there is no optimizer state)");
  // "" in a training plan is Adam: plans written before the choice say nothing else.
  if (settings.mode() == "train" && !settings.optimizer().empty() && !parseOptimizer(settings.optimizer()))
    return fail("settings.optimizer is '" + settings.optimizer() + "'; this runtime runs " + optimizerNames());
  return true;
}

/// Stage s: the layers after the previous stage's, its nodes, and workers
/// that own existing ranks (recorded in `owner`) and split a micro-batch of
/// the size the other stages split (`microBatchSize`, -1 before the first).
bool validateStage(const plan::Plan &p, uint32_t s, std::vector<Owner> &owner,
                   int64_t &microBatchSize, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  const auto &model = p.model();
  const uint32_t numLayers = uint32_t(model.layers_size());
  const uint32_t numRanks = uint32_t(p.cluster().devices_size());
  const uint32_t numStages = uint32_t(p.stages_size());
  const auto &stage = p.stages(int(s));
  const std::string where = "stage " + to_string(s);
  if (stage.index() != s)
    return fail(where + " has index " + to_string(stage.index()) +
                " (stages must be listed in pipeline order 0.." +
                to_string(numStages - 1) + ")");
  uint32_t expected = s == 0 ? 0 : p.stages(int(s - 1)).last_layer() + 1;
  if (stage.first_layer() > stage.last_layer())
    return fail(where + " has layers " + to_string(stage.first_layer()) + ".." +
                to_string(stage.last_layer()) + " (first after last)");
  if (stage.last_layer() >= numLayers)
    return fail(where + " ends at layer " + to_string(stage.last_layer()) +
                ", but the model has " + to_string(numLayers) + " layers");
  if (stage.first_layer() != expected)
    return fail(where + " starts at layer " + to_string(stage.first_layer()) +
                ", expected " + to_string(expected) +
                " (stages must cover the layers in order, without gaps or overlap)");
  uint32_t firstNode = model.layers(int(stage.first_layer())).first_node();
  uint32_t lastNode = model.layers(int(stage.last_layer())).last_node();
  if (stage.first_node() != firstNode || stage.last_node() != lastNode)
    return fail(where + " has nodes " + to_string(stage.first_node()) + ".." +
                to_string(stage.last_node()) + ", but its layers hold nodes " +
                to_string(firstNode) + ".." + to_string(lastNode));
  if (stage.tensor_parallel() == 0)
    return fail(where + " has tensor_parallel 0 (1 when there is none)");
  if (stage.workers_size() == 0)
    return fail(where + " has no workers");

  std::vector<std::pair<int64_t, int64_t>> shares;  // (offset, samples)
  for (int w = 0; w < stage.workers_size(); ++w) {
    const auto &worker = stage.workers(w);
    const std::string at = where + " worker " + to_string(w);
    if (uint32_t(worker.ranks_size()) != stage.tensor_parallel())
      return fail(at + " has " + to_string(worker.ranks_size()) +
                  " ranks, but the stage's tensor_parallel is " +
                  to_string(stage.tensor_parallel()));
    for (uint32_t r : worker.ranks()) {
      if (r >= numRanks)
        return fail(at + ": rank " + to_string(r) + " does not exist (the cluster has " +
                    to_string(numRanks) + " devices)");
      if (owner[r].stage >= 0)
        return fail(at + ": rank " + to_string(r) + " already belongs to stage " +
                    to_string(owner[r].stage) + " worker " + to_string(owner[r].worker));
      owner[r] = {int(s), w};
      const auto &rank = p.ranks(int(r));
      if (rank.stage() != s || rank.worker() != uint32_t(w))
        return fail("rank " + to_string(r) + " says stage " + to_string(rank.stage()) +
                    " worker " + to_string(rank.worker()) + ", but " + at + " lists it");
    }
    if (worker.samples() < 0 || worker.sample_offset() < 0)
      return fail(at + " has samples " + to_string(worker.samples()) + " at offset " +
                  to_string(worker.sample_offset()));
    shares.emplace_back(worker.sample_offset(), worker.samples());
  }
  std::sort(shares.begin(), shares.end());
  int64_t next = 0;
  for (const auto &[offset, samples] : shares) {
    if (offset != next)
      return fail(where + ": the workers' shares of a micro-batch " +
                  (offset < next ? "overlap" : "leave a gap") + " at sample " +
                  to_string(std::min(offset, next)));
    next = offset + samples;
  }
  if (next == 0)
    return fail(where + ": its workers process no samples");
  if (microBatchSize >= 0 && next != microBatchSize)
    return fail(where + " splits micro-batches of " + to_string(next) +
                " samples, stage 0 of " + to_string(microBatchSize));
  microBatchSize = next;
  return true;
}

/// Instruction i of rank r (in stage s): a known kind, an existing
/// micro-batch, nodes inside its stage, peers in the stage the kind talks
/// to, and a predicted time span.
bool validateInstruction(const plan::Plan &p, uint32_t r, uint32_t s, int i,
                         const std::vector<Owner> &owner, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  const uint32_t numRanks = uint32_t(p.cluster().devices_size());
  const uint32_t numStages = uint32_t(p.stages_size());
  const uint32_t microBatches = p.settings().micro_batches();
  const auto &stage = p.stages(int(s));
  const auto &ins = p.ranks(int(r)).program(i);
  const int kind = int(ins.kind());
  const std::string at = "rank " + to_string(r) + " instruction " + to_string(i) +
                         " (" + kindName(kind) + ")";
  if (!plan::Instruction::Kind_IsValid(kind) ||
      ins.kind() == plan::Instruction::KIND_UNSPECIFIED)
    return fail("rank " + to_string(r) + " instruction " + to_string(i) +
                " has no known kind (" + to_string(kind) + ")");
  if (perMicroBatch(ins.kind()) && ins.micro_batch() >= microBatches)
    return fail(at + " is for micro-batch " + to_string(ins.micro_batch()) +
                ", but the plan has " + to_string(microBatches));
  if ((ins.kind() == plan::Instruction::FORWARD ||
       ins.kind() == plan::Instruction::BACKWARD) &&
      (ins.first_node() > ins.last_node() || ins.first_node() < stage.first_node() ||
       ins.last_node() > stage.last_node()))
    return fail(at + " runs nodes " + to_string(ins.first_node()) + ".." +
                to_string(ins.last_node()) + ", outside its stage's nodes " +
                to_string(stage.first_node()) + ".." + to_string(stage.last_node()));
  int peerStage = -2;  // which stage the peers must be in; -2: any
  const char *which = "";
  switch (ins.kind()) {
  case plan::Instruction::SEND_ACTIVATION:
  case plan::Instruction::RECV_GRADIENT:
    peerStage = int(s) + 1;
    which = "the next stage";
    break;
  case plan::Instruction::RECV_ACTIVATION:
  case plan::Instruction::SEND_GRADIENT:
    peerStage = int(s) - 1;
    which = "the previous stage";
    break;
  case plan::Instruction::ALLREDUCE_GRADIENTS:
    peerStage = int(s);
    which = "its own stage";
    break;
  default:
    break;
  }
  if (peerStage != -2 && peerStage != int(s) &&
      (peerStage < 0 || peerStage >= int(numStages)))
    return fail(at + ": stage " + to_string(s) + " has no " +
                (peerStage < 0 ? "previous" : "next") + " stage");
  if (peerStage != -2 && peerStage != int(s) && ins.peers_size() == 0)
    return fail(at + " has no peers");
  for (uint32_t peer : ins.peers()) {
    if (peer >= numRanks)
      return fail(at + ": peer " + to_string(peer) + " does not exist (the cluster has " +
                  to_string(numRanks) + " devices)");
    if (peer == r)
      return fail(at + ": the rank is its own peer");
    if (owner[peer].stage < 0)
      return fail(at + ": peer " + to_string(peer) + " is idle (in no stage)");
    if (peerStage != -2 && owner[peer].stage != peerStage)
      return fail(at + ": peer " + to_string(peer) + " is in stage " +
                  to_string(owner[peer].stage) + ", not in " + which);
  }
  const double start = ins.predicted_start_s(), end = ins.predicted_end_s();
  if (!std::isfinite(start) || !std::isfinite(end) || start < 0 || end < start)
    return fail(at + " is predicted from " + std::to_string(start) + " s to " +
                std::to_string(end) + " s");
  return true;
}

} // namespace

bool isIdleRank(const plan::Plan &plan, uint32_t rank) {
  for (const auto &stage : plan.stages())
    for (const auto &worker : stage.workers())
      for (uint32_t r : worker.ranks())
        if (r == rank)
          return false;
  return true;
}

bool validatePlan(const plan::Plan &p, std::string &error) {
  auto fail = [&](std::string message) {
    error = std::move(message);
    return false;
  };
  if (p.schema_version() != kPlanSchemaVersion)
    return fail("schema_version is " + to_string(p.schema_version()) +
                ", this runtime reads version " + to_string(kPlanSchemaVersion));
  if (!validateModel(p, error) || !validateBatching(p, error) || !validateCluster(p, error))
    return false;

  const uint32_t microBatches = p.settings().micro_batches();
  if (microBatches == 0)
    return fail("settings.micro_batches is 0");

  if (p.settings().mode() == "serve")
    return validateServing(p, error);
  if (p.has_serving())
    return fail("serving settings in a " + p.settings().mode() + " plan (only mode serve has them)");
  if (!validateMemorySettings(p.settings(), error))
    return false;

  // Stages: cover the layers in order; workers own existing ranks.
  const uint32_t numLayers = uint32_t(p.model().layers_size());
  const uint32_t numRanks = uint32_t(p.cluster().devices_size());
  const uint32_t numStages = uint32_t(p.stages_size());
  if (numStages == 0)
    return fail("the plan has no stages");
  std::vector<Owner> owner(numRanks);
  int64_t microBatchSize = -1;
  for (uint32_t s = 0; s < numStages; ++s)
    if (!validateStage(p, s, owner, microBatchSize, error))
      return false;
  if (p.stages(int(numStages - 1)).last_layer() != numLayers - 1)
    return fail("the stages end at layer " +
                to_string(p.stages(int(numStages - 1)).last_layer()) + ", but the model has " +
                to_string(numLayers) + " layers (stages must cover every layer)");

  // Programs.
  for (uint32_t r = 0; r < numRanks; ++r) {
    const auto &rank = p.ranks(int(r));
    if (owner[r].stage < 0) {
      if (rank.program_size() > 0)
        return fail("rank " + to_string(r) + " is in no stage (idle) but has " +
                    to_string(rank.program_size()) + " instructions");
      continue;
    }
    const uint32_t s = uint32_t(owner[r].stage);
    for (int i = 0; i < rank.program_size(); ++i)
      if (!validateInstruction(p, r, s, i, owner, error))
        return false;
  }
  return checkPlanPrograms(p, error);
}

} // namespace hetplan::runtime
