//===- Stack.cpp - reading software stacks from catalogs and clusters -----===//

#include "passes/cluster/ClusterYaml.h"
#include "passes/cluster/Stack.h"

#include "llvm/ADT/StringExtras.h"

using namespace llvm;

namespace hetplan::cluster::detail {

namespace {

constexpr StringRef kStackFields[] = {"name",    "kernel_us",       "micro_batch_us",
                                      "tf32",    "fused_attention", "source",
                                      "scatter_gather_sends", "matrix", "fused_cross_entropy",
                                      "achieved", "fused_elementwise", "collective_us"};

bool readBool(YamlReader &r, const YamlValue &v, StringRef field, StringRef where,
              bool &out) {
  if (v.kind == YamlValue::Scalar && (v.scalar == "true" || v.scalar == "false")) {
    out = v.scalar == "true";
    return true;
  }
  return r.error(v, "'" + field + "' must be true or false " + where);
}

/// The fields of one stack mapping on top of what `stack` holds.
/// `achieved:` of a stack: device type -> its achieved figures, each type
/// one the catalog knows (by name or alias).
bool readStackAchieved(YamlReader &r, const YamlValue &map, Stack &stack, const DeviceCatalog &catalog,
                       const std::string &where) {
  if (map.kind != YamlValue::Mapping)
    return r.error(map, "'achieved' must map device types to their figures (matrix, matrix_half_gflop, "
                        "memory, kernel_us, collective_us, link) " + where);
  for (const YamlField &f : map.fields) {
    auto type = catalog.lookup(f.key);
    if (!type)
      return r.error(f.value, "'achieved' names device type '" + f.key + "' " + where + ": " +
                                  toString(type.takeError()));
    Achieved a = stack.achieved[(*type)->name];
    if (!readAchieved(r, f.value, "for " + (*type)->name + " " + where, a))
      return false;
    stack.achieved[(*type)->name] = std::move(a);
  }
  return true;
}

bool readStackFields(YamlReader &r, const YamlValue &map, Stack &stack, const DeviceCatalog &catalog,
                     StringSet<> &given) {
  if (map.kind != YamlValue::Mapping)
    return r.error(map, "expected a software stack (a mapping with 'name', 'kernel_us', "
                        "'micro_batch_us', 'tf32', 'fused_attention', 'source')");
  if (!r.require(map, "name", "in stack entry") ||
      !r.readString(*map.get("name"), "name", stack.name))
    return false;
  if (stack.name.empty())
    return r.error(*map.get("name"), "empty stack name");
  std::string where = "in stack '" + stack.name + "'";
  if (!r.checkMapping(map, kStackFields, "a stack", where))
    return false;
  for (const YamlField &f : map.fields) {
    given.insert(f.key);
    bool ok = true;
    if (f.key == "kernel_us")
      ok = r.readPositive(f.value, f.key, stack.kernelUs, /*allowZero=*/true);
    else if (f.key == "micro_batch_us")
      ok = r.readPositive(f.value, f.key, stack.microBatchUs, /*allowZero=*/true);
    else if (f.key == "collective_us")
      ok = r.readPositive(f.value, f.key, stack.collectiveUs, /*allowZero=*/true);
    else if (f.key == "tf32")
      ok = readBool(r, f.value, f.key, where, stack.tf32);
    else if (f.key == "fused_attention")
      ok = readBool(r, f.value, f.key, where, stack.fusedAttention);
    else if (f.key == "matrix") {
      double share = 0;
      ok = r.readPositive(f.value, f.key, share);
      if (ok && share > 1)
        ok = r.error(f.value, "'matrix' is a share of the peak, at most 1, not " + f.value.scalar +
                                  " " + where);
      stack.matrix = share;
    } else if (f.key == "scatter_gather_sends")
      ok = readBool(r, f.value, f.key, where, stack.scatterGatherSends);
    else if (f.key == "fused_cross_entropy")
      ok = readBool(r, f.value, f.key, where, stack.fusedCrossEntropy);
    else if (f.key == "fused_elementwise")
      ok = readBool(r, f.value, f.key, where, stack.fusedElementwise);
    else if (f.key == "source")
      ok = r.readString(f.value, f.key, stack.source);
    else if (f.key == "achieved")
      ok = readStackAchieved(r, f.value, stack, catalog, where);
    if (!ok)
      return false;
  }
  return true;
}

/// Reads one entry: an override of a stack `catalog` knows, else a new one
/// that must give every field (`source` too when strict).
bool readStackEntry(YamlReader &r, const YamlValue &entry, DeviceCatalog &catalog,
                    bool strict, std::string *name) {
  const YamlValue *nameValue = entry.kind == YamlValue::Mapping ? entry.get("name") : nullptr;
  const Stack *existing = !strict && nameValue && nameValue->kind == YamlValue::Scalar
                              ? catalog.findStack(nameValue->scalar)
                              : nullptr;
  Stack stack = existing ? *existing : Stack();
  StringSet<> given;
  if (!readStackFields(r, entry, stack, catalog, given))
    return false;
  if (!existing)
    for (StringRef key : kStackFields)
      if (!given.contains(key) && key != "scatter_gather_sends" && key != "matrix" &&
          key != "fused_cross_entropy" && key != "achieved" && key != "fused_elementwise" &&
          key != "collective_us" && (strict || key != "source")) {
        std::string known;
        for (const Stack &s : catalog.stacks())
          known += (known.empty() ? "" : ", ") + s.name;
        return r.error(entry, "missing field '" + key + "' in stack '" + stack.name + "'" +
                                  (strict || known.empty()
                                       ? std::string()
                                       : " (not a known stack, so a new one; known: " +
                                             known + ")"));
      }
  if (strict && catalog.findStack(stack.name))
    return r.error(entry, "stack '" + stack.name + "' is listed twice");
  if (name)
    *name = stack.name;
  catalog.setStack(std::move(stack));
  return true;
}

} // namespace

bool readStacks(YamlReader &r, const YamlValue &list, DeviceCatalog &catalog, bool strict) {
  if (list.kind != YamlValue::Sequence)
    return r.error(list, "'stacks' must be a list of software stacks");
  for (const YamlValue &entry : list.items)
    if (!readStackEntry(r, entry, catalog, strict, nullptr))
      return false;
  return true;
}

bool readStackSelection(YamlReader &r, const YamlValue &value, DeviceCatalog &catalog,
                        std::string &selected) {
  if (value.kind == YamlValue::Scalar) {
    auto stack = catalog.lookupStack(value.scalar);
    if (!stack)
      return r.error(value, toString(stack.takeError()));
    selected = (*stack)->name;
    return true;
  }
  return readStackEntry(r, value, catalog, /*strict=*/false, &selected);
}

} // namespace hetplan::cluster::detail
