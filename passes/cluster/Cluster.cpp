//===- Cluster.cpp - the machines a plan runs on --------------------------===//

#include "passes/cluster/Cluster.h"
#include "passes/cluster/ClusterYaml.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <atomic>
#include <limits>
#include <map>

using namespace llvm;

namespace hetplan::cluster {

/// More devices than any real cluster: catches a mistyped count before it
/// allocates millions of entries.
static std::atomic<int64_t> maxDeviceCount{1 << 20};

void Cluster::setMaxDevices(int64_t count) { maxDeviceCount = count; }
int64_t Cluster::maxDevices() { return maxDeviceCount; }

static Error makeError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

Cluster::Cluster(DeviceCatalog catalog) : ownCatalog(std::move(catalog)) {}

const Stack &Cluster::stack() const {
  if (const Stack *s = ownCatalog.findStack(stackName.empty() ? ownCatalog.defaultStack()
                                                              : StringRef(stackName)))
    return *s;
  static const Stack fallback{std::string(kDefaultStack)};
  return fallback;
}

Error Cluster::selectStack(StringRef name) {
  auto found = ownCatalog.lookupStack(name);
  if (!found)
    return found.takeError();
  stackName = (*found)->name;
  return Error::success();
}

/// The link a device type brings to its node, with the default latency.
static Link typeLink(const DeviceType &type) {
  return {type.intraNodeLink.bandwidthGBs, kDefaultIntraNodeLatencyUs,
          type.intraNodeLink.kind};
}

int Cluster::addNode(std::string nodeName, std::optional<Link> intraOverride) {
  Node node;
  node.name = std::move(nodeName);
  if (intraOverride) {
    node.intraLink = *intraOverride;
    node.intraLinkOverridden = true;
  }
  nodes.push_back(std::move(node));
  return int(nodes.size()) - 1;
}

int Cluster::addDevice(int nodeIndex, const DeviceType *type,
                       double speedFactor) {
  assert(nodeIndex >= 0 && size_t(nodeIndex) < nodes.size() && type);
  Node &node = nodes[nodeIndex];
  Device device;
  device.rank = int(devices.size());
  device.type = type;
  device.node = nodeIndex;
  device.localIndex = int(node.devices.size());
  device.speedFactor = speedFactor;
  // The node-wide link is its slowest member's (a ring over the node).
  if (!node.intraLinkOverridden &&
      (node.devices.empty() ||
       type->intraNodeLink.bandwidthGBs < node.intraLink.bandwidthGBs))
    node.intraLink = typeLink(*type);
  node.devices.push_back(device.rank);
  devices.push_back(device);
  return device.rank;
}

Link Cluster::linkBetween(int devA, int devB) const {
  assert(devA >= 0 && size_t(devA) < devices.size() && devB >= 0 &&
         size_t(devB) < devices.size() && "rank out of range");
  if (devA == devB)
    return {std::numeric_limits<double>::infinity(), 0, "local"};
  const Device &a = devices[devA], &b = devices[devB];
  if (a.node == b.node) {
    const Node &node = nodes[a.node];
    if (node.intraLinkOverridden)
      return node.intraLink;
    const DeviceType &slower =
        a.type->intraNodeLink.bandwidthGBs <= b.type->intraNodeLink.bandwidthGBs
            ? *a.type
            : *b.type;
    return typeLink(slower);
  }
  // The path is as fast as its slower end's network, and crosses each
  // endpoint's PCIe host link to reach the NIC.
  const Link &na = networkOf(a.node), &nb = networkOf(b.node);
  Link link = na.bandwidthGBs <= nb.bandwidthGBs ? na : nb;
  link.latencyUs = std::max(na.latencyUs, nb.latencyUs);
  link.bandwidthGBs =
      std::min({link.bandwidthGBs, a.type->pcie.bandwidthGBs,
                b.type->pcie.bandwidthGBs});
  return link;
}

double Cluster::ringBandwidth(ArrayRef<int> ranks) const {
  double slowest = std::numeric_limits<double>::infinity();
  if (ranks.size() < 2)
    return slowest;
  for (size_t i = 0; i < ranks.size(); ++i)
    slowest = std::min(
        slowest,
        linkBetween(ranks[i], ranks[(i + 1) % ranks.size()]).bandwidthGBs);
  return slowest;
}

uint64_t Cluster::totalMemoryBytes() const {
  uint64_t total = 0;
  for (const Device &d : devices)
    total += d.type->memoryBytes();
  return total;
}

double Cluster::totalPeakFlops(DType type) const {
  double total = 0;
  for (const Device &d : devices)
    total += d.type->peakFlops(type);
  return total;
}

double Cluster::totalPricePerHour(int &unpriced) const {
  double total = 0;
  unpriced = 0;
  for (const Device &d : devices) {
    if (d.type->pricePerHourUSD)
      total += *d.type->pricePerHourUSD;
    else
      ++unpriced;
  }
  return total;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

/// Up to six significant digits, no exponent for the sizes printed here.
static std::string num(double v) {
  if (std::isinf(v))
    return "unbounded";
  return formatv("{0}", format("%.6g", v)).str();
}

static std::string describeLink(const Link &link) {
  return formatv("{0} {1} GB/s, {2} us", link.kind, num(link.bandwidthGBs),
                 num(link.latencyUs))
      .str();
}

static std::string rankRange(int first, int last) {
  return first == last ? formatv("rank {0}", first).str()
                       : formatv("ranks {0}-{1}", first, last).str();
}

std::string Cluster::describe() const {
  std::string out;
  raw_string_ostream os(out);
  os << "cluster" << (name.empty() ? "" : " '" + name + "'") << ": "
     << nodes.size() << (nodes.size() == 1 ? " node, " : " nodes, ")
     << devices.size() << (devices.size() == 1 ? " device\n" : " devices\n");
  for (const Node &node : nodes) {
    os << node.name << ": " << node.devices.size()
       << (node.devices.size() == 1 ? " device" : " devices")
       << "; intra-node link " << describeLink(node.intraLink)
       << (node.intraLinkOverridden ? " (from the cluster file)" : "")
       << (node.network ? "; network " + describeLink(*node.network) : std::string())
       << "\n";
    // Runs of consecutive ranks with the same type and speed factor.
    for (size_t i = 0; i < node.devices.size();) {
      const Device &first = devices[node.devices[i]];
      size_t j = i + 1;
      while (j < node.devices.size() &&
             devices[node.devices[j]].type == first.type &&
             devices[node.devices[j]].speedFactor == first.speedFactor)
        ++j;
      const DeviceType &t = *first.type;
      os << "  " << rankRange(first.rank, devices[node.devices[j - 1]].rank)
         << ": " << (j - i) << " x " << t.name << ", each "
         << num(t.memoryGiB) << " GiB, " << num(t.memoryBandwidthGBs)
         << " GB/s memory, " << num(t.peakFlops(DType::FP16) / 1e12)
         << " TFLOP/s fp16" << (t.supports(DType::FP16) ? "" : " (fp32 rate)")
         << ", ";
      if (t.pricePerHourUSD)
        os << "$" << num(*t.pricePerHourUSD) << "/h";
      else
        os << "price unknown";
      if (first.speedFactor != 1.0)
        os << ", speed factor " << num(first.speedFactor);
      os << "\n";
      i = j;
    }
  }
  os << "inter-node link: " << describeLink(interNode) << "\n";
  std::vector<int> all;
  for (const Device &d : devices)
    all.push_back(d.rank);
  if (all.size() > 1)
    os << "ring over all ranks: " << num(ringBandwidth(all))
       << " GB/s (its slowest link)\n";
  int unpriced = 0;
  double price = totalPricePerHour(unpriced);
  os << "total: " << devices.size()
     << (devices.size() == 1 ? " device, " : " devices, ")
     << num(double(totalMemoryBytes()) / double(uint64_t(1) << 30))
     << " GiB, "
     << formatv("{0}", format("%.4g", totalPeakFlops(DType::FP16) / 1e15))
     << " PFLOP/s fp16 peak, ";
  if (unpriced == int(devices.size()))
    os << "price unknown";
  else
    os << formatv("${0:F2}/h", price)
       << (unpriced ? formatv(" + {0} without a price", unpriced).str() : "");
  os << "\n";
  const Stack &st = stack();
  os << "software stack: " << st.name << " (" << num(st.kernelUs) << " us per GPU kernel, "
     << num(st.microBatchUs) << " us per micro-batch and pass, "
     << (st.collectiveUs > 0 ? num(st.collectiveUs) + " us per collective, " : std::string())
     << "attention "
     << (st.fusedAttention ? "fused" : "unfused") << ", fp32 products "
     << (st.tf32 ? "as TF32" : "in FP32") << ")\n";
  return out;
}

static json::Value linkJSON(const Link &link) {
  return json::Object{{"kind", link.kind},
                      {"bandwidth_gbs", link.bandwidthGBs},
                      {"latency_us", link.latencyUs}};
}

json::Value Cluster::toJSON() const {
  json::Array nodeArray;
  std::map<std::string, const DeviceType *> used;
  for (const Node &node : nodes) {
    json::Array devs;
    for (int rank : node.devices) {
      const Device &d = devices[rank];
      used[d.type->name] = d.type;
      devs.push_back(json::Object{{"rank", d.rank},
                                  {"type", d.type->name},
                                  {"local_index", d.localIndex},
                                  {"speed_factor", d.speedFactor}});
    }
    json::Object link = *linkJSON(node.intraLink).getAsObject();
    link["overridden"] = node.intraLinkOverridden;
    json::Object entry{{"name", node.name},
                       {"intra_node_link", std::move(link)},
                       {"devices", std::move(devs)}};
    if (node.network)
      entry["network"] = linkJSON(*node.network);
    nodeArray.push_back(std::move(entry));
  }
  json::Object types;
  for (const auto &[typeName, type] : used)
    types[typeName] = hetplan::cluster::toJSON(*type);
  json::Object peaks;
  for (DType t : kAllDTypes)
    peaks[dtypeName(t)] = totalPeakFlops(t) / 1e12;
  std::vector<int> all;
  for (const Device &d : devices)
    all.push_back(d.rank);
  double ring = ringBandwidth(all);
  int unpriced = 0;
  double price = totalPricePerHour(unpriced);
  return json::Object{
      {"name", name},
      {"nodes", std::move(nodeArray)},
      {"inter_node_link", linkJSON(interNode)},
      {"device_types", std::move(types)},
      {"stack", hetplan::cluster::toJSON(stack())},
      {"totals",
       json::Object{
           {"nodes", int64_t(nodes.size())},
           {"devices", int64_t(devices.size())},
           {"memory_gib",
            double(totalMemoryBytes()) / double(uint64_t(1) << 30)},
           {"peak_tflops", std::move(peaks)},
           {"ring_bandwidth_gbs",
            std::isinf(ring) ? json::Value(nullptr) : json::Value(ring)},
           {"price_per_hour_usd", unpriced == int(devices.size())
                                      ? json::Value(nullptr)
                                      : json::Value(price)},
           {"devices_without_price", unpriced},
       }},
  };
}

//===----------------------------------------------------------------------===//
// Inline spec
//===----------------------------------------------------------------------===//

namespace {

/// `[NODES x] [COUNT x] TYPE`: counts are the leading all-digit pieces
/// before an 'x', so names with an x (MI300X) are safe.
struct Group {
  int64_t nodes = 1, perNode = 1;
  StringRef type;
};

Expected<Group> parseGroup(StringRef item) {
  Group group;
  SmallVector<int64_t, 2> counts;
  StringRef rest = item.trim();
  while (counts.size() < 2) {
    size_t x = rest.find_first_of("xX");
    if (x == StringRef::npos || x == 0)
      break;
    StringRef digits = rest.take_front(x).trim();
    int64_t count;
    if (!all_of(digits, isDigit) || digits.getAsInteger(10, count))
      break;
    if (count <= 0)
      return makeError("count must be at least 1 in '" + item.trim() + "'");
    counts.push_back(count);
    rest = rest.drop_front(x + 1).trim();
  }
  if (rest.empty())
    return makeError("missing device type in '" + item.trim() + "'");
  if (counts.size() == 2) {
    size_t x = rest.find_first_of("xX");
    if (x != StringRef::npos && x > 0 && all_of(rest.take_front(x), isDigit))
      return makeError("at most two counts (NODESxDEVICESxTYPE) in '" +
                       item.trim() + "'");
  }
  if (counts.size() == 2)
    group.nodes = counts[0];
  if (!counts.empty())
    group.perNode = counts.back();
  group.type = rest;
  return group;
}

/// `200gbps`, `200Gb/s`, `200gbit/s` (gigabits) or `25GB/s` (gigabytes).
Expected<double> parseBandwidthGBs(StringRef text) {
  StringRef number = text.take_while(
      [](char c) { return isDigit(c) || c == '.'; });
  StringRef unit = text.drop_front(number.size()).trim();
  double value;
  auto bad = [&] {
    return makeError("bad bandwidth '" + text +
                     "': write e.g. net=200gbps (gigabits/s) or net=25GB/s "
                     "(gigabytes/s)");
  };
  if (number.empty() || number.getAsDouble(value) || value <= 0)
    return bad();
  std::string lower = unit.lower();
  if (lower == "gbps" || lower == "gbit/s" || lower == "gbit" || unit == "Gb/s")
    return value / 8;
  if (unit == "GB/s")
    return value;
  return bad();
}

/// `5us`, `0.5ms`, `800ns`.
Expected<double> parseLatencyUs(StringRef text) {
  StringRef number = text.take_while(
      [](char c) { return isDigit(c) || c == '.'; });
  StringRef unit = text.drop_front(number.size()).trim();
  double value;
  if (!number.empty() && !number.getAsDouble(value)) {
    if (unit == "us")
      return value;
    if (unit == "ms")
      return value * 1e3;
    if (unit == "ns")
      return value * 1e-3;
  }
  return makeError("bad latency '" + text + "': write e.g. latency=5us, "
                   "latency=0.5ms or latency=800ns");
}

} // namespace

Expected<Cluster> Cluster::fromSpec(StringRef spec,
                                    const DeviceCatalog &catalog) {
  auto fail = [&](Error err) -> Error {
    return makeError("cluster spec '" + spec + "': " +
                     toString(std::move(err)));
  };
  Cluster cluster(catalog);
  // ',' and ';' both separate items (';' reads better before options).
  std::string unified = spec.str();
  std::replace(unified.begin(), unified.end(), ';', ',');
  SmallVector<StringRef> items;
  StringRef(unified).split(items, ',', -1, /*KeepEmpty=*/true);
  int64_t total = 0;
  for (StringRef item : items) {
    item = item.trim();
    if (item.empty())
      return fail(makeError("empty item (two separators in a row?)"));
    if (item.contains('=')) {
      auto [key, value] = item.split('=');
      key = key.trim();
      value = value.trim();
      if (key == "net") {
        auto bw = parseBandwidthGBs(value);
        if (!bw)
          return fail(bw.takeError());
        cluster.interNode.bandwidthGBs = *bw;
      } else if (key == "latency" || key == "lat") {
        auto us = parseLatencyUs(value);
        if (!us)
          return fail(us.takeError());
        cluster.interNode.latencyUs = *us;
      } else {
        return fail(makeError("unknown option '" + key +
                              "' (known: net=, latency=)"));
      }
      continue;
    }
    auto group = parseGroup(item);
    if (!group)
      return fail(group.takeError());
    auto type = cluster.ownCatalog.lookup(group->type);
    if (!type)
      return fail(type.takeError());
    // Each factor is checked before the product: 86x814143662319153383xH100
    // overflowed int64 (found by the cluster fuzzer).
    if (group->nodes > maxDevices() || group->perNode > maxDevices() ||
        (total += group->nodes * group->perNode) > maxDevices())
      return fail(makeError("more than " + Twine(maxDevices()) + " devices"));
    for (int64_t n = 0; n < group->nodes; ++n) {
      int node = cluster.addNode("node" + std::to_string(cluster.nodes.size()));
      for (int64_t d = 0; d < group->perNode; ++d)
        cluster.addDevice(node, *type);
    }
  }
  if (cluster.devices.empty())
    return fail(makeError("no devices (write e.g. 4xA100-80G,12xT4)"));
  return cluster;
}

//===----------------------------------------------------------------------===//
// Cluster files
//===----------------------------------------------------------------------===//

namespace {

using detail::YamlField;
using detail::YamlReader;
using detail::YamlValue;

/// Reads a cluster file's `devices:` into the cluster's catalog.
bool readDeviceTypes(YamlReader &r, const YamlValue &list,
                     DeviceCatalog &catalog) {
  if (list.kind != YamlValue::Sequence)
    return r.error(list, "'devices' must be a list of device types");
  StringSet<> seen;
  for (const YamlValue &entry : list.items) {
    // Peek at the name to choose between an override and a new type.
    const YamlValue *nameValue =
        entry.kind == YamlValue::Mapping ? entry.get("name") : nullptr;
    const DeviceType *existing =
        nameValue && nameValue->kind == YamlValue::Scalar
            ? catalog.find(nameValue->scalar)
            : nullptr;
    DeviceType type = existing ? *existing : DeviceType();
    StringSet<> given;
    if (!detail::readDeviceFields(r, entry, type, given))
      return false;
    std::string where = "in device '" + type.name + "'";
    if (!seen.insert(normalizeDeviceName(type.name)).second)
      return r.error(*nameValue,
                     "device '" + type.name + "' is listed twice in 'devices'");
    if (!existing) {
      // A new type must be complete; a missing field may also mean a typo
      // in the name of a catalog type.
      std::vector<std::string> near = catalog.closest(type.name);
      std::string newWhere =
          where + " (not a catalog type, so a new one; closest catalog "
                  "names: " + join(near, ", ") + ")";
      if (!detail::requireComplete(r, entry, given, newWhere,
                                   /*strict=*/false))
        return false;
    }
    if (!type.supports(DType::FP32))
      return r.error(entry, "'peak_tflops' needs 'fp32' " + where);
    Error err = existing ? catalog.override(std::move(type))
                         : catalog.add(std::move(type));
    if (err)
      return r.error(entry, toString(std::move(err)));
  }
  return true;
}

/// A link mapping: {kind, bandwidth_gbs, latency_us}, starting from `link`.
bool readLink(YamlReader &r, const YamlValue &v, StringRef field,
              StringRef where, Link &link) {
  static constexpr StringRef known[] = {"kind", "bandwidth_gbs", "latency_us"};
  if (!r.checkMapping(v, known, "'" + field.str() + "'", where))
    return false;
  if (const YamlValue *kind = v.get("kind"))
    if (!r.readString(*kind, "kind", link.kind))
      return false;
  if (const YamlValue *bw = v.get("bandwidth_gbs"))
    if (!r.readPositive(*bw, "bandwidth_gbs", link.bandwidthGBs))
      return false;
  if (const YamlValue *lat = v.get("latency_us"))
    if (!r.readPositive(*lat, "latency_us", link.latencyUs,
                        /*allowZero=*/true))
      return false;
  return true;
}

/// One entry of a node's `devices`: {type, count} or "[COUNT x] TYPE".
bool readDeviceGroup(YamlReader &r, const YamlValue &v,
                     const DeviceCatalog &catalog, StringRef where,
                     const DeviceType *&type, int64_t &count) {
  count = 1;
  const YamlValue *typeValue = &v;
  if (v.kind == YamlValue::Scalar) {
    auto group = parseGroup(v.scalar);
    if (!group)
      return r.error(v, toString(group.takeError()));
    if (group->nodes != 1)
      return r.error(v, "one count only in a node's devices ('8xT4'); "
                        "repeat the node with 'count'");
    count = group->perNode;
    auto found = catalog.lookup(group->type);
    if (!found)
      return r.error(v, toString(found.takeError()));
    type = *found;
  } else {
    static constexpr StringRef known[] = {"type", "count"};
    if (!r.checkMapping(v, known, "a device group", where) ||
        !r.require(v, "type", where))
      return false;
    typeValue = v.get("type");
    std::string typeName;
    if (!r.readString(*typeValue, "type", typeName))
      return false;
    auto found = catalog.lookup(typeName);
    if (!found)
      return r.error(*typeValue, toString(found.takeError()));
    type = *found;
    if (const YamlValue *c = v.get("count")) {
      if (!r.readInt(*c, "count", count))
        return false;
      if (count <= 0)
        return r.error(*c, "'count' must be at least 1, not " + c->scalar +
                               " " + where);
    }
  }
  if (count > Cluster::maxDevices())
    return r.error(v, "more than " + Twine(Cluster::maxDevices()) + " devices " + where);
  return true;
}

bool readNodes(YamlReader &r, const YamlValue &list, Cluster &cluster) {
  if (list.kind != YamlValue::Sequence)
    return r.error(list, "'nodes' must be a list of nodes");
  if (list.items.empty())
    return r.error(list, "empty cluster: 'nodes' lists no nodes");
  StringSet<> names;
  int64_t total = 0;
  for (size_t index = 0; index < list.items.size(); ++index) {
    const YamlValue &v = list.items[index];
    static constexpr StringRef known[] = {"name", "count", "devices", "intra_node_link",
                                          "network", "speed_factors"};
    std::string nodeName = "node" + std::to_string(cluster.nodes.size());
    if (const YamlValue *n = v.kind == YamlValue::Mapping ? v.get("name")
                                                          : nullptr)
      if (!r.readString(*n, "name", nodeName))
        return false;
    std::string where = "in node '" + nodeName + "'";
    if (!r.checkMapping(v, known, "a node", where) ||
        !r.require(v, "devices", where))
      return false;

    int64_t replicas = 1;
    if (const YamlValue *c = v.get("count")) {
      if (!r.readInt(*c, "count", replicas))
        return false;
      if (replicas <= 0)
        return r.error(*c, "'count' must be at least 1, not " + c->scalar +
                               " " + where);
    }

    std::optional<Link> intra;
    if (const YamlValue *link = v.get("intra_node_link")) {
      // Unset figures keep the defaults of the node's slowest type.
      intra = Link{0, kDefaultIntraNodeLatencyUs, "custom"};
      if (!readLink(r, *link, "intra_node_link", where, *intra))
        return false;
      if (intra->bandwidthGBs <= 0)
        return r.error(*link, "missing field 'bandwidth_gbs' in "
                              "'intra_node_link' " + where);
    }
    // A node's own NICs: unset figures keep the cluster's inter_node ones.
    std::optional<Link> network;
    if (const YamlValue *net = v.get("network")) {
      network = cluster.interNode;
      if (!readLink(r, *net, "network", where, *network))
        return false;
    }

    const YamlValue &devs = *v.get("devices");
    if (devs.kind != YamlValue::Sequence)
      return r.error(devs, "'devices' must be a list like [{type: T4, "
                           "count: 4}] " + where);
    if (devs.items.empty())
      return r.error(devs, "node '" + nodeName + "' has no devices");
    std::vector<std::pair<const DeviceType *, int64_t>> groups;
    for (const YamlValue &item : devs.items) {
      const DeviceType *type = nullptr;
      int64_t count = 0;
      if (!readDeviceGroup(r, item, cluster.catalog(), where, type, count))
        return false;
      groups.push_back({type, count});
      total += count * replicas;
    }
    if (total > Cluster::maxDevices())
      return r.error(v, "more than " + Twine(Cluster::maxDevices()) + " devices");

    std::map<const DeviceType *, double> factors;
    if (const YamlValue *sf = v.get("speed_factors")) {
      if (sf->kind != YamlValue::Mapping)
        return r.error(*sf, "'speed_factors' must map device types to "
                            "factors " + where);
      for (const YamlField &f : sf->fields) {
        auto type = cluster.catalog().lookup(f.key);
        if (!type)
          return r.error(f.keyLoc, toString(type.takeError()));
        if (none_of(groups, [&](auto &g) { return g.first == *type; }))
          return r.error(f.keyLoc, "speed factor for '" + f.key + "' but " +
                                       where.substr(3) + " has no " +
                                       (*type)->name);
        double factor;
        if (!r.readPositive(f.value, f.key, factor))
          return false;
        if (!factors.emplace(*type, factor).second)
          return r.error(f.keyLoc, "duplicate speed factor for '" +
                                       (*type)->name + "' " + where);
      }
    }

    for (int64_t rep = 0; rep < replicas; ++rep) {
      std::string name =
          replicas == 1 ? nodeName : nodeName + "-" + std::to_string(rep);
      if (!names.insert(name).second)
        return r.error(v, "duplicate node name '" + name + "'");
      int node = cluster.addNode(name, intra);
      cluster.nodes[size_t(node)].network = network;
      for (auto [type, count] : groups) {
        auto it = factors.find(type);
        double factor = it == factors.end() ? 1.0 : it->second;
        for (int64_t d = 0; d < count; ++d)
          cluster.addDevice(node, type, factor);
      }
    }
  }
  return true;
}

} // namespace

Expected<Cluster> Cluster::fromYaml(StringRef text, StringRef bufferName,
                                    const DeviceCatalog &catalog) {
  YamlReader r(text, bufferName);
  const YamlValue *root = r.root();
  if (!root)
    return r.takeError();
  static constexpr StringRef topFields[] = {"name", "devices", "nodes",
                                            "inter_node", "stack"};
  if (root->kind != YamlValue::Mapping) {
    r.error(*root, "expected a cluster description (a mapping with 'nodes')");
    return r.takeError();
  }
  DeviceCatalog types = catalog;
  std::string clusterName, stackName;
  if (r.checkMapping(*root, topFields, "the cluster", "in cluster") &&
      r.require(*root, "nodes", "in cluster")) {
    if (const YamlValue *n = root->get("name"))
      r.readString(*n, "name", clusterName);
    if (const YamlValue *devs = root->get("devices"); devs && !r.failed())
      readDeviceTypes(r, *devs, types);
    if (const YamlValue *st = root->get("stack"); st && !r.failed())
      detail::readStackSelection(r, *st, types, stackName);
  }
  if (r.failed())
    return r.takeError();
  // Nodes refer to the catalog with this file's own types and overrides.
  Cluster cluster(std::move(types));
  cluster.name = clusterName;
  if (!stackName.empty())
    cluster.stackName = stackName;
  if (const YamlValue *net = root->get("inter_node"))
    readLink(r, *net, "inter_node", "in cluster", cluster.interNode);
  if (!r.failed())
    readNodes(r, *root->get("nodes"), cluster);
  if (r.failed())
    return r.takeError();
  return cluster;
}

Expected<Cluster> Cluster::fromFile(StringRef path,
                                    const DeviceCatalog &catalog) {
  llvm::sys::fs::file_status status;  // regular files only (no FIFO, no /dev/zero)
  if (!llvm::sys::fs::status(path, status) && status.type() != llvm::sys::fs::file_type::regular_file)
    return makeError(path + ": not a regular file");
  auto buffer = MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return makeError(path + ": cannot open: " + buffer.getError().message());
  return fromYaml((*buffer)->getBuffer(), path, catalog);
}

Cluster subsetCluster(const Cluster &cl, llvm::function_ref<bool(const Device &)> keep) {
  Cluster sub(cl.catalog());
  sub.name = cl.name;
  sub.interNode = cl.interNode;
  sub.stackName = cl.stackName;
  for (const Node &node : cl.nodes) {
    int at = -1;
    for (int rank : node.devices) {
      const Device &d = cl.devices[size_t(rank)];
      if (!keep(d))
        continue;
      if (at < 0) {
        at = sub.addNode(node.name, node.intraLinkOverridden ? std::optional<Link>(node.intraLink)
                                                             : std::nullopt);
        sub.nodes[size_t(at)].network = node.network;
      }
      sub.addDevice(at, d.type, d.speedFactor);
    }
  }
  return sub;
}

Expected<Cluster> parseClusterSpec(StringRef specOrPath,
                                   const DeviceCatalog &catalog) {
  bool isFile = sys::fs::is_regular_file(specOrPath) ||
                specOrPath.ends_with_insensitive(".yaml") ||
                specOrPath.ends_with_insensitive(".yml") ||
                specOrPath.ends_with_insensitive(".json") ||
                (specOrPath.contains('/') && !specOrPath.contains('='));
  if (isFile)
    return Cluster::fromFile(specOrPath, catalog);
  return Cluster::fromSpec(specOrPath, catalog);
}

} // namespace hetplan::cluster
