//===- DeviceCatalog.cpp - device types the planner knows -----------------===//

#include "passes/cluster/DeviceCatalog.h"
#include "passes/cluster/ClusterYaml.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>

using namespace llvm;

namespace hetplan::cluster {

// kBuiltinCatalogYaml: device_catalog.yaml as bytes (see EmbedFile.cmake).
#include "passes/cluster/DeviceCatalogData.inc"

StringRef dtypeName(DType type) {
  switch (type) {
  case DType::FP32:
    return "fp32";
  case DType::TF32:
    return "tf32";
  case DType::FP16:
    return "fp16";
  case DType::BF16:
    return "bf16";
  case DType::INT8:
    return "int8";
  }
  llvm_unreachable("unknown DType");
}

std::optional<DType> parseDType(StringRef name) {
  for (DType t : kAllDTypes)
    if (name.equals_insensitive(dtypeName(t)))
      return t;
  return std::nullopt;
}

StringRef deviceKindName(DeviceKind kind) {
  return kind == DeviceKind::GPU ? "gpu" : "cpu";
}

uint64_t DeviceType::memoryBytes() const {
  return uint64_t(memoryGiB * double(uint64_t(1) << 30));
}

double DeviceType::peakFlops(DType type) const {
  // The chain a planner would take when the type has no fast path here.
  static constexpr DType fallback[][3] = {
      /*FP32*/ {DType::FP32, DType::FP32, DType::FP32},
      /*TF32*/ {DType::TF32, DType::FP32, DType::FP32},
      /*FP16*/ {DType::FP16, DType::FP32, DType::FP32},
      /*BF16*/ {DType::BF16, DType::FP16, DType::FP32},
      /*INT8*/ {DType::INT8, DType::FP32, DType::FP32},
  };
  for (DType t : fallback[size_t(type)])
    if (auto tflops = nativeTflops(t))
      return *tflops * 1e12;
  return 0;
}

std::string normalizeDeviceName(StringRef name) {
  std::string out;
  for (char c : name)
    if (c != '-' && c != '_' && c != ' ')
      out += toLower(c);
  // "80gb" -> "80g": people write either for the same memory size.
  std::string folded;
  for (size_t i = 0; i < out.size(); ++i) {
    folded += out[i];
    if (out[i] == 'g' && i > 0 && isDigit(out[i - 1]) && i + 1 < out.size() &&
        out[i + 1] == 'b')
      ++i;
  }
  return folded;
}

//===----------------------------------------------------------------------===//
// DeviceCatalog
//===----------------------------------------------------------------------===//

Expected<DeviceCatalog> DeviceCatalog::parse(StringRef yaml,
                                             StringRef bufferName) {
  detail::YamlReader r(yaml, bufferName);
  const detail::YamlValue *root = r.root();
  DeviceCatalog catalog;
  static constexpr StringRef topFields[] = {"version", "stacks", "devices"};
  if (root && r.checkMapping(*root, topFields, "the catalog", "in catalog") &&
      r.require(*root, "version", "in catalog") &&
      r.require(*root, "devices", "in catalog")) {
    int64_t version = 0;
    const detail::YamlValue &devices = *root->get("devices");
    if (r.readInt(*root->get("version"), "version", version) && version != 1)
      r.error(*root->get("version"),
              "unsupported catalog version " + Twine(version) +
                  " (this hetplan reads version 1)");
    else if (devices.kind != detail::YamlValue::Sequence)
      r.error(devices, "'devices' must be a list of devices");
    for (const detail::YamlValue &entry : devices.items) {
      if (r.failed())
        break;
      DeviceType type;
      StringSet<> given;
      if (!detail::readDeviceFields(r, entry, type, given) ||
          !detail::requireComplete(r, entry, given,
                                   "in device '" + type.name + "'",
                                   /*strict=*/true))
        break;
      if (Error err = catalog.add(std::move(type)))
        r.error(entry, toString(std::move(err)));
    }
    if (const detail::YamlValue *stacks = root->get("stacks"); stacks && !r.failed())
      detail::readStacks(r, *stacks, catalog, /*strict=*/true);
  }
  if (r.failed())
    return r.takeError();
  return catalog;
}

StringRef DeviceCatalog::builtinYaml() {
  return StringRef(reinterpret_cast<const char *>(kBuiltinCatalogYaml),
                   sizeof(kBuiltinCatalogYaml));
}

const DeviceCatalog &DeviceCatalog::builtin() {
  static const DeviceCatalog catalog = [] {
    auto parsed = parse(builtinYaml(), "device_catalog.yaml");
    // The unit tests parse the same bytes; a failure here is a build bug.
    if (!parsed)
      report_fatal_error(Twine("built-in device catalog: ") +
                         toString(parsed.takeError()));
    return std::move(*parsed);
  }();
  return catalog;
}

const DeviceType *DeviceCatalog::find(StringRef name) const {
  auto it = byName.find(normalizeDeviceName(name));
  return it == byName.end() ? nullptr : entries[it->second].get();
}

Expected<const DeviceType *> DeviceCatalog::lookup(StringRef name) const {
  if (const DeviceType *type = find(name))
    return type;
  std::string message = ("unknown device type '" + name + "'").str();
  std::vector<std::string> near = closest(name);
  if (!near.empty())
    message += "; closest: " + join(near, ", ");
  return createStringError(inconvertibleErrorCode(), message);
}

std::vector<std::string> DeviceCatalog::closest(StringRef name,
                                                size_t n) const {
  std::string key = normalizeDeviceName(name);
  struct Candidate {
    unsigned distance;
    size_t entry;
    std::string spelling;
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < entries.size(); ++i) {
    const DeviceType &type = *entries[i];
    // One candidate per type: its spelling nearest to what was typed.
    Candidate best{~0u, i, type.name};
    auto consider = [&](const std::string &spelling) {
      unsigned d = StringRef(key).edit_distance(normalizeDeviceName(spelling));
      if (d < best.distance)
        best = {d, i, spelling};
    };
    consider(type.name);
    for (const std::string &alias : type.aliases)
      consider(alias);
    candidates.push_back(std::move(best));
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.distance < b.distance;
                   });
  std::vector<std::string> out;
  for (size_t i = 0; i < candidates.size() && i < n; ++i)
    out.push_back(candidates[i].spelling);
  return out;
}

