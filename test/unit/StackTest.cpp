//===- StackTest.cpp - software stacks: catalog, cluster files, pricing ---===//
//
// Host overheads, TF32 and attention fusion belong to the stack that runs a
// plan (docs/cost-model.md, "Software stacks"): the catalog's stacks, a
// cluster file's `stack:`, and what each changes in the roofline.
//
//===----------------------------------------------------------------------===//

#include "passes/cluster/Cluster.h"
#include "passes/cost/CostModel.h"

#include <gtest/gtest.h>

using namespace hetplan;
using namespace hetplan::cluster;

namespace {

const DeviceCatalog &builtin() { return DeviceCatalog::builtin(); }

const Stack &stack(llvm::StringRef name) {
  const Stack *s = builtin().findStack(name);
  EXPECT_TRUE(s) << name.str();
  static const Stack none;
  return s ? *s : none;
}

std::string fileError(llvm::StringRef text) {
  auto cluster = Cluster::fromYaml(text, "c.yaml", builtin());
  return cluster ? "" : llvm::toString(cluster.takeError());
}

/// A new GPU type (not in the catalog) and an A100, under `stackLine`.
const char *kTwoTypes = R"(
devices:
  - name: MyGPU
    memory_gib: 24
    memory_bandwidth_gbs: 900
    peak_tflops: {fp32: 30, tf32: 120, bf16: 240}
    intra_node_link: {kind: pcie4, bandwidth_gbs: 32}
    pcie: {generation: 4, bandwidth_gbs: 32}
nodes:
  - devices: [{type: MyGPU, count: 2}, {type: A100-80GB, count: 2}]
)";

} // namespace

TEST(Stack, CatalogNamesFiveStacksWithSources) {
  ASSERT_EQ(builtin().stacks().size(), 5u);
  for (const Stack &s : builtin().stacks())
    EXPECT_FALSE(s.source.empty()) << s.name;
  // deepspeed-2021 is today's fitted behaviour (AMP's accuracy numbers).
  const Stack &ds = stack("deepspeed-2021");
  EXPECT_EQ(ds.kernelUs, 61);
  EXPECT_EQ(ds.microBatchUs, 5000);
  EXPECT_FALSE(ds.tf32);
  EXPECT_FALSE(ds.fusedAttention);
  // hetplan's runtime fuses attention (cuDNN SDPA) and runs fp32 as FP32.
  const Stack &own = stack("hetplan");
  EXPECT_TRUE(own.fusedAttention);
  EXPECT_FALSE(own.tf32);
  EXPECT_LT(own.kernelUs, 10);
  EXPECT_TRUE(stack("Megatron_LM").tf32);  // names ignore case, '-' and '_'
  EXPECT_TRUE(stack("megatron-lm").fusedAttention);
  // Only llm-foundry runs the loss as one kernel (flash-attn's cross entropy).
  for (const Stack &s : builtin().stacks())
    EXPECT_EQ(s.fusedCrossEntropy, s.name == "llm-foundry") << s.name;
  // Only vllm fuses elementwise chains (hetplan's runtime fuses only its GEMM epilogues).
  for (const Stack &s : builtin().stacks())
    EXPECT_EQ(s.fusedElementwise, s.name == "vllm") << s.name;
  // Catalog devices carry no host figures of their own any more.
  for (const DeviceType *t : builtin().types())
    EXPECT_FALSE(t->achieved.kernelUs || t->achieved.microBatchUs) << t->name;
}

TEST(Stack, UnknownNameSaysTheClosest) {
  auto s = builtin().lookupStack("megatron");
  ASSERT_FALSE(bool(s));
  EXPECT_EQ(llvm::toString(s.takeError()),
            "unknown software stack 'megatron'; closest: megatron-lm, hetplan, vllm");
  EXPECT_EQ(fileError("stack: deepspeed\nnodes:\n  - devices: [T4]\n"),
            "c.yaml:1:8: unknown software stack 'deepspeed'; closest: deepspeed-2021, hetplan, "
            "megatron-lm");
  Cluster c(builtin());
  EXPECT_FALSE(bool(llvm::errorToBool(c.selectStack("megatron-lm"))));
  EXPECT_EQ(c.stack().name, "megatron-lm");
  EXPECT_TRUE(llvm::errorToBool(c.selectStack("nope")));
}

