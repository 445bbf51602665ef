//===- StageTiming.cpp - how long a stage's work takes ----------------------===//
//
// Layer compute on each device class (prefix-summed tables), the
// once-per-step gradient all-reduce and optimizer step, and the
// activation transfer to the next stage.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Search.h"

#include <algorithm>
#include <cmath>

namespace hetplan::planner::detail {

const Table &Search::table(int c, int tp, int64_t samples) {
  auto &perTp = timing[c];
  if (size_t(tp) >= perTp.size())
    perTp.resize(tp + 1);
  auto &perClass = perTp[tp];
  if (size_t(samples) >= perClass.size())
    perClass.resize(samples + 1);
  auto &slot = perClass[samples];
  if (!slot) {
    slot = std::make_unique<Table>();
    slot->all.assign(L + 1, 0);
    const DeviceClass &cls = classes[c];
    for (int i = 0; i < L; ++i) {
      const auto &layer = model.layers[i];
      double t = samples ? cost::layerForwardTime(layer, double(samples), *cls.type,
                                                  opt.dtype,
                                                  cls.eff,
                                                  opt.profiles, tp) /
                               cls.speedFactor
                         : 0;
      slot->all[i + 1] = slot->all[i] + t;
    }
  }
  return *slot;
}

/// Forward seconds of layers [l, r] for `samples` samples on one worker
/// (a rank of its tensor-parallel group): compute, and the group's
/// forward collectives (`comm`); `backComm`: the backward pass's
/// collectives (the backward costs 2 x compute + backComm). Rings on the
/// worker's node link: an all-reduce moves 2 (tp-1)/tp of the bytes, an
/// all-gather (tp-1)/tp, each step paying the link latency.
double Search::forwardTime(int c, int tp, int64_t samples, int l, int r,
                           const StageDevices &sd, double *commOut,
                           double *backCommOut) {
  if (commOut)
    *commOut = 0;
  if (backCommOut)
    *backCommOut = 0;
  if (samples == 0)
    return 0;
  const Table &t = table(c, std::max(tp, 1), samples);
  double compute = t.all[r + 1] - t.all[l];
  if (tp <= 1)
    return compute;
  const Traffic &tr = traffic(tp);
  auto span = [&](const std::vector<double> &v) { return v[r + 1] - v[l]; };
  // The stack's collectives: a share of the link's peak, a floor per call.
  const cost::Efficiency &eff = classes[c].eff;
  double bw = sd.tpGBs * 1e9 * eff.link, lat = sd.tpLatencyUs * 1e-6, n = double(samples);
  double share = double(tp - 1) / tp, call = eff.collectiveSeconds;
  auto reduce = [&](double bytes, double count) {
    return bytes == 0 && count == 0
               ? 0
               : 2 * share * bytes * n / bw + (2.0 * (tp - 1) * lat + call) * count;
  };
  auto gather = [&](double bytes, double count) {
    return bytes == 0 && count == 0 ? 0
                                    : share * bytes * n / bw + (double(tp - 1) * lat + call) * count;
  };
  double comm = reduce(span(tr.forwardReduce), span(tr.forwardReduces)) +
                gather(span(tr.forwardGather), span(tr.forwardGathers));
  if (commOut)
    *commOut = comm;
  if (backCommOut)
    *backCommOut = reduce(span(tr.backwardReduce), span(tr.backwardReduces));
  return compute + comm;
}

double Search::tableExchange(const StageDevices &sd, int l, int r, int64_t samples) const {
  int D = sd.workers();
  if (D <= 1 || sparsePrefix[r + 1] == sparsePrefix[l] || samples <= 0)
    return 0;
  // Each worker's samples read (D - 1)/D of their rows from other owners.
  double bytes = sparseRows(l, r, double(samples)) / sd.tp * elementBytes * double(D - 1) / D;
  return bytes / (sd.ringGBs / sd.ringSharers * 1e9) + double(D - 1) * sd.ringLatencyUs * 1e-6;
}

double Search::allReduceTime(const StageDevices &sd, int l, int r, const Savers &sv) const {
  if (!training)
    return 0;
  // A vocab-parallel head: the gradient of each rank's weight columns is
  // summed (fp32) over the group once per step, the runtime keeping that
  // weight whole (an embedding shares it).
  double head = 0;
  if (double n = vocabHeadElements(l, r, sd.tp); n > 0)
    head = 2.0 * (sd.tp - 1) / sd.tp * n * 4.0 / (sd.tpGBs * 1e9) +
           2.0 * (sd.tp - 1) * sd.tpLatencyUs * 1e-6;
  int D = sd.workers();
  if (D <= 1)
    return head;
  // Gradients travel in their own format (Options::gradientDType): fp32
  // in PyTorch AMP's DDP and DeepSpeed's fp32_allreduce, whatever the
  // format of the forward pass.
  double gradElement = double(cost::dtypeBytes(opt.gradientDType.value_or(opt.dtype)));
  double tables = sparsePrefix[r + 1] - sparsePrefix[l];
  double gradBytes = (paramsPrefix[r + 1] - paramsPrefix[l] - tables) / sd.tp * gradElement;
  // ZeRO-1/2 reduce-scatter the gradients and all-gather the parameters:
  // the bytes of one all-reduce. ZeRO-3 all-gathers the parameters again
  // in the backward pass: 1.5x (ZeRO paper, section 7.2).
  double volume = sv.zero >= 3 ? 1.5 : 1.0;
  double ring = sd.ringGBs / sd.ringSharers * 1e9;
  double t = head + volume * (2.0 * (D - 1) / D * gradBytes / ring + 2.0 * (D - 1) * sd.ringLatencyUs * 1e-6);
  // Row-sharded tables (sparse embedding updates) need no sync: their
  // owners received their rows' gradients in the backward exchange.
  return t;
}

double Search::optimizerTime(const StageDevices &sd, int l, int r, const Savers &sv) const {
  if (!training)
    return 0;
  // ZeRO shards the update: each worker steps its 1/D of the parameters.
  // Sparse embedding updates step only the looked-up rows, each worker
  // those of its row shard.
  int D = std::max(1, sd.workers());
  double tables = sparsePrefix[r + 1] - sparsePrefix[l];
  double shard = (paramsPrefix[r + 1] - paramsPrefix[l] - tables) / sd.tp / (sv.zero >= 1 ? D : 1) +
                 (tables > 0 ? sparseRows(l, r, double(opt.globalBatch)) / sd.tp / D : 0);
  // The step reads and writes the model state: 16 bytes per parameter for
  // Adam, 8 for SGD, 12 for momentum SGD (cost::trainingBytesPerParam).
  double streamed = trainingBytesPerParameter();
  double slowest = 0;
  for (const auto &g : sd.groups) {
    const cluster::DeviceType &type = *classes[g.cls].type;
    const cost::Efficiency &eff = classes[g.cls].eff;
    double t;
    if (sv.offload) {
      // ZeRO-Offload: gradients down and parameters up over the device's
      // PCIe link, the step on the host's cores (shared by its ranks):
      // CPU-Adam's rate, scaled by the bytes the optimizer streams.
      double pcie = type.pcie.bandwidthGBs > 0 ? type.pcie.bandwidthGBs : kDefaultPcieGBs;
      t = 2.0 * shard * elementBytes / (pcie * 1e9) +
          shard * sd.ranksPerNode / opt.hostAdamParamsPerSecond * streamed / cost::kAdamBytesPerParam;
    } else {
      double bw = type.memoryBandwidthBytesPerSec() * eff.memory;
      t = shard * streamed * 2 / bw;  // read and write
    }
    slowest = std::max(slowest, t);
  }
  return slowest;
}

/// Activation transfer from stage a to stage b (one micro-batch).
double Search::sendTime(const StageDevices &a, const StageDevices &b, int lastLayer,
                        int64_t mb, double &bytesOut) {
  double perSample = model.layers[lastLayer].outputBytesPerSample;
  int wa = std::max(1, a.workers()), wb = std::max(1, b.workers());
  // Workers send their shares in parallel; the larger side's per-worker
  // share bounds the transfer.
  double samples = std::ceil(double(mb) / std::min(wa, wb));
  bytesOut = perSample * double(mb);
  int ra = a.groups[0].ranks[0][0], rb = b.groups[0].ranks[0][0];
  cluster::Link link = cluster.linkBetween(ra, rb);
  int tpa = std::max(a.tp, 1), tpb = std::max(b.tp, 1);
  if (opt.scatterGatherSends && tpa > 1 && tpa == tpb) {
    // Each rank sends its 1/tp slice to its counterpart (all in parallel,
    // the node's ranks sharing its network), then the receiving worker
    // all-gathers the slices over its tensor-parallel link.
    double slice = perSample * samples / tpa;
    double copies = cluster.devices[ra].node != cluster.devices[rb].node
                        ? std::max(std::min(a.ranksPerNode, b.ranksPerNode), 1)
                        : 1;
    double gather = (tpb - 1) * (b.tpLatencyUs * 1e-6 + slice / (b.tpGBs * 1e9));
    return link.transferSeconds(slice * copies) + gather;
  }
  // hetplan's runtime: the first rank of a worker sends the whole activation
  // to each of the receiving worker's tp ranks (docs/runtime.md,
  // "Tensor-parallel stages"). Between nodes, the senders of a node share
  // its network: a's workers on the node (not its tp ranks: they do not
  // send) times b's tp copies, bounded by b's ranks on its node.
  double copies = tpb;
  if (cluster.devices[ra].node != cluster.devices[rb].node)
    copies = std::max(std::min(double(std::max(a.ranksPerNode / tpa, 1) * tpb),
                               double(b.ranksPerNode)),
                      1.0);
  return link.transferSeconds(perSample * samples * copies);
}

} // namespace hetplan::planner::detail
