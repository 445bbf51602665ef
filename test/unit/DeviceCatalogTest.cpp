//===- DeviceCatalogTest.cpp - the shipped catalog and name lookup --------===//

#include "passes/cluster/DeviceCatalog.h"

#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

using namespace hetplan::cluster;

namespace {

const DeviceType &get(llvm::StringRef name) {
  const DeviceType *type = DeviceCatalog::builtin().find(name);
  EXPECT_NE(type, nullptr) << name.str();
  static DeviceType none;
  return type ? *type : none;
}

/// The error text of `parse`, or "" when it succeeds.
std::string parseError(llvm::StringRef yaml) {
  auto catalog = DeviceCatalog::parse(yaml, "cat.yaml");
  if (catalog)
    return "";
  return llvm::toString(catalog.takeError());
}

/// A valid one-entry catalog; `extra` lines are appended to the entry.
std::string oneDevice(llvm::StringRef name = "X1",
                      llvm::StringRef extra = "") {
  return ("version: 1\n"
          "devices:\n"
          "  - name: " + name + "\n"
          "    aliases: [X-One]\n"
          "    vendor: Acme\n"
          "    kind: gpu\n"
          "    memory_gib: 24\n"
          "    memory_bandwidth_gbs: 900\n"
          "    peak_tflops: {fp32: 20, fp16: 80}\n"
          "    intra_node_link: {kind: pcie4, bandwidth_gbs: 32}\n"
          "    pcie: {generation: 4, bandwidth_gbs: 32}\n"
          "    tdp_watts: 300\n"
          "    price_per_hour_usd: null\n"
          "    sources: [\"Acme X1 datasheet\"]\n" + extra)
      .str();
}

} // namespace

TEST(DeviceCatalog, BuiltinIsTheShippedFile) {
  // The binary carries the catalog; it must be byte-identical to the source.
  auto file = llvm::MemoryBuffer::getFile(HETPLAN_CATALOG_YAML);
  ASSERT_TRUE(bool(file));
  EXPECT_EQ(DeviceCatalog::builtinYaml(), (*file)->getBuffer());
  EXPECT_GE(DeviceCatalog::builtin().size(), 19u);
}

TEST(DeviceCatalog, EveryEntryIsComplete) {
  for (const DeviceType *t : DeviceCatalog::builtin().types()) {
    SCOPED_TRACE(t->name);
    EXPECT_FALSE(t->vendor.empty());
    EXPECT_GT(t->memoryGiB, 0);
    EXPECT_GT(t->memoryBytes(), 0u);
    EXPECT_GT(t->memoryBandwidthGBs, 0);
    ASSERT_TRUE(t->nativeTflops(DType::FP32).has_value());
    EXPECT_GT(*t->nativeTflops(DType::FP32), 0);
    EXPECT_GT(t->intraNodeLink.bandwidthGBs, 0);
    EXPECT_FALSE(t->intraNodeLink.kind.empty());
    EXPECT_GT(t->pcie.bandwidthGBs, 0);
    EXPECT_GE(t->pcie.generation, 3);
    EXPECT_GT(t->tdpWatts, 0);
    EXPECT_FALSE(t->sources.empty());
    if (t->pricePerHourUSD) {
      EXPECT_GT(*t->pricePerHourUSD, 0);
    }
    for (DType d : kAllDTypes)
      EXPECT_GT(t->peakFlops(d), 0) << dtypeName(d).str();
  }
}

TEST(DeviceCatalog, DenseFiguresAreSane) {
  // Dense, not "with sparsity": H100 SXM FP16 is 989.4, not 1979.
  EXPECT_NEAR(*get("H100-SXM").nativeTflops(DType::FP16), 989.4, 0.5);
  EXPECT_NEAR(*get("H100-SXM").nativeTflops(DType::BF16), 989.4, 0.5);
  EXPECT_NEAR(*get("H100-SXM").nativeTflops(DType::TF32), 494.7, 0.5);
  EXPECT_DOUBLE_EQ(*get("A100").nativeTflops(DType::FP16), 312);
  EXPECT_DOUBLE_EQ(*get("A100-80GB").nativeTflops(DType::FP16), 312);
  EXPECT_DOUBLE_EQ(*get("T4").nativeTflops(DType::FP16), 65);
  EXPECT_NEAR(*get("MI300X").nativeTflops(DType::FP16), 1307.4, 0.5);
  for (const DeviceType *t : DeviceCatalog::builtin().types()) {
    SCOPED_TRACE(t->name);
    double fp32 = *t->nativeTflops(DType::FP32);
    // No device here reaches 1.5 PFLOP/s dense FP16 (sparse H100 is 1979).
    if (auto fp16 = t->nativeTflops(DType::FP16)) {
      EXPECT_LT(*fp16, 1500);
      EXPECT_GE(*fp16, fp32);
    }
    if (auto tf32 = t->nativeTflops(DType::TF32)) {
      EXPECT_GE(*tf32, fp32);
      EXPECT_LE(*tf32, *t->nativeTflops(DType::FP16));
    }
    // Memory and links in plausible ranges (GiB, GB/s one direction).
    EXPECT_LE(t->memoryGiB, 1024);
    EXPECT_LE(t->memoryBandwidthGBs, 10000);
    EXPECT_LE(t->intraNodeLink.bandwidthGBs, 1000);
  }
  EXPECT_EQ(get("A100-80GB").memoryBytes(), uint64_t(80) << 30);
}

