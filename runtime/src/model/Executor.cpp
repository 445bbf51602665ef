//===- Executor.cpp - runs an ONNX graph on the CPU -----------------------===//
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/ModelVerifier.h"
#include "hetplan/runtime/Kernels.h"
#include "Fusion.h"
#include "OpRegistry.h"
#include "../cpu/kernels/OpKernels.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>

namespace hetplan::runtime {

namespace cpu {
KernelInfo applyHalfPolicy(KernelInfo info); // HalfPrecision.cpp
} // namespace cpu
void registerControlFlowKernels(); // ControlFlow.cpp: If, Loop, Scan

namespace {
OpRegistry<KernelInfo> &registry() {
  static OpRegistry<KernelInfo> r;
  return r;
}
OpRegistry<FusionRule> &fusionRegistry() {
  static OpRegistry<FusionRule> r;
  return r;
}
void ensureRegistered() {
  static bool done = [] {
    cpu::registerElementwiseKernels();
    cpu::registerElementwiseChainKernels();
    cpu::registerMatMulKernels();
    cpu::registerConvKernels();
    cpu::registerNormalizationKernels();
    cpu::registerLinalgKernels();
    cpu::registerGatherKernels();
    cpu::registerTensorKernels();
    cpu::registerIndexingKernels();
    cpu::registerQuantKernels();
    cpu::registerSamplingKernels();
    cpu::registerContribKernels();
    registerControlFlowKernels();
    return true;
  }();
  (void)done;
}
} // namespace

const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64};
const std::vector<DType> kNumericTypes = {DType::Float32, DType::Float64, DType::Int8, DType::UInt8,
                                          DType::Int16, DType::UInt16, DType::Int32, DType::UInt32,
                                          DType::Int64, DType::UInt64};
const std::vector<DType> kAllTypes = {DType::Float32, DType::Float64, DType::Int8, DType::UInt8,
                                      DType::Int16, DType::UInt16, DType::Int32, DType::UInt32,
                                      DType::Int64, DType::UInt64, DType::Bool};

void registerKernel(const std::string &opType, KernelInfo info) {
  registry().add(opType, cpu::applyHalfPolicy(std::move(info))); // float16/bfloat16 (Kernels.h, HalfPolicy)
}

namespace {
std::string registryKey(const std::string &domain, const std::string &opType) {
  return domain.empty() || domain == "ai.onnx" ? opType : domain + ":" + opType;
}
} // namespace

void registerKernel(const std::string &domain, const std::string &opType, KernelInfo info) {
  registry().add(registryKey(domain, opType), cpu::applyHalfPolicy(std::move(info)));
}

void registerFusion(const std::string &opType, FusionRule rule) { fusionRegistry().add(opType, std::move(rule)); }

namespace {
const FusionRule *findFusion(const std::string &opType) {
  ensureRegistered();
  return fusionRegistry().find(opType);
}
} // namespace

const KernelInfo *findKernel(const std::string &opType) {
  ensureRegistered();
  return registry().find(opType);
}

const KernelInfo *findKernel(const Node &n) {
  ensureRegistered();
  return registry().find(registryKey(n.domain, n.opType));
}

std::vector<std::string> registeredOpTypes() {
  ensureRegistered();
  return registry().opTypes();
}

std::vector<size_t> topologicalOrder(const Model &model) {
  std::vector<size_t> order;
  std::set<std::string> ready;
  for (const auto &[name, t] : model.initializers) ready.insert(name);
  for (const auto &in : model.inputs) ready.insert(in.name);
  std::vector<bool> done(model.nodes.size(), false);
  size_t remaining = model.nodes.size();
  while (remaining) {
    bool progress = false;
    for (size_t i = 0; i < model.nodes.size(); ++i) {
      if (done[i]) continue;
      const Node &n = model.nodes[i];
      bool ok = true; // implicit inputs: values the node's subgraphs read
      n.forEachRead([&](const std::string &s) { ok = ok && ready.count(s); });
      if (!ok) continue;
      done[i] = true; --remaining; progress = true;
      order.push_back(i);
      for (const auto &o : n.outputs) if (!o.empty()) ready.insert(o);
    }
    if (!progress) {
      for (size_t i = 0; i < model.nodes.size(); ++i)
        if (!done[i]) {
          const Node &n = model.nodes[i];
          n.forEachRead([&](const std::string &s) {
            if (!ready.count(s))
              throw std::runtime_error(model.path + ": " + n.describe() + ": " +
                                       (std::count(n.inputs.begin(), n.inputs.end(), s)
                                            ? "input '" + s + "'"
                                            : "value '" + s + "' (read by a subgraph)") +
                                       " is never produced (or the graph has a cycle)");
          });
        }
    }
  }
  return order;
}

