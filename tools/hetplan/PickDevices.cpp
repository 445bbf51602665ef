//===- PickDevices.cpp - which GPUs to rent for a training step ----------===//
//
// `hetplan compile --mode train --pick-devices` (docs/planner.md, "Which
// GPUs to rent"): the cluster's `N?` groups are counts up to N, as in
// serving (docs/serving.md, "Picking devices"); every mix of counts is
// planned, and the cheapest one meeting the target (or, under --budget,
// the fastest) is the plan, printed with its runners-up.
//
//===----------------------------------------------------------------------===//

#include "tools/hetplan/PickDevices.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace hetplan::tools {

bool isClusterFile(llvm::StringRef spec) {
  return spec.contains('/') || spec.ends_with(".yaml") || spec.ends_with(".yml") ||
         spec.ends_with(".json");
}

std::vector<PickGroup> fileGroups(const cluster::Cluster &cl) {
  std::vector<PickGroup> groups;
  for (const cluster::Device &d : cl.devices) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const PickGroup &g) { return g.type == d.type->name; });
    if (it == groups.end()) {
      PickGroup g;
      g.type = g.text = d.type->name;
      g.optional = true;
      g.max = 0;
      groups.push_back(std::move(g));
      it = groups.end() - 1;
    }
    ++it->max;
  }
  return groups;
}

cluster::Cluster fileSubset(const cluster::Cluster &cl, const std::vector<PickGroup> &groups,
                            const std::vector<int> &counts) {
  std::vector<int> left = counts;
  return cluster::subsetCluster(cl, [&](const cluster::Device &d) {
    for (size_t g = 0; g < groups.size(); ++g)
      if (groups[g].type == d.type->name)
        return left[g]-- > 0;
    return false;
  });
}

llvm::Expected<std::vector<PickGroup>> parsePickGroups(llvm::StringRef spec) {
  if (isClusterFile(spec))
    return llvm::createStringError(("--pick-devices: '" + spec +
                                    "' is a cluster file: each device type is picked up to the "
                                    "file's count (no N? counts to parse)").str());
  llvm::SmallVector<llvm::StringRef> items;
  spec.split(items, ',');
  std::vector<PickGroup> groups;
  bool anyOptional = false;
  for (llvm::StringRef item : items) {
    llvm::SmallVector<llvm::StringRef> parts;
    item.split(parts, ';');
    for (size_t i = 0; i < parts.size(); ++i) {
      llvm::StringRef body = parts[i].trim();
      PickGroup g;
      g.text = body.str();
      if (body.empty() || body.contains('=')) {  // an option (net=, latency=)
        g.option = true;
        groups.push_back(std::move(g));
        continue;
      }
      g.optional = body.consume_back("?");
      anyOptional |= g.optional;
      // [NODES x][DEVICES x]TYPE: the first count varies.
      llvm::SmallVector<int, 2> counts;
      for (int k = 0; k < 2; ++k) {
        auto [head, rest] = body.split('x');
        if (rest.empty())
          std::tie(head, rest) = body.split('X');
        int n;
        if (rest.empty() || head.getAsInteger(10, n) || n < 1)
          break;
        counts.push_back(n);
        body = rest;
      }
      g.type = body.str();
      g.max = counts.empty() ? 1 : counts[0];
      g.perNode = counts.size() == 2 ? counts[1] : 0;
      groups.push_back(std::move(g));
    }
  }
  if (!anyOptional)  // no '?': every group may be used in part (as serving reads it)
    for (PickGroup &g : groups)
      g.optional = !g.option;
  return groups;
}

std::string pickSpec(const std::vector<PickGroup> &groups, const std::vector<int> &counts) {
  std::string spec;
  for (size_t i = 0; i < groups.size(); ++i) {
    const PickGroup &g = groups[i];
    std::string item;
    if (g.option)
      item = g.text;
    else if (counts[i] == 0)
      continue;
    else
      item = std::to_string(counts[i]) + "x" +
             (g.perNode ? std::to_string(g.perNode) + "x" : std::string()) + g.type;
    spec += (spec.empty() ? "" : ",") + item;
  }
  return spec;
}

