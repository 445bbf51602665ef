//===- ServePlanner.cpp - LLM serving plans on mixed GPUs -----------------===//
//
// docs/serving.md gives the model and its sources. The request-level
// simulation is in ServeSimulation.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/include/hetplan/runtime/Checked.h"
#include "passes/planner/ServePlanner.h"

#include "hetplan/runtime/Plan.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <functional>

namespace hetplan::planner::serve {

using llvm::formatv;

//===----------------------------------------------------------------------===//
// Pricing a replica
//===----------------------------------------------------------------------===//

namespace {

std::string ms(double s) { return formatv("{0:F2} ms", s * 1e3).str(); }
std::string gibText(double b) { return formatv("{0:F2} GiB", b / double(1ull << 30)).str(); }

/// A replica shape: `pp` stages of `tp` devices, on one device type, or
/// with `stageTypes` one type per stage (a pipeline across GPU types).
struct Shape {
  const cluster::DeviceType *type = nullptr;
  int tp = 1, pp = 1;
  std::vector<int> lastLayer;  // per stage
  std::vector<const cluster::DeviceType *> stageTypes;  // empty: every stage `type`

  const cluster::DeviceType &typeOf(int s) const {
    return stageTypes.empty() ? *type : *stageTypes[size_t(s)];
  }
  /// "T4", or the types in pipeline order: "A100-SXM-40GB+L4+T4".
  std::string typeName() const {
    if (stageTypes.empty())
      return type->name;
    std::string name;
    const cluster::DeviceType *last = nullptr;
    for (const cluster::DeviceType *t : stageTypes) {
      if (t != last)
        name += (name.empty() ? "" : "+") + t->name;
      last = t;
    }
    return name;
  }
};

class Pricer {
public:
  Pricer(const cost::ModelCost &prefill, const cost::ModelCost &decode,
         const cluster::Cluster &cluster, const Options &options)
      : prefill(prefill), decode(decode), cluster(cluster), opt(options),
        elementBytes(cost::dtypeBytes(options.dtype)) {
    for (const cost::LayerCost &l : prefill.layers)
      kvPerToken.push_back(l.kvCacheBytesPerSample / double(options.promptTokens));
  }

  double kvBytesPerToken() const {
    double s = 0;
    for (double k : kvPerToken)
      s += k;
    return s;
  }

  /// Layers split into `pp` contiguous stages of about equal weight bytes.
  std::vector<int> split(int pp) const {
    int L = int(decode.layers.size());
    double total = 0;
    for (const auto &l : decode.layers)
      total += l.parameterBytes + 1;
    std::vector<int> last;
    double acc = 0;
    int l = 0;
    for (int s = 0; s < pp; ++s) {
      double target = total * double(s + 1) / pp;
      int remainingStages = pp - s - 1;
      // At least one layer; leave one for each later stage.
      acc += decode.layers[size_t(l)].parameterBytes + 1;
      ++l;
      while (l < L - remainingStages && (s == pp - 1 || acc + decode.layers[size_t(l)].parameterBytes / 2 < target)) {
        acc += decode.layers[size_t(l)].parameterBytes + 1;
        ++l;
      }
      last.push_back(l - 1);
    }
    return last;
  }

  /// Layers split into `pp` contiguous non-empty stages whose largest sum
  /// of `weight` is least (exact: dynamic programming over cut points).
  static std::vector<int> splitMinMax(const std::vector<double> &weight, int pp) {
    int L = int(weight.size());
    std::vector<double> prefix(size_t(L) + 1, 0);
    for (int i = 0; i < L; ++i)
      prefix[size_t(i) + 1] = prefix[size_t(i)] + weight[size_t(i)];
    constexpr double inf = std::numeric_limits<double>::infinity();
    // cost[s][j]: the best largest stage of layers [0, j) in s + 1 stages.
    std::vector<std::vector<double>> cost(size_t(pp), std::vector<double>(size_t(L) + 1, inf));
    std::vector<std::vector<int>> cut(size_t(pp), std::vector<int>(size_t(L) + 1, 0));
    for (int j = 1; j <= L; ++j)
      cost[0][size_t(j)] = prefix[size_t(j)];
    for (int s = 1; s < pp; ++s)
      for (int j = s + 1; j <= L; ++j)
        for (int i = s; i < j; ++i) {
          double c = std::max(cost[size_t(s - 1)][size_t(i)], prefix[size_t(j)] - prefix[size_t(i)]);
          if (c < cost[size_t(s)][size_t(j)]) {
            cost[size_t(s)][size_t(j)] = c;
            cut[size_t(s)][size_t(j)] = i;
          }
        }
    std::vector<int> last(static_cast<size_t>(pp), 0);
    int j = L;
    for (int s = pp - 1; s >= 0; --s) {
      last[size_t(s)] = j - 1;
      j = s > 0 ? cut[size_t(s)][size_t(j)] : 0;
    }
    return last;
  }

  /// Layers split into `pp` stages of about equal decode time on `type`
  /// (one token for `batch` requests, their KV cache read at the mean
  /// context): the first and last layers hold the embedding and the
  /// vocabulary projection, whose bytes and time differ, so the split
  /// by time is uneven in bytes and the split by bytes uneven in time.
  std::vector<int> splitByDecodeTime(const cluster::DeviceType &type, int tp, int pp,
                                     int batch) const {
    return splitMinMax(layerDecodeSeconds(type, tp, batch), pp);
  }

  /// Per layer: seconds of one decode token for `batch` requests on
  /// `type`, their KV cache read at the mean context.
  std::vector<double> layerDecodeSeconds(const cluster::DeviceType &type, int tp,
                                         int batch) const {
    cost::Efficiency eff = efficiency(type);
    double context = double(batch) * (double(opt.promptTokens) + double(opt.outputTokens) / 2);
    std::vector<double> seconds;
    for (size_t i = 0; i < decode.layers.size(); ++i) {
      double kvBytes = stageKvPerToken(int(i), int(i), tp) * context;
      seconds.push_back(cost::layerForwardTime(decode.layers[i], batch, type, opt.dtype, eff,
                                               opt.profiles, tp) +
                        kvBytes / (type.memoryBandwidthBytesPerSec() * eff.memory));
    }
    return seconds;
  }

  /// The device's efficiencies with the serving engine's per-kernel host
  /// cost (decode replays CUDA graphs: docs/serving.md).
  cost::Efficiency efficiency(const cluster::DeviceType &type) const {
    cost::Efficiency eff = cost::efficiency(type, cluster.stack());
    // A stack that measured its kernels on this type keeps its own figure.
    auto own = cluster.stack().achieved.find(type.name);
    bool measured = own != cluster.stack().achieved.end() && own->second.kernelUs;
    if (opt.kernelSeconds >= 0 && !measured)
      eff.launchSeconds = opt.kernelSeconds;
    return eff;
  }

  bool layerSplits(const cost::LayerCost &l, int tp) const {
    for (const auto &u : l.tensorParallelUnits)
      if (u.fits(tp))
        return true;
    return false;
  }

  double stageWeightBytes(int first, int last, int tp) const {
    double bytes = 0;
    for (int i = first; i <= last; ++i) {
      const cost::LayerCost &l = decode.layers[size_t(i)];
      double split = 0;
      for (size_t k = 0; k < l.ops.size(); ++k)
        if (l.splitAt(k, tp))
          split += l.ops[k].weightBytes;
      bytes += l.parameterBytes - std::min(split, l.parameterBytes) * (1.0 - 1.0 / tp);
      for (auto [owner, elements] : l.tiedParameters)
        if (owner < first || owner > last)
          bytes += double(elements) * elementBytes;
    }
    return bytes;
  }

