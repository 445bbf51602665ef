//===- ClusterTest.cpp - cluster specs, files and links -------------------===//

#include "passes/cluster/Cluster.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace hetplan::cluster;

namespace {

const DeviceCatalog &builtin() { return DeviceCatalog::builtin(); }

Cluster spec(llvm::StringRef text) {
  auto cluster = Cluster::fromSpec(text, builtin());
  EXPECT_TRUE(bool(cluster)) << llvm::toString(cluster.takeError());
  return cluster ? std::move(*cluster) : Cluster(builtin());
}

std::string specError(llvm::StringRef text) {
  auto cluster = Cluster::fromSpec(text, builtin());
  return cluster ? "" : llvm::toString(cluster.takeError());
}

Cluster file(llvm::StringRef text) {
  auto cluster = Cluster::fromYaml(text, "c.yaml", builtin());
  EXPECT_TRUE(bool(cluster)) << llvm::toString(cluster.takeError());
  return cluster ? std::move(*cluster) : Cluster(builtin());
}

std::string fileError(llvm::StringRef text) {
  auto cluster = Cluster::fromYaml(text, "c.yaml", builtin());
  return cluster ? "" : llvm::toString(cluster.takeError());
}

std::vector<int> allRanks(const Cluster &c) {
  std::vector<int> ranks;
  for (const Device &d : c.devices)
    ranks.push_back(d.rank);
  return ranks;
}

} // namespace

TEST(ClusterSpec, OneNodePerGroup) {
  Cluster c = spec("4xA100-80G,12xT4");
  ASSERT_EQ(c.nodes.size(), 2u);
  ASSERT_EQ(c.devices.size(), 16u);
  EXPECT_EQ(c.nodes[0].devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.nodes[1].devices.size(), 12u);
  EXPECT_EQ(c.devices[3].type->name, "A100-SXM-80GB");
  EXPECT_EQ(c.devices[4].type->name, "T4");
  EXPECT_EQ(c.devices[4].node, 1);
  EXPECT_EQ(c.devices[4].localIndex, 0);
  EXPECT_EQ(c.devices[15].localIndex, 11);
  EXPECT_EQ(c.totalMemoryBytes(), uint64_t(512) << 30);
  EXPECT_DOUBLE_EQ(c.totalPeakFlops(DType::FP16), (4 * 312 + 12 * 65) * 1e12);
  int unpriced = -1;
  EXPECT_NEAR(c.totalPricePerHour(unpriced), 4 * 3.4309 + 12 * 0.526, 1e-9);
  EXPECT_EQ(unpriced, 0);
  // Defaults: 200 Gb/s, 5 us between nodes.
  EXPECT_DOUBLE_EQ(c.interNode.bandwidthGBs, 25);
  EXPECT_DOUBLE_EQ(c.interNode.latencyUs, 5);
}

TEST(ClusterSpec, NodesTimesDevices) {
  Cluster c = spec("2x8xH100");
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[1].devices.size(), 8u);
  EXPECT_EQ(c.devices[8].node, 1);
  EXPECT_EQ(c.nodes[1].name, "node1");

  Cluster one = spec("T4");
  EXPECT_EQ(one.nodes.size(), 1u);
  EXPECT_EQ(one.devices.size(), 1u);

  // An 'x' inside the type name is not a count.
  Cluster amd = spec("2xMI300X, 1 x MI250X");
  ASSERT_EQ(amd.devices.size(), 3u);
  EXPECT_EQ(amd.devices[0].type->name, "MI300X");
  EXPECT_EQ(amd.devices[2].type->name, "MI250X");
  EXPECT_EQ(spec("4x4090").devices[0].type->name, "RTX-4090");
}

TEST(ClusterSpec, Options) {
  Cluster c = spec("2x8xH100;net=400gbps;latency=2us");
  EXPECT_DOUBLE_EQ(c.interNode.bandwidthGBs, 50);
  EXPECT_DOUBLE_EQ(c.interNode.latencyUs, 2);
  EXPECT_DOUBLE_EQ(spec("T4,net=25GB/s").interNode.bandwidthGBs, 25);
  EXPECT_DOUBLE_EQ(spec("T4;net=100Gb/s").interNode.bandwidthGBs, 12.5);
  EXPECT_DOUBLE_EQ(spec("T4;lat=0.5ms").interNode.latencyUs, 500);
  EXPECT_DOUBLE_EQ(spec("T4;latency=800ns").interNode.latencyUs, 0.8);
}