bool hasSubgraphAttribute(const Node &n) {
  for (const auto &[name, a] : n.attrs)
    if (a.kind == Attribute::Graph || a.kind == Attribute::Graphs) return true;
  return false;
}

Executor::Executor(const Model &model) : model_(model), order_(topologicalOrder(model)) {
  foldConstants();
  fuseChains();
  resolveSlots();
}

/// The kernel a node runs (by its domain and op type).
static const KernelInfo *kernelFor(const Node &n) { return findKernel(n); }

int32_t Executor::addSlot(const std::string &name) {
  auto [it, added] = slotOf_.emplace(name, static_cast<int32_t>(slotName_.size()));
  if (added) {
    slotName_.push_back(name);
    auto ft = folded_.find(name);
    hasFolded_.push_back(ft != folded_.end());
    slotFolded_.push_back(ft != folded_.end() ? ft->second : Tensor());
    auto jt = model_.initializers.find(name);
    slotInit_.push_back(jt == model_.initializers.end() ? nullptr : &jt->second);
  }
  return it->second;
}

void Executor::resolveSlots() {
  opset_ = model_.opset("");
  for (const auto &v : model_.inputs) addSlot(v.name);
  for (const auto &v : model_.outputs) addSlot(v.name);
  auto resolve = [&](const Node &n) {
    NodeSlots ns;
    ns.kernel = kernelFor(n);
    for (const auto &s : n.inputs) ns.inputs.push_back(s.empty() ? -1 : addSlot(s));
    for (const auto &s : n.outputs) ns.outputs.push_back(s.empty() ? -1 : addSlot(s));
    n.forEachRead([&](const std::string &s) { ns.reads.push_back(addSlot(s)); });
    ns.scope = !n.implicitInputs.empty();
    ns.readsChannelsLast = ns.kernel && ns.kernel->readsChannelsLast;
    return ns;
  };
  nodeSlots_.reserve(model_.nodes.size());
  for (const Node &n : model_.nodes) nodeSlots_.push_back(resolve(n));
  for (const Fusion &f : fusions_) fusedSlots_.push_back(resolve(f.node));
  runLastUse_.assign(slotName_.size(), -1);
  for (size_t step = 0; step < order_.size(); ++step)
    for (int32_t s : nodeSlots_[order_[step]].reads) runLastUse_[size_t(s)] = static_cast<int32_t>(step);
  isOutput_.assign(slotName_.size(), 0);
  std::set<std::string> outs;
  for (const auto &v : model_.outputs) {
    isOutput_[size_t(slotOf_.at(v.name))] = 1;
    outs.insert(v.name);
  }
  runFused_ = activeFusions(order_, {}, outs, true);
}