  double stageKvPerToken(int first, int last, int tp) const {
    double bytes = 0;
    for (int i = first; i <= last; ++i)
      bytes += kvPerToken[size_t(i)] / (layerSplits(decode.layers[size_t(i)], tp) ? tp : 1);
    return bytes;
  }

  /// Collective seconds of `samples` samples through layers [first, last]
  /// on a `tp` group (ring on the link between its ranks), with the
  /// per-sample traffic of `model`.
  double tpSeconds(const cost::ModelCost &model, int first, int last, int tp, double samples,
                   const cluster::Link &link, const cost::Efficiency &eff) const {
    if (tp <= 1)
      return 0;
    double s = 0;
    for (int i = first; i <= last; ++i)
      for (const auto &u : model.layers[size_t(i)].tensorParallelUnits) {
        if (!u.fits(tp))
          continue;
        double bytes = u.forwardElementsPerSample * elementBytes * samples;
        double factor = (u.pair ? 2.0 : 1.0) * double(tp - 1) / tp;
        s += factor * bytes / (link.bandwidthGBs * 1e9 * eff.link) +
             u.forwardCollectives * ((u.pair ? 2 : 1) * (tp - 1) * link.latencyUs * 1e-6 +
                                     eff.collectiveSeconds);
      }
    return s;
  }

  /// Seconds of one stage's forward of k samples of `model` (the model
  /// costed at the prompt length for prefill, at one token for decode):
  /// compute, the tensor-parallel collectives, the send to the next stage.
  double stageForward(const cost::ModelCost &model, const Shape &sh, int s, int k,
                      const cluster::Link &tpLink, const cluster::Link &next) const {
    int first = s == 0 ? 0 : sh.lastLayer[size_t(s - 1)] + 1, last = sh.lastLayer[size_t(s)];
    const cluster::DeviceType &type = sh.typeOf(s);
    cost::Efficiency eff = efficiency(type);
    double t = 0;
    for (int i = first; i <= last; ++i)
      t += cost::layerForwardTime(model.layers[size_t(i)], k, type, opt.dtype, eff,
                                  opt.profiles, sh.tp);
    t += tpSeconds(model, first, last, sh.tp, k, tpLink, eff);
    if (s + 1 < sh.pp)
      t += next.transferSeconds(model.layers[size_t(last)].outputBytesPerSample * k);
    return t;
  }

  /// Seconds of one stage for a prefill of k requests.
  double prefillStage(const Shape &sh, int s, int k, const cluster::Link &tpLink,
                      const cluster::Link &next) const {
    if (opt.prefillChunk <= 0)
      return stageForward(prefill, sh, s, k, tpLink, next);
    // R runs of c tokens whose caches hold 0, c, ..., (R - 1) c tokens of
    // each request: the cache term is linear in the context, so their sum
    // is one decode step over k c R (R - 1) / 2 cached tokens plus R - 1
    // more run forwards.
    double c = double(opt.prefillChunk);
    double R = std::ceil(double(std::max<int64_t>(opt.promptTokens, 1)) / c);
    return decodeStage(sh, s, k, double(k) * c * R * (R - 1) / 2, tpLink, next) +
           (R - 1) * stageForward(decode, sh, s, k, tpLink, next);
  }

  /// Seconds of one stage for one decode token of k requests whose
  /// contexts sum to `context` tokens: the one-token forward (weights read
  /// once for the batch), plus attention over the KV cache, memory-bound
  /// (its reads) or compute-bound (2 FLOPs per cached element).
  double decodeStage(const Shape &sh, int s, int k, double context,
                     const cluster::Link &tpLink, const cluster::Link &next) const {
    int first = s == 0 ? 0 : sh.lastLayer[size_t(s - 1)] + 1, last = sh.lastLayer[size_t(s)];
    const cluster::DeviceType &type = sh.typeOf(s);
    cost::Efficiency eff = efficiency(type);
    double t = stageForward(decode, sh, s, k, tpLink, next);
    double kvBytes = stageKvPerToken(first, last, sh.tp) * context;
    double kvFlops = 2.0 * kvBytes / elementBytes;
    t += std::max(kvBytes / (type.memoryBandwidthBytesPerSec() * eff.memory),
                  kvFlops / (type.peakFlops(opt.dtype) * eff.matrix));
    return t;
  }