TEST(ClusterSpec, Errors) {
  EXPECT_EQ(specError("4xA100-90G"),
            "cluster spec '4xA100-90G': unknown device type 'A100-90G'; "
            "closest: A100-80GB, A100-40GB, A10G");
  EXPECT_EQ(specError("0xT4"),
            "cluster spec '0xT4': count must be at least 1 in '0xT4'");
  EXPECT_EQ(specError("4x"), "cluster spec '4x': missing device type in '4x'");
  EXPECT_EQ(specError("T4,,L4"),
            "cluster spec 'T4,,L4': empty item (two separators in a row?)");
  EXPECT_EQ(specError(""), "cluster spec '': empty item (two separators in a "
                           "row?)");
  EXPECT_NE(specError("T4;net=25").find("bad bandwidth '25'"),
            std::string::npos);
  // "gb/s" could be bits or bytes: refused.
  EXPECT_NE(specError("T4;net=25gb/s").find("bad bandwidth"),
            std::string::npos);
  EXPECT_NE(specError("T4;latency=5").find("bad latency"), std::string::npos);
  EXPECT_NE(specError("T4;speed=2").find("unknown option 'speed'"),
            std::string::npos);
  EXPECT_NE(specError("net=100gbps").find("no devices"), std::string::npos);
  EXPECT_NE(specError("2x2x2xT4").find("at most two counts"),
            std::string::npos);
  EXPECT_NE(specError("2000000xT4").find("more than"), std::string::npos);
  // nodes x devices per node overflowed int64 before the limit was checked.
  EXPECT_NE(specError("86x814143662319153383xH100").find("more than 1048576 devices"),
            std::string::npos);
  EXPECT_NE(specError("1024x1024xT4,2xT4").find("more than"), std::string::npos);
}

TEST(ClusterLinks, SameNodeOtherNodeAndSelf) {
  Cluster c = spec("8xA100-80G,4xL4,2xT4");
  // Self: no transfer.
  EXPECT_TRUE(std::isinf(c.linkBetween(0, 0).bandwidthGBs));
  // Same NVLink node.
  Link nv = c.linkBetween(0, 7);
  EXPECT_EQ(nv.kind, "nvlink3");
  EXPECT_DOUBLE_EQ(nv.bandwidthGBs, 300);
  EXPECT_DOUBLE_EQ(nv.latencyUs, kDefaultIntraNodeLatencyUs);
  // Same PCIe node.
  EXPECT_EQ(c.linkBetween(8, 9).kind, "pcie4");
  // Different nodes: the network...
  Link net = c.linkBetween(0, 8);
  EXPECT_EQ(net.kind, "net");
  EXPECT_DOUBLE_EQ(net.bandwidthGBs, 25);
  EXPECT_DOUBLE_EQ(net.latencyUs, 5);
  // ...capped by an endpoint's PCIe Gen3 host link (16 GB/s).
  EXPECT_DOUBLE_EQ(c.linkBetween(0, 12).bandwidthGBs, 16);
  EXPECT_DOUBLE_EQ(c.linkBetween(12, 0).bandwidthGBs, 16);
  // transferSeconds = latency + bytes / bandwidth.
  EXPECT_DOUBLE_EQ(net.transferSeconds(25e9), 1 + 5e-6);
}

TEST(ClusterLinks, RingIsAsFastAsItsSlowestLink) {
  Cluster c = spec("8xA100-80G,4xL4");
  std::vector<int> nvlinkNode = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_DOUBLE_EQ(c.ringBandwidth(nvlinkNode), 300);
  EXPECT_DOUBLE_EQ(c.ringBandwidth({8, 9, 10, 11}), 32);
  // NVLink node + PCIe node: bounded by the 25 GB/s inter-node link.
  EXPECT_DOUBLE_EQ(c.ringBandwidth(allRanks(c)), 25);
  EXPECT_DOUBLE_EQ(c.ringBandwidth({0, 8}), 25);
  // A faster network leaves the PCIe node's link as the bound.
  Cluster fast = spec("8xA100-80G,4xL4;net=400gbps");
  EXPECT_DOUBLE_EQ(fast.ringBandwidth(allRanks(fast)), 32);
  // Fewer than two ranks: nothing to send.
  EXPECT_TRUE(std::isinf(c.ringBandwidth({3})));
  EXPECT_TRUE(std::isinf(c.ringBandwidth({})));
}