TEST(Stack, Fp32ProductsRunAsTf32OnlyUnderATf32Stack) {
  const DeviceType &a100 = *builtin().find("A100-80GB");
  const DeviceType &v100 = *builtin().find("V100");
  cost::OpCost mm;
  mm.matrixEngine = true;
  mm.flopsPerSample = 1e12;
  cost::OpCost add;
  add.flopsPerSample = 1e9;
  add.bytesPerSample = 1;  // compute bound: the vector rate decides
  auto compute = [&](const DeviceType &d, const cost::OpCost &op, const Stack &s) {
    cost::Efficiency eff = cost::efficiency(d, s);
    return cost::opTime(op, 1, d, DType::FP32, eff) - eff.launchSeconds;
  };
  // 156 TFLOP/s TF32 against 19.5 FP32 on an A100 (the TF32 path alone:
  // megatron-lm's fitted GEMM share left out).
  Stack tf32Only = stack("megatron-lm");
  tf32Only.matrix.reset();
  EXPECT_NEAR(compute(a100, mm, stack("deepspeed-2021")) / compute(a100, mm, tf32Only),
              156 / 19.5, 1e-9);
  EXPECT_DOUBLE_EQ(compute(a100, mm, stack("hetplan")), compute(a100, mm, stack("deepspeed-2021")));
  // No TF32 path on a V100; vector ops never use it; fp16 is unchanged.
  EXPECT_DOUBLE_EQ(compute(v100, mm, stack("megatron-lm")), compute(v100, mm, stack("hetplan")));
  EXPECT_DOUBLE_EQ(compute(a100, add, stack("megatron-lm")), compute(a100, add, stack("hetplan")));
  cost::Efficiency m = cost::efficiency(a100, tf32Only);
  cost::Efficiency h = cost::efficiency(a100, stack("hetplan"));
  EXPECT_DOUBLE_EQ(cost::opTime(mm, 1, a100, DType::FP16, m) - m.launchSeconds,
                   cost::opTime(mm, 1, a100, DType::FP16, h) - h.launchSeconds);
}

// A stack's fitted GEMM share (megatron-lm's `matrix`, bench/fit_stack.py)
// prices GPUs without their own measured share; a device's own wins.
TEST(Stack, FittedMatrixShareAppliesToGpusWithoutTheirOwn) {
  const DeviceType &a100 = *builtin().find("A100-80GB");
  const DeviceType &v100 = *builtin().find("V100");
  ASSERT_TRUE(stack("megatron-lm").matrix.has_value());
  EXPECT_FALSE(stack("hetplan").matrix.has_value());
  EXPECT_DOUBLE_EQ(cost::efficiency(a100, stack("megatron-lm")).matrix,
                   *stack("megatron-lm").matrix);
  EXPECT_DOUBLE_EQ(cost::efficiency(a100, stack("hetplan")).matrix, cost::Efficiency().matrix);
  ASSERT_TRUE(v100.achieved.matrix.has_value());
  EXPECT_DOUBLE_EQ(cost::efficiency(v100, stack("megatron-lm")).matrix, *v100.achieved.matrix);
}