namespace {

struct Mix {
  std::vector<int> counts;
  std::string spec;
  double usdPerHour = 0;
  std::optional<planner::Plan> plan;  // empty: nothing fits
  std::optional<cluster::Cluster> cluster;
  double step() const { return plan ? plan->stepSeconds : INFINITY; }
  double usdPerStep() const { return usdPerHour * step() / 3600; }
  bool idleType = false;  // the plan uses no device of a type the mix rents
  bool planned = false;
};

/// Whether `plan` leaves every device of some rented type idle.
bool leavesTypeIdle(const planner::Plan &plan, const cluster::Cluster &cl,
                    const std::vector<std::string> &typeName, const std::vector<int> &counts) {
  for (size_t i = 0; i < typeName.size(); ++i) {
    if (typeName[i].empty() || counts[i] == 0)
      continue;
    bool used = false;
    for (size_t r = 0; r < cl.devices.size() && r < plan.stageOfRank.size(); ++r)
      used |= cl.devices[r].type->name == typeName[i] && plan.stageOfRank[r] >= 0;
    if (!used)
      return true;
  }
  return false;
}

/// The counts tried first for an optional group: every count up to
/// kDenseCounts, then steps of about 1.5x (12, 16, 24, 32, 48, ...) and the
/// maximum; `coarse` (when the dense grid has too many mixes): 0, 1, 2, 4,
/// ... and the maximum. The refinement pass then tries the counts between
/// the picked count and its neighbours here.
constexpr int kDenseCounts = 8;
std::vector<int> countChoices(const PickGroup &g, bool coarse) {
  if (g.option)
    return {0};
  if (!g.optional)
    return {g.max};
  std::vector<int> c{0};
  if (coarse) {
    for (int n = 1; n < g.max; n *= 2)
      c.push_back(n);
  } else {
    for (int n = 1; n < g.max && n <= kDenseCounts; ++n)
      c.push_back(n);
    for (int n = kDenseCounts * 3 / 2; n < g.max;) {  // 12, 16, 24, 32, 48, ...
      c.push_back(n);
      n = (n % 3 == 0) ? n / 3 * 4 : n / 2 * 3;
    }
  }
  c.push_back(g.max);
  return c;
}

std::string targetText(const PickTargets &t) {
  if (t.stepSeconds > 0)
    return llvm::formatv("a step of at most {0} s", t.stepSeconds).str();
  if (t.samplesPerSecond > 0)
    return llvm::formatv("at least {0} samples/s", t.samplesPerSecond).str();
  if (t.budgetPerHour > 0)
    return llvm::formatv("the fastest within ${0:F2}/h", t.budgetPerHour).str();
  return "the least $ per step";
}

} // namespace