TEST(ClusterFile, FullExample) {
  Cluster c = file(R"(
devices:
  - name: A100-80G          # override: only the price changes
    price_per_hour_usd: 2.0
  - name: Gaudi2            # a new type
    vendor: Intel
    memory_gib: 96
    memory_bandwidth_gbs: 2460
    peak_tflops: {fp32: 100, bf16: 432}
    intra_node_link: {kind: roce, bandwidth_gbs: 300}
    pcie: {generation: 4, bandwidth_gbs: 32}
nodes:
  - name: dgx0
    devices: [{type: A100-80G, count: 8}]
    intra_node_link: {kind: nvlink3, bandwidth_gbs: 250}
    speed_factors: {A100-80G: 0.92}
  - name: mixed
    devices: [{type: T4, count: 2}, 2xL4]
  - name: gaudi
    count: 2
    devices: [{type: gaudi2, count: 4}]
inter_node: {bandwidth_gbs: 12.5, latency_us: 10}
)");
  ASSERT_EQ(c.nodes.size(), 4u);
  ASSERT_EQ(c.devices.size(), 8u + 4 + 8);
  EXPECT_EQ(c.nodes[2].name, "gaudi-0");
  EXPECT_EQ(c.nodes[3].name, "gaudi-1");
  EXPECT_EQ(c.nodes[3].devices, (std::vector<int>{16, 17, 18, 19}));
  // The override changed the price and nothing else.
  const DeviceType *a100 = c.devices[0].type;
  EXPECT_EQ(a100->name, "A100-SXM-80GB");
  EXPECT_EQ(a100->pricePerHourUSD, 2.0);
  EXPECT_EQ(a100->memoryGiB, 80);
  EXPECT_EQ(*builtin().find("A100-80G")->pricePerHourUSD, 3.4309);
  // Speed factors scale compute.
  EXPECT_DOUBLE_EQ(c.devices[0].speedFactor, 0.92);
  EXPECT_DOUBLE_EQ(c.devices[0].effectiveFlops(DType::FP16), 0.92 * 312e12);
  EXPECT_DOUBLE_EQ(c.devices[8].speedFactor, 1.0);
  // The node's link override wins over the type's.
  EXPECT_TRUE(c.nodes[0].intraLinkOverridden);
  EXPECT_DOUBLE_EQ(c.linkBetween(0, 1).bandwidthGBs, 250);
  // A mixed node: the slower endpoint's link; the node shows its slowest.
  EXPECT_EQ(c.linkBetween(8, 9).kind, "pcie3");    // T4-T4
  EXPECT_EQ(c.linkBetween(10, 11).kind, "pcie4");  // L4-L4
  EXPECT_EQ(c.linkBetween(9, 10).kind, "pcie3");   // T4-L4
  EXPECT_EQ(c.nodes[1].intraLink.kind, "pcie3");
  // The new type, found by any spelling.
  EXPECT_EQ(c.devices[12].type->name, "Gaudi2");
  EXPECT_DOUBLE_EQ(c.devices[12].type->peakFlops(DType::BF16), 432e12);
  EXPECT_DOUBLE_EQ(c.interNode.bandwidthGBs, 12.5);
  EXPECT_DOUBLE_EQ(c.interNode.latencyUs, 10);
  EXPECT_DOUBLE_EQ(c.ringBandwidth(allRanks(c)), 12.5);
  int unpriced = 0;
  c.totalPricePerHour(unpriced);
  EXPECT_EQ(unpriced, 8);

  // Types stay valid in copies of the cluster.
  Cluster copy = c;
  c = Cluster(builtin());
  EXPECT_EQ(copy.devices[12].type->name, "Gaudi2");
  EXPECT_EQ(copy.catalog().find("gaudi2"), copy.devices[12].type);
}

