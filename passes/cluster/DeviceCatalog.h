//===- DeviceCatalog.h - device types the planner knows ---------*- C++ -*-===//
//
// A DeviceType holds one entry of passes/cluster/device_catalog.yaml (see
// docs/device-catalog.md for the fields, units and conventions). The shipped
// catalog is compiled into the binary; cluster files add types or override
// fields of shipped ones.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_CLUSTER_DEVICECATALOG_H
#define HETPLAN_PASSES_CLUSTER_DEVICECATALOG_H

#include "passes/cluster/Stack.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hetplan::cluster {

/// Element types the catalog gives peak rates for.
enum class DType { FP32, TF32, FP16, BF16, INT8 };
constexpr size_t kNumDTypes = 5;
constexpr std::array<DType, kNumDTypes> kAllDTypes = {
    DType::FP32, DType::TF32, DType::FP16, DType::BF16, DType::INT8};

/// "fp32", "tf32", "fp16", "bf16", "int8": the catalog's keys.
llvm::StringRef dtypeName(DType type);
std::optional<DType> parseDType(llvm::StringRef name);

enum class DeviceKind { GPU, CPU };
llvm::StringRef deviceKindName(DeviceKind kind);

/// A device's link to its peers in the same node (`intra_node_link`).
struct DeviceLink {
  std::string kind;         // nvlink4, pcie4, infinity-fabric, ...
  double bandwidthGBs = 0;  // peak, one direction, GB/s (10^9 B/s)
};

/// A device's link to its host (`pcie`).
struct PcieLink {
  int generation = 0;
  double bandwidthGBs = 0;  // peak, one direction, GB/s
};

/// One device type: every field of a catalog entry, in catalog units.
struct DeviceType {
  std::string name;
  std::vector<std::string> aliases;
  std::string vendor;
  DeviceKind kind = DeviceKind::GPU;
  double memoryGiB = 0;
  double memoryBandwidthGBs = 0;
  /// Dense peak per DType, TFLOP/s (TOPS for int8). Absent: no fast path.
  std::array<std::optional<double>, kNumDTypes> peakTflops;
  DeviceLink intraNodeLink;
  PcieLink pcie;
  double tdpWatts = 0;
  std::optional<double> pricePerHourUSD;  // null in the catalog: unknown
  std::vector<std::string> sources;
  Achieved achieved;  // optional calibration

  uint64_t memoryBytes() const;
  /// Peak DRAM bandwidth in bytes/s.
  double memoryBandwidthBytesPerSec() const { return memoryBandwidthGBs * 1e9; }

  /// The catalog figure for `type` in TFLOP/s, absent when the device has
  /// no fast path for it.
  std::optional<double> nativeTflops(DType type) const {
    return peakTflops[size_t(type)];
  }
  bool supports(DType type) const { return nativeTflops(type).has_value(); }

  /// Peak FLOP/s (ops/s for int8) for work in `type`. A missing type falls
  /// back to what the work would run as on this device:
  ///   bf16 -> fp16 -> fp32  (bf16 models run as fp16 on Turing/Volta/Pascal)
  ///   fp16 -> fp32, tf32 -> fp32 (TF32 is an FP32 mode)
  ///   int8 -> fp32          (no int8 tensor path: conservative)
  /// fp32 itself is always present in a valid entry.
  double peakFlops(DType type) const;
};

/// Lower case without '-', '_' and spaces; a memory size "<digits>gb" is
/// folded to "<digits>g" so "A100-80G" and "A100-80GB" meet.
std::string normalizeDeviceName(llvm::StringRef name);

/// The device types known to a run: the shipped catalog plus a cluster's own
/// types and overrides. Entries are shared and immutable, so copying a
/// catalog is cheap and `const DeviceType *` stay valid in every copy.
class DeviceCatalog {
public:
  /// Parses catalog YAML (the schema of device_catalog.yaml; every field is
  /// required). Errors read `bufferName:LINE:COL: message`.
  static llvm::Expected<DeviceCatalog> parse(llvm::StringRef yaml,
                                             llvm::StringRef bufferName);

  /// The catalog shipped in passes/cluster/device_catalog.yaml, embedded at
  /// build time.
  static const DeviceCatalog &builtin();
  /// The text it was parsed from.
  static llvm::StringRef builtinYaml();

  /// Resolves a user-typed name: case, '-', '_' and spaces do not matter,
  /// aliases match. Unknown names get an error naming the closest types.
  llvm::Expected<const DeviceType *> lookup(llvm::StringRef name) const;
  /// Like lookup, without the error: null when unknown.
  const DeviceType *find(llvm::StringRef name) const;
  /// Up to `n` known spellings closest to `name` (edit distance on
  /// normalized names, aliases included), one per device type.
  std::vector<std::string> closest(llvm::StringRef name, size_t n = 3) const;

  /// Adds a new type. Fails when its name or an alias is already known.
  llvm::Error add(DeviceType type);
  /// Replaces the known type that `type.name` resolves to (its aliases stay
  /// valid). Fails when the name is unknown or a new alias belongs to
  /// another type.
  llvm::Error override(DeviceType type);

  /// Software stacks (the catalog's `stacks:`): name lookup ignores case,
  /// '-', '_' and spaces. lookupStack's error names the closest stacks.
  const Stack *findStack(llvm::StringRef name) const;
  llvm::Expected<const Stack *> lookupStack(llvm::StringRef name) const;
  /// Adds `stack`, or replaces the known stack of that name.
  void setStack(Stack stack);
  /// The stack a cluster without its own `stack:` is priced for
  /// (kDefaultStack unless set; `hetplan compile --stack` sets it).
  llvm::StringRef defaultStack() const { return defaultStackName; }
  llvm::Error setDefaultStack(llvm::StringRef name);
  const std::vector<Stack> &stacks() const { return stackList; }

  size_t size() const { return entries.size(); }
  const DeviceType &operator[](size_t i) const { return *entries[i]; }
  std::vector<const DeviceType *> types() const;

private:
  llvm::Error index(size_t entry, const DeviceType &type);

  std::vector<std::shared_ptr<const DeviceType>> entries;
  llvm::StringMap<size_t> byName;  // normalized name or alias -> entry
  std::vector<Stack> stackList;
  std::string defaultStackName{kDefaultStack};
};

/// A device type as JSON, with the catalog's field names (absent peak rates
/// are left out, an unknown price is null).
llvm::json::Value toJSON(const DeviceType &type);

} // namespace hetplan::cluster

#endif
