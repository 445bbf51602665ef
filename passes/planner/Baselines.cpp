//===- Baselines.cpp - the plan against the usual baselines ---------------===//
//
// The baselines are the planner's own strategies (Planner.h, Strategy), run
// with the plan's settings: no second planner. Their cost on large clusters:
// homogeneous searches the single-type subsets the full search also
// searches (a small part of it), dp-even and pp-even one device order each.
//
//===----------------------------------------------------------------------===//

#include "passes/planner/Baselines.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>

namespace hetplan::planner {

const std::vector<Strategy> &baselineStrategies() {
  static const std::vector<Strategy> kStrategies{Strategy::Homogeneous,
                                                 Strategy::DataParallel,
                                                 Strategy::EvenPipeline};
  return kStrategies;
}

std::string shortReason(const std::string &error) {
  llvm::StringRef text(error);
  text = text.split(". What would fix it").first;
  if (text.consume_front("no layout fits in memory: "))
    text = text.split(" (").first;
  return text.trim().str();
}

std::string planDevicesText(const Plan &plan, const cluster::Cluster &cluster) {
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  for (size_t r = 0; r < plan.stageOfRank.size() && r < cluster.devices.size(); ++r) {
    if (plan.stageOfRank[r] < 0)
      continue;
    const std::string &type = cluster.devices[r].type->name;
    if (!counts[type]++)
      order.push_back(type);
  }
  std::string devices;
  for (const std::string &type : order)
    devices += (devices.empty() ? "" : " + ") + std::to_string(counts[type]) + "x " + type;
  return llvm::formatv("{0} stage(s) on {1}", plan.stages.size(), devices).str();
}

std::vector<BaselineResult> planBaselines(const cost::ModelCost &model,
                                          const cluster::Cluster &cluster,
                                          const Options &options, const Plan *self) {
  std::vector<BaselineResult> out;
  for (Strategy strategy : baselineStrategies()) {
    BaselineResult b;
    b.strategy = strategy;
    Options o = options;
    o.strategy = strategy;
    o.pin = {};
    o.progress = nullptr;
    o.priceOverCapacity = false;
    llvm::Expected<Plan> p = self && options.strategy == strategy
                                 ? llvm::Expected<Plan>(*self)
                                 : makePlan(model, cluster, o);
    if (!p) {
      b.note = shortReason(llvm::toString(p.takeError()));
    } else {
      b.fits = true;
      b.stepSeconds = p->stepSeconds;
      b.samplesPerSecond = p->samplesPerSecond;
      b.note = planDevicesText(*p, cluster);
    }
    out.push_back(std::move(b));
  }
  return out;
}

namespace {

/// The devices of `cluster` of one type, on the same nodes and links.
cluster::Cluster onlyType(const cluster::Cluster &cl, const cluster::DeviceType *type) {
  return cluster::subsetCluster(cl, [&](const cluster::Device &d) { return d.type == type; });
}

BaselineResult serveResult(llvm::Expected<serve::ServePlan> p, Strategy strategy,
                           const std::string &note) {
  BaselineResult b;
  b.strategy = strategy;
  if (!p) {
    b.note = shortReason(llvm::toString(p.takeError()));
    return b;
  }
  b.fits = true;
  b.capacityRps = p->capacity;
  b.tpotP90 = p->predicted.tpotP90;
  b.note = note;
  return b;
}

/// Even pipelines: per device type, one replica pipelined over all of its
/// devices (one stage each, up to one per layer) with the layers split
/// evenly, the replicas routed by capacity. A type whose pipeline does not
/// fit is left out (and named); none fits: the first type's reason.
BaselineResult evenPipelineServing(const cost::ModelCost &prefill, const cost::ModelCost &decode,
                                   const cluster::Cluster &cluster, const serve::Options &options) {
  std::vector<const cluster::DeviceType *> types;
  for (const cluster::Device &d : cluster.devices)
    if (std::find(types.begin(), types.end(), d.type) == types.end())
      types.push_back(d.type);
  const int L = int(decode.layers.size());
  // The replicas' simulator reads its cluster and options: both live here
  // until the simulation below is done.
  std::deque<cluster::Cluster> subs;
  std::deque<serve::Options> subOptions;
  std::vector<serve::Replica> replicas;
  std::string note, left;
  double capacity = 0;
  for (const cluster::DeviceType *type : types) {
    subs.push_back(onlyType(cluster, type));
    const cluster::Cluster &sub = subs.back();
    serve::Options o = options;
    o.pickDevices = false;
    o.optionalTypes.clear();
    o.pinPipelineStages = std::min(int(sub.devices.size()), L);
    o.pinTensorParallel = 1;
    // Shape and capacity only: the rate is the whole cluster's, checked
    // against the replicas' sum below.
    o.rate = std::min(options.rate, 1e-3);
    subOptions.push_back(o);
    auto p = serve::planServing(prefill, decode, sub, subOptions.back());
    std::string what = std::to_string(sub.devices.size()) + "x " + type->name;
    if (!p) {
      std::string why = shortReason(llvm::toString(p.takeError()));
      left += (left.empty() ? "" : "; ") + what + " left out: " + why;
      continue;
    }
    for (serve::Replica &r : p->replicas) {
      note += (note.empty() ? "" : ", ") + what + " in " + std::to_string(r.stages.size()) +
              " stage(s)";
      capacity += r.capacity;
      replicas.push_back(std::move(r));
    }
  }
  BaselineResult b;
  b.strategy = Strategy::EvenPipeline;
  if (replicas.empty()) {
    b.note = left;
    return b;
  }
  if (capacity < options.rate) {
    b.note = llvm::formatv("{0}: capacity {1:F2} req/s, below the rate {2:F2} req/s", note, capacity,
                           options.rate)
                 .str();
    return b;
  }
  std::vector<serve::SimReplica> sims;
  for (const serve::Replica &r : replicas) {
    sims.push_back(r.sim);
    sims.back().share = r.capacity / capacity;
  }
  serve::SimResult predicted =
      serve::simulate(sims, options.rate, options.workload, options.promptTokens,
                      options.outputTokens, kServeBaselineRequests, options.seed);
  b.fits = true;
  b.capacityRps = capacity;
  b.tpotP90 = predicted.tpotP90;
  b.note = note + ": one pipeline per type, layers split evenly, routed by capacity" +
           (left.empty() ? "" : "; " + left);
  return b;
}

} // namespace

std::vector<BaselineResult> planServeBaselines(const cost::ModelCost &prefill,
                                               const cost::ModelCost &decode,
                                               const cluster::Cluster &cluster,
                                               const serve::Options &given,
                                               const serve::ServePlan &self) {
  std::vector<BaselineResult> out;
  // Fewer simulated arrivals than the plan's: a baseline's percentiles are
  // indicative, and long outputs at a low rate made them cost minutes.
  serve::Options options = given;
  options.simulatedRequests = kServeBaselineRequests;
  // The rate the plan was made for (its capacity, when the rate asked is more).
  if (self.rate > 0)
    options.rate = self.rate;
  // Homogeneous: each type alone; the one of most capacity (else the first
  // type's reason).
  std::vector<const cluster::DeviceType *> types;
  for (const cluster::Device &d : cluster.devices)
    if (std::find(types.begin(), types.end(), d.type) == types.end())
      types.push_back(d.type);
  BaselineResult best;
  best.strategy = Strategy::Homogeneous;
  if (types.size() == 1) {  // the plan is homogeneous: itself
    best.fits = true;
    best.capacityRps = self.capacity;
    best.tpotP90 = self.predicted.tpotP90;
    best.note = std::to_string(cluster.devices.size()) + "x " + types[0]->name;
    types.clear();
  }
  for (const cluster::DeviceType *type : types) {
    cluster::Cluster sub = onlyType(cluster, type);
    BaselineResult b = serveResult(serve::planServing(prefill, decode, sub, options),
                                   Strategy::Homogeneous,
                                   std::to_string(sub.devices.size()) + "x " + type->name);
    if ((b.fits && (!best.fits || b.capacityRps > best.capacityRps)) ||
        (!b.fits && !best.fits && best.note.empty()))
      best = b;
    if (!b.fits && !best.fits)
      best.note = type->name + ": " + b.note;
  }
  out.push_back(best);
  // Even data-parallel: one-stage replicas, each the same share.
  serve::Options one = options;
  one.pinPipelineStages = 1;
  // Replicas of one stage already: the plan's own, routed evenly (no search).
  bool oneStage = std::all_of(self.replicas.begin(), self.replicas.end(),
                              [](const serve::Replica &r) { return r.stages.size() == 1; });
  auto dp = oneStage ? llvm::Expected<serve::ServePlan>(self)
                     : serve::planServing(prefill, decode, cluster, one);
  if (dp && dp->replicas.size() > 1) {  // one replica: evenly is as planned
    std::vector<serve::SimReplica> sims;
    double slowest = dp->replicas.front().capacity;
    for (const serve::Replica &r : dp->replicas) {
      sims.push_back(r.sim);
      sims.back().share = 1.0 / double(dp->replicas.size());
      slowest = std::min(slowest, r.capacity);
    }
    dp->predicted = serve::simulate(sims, options.rate, options.workload, options.promptTokens,
                                    options.outputTokens, kServeBaselineRequests, options.seed);
    dp->capacity = slowest * double(dp->replicas.size());
  }
  std::string note = dp ? std::to_string(dp->replicas.size()) +
                              " one-stage replica(s), requests routed evenly"
                        : "";
  out.push_back(serveResult(std::move(dp), Strategy::DataParallel, note));
  out.push_back(evenPipelineServing(prefill, decode, cluster, options));
  return out;
}

void exportBaselines(const std::vector<BaselineResult> &baselines, plan::Plan &out) {
  for (const BaselineResult &b : baselines) {
    plan::Baseline *pb = out.add_baselines();
    pb->set_strategy(strategyName(b.strategy));
    pb->set_fits(b.fits);
    pb->set_step_time_s(b.stepSeconds);
    pb->set_samples_per_s(b.samplesPerSecond);
    pb->set_note(b.note);
    pb->set_capacity_rps(b.capacityRps);
    pb->set_tpot_p90_s(b.tpotP90);
  }
}

} // namespace hetplan::planner