TEST(DeviceCatalog, MissingRatesFallBack) {
  const DeviceType &t4 = get("T4");
  EXPECT_FALSE(t4.supports(DType::BF16));
  EXPECT_FALSE(t4.supports(DType::TF32));
  EXPECT_DOUBLE_EQ(t4.peakFlops(DType::BF16), 65e12);   // bf16 -> fp16
  EXPECT_DOUBLE_EQ(t4.peakFlops(DType::TF32), 8.1e12);  // tf32 -> fp32
  EXPECT_DOUBLE_EQ(get("V100").peakFlops(DType::INT8), 15.7e12);  // -> fp32
  const DeviceType &cpu = get("CPU");
  EXPECT_EQ(cpu.kind, DeviceKind::CPU);
  EXPECT_DOUBLE_EQ(cpu.peakFlops(DType::BF16), 8.19e12);  // -> fp16 -> fp32
  EXPECT_DOUBLE_EQ(get("H100").peakFlops(DType::FP16), 989.4e12);
}

TEST(DeviceCatalog, LookupIgnoresCaseSeparatorsAndUsesAliases) {
  const DeviceCatalog &c = DeviceCatalog::builtin();
  const DeviceType *h100 = c.find("H100-SXM");
  ASSERT_NE(h100, nullptr);
  for (const char *spelling :
       {"h100", "H100", "h100-sxm", "H100_SXM", "h100 sxm", "H100SXM5",
        "NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3"})
    EXPECT_EQ(c.find(spelling), h100) << spelling;
  // Bare names resolve to the smaller-memory variant.
  EXPECT_EQ(c.find("A100")->name, "A100-SXM-40GB");
  EXPECT_EQ(c.find("V100")->name, "V100-SXM2-16GB");
  // "80G" and "80GB" are the same size.
  for (const char *spelling : {"A100-80G", "a100-80gb", "A100 80G",
                               "A100_SXM_80GB", "A100-SXM4-80GB"})
    EXPECT_EQ(c.find(spelling)->name, "A100-SXM-80GB") << spelling;
  EXPECT_EQ(c.find("tesla-t4")->name, "T4");
  EXPECT_EQ(c.find("4090")->name, "RTX-4090");
  EXPECT_EQ(c.find("mi250x")->name, "MI250X");
  EXPECT_EQ(c.find("MI250X-GCD")->name, "MI250X-GCD");
  auto found = c.lookup("rtx a6000");
  ASSERT_TRUE(bool(found));
  EXPECT_EQ((*found)->name, "RTX-A6000");
}

TEST(DeviceCatalog, NormalizedNames) {
  EXPECT_EQ(normalizeDeviceName("NVIDIA H100 80GB HBM3"), "nvidiah10080ghbm3");
  EXPECT_EQ(normalizeDeviceName("h100_sxm"), "h100sxm");
  EXPECT_EQ(normalizeDeviceName("A100-80G"), normalizeDeviceName("A100-80GB"));
  EXPECT_EQ(normalizeDeviceName("GB200"), "gb200");  // not a memory size
}

TEST(DeviceCatalog, UnknownNamesGetSuggestions) {
  const DeviceCatalog &c = DeviceCatalog::builtin();
  EXPECT_EQ(c.find("A100-90G"), nullptr);
  auto missing = c.lookup("A100-90G");
  ASSERT_FALSE(bool(missing));
  std::string message = llvm::toString(missing.takeError());
  EXPECT_EQ(message.find("unknown device type 'A100-90G'; closest: "
                         "A100-80GB, A100-40GB"),
            0u)
      << message;
  auto near = c.closest("H100-PCI");
  ASSERT_EQ(near.size(), 3u);
  EXPECT_EQ(near[0], "H100-PCIe");
  near = c.closest("mi300");
  EXPECT_EQ(near[0], "MI300X");
  // One suggestion per type, even when several aliases are close.
  near = c.closest("V100-64GB");
  ASSERT_EQ(near.size(), 3u);
  EXPECT_NE(c.find(near[0]), c.find(near[1]));
}