void Executor::foldConstants() {
  isFolded_.assign(model_.nodes.size(), false);
  // Ops whose result is not a function of their inputs and attributes.
  static const std::set<std::string> kNondeterministic = {
      "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
      "Bernoulli", "Dropout"};
  std::set<std::string> graphInputs;
  for (const auto &in : model_.inputs) graphInputs.insert(in.name);
  int64_t opset = model_.opset("");
  // What the verifier knows: declared shapes, initializers and the values
  // folded so far.
  ValueFacts facts = modelFacts(model_);
  facts.constant = [this](const std::string &v) -> const Tensor * {
    if (auto it = folded_.find(v); it != folded_.end()) return &it->second;
    auto jt = model_.initializers.find(v);
    return jt == model_.initializers.end() ? nullptr : &jt->second;
  };
  facts.shape = [this, declared = facts.shape](const std::string &v) -> const std::vector<int64_t> * {
    if (auto it = folded_.find(v); it != folded_.end()) return &it->second.shape();
    return declared(v);
  };
  // Initializers each folded value depends on (transitively).
  auto &deps = foldDepsOf_;
  for (size_t idx : order_) {
    const Node &n = model_.nodes[idx];
    if (kNondeterministic.count(n.opType)) continue;
    if (hasSubgraphAttribute(n)) continue;
    const KernelInfo *k = findKernel(n);
    if (!k) continue;
    bool allConst = true;
    std::set<std::string> d;
    KernelContext ctx{n, opset, {}, std::vector<Tensor>(n.outputs.size())};
    CheckContext cc{n, opset, {}};
    for (const auto &s : n.inputs) {
      if (s.empty()) { ctx.inputs.push_back(nullptr); cc.inputTypes.push_back(DType::Undefined); continue; }
      if (graphInputs.count(s)) { allConst = false; break; }
      if (auto it = folded_.find(s); it != folded_.end()) {
        ctx.inputs.push_back(&it->second);
        cc.inputTypes.push_back(it->second.dtype());
        d.insert(deps[s].begin(), deps[s].end());
      } else if (auto jt = model_.initializers.find(s); jt != model_.initializers.end()) {
        ctx.inputs.push_back(&jt->second);
        cc.inputTypes.push_back(jt->second.dtype());
        d.insert(s);
      } else { allConst = false; break; }
    }
    if (!allConst) continue;
    // No kernel runs on a node that breaks ONNX's rules (ModelVerifier.h).
    if (!verifyNode(n, opset, facts).empty()) continue;
    // Only what the load-time check accepts is run here; anything else
    // (or a kernel error) is left to run time, which reports it.
    DType t0 = cc.in(0);
    if (!k->types.empty() && t0 != DType::Undefined &&
        std::find(k->types.begin(), k->types.end(), t0) == k->types.end())
      continue;
    if (k->check && !k->check(cc).empty()) continue;
    try {
      k->run(ctx);
    } catch (const std::exception &) {
      continue;
    }
    bool ok = true;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty() && !ctx.outputs[i].defined()) ok = false;
    if (!ok) continue;
    isFolded_[idx] = true;
    foldDeps_.insert(d.begin(), d.end());
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) {
        folded_[n.outputs[i]] = std::move(ctx.outputs[i]);
        deps[n.outputs[i]] = d;
      }
  }
  // Folded values never change after construction: hand them to kernels as
  // views (Tensor::isView), which lets the Conv kernel cache its reordered
  // weights for them as it does for the model file's initializers.
  for (auto &[name, t] : folded_) {
    if (t.isView() || !t.defined() || t.numel() == 0) continue;
    auto owner = std::make_shared<Tensor>(std::move(t));
    t = Tensor::view(owner->dtype(), owner->shape(), owner->raw(), std::shared_ptr<const void>(owner, owner->raw()));
  }
}

namespace {
Tensor immutableCopy(Tensor t) {
  auto owner = std::make_shared<Tensor>(std::move(t));
  return Tensor::view(owner->dtype(), owner->shape(), owner->raw(), std::shared_ptr<const void>(owner, owner->raw()));
}
} // namespace

