//===- CostModel.cpp - roofline times and measured profiles ---------------===//
//
// The roofline model (Williams, Waterman, Patterson, "Roofline: an insightful
// visual performance model for multicore architectures", CACM 52(4), 2009):
// an op takes as long as the slower of its arithmetic at the device's peak
// rate and its memory traffic at the device's peak bandwidth, each derated by
// an efficiency. Equations and defaults: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#include "passes/cost/CostModel.h"

#include "hetplan/runtime/JsonDepth.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cmath>

using namespace llvm;

namespace hetplan::cost {

int dtypeBytes(DType d) {
  switch (d) {
  case DType::FP32:
  case DType::TF32:
    return 4;
  case DType::FP16:
  case DType::BF16:
    return 2;
  case DType::INT8:
    return 1;
  }
  return 4;
}

double LayerCost::flopsPerSample() const {
  double total = 0;
  for (const OpCost &op : ops)
    total += op.flopsPerSample;
  return total;
}

double LayerCost::weightBytesPerCall() const {
  double total = 0;
  for (const OpCost &op : ops)
    total += op.weightBytes;
  return total;
}

double ModelCost::forwardFlopsPerSample() const {
  double total = 0;
  for (const LayerCost &layer : layers)
    total += layer.flopsPerSample();
  return total;
}

Efficiency defaultEfficiency(cluster::DeviceKind kind) {
  Efficiency eff; // GPU
  if (kind == cluster::DeviceKind::CPU) {
    eff.matrix = 0.5;
    eff.vector = 0.2;
    eff.memory = 0.6;
    eff.launchSeconds = 2e-6;
  }
  return eff;
}

Efficiency efficiency(const cluster::DeviceType &device, const cluster::Stack &stack) {
  Efficiency eff = defaultEfficiency(device.kind);
  if (device.kind == cluster::DeviceKind::GPU) {
    eff.launchSeconds = stack.kernelUs * 1e-6;
    eff.microBatchSeconds = stack.microBatchUs * 1e-6;
    eff.collectiveSeconds = stack.collectiveUs * 1e-6;
    eff.tf32 = stack.tf32;
    if (stack.matrix)
      eff.matrix = *stack.matrix;
  }
  // The device's own figures, then this stack's on this device type (the
  // device's were measured under some other stack).
  auto apply = [&eff](const cluster::Achieved &a) {
    if (a.matrix)
      eff.matrix = *a.matrix;
    if (a.matrixHalfGflop)
      eff.matrixHalfFlops = *a.matrixHalfGflop * 1e9;
    if (a.memory)
      eff.memory = *a.memory;
    if (a.kernelUs)
      eff.launchSeconds = *a.kernelUs * 1e-6;
    if (a.microBatchUs)
      eff.microBatchSeconds = *a.microBatchUs * 1e-6;
    if (a.collectiveUs)
      eff.collectiveSeconds = *a.collectiveUs * 1e-6;
    if (a.link)
      eff.link = *a.link;
  };
  apply(device.achieved);
  if (auto it = stack.achieved.find(device.name); it != stack.achieved.end())
    apply(it->second);
  return eff;
}

Efficiency defaultEfficiency(const cluster::DeviceType &device) {
  const cluster::Stack *stack = cluster::DeviceCatalog::builtin().findStack(cluster::kDefaultStack);
  return efficiency(device, stack ? *stack : cluster::Stack{});
}

double peakFlopsFor(const OpCost &op, const cluster::DeviceType &device, DType dtype) {
  if (op.matrixEngine)
    return device.peakFlops(dtype);
  // Elementwise ops, reductions, normalizations run on the vector units,
  // never on tensor cores: the FP32 rate, x2 for packed fp16/bf16 math.
  double fp32 = device.peakFlops(DType::FP32);
  if (device.kind == cluster::DeviceKind::GPU &&
      (dtype == DType::FP16 || dtype == DType::BF16) && device.supports(dtype))
    return 2 * fp32;
  return fp32;
}

//===----------------------------------------------------------------------===//
// Profiles
//===----------------------------------------------------------------------===//

namespace {
Error profileError(StringRef buffer, const Twine &message) {
  return createStringError(inconvertibleErrorCode(), (buffer + ": " + message).str());
}

/// A key from the file fit for a one-line message: control and non-ASCII
/// bytes as \xNN, at most 60 characters.
std::string printable(StringRef text) {
  std::string out;
  for (char c : text.take_front(60)) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += hexdigit(unsigned(static_cast<unsigned char>(c)) >> 4, /*LowerCase=*/true);
      out += hexdigit(unsigned(static_cast<unsigned char>(c)) & 15, /*LowerCase=*/true);
    }
  }
  if (text.size() > 60)
    out += "...";
  return out;
}
} // namespace