TEST(Stack, PerTypeFiguresWinOverTheDevicesOwn) {
  // vllm's figures were fitted per GPU type (bench/fit_serving.py): they
  // price that type under that stack only.
  const Stack &vllm = stack("vllm");
  const DeviceType &a100 = *builtin().find("A100-80GB");
  const DeviceType &v100 = *builtin().find("V100");
  ASSERT_TRUE(vllm.achieved.count("A100-SXM-80GB"));
  const Achieved &fit = vllm.achieved.at("A100-SXM-80GB");
  cost::Efficiency e = cost::efficiency(a100, vllm);
  EXPECT_DOUBLE_EQ(e.matrix, *fit.matrix);
  EXPECT_DOUBLE_EQ(e.memory, *fit.memory);
  EXPECT_DOUBLE_EQ(e.launchSeconds, *fit.kernelUs * 1e-6);
  EXPECT_DOUBLE_EQ(cost::efficiency(a100, stack("hetplan")).memory, cost::Efficiency().memory);
  // A type the stack did not measure keeps its own figures.
  ASSERT_TRUE(v100.achieved.matrix.has_value());
  EXPECT_DOUBLE_EQ(cost::efficiency(v100, vllm).matrix, *v100.achieved.matrix);
  // A cluster file gives a stack figures for a type, by alias too; an
  // unknown type is an error naming it.
  auto c = Cluster::fromYaml("stack: {name: hetplan, achieved: {T4: {memory: 0.5, kernel_us: 9}}}\n"
                             "nodes:\n  - devices: [T4]\n",
                             "c.yaml", builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  cost::Efficiency t4 = cost::efficiency(*c->devices[0].type, c->stack());
  EXPECT_DOUBLE_EQ(t4.memory, 0.5);
  EXPECT_DOUBLE_EQ(t4.launchSeconds, 9e-6);
  std::string err = fileError("stack: {name: hetplan, achieved: {Q9000: {memory: 0.5}}}\n"
                              "nodes:\n  - devices: [T4]\n");
  EXPECT_NE(err.find("'achieved' names device type 'Q9000' in stack 'hetplan'"), std::string::npos) << err;
  err = fileError("stack: {name: hetplan, achieved: {T4: {memory: 2}}}\nnodes:\n  - devices: [T4]\n");
  EXPECT_NE(err.find("'memory' is a share of the peak (0-1] for T4"), std::string::npos) << err;
}

TEST(Stack, CollectivesPayTheStacksFloorAndLinkShare) {
  // No catalog stack has a measured collective floor (vidur's fit made the
  // serving check worse: docs/serving.md): collectives pay the link's
  // latency per hop at its peak.
  for (const Stack &st : builtin().stacks()) {
    cost::Efficiency e = cost::efficiency(*builtin().find("A100-80GB"), st);
    EXPECT_DOUBLE_EQ(e.collectiveSeconds, 0) << st.name;
    EXPECT_DOUBLE_EQ(e.link, 1.0) << st.name;
  }
  // A cluster file gives a stack a floor for every GPU and a type its own
  // floor and link share; a share above 1 is an error naming it.
  auto c = Cluster::fromYaml("stack: {name: hetplan, collective_us: 12, achieved: {T4: {link: 0.5, "
                             "collective_us: 40}}}\nnodes:\n  - devices: [T4, L4]\n",
                             "c.yaml", builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  cost::Efficiency t4 = cost::efficiency(*c->devices[0].type, c->stack());
  EXPECT_DOUBLE_EQ(t4.collectiveSeconds, 40e-6);
  EXPECT_DOUBLE_EQ(t4.link, 0.5);
  cost::Efficiency l4 = cost::efficiency(*c->devices[1].type, c->stack());
  EXPECT_DOUBLE_EQ(l4.collectiveSeconds, 12e-6);
  EXPECT_DOUBLE_EQ(l4.link, 1.0);
  std::string err = fileError("stack: {name: hetplan, achieved: {T4: {link: 1.5}}}\nnodes:\n  - devices: [T4]\n");
  EXPECT_NE(err.find("'link' is a share of the peak (0-1] for T4"), std::string::npos) << err;
}

TEST(Stack, ClusterDefinedAndCatalogGpusPayTheSameHostOverhead) {
  for (llvm::StringRef name : {"hetplan", "deepspeed-2021", "megatron-lm"}) {
    std::string text = "stack: " + name.str() + "\n" + kTwoTypes;
    auto c = Cluster::fromYaml(text, "c.yaml", builtin());
    ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
    EXPECT_EQ(c->stack().name, name);
    cost::Efficiency mine = cost::efficiency(*c->devices[0].type, c->stack());
    cost::Efficiency a100 = cost::efficiency(*c->devices[2].type, c->stack());
    EXPECT_EQ(c->devices[0].type->name, "MyGPU");
    EXPECT_DOUBLE_EQ(mine.launchSeconds, stack(name).kernelUs * 1e-6) << name.str();
    EXPECT_DOUBLE_EQ(a100.launchSeconds, mine.launchSeconds) << name.str();
    EXPECT_DOUBLE_EQ(a100.microBatchSeconds, mine.microBatchSeconds) << name.str();
  }
  // `hetplan cluster` says which stack prices the plan.
  auto meg = Cluster::fromYaml(std::string("stack: megatron-lm\n") + kTwoTypes, "c.yaml", builtin());
  ASSERT_TRUE(bool(meg));
  EXPECT_NE(meg->describe().find("software stack: megatron-lm (10 us per GPU kernel, 0 us per "
                                 "micro-batch and pass, attention fused, fp32 products as TF32)"),
            std::string::npos);
  const llvm::json::Object *js = meg->toJSON().getAsObject()->getObject("stack");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->getString("name"), "megatron-lm");
  // Without `stack:` the default stack, hetplan.
  auto plain = Cluster::fromYaml(kTwoTypes, "c.yaml", builtin());
  ASSERT_TRUE(bool(plain));
  EXPECT_EQ(plain->stack().name, "hetplan");
  // CPU devices keep their own per-op figure under every stack.
  const DeviceType &cpu = *builtin().find("CPU");
  EXPECT_DOUBLE_EQ(cost::efficiency(cpu, stack("deepspeed-2021")).launchSeconds, 2e-6);
}

TEST(Stack, ClusterFileOverridesOrDefinesAStack) {
  auto over = Cluster::fromYaml("stack: {name: deepspeed-2021, kernel_us: 30}\n"
                                "nodes:\n  - devices: [T4]\n",
                                "c.yaml", builtin());
  ASSERT_TRUE(bool(over)) << llvm::toString(over.takeError());
  EXPECT_EQ(over->stack().kernelUs, 30);
  EXPECT_EQ(over->stack().microBatchUs, 5000);  // kept from the catalog's
  EXPECT_EQ(stack("deepspeed-2021").kernelUs, 61);  // the shipped one is untouched
  auto mine = Cluster::fromYaml("stack: {name: my-jax, kernel_us: 3, micro_batch_us: 100, "
                                "tf32: true, fused_attention: true}\n"
                                "nodes:\n  - devices: [T4]\n",
                                "c.yaml", builtin());
  ASSERT_TRUE(bool(mine)) << llvm::toString(mine.takeError());
  EXPECT_EQ(mine->stack().name, "my-jax");
  EXPECT_TRUE(mine->stack().tf32);
  EXPECT_EQ(mine->stack().microBatchUs, 100);
}

TEST(Stack, ClusterFileErrorsNameLineAndField) {
  EXPECT_EQ(fileError("stack: {name: my-jax, kernel_us: 3}\nnodes:\n  - devices: [T4]\n"),
            "c.yaml:1:8: missing field 'micro_batch_us' in stack 'my-jax' (not a known stack, "
            "so a new one; known: hetplan, deepspeed-2021, megatron-lm, llm-foundry, vllm)");
  EXPECT_EQ(fileError("stack: {name: hetplan, tf32: yes}\nnodes:\n  - devices: [T4]\n"),
            "c.yaml:1:30: 'tf32' must be true or false in stack 'hetplan'");
  EXPECT_EQ(fileError("stack: {name: hetplan, kernel_us: -1}\nnodes:\n  - devices: [T4]\n"),
            "c.yaml:1:35: 'kernel_us' must be >= 0, not -1");
  EXPECT_NE(fileError("stack: {name: hetplan, flash: true}\nnodes:\n  - devices: [T4]\n")
                .find("unknown field 'flash' in stack 'hetplan'"),
            std::string::npos);
  // The shipped catalog's format: every stack complete, sources included.
  auto cat = DeviceCatalog::parse("version: 1\nstacks:\n  - {name: s, kernel_us: 1, "
                                  "micro_batch_us: 0, tf32: false, fused_attention: false}\n"
                                  "devices: []\n",
                                  "cat.yaml");
  ASSERT_FALSE(bool(cat));
  EXPECT_EQ(llvm::toString(cat.takeError()), "cat.yaml:3:5: missing field 'source' in stack 's'");
}