  const cost::ModelCost &prefill, &decode;
  const cluster::Cluster &cluster;
  const Options &opt;
  double elementBytes;
  std::vector<double> kvPerToken;
};

/// Device groups of one type: tp ranks in one node, node by node.
std::vector<std::vector<int>> tpGroups(const cluster::Cluster &cluster,
                                       const cluster::DeviceType *type, int tp,
                                       int limitDevices) {
  std::vector<std::vector<int>> groups;
  int used = 0;
  for (const cluster::Node &node : cluster.nodes) {
    std::vector<int> ranks;
    for (int r : node.devices)
      if (cluster.devices[size_t(r)].type == type)
        ranks.push_back(r);
    for (size_t i = 0; i + size_t(tp) <= ranks.size() && used + tp <= limitDevices; i += size_t(tp)) {
      groups.emplace_back(ranks.begin() + long(i), ranks.begin() + long(i + size_t(tp)));
      used += tp;
    }
  }
  return groups;
}

/// Why a shape was refused, for the error when none fits.
struct Refusal {
  double memoryShortBytes = std::numeric_limits<double>::infinity();
  std::string memoryWhere;
  double bestTpot = std::numeric_limits<double>::infinity();
  std::string tpotWhere;
  double bestTtft = std::numeric_limits<double>::infinity();
  std::string ttftWhere;
};

/// The stages of replica shape `sh` on `stageRanks`, into `out`, with the
/// memory that does not depend on the requests (weights, the CUDA context,
/// prefill activations). Every stage holds the KV cache of every request in
/// flight: returns how many requests memory allows, or -1 (noted in `why`)
/// when one request per group does not fit.
int placeStages(const Pricer &pr, const Shape &sh, const std::vector<std::vector<int>> &stageRanks,
                int prefillBatch, const std::string &where, Replica &out, Refusal &why) {
  const Options &opt = pr.opt;
  const int64_t P = opt.promptTokens, O = opt.outputTokens;
  int memBatch = std::numeric_limits<int>::max();
  for (int s = 0; s < sh.pp; ++s) {
    const cluster::DeviceType &type = sh.typeOf(s);
    double capacity = double(type.memoryBytes()) * opt.memoryUtilization;
    double context = type.kind == cluster::DeviceKind::GPU ? opt.deviceContextBytes : 0;
    int first = s == 0 ? 0 : sh.lastLayer[size_t(s - 1)] + 1, last = sh.lastLayer[size_t(s)];
    ReplicaStage st;
    st.firstLayer = first;
    st.lastLayer = last;
    st.ranks = stageRanks[size_t(s)];
    st.weightBytes = pr.stageWeightBytes(first, last, sh.tp);
    st.kvBytesPerToken = pr.stageKvPerToken(first, last, sh.tp);
    st.capacityBytes = double(type.memoryBytes());
    st.type = &type;
    // Prefill activations: the largest op's input and output at the
    // largest prefill batch.
    double workspace = 0;
    for (int i = first; i <= last; ++i)
      workspace = std::max(workspace, 2 * pr.prefill.layers[size_t(i)].largestActivationBytesPerSample *
                                          prefillBatch / sh.tp);
    double fixed = st.weightBytes + context + workspace;
    double perRequest = st.kvBytesPerToken * double(P + O);
    double free = capacity - fixed - perRequest * sh.pp;  // one request per group at least
    if (free < 0) {
      if (-free < why.memoryShortBytes) {
        why.memoryShortBytes = -free;
        why.memoryWhere = where + formatv(", stage {0}", s).str();
      }
      return -1;
    }
    int fit = perRequest > 0 ? int(std::min(1e9, std::floor((capacity - fixed) / perRequest))) : 1 << 30;
    memBatch = std::min(memBatch, fit);
    st.peakBytes = fixed;  // KV added once max batch is known
    out.stages.push_back(std::move(st));
  }
  return memBatch;
}

/// Prices `sh` on the devices in `stageRanks` (for the links); false when
/// it fits no request or misses a latency target at any batch.
bool priceReplica(const std::shared_ptr<const Pricer> &pricer, const Shape &sh,
                  const std::vector<std::vector<int>> &stageRanks, Replica &out,
                  Refusal &why) {
  const Pricer &pr = *pricer;
  const Options &opt = pr.opt;
  const cluster::Cluster &cl = pr.cluster;
  std::string where = formatv("{0} x{1} (tp {2}, {3} stage(s))", sh.typeName(), sh.tp * sh.pp,
                              sh.tp, sh.pp).str();
  std::vector<cluster::Link> tpLink, next;
  for (int s = 0; s < sh.pp; ++s) {
    const auto &ranks = stageRanks[size_t(s)];
    tpLink.push_back(ranks.size() > 1 ? cl.linkBetween(ranks[0], ranks[1]) : cluster::Link{1e9, 0, ""});
    next.push_back(s + 1 < sh.pp ? cl.linkBetween(ranks[0], stageRanks[size_t(s + 1)][0])
                                 : cluster::Link{1e9, 0, ""});
  }
  out = Replica();
  out.type = &sh.typeOf(0);
  out.typeName = sh.typeName();
  out.tensorParallel = sh.tp;
  const int64_t P = opt.promptTokens, O = opt.outputTokens;
  const int prefillBatch = int(std::max<int64_t>(1, opt.maxPrefillTokens / P));
  int memBatch = placeStages(pr, sh, stageRanks, prefillBatch, where, out, why);
  if (memBatch < 0)
    return false;
  // The iteration times keep the pricer alive (Replica::sim outlives the
  // planning call).
  auto prefillSeconds = [=](int k) {
    double t = 0;
    for (int s = 0; s < sh.pp; ++s)
      t += pricer->prefillStage(sh, s, k, tpLink[size_t(s)], next[size_t(s)]);
    return t;
  };
  // A group's decode step: through every stage once; with every group busy
  // each stage serves `pp` groups per step, so the slowest stage bounds it.
  auto decodeSeconds = [=](int k, double contextTokens) {
    double sum = 0, worst = 0;
    for (int s = 0; s < sh.pp; ++s) {
      double t = pricer->decodeStage(sh, s, k, contextTokens, tpLink[size_t(s)], next[size_t(s)]);
      sum += t;
      worst = std::max(worst, t);
    }
    return std::max(sum, sh.pp * worst);
  };
  // Per group of b requests: TPOT ~ decode step at mean context + the
  // prefills of the b requests that replace it spread over O tokens;
  // capacity = b / (O * TPOT) per group.
  auto tpotAt = [&](int b) {
    int k = std::min(b, prefillBatch);
    return decodeSeconds(b, double(b) * (double(P) + double(O) / 2)) +
           double(b) * prefillSeconds(k) / k / double(std::max<int64_t>(1, O));
  };
  double ttft = prefillSeconds(1);
  if (opt.ttftTarget > 0 && ttft > opt.ttftTarget) {
    if (ttft < why.bestTtft) {
      why.bestTtft = ttft;
      why.ttftWhere = where;
    }
    return false;
  }
  int maxGroup = std::max(1, std::min(memBatch / sh.pp, opt.maxBatchPerGroup));
  out.limitedBy = memBatch / sh.pp <= opt.maxBatchPerGroup ? "memory" : "batch cap";
  // Leave a tenth of the target for queueing and prefill bursts.
  double tpotBound = opt.tpotTarget > 0 ? 0.9 * opt.tpotTarget : 0;
  int b = maxGroup;
  if (tpotBound > 0 && tpotAt(1) > tpotBound) {
    if (tpotAt(1) < why.bestTpot) {
      why.bestTpot = tpotAt(1);
      why.tpotWhere = where;
    }
    return false;
  }
  if (tpotBound > 0 && tpotAt(b) > tpotBound) {
    int lo = 1, hi = b;  // tpotAt(lo) fits, tpotAt(hi) does not
    while (hi - lo > 1) {
      int mid = (lo + hi) / 2;
      (tpotAt(mid) <= tpotBound ? lo : hi) = mid;
    }
    b = lo;
    out.limitedBy = "tpot";
  }
  out.maxBatch = b * sh.pp;
  out.prefillSeconds = ttft;
  out.decodeStepSeconds = decodeSeconds(b, double(b) * (double(P) + double(O) / 2));
  out.capacity = double(sh.pp) * double(b) / (double(O) * tpotAt(b));
  for (ReplicaStage &st : out.stages) {
    st.kvBytes = st.kvBytesPerToken * double(P + O) * out.maxBatch;
    st.peakBytes += st.kvBytes;
  }
  for (const auto &st : out.stages)
    for (int r : st.ranks) {
      (void)r;
      if (st.type->pricePerHourUSD)
        out.pricePerHour += *st.type->pricePerHourUSD;
      else
        ++out.unpriced;
    }
  out.sim.groups = sh.pp;
  out.sim.groupBatch = b;
  out.sim.prefillBatch = prefillBatch;
  out.sim.prefillSeconds = prefillSeconds;
  out.sim.decodeSeconds = decodeSeconds;
  return true;
}

/// A replica shape that fits and meets the targets on one device type.
struct ShapeOption {
  Shape shape;
  Replica sample;           // priced on the first devices
  int available = 0;        // replicas the cluster's devices can form
};

/// One device type: every feasible shape, and the best (the most
/// requests/s per device), which a fixed cluster uses throughout.
struct TypeChoice {
  const cluster::DeviceType *type = nullptr;
  int devices = 0;          // of this type in the cluster
  bool optional = false;
  std::vector<ShapeOption> options;
  int best = -1;
  /// Why the type has no shape when memory is what stops it (the depth
  /// that would fit), for the error or the plan's notes.
  std::string idleNote;
};

llvm::Error servingError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
}

/// The device types of the cluster in order of first rank, with how many
/// devices each has and whether --pick-devices may leave them out.
std::vector<TypeChoice> deviceTypes(const cluster::Cluster &cluster, const Options &opt) {
  std::vector<TypeChoice> types;
  for (const cluster::Device &d : cluster.devices) {
    auto it = std::find_if(types.begin(), types.end(),
                           [&](const TypeChoice &t) { return t.type == d.type; });
    if (it == types.end()) {
      TypeChoice t;
      t.type = d.type;
      t.optional = opt.pickDevices &&
                   (opt.optionalTypes.empty() || opt.optionalTypes.count(d.type));
      types.push_back(t);
      it = types.end() - 1;
    }
    ++it->devices;
  }
  return types;
}

/// Every replica shape of type `t` (tensor-parallel degree within a node,
/// a power of two; pipeline depth, every count; or the pinned ones) that
/// fits and meets the targets, each with the better of two layer splits
/// (equal bytes, equal decode time), and the best: the most requests/s
/// from the type's devices, as a fixed cluster uses the type whole (12 T4s
/// as two 6-stage replicas rather than one of 8 and 4 idle). With
/// --pick-devices an optional type keeps only the shapes no other beats
/// on both replica size and requests/s per device, so the count walk
/// stays small.
void priceShapes(TypeChoice &t, const std::shared_ptr<const Pricer> &pricer, int L,
                 Refusal &why) {
  const Pricer &pr = *pricer;
  const Options &opt = pr.opt;
  const cluster::Cluster &cluster = pr.cluster;
  int perNode = 0;
  for (const cluster::Node &node : cluster.nodes) {
    int n = 0;
    for (int r : node.devices)
      n += cluster.devices[size_t(r)].type == t.type;
    perNode = std::max(perNode, n);
  }
  auto pinnedOr = [](int pinned, int most, bool powersOfTwo) {
    std::vector<int> out;
    if (pinned) {
      if (pinned <= most)
        out.push_back(pinned);
    } else {
      for (int k = 1; k <= most; k = powersOfTwo ? 2 * k : k + 1)
        out.push_back(k);
    }
    return out;
  };
  const int prefillBatch = int(std::max<int64_t>(1, opt.maxPrefillTokens / opt.promptTokens));
  std::vector<int> tps = pinnedOr(opt.pinTensorParallel, std::min(perNode, opt.maxTensorParallel), true);
  for (int tp : tps) {
    auto groups = tpGroups(cluster, t.type, tp, t.devices);
    int most = std::min({L, std::max(opt.maxPipelineStages, opt.pinPipelineStages), int(groups.size())});
    for (int pp : pinnedOr(opt.pinPipelineStages, most, false)) {
      std::vector<std::vector<int>> stageRanks(groups.begin(), groups.begin() + pp);
      Replica best;
      Shape bestShape;
      bool any = false;
      std::vector<int> bytesSplit = pr.split(pp);
      for (const std::vector<int> &split :
           {bytesSplit, pr.splitByDecodeTime(*t.type, tp, pp, std::min(32, opt.maxBatchPerGroup))}) {
        if (any && split == bytesSplit)
          continue;
        Shape sh{t.type, tp, pp, split};
        Replica r;
        if (!priceReplica(pricer, sh, stageRanks, r, why))
          continue;
        if (!any || r.capacity > best.capacity * 1.0001) {
          best = std::move(r);
          bestShape = sh;
          any = true;
        }
      }
      if (any)
        t.options.push_back({bestShape, std::move(best), int(groups.size()) / pp});
    }
  }
  auto total = [](const ShapeOption &o) { return o.available * o.sample.capacity; };
  auto perDevice = [](const ShapeOption &o) {
    return o.sample.capacity / double(o.shape.tp * o.shape.pp);
  };
  auto pickBest = [&] {
    t.best = -1;
    for (size_t i = 0; i < t.options.size(); ++i) {
      const ShapeOption &o = t.options[i];
      if (t.best < 0) {
        t.best = int(i);
        continue;
      }
      const ShapeOption &b = t.options[size_t(t.best)];
      // Within 0.5%: the smaller replica (more replicas, less at stake).
      if (total(o) > total(b) * 1.005 ||
          (total(o) >= total(b) / 1.005 && perDevice(o) > perDevice(b) * 1.005))
        t.best = int(i);
    }
  };
  pickBest();
  if (t.optional && t.options.size() > 1) {
    const ShapeOption keep = t.options[size_t(t.best)];
    std::vector<ShapeOption> front;
    for (const ShapeOption &o : t.options) {
      bool beaten = false;
      for (const ShapeOption &x : t.options) {
        int xs = x.shape.tp * x.shape.pp, os = o.shape.tp * o.shape.pp;
        if (&x != &o && xs <= os && perDevice(x) >= perDevice(o) &&
            (xs < os || perDevice(x) > perDevice(o)))
          beaten = true;
      }
      if (!beaten || (o.shape.tp == keep.shape.tp && o.shape.pp == keep.shape.pp))
        front.push_back(o);
    }
    t.options = std::move(front);
    pickBest();
  }
  if (!t.options.empty() || opt.pinPipelineStages || opt.pinTensorParallel)
    return;
  // Nothing fits on the devices there are. If memory is why (the deepest
  // shapes there are do not fit either), would a deeper pipeline? The
  // shallowest that fits memory, on as many devices as it takes.
  for (int tp : tps) {
    int pp = std::min(L, int(tpGroups(cluster, t.type, tp, t.devices).size()));
    Shape sh{t.type, tp, pp, pr.split(pp)};
    Replica r;
    Refusal ignore;
    if (pp > 0 &&
        placeStages(pr, sh, std::vector<std::vector<int>>(size_t(pp)), prefillBatch, "", r, ignore) >= 0)
      return;  // a latency target, not memory
  }
  for (int devices = 1; devices <= L * std::max(1, tps.back()); ++devices)
    for (int tp : tps) {
      if (devices % tp || devices / tp > L || devices <= t.devices)
        continue;
      int pp = devices / tp;
      Shape sh{t.type, tp, pp, pr.split(pp)};
      Replica r;
      Refusal ignore;
      if (placeStages(pr, sh, std::vector<std::vector<int>>(size_t(pp)), prefillBatch, "", r, ignore) >= 0) {
        t.idleNote = formatv("no replica of {0} fits in memory on its {1} device(s): the shallowest "
                             "that fits is {2} stage(s) of tp {3}, {4} devices",
                             t.type->name, t.devices, pp, tp, devices).str();
        return;
      }
    }
  t.idleNote = formatv("no replica of {0} fits in memory, even with one layer per stage ({1} "
                       "stages of tp {2})",
                       t.type->name, L, tps.back()).str();
}

/// The error when no device type has a usable replica shape: the pinned
/// shape exists nowhere, nothing fits in memory, or the targets are missed.
llvm::Error noReplica(const Refusal &why, const Options &opt, int L,
                      const std::vector<TypeChoice> &types) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if ((opt.pinPipelineStages || opt.pinTensorParallel) && why.memoryShortBytes == inf &&
      why.bestTpot == inf && why.bestTtft == inf)
    return servingError(formatv("--pin pp={0},tp={1}: no device type has that replica shape ({2} layers; "
                                "tensor parallelism within one node)",
                                std::max(1, opt.pinPipelineStages), std::max(1, opt.pinTensorParallel), L)
                            .str());
  if (why.memoryShortBytes < inf && why.bestTpot == inf && why.bestTtft == inf) {
    std::string m = formatv("no replica fits in memory: the closest, {0}, needs {1} more for its "
                            "weights and one request's KV cache ({2} tokens)",
                            why.memoryWhere, gibText(why.memoryShortBytes),
                            opt.promptTokens + opt.outputTokens).str();
    for (const TypeChoice &t : types)
      if (!t.idleNote.empty())
        m += "; " + t.idleNote;
    return servingError(m);
  }
  std::string m = "no replica meets the latency targets:";
  if (why.bestTtft < inf)
    m += formatv(" TTFT target {0} is missed by the fastest prefill, {1} on {2} ({3} over)",
                 ms(opt.ttftTarget), ms(why.bestTtft), why.ttftWhere,
                 ms(why.bestTtft - opt.ttftTarget)).str();
  if (why.bestTpot < inf)
    m += formatv("{0} TPOT target {1} (with a tenth kept for queueing: {2}) is missed by "
                 "the fastest decode at batch 1, {3} on {4} ({5} over)",
                 why.bestTtft < inf ? ";" : "",
                 ms(opt.tpotTarget), ms(0.9 * opt.tpotTarget), ms(why.bestTpot),
                 why.tpotWhere, ms(why.bestTpot - 0.9 * opt.tpotTarget)).str();
  if (why.memoryShortBytes < inf)
    m += formatv("; other shapes do not fit in memory ({0} short on {1})",
                 gibText(why.memoryShortBytes), why.memoryWhere).str();
  return servingError(m);
}