TEST(DeviceCatalog, ParsesJsonToo) {
  // toJSON writes the catalog's field names, so a catalog of them reads back.
  const DeviceType &t4 = get("T4");
  llvm::json::Value doc = llvm::json::Object{
      {"version", 1}, {"devices", llvm::json::Array{toJSON(t4)}}};
  std::string text;
  llvm::raw_string_ostream(text) << doc;
  auto catalog = DeviceCatalog::parse(text, "t4.json");
  ASSERT_TRUE(bool(catalog)) << llvm::toString(catalog.takeError());
  const DeviceType *back = catalog->find("T4");
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->aliases, t4.aliases);
  EXPECT_EQ(back->memoryGiB, t4.memoryGiB);
  EXPECT_EQ(back->peakTflops, t4.peakTflops);
  EXPECT_EQ(back->pricePerHourUSD, t4.pricePerHourUSD);
  EXPECT_EQ(back->sources, t4.sources);
}

TEST(DeviceCatalog, ParseErrorsNameLineAndField) {
  EXPECT_EQ(parseError(oneDevice()), "");
  // Unknown field: line and column of the key, the device, a hint.
  std::string yaml = oneDevice("X1", "    memroy_gib: 24\n");
  EXPECT_EQ(parseError(yaml),
            "cat.yaml:15:5: unknown field 'memroy_gib' in device 'X1' "
            "(did you mean 'memory_gib'?)");
  // Missing field: the entry's position.
  yaml = oneDevice();
  yaml.erase(yaml.find("    memory_gib: 24\n"), 19);
  EXPECT_EQ(parseError(yaml), "cat.yaml:3:5: missing field 'memory_gib' in "
                              "device 'X1'");
  yaml = oneDevice();
  yaml.replace(yaml.find("900"), 3, "fast");
  EXPECT_EQ(parseError(yaml), "cat.yaml:8:27: 'memory_bandwidth_gbs' must be "
                              "a number, not 'fast'");
  yaml = oneDevice();
  yaml.replace(yaml.find("fp32: 20"), 8, "fp32: -2");
  EXPECT_EQ(parseError(yaml), "cat.yaml:9:25: 'fp32' must be > 0, not -2");
  yaml = oneDevice();
  yaml.replace(yaml.find("fp16"), 4, "fp64");
  EXPECT_EQ(parseError(yaml).substr(0, 59),
            "cat.yaml:9:29: unknown field 'fp64' in device 'X1' (did you");
  yaml = oneDevice();
  yaml.replace(yaml.find("kind: gpu"), 9, "kind: tpu");
  EXPECT_EQ(parseError(yaml),
            "cat.yaml:6:11: 'kind' must be gpu or cpu, not 'tpu' in device "
            "'X1'");
  // Two entries whose names meet after normalizing.
  yaml = oneDevice() + oneDevice("x_1").substr(oneDevice().find("  - name"));
  yaml.replace(yaml.rfind("X-One"), 5, "X-Two");
  EXPECT_EQ(parseError(yaml), "cat.yaml:15:5: device name 'x_1' of 'x_1' "
                              "already names 'X1'");
  EXPECT_EQ(parseError("version: 2\ndevices: []\n"),
            "cat.yaml:1:10: unsupported catalog version 2 (this hetplan reads "
            "version 1)");
  EXPECT_EQ(parseError("devices: [\n"),
            "cat.yaml:1:11: malformed YAML: Could not find closing ]!");
  EXPECT_EQ(parseError(""), "cat.yaml:1:1: empty file");
}

TEST(DeviceCatalog, AddAndOverride) {
  DeviceCatalog c = DeviceCatalog::builtin();
  DeviceType t4 = *c.find("T4");
  t4.name = "tesla_t4";  // any spelling of the type
  t4.memoryGiB = 15;
  t4.aliases = {"My-T4"};
  ASSERT_FALSE(bool(c.override(t4)));
  EXPECT_EQ(c.find("T4")->memoryGiB, 15);
  EXPECT_EQ(c.find("T4")->name, "T4");  // canonical name kept
  EXPECT_EQ(c.find("My-T4"), c.find("T4-16GB"));  // old and new aliases
  // The shipped catalog is untouched.
  EXPECT_EQ(DeviceCatalog::builtin().find("T4")->memoryGiB, 16);

  DeviceType fresh = t4;
  fresh.name = "Gaudi2";
  fresh.aliases = {};
  ASSERT_FALSE(bool(c.add(fresh)));
  EXPECT_EQ(c.size(), DeviceCatalog::builtin().size() + 1);
  std::string err = llvm::toString(c.add(fresh));
  EXPECT_EQ(err, "device name 'Gaudi2' of 'Gaudi2' already names 'Gaudi2'");
  fresh.name = "NotThere";
  err = llvm::toString(c.override(fresh));
  EXPECT_EQ(err, "cannot override unknown device type 'NotThere'");
}