void Executor::fuseChains() {
  fusionOf_.assign(model_.nodes.size(), -1);
  for (size_t i = 0; i < model_.nodes.size(); ++i)
    for (const auto &o : model_.nodes[i].outputs)
      if (!o.empty()) producer_[o] = i;
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t i = 0; i < model_.nodes.size(); ++i)
    model_.nodes[i].forEachRead([&](const std::string &s) { readers[s].push_back(i); });
  std::set<std::string> graphIO;
  for (const auto &v : model_.inputs) graphIO.insert(v.name);
  for (const auto &v : model_.outputs) graphIO.insert(v.name);
  std::vector<size_t> pos(model_.nodes.size(), 0);
  for (size_t k = 0; k < order_.size(); ++k) pos[order_[k]] = k;
  auto isDefault = [](const Node &n) { return n.domain.empty() || n.domain == "ai.onnx"; };
  FusionGraph g{model_, producer_, pos, folded_, nullptr, nullptr};
  // A constant float32 value (folded or initializer, not a graph input).
  g.constant = [&](const std::string &name, std::set<std::string> &deps) -> const Tensor * {
    if (name.empty() || graphIO.count(name)) return nullptr;
    const Tensor *t = nullptr;
    if (auto it = folded_.find(name); it != folded_.end()) {
      t = &it->second;
      auto dt = foldDepsOf_.find(name);
      if (dt != foldDepsOf_.end()) deps.insert(dt->second.begin(), dt->second.end());
    } else if (auto jt = model_.initializers.find(name); jt != model_.initializers.end()) {
      t = &jt->second;
      deps.insert(name);
    }
    return t && t->dtype() == DType::Float32 ? t : nullptr;
  };
  // The single reader of `v` (default domain, not folded), if v is no graph output.
  g.soleReader = [&](const std::string &v) -> const Node * {
    auto it = readers.find(v);
    if (graphIO.count(v) || it == readers.end() || it->second.size() != 1) return nullptr;
    size_t r = it->second[0];
    if (isFolded_[r] || fusionOf_[r] >= 0 || !isDefault(model_.nodes[r])) return nullptr;
    return &model_.nodes[r];
  };
  g.readers = [&](const std::string &v, std::vector<size_t> &out) {
    out.clear();
    if (graphIO.count(v)) return false;
    auto it = readers.find(v);
    if (it == readers.end()) return true;
    for (size_t r : it->second) {
      if (isFolded_[r] || fusionOf_[r] >= 0 || !isDefault(model_.nodes[r])) return false;
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    return true;
  };
  for (size_t idx : order_) {
    const Node &head = model_.nodes[idx];
    if (isFolded_[idx] || fusionOf_[idx] >= 0 || !isDefault(head)) continue; // (a member of an earlier chain)
    const FusionRule *rule = findFusion(head.opType);
    FusedChain chain;
    if (!rule || !(*rule)(g, idx, chain)) continue;
    Fusion f;
    f.head = idx;
    f.members = std::move(chain.members);
    f.intermediates = std::move(chain.intermediates);
    f.residual = std::move(chain.residual);
    for (auto &[name, t] : chain.constants) folded_[name] = immutableCopy(std::move(t));
    f.node = std::move(chain.node);
    fuseDeps_.insert(chain.deps.begin(), chain.deps.end());
    for (size_t m : f.members) fusionOf_[m] = static_cast<int>(fusions_.size());
    fusions_.push_back(std::move(f));
  }
  chooseChannelsLast(readers, graphIO);
}

void Executor::chooseChannelsLast(const std::map<std::string, std::vector<size_t>> &readers,
                                  const std::set<std::string> &graphIO) {
  auto reads = [](const Node &n) {
    const KernelInfo *k = findKernel(n);
    return k && k->readsChannelsLast;
  };
  auto writes = [](const Node &n) {
    const KernelInfo *k = findKernel(n);
    return k && k->writesChannelsLast;
  };
  // Whether every reader of `v` is a kernel that reads channels-last bytes
  // (Conv) and reads it as its data (input 0) or fused residual (input 3):
  // in a run with the fusions, the node that reads v is the fusion's.
  auto onlyChannelsLastReaders = [&](const std::string &v) {
    auto it = readers.find(v);
    if (graphIO.count(v) || it == readers.end() || it->second.empty()) return false;
    for (size_t r : it->second) {
      const Node *n = &model_.nodes[r];
      if (isFolded_[r]) return false;
      if (fusionOf_[r] >= 0) n = &fusions_[size_t(fusionOf_[r])].node;
      if (!reads(*n)) return false;
      for (size_t i = 0; i < n->inputs.size(); ++i)
        if (n->inputs[i] == v && i != 0 && i != 3) return false;
    }
    return true;
  };
  Attribute yes;
  yes.kind = Attribute::Int;
  yes.i = 1;
  for (Fusion &f : fusions_)
    if (writes(f.node) && f.node.outputs.size() == 1 && onlyChannelsLastReaders(f.node.outputs[0]))
      f.node.attrs[kChannelsLastOutput] = yes;
  for (size_t idx : order_) {
    const Node &n = model_.nodes[idx];
    if (isFolded_[idx] || fusionOf_[idx] >= 0 || !writes(n) || n.outputs.size() != 1 || !onlyChannelsLastReaders(n.outputs[0]))
      continue;
    Fusion f; // the node alone, with the attribute
    f.head = idx;
    f.members = {idx};
    f.node = n;
    f.node.attrs[kChannelsLastOutput] = yes;
    fusionOf_[idx] = static_cast<int>(fusions_.size());
    fusions_.push_back(std::move(f));
  }
}