// A node with a slower network of its own (issue 21): the path between two
// nodes is as fast as its slower end, with the larger latency.
TEST(ClusterFile, PerNodeNetwork) {
  Cluster c = file(R"(
nodes:
  - name: fast
    devices: [2xH100]
  - name: slow
    devices: [2xA100-80G]
    network: {bandwidth_gbs: 3.125, latency_us: 30}
  - name: fast2
    devices: [2xH100]
    network: {latency_us: 2}
inter_node: {bandwidth_gbs: 50, latency_us: 4}
)");
  ASSERT_EQ(c.devices.size(), 6u);
  EXPECT_FALSE(c.nodes[0].network.has_value());
  EXPECT_DOUBLE_EQ(c.linkBetween(0, 4).bandwidthGBs, 50);  // fast - fast2
  EXPECT_DOUBLE_EQ(c.linkBetween(0, 4).latencyUs, 4);      // the larger
  EXPECT_DOUBLE_EQ(c.linkBetween(0, 2).bandwidthGBs, 3.125);
  EXPECT_DOUBLE_EQ(c.linkBetween(2, 5).latencyUs, 30);
  // Unset figures of a node's network keep the cluster's.
  EXPECT_DOUBLE_EQ(c.nodes[2].network->bandwidthGBs, 50);
  // Inside a node the network does not matter.
  EXPECT_GT(c.linkBetween(2, 3).bandwidthGBs, 100);
  EXPECT_DOUBLE_EQ(c.ringBandwidth(allRanks(c)), 3.125);
  EXPECT_NE(c.describe().find("slow: 2 devices; intra-node link nvlink3 300 GB/s, 1 us; "
                              "network net 3.125 GB/s, 30 us"),
            std::string::npos)
      << c.describe();
}

TEST(ClusterFile, Json) {
  Cluster c = file(R"({"nodes": [{"devices": [{"type": "H100", "count": 4}]},
                                  {"name": "b", "devices": ["2xL40S"]}],
                       "inter_node": {"bandwidth_gbs": 50, "kind": "ib"}})");
  ASSERT_EQ(c.devices.size(), 6u);
  EXPECT_EQ(c.nodes[0].name, "node0");
  EXPECT_EQ(c.linkBetween(0, 5).kind, "ib");
  EXPECT_DOUBLE_EQ(c.linkBetween(0, 5).bandwidthGBs, 32);  // L40S PCIe Gen4
}