llvm::Expected<PickedDevices> pickDevices(const cost::ModelCost &model,
                                          const std::vector<PickGroup> &groups,
                                          const cluster::DeviceCatalog &catalog,
                                          const planner::Options &options,
                                          const PickTargets &targets) {
  auto mixName = [&](const std::vector<int> &counts) {
    return pickSpec(groups, counts) + (targets.file ? " of " + targets.fileName : "");
  };
  // Every mix, with its price; the search visits them cheapest first.
  std::vector<Mix> mixes;
  std::vector<std::vector<int>> choices;
  std::vector<double> price;
  std::vector<std::string> typeName;  // the catalog's name of each group's type
  auto mixCount = [&](bool coarse) {
    size_t total = 1;
    for (const PickGroup &g : groups)
      total = std::min(total * countChoices(g, coarse).size(), PickTargets::kMaxMixes + 1);
    return total;
  };
  const bool coarse = mixCount(false) > PickTargets::kMaxMixes;
  const size_t total = mixCount(coarse);
  if (total > PickTargets::kMaxMixes)
    return llvm::createStringError(llvm::formatv(
        "--pick-devices: more than {0} mixes of counts: fewer groups with '?'",
        PickTargets::kMaxMixes));
  for (const PickGroup &g : groups) {
    choices.push_back(countChoices(g, coarse));
    double p = 0;
    if (!g.option) {
      auto type = catalog.lookup(g.type);
      if (!type)
        return type.takeError();
      if (!(*type)->pricePerHourUSD)
        return llvm::createStringError("--pick-devices needs a price for every type: " +
                                       (*type)->name + " has none (price_per_hour_usd)");
      p = *(*type)->pricePerHourUSD * std::max(g.perNode, 1);
      typeName.push_back((*type)->name);
    } else {
      typeName.emplace_back();
    }
    price.push_back(p);
  }
  for (size_t n = 0; n < total; ++n) {
    Mix m;
    size_t rest = n;
    for (size_t i = 0; i < groups.size(); ++i) {
      m.counts.push_back(choices[i][rest % choices[i].size()]);
      rest /= choices[i].size();
      m.usdPerHour += price[i] * m.counts.back();
    }
    m.spec = mixName(m.counts);
    bool any = false;
    for (size_t i = 0; i < groups.size(); ++i)
      any |= !groups[i].option && m.counts[i] > 0;
    if (any && (targets.budgetPerHour <= 0 || m.usdPerHour <= targets.budgetPerHour + 1e-9))
      mixes.push_back(std::move(m));
  }
  if (mixes.empty())
    return llvm::createStringError(llvm::formatv(
        "--pick-devices: no mix of the cluster costs at most ${0:F2}/h", targets.budgetPerHour));
  std::stable_sort(mixes.begin(), mixes.end(),
                   [](const Mix &a, const Mix &b) { return a.usdPerHour < b.usdPerHour; });

  planner::Options opt = options;
  opt.progress = nullptr;
  bool hasTarget = targets.stepSeconds > 0 || targets.samplesPerSecond > 0;
  auto meets = [&](const Mix &m) {
    if (!m.plan)
      return false;
    if (targets.stepSeconds > 0)
      return m.step() <= targets.stepSeconds * (1 + 1e-9);
    if (targets.samplesPerSecond > 0)
      return m.plan->samplesPerSecond >= targets.samplesPerSecond * (1 - 1e-9);
    return true;
  };
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  size_t evaluated = 0, met = 0;
  auto plan = [&](Mix &m) -> llvm::Error {
    ++evaluated;
    m.planned = true;
    auto cl = targets.file ? llvm::Expected<cluster::Cluster>(
                                 fileSubset(*targets.file, groups, m.counts))
                           : cluster::parseClusterSpec(m.spec, catalog);
    if (!cl)
      return cl.takeError();
    // Every mix is priced under the stack given (--stack).
    if (!targets.stack.empty())
      if (llvm::Error e = cl->selectStack(targets.stack))
        return e;
    auto plan = planner::makePlan(model, *cl, opt);
    if (plan && leavesTypeIdle(*plan, *cl, typeName, m.counts)) {
      // The same mix without that type is planned too, and costs less.
      m.idleType = true;
    } else if (plan) {
      m.plan = std::move(*plan);
      m.cluster = std::move(*cl);
    } else {
      llvm::consumeError(plan.takeError());
    }
    return llvm::Error::success();
  };
  double stopAbove = INFINITY;  // with a target: the kShown-th meeting mix's price
  for (Mix &m : mixes) {
    if (m.usdPerHour > stopAbove || elapsed() > targets.timeLimitSeconds)
      break;
    if (auto err = plan(m))
      return std::move(err);
    if (hasTarget && meets(m) && ++met == PickTargets::kShown)
      stopAbove = m.usdPerHour;
  }
  // Rank: with a target the cheapest per hour (ties: faster), under a
  // budget the fastest (ties: cheaper), else the least $ per step.
  auto better = [&](const Mix *a, const Mix *b) {
    if (hasTarget)
      return a->usdPerHour < b->usdPerHour ||
             (a->usdPerHour == b->usdPerHour && a->step() < b->step());
    if (targets.budgetPerHour > 0)
      return a->step() < b->step() || (a->step() == b->step() && a->usdPerHour < b->usdPerHour);
    return a->usdPerStep() < b->usdPerStep();
  };
  auto bestMix = [&]() -> const Mix * {
    const Mix *best = nullptr;
    for (const Mix &m : mixes)
      if (m.planned && meets(m) && (!best || better(&m, best)))
        best = &m;
    return best;
  };
  // Refinement: the counts between the best mix's count of each group and
  // its neighbours on the grid, one group at a time, until the best stays
  // (a few rounds; the grid skips counts above kDenseCounts, or all but
  // powers of two when the mixes are many).
  size_t refined = 0;
  for (int round = 0; round < 4 && elapsed() <= targets.timeLimitSeconds; ++round) {
    const Mix *best = bestMix();
    if (!best)
      break;
    std::vector<int> bestCounts = best->counts;
    std::vector<Mix> extra;
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::vector<int> &grid = choices[i];
      auto at = std::find(grid.begin(), grid.end(), bestCounts[i]);
      int lo = at == grid.end() || at == grid.begin() ? bestCounts[i] : *(at - 1);
      int hi = at == grid.end() || at + 1 == grid.end() ? bestCounts[i] : *(at + 1);
      // A group refined before may sit between grid values: its neighbours
      // are then the nearest counts planned.
      if (at == grid.end()) {
        lo = std::max(0, bestCounts[i] - 1);
        hi = std::min(groups[i].max, bestCounts[i] + 1);
      }
      for (int n = lo + 1; n < hi; ++n) {
        if (n == bestCounts[i])
          continue;
        std::vector<int> counts = bestCounts;
        counts[i] = n;
        bool known = std::any_of(mixes.begin(), mixes.end(),
                                 [&](const Mix &m) { return m.counts == counts; }) ||
                     std::any_of(extra.begin(), extra.end(),
                                 [&](const Mix &m) { return m.counts == counts; });
        if (known)
          continue;
        Mix m;
        m.counts = counts;
        for (size_t k = 0; k < groups.size(); ++k)
          m.usdPerHour += price[k] * counts[k];
        if (targets.budgetPerHour > 0 && m.usdPerHour > targets.budgetPerHour + 1e-9)
          continue;
        m.spec = mixName(counts);
        extra.push_back(std::move(m));
      }
    }
    if (extra.empty())
      break;
    size_t from = mixes.size();
    for (Mix &m : extra)
      mixes.push_back(std::move(m));
    for (size_t k = from; k < mixes.size() && elapsed() <= targets.timeLimitSeconds; ++k) {
      if (auto err = plan(mixes[k]))
        return std::move(err);
      ++refined;
    }
    if (bestMix()->counts == bestCounts)
      break;
  }
  std::vector<Mix *> ranked;
  for (Mix &m : mixes)
    if (m.planned && meets(m))
      ranked.push_back(&m);
  std::stable_sort(ranked.begin(), ranked.end(), better);
  if (ranked.empty()) {
    const Mix *fastest = nullptr;
    for (const Mix &m : mixes)
      if (m.planned && m.plan && (!fastest || m.step() < fastest->step()))
        fastest = &m;
    std::string why = fastest ? llvm::formatv("the fastest planned, {0}, steps in {1:F3} s ({2:F1} "
                                              "samples/s) at ${3:F2}/h",
                                              fastest->spec, fastest->step(),
                                              fastest->plan->samplesPerSecond,
                                              fastest->usdPerHour)
                                    .str()
                              : std::string("no mix fits in memory");
    return llvm::createStringError(llvm::formatv(
        "--pick-devices: no mix meets {0} ({1} of {2} mixes planned in {3:F1} s): {4}",
        targetText(targets), evaluated, mixes.size(), elapsed(), why));
  }

  PickedDevices out;
  llvm::raw_string_ostream os(out.report);
  os << llvm::formatv("picked devices for {0}: {1} at ${2:F2}/h\n", targetText(targets),
                      ranked[0]->spec, ranked[0]->usdPerHour);
  os << "  rank  devices                            $/h    step s  samples/s       $/step\n";
  for (size_t i = 0; i < ranked.size() && i < PickTargets::kShown; ++i) {
    const Mix &m = *ranked[i];
    char perStep[32];  // three significant digits, however small
    std::snprintf(perStep, sizeof(perStep), "%.3g", m.usdPerStep());
    os << llvm::formatv("  {0,4}  {1,-30}  {2,7:F2}  {3,8:F4}  {4,9:F1}  {5,11}\n", i + 1,
                        m.spec, m.usdPerHour, m.step(), m.plan->samplesPerSecond, perStep);
  }
  size_t idle = 0;
  for (const Mix &m : mixes)
    idle += m.planned && m.idleType;
  llvm::json::Array shown;
  for (size_t i = 0; i < ranked.size() && i < PickTargets::kShown; ++i) {
    const Mix &m = *ranked[i];
    shown.push_back(llvm::json::Object{{"rank", int64_t(i + 1)},
                                       {"devices", m.spec},
                                       {"usd_per_hour", m.usdPerHour},
                                       {"step_time_s", m.step()},
                                       {"samples_per_s", m.plan->samplesPerSecond},
                                       {"usd_per_step", m.usdPerStep()}});
  }
  out.json = llvm::json::Object{{"target", targetText(targets)},
                                {"picked", ranked[0]->spec},
                                {"ranked", std::move(shown)},
                                {"mixes_planned", int64_t(evaluated)},
                                {"mixes", int64_t(mixes.size())},
                                {"mixes_refined", int64_t(refined)},
                                {"coarse_grid", coarse},
                                {"left_out_idle_type", int64_t(idle)},
                                {"search_time_s", elapsed()}};
  os << llvm::formatv("  {0} of {1} mixes planned in {2:F1} s (bound {3:F0} s; {5} between the "
                      "grid's counts around the best); {4} left out as their plans leave a "
                      "rented type idle\n",
                      evaluated, mixes.size(), elapsed(), targets.timeLimitSeconds, idle, refined);
  os.flush();
  out.plan = std::move(*ranked[0]->plan);
  out.cluster = std::move(*ranked[0]->cluster);
  out.spec = ranked[0]->spec;
  return out;
}

} // namespace hetplan::tools