std::vector<char> Executor::activeFusions(const std::vector<size_t> &nodes, const std::map<std::string, Tensor> &given,
                                          const std::set<std::string> &keep, bool useFold) const {
  if (fusions_.empty() || !useFold) return {};
  for (const auto &[name, t] : given)
    if (fuseDeps_.count(name)) return {};
  std::vector<int> pos(model_.nodes.size(), -1);
  for (size_t k = 0; k < nodes.size(); ++k) pos[nodes[k]] = static_cast<int>(k);
  std::vector<char> active(fusions_.size(), 0);
  bool any = false;
  for (size_t f = 0; f < fusions_.size(); ++f) {
    const Fusion &fu = fusions_[f];
    bool ok = true;
    for (size_t m : fu.members) ok = ok && pos[m] >= pos[fu.head] && pos[m] >= 0;
    for (const auto &v : fu.intermediates) ok = ok && !keep.count(v) && !given.count(v);
    if (ok && !fu.residual.empty()) {
      auto pr = producer_.find(fu.residual);
      if (pr != producer_.end() && pos[pr->second] >= pos[fu.head]) ok = false;
    }
    active[f] = ok;
    any = any || ok;
  }
  if (!any) return {};
  return active;
}

namespace {
/// The load-time check of `n` (kernel, domain, element types, attributes)
/// and, recursively, of every node of its subgraphs; `where` names the node
/// (its path through the enclosing control-flow nodes and attributes).
void checkNode(const Node &n, int64_t opset, const std::map<std::string, DType> &types, const std::string &where,
               std::vector<std::string> &problems) {
  const KernelInfo *k = findKernel(n);
  if (!k) {
    if (!n.domain.empty() && n.domain != "ai.onnx")
      problems.push_back(where + "no CPU kernel for " + n.opType + " of domain '" + n.domain + "'");
    else
      problems.push_back(where + "no CPU kernel for " + n.opType);
    return;
  }
  CheckContext cc{n, opset, {}};
  for (const auto &s : n.inputs) {
    auto it = types.find(s);
    cc.inputTypes.push_back(s.empty() || it == types.end() ? DType::Undefined : it->second);
  }
  DType t0 = cc.in(0);
  if (!k->types.empty() && t0 != DType::Undefined &&
      std::find(k->types.begin(), k->types.end(), t0) == k->types.end()) {
    problems.push_back(where + "element type " + dtypeName(t0) + " is not supported");
    return;
  }
  if (k->check) {
    std::string why = k->check(cc);
    if (!why.empty()) problems.push_back(where + why);
  }
  // Subgraphs (If/Loop/Scan): every node inside needs a kernel too. Their
  // values' types shadow the enclosing scope's.
  for (const auto &[an, a] : n.attrs) {
    std::vector<const Graph *> gs;
    if (a.g) gs.push_back(a.g.get());
    for (const auto &g : a.graphs) gs.push_back(g.get());
    for (size_t gi = 0; gi < gs.size(); ++gi) {
      const Graph &g = *gs[gi];
      std::string in = where.substr(0, where.size() - 2) + " '" + an +
                       (a.kind == Attribute::Graphs ? "'[" + std::to_string(gi) + "]" : "'") + " > ";
      std::map<std::string, DType> inner = types;
      for (const auto &[v, t] : g.valueTypes) inner[v] = t;
      for (const auto *list : {&g.inputs, &g.outputs})
        for (const auto &v : *list)
          if (!v.isTensor)
            problems.push_back(in + "value '" + v.name +
                               "' is not a tensor (sequence/map/optional values are not supported)");
      for (const Node &sn : g.nodes) checkNode(sn, opset, inner, in + sn.describe() + ": ", problems);
    }
  }
}
} // namespace