/// A choice: per usable type, which of its shapes and how many replicas.
using Choice = std::vector<std::pair<int, int>>;

/// A replica pipelined across device types, one device per stage.
struct MixedPipeline {
  Shape shape;
  std::vector<std::vector<int>> stageRanks;
  Replica sample;
};

/// One pipeline over `ranks` (pipeline order; at most one per layer), one
/// device a stage, its layers split so that the slowest stage's decode
/// time (at a batch of 32) is least while every stage holds its weights,
/// workspace and the KV cache of `inFlight` requests per group (exact over
/// the cut points: dynamic programming). Stages on faster or bigger
/// devices take more layers. False when no split fits or a target is
/// missed.
bool mixedPipelineAt(const std::shared_ptr<const Pricer> &pricer, std::vector<int> ranks,
                     int inFlight, MixedPipeline &out, Refusal &why) {
  const Pricer &pr = *pricer;
  const Options &opt = pr.opt;
  const cluster::Cluster &cl = pr.cluster;
  const int L = int(pr.decode.layers.size());
  if (int(ranks.size()) > L)
    ranks.resize(size_t(L));
  const int pp = int(ranks.size());
  if (pp < 2)
    return false;
  const double P = double(opt.promptTokens), O = double(opt.outputTokens);
  const int batch = std::min(32, opt.maxBatchPerGroup);
  const int prefillBatch = int(std::max<int64_t>(1, opt.maxPrefillTokens / opt.promptTokens));
  // Per layer: bytes (tied parameters counted where they are read: an
  // over-count when their owner shares the stage, checked exactly below),
  // KV bytes per request, prefill workspace.
  std::vector<double> bytes, kv, work;
  for (const cost::LayerCost &l : pr.decode.layers) {
    double b = l.parameterBytes;
    for (auto [owner, elements] : l.tiedParameters)
      b += double(elements) * pr.elementBytes;
    bytes.push_back(b);
  }
  for (size_t i = 0; i < pr.prefill.layers.size(); ++i) {
    kv.push_back(pr.kvPerToken[i] * (P + O));
    work.push_back(2 * pr.prefill.layers[i].largestActivationBytesPerSample * prefillBatch);
  }
  // Per type: decode seconds per layer at `batch`, as prefix sums.
  std::map<const cluster::DeviceType *, std::vector<double>> timePrefix;
  for (int r : ranks) {
    const cluster::DeviceType *type = cl.devices[size_t(r)].type;
    if (timePrefix.count(type))
      continue;
    std::vector<double> prefix{0};
    for (double t : pr.layerDecodeSeconds(*type, 1, batch))
      prefix.push_back(prefix.back() + t);
    timePrefix[type] = std::move(prefix);
  }
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(pp), std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(pp), std::vector<int>(size_t(L) + 1, -1));
  for (int s = 0; s < pp; ++s) {
    const cluster::DeviceType *type = cl.devices[size_t(ranks[size_t(s)])].type;
    double capacity = double(type->memoryBytes()) * opt.memoryUtilization -
                      (type->kind == cluster::DeviceKind::GPU ? opt.deviceContextBytes : 0);
    const std::vector<double> &t = timePrefix[type];
    // Stage s holds layers [i, j): at least one layer, one left per later stage.
    for (int j = s + 1; j <= L - (pp - 1 - s); ++j) {
      double b = 0, k = 0, w = 0;
      for (int i = j - 1; i >= s; --i) {
        b += bytes[size_t(i)];
        k += kv[size_t(i)];
        w = std::max(w, work[size_t(i)]);
        if (b + w + k * pp * inFlight > capacity)
          break;  // more layers only need more
        double before = s == 0 ? (i == 0 ? 0 : inf) : best[size_t(s - 1)][size_t(i)];
        double c = std::max(before, t[size_t(j)] - t[size_t(i)]);
        if (c < best[size_t(s)][size_t(j)]) {
          best[size_t(s)][size_t(j)] = c;
          cut[size_t(s)][size_t(j)] = i;
        }
      }
    }
  }
  if (best[size_t(pp - 1)][size_t(L)] == inf)
    return false;
  Shape sh;
  sh.tp = 1;
  sh.pp = pp;
  sh.lastLayer.assign(size_t(pp), 0);
  for (int s = pp - 1, j = L; s >= 0; --s) {
    sh.lastLayer[size_t(s)] = j - 1;
    j = cut[size_t(s)][size_t(j)];
  }
  for (int r : ranks) {
    sh.stageTypes.push_back(cl.devices[size_t(r)].type);
    out.stageRanks.push_back({r});
  }
  sh.type = sh.stageTypes.front();
  out.shape = sh;
  return priceReplica(pricer, out.shape, out.stageRanks, out.sample, why);
}