Expected<Profile> Profile::parse(StringRef text, StringRef bufferName) {
  // A profile nests three levels; refuse deep nesting before the recursive
  // parser sees it.
  if (runtime::jsonNestsDeeperThan(std::string_view(text.data(), text.size()), 16))
    return profileError(bufferName, "nested more than 16 levels deep");
  Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return profileError(bufferName, "not JSON: " + toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return profileError(bufferName, "expected a JSON object {\"device\", \"dtype\", \"ops\"}");
  Profile profile;
  for (const auto &entry : *root) {
    StringRef key = entry.first;
    if (key != "device" && key != "dtype" && key != "ops" && key != "ranks")
      return profileError(bufferName, "unknown field '" + printable(key) +
                                          "' (expected device, dtype, ops, ranks)");
  }
  auto device = root->getString("device");
  if (!device || device->empty())
    return profileError(bufferName, "missing \"device\" (a device catalog name)");
  profile.device = device->str();
  auto dtype = root->getString("dtype");
  if (!dtype)
    return profileError(bufferName, "missing \"dtype\" (fp32, tf32, fp16, bf16 or int8)");
  auto parsedType = cluster::parseDType(*dtype);
  if (!parsedType)
    return profileError(bufferName, "unknown dtype '" + printable(*dtype) +
                                        "' (expected fp32, tf32, fp16, bf16 or int8)");
  profile.dtype = *parsedType;
  const json::Object *ops = root->getObject("ops");
  if (!ops)
    return profileError(bufferName, "missing \"ops\" (an object: node name -> seconds)");
  for (const auto &op : *ops) {
    std::string name = op.first.str(), shown = printable(name);
    ProfileEntry entry;
    if (auto seconds = op.second.getAsNumber()) {
      entry.perSampleSeconds = *seconds;
    } else if (const json::Object *split = op.second.getAsObject()) {
      for (const auto &field : *split)
        if (field.first != "fixed" && field.first != "per_sample")
          return profileError(bufferName, "op '" + shown + "': unknown field '" +
                                              printable(field.first) +
                                              "' (expected fixed, per_sample)");
      std::optional<double> fixed = split->getNumber("fixed");
      std::optional<double> perSample = split->getNumber("per_sample");
      if (!fixed && !perSample)
        return profileError(bufferName, "op '" + shown +
                                            "': expected {\"fixed\": s, \"per_sample\": s}");
      entry.fixedSeconds = fixed.value_or(0);
      entry.perSampleSeconds = perSample.value_or(0);
    } else {
      return profileError(bufferName, "op '" + shown +
                                          "': expected seconds per sample or "
                                          "{\"fixed\": s, \"per_sample\": s}");
    }
    if (entry.fixedSeconds < 0 || entry.perSampleSeconds < 0)
      return profileError(bufferName, "op '" + shown + "': negative time");
    if (!std::isfinite(entry.fixedSeconds) || !std::isfinite(entry.perSampleSeconds))
      return profileError(bufferName, "op '" + shown + "': the time is not a finite number");
    profile.ops[name] = entry;
  }
  if (const json::Value *ranks = root->get("ranks")) {
    const json::Object *speeds = ranks->getAsObject();
    if (!speeds)
      return profileError(bufferName, "\"ranks\" must be an object: rank -> measured speed");
    for (const auto &[key, value] : *speeds) {
      unsigned rank = 0;
      if (StringRef(key).getAsInteger(10, rank) || rank > (1u << 20))
        return profileError(bufferName, "\"ranks\": '" + printable(key) + "' is not a rank (0, 1, 2, ...)");
      std::optional<double> speed = value.getAsNumber();
      if (!speed || !(*speed > 0) || !std::isfinite(*speed))
        return profileError(bufferName, "\"ranks\": rank " + key.str() +
                                            ": the speed must be a positive number");
      profile.rankSpeeds[int(rank)] = *speed;
    }
  }
  return profile;
}

Expected<Profile> Profile::load(StringRef path) {
  llvm::sys::fs::file_status status;  // regular files only (no FIFO, no /dev/zero)
  if (!llvm::sys::fs::status(path, status) && status.type() != llvm::sys::fs::file_type::regular_file)
    return profileError(path, "not a regular file");
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return profileError(path, "cannot read profile: " + buffer.getError().message());
  return parse((*buffer)->getBuffer(), path);
}

json::Value Profile::toJSON() const {
  json::Object opsObject;
  for (const auto &[name, entry] : ops) {
    if (entry.fixedSeconds == 0)
      opsObject[name] = entry.perSampleSeconds;
    else
      opsObject[name] = json::Object{{"fixed", entry.fixedSeconds},
                                     {"per_sample", entry.perSampleSeconds}};
  }
  json::Object out{{"device", device},
                   {"dtype", cluster::dtypeName(dtype).str()},
                   {"ops", std::move(opsObject)}};
  if (!rankSpeeds.empty()) {
    json::Object ranks;
    for (auto [rank, speed] : rankSpeeds)
      ranks[std::to_string(rank)] = speed;
    out["ranks"] = std::move(ranks);
  }
  return out;
}

bool Profile::appliesTo(const cluster::DeviceType &type, DType runType) const {
  return runType == dtype && measuredOn(type);
}

bool Profile::measuredOn(const cluster::DeviceType &type) const {
  std::string key = cluster::normalizeDeviceName(device);
  if (key == cluster::normalizeDeviceName(type.name))
    return true;
  return llvm::any_of(type.aliases, [&](const std::string &alias) {
    return key == cluster::normalizeDeviceName(alias);
  });
}

const ProfileEntry *Profile::find(StringRef opName) const {
  auto it = ops.find(opName.str());
  return it == ops.end() ? nullptr : &it->second;
}

std::optional<double> profiledTime(const OpCost &op, double samples,
                                   const cluster::DeviceType &device, DType dtype,
                                   ArrayRef<Profile> profiles) {
  if (op.name.empty())
    return std::nullopt;
  for (const Profile &profile : profiles)
    if (profile.appliesTo(device, dtype))
      if (const ProfileEntry *entry = profile.find(op.name))
        return entry->at(samples);
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Times
//===----------------------------------------------------------------------===//

double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype, const Efficiency &eff) {
  double flops = op.flops(samples);
  double bytes = op.bytes(samples);
  double compute = 0, memory = 0;
  if (flops > 0) {
    // A TF32 stack runs fp32 products on the tensor cores' TF32 path.
    DType math = eff.tf32 && dtype == DType::FP32 && op.matrixEngine &&
                         device.supports(DType::TF32)
                     ? DType::TF32
                     : dtype;
    // The size curve prices one product: the call's, or one of a batch's.
    double products = op.productsPerSample > 0 ? std::max(1.0, op.productsPerSample * samples) : 1.0;
    double rate = peakFlopsFor(op, device, math) *
                  (op.matrixEngine ? eff.matrixAt(flops / products) : eff.vector);
    compute = rate > 0 ? flops / rate : 0;
  }
  if (bytes > 0) {
    double bandwidth = device.memoryBandwidthBytesPerSec() * eff.memory;
    memory = bandwidth > 0 ? bytes / bandwidth : 0;
  }
  return op.launches * eff.launchSeconds + std::max(compute, memory);
}

double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype) {
  return opTime(op, samples, device, dtype, defaultEfficiency(device));
}

