//===- Executor.cpp - runs an ONNX graph on the CPU -----------------------===//
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Kernels.h"
#include "OpRegistry.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>

namespace hetplan::runtime {

namespace cpu {
void registerElementwiseKernels();
void registerLinalgKernels();
void registerTensorKernels();
} // namespace cpu

namespace {
OpRegistry<KernelInfo> &registry() {
  static OpRegistry<KernelInfo> r;
  return r;
}
void ensureRegistered() {
  static bool done = [] {
    cpu::registerElementwiseKernels();
    cpu::registerLinalgKernels();
    cpu::registerTensorKernels();
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

void registerKernel(const std::string &opType, KernelInfo info) { registry().add(opType, std::move(info)); }

const KernelInfo *findKernel(const std::string &opType) {
  ensureRegistered();
  return registry().find(opType);
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
      bool ok = std::all_of(n.inputs.begin(), n.inputs.end(),
                            [&](const std::string &s) { return s.empty() || ready.count(s); });
      if (!ok) continue;
      done[i] = true; --remaining; progress = true;
      order.push_back(i);
      for (const auto &o : n.outputs) if (!o.empty()) ready.insert(o);
    }
    if (!progress) {
      for (size_t i = 0; i < model.nodes.size(); ++i)
        if (!done[i]) {
          const Node &n = model.nodes[i];
          for (const auto &s : n.inputs)
            if (!s.empty() && !ready.count(s))
              throw std::runtime_error(model.path + ": " + n.describe() + ": input '" + s +
                                       "' is never produced (or the graph has a cycle)");
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
  // Initializers each folded value depends on (transitively).
  std::map<std::string, std::set<std::string>> deps;
  for (size_t idx : order_) {
    const Node &n = model_.nodes[idx];
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    if (kNondeterministic.count(n.opType)) continue;
    if (hasSubgraphAttribute(n)) continue;
    const KernelInfo *k = findKernel(n.opType);
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
}

std::vector<std::string> Executor::check() const {
  std::vector<std::string> problems;
  std::map<std::string, DType> types = model_.valueTypes;
  for (const auto *list : {&model_.inputs, &model_.outputs})
    for (const auto &v : *list)
      if (!v.isTensor)
        problems.push_back(model_.path + ": value '" + v.name + "' is not a tensor (sequence/map/optional values are not supported)");
  for (size_t idx : order_) {
    const Node &n = model_.nodes[idx];
    std::string where = model_.path + ": " + n.describe() + ": ";
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      problems.push_back(where + "domain '" + n.domain + "' is not supported");
      continue;
    }
    const KernelInfo *k = findKernel(n.opType);
    if (!k) {
      problems.push_back(where + "no CPU kernel for " + n.opType);
      continue;
    }
    if (hasSubgraphAttribute(n)) {
      problems.push_back(where + "subgraph attributes are not supported");
      continue;
    }
    CheckContext cc{n, model_.opset(""), {}};
    for (const auto &s : n.inputs) {
      auto it = types.find(s);
      cc.inputTypes.push_back(s.empty() || it == types.end() ? DType::Undefined : it->second);
    }
    DType t0 = cc.in(0);
    if (!k->types.empty() && t0 != DType::Undefined &&
        std::find(k->types.begin(), k->types.end(), t0) == k->types.end()) {
      problems.push_back(where + "element type " + dtypeName(t0) + " is not supported");
      continue;
    }
    if (k->check) {
      std::string why = k->check(cc);
      if (!why.empty()) problems.push_back(where + why);
    }
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

namespace {
/// A value by name: computed this run, else folded at load (when folding
/// applies), else an initializer; null when none has it.
const Tensor *findValue(const std::map<std::string, Tensor> &values,
                        const std::map<std::string, Tensor> *folded,
                        const std::map<std::string, Tensor> &initializers,
                        const std::string &name) {
  auto it = values.find(name);
  if (it != values.end()) return &it->second;
  if (folded) {
    auto ft = folded->find(name);
    if (ft != folded->end()) return &ft->second;
  }
  auto jt = initializers.find(name);
  return jt == initializers.end() ? nullptr : &jt->second;
}

/// Runs one node: gathers its inputs through `lookup`, runs its kernel and
/// returns its outputs; errors name the model and the node.
template <typename Lookup>
std::vector<Tensor> executeNode(const Model &model, const Node &n, size_t index, int64_t opset,
                                Lookup &&lookup, ExecutionObserver *observer,
                                const Executor::NodeHook *hook = nullptr) {
  const KernelInfo *k = findKernel(n.opType);
  if (!k) throw std::runtime_error(model.path + ": " + n.describe() + ": no CPU kernel");
  KernelContext ctx{n, opset, {}, std::vector<Tensor>(n.outputs.size())};
  for (const auto &s : n.inputs) {
    if (s.empty()) { ctx.inputs.push_back(nullptr); continue; }
    const Tensor *t = lookup(s);
    if (!t) throw std::runtime_error(model.path + ": " + n.describe() + ": value '" + s + "' is missing");
    ctx.inputs.push_back(t);
  }
  try {
    if (!hook || !(*hook)(index, ctx)) runKernel(*k, ctx, index, observer);
  } catch (const std::exception &e) {
    throw std::runtime_error(model.path + ": " + n.describe() + ": " + e.what());
  }
  return std::move(ctx.outputs);
}
} // namespace

bool Executor::canFold(const std::map<std::string, Tensor> &given, bool intermediates) const {
  // `intermediates`: `given` may hold values computed upstream (runNodes),
  // folded ones included; those equal the folded values.
  for (const auto &[name, t] : given)
    if (foldDeps_.count(name) || (!intermediates && folded_.count(name))) return false;
  return true;
}

std::map<std::string, Tensor> Executor::run(const std::map<std::string, Tensor> &inputs,
                                            ExecutionObserver *observer) const {
  // Last use of each value, so intermediates can be freed early.
  std::map<std::string, size_t> lastUse;
  for (size_t step = 0; step < order_.size(); ++step)
    for (const auto &s : model_.nodes[order_[step]].inputs)
      if (!s.empty()) lastUse[s] = step;
  std::set<std::string> keep;
  for (const auto &o : model_.outputs) keep.insert(o.name);

  std::map<std::string, Tensor> values;
  for (const auto &in : model_.inputs) {
    auto it = inputs.find(in.name);
    if (it == inputs.end())
      throw std::runtime_error(model_.path + ": input '" + in.name + "' was not given");
    values[in.name] = it->second;
  }
  for (const auto &[name, t] : inputs) values.emplace(name, t); // may override initializers
  const bool useFold = canFold(inputs, false);
  auto lookup = [&](const std::string &s) {
    return findValue(values, useFold ? &folded_ : nullptr, model_.initializers, s);
  };
  int64_t opset = model_.opset("");
  for (size_t step = 0; step < order_.size(); ++step) {
    const Node &n = model_.nodes[order_[step]];
    if (useFold && isFolded_[order_[step]]) continue; // outputs are in folded_
    std::vector<Tensor> outs = executeNode(model_, n, order_[step], opset, lookup, observer);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) values[n.outputs[i]] = std::move(outs[i]);
    for (const auto &s : n.inputs)
      if (!s.empty() && lastUse[s] == step && !keep.count(s) && !inputs.count(s)) values.erase(s);
  }
  std::map<std::string, Tensor> out;
  for (const auto &o : model_.outputs) {
    const Tensor *t = lookup(o.name);
    if (!t) throw std::runtime_error(model_.path + ": output '" + o.name + "' was not produced");
    bool isFoldedValue = useFold && !values.count(o.name) && folded_.count(o.name);
    out[o.name] = isFoldedValue ? t->clone() : *t; // folded values stay immutable
  }
  return out;
}

std::map<std::string, Tensor>
Executor::runNodes(const std::vector<size_t> &nodes, std::map<std::string, Tensor> values,
                   const std::set<std::string> &keep,
                   std::map<std::string, std::vector<int64_t>> *shapes,
                   ExecutionObserver *observer, const NodeHook *hook) const {
  std::map<std::string, size_t> lastUse;
  for (size_t step = 0; step < nodes.size(); ++step)
    for (const auto &s : model_.nodes[nodes[step]].inputs)
      if (!s.empty()) lastUse[s] = step;
  const bool useFold = canFold(values, true);
  auto lookup = [&](const std::string &s) {
    return findValue(values, useFold ? &folded_ : nullptr, model_.initializers, s);
  };
  int64_t opset = model_.opset("");
  for (size_t step = 0; step < nodes.size(); ++step) {
    const Node &n = model_.nodes[nodes[step]];
    if (useFold && isFolded_[nodes[step]]) { // outputs are in folded_
      if (shapes)
        for (const auto &o : n.outputs)
          if (!o.empty()) (*shapes)[o] = folded_.at(o).shape();
      continue;
    }
    std::vector<Tensor> outs = executeNode(model_, n, nodes[step], opset, lookup, observer, hook);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) {
        if (shapes) (*shapes)[n.outputs[i]] = outs[i].shape();
        values[n.outputs[i]] = std::move(outs[i]);
      }
    for (const auto &s : n.inputs)
      if (!s.empty() && lastUse[s] == step && !keep.count(s)) values.erase(s);
  }
  std::map<std::string, Tensor> out;
  for (const auto &name : keep) {
    auto it = values.find(name);
    if (it != values.end()) out[name] = std::move(it->second);
    else if (useFold)
      if (auto ft = folded_.find(name); ft != folded_.end()) out[name] = ft->second.clone();
  }
  return out;
}

} // namespace hetplan::runtime