/// The split that serves most: room for 1, 2, 4, ... requests per group
/// (more room for the KV cache, or more layers on the fastest stages).
bool mixedPipeline(const std::shared_ptr<const Pricer> &pricer, const std::vector<int> &ranks,
                   MixedPipeline &out, Refusal &why) {
  bool any = false;
  for (int inFlight = 1; inFlight <= pricer->opt.maxBatchPerGroup; inFlight *= 2) {
    MixedPipeline m;
    if (!mixedPipelineAt(pricer, ranks, inFlight, m, why))
      continue;
    if (!any || m.sample.capacity > out.sample.capacity * 1.0001)
      out = std::move(m);
    any = true;
  }
  return any;
}

/// How many replicas of each usable type: all of them for a fixed cluster
/// (and for types that are not optional), else the cheapest counts whose
/// capacity, loaded to a share of it, covers the rate.
struct ReplicaChoice {
  std::shared_ptr<const Pricer> pricer;
  const cluster::Cluster &cluster;
  const Options &opt;
  std::vector<TypeChoice *> usable;
  uint64_t requests;  // simulated
  std::vector<MixedPipeline> mixed;  // beside the single-type replicas

  /// The plan of `choice`: its replicas priced on their devices, the rate
  /// split by capacity, and the simulated latencies.
  ServePlan build(const Choice &choice) const {
    ServePlan plan;
    plan.seed = opt.seed;
    plan.kvBytesPerToken = pricer->kvBytesPerToken();
    for (size_t i = 0; i < usable.size(); ++i) {
      TypeChoice &t = *usable[i];
      const Shape &shape = t.options[size_t(choice[i].first)].shape;
      auto groups = tpGroups(cluster, t.type, shape.tp, t.devices);
      for (int c = 0; c < choice[i].second; ++c) {
        std::vector<std::vector<int>> stageRanks(groups.begin() + long(c * shape.pp),
                                                 groups.begin() + long((c + 1) * shape.pp));
        Replica r;
        Refusal ignore;
        priceReplica(pricer, shape, stageRanks, r, ignore);
        plan.replicas.push_back(std::move(r));
      }
    }
    for (const MixedPipeline &m : mixed) {
      Replica r;
      Refusal ignore;
      priceReplica(pricer, m.shape, m.stageRanks, r, ignore);
      plan.replicas.push_back(std::move(r));
    }
    for (const Replica &r : plan.replicas) {
      plan.capacity += r.capacity;
      plan.pricePerHour += r.pricePerHour;
      plan.unpricedDevices += r.unpriced;
    }
    // Water-filling on capacity: every replica at the same utilization.
    for (Replica &r : plan.replicas) {
      r.share = r.capacity / plan.capacity;
      r.rate = r.share * opt.rate;
      r.sim.share = r.share;
    }
    std::vector<SimReplica> sims;
    for (const Replica &r : plan.replicas)
      sims.push_back(r.sim);
    plan.rate = opt.rate;
    plan.predicted = simulate(sims, opt.rate, opt.workload, opt.promptTokens, opt.outputTokens,
                              requests, opt.seed);
    double tokensPerHour = opt.rate * double(opt.outputTokens) * 3600;  // at the planned rate
    plan.pricePerMillionTokens = plan.pricePerHour / tokensPerHour * 1e6;
    return plan;
  }