Error DeviceCatalog::index(size_t entry, const DeviceType &type) {
  std::vector<std::string> spellings = {type.name};
  spellings.insert(spellings.end(), type.aliases.begin(), type.aliases.end());
  for (const std::string &spelling : spellings) {
    std::string key = normalizeDeviceName(spelling);
    if (key.empty())
      return createStringError(inconvertibleErrorCode(),
                               "empty device name or alias in '" + type.name +
                                   "'");
    auto [it, inserted] = byName.try_emplace(key, entry);
    if (!inserted && it->second != entry)
      return createStringError(
          inconvertibleErrorCode(),
          "device name '" + spelling + "' of '" + type.name +
              "' already names '" + entries[it->second]->name + "'");
  }
  return Error::success();
}

Error DeviceCatalog::add(DeviceType type) {
  // Check every spelling before changing anything.
  std::vector<std::string> spellings = {type.name};
  spellings.insert(spellings.end(), type.aliases.begin(), type.aliases.end());
  StringMap<bool> mine;
  for (const std::string &spelling : spellings) {
    std::string key = normalizeDeviceName(spelling);
    auto it = byName.find(key);
    if (it != byName.end())
      return createStringError(
          inconvertibleErrorCode(),
          "device name '" + spelling + "' of '" + type.name +
              "' already names '" + entries[it->second]->name + "'");
    if (!mine.try_emplace(key, true).second)
      return createStringError(inconvertibleErrorCode(),
                               "device '" + type.name + "' lists '" +
                                   spelling + "' twice (after normalizing)");
  }
  entries.push_back(std::make_shared<const DeviceType>(std::move(type)));
  return index(entries.size() - 1, *entries.back());
}

Error DeviceCatalog::override(DeviceType type) {
  auto it = byName.find(normalizeDeviceName(type.name));
  if (it == byName.end())
    return createStringError(inconvertibleErrorCode(),
                             "cannot override unknown device type '" +
                                 type.name + "'");
  size_t entry = it->second;
  const DeviceType &old = *entries[entry];
  // The entry keeps its canonical name and every old spelling, so names
  // that resolved before still do.
  type.name = old.name;
  for (const std::string &alias : old.aliases)
    if (!is_contained(type.aliases, alias))
      type.aliases.push_back(alias);
  for (const std::string &alias : type.aliases) {
    auto found = byName.find(normalizeDeviceName(alias));
    if (found != byName.end() && found->second != entry)
      return createStringError(inconvertibleErrorCode(),
                               "alias '" + alias + "' of '" + type.name +
                                   "' already names '" +
                                   entries[found->second]->name + "'");
  }
  entries[entry] = std::make_shared<const DeviceType>(std::move(type));
  return index(entry, *entries[entry]);
}

const Stack *DeviceCatalog::findStack(StringRef name) const {
  std::string key = normalizeDeviceName(name);
  for (const Stack &s : stackList)
    if (normalizeDeviceName(s.name) == key)
      return &s;
  return nullptr;
}