double opTime(const OpCost &op, double samples, const cluster::DeviceType &device,
              DType dtype, const Efficiency &eff, ArrayRef<Profile> profiles) {
  if (auto measured = profiledTime(op, samples, device, dtype, profiles))
    return *measured;
  return opTime(op, samples, device, dtype, eff);
}

double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype) {
  return layerForwardTime(layer, samples, device, dtype, defaultEfficiency(device), {});
}

double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff) {
  return layerForwardTime(layer, samples, device, dtype, eff, {});
}

double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff, ArrayRef<Profile> profiles) {
  double total = 0;
  for (const OpCost &op : layer.ops)
    total += opTime(op, samples, device, dtype, eff, profiles);
  return total;
}

double layerForwardTime(const LayerCost &layer, double samples,
                        const cluster::DeviceType &device, DType dtype,
                        const Efficiency &eff, ArrayRef<Profile> profiles, int tp) {
  if (tp <= 1)
    return layerForwardTime(layer, samples, device, dtype, eff, profiles);
  double total = 0;
  for (size_t k = 0; k < layer.ops.size(); ++k) {
    const OpCost &op = layer.ops[k];
    if (!layer.splitAt(k, tp)) {
      total += opTime(op, samples, device, dtype, eff, profiles);
      continue;
    }
    if (auto measured = profiledTime(op, samples, device, dtype, profiles)) {
      total += *measured / tp;
      continue;
    }
    OpCost part = op;
    part.flopsPerSample /= tp;
    part.productsPerSample /= tp; // heads split across the group
    part.bytesPerSample /= tp;
    part.weightBytes /= tp;
    total += opTime(part, samples, device, dtype, eff);
  }
  return total;
}

double layerStepTime(const LayerCost &layer, double samples,
                     const cluster::DeviceType &device, DType dtype, Mode mode,
                     const Efficiency &eff, ArrayRef<Profile> profiles) {
  double forward = layerForwardTime(layer, samples, device, dtype, eff, profiles);
  return mode == Mode::Train ? kTrainFlopsPerForwardFlop * forward : forward;
}

double modelStateBytes(const LayerCost &layer, Mode mode, DType dtype, int stateBuffers) {
  if (mode == Mode::Train)
    return double(layer.parameters) * trainingBytesPerParam(stateBuffers, dtype);
  return double(layer.parameters) * dtypeBytes(dtype);
}

} // namespace hetplan::cost