  /// The targets `p` misses at the percentile asked for ("" when none).
  std::string missed(const ServePlan &p) const {
    std::string m;
    int q = opt.percentile;
    if (opt.ttftTarget > 0 && p.predicted.ttft(q) > opt.ttftTarget)
      m += formatv("TTFT p{0} {1} exceeds the target {2} by {3}", q, ms(p.predicted.ttft(q)),
                   ms(opt.ttftTarget), ms(p.predicted.ttft(q) - opt.ttftTarget)).str();
    if (opt.tpotTarget > 0 && p.predicted.tpot(q) > opt.tpotTarget)
      m += (m.empty() ? "" : "; ") +
           formatv("TPOT p{0} {1} exceeds the target {2} by {3}", q, ms(p.predicted.tpot(q)),
                   ms(opt.tpotTarget), ms(p.predicted.tpot(q) - opt.tpotTarget)).str();
    return m;
  }

  /// The whole cluster, paid whole (idle devices too).
  llvm::Expected<ServePlan> fixedCluster(const Choice &all) const {
    ServePlan plan = build(all);
    int unpriced = 0;
    plan.pricePerHour = cluster.totalPricePerHour(unpriced);
    plan.unpricedDevices = unpriced;
    plan.pricePerMillionTokens =
        plan.pricePerHour / (opt.rate * double(opt.outputTokens) * 3600) * 1e6;
    if (std::string m = missed(plan); !m.empty())
      return servingError(formatv("at {0:F2} req/s on the whole cluster (capacity {1:F2} req/s): {2}",
                                  opt.rate, plan.capacity, m).str());
    if (opt.budget > 0 && plan.pricePerHour > opt.budget)
      return servingError(formatv("the budget ${0:F2}/h is too small: the cluster costs ${1:F2}/h "
                                  "(${2:F2}/h over); --pick-devices chooses the cheapest part of it",
                                  opt.budget, plan.pricePerHour, plan.pricePerHour - opt.budget).str());
    return plan;
  }

  /// Cheapest choice whose capacity at `load` covers the rate (empty when
  /// none): enumerate, per optional type, each shape and count (a few
  /// types, a few shapes, tens of replicas: small); the other types at
  /// their best shape, whole. A type runs one shape.
  Choice cheapest(double load) const {
    Choice best;
    double bestPrice = std::numeric_limits<double>::infinity(), bestCap = 0;
    Choice choice(usable.size(), {0, 0});
    uint64_t visited = 0;
    std::function<void(size_t, double, double)> walk = [&](size_t i, double cap, double cost) {
      if (cost > bestPrice + 1e-9 || ++visited > 4000000)
        return;
      if (i == usable.size()) {
        if (cap * load >= opt.rate && (cost < bestPrice - 1e-9 ||
                                       (cost < bestPrice + 1e-9 && cap > bestCap))) {
          best = choice;
          bestPrice = cost;
          bestCap = cap;
        }
        return;
      }
      const TypeChoice *t = usable[i];
      if (!t->optional) {
        const ShapeOption &o = t->options[size_t(t->best)];
        choice[i] = {t->best, o.available};
        walk(i + 1, cap + o.available * o.sample.capacity,
             cost + o.available * o.sample.pricePerHour);
        return;
      }
      choice[i] = {0, 0};
      walk(i + 1, cap, cost);  // none of this type
      for (size_t k = 0; k < t->options.size(); ++k) {
        const ShapeOption &o = t->options[k];
        for (int c = 1; c <= o.available; ++c) {
          choice[i] = {int(k), c};
          walk(i + 1, cap + c * o.sample.capacity, cost + c * o.sample.pricePerHour);
          if (cap + c * o.sample.capacity >= opt.rate / load)
            break;  // more of this shape only costs more
        }
      }
      choice[i] = {0, 0};
    };
    walk(0, 0, 0);
    return best;
  }

  /// --pick-devices: the cheapest choice meeting the targets, loaded to
  /// 90% of its capacity, else to less.
  llvm::Expected<ServePlan> pickDevices() const {
    std::string lastMiss;
    for (double load : {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2}) {
      Choice best = cheapest(load);
      if (best.empty())
        break;
      ServePlan plan = build(best);
      std::string m = missed(plan);
      if (m.empty()) {
        if (opt.budget > 0 && plan.pricePerHour > opt.budget)
          return servingError(formatv("the budget ${0:F2}/h is too small: the cheapest devices meeting "
                                      "{1:F2} req/s within the targets cost ${2:F2}/h (${3:F2}/h, {4:F0}% "
                                      "over)",
                                      opt.budget, opt.rate, plan.pricePerHour,
                                      plan.pricePerHour - opt.budget,
                                      100 * (plan.pricePerHour - opt.budget) / opt.budget).str());
        return plan;
      }
      lastMiss = formatv("loaded to {0:F0}% of capacity: {1}", 100 * load, m).str();
    }
    return servingError(formatv("no choice of the devices available meets the targets at {0:F2} req/s "
                                "(the last tried, {1})",
                                opt.rate, lastMiss.empty() ? "none: not enough capacity" : lastMiss).str());
  }
};

/// The replicas of `--layout`, checked against the model and cluster and
/// priced; errors name the replica and stage.
llvm::Expected<std::vector<MixedPipeline>>
layoutReplicas(const std::shared_ptr<const Pricer> &pricer,
               const std::vector<ServeLayoutReplica> &layout) {
  const cluster::Cluster &cl = pricer->cluster;
  const int L = int(pricer->decode.layers.size());
  const int N = int(cl.devices.size());
  std::vector<int> owner(size_t(N), -1);
  std::vector<MixedPipeline> out;
  for (size_t i = 0; i < layout.size(); ++i) {
    const ServeLayoutReplica &r = layout[i];
    std::string at = formatv("--layout: replica {0}", i).str();
    MixedPipeline m;
    m.shape.tp = r.tensorParallel;
    m.shape.pp = int(r.stages.size());
    for (size_t k = 0; k < r.stages.size(); ++k) {
      const ServeLayoutStage &st = r.stages[k];
      std::string where = at + formatv(", stage {0}", k).str();
      const cluster::DeviceType *type = nullptr;
      for (int rank : st.ranks) {
        if (rank >= N)
          return servingError(formatv("{0}: rank {1} does not exist (the cluster has {2} devices)",
                                      where, rank, N).str());
        if (owner[size_t(rank)] >= 0)
          return servingError(formatv("{0}: rank {1} already serves replica {2}", where, rank,
                                      owner[size_t(rank)]).str());
        owner[size_t(rank)] = int(i);
        const cluster::Device &d = cl.devices[size_t(rank)];
        if (type && d.type != type)
          return servingError(formatv("{0}: its ranks are of different types ({1}, {2}): a "
                                      "tensor-parallel group is one type",
                                      where, type->name, d.type->name).str());
        type = d.type;
        if (d.node != cl.devices[size_t(st.ranks[0])].node)
          return servingError(formatv("{0}: ranks {1} and {2} are on different nodes: tensor "
                                      "parallelism stays within a node",
                                      where, st.ranks[0], rank).str());
      }
      if (st.lastLayer >= L)
        return servingError(formatv("{0}: last_layer {1}, but the model has {2} layers (0-{3})",
                                    where, st.lastLayer, L, L - 1).str());
      m.shape.stageTypes.push_back(type);
      m.shape.lastLayer.push_back(st.lastLayer);
      m.stageRanks.push_back(st.ranks);
    }
    if (m.shape.lastLayer.back() != L - 1)
      return servingError(formatv("{0}: its stages end at layer {1}, but the model has {2} layers "
                                  "(the last stage's last_layer must be {3})",
                                  at, m.shape.lastLayer.back(), L, L - 1).str());
    m.shape.type = m.shape.stageTypes.front();
    Refusal why;
    if (!priceReplica(pricer, m.shape, m.stageRanks, m.sample, why)) {
      constexpr double inf = std::numeric_limits<double>::infinity();
      if (why.memoryShortBytes < inf)
        return servingError(formatv("{0} does not fit in memory: {1} needs {2} more for its "
                                    "weights and one request's KV cache",
                                    at, why.memoryWhere, gibText(why.memoryShortBytes)).str());
      return servingError(at + " misses the latency targets: " +
                          llvm::toString(noReplica(why, pricer->opt, L, {})));
    }
    out.push_back(std::move(m));
  }
  return out;
}

} // namespace