TEST(ClusterFile, ErrorsNameLineAndField) {
  EXPECT_EQ(fileError("nodes:\n"
                      "  - devices: [{type: T4}]\n"
                      "    speeds: {T4: 1}\n"),
            "c.yaml:3:5: unknown field 'speeds' in node 'node0'");
  EXPECT_EQ(fileError("nodes:\n"
                      "  - name: n0\n"
                      "    devices:\n"
                      "      - type: A100-90G\n"),
            "c.yaml:4:15: unknown device type 'A100-90G'; closest: A100-80GB, "
            "A100-40GB, A10G");
  EXPECT_EQ(fileError("nodes:\n  - devices: [{type: T4, count: 0}]\n"),
            "c.yaml:2:33: 'count' must be at least 1, not 0 in node 'node0'");
  EXPECT_EQ(fileError("nodes:\n  - devices: [{type: T4, count: -2}]\n"),
            "c.yaml:2:33: 'count' must be at least 1, not -2 in node 'node0'");
  EXPECT_EQ(fileError("nodes:\n  - devices: [T4]\n"
                      "inter_node: {bandwidth_gbs: -12.5}\n"),
            "c.yaml:3:29: 'bandwidth_gbs' must be > 0, not -12.5");
  EXPECT_EQ(fileError("nodes:\n  - devices: [T4]\n"
                      "    intra_node_link: {bandwidth_gbs: -1}\n"),
            "c.yaml:3:38: 'bandwidth_gbs' must be > 0, not -1");
  EXPECT_EQ(fileError("nodes:\n  - devices: [T4]\n"
                      "    network: {bandwidth_gbs: 0}\n"),
            "c.yaml:3:30: 'bandwidth_gbs' must be > 0, not 0");
  EXPECT_EQ(fileError("nodes:\n  - devices: [T4]\n"
                      "    network: {speed: 1}\n"),
            "c.yaml:3:15: unknown field 'speed' in node 'node0'");
  EXPECT_EQ(fileError("devices: []\n"), "c.yaml:1:1: missing field 'nodes' "
                                        "in cluster");
  EXPECT_EQ(fileError("nodes: []\n"),
            "c.yaml:1:8: empty cluster: 'nodes' lists no nodes");
  EXPECT_EQ(fileError("nodes:\n  - name: a\n    devices: []\n"),
            "c.yaml:3:14: node 'a' has no devices");
  EXPECT_EQ(fileError("nodes:\n  - devices: [{type: T4, count: 2}\n  - x\n"),
            "c.yaml:3:3: malformed YAML: Expected , between entries!");
  EXPECT_EQ(fileError(""), "c.yaml:1:1: empty file");
  EXPECT_EQ(fileError("devices:\n"
                      "  - name: MyGPU\n"
                      "    vendor: Acme\n"
                      "    memroy_gib: 24\n"
                      "nodes:\n  - devices: [MyGPU]\n"),
            "c.yaml:4:5: unknown field 'memroy_gib' in device 'MyGPU' (did you "
            "mean 'memory_gib'?)");
  EXPECT_EQ(fileError("devices:\n"
                      "  - name: H100-NVL\n"
                      "    memory_gib: 94\n"
                      "nodes:\n  - devices: [H100-NVL]\n"),
            "c.yaml:2:5: missing field 'memory_bandwidth_gbs' in device "
            "'H100-NVL' (not a catalog type, so a new one; closest catalog "
            "names: H100-SXM, H200-SXM, H100-PCIe)");
  EXPECT_EQ(fileError("nodes:\n  - devices: [T4]\n"
                      "    speed_factors: {L4: 0.5}\n"),
            "c.yaml:3:21: speed factor for 'L4' but node 'node0' has no L4");
  EXPECT_EQ(fileError("nodes:\n  - devices: [T4]\n"
                      "    speed_factors: {T4: 0}\n"),
            "c.yaml:3:25: 'T4' must be > 0, not 0");
  EXPECT_EQ(fileError("nodes:\n  - {name: a, devices: [T4]}\n"
                      "  - {name: a, devices: [T4]}\n"),
            "c.yaml:3:5: duplicate node name 'a'");
  EXPECT_EQ(fileError("nodes:\n  - {devices: [T4], devices: [L4]}\n"),
            "c.yaml:2:21: duplicate field 'devices' in node 'node0'");
  EXPECT_EQ(fileError("{\"nodes\": [{\"devices\": [\"T4\"]}], \"x\": 1}"),
            "c.yaml:1:34: unknown field 'x' in cluster");
}

TEST(ClusterFile, SpecOrPath) {
  auto inline_ = parseClusterSpec("2xT4", builtin());
  ASSERT_TRUE(bool(inline_));
  EXPECT_EQ(inline_->devices.size(), 2u);
  auto fromFile =
      parseClusterSpec(HETPLAN_CLUSTER_INPUTS "/mixed.yaml", builtin());
  ASSERT_TRUE(bool(fromFile)) << llvm::toString(fromFile.takeError());
  EXPECT_EQ(fromFile->name, "lab");
  auto missing = parseClusterSpec("no-such-cluster.yaml", builtin());
  ASSERT_FALSE(bool(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "no-such-cluster.yaml: cannot open: No such file or directory");
}

TEST(Cluster, DescribeAndJson) {
  Cluster c = spec("4xA100-80G,12xT4");
  std::string text = c.describe();
  EXPECT_NE(text.find("cluster: 2 nodes, 16 devices\n"), std::string::npos);
  EXPECT_NE(text.find("ranks 0-3: 4 x A100-SXM-80GB, each 80 GiB"),
            std::string::npos);
  EXPECT_NE(text.find("total: 16 devices, 512 GiB, 2.028 PFLOP/s fp16 peak, "
                      "$20.04/h\n"),
            std::string::npos)
      << text;
  llvm::json::Value json = c.toJSON();
  const llvm::json::Object *totals = json.getAsObject()->getObject("totals");
  ASSERT_NE(totals, nullptr);
  EXPECT_EQ(totals->getInteger("devices"), 16);
  EXPECT_EQ(totals->getNumber("memory_gib"), 512);
  EXPECT_EQ(totals->getNumber("ring_bandwidth_gbs"), 16);
}