std::vector<std::string> Executor::check() const {
  // ONNX's rules for every node first (ModelVerifier.h), then what the
  // kernels support.
  std::vector<std::string> problems = verifyModel(model_);
  std::map<std::string, DType> types = model_.valueTypes;
  for (const auto *list : {&model_.inputs, &model_.outputs})
    for (const auto &v : *list)
      if (!v.isTensor)
        problems.push_back(model_.path + ": value '" + v.name + "' is not a tensor (sequence/map/optional values are not supported)");
  for (size_t idx : order_) {
    const Node &n = model_.nodes[idx];
    checkNode(n, model_.opset(""), types, model_.path + ": " + n.describe() + ": ", problems);
  }
  return problems;
}

namespace {
/// Runs the kernel; with an observer, times it (steady_clock) and reports.
inline void runKernel(const KernelInfo &k, KernelContext &ctx, size_t node, ExecutionObserver *observer) {
  if (!observer) {
    k.run(ctx);
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  k.run(ctx);
  auto t1 = std::chrono::steady_clock::now();
  observer->nodeRan(node, std::chrono::duration<double>(t1 - t0).count());
}
} // namespace

/// The values of one run, by slot; a slot not set this run falls back to its
/// folded value (when folding applies), then its initializer.
struct Executor::RunState {
  std::vector<Tensor> value;
  std::vector<char> present;
  bool useFold = false;
  /// Given values whose names the graph does not mention (runNodes).
  const std::map<std::string, Tensor> *extra = nullptr;
  /// Reused by every node's KernelContext (no allocation per node).
  std::vector<const Tensor *> inputs;
  std::vector<Tensor> outputs;
};

void Executor::execute(const Node &n, const NodeSlots &ns, size_t index, RunState &st, ExecutionObserver *observer,
                       const NodeHook *hook) const {
  if (!ns.kernel) throw std::runtime_error(model_.path + ": " + n.describe() + ": no CPU kernel");
  // Only Conv reads channels-last bytes: others get the value made plain
  // (once: the slot keeps the plain copy).
  auto get = [&](int32_t s, bool channelsLastOk = false) -> const Tensor * {
    size_t i = size_t(s);
    if (st.present[i]) {
      if (!channelsLastOk && st.value[i].channelsLast()) st.value[i] = cpu::plainLayout(st.value[i]);
      return &st.value[i];
    }
    if (st.useFold && hasFolded_[i]) return &slotFolded_[i];
    return slotInit_[i];
  };
  KernelContext ctx{n, opset_, std::move(st.inputs), std::move(st.outputs)};
  ctx.inputs.clear();
  ctx.outputs.clear();
  ctx.outputs.resize(n.outputs.size());
  for (size_t i = 0; i < ns.inputs.size(); ++i) {
    int32_t s = ns.inputs[i];
    if (s < 0) { ctx.inputs.push_back(nullptr); continue; }
    const Tensor *t = get(s, ns.readsChannelsLast && !hook && (i == 0 || i == 3));
    if (!t) throw std::runtime_error(model_.path + ": " + n.describe() + ": value '" + n.inputs[i] + "' is missing");
    ctx.inputs.push_back(t);
  }
  // Control flow (If/Loop/Scan): the subgraphs see this scope's values.
  std::function<const Tensor *(const std::string &)> scope;
  if (ns.scope) {
    scope = [&](const std::string &name) -> const Tensor * {
      if (auto it = slotOf_.find(name); it != slotOf_.end()) return get(it->second);
      if (st.extra)
        if (auto it = st.extra->find(name); it != st.extra->end()) return &it->second;
      if (st.useFold)
        if (auto it = folded_.find(name); it != folded_.end()) return &it->second;
      auto it = model_.initializers.find(name);
      return it == model_.initializers.end() ? nullptr : &it->second;
    };
    ctx.scope = &scope;
  }
  try {
    if (!hook || !(*hook)(index, ctx)) runKernel(*ns.kernel, ctx, index, observer);
  } catch (const std::exception &e) {
    throw std::runtime_error(model_.path + ": " + n.describe() + ": " + e.what());
  }
  for (size_t i = 0; i < ns.outputs.size(); ++i)
    if (int32_t s = ns.outputs[i]; s >= 0) {
      st.value[size_t(s)] = std::move(ctx.outputs[i]);
      st.present[size_t(s)] = 1;
    }
  st.inputs = std::move(ctx.inputs);
  st.outputs = std::move(ctx.outputs);
}

bool Executor::canFold(const std::map<std::string, Tensor> &given, bool intermediates) const {
  // `intermediates`: `given` may hold values computed upstream (runNodes),
  // folded ones included; those equal the folded values.
  for (const auto &[name, t] : given)
    if (foldDeps_.count(name) || (!intermediates && folded_.count(name))) return false;
  return true;
}

std::map<std::string, Tensor> Executor::run(const std::map<std::string, Tensor> &inputs,
                                            ExecutionObserver *observer) const {
  const size_t numSlots = slotName_.size();
  RunState st;
  st.value.resize(numSlots);
  st.present.assign(numSlots, 0);
  for (const auto &in : model_.inputs)
    if (!inputs.count(in.name))
      throw std::runtime_error(model_.path + ": input '" + in.name + "' was not given");
  bool onlyDeclared = true; // every given name a declared graph input
  for (const auto &entry : inputs) {
    // (not a structured binding: clang before 16 cannot capture one)
    const std::string &name = entry.first;
    const Tensor &t = entry.second;
    auto it = slotOf_.find(name);
    if (it != slotOf_.end()) {
      st.value[size_t(it->second)] = t; // may override initializers
      st.present[size_t(it->second)] = 1;
    }
    onlyDeclared = onlyDeclared && std::any_of(model_.inputs.begin(), model_.inputs.end(),
                                               [&](const ValueInfo &v) { return v.name == name; });
  }
  st.useFold = canFold(inputs, false);
  std::vector<char> fused;
  if (st.useFold) {
    if (onlyDeclared) fused = runFused_;
    else {
      std::set<std::string> keep;
      for (const auto &o : model_.outputs) keep.insert(o.name);
      fused = activeFusions(order_, inputs, keep, true);
    }
  }
  for (size_t step = 0; step < order_.size(); ++step) {
    const size_t idx = order_[step];
    const NodeSlots &ns = nodeSlots_[idx];
    bool skip = st.useFold && isFolded_[idx]; // outputs are in folded_
    if (!skip) {
      const int f = fusionOf_[idx];
      if (!fused.empty() && f >= 0 && fused[size_t(f)]) {
        if (fusions_[size_t(f)].head == idx) execute(fusions_[size_t(f)].node, fusedSlots_[size_t(f)], idx, st, observer, nullptr);
        // else: absorbed into the fused Conv
      } else {
        execute(model_.nodes[idx], ns, idx, st, observer, nullptr);
      }
    }
    // Free what this node read last (skipped nodes' reads too: nothing after them reads those).
    for (int32_t s : ns.reads)
      if (runLastUse_[size_t(s)] == static_cast<int32_t>(step) && !isOutput_[size_t(s)] && st.present[size_t(s)]) {
        st.value[size_t(s)] = Tensor();
        st.present[size_t(s)] = 0;
      }
  }
  std::map<std::string, Tensor> out;
  for (const auto &o : model_.outputs) {
    if (out.count(o.name)) continue;
    const size_t s = size_t(slotOf_.at(o.name));
    if (st.present[s]) out[o.name] = cpu::plainLayout(std::move(st.value[s]));
    else if (st.useFold && hasFolded_[s]) out[o.name] = slotFolded_[s].clone(); // folded values stay immutable
    else if (slotInit_[s]) out[o.name] = *slotInit_[s];
    else throw std::runtime_error(model_.path + ": output '" + o.name + "' was not produced");
  }
  return out;
}

std::map<std::string, Tensor>
Executor::runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
                   const std::set<std::string> &keep,
                   std::map<std::string, std::vector<int64_t>> *shapes,
                   ExecutionObserver *observer, const NodeHook *hook) const {
  const size_t numSlots = slotName_.size();
  std::vector<int32_t> lastUse(numSlots, -1);
  for (size_t step = 0; step < nodes.size(); ++step)
    for (int32_t s : nodeSlots_[nodes[step]].reads) lastUse[size_t(s)] = static_cast<int32_t>(step);
  std::vector<char> keepSlot(numSlots, 0);
  for (const auto &name : keep)
    if (auto it = slotOf_.find(name); it != slotOf_.end()) keepSlot[size_t(it->second)] = 1;
  RunState st;
  st.useFold = canFold(values, true);
  const std::vector<char> fused = hook ? std::vector<char>() : activeFusions(nodes, values, keep, st.useFold);
  st.value.resize(numSlots);
  st.present.assign(numSlots, 0);
  // Given values the graph does not mention stay here (returned when kept).
  std::map<std::string, Tensor> extra;
  for (auto &[name, t] : values) {
    auto it = slotOf_.find(name);
    if (it == slotOf_.end()) { extra.emplace(name, std::move(t)); continue; }
    st.value[size_t(it->second)] = std::move(t);
    st.present[size_t(it->second)] = 1;
  }
  values.clear();
  st.extra = &extra;
  for (size_t step = 0; step < nodes.size(); ++step) {
    const size_t idx = nodes[step];
    const NodeSlots &ns = nodeSlots_[idx];
    const Node *np = &model_.nodes[idx];
    if (st.useFold && isFolded_[idx]) { // outputs are in folded_
      if (shapes)
        for (const auto &o : np->outputs)
          if (!o.empty()) (*shapes)[o] = folded_.at(o).shape();
    } else {
      const Fusion *fu = nullptr;
      const NodeSlots *nsp = &ns;
      const int f = fusionOf_[idx];
      if (!fused.empty() && f >= 0 && fused[size_t(f)]) fu = &fusions_[size_t(f)];
      if (!fu || fu->head == idx) { // else: absorbed into the fused Conv
        if (fu) { np = &fu->node; nsp = &fusedSlots_[size_t(f)]; }
        execute(*np, *nsp, idx, st, observer, hook);
        if (shapes)
          for (size_t i = 0; i < np->outputs.size(); ++i)
            if (int32_t s = nsp->outputs[i]; s >= 0) {
              const std::vector<int64_t> &shape = st.value[size_t(s)].shape();
              (*shapes)[np->outputs[i]] = shape;
              // The skipped intermediates have the Conv's output shape; a
              // broadcasting residual Sum may have widened the last one.
              if (fu)
                for (const auto &v : fu->intermediates) (*shapes)[v] = shape;
            }
      }
    }
    // Free what this node read last (skipped nodes' reads too: nothing after them reads those).
    for (int32_t s : ns.reads)
      if (lastUse[size_t(s)] == static_cast<int32_t>(step) && !keepSlot[size_t(s)] && st.present[size_t(s)]) {
        st.value[size_t(s)] = Tensor();
        st.present[size_t(s)] = 0;
      }
  }
  std::map<std::string, Tensor> out;
  for (const auto &name : keep) {
    auto it = slotOf_.find(name);
    if (it != slotOf_.end() && st.present[size_t(it->second)])
      out[name] = cpu::plainLayout(std::move(st.value[size_t(it->second)]));
    else if (auto et = extra.find(name); et != extra.end()) out[name] = std::move(et->second);
    else if (st.useFold)
      if (auto ft = folded_.find(name); ft != folded_.end()) out[name] = ft->second.clone();
  }
  return out;
}

} // namespace hetplan::runtime