Expected<const Stack *> DeviceCatalog::lookupStack(StringRef name) const {
  if (const Stack *s = findStack(name))
    return s;
  std::string key = normalizeDeviceName(name);
  std::vector<std::pair<unsigned, std::string>> near;
  for (const Stack &s : stackList)
    near.push_back({StringRef(key).edit_distance(normalizeDeviceName(s.name)), s.name});
  std::stable_sort(near.begin(), near.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  std::string message = ("unknown software stack '" + name + "'").str();
  for (size_t i = 0; i < near.size() && i < 3; ++i)
    message += (i ? ", " : "; closest: ") + near[i].second;
  return createStringError(inconvertibleErrorCode(), message);
}

void DeviceCatalog::setStack(Stack stack) {
  for (Stack &s : stackList)
    if (normalizeDeviceName(s.name) == normalizeDeviceName(stack.name)) {
      s = std::move(stack);
      return;
    }
  stackList.push_back(std::move(stack));
}

Error DeviceCatalog::setDefaultStack(StringRef name) {
  auto found = lookupStack(name);
  if (!found)
    return found.takeError();
  defaultStackName = (*found)->name;
  return Error::success();
}

json::Value toJSON(const Stack &stack) {
  json::Object achieved;
  for (const auto &[type, a] : stack.achieved) {
    json::Object o;
    if (a.matrix) o["matrix"] = *a.matrix;
    if (a.matrixHalfGflop) o["matrix_half_gflop"] = *a.matrixHalfGflop;
    if (a.memory) o["memory"] = *a.memory;
    if (a.kernelUs) o["kernel_us"] = *a.kernelUs;
    if (a.microBatchUs) o["micro_batch_us"] = *a.microBatchUs;
    if (a.collectiveUs) o["collective_us"] = *a.collectiveUs;
    if (a.link) o["link"] = *a.link;
    achieved[type] = std::move(o);
  }
  return json::Object{{"name", stack.name},
                      {"achieved", std::move(achieved)},
                      {"kernel_us", stack.kernelUs},
                      {"micro_batch_us", stack.microBatchUs},
                      {"collective_us", stack.collectiveUs},
                      {"tf32", stack.tf32},
                      {"fused_attention", stack.fusedAttention},
                      {"scatter_gather_sends", stack.scatterGatherSends},
                      {"fused_cross_entropy", stack.fusedCrossEntropy},
                      {"fused_elementwise", stack.fusedElementwise},
                      {"matrix", stack.matrix ? json::Value(*stack.matrix) : json::Value(nullptr)},
                      {"source", stack.source}};
}

std::vector<const DeviceType *> DeviceCatalog::types() const {
  std::vector<const DeviceType *> out;
  for (const auto &entry : entries)
    out.push_back(entry.get());
  return out;
}

json::Value toJSON(const DeviceType &type) {
  json::Object rates;
  for (DType t : kAllDTypes)
    if (auto tflops = type.nativeTflops(t))
      rates[dtypeName(t)] = *tflops;
  json::Value price = nullptr;
  if (type.pricePerHourUSD)
    price = *type.pricePerHourUSD;
  json::Object achieved;
  if (type.achieved.matrix)
    achieved["matrix"] = *type.achieved.matrix;
  if (type.achieved.matrixHalfGflop)
    achieved["matrix_half_gflop"] = *type.achieved.matrixHalfGflop;
  if (type.achieved.memory)
    achieved["memory"] = *type.achieved.memory;
  if (type.achieved.kernelUs)
    achieved["kernel_us"] = *type.achieved.kernelUs;
  if (type.achieved.microBatchUs)
    achieved["micro_batch_us"] = *type.achieved.microBatchUs;
  if (type.achieved.collectiveUs)
    achieved["collective_us"] = *type.achieved.collectiveUs;
  if (type.achieved.link)
    achieved["link"] = *type.achieved.link;
  if (!type.achieved.source.empty())
    achieved["source"] = type.achieved.source;
  json::Object out{
      {"name", type.name},
      {"aliases", json::Array(type.aliases)},
      {"vendor", type.vendor},
      {"kind", deviceKindName(type.kind)},
      {"memory_gib", type.memoryGiB},
      {"memory_bandwidth_gbs", type.memoryBandwidthGBs},
      {"peak_tflops", std::move(rates)},
      {"intra_node_link",
       json::Object{{"kind", type.intraNodeLink.kind},
                    {"bandwidth_gbs", type.intraNodeLink.bandwidthGBs}}},
      {"pcie", json::Object{{"generation", type.pcie.generation},
                            {"bandwidth_gbs", type.pcie.bandwidthGBs}}},
      {"tdp_watts", type.tdpWatts > 0 ? json::Value(type.tdpWatts) : nullptr},
      {"price_per_hour_usd", std::move(price)},
      {"sources", json::Array(type.sources)},
  };
  if (!achieved.empty())
    out["achieved"] = std::move(achieved);
  return out;
}

} // namespace hetplan::cluster