llvm::Expected<ServePlan> planServing(const cost::ModelCost &prefill,
                                      const cost::ModelCost &decode,
                                      const cluster::Cluster &cluster, const Options &opt) {
  if (prefill.layers.size() != decode.layers.size() || prefill.layers.empty())
    return servingError(formatv("the model groups into {0} layers at the prompt length and {1} at one "
                                "token: cannot price decode layer by layer",
                                prefill.layers.size(), decode.layers.size()).str());
  if (opt.rate <= 0 || opt.promptTokens < 1 || opt.outputTokens < 1)
    return servingError("--rate, --prompt-len and --output-len must be positive");
  auto pricer = std::make_shared<const Pricer>(prefill, decode, cluster, opt);
  if (pricer->kvBytesPerToken() <= 0)
    return servingError("the model has no attention whose keys and values hetplan recognizes (Q·K^T "
                        "feeding a softmax, or an Attention node): no KV cache to serve with");

  std::vector<TypeChoice> types = deviceTypes(cluster, opt);
  Refusal why;
  int L = int(decode.layers.size());
  std::vector<MixedPipeline> given;
  if (!opt.layout.empty()) {
    auto replicas = layoutReplicas(pricer, opt.layout);
    if (!replicas)
      return replicas.takeError();
    given = std::move(*replicas);
  } else {
    for (TypeChoice &t : types)
      priceShapes(t, pricer, L, why);
  }
  std::vector<TypeChoice *> usable;
  for (TypeChoice &t : types)
    if (t.best >= 0)
      usable.push_back(&t);
  // A fixed cluster's devices no single-type replica uses: those of types
  // no replica fits on, and those the per-type replicas leave over (fewer
  // than a replica's shape needs). Of two or more types, they serve as one
  // pipeline across types beside the per-type replicas, when that fits.
  std::vector<MixedPipeline> mixed;
  std::string mixedNote;
  if (opt.layout.empty() && !opt.pickDevices && !opt.pinPipelineStages && !opt.pinTensorParallel) {
    std::set<int> used;
    for (const TypeChoice &t : types) {
      if (t.best < 0)
        continue;
      const ShapeOption &o = t.options[size_t(t.best)];
      auto groups = tpGroups(cluster, t.type, o.shape.tp, t.devices);
      for (size_t g = 0; g < groups.size() && g < size_t(o.available * o.shape.pp); ++g)
        used.insert(groups[g].begin(), groups[g].end());
    }
    std::vector<int> ranks;
    std::vector<std::string> names, leftNames;
    for (const TypeChoice &t : types) {
      int left = 0;
      for (const cluster::Device &d : cluster.devices)
        left += d.type == t.type && !used.count(d.rank);
      if (left == 0)
        continue;
      names.push_back(t.type->name);
      if (t.best >= 0)
        leftNames.push_back(formatv("{0} {1}", left, t.type->name).str());
    }
    for (const cluster::Device &d : cluster.devices)
      if (!used.count(d.rank))
        ranks.push_back(d.rank);
    MixedPipeline m;
    Refusal mixedWhy;
    if (names.size() >= 2 && mixedPipeline(pricer, ranks, m, mixedWhy)) {
      mixedNote = leftNames.empty()
                      ? formatv("no replica of {0} alone fits: their {1} devices serve as one pipeline "
                                "across the types ({2})",
                                llvm::join(names, " or "), m.shape.pp, m.shape.typeName()).str()
                      : formatv("the {0} device(s) no single-type replica uses ({1}) serve as one "
                                "pipeline across the types ({2}) beside the per-type replicas",
                                m.shape.pp, llvm::join(leftNames, ", ") +
                                    (names.size() > leftNames.size() ? ", and the types no replica fits on" : ""),
                                m.shape.typeName()).str();
      mixed.push_back(std::move(m));
      for (int r : ranks)
        used.insert(r);
    }
    // Devices still idle (a type too small to pipeline with what is left
    // over): one pipeline across every device of the cluster, when it
    // serves more than the per-type replicas beside the idle devices.
    if (used.size() < cluster.devices.size() && types.size() >= 2) {
      double current = 0;
      for (const TypeChoice *t : usable)
        current += t->options[size_t(t->best)].available * t->options[size_t(t->best)].sample.capacity;
      for (const MixedPipeline &x : mixed)
        current += x.sample.capacity;
      std::vector<int> every;
      for (const cluster::Device &d : cluster.devices)
        every.push_back(d.rank);
      MixedPipeline whole;
      Refusal wholeWhy;
      bool okWhole = int(every.size()) <= L && mixedPipeline(pricer, every, whole, wholeWhy);
      if (okWhole &&
          whole.sample.capacity > current * 1.0001) {
        mixedNote = formatv("one pipeline across all {0} devices ({1}) serves {2:F2} req/s, more than "
                            "per-type replicas with {3} device(s) idle ({4:F2} req/s)",
                            whole.shape.pp, whole.shape.typeName(), whole.sample.capacity,
                            cluster.devices.size() - used.size(), current).str();
        mixed.assign(1, std::move(whole));
        usable.clear();
      }
    }
  }
  if (!given.empty()) {
    mixed = std::move(given);
    mixedNote.clear();
  }
  if (usable.empty() && mixed.empty())
    return noReplica(why, opt, L, types);

  // Prices unknown: refused when picking (the cheapest would be meaningless).
  uint64_t requests = opt.simulatedRequests
                          ? opt.simulatedRequests
                          : uint64_t(std::clamp(opt.rate * 120.0, 2000.0, 20000.0));

  Choice all;
  double allCapacity = 0;
  for (TypeChoice *t : usable) {
    const ShapeOption &o = t->options[size_t(t->best)];
    all.push_back({t->best, o.available});
    double most = 0;
    for (const ShapeOption &x : t->options)
      most = std::max(most, x.available * x.sample.capacity);
    allCapacity += t->optional ? most : o.available * o.sample.capacity;
  }
  for (const MixedPipeline &m : mixed)
    allCapacity += m.sample.capacity;
  // A rate above what every device serves: the plan at capacity, every
  // type at its shape of most capacity, and a note saying so.
  std::string overCapacity;
  Options atCapacity = opt;
  if (allCapacity < opt.rate) {
    overCapacity = formatv("the rate {0:F2} req/s exceeds what the {1} can serve{5}, {2:F2} "
                           "req/s, by {3:F2} req/s ({4:F0}%)",
                           opt.rate, opt.pickDevices ? "devices available" : "cluster",
                           allCapacity, opt.rate - allCapacity,
                           100 * (opt.rate - allCapacity) / allCapacity,
                           opt.tpotTarget > 0 ? " within the TPOT target" : "").str();
    atCapacity.rate = allCapacity;
  }
  ReplicaChoice chooser{pricer, cluster, atCapacity, usable, requests, std::move(mixed)};

  bool picking = false;
  for (TypeChoice *t : usable)
    picking |= t->optional;
  for (TypeChoice *t : usable)
    if (t->optional && t->options[size_t(t->best)].sample.unpriced)
      return servingError(formatv("--pick-devices needs a price for every optional type: {0} has none "
                                  "(give price_per_hour_usd in the cluster file)", t->type->name).str());
  auto plan = picking && overCapacity.empty() ? chooser.pickDevices() : chooser.fixedCluster(all);
  if (!plan && !overCapacity.empty())
    return servingError(overCapacity + "; even at capacity: " + llvm::toString(plan.takeError()));
  if (plan && !overCapacity.empty())
    plan->notes.push_back(overCapacity +
                          formatv(": planned at {0:F2} req/s, where queues grow without bound; "
                                  "latencies are for that rate",
                                  allCapacity).str());
  if (plan && !mixedNote.empty())
    plan->notes.push_back(mixedNote);
  if (plan && opt.layout.empty())
    for (const TypeChoice &t : types)
      if (t.best < 0 && mixedNote.empty())
        plan->notes.push_back(
            !t.idleNote.empty() ? t.idleNote + ": its devices are left idle"
            : opt.pinPipelineStages || opt.pinTensorParallel
                ? formatv("{0} is left idle: the --pin shape does not fit on it", t.type->name).str()
                : formatv("{0} is left idle: no replica shape on it meets the latency targets",
                          t.type->name).str());
  return plan;
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

plan::Plan exportServePlan(const ServePlan &sp, const cost::ModelCost &model,
                           const cluster::Cluster &cluster, const Options &opt,
                           const ExportInfo &info) {
  plan::Plan out = exportPlanHeader(model, cluster, opt.dtype, info);
  auto *settings = out.mutable_settings();
  settings->set_mode("serve");
  settings->set_global_batch(1);
  settings->set_sequence(opt.promptTokens);
  settings->set_dtype(cluster::dtypeName(opt.dtype).str());
  settings->set_micro_batches(1);
  settings->set_strategy(opt.pickDevices ? "serve-pick" : "serve");
  for (const auto &[k, v] : info.boundDims)
    (*settings->mutable_bound_dims())[k] = v;
  for (auto [list, ios] : {std::pair{&info.inputs, settings->mutable_inputs()},
                           std::pair{&info.outputs, settings->mutable_outputs()}})
    for (const IoShape &io : *list) {
      auto *o = ios->Add();
      o->set_name(io.name);
      for (int64_t size : io.dims)
        o->add_dims(size < 0 ? -1 : size);
      o->set_batch_axis(int32_t(io.batchAxis));
    }

  auto *s = out.mutable_serving();
  s->set_rate_rps(sp.rate > 0 ? sp.rate : opt.rate);
  if (sp.rate > 0 && sp.rate < opt.rate)
    s->set_requested_rate_rps(opt.rate);
  s->set_arrivals(opt.workload.arrivalsText());
  if (opt.workload.arrivals != Arrivals::Trace) {
    s->set_prompt_lengths(opt.workload.prompt.empty() ? std::to_string(opt.promptTokens)
                                                      : opt.workload.prompt.text());
    s->set_output_lengths(opt.workload.output.empty() ? std::to_string(opt.outputTokens)
                                                      : opt.workload.output.text());
  }
  s->set_prompt_tokens(opt.promptTokens);
  s->set_output_tokens(opt.outputTokens);
  s->set_ttft_target_s(opt.ttftTarget);
  s->set_tpot_target_s(opt.tpotTarget);
  s->set_target_percentile(uint32_t(opt.percentile));
  s->set_budget_usd_per_hour(opt.budget);
  s->set_picked_devices(opt.pickDevices);
  s->set_kv_cache_bytes_per_token(sp.kvBytesPerToken);
  s->set_routing("weighted-round-robin");
  s->set_usd_per_hour(sp.pricePerHour);
  s->set_usd_per_million_tokens(sp.pricePerMillionTokens);
  s->set_unpriced_devices(uint32_t(sp.unpricedDevices));
  s->set_memory_utilization(opt.memoryUtilization);
  std::vector<const ReplicaStage *> stageOfRank(cluster.devices.size(), nullptr);
  for (auto [i, r] : llvm::enumerate(sp.replicas)) {
    auto *rep = s->add_replicas();
    rep->set_index(uint32_t(i));
    rep->set_device_type(r.typeName.empty() ? r.type->name : r.typeName);
    rep->set_tensor_parallel(uint32_t(r.tensorParallel));
    for (const ReplicaStage &st : r.stages) {
      auto *o = rep->add_stages();
      o->set_first_layer(uint32_t(st.firstLayer));
      if (st.type && r.typeName.find('+') != std::string::npos)
        o->set_device_type(st.type->name);  // a pipeline across types
      o->set_last_layer(uint32_t(st.lastLayer));
      o->set_first_node(uint32_t(model.layers[size_t(st.firstLayer)].firstNode));
      o->set_last_node(uint32_t(model.layers[size_t(st.lastLayer)].lastNode));
      for (int rank : st.ranks) {
        o->add_ranks(uint32_t(rank));
        stageOfRank[size_t(rank)] = &st;
      }
      o->set_weight_bytes(runtime::saturatedCount(st.weightBytes));
      o->set_kv_cache_bytes_per_token(st.kvBytesPerToken);
      o->set_kv_cache_bytes(runtime::saturatedCount(st.kvBytes));
      o->set_capacity_bytes(runtime::saturatedCount(st.capacityBytes));
      o->set_peak_bytes(runtime::saturatedCount(st.peakBytes));
    }
    rep->set_max_batch(uint32_t(r.maxBatch));
    rep->set_micro_batches(uint32_t(r.stages.size()));
    rep->set_share(r.share);
    rep->set_rate_rps(r.rate);
    rep->set_capacity_rps(r.capacity);
    rep->set_prefill_s(r.prefillSeconds);
    rep->set_decode_step_s(r.decodeStepSeconds);
    rep->set_usd_per_hour(r.pricePerHour);
    rep->set_limited_by(r.limitedBy);
  }
  auto *pred = s->mutable_prediction();
  pred->set_ttft_p50_s(sp.predicted.ttftP50);
  pred->set_ttft_p90_s(sp.predicted.ttftP90);
  pred->set_ttft_p99_s(sp.predicted.ttftP99);
  pred->set_tpot_p50_s(sp.predicted.tpotP50);
  pred->set_tpot_p90_s(sp.predicted.tpotP90);
  pred->set_tpot_p99_s(sp.predicted.tpotP99);
  pred->set_requests_per_s(sp.predicted.requestsPerSecond);
  pred->set_output_tokens_per_s(sp.predicted.outputTokensPerSecond);
  pred->set_capacity_rps(sp.capacity);
  pred->set_simulated_requests(sp.predicted.requests);
  pred->set_seed(sp.seed);
  pred->set_e2e_p50_s(sp.predicted.e2eP50);
  pred->set_e2e_p90_s(sp.predicted.e2eP90);
  pred->set_e2e_p99_s(sp.predicted.e2eP99);

  // Ranks: one per device, memory as planned, no program yet.
  uint32_t idle = 0;
  for (const ReplicaStage *st : stageOfRank)
    idle += st == nullptr;
  s->set_idle_devices(idle);
  for (const cluster::Device &d : cluster.devices) {
    auto *rank = out.add_ranks();
    rank->set_rank(uint32_t(d.rank));
    auto *mem = rank->mutable_memory();
    mem->set_capacity(d.type->memoryBytes());
    if (const ReplicaStage *st = stageOfRank[size_t(d.rank)]) {
      mem->set_parameters(runtime::saturatedCount(st->weightBytes));
      mem->set_kv_cache(runtime::saturatedCount(st->kvBytes));
      mem->set_peak(runtime::saturatedCount(st->peakBytes));
    }
  }
  auto *pr = out.mutable_prediction();
  pr->set_samples_per_s(sp.predicted.requestsPerSecond);
  pr->set_cost_model(info.costModel);
  return out;
}

} // namespace hetplan::planner::serve
