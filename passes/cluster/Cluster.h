//===- Cluster.h - the machines a plan runs on ------------------*- C++ -*-===//
//
// A cluster is nodes of devices joined by links. Devices are numbered by
// rank, node by node. Clusters come from an inline spec (`4xA100-80G,12xT4`)
// or a YAML/JSON file; docs/cluster-format.md gives both grammars.
//
// Bandwidths are peak, one direction, GB/s (10^9 bytes/s); latencies are
// microseconds.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_CLUSTER_CLUSTER_H
#define HETPLAN_PASSES_CLUSTER_CLUSTER_H

#include "passes/cluster/DeviceCatalog.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace hetplan::cluster {

/// Defaults when a spec or file does not say: 200 Gb/s networking (one
/// 200G NIC per device path), and latencies of the order NCCL assumes.
constexpr double kDefaultInterNodeGBs = 25.0;
constexpr double kDefaultInterNodeLatencyUs = 5.0;
constexpr double kDefaultIntraNodeLatencyUs = 1.0;

struct Link {
  double bandwidthGBs = 0;  // one direction
  double latencyUs = 0;
  std::string kind;         // nvlink3, pcie4, net, ...

  /// Seconds to send `bytes` one way: latency + bytes / bandwidth.
  double transferSeconds(double bytes) const {
    return latencyUs * 1e-6 + bytes / (bandwidthGBs * 1e9);
  }
};

struct Device {
  int rank = 0;
  const DeviceType *type = nullptr;  // owned by the cluster's catalog
  int node = 0;
  int localIndex = 0;   // index within its node
  /// Measured fraction of the catalog peak this device reaches (from the
  /// cluster file); scales compute, not memory or links.
  double speedFactor = 1.0;

  double effectiveFlops(DType t) const {
    return type->peakFlops(t) * speedFactor;
  }
};

struct Node {
  std::string name;
  std::vector<int> devices;  // ranks
  /// The node's override when given, else the slowest intra-node link of
  /// its device types (what a ring over the whole node gets).
  Link intraLink;
  bool intraLinkOverridden = false;
  /// This node's own network (its NICs, per device path) when the cluster
  /// file gives one; else the cluster's `interNode` applies to it.
  std::optional<Link> network;
};

class Cluster {
public:
  /// An empty cluster whose device types come from `catalog` (copied; the
  /// copy shares the entries).
  explicit Cluster(DeviceCatalog catalog);

  /// The most devices a cluster may hold (default 2^20). Lowered by the
  /// cluster fuzzer, where every million-device cluster costs seconds.
  static void setMaxDevices(int64_t count);
  static int64_t maxDevices();

  /// `4xA100-80G,12xT4`, `2x8xH100;net=400gbps`, `T4`, ...
  static llvm::Expected<Cluster> fromSpec(llvm::StringRef spec,
                                          const DeviceCatalog &catalog);
  /// A cluster file's text (YAML or JSON). Errors read
  /// `bufferName:LINE:COL: message`.
  static llvm::Expected<Cluster> fromYaml(llvm::StringRef text,
                                          llvm::StringRef bufferName,
                                          const DeviceCatalog &catalog);
  static llvm::Expected<Cluster> fromFile(llvm::StringRef path,
                                          const DeviceCatalog &catalog);

  /// Adds a node; `intraOverride` replaces its devices' own link figures.
  int addNode(std::string name, std::optional<Link> intraOverride = {});
  /// Adds a device of `type` (from catalog()) to `node`; returns its rank.
  int addDevice(int node, const DeviceType *type, double speedFactor = 1.0);

  const DeviceCatalog &catalog() const { return ownCatalog; }

  /// The software stack the plan is priced for (a cluster file's `stack:`,
  /// else the catalog's default stack); a catalog without that stack gives
  /// Stack's defaults.
  const Stack &stack() const;
  /// Selects a stack the catalog knows; the error names the closest ones.
  llvm::Error selectStack(llvm::StringRef name);

  /// The link between two ranks. Same rank: unbounded. Same node: the node's
  /// override, else the intra-node link of the slower endpoint's type.
  /// Different nodes: the slower of the two nodes' networks (a node's own
  /// `network`, else the cluster's inter-node link; the larger latency),
  /// capped by either endpoint's PCIe host link (traffic to the NIC crosses
  /// it).
  Link linkBetween(int devA, int devB) const;

  /// GB/s of a ring visiting `ranks` in order and back to the first: a ring
  /// is as fast as its slowest link. Unbounded (infinity) below two ranks.
  double ringBandwidth(llvm::ArrayRef<int> ranks) const;

  uint64_t totalMemoryBytes() const;
  /// Sum of the devices' peaks (catalog figures, without speed factors).
  double totalPeakFlops(DType type) const;
  /// Sum of known prices per hour; `unpriced` counts devices without one.
  double totalPricePerHour(int &unpriced) const;

  /// For people: per node its devices and link, then the network and
  /// totals.
  std::string describe() const;
  llvm::json::Value toJSON() const;

  std::string name;  // from the file, may be empty
  std::vector<Node> nodes;
  std::vector<Device> devices;  // by rank
  Link interNode{kDefaultInterNodeGBs, kDefaultInterNodeLatencyUs, "net"};
  /// The network a node's devices reach other nodes through: its own
  /// `network`, else interNode.
  const Link &networkOf(int node) const {
    const Node &n = nodes[size_t(node)];
    return n.network ? *n.network : interNode;
  }

private:
  friend Cluster subsetCluster(const Cluster &, llvm::function_ref<bool(const Device &)>);
  DeviceCatalog ownCatalog;
  std::string stackName;  // empty: the catalog's default
};

/// The devices of `cluster` that `keep` accepts (visited in rank order),
/// on the same nodes (a node left without devices is dropped), links,
/// speed factors and stack: the baselines' single-type clusters and
/// --pick-devices' subsets of a cluster file.
Cluster subsetCluster(const Cluster &cluster, llvm::function_ref<bool(const Device &)> keep);

/// A file when `specOrPath` names one, contains '/', or ends in .yaml, .yml
/// or .json; an inline spec otherwise.
llvm::Expected<Cluster> parseClusterSpec(llvm::StringRef specOrPath,
                                         const DeviceCatalog &catalog);

} // namespace hetplan::cluster

#endif
