//===- CostModelTest.cpp - cost rules, layers and roofline on real models -===//
//
// ResNet-50 (onnx-light, shared models), GPT-2 small and BERT-base (written
// by models/gen_transformer.py without weight bytes) go through
// het-bind-shapes, het-group-layers and het-annotate-costs; their FLOPs,
// parameters and layers are checked against the published figures. How to
// reproduce by hand: docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxImporter.h"
#include "passes/Passes.h"
#include "passes/cost/CostModel.h"
#include "passes/cost/ExtractModelCost.h"
#include "passes/cost/OpCosts.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"

#include <gtest/gtest.h>

#include <map>

using namespace hetplan;
using namespace hetplan::het;

namespace {

const char *kPython = "/usr/bin/python3";

struct Pipeline {
  std::vector<std::string> dims;
  bool annotate = true;
  std::vector<std::string> devices;
};

/// Runs bind-shapes, group-layers and (optionally) annotate-costs; returns
/// the first diagnostic on failure.
std::string runPasses(mlir::ModuleOp module, const Pipeline &p) {
  mlir::MLIRContext *context = module.getContext();
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic &d) {
    if (diag.empty() && d.getSeverity() == mlir::DiagnosticSeverity::Error)
      diag = d.str();
    return mlir::success();
  });
  mlir::PassManager pm(context);
  HetBindShapesOptions bind;
  bind.dims.assign(p.dims.begin(), p.dims.end());
  bind.requireStatic = true;
  pm.addPass(createHetBindShapes(bind));
  pm.addPass(createHetGroupLayers());
  if (p.annotate) {
    HetAnnotateCostsOptions annotate;
    annotate.devices.assign(p.devices.begin(), p.devices.end());
    pm.addPass(createHetAnnotateCosts(annotate));
  }
  if (mlir::failed(pm.run(module)))
    return diag.empty() ? "pass pipeline failed" : diag;
  return "";
}

GraphOp firstGraph(mlir::ModuleOp module) { return *module.getOps<GraphOp>().begin(); }

double f64Attr(mlir::Operation *op, llvm::StringRef name) {
  auto attr = op->getAttrOfType<mlir::FloatAttr>(name);
  return attr ? attr.getValueAsDouble() : -1;
}

/// A transformer written by models/gen_transformer.py (no weight bytes) in a
/// temporary directory, with the parameter count the generator printed.
struct Generated {
  std::string dir;
  std::string path;
  int64_t parameters = 0;
  std::string skip;  // why it could not be made
};

Generated generate(llvm::StringRef family, llvm::StringRef config,
                   llvm::ArrayRef<llvm::StringRef> extra = {}) {
  Generated g;
  std::string script = std::string(HETPLAN_SOURCE_DIR) + "/models/gen_transformer.py";
  if (!llvm::sys::fs::exists(kPython) || !llvm::sys::fs::exists(script)) {
    g.skip = "needs /usr/bin/python3 and " + script;
    return g;
  }
  llvm::StringRef probe[] = {kPython, "-c", "import onnx"};
  std::optional<llvm::StringRef> quiet[] = {llvm::StringRef(""), llvm::StringRef(""),
                                            llvm::StringRef("")};
  if (llvm::sys::ExecuteAndWait(kPython, probe, std::nullopt, quiet) != 0) {
    g.skip = "python3-onnx is missing (apt-get install python3-onnx)";
    return g;
  }
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("hetplan-cost", dir)) {
    g.skip = "cannot create a temporary directory";
    return g;
  }
  g.dir = dir.str().str();
  g.path = (dir + "/" + config + ".onnx").str();
  std::string log = (dir + "/gen.log").str();
  std::vector<llvm::StringRef> args = {kPython, script, "--family", family, "--config",
                                       config, "--weights", "none", "-o", g.path};
  args.insert(args.end(), extra.begin(), extra.end());
  std::optional<llvm::StringRef> redirects[] = {llvm::StringRef(""), llvm::StringRef(log),
                                                llvm::StringRef(log)};
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(kPython, args, std::nullopt, redirects, 0, 0, &error);
  auto text = llvm::MemoryBuffer::getFile(log);
  if (rc != 0) {
    g.skip = "gen_transformer.py failed: " + error +
             (text ? (*text)->getBuffer().str() : std::string());
    g.path.clear();
    return g;
  }
  // "parameters: 124,439,808 (124.44M), ..."
  llvm::SmallVector<llvm::StringRef> groups;
  if (text && llvm::Regex("parameters: ([0-9,]+)").match((*text)->getBuffer(), &groups)) {
    std::string digits;
    for (char c : groups[1])
      if (c != ',')
        digits += c;
    g.parameters = std::stoll(digits);
  }
  return g;
}

/// Generated models are shared by the tests of this file and removed at exit.
struct GeneratedCache : std::map<std::string, Generated> {
  ~GeneratedCache() {
    for (auto &entry : *this)
      if (!entry.second.dir.empty())
        llvm::sys::fs::remove_directories(entry.second.dir);
  }
};

const Generated &model(llvm::StringRef family, llvm::StringRef config,
                       llvm::ArrayRef<llvm::StringRef> extra = {}) {
  static GeneratedCache cache;
  std::string key = config.str();
  for (llvm::StringRef e : extra)
    key += " " + e.str();
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, generate(family, config, extra)).first;
  return it->second;
}

mlir::OwningOpRef<mlir::ModuleOp> importModel(const std::string &path,
                                              mlir::MLIRContext &context, bool missingWeights) {
  import::ImportOptions options;
  options.allowMissingWeights = missingWeights;
  std::string error;
  auto module = import::importOnnxFile(path, &context, options, error);
  EXPECT_TRUE(module) << error;
  return module;
}

std::string resnetPath() {
  return std::string(HETPLAN_SHARED_MODELS_DIR) + "/onnx-light/light_resnet50.onnx";
}

} // namespace

//===----------------------------------------------------------------------===//
// Real models
//===----------------------------------------------------------------------===//

TEST(CostModel, ResNet50Is4GMacs) {
  if (!llvm::sys::fs::exists(resnetPath()))
    GTEST_SKIP() << resnetPath() << " is absent";
  mlir::MLIRContext context;
  auto module = importModel(resnetPath(), context, false);
  ASSERT_TRUE(module);
  // Its weights are ConstantOfShape outputs: their shapes come from
  // het-bind-shapes folding the shape initializers.
  ASSERT_EQ(runPasses(*module, {{}, true, {"A100-80GB"}}), "");
  GraphOp graph = firstGraph(*module);
  double gmacs = f64Attr(graph, "het.total_flops") / 2 / 1e9;
  EXPECT_GE(gmacs, 3.9);
  EXPECT_LE(gmacs, 4.2);
  EXPECT_EQ(graph->getAttrOfType<mlir::IntegerAttr>("het.total_params").getInt(), 25557032);
  EXPECT_EQ(graph->getAttrOfType<mlir::IntegerAttr>("het.samples").getInt(), 1);
  auto time = graph->getAttrOfType<mlir::DictionaryAttr>("het.total_time");
  ASSERT_TRUE(time);
  double seconds = llvm::cast<mlir::FloatAttr>(time.get("A100-SXM-80GB")).getValueAsDouble();
  EXPECT_GT(seconds, 2e-4);  // 8.2 GFLOP at fp32 on an A100 is not under 0.2 ms
  // Above: about 180 ops at the fitted per-op host overhead (61 us) bound it.
  EXPECT_LT(seconds, 2e-2);

  auto cost = cost::extractModelCost(graph);
  ASSERT_TRUE(bool(cost)) << llvm::toString(cost.takeError());
  // stem, 16 bottleneck blocks (3 + 4 + 6 + 3), head
  ASSERT_EQ(cost->layers.size(), 18u);
  EXPECT_EQ(cost->layers.front().name, "stem");
  EXPECT_EQ(cost->layers.back().name, "head");
  for (int i = 1; i <= 16; ++i)
    EXPECT_EQ(cost->layers[i].name, "block" + std::to_string(i - 1));
  EXPECT_EQ(cost->parameters, 25557032);
  EXPECT_NEAR(cost->forwardFlopsPerSample() / 2 / 1e9, gmacs, 1e-3);
  // The first block hands 256 x 56 x 56 fp32 values to the next.
  EXPECT_DOUBLE_EQ(cost->layers[1].outputBytesPerSample, 256.0 * 56 * 56 * 4);
  EXPECT_DOUBLE_EQ(cost->inputBytesPerSample, 3.0 * 224 * 224 * 4);
  // Convolutions: no Megatron split, no KV cache.
  for (const cost::LayerCost &layer : cost->layers) {
    if (&layer != &cost->layers.back())
      EXPECT_EQ(layer.tensorParallelFraction, 0) << layer.name;
    EXPECT_EQ(layer.kvCacheBytesPerSample, 0) << layer.name;
    EXPECT_GT(layer.stashBytesPerSample, 0) << layer.name;
  }
  // Parameters sit with their first consumer: the FC layer's 2048 x 1000 in the head.
  EXPECT_EQ(cost->layers.back().parameters, 2048 * 1000 + 1000);
  // The head's 8 MB FC is a Gemm, which the runtime does not split: it runs
  // whole on every rank of a tensor-parallel group, so nothing is priced split.
  EXPECT_EQ(cost->layers.back().tensorParallelFraction, 0);
  EXPECT_TRUE(cost->layers.back().tensorParallelUnits.empty());
}

TEST(CostModel, Gpt2SmallParametersFlopsAndBlocks) {
  const Generated &g = model("gpt2", "gpt2-small");
  if (!g.skip.empty())
    GTEST_SKIP() << g.skip;
  mlir::MLIRContext context;
  auto module = importModel(g.path, context, true);
  ASSERT_TRUE(module);
  const int64_t seq = 1024, hidden = 768, layers = 12;
  ASSERT_EQ(runPasses(*module, {{"batch=1", "sequence=1024"}, true, {}}), "");
  GraphOp graph = firstGraph(*module);
  int64_t params = graph->getAttrOfType<mlir::IntegerAttr>("het.total_params").getInt();
  EXPECT_EQ(params, g.parameters);
  EXPECT_EQ(params, 124439808); // GPT-2 small, the tied LM head counted once

  auto cost = cost::extractModelCost(graph);
  ASSERT_TRUE(bool(cost)) << llvm::toString(cost.takeError());
  EXPECT_EQ(cost->parameters, params);
  // embeddings, 12 blocks, head
  ASSERT_EQ(cost->layers.size(), size_t(layers + 2));
  EXPECT_EQ(cost->layers.front().name, "stem");
  EXPECT_EQ(cost->layers.back().name, "head");
  for (int i = 0; i < layers; ++i)
    EXPECT_EQ(cost->layers[i + 1].name, "h." + std::to_string(i));

  // Forward FLOPs per token ~ 2 x parameters + the attention products
  // (Q K^T and P V: 4 x layers x seq x hidden per token; Kaplan et al. 2020).
  double perToken = cost->forwardFlopsPerSample() / double(seq);
  double expected = 2.0 * double(params) + 4.0 * layers * seq * hidden;
  EXPECT_NEAR(perToken / expected, 1.0, 0.02) << perToken;

  const cost::LayerCost &block = cost->layers[1];
  double residual = double(seq * hidden * 4);   // fp32 [seq, hidden]
  EXPECT_DOUBLE_EQ(block.outputBytesPerSample, residual);
  EXPECT_EQ(block.parameters, 7087872);         // 12 of these make the 85M body
  EXPECT_GT(block.tensorParallelFraction, 0.95);
  // Megatron's two pairs (tensorParallelUnits, as the runtime runs them):
  // the attention (the fused Q|K|V projection by columns in three segments,
  // so that a rank holds the same heads of each; the output projection by
  // rows) and the MLP (c_fc by columns, GELU on the slices, c_proj by rows).
  // Each all-reduces the residual once forward and its input's gradient
  // once backward. The attention's 12 heads split 2, 3, 4, 6 or 12 ways,
  // not 8; the MLP's 3072 columns 8 ways too.
  ASSERT_EQ(block.tensorParallelUnits.size(), 2u);
  for (const cost::TensorParallelUnit &u : block.tensorParallelUnits) {
    EXPECT_TRUE(u.pair);
    EXPECT_EQ(u.forwardCollectives, 1);
    EXPECT_EQ(u.backwardCollectives, 1);
    EXPECT_DOUBLE_EQ(u.forwardElementsPerSample, double(seq * hidden));
    EXPECT_DOUBLE_EQ(u.backwardElementsPerSample, double(seq * hidden));
    EXPECT_TRUE(u.fits(2) && u.fits(4) && u.fits(12));
  }
  EXPECT_FALSE(block.tensorParallelUnits[0].fits(8));
  EXPECT_TRUE(block.tensorParallelUnits[1].fits(8));
  const cost::TensorParallelNode &qkv = block.tensorParallelUnits[0].nodes.front();
  EXPECT_EQ(qkv.role, cost::TensorParallelRole::Column);
  EXPECT_EQ(qkv.segments, 3);
  // K and V: 2 x seq x hidden values per sample.
  EXPECT_DOUBLE_EQ(block.kvCacheBytesPerSample, 2 * residual);
  EXPECT_GT(block.stashBytesPerSample, 10 * residual);
  // The embeddings own wte and wpe; the head reads the tied wte.
  EXPECT_EQ(cost->layers.front().parameters, 50257 * 768 + 1024 * 768);
  EXPECT_EQ(cost->layers.back().parameters, 2 * 768);  // ln_f
  // ... and keeps a copy of it when it is not on the embeddings' stage.
  ASSERT_EQ(cost->layers.back().tiedParameters.size(), 1u);
  EXPECT_EQ(cost->layers.back().tiedParameters[0].first, 0);
  EXPECT_EQ(cost->layers.back().tiedParameters[0].second, 50257 * 768);
  // The tied LM head multiplies by Transpose(wte), not by a weight of its
  // own: it runs whole on every rank of a group, as the runtime runs it.
  EXPECT_TRUE(cost->layers.back().tensorParallelUnits.empty());
  EXPECT_EQ(cost->layers.back().tensorParallelFraction, 0);
  // The pairs' ops run on each rank's slice (the MatMuls, the attention
  // products, softmax, GELU, the biases); LayerNorm and the residual adds
  // run whole on every rank.
  int split = 0;
  for (const cost::OpCost &op : block.ops) {
    split += op.tensorParallelUnit >= 0;
    if (op.opType == "LayerNormalization")
      EXPECT_LT(op.tensorParallelUnit, 0) << op.name;
  }
  EXPECT_GE(split, 20);
  EXPECT_LT(split, int(block.ops.size()));
  EXPECT_EQ(cost->layers.front().kvCacheBytesPerSample, 0);
}


TEST(CostModel, TransformerBlockKeepsWhatKorthikantiCounts) {
  // V. Korthikanti et al., "Reducing Activation Recomputation in Large
  // Transformer Models" (MLSys 2023), section 4.1: without recomputation a
  // transformer layer keeps 34 s b h + 5 a s^2 b bytes in fp16 (dropout
  // included); with tensor parallelism t, (10 + 24/t) s b h + 5 a s^2 b / t.
  // hetplan derives it from the graph's ops (a training graph: Dropout
  // where Megatron-LM has one).
  const Generated &g = model("gpt2", "gpt2-small", {"--dropout", "0.1"});
  if (!g.skip.empty())
    GTEST_SKIP() << g.skip;
  mlir::MLIRContext context;
  auto module = importModel(g.path, context, true);
  ASSERT_TRUE(module);
  ASSERT_EQ(runPasses(*module, {{"batch=1", "sequence=1024"}, false, {}}), "");
  cost::ExtractOptions fp16;
  fp16.dtype = cost::DType::FP16;
  fp16.training = true;
  auto cost = cost::extractModelCost(firstGraph(*module), fp16);
  ASSERT_TRUE(bool(cost)) << llvm::toString(cost.takeError());
  const double s = 1024, h = 768, a = 12;
  for (int i = 1; i <= 12; ++i) {
    const cost::LayerCost &block = cost->layers[i];
    EXPECT_DOUBLE_EQ(block.stashBytesPerSample, 34 * s * h + 5 * a * s * s) << block.name;
    EXPECT_DOUBLE_EQ(block.stashSplitBytesPerSample, 24 * s * h + 5 * a * s * s) << block.name;
    // Megatron's two column/row pairs (attention, MLP): the Dropout on the
    // attention probabilities stays inside the attention's region.
    ASSERT_EQ(block.tensorParallelUnits.size(), 2u) << block.name;
    for (const cost::TensorParallelUnit &u : block.tensorParallelUnits) {
      EXPECT_TRUE(u.pair) << block.name;
      EXPECT_EQ(u.forwardCollectives, 1) << block.name;
      EXPECT_DOUBLE_EQ(u.forwardElementsPerSample, s * h) << block.name;
    }
  }
  // The tied LM head splits by vocabulary with the loss: 3 values per token
  // in 2 all-reduces forward, the input gradient summed backward, and the
  // [vocab, hidden] weight's gradient once per step.
  const cost::LayerCost &head = cost->layers.back();
  ASSERT_EQ(head.tensorParallelUnits.size(), 1u);
  const cost::TensorParallelUnit &vocab = head.tensorParallelUnits[0];
  EXPECT_TRUE(vocab.vocabHead);
  EXPECT_EQ(vocab.nodes.front().role, cost::TensorParallelRole::Vocab);
  EXPECT_EQ(vocab.divisor, 50257);
  EXPECT_DOUBLE_EQ(vocab.forwardElementsPerSample, 3 * s);
  EXPECT_EQ(vocab.forwardCollectives, 2);
  EXPECT_DOUBLE_EQ(vocab.backwardElementsPerSample, s * h);
  EXPECT_DOUBLE_EQ(vocab.stepAllReduceElements, 50257 * h);
  // A stack that fuses attention (cuDNN SDPA, FlashAttention) keeps no S x S
  // value: Korthikanti's 5 a s^2 term becomes the softmax statistics, one
  // fp32 per row of every head (4 a s bytes), split like the heads.
  cost::ExtractOptions fused = fp16;
  fused.fusedAttention = true;
  auto flash = cost::extractModelCost(firstGraph(*module), fused);
  ASSERT_TRUE(bool(flash)) << llvm::toString(flash.takeError());
  for (int i = 1; i <= 12; ++i) {
    const cost::LayerCost &block = flash->layers[i];
    EXPECT_DOUBLE_EQ(block.stashBytesPerSample, 34 * s * h + 4 * a * s) << block.name;
    EXPECT_DOUBLE_EQ(block.stashSplitBytesPerSample, 24 * s * h + 4 * a * s) << block.name;
    // The largest activation is no longer the scores (a s^2), and the
    // block's FLOPs are the unfused block's, in one kernel per attention.
    EXPECT_LT(block.largestActivationBytesPerSample, 2 * a * s * s) << block.name;
    EXPECT_NEAR(block.flopsPerSample(), cost->layers[i].flopsPerSample(),
                1e-12 * block.flopsPerSample()) << block.name;
    double launches = 0, unfused = 0;
    for (const cost::OpCost &op : block.ops)
      launches += op.launches;
    for (const cost::OpCost &op : cost->layers[i].ops)
      unfused += op.launches;
    EXPECT_LT(launches, unfused) << block.name;
  }
  // A stack that fuses elementwise chains (vllm) launches fewer kernels and
  // moves fewer bytes for the same FLOPs: GELU's Mul/Add/Tanh chain and the
  // residual adds run as one kernel each.
  cost::ExtractOptions chains = fp16;
  chains.fusedElementwise = true;
  auto fusedChains = cost::extractModelCost(firstGraph(*module), chains);
  ASSERT_TRUE(bool(fusedChains)) << llvm::toString(fusedChains.takeError());
  for (int i = 1; i <= 12; ++i) {
    const cost::LayerCost &a = fusedChains->layers[i], &b = cost->layers[i];
    double la = 0, lb = 0, ba = 0, bb = 0;
    for (const cost::OpCost &op : a.ops)
      la += op.launches, ba += op.bytesPerSample;
    for (const cost::OpCost &op : b.ops)
      lb += op.launches, bb += op.bytesPerSample;
    EXPECT_LT(la, lb) << a.name;
    EXPECT_LT(ba, bb) << a.name;
    EXPECT_NEAR(a.flopsPerSample(), b.flopsPerSample(), 1e-12 * b.flopsPerSample()) << a.name;
  }

  // For inference the head is not split (the outputs are whole logits).
  fp16.training = false;
  auto infer = cost::extractModelCost(firstGraph(*module), fp16);
  ASSERT_TRUE(bool(infer));
  EXPECT_TRUE(infer->layers.back().tensorParallelUnits.empty());

  // Without Dropout (an inference export) the masks and the dropped copy of
  // the attention probabilities are not there: 32 s h + 2 a s^2.
  const Generated &plain = model("gpt2", "gpt2-small");
  if (!plain.skip.empty())
    GTEST_SKIP() << plain.skip;
  auto module2 = importModel(plain.path, context, true);
  ASSERT_TRUE(module2);
  ASSERT_EQ(runPasses(*module2, {{"batch=1", "sequence=1024"}, false, {}}), "");
  auto cost2 = cost::extractModelCost(firstGraph(*module2), fp16);
  ASSERT_TRUE(bool(cost2)) << llvm::toString(cost2.takeError());
  EXPECT_DOUBLE_EQ(cost2->layers[1].stashBytesPerSample, 32 * s * h + 2 * a * s * s);
}

TEST(CostModel, BertBaseParametersAndLayers) {
  const Generated &g = model("bert", "bert-base");
  if (!g.skip.empty())
    GTEST_SKIP() << g.skip;
  mlir::MLIRContext context;
  auto module = importModel(g.path, context, true);
  ASSERT_TRUE(module);
  ASSERT_EQ(runPasses(*module, {{"batch=2", "sequence=128"}, false, {}}), "");
  GraphOp graph = firstGraph(*module);
  auto cost = cost::extractModelCost(graph);
  ASSERT_TRUE(bool(cost)) << llvm::toString(cost.takeError());
  EXPECT_EQ(cost->parameters, g.parameters);
  EXPECT_EQ(cost->parameters, 109482240); // BERT-base with its pooler
  EXPECT_EQ(cost->boundSamples, 2);
  ASSERT_EQ(cost->layers.size(), 14u);
  EXPECT_EQ(cost->layers[1].name, "encoder.layer.0");
  EXPECT_EQ(cost->layers[12].name, "encoder.layer.11");
  EXPECT_EQ(cost->layers.back().name, "pooler");
  // Per sample (one sequence of 128): the hidden state, and the attention
  // mask every block reads ([1, 1, 128] fp32) crosses each cut too.
  EXPECT_DOUBLE_EQ(cost->layers[1].outputBytesPerSample, 128.0 * 768 * 4 + 128 * 4);
  // ~2 x body parameters per token (the embeddings cost no FLOPs)
  double perToken = cost->forwardFlopsPerSample() / 128;
  EXPECT_NEAR(perToken / (2.0 * 85e6 + 4.0 * 12 * 128 * 768), 1.0, 0.05) << perToken;
}

TEST(CostModel, ExtractNeedsLayersAndStaticShapes) {
  mlir::MLIRContext context;
  context.loadDialect<HetDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    het.graph @g(%x: tensor<?x4xf32, #het.dims<"batch", "">>) -> (tensor<?x4xf32>) {
      %y = het.node "Relu" opset 17 (%x) {name = "r"} : (tensor<?x4xf32, #het.dims<"batch", "">>) -> tensor<?x4xf32>
      het.return %y : tensor<?x4xf32>
    })mlir", &context);
  ASSERT_TRUE(module);
  GraphOp graph = firstGraph(*module);
  auto unbound = cost::extractModelCost(graph);
  ASSERT_FALSE(bool(unbound));
  EXPECT_EQ(llvm::toString(unbound.takeError()),
            "graph @g: input #0 has no static shape (tensor<?x4xf32, #het.dims<\"batch\", "
            "\"\">>); run het-bind-shapes first");

  mlir::PassManager pm(&context);
  HetBindShapesOptions bind;
  bind.dims.push_back("batch=3");
  pm.addPass(createHetBindShapes(bind));
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  auto ungrouped = cost::extractModelCost(graph);
  ASSERT_FALSE(bool(ungrouped));
  EXPECT_EQ(llvm::toString(ungrouped.takeError()),
            "graph @g: no het.layers; run het-group-layers first");

  mlir::PassManager group(&context);
  group.addPass(createHetGroupLayers());
  ASSERT_TRUE(mlir::succeeded(group.run(*module)));
  cost::ExtractOptions options;
  options.dtype = cost::DType::FP16;
  auto cost = cost::extractModelCost(graph, options);
  ASSERT_TRUE(bool(cost)) << llvm::toString(cost.takeError());
  EXPECT_EQ(cost->boundSamples, 3);
  ASSERT_EQ(cost->layers.size(), 1u);
  EXPECT_EQ(cost->layers[0].ops[0].flopsPerSample, 4);
  EXPECT_EQ(cost->layers[0].ops[0].bytesPerSample, 16); // 4 in + 4 out, fp16
  EXPECT_EQ(cost->layers[0].outputBytesPerSample, 8);
}

TEST(CostModel, FusedAttentionBlockSplitsAndCaches) {
  mlir::MLIRContext context;
  context.loadDialect<HetDialect>();
  // q/k/v/o projections of 1 MiB each around an opset-23 Attention, one layer.
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    het.graph @g(%x: tensor<2x16x512xf32>) -> (tensor<2x16x512xf32>)
        attributes {het.layers = [{name = "block", first = 0 : i64, last = 5 : i64}]} {
      %wq = het.weight @wq at <file = "", offset = 0, length = 1048576, encoding = "raw"> : tensor<512x512xf32>
      %wk = het.weight @wk at <file = "", offset = 0, length = 1048576, encoding = "raw"> : tensor<512x512xf32>
      %wv = het.weight @wv at <file = "", offset = 0, length = 1048576, encoding = "raw"> : tensor<512x512xf32>
      %wo = het.weight @wo at <file = "", offset = 0, length = 1048576, encoding = "raw"> : tensor<512x512xf32>
      %q = het.node "MatMul" opset 23 (%x, %wq) : (tensor<2x16x512xf32>, tensor<512x512xf32>) -> tensor<2x16x512xf32>
      %k = het.node "MatMul" opset 23 (%x, %wk) : (tensor<2x16x512xf32>, tensor<512x512xf32>) -> tensor<2x16x512xf32>
      %v = het.node "MatMul" opset 23 (%x, %wv) : (tensor<2x16x512xf32>, tensor<512x512xf32>) -> tensor<2x16x512xf32>
      %a = het.node "Attention" opset 23 (%q, %k, %v) attrs {q_num_heads = 8 : i64, kv_num_heads = 8 : i64} : (tensor<2x16x512xf32>, tensor<2x16x512xf32>, tensor<2x16x512xf32>) -> tensor<2x16x512xf32>
      %o = het.node "MatMul" opset 23 (%a, %wo) : (tensor<2x16x512xf32>, tensor<512x512xf32>) -> tensor<2x16x512xf32>
      %y = het.node "Add" opset 23 (%x, %o) : (tensor<2x16x512xf32>, tensor<2x16x512xf32>) -> tensor<2x16x512xf32>
      het.return %y : tensor<2x16x512xf32>
    })mlir", &context);
  ASSERT_TRUE(module);
  auto cost = cost::extractModelCost(firstGraph(*module));
  ASSERT_TRUE(bool(cost)) << llvm::toString(cost.takeError());
  ASSERT_EQ(cost->layers.size(), 1u);
  const cost::LayerCost &layer = cost->layers[0];
  EXPECT_EQ(cost->boundSamples, 2);
  EXPECT_EQ(layer.parameters, 4 * 512 * 512);
  double hidden = 16.0 * 512 * 4;  // one sample's [16, 512] fp32
  // Attention per sample: 2*H*S*T*(D + Dv) + 9*H*S*T, H=8, S=T=16, D=64.
  EXPECT_DOUBLE_EQ(layer.ops[3].flopsPerSample, 2.0 * 8 * 16 * 16 * 128 + 9.0 * 8 * 16 * 16);
  double matmul = 2.0 * 16 * 512 * 512;
  double add = 16.0 * 512;
  double all = 4 * matmul + layer.ops[3].flopsPerSample + add;
  EXPECT_DOUBLE_EQ(layer.flopsPerSample(), all);
  // The fused Attention op does not run on head slices in the runtime: the
  // four projections are split by columns and all-gathered, the attention
  // runs whole.
  EXPECT_DOUBLE_EQ(layer.tensorParallelFraction, 4 * matmul / all);
  ASSERT_EQ(layer.tensorParallelUnits.size(), 4u);
  for (const cost::TensorParallelUnit &u : layer.tensorParallelUnits) {
    EXPECT_FALSE(u.pair);
    EXPECT_EQ(u.nodes.size(), 1u);
    EXPECT_EQ(u.nodes[0].role, cost::TensorParallelRole::AllGather);
    EXPECT_DOUBLE_EQ(u.forwardElementsPerSample, hidden / 4);
  }
  EXPECT_DOUBLE_EQ(layer.kvCacheBytesPerSample, 2 * hidden);
  EXPECT_DOUBLE_EQ(layer.outputBytesPerSample, hidden);
  // Stash: what the backward keeps: x (the projections' input, once), q, k
  // and v (the attention's inputs), a (the output projection's input); the
  // residual Add keeps nothing. All but x are split by heads. Input: x.
  EXPECT_DOUBLE_EQ(layer.stashBytesPerSample, 5 * hidden);
  EXPECT_DOUBLE_EQ(layer.stashSplitBytesPerSample, 4 * hidden);
  EXPECT_DOUBLE_EQ(cost->inputBytesPerSample, hidden);

  // Smaller weights (fp16 halves them below 1 MiB): no split.
  cost::ExtractOptions fp16;
  fp16.dtype = cost::DType::FP16;
  auto half = cost::extractModelCost(firstGraph(*module), fp16);
  ASSERT_TRUE(bool(half)) << llvm::toString(half.takeError());
  EXPECT_EQ(half->layers[0].tensorParallelFraction, 0);
  EXPECT_EQ(half->layers[0].tensorParallelAllReduceBytesPerSample, 0);
  EXPECT_DOUBLE_EQ(half->layers[0].kvCacheBytesPerSample, hidden);
  EXPECT_DOUBLE_EQ(half->layers[0].parameterBytes, 4 * 512 * 512 * 2);
}

//===----------------------------------------------------------------------===//
// Roofline and profiles
//===----------------------------------------------------------------------===//

namespace {
const cluster::DeviceType &device(llvm::StringRef name) {
  auto type = cluster::DeviceCatalog::builtin().lookup(name);
  EXPECT_TRUE(bool(type)) << llvm::toString(type.takeError());
  return **type;
}
} // namespace

TEST(CostModel, RooflineBigMatMulIsComputeBound) {
  const cluster::DeviceType &a100 = device("A100-80GB");
  // [4096 x 4096] x [4096 x 4096] in fp16: 137 GFLOP over 96 MiB.
  cost::OpCost mm;
  mm.opType = "MatMul";
  mm.matrixEngine = true;
  double n = 4096;
  mm.flopsPerSample = 2 * n * n * n;
  mm.bytesPerSample = 2 * n * n * 2;
  mm.weightBytes = n * n * 2;
  cost::Efficiency eff; // GPU defaults
  double compute = mm.flopsPerSample / (312e12 * eff.matrix);
  double memory = (mm.bytesPerSample + mm.weightBytes) / (2039e9 * eff.memory);
  ASSERT_GT(compute, 10 * memory);
  EXPECT_NEAR(cost::opTime(mm, 1, a100, cost::DType::FP16, eff),
              eff.launchSeconds + compute, 1e-12);
  // fp32 runs on the FP32 units, tf32 on the tensor cores: 8x apart.
  EXPECT_NEAR(cost::opTime(mm, 1, a100, cost::DType::FP32, eff) - eff.launchSeconds,
              mm.flopsPerSample / (19.5e12 * eff.matrix), 1e-9);
  EXPECT_NEAR(cost::opTime(mm, 1, a100, cost::DType::TF32, eff) - eff.launchSeconds,
              mm.flopsPerSample / (156e12 * eff.matrix), 1e-9);
}

TEST(CostModel, RooflineElementwiseIsMemoryBound) {
  const cluster::DeviceType &a100 = device("A100-80GB");
  // Add of two [64M] fp16 tensors: 1 FLOP per 6 bytes.
  cost::OpCost add;
  add.opType = "Add";
  double n = 64e6;
  add.flopsPerSample = n;
  add.bytesPerSample = 3 * n * 2;
  cost::Efficiency eff;
  double memory = add.bytesPerSample / (2039e9 * eff.memory);
  // Vector ops use the FP32 units (x2 for packed fp16), never tensor cores.
  double compute = add.flopsPerSample / (2 * 19.5e12 * eff.vector);
  ASSERT_GT(memory, 5 * compute);
  EXPECT_NEAR(cost::opTime(add, 1, a100, cost::DType::FP16, eff),
              eff.launchSeconds + memory, 1e-12);
  // Per-sample costs scale with the samples, weights do not.
  add.weightBytes = 1e9;
  EXPECT_NEAR(cost::opTime(add, 2, a100, cost::DType::FP16, eff),
              eff.launchSeconds + (2 * add.bytesPerSample + 1e9) / (2039e9 * eff.memory),
              1e-12);
  // A free op costs nothing.
  cost::OpCost view;
  view.launches = 0;
  EXPECT_EQ(cost::opTime(view, 8, a100, cost::DType::FP16, eff), 0);
}

TEST(CostModel, DefaultEfficiencyFollowsTheDeviceKind) {
  const cluster::DeviceType &cpu = device("CPU");
  cost::Efficiency eff = cost::defaultEfficiency(cpu);
  EXPECT_EQ(eff.matrix, 0.5);
  EXPECT_EQ(eff.memory, 0.6);
  cost::OpCost add;
  add.flopsPerSample = 1e6;
  add.bytesPerSample = 1.2e7;
  // Without an Efficiency, the device's defaults apply.
  EXPECT_DOUBLE_EQ(cost::opTime(add, 1, cpu, cost::DType::FP32),
                   eff.launchSeconds + 1.2e7 / (614.4e9 * 0.6));
  cost::LayerCost layer;
  layer.ops = {add, add};
  layer.parameters = 1000;
  EXPECT_DOUBLE_EQ(cost::layerForwardTime(layer, 1, cpu, cost::DType::FP32),
                   2 * cost::opTime(add, 1, cpu, cost::DType::FP32));
  EXPECT_DOUBLE_EQ(cost::layerStepTime(layer, 1, cpu, cost::DType::FP32, cost::Mode::Train, eff),
                   3 * cost::layerForwardTime(layer, 1, cpu, cost::DType::FP32, eff));
  EXPECT_EQ(cost::modelStateBytes(layer, cost::Mode::Train, cost::DType::FP16), 16000);
  EXPECT_EQ(cost::modelStateBytes(layer, cost::Mode::Infer, cost::DType::FP16), 2000);
  // Per optimizer (0, 1, 2 fp32 buffers): fp16 with its fp32 master copy
  // 8, 12, 16 bytes per parameter; fp32 (the weights are the master) 8, 12, 16.
  for (int buffers : {0, 1, 2}) {
    EXPECT_EQ(cost::modelStateBytes(layer, cost::Mode::Train, cost::DType::FP16, buffers), 1000 * (8 + 4 * buffers));
    EXPECT_EQ(cost::modelStateBytes(layer, cost::Mode::Train, cost::DType::FP32, buffers), 1000 * (8 + 4 * buffers));
  }
  EXPECT_EQ(cost::trainingBytesPerParam(2, cost::DType::FP16), cost::kAdamBytesPerParam);
}

TEST(CostModel, ProfileEntryOverridesRoofline) {
  auto profile = cost::Profile::parse(R"({
      "device": "a100 80gb", "dtype": "fp16",
      "ops": {"h.0.attn.qkv": 2.5e-6,
              "h.0.mlp.c_fc": {"fixed": 4e-6, "per_sample": 1e-6}}})",
                                      "prof.json");
  ASSERT_TRUE(bool(profile)) << llvm::toString(profile.takeError());
  const cluster::DeviceType &a100 = device("A100-SXM-80GB");
  const cluster::DeviceType &t4 = device("T4");
  EXPECT_TRUE(profile->appliesTo(a100, cost::DType::FP16));
  EXPECT_FALSE(profile->appliesTo(a100, cost::DType::BF16));
  EXPECT_FALSE(profile->appliesTo(t4, cost::DType::FP16));

  cost::OpCost qkv;
  qkv.name = "h.0.attn.qkv";
  qkv.matrixEngine = true;
  qkv.flopsPerSample = 1e9;
  cost::OpCost fc = qkv;
  fc.name = "h.0.mlp.c_fc";
  cost::OpCost other = qkv;
  other.name = "h.0.attn.c_proj";
  std::vector<cost::Profile> profiles = {*profile};
  cost::Efficiency eff;
  EXPECT_DOUBLE_EQ(cost::opTime(qkv, 8, a100, cost::DType::FP16, eff, profiles), 8 * 2.5e-6);
  EXPECT_DOUBLE_EQ(cost::opTime(fc, 8, a100, cost::DType::FP16, eff, profiles), 4e-6 + 8e-6);
  // Not profiled, another device, another format: the roofline.
  EXPECT_DOUBLE_EQ(cost::opTime(other, 8, a100, cost::DType::FP16, eff, profiles),
                   cost::opTime(other, 8, a100, cost::DType::FP16, eff));
  EXPECT_DOUBLE_EQ(cost::opTime(qkv, 8, t4, cost::DType::FP16, eff, profiles),
                   cost::opTime(qkv, 8, t4, cost::DType::FP16, eff));
  EXPECT_DOUBLE_EQ(cost::opTime(qkv, 8, a100, cost::DType::BF16, eff, profiles),
                   cost::opTime(qkv, 8, a100, cost::DType::BF16, eff));
  cost::LayerCost layer;
  layer.ops = {qkv, fc, other};
  EXPECT_DOUBLE_EQ(cost::layerForwardTime(layer, 8, a100, cost::DType::FP16, eff, profiles),
                   8 * 2.5e-6 + 12e-6 + cost::opTime(other, 8, a100, cost::DType::FP16, eff));

  // What the runtime writes reads back the same.
  std::string text;
  llvm::raw_string_ostream os(text);
  os << profile->toJSON();
  auto again = cost::Profile::parse(text, "again.json");
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->ops.size(), 2u);
  EXPECT_EQ(again->find("h.0.mlp.c_fc")->fixedSeconds, 4e-6);
  EXPECT_EQ(again->dtype, cost::DType::FP16);

  // Measured rank speeds (hetplan run --profile) read back too.
  profile->rankSpeeds = {{0, 1.0}, {3, 0.25}};
  text.clear();
  os << profile->toJSON();
  auto ranked = cost::Profile::parse(text, "ranked.json");
  ASSERT_TRUE(bool(ranked)) << llvm::toString(ranked.takeError());
  EXPECT_EQ(ranked->rankSpeeds, profile->rankSpeeds);
}

TEST(CostModel, ProfileErrorsSayWhatIsWrong) {
  auto check = [](llvm::StringRef json, llvm::StringRef message) {
    auto p = cost::Profile::parse(json, "p.json");
    ASSERT_FALSE(bool(p)) << json.str();
    EXPECT_EQ(llvm::toString(p.takeError()), message.str());
  };
  check("[]", "p.json: expected a JSON object {\"device\", \"dtype\", \"ops\"}");
  check(R"({"dtype": "fp16", "ops": {}})", "p.json: missing \"device\" (a device catalog name)");
  check(R"({"device": "T4", "dtype": "fp12", "ops": {}})",
        "p.json: unknown dtype 'fp12' (expected fp32, tf32, fp16, bf16 or int8)");
  check(R"({"device": "T4", "dtype": "fp16", "ops": {}, "batch": 8})",
        "p.json: unknown field 'batch' (expected device, dtype, ops, ranks)");
  check(R"({"device": "T4", "dtype": "fp16", "ops": {}, "ranks": [1]})",
        "p.json: \"ranks\" must be an object: rank -> measured speed");
  check(R"({"device": "T4", "dtype": "fp16", "ops": {}, "ranks": {"two": 1}})",
        "p.json: \"ranks\": 'two' is not a rank (0, 1, 2, ...)");
  check(R"({"device": "T4", "dtype": "fp16", "ops": {}, "ranks": {"2": 0}})",
        "p.json: \"ranks\": rank 2: the speed must be a positive number");
  check(R"({"device": "T4", "dtype": "fp16", "ops": {"a": -1}})", "p.json: op 'a': negative time");
  check(R"({"device": "T4", "dtype": "fp16", "ops": {"a": {"fixd": 1}}})",
        "p.json: op 'a': unknown field 'fixd' (expected fixed, per_sample)");
}

//===----------------------------------------------------------------------===//
// Calibration (docs/cost-model.md, "Calibration")
//===----------------------------------------------------------------------===//

TEST(CostModel, SmallMatMulsReachLessOfThePeak) {
  const cluster::DeviceType &a100 = device("A100-80GB");
  cost::Efficiency eff = cost::defaultEfficiency(a100);
  eff.matrixHalfFlops = 1e9;  // a 1-GFLOP product reaches half of `matrix`
  cost::OpCost mm;
  mm.matrixEngine = true;
  mm.flopsPerSample = 1e9;
  auto rate = [&](double samples) {
    return mm.flops(samples) /
           (cost::opTime(mm, samples, a100, cost::DType::FP16, eff) - eff.launchSeconds);
  };
  EXPECT_NEAR(rate(1), 312e12 * eff.matrix * 0.5, 1e6);
  EXPECT_LT(rate(1), rate(16));
  EXPECT_NEAR(rate(1000), 312e12 * eff.matrix * 1000.0 / 1001.0, 1e9);
  // Without a half-size (the default), size does not matter.
  eff.matrixHalfFlops = 0;
  EXPECT_NEAR(rate(1), rate(16), 1.0);
}

TEST(CostModel, BatchedProductsPayTheSizeCurvePerProduct) {
  // Attention's batched MatMul: P products of W / P FLOPs each; the size
  // curve prices one product, so the call takes (W + P * W_half) / rate.
  const cluster::DeviceType &a100 = device("A100-80GB");
  cost::Efficiency eff = cost::defaultEfficiency(a100);
  eff.matrixHalfFlops = 1e6;
  cost::OpCost mm;
  mm.matrixEngine = true;
  mm.flopsPerSample = 32e6;
  double rate = 312e12 * eff.matrix;
  double one = cost::opTime(mm, 2, a100, cost::DType::FP16, eff) - eff.launchSeconds;
  EXPECT_NEAR(one, (64e6 + 1e6) / rate, 1e-12);
  mm.productsPerSample = 16; // 32 products of 2 MFLOP for 2 samples
  double batched = cost::opTime(mm, 2, a100, cost::DType::FP16, eff) - eff.launchSeconds;
  EXPECT_NEAR(batched, (64e6 + 32 * 1e6) / rate, 1e-12);
  // Without a size curve the split does not matter.
  eff.matrixHalfFlops = 0;
  EXPECT_DOUBLE_EQ(cost::opTime(mm, 2, a100, cost::DType::FP16, eff),
                   cost::opTime(cost::OpCost{mm.name, mm.opType, mm.flopsPerSample, 0, 0, true}, 2, a100,
                                cost::DType::FP16, eff));
}

TEST(CostModel, CatalogCalibrationReplacesTheDefaults) {
  // V100 and T4 carry a matrix share fitted to AMP's measured per-layer
  // times; their host overheads are the deepspeed-2021 stack's, not theirs.
  const cluster::DeviceType &v100 = device("V100-SXM2-16GB");
  const cluster::DeviceType &t4 = device("T4");
  ASSERT_TRUE(v100.achieved.matrix && t4.achieved.matrix);
  EXPECT_FALSE(v100.achieved.kernelUs || t4.achieved.kernelUs);
  EXPECT_FALSE(v100.achieved.source.empty());
  const cluster::Stack *ds = cluster::DeviceCatalog::builtin().findStack("deepspeed-2021");
  ASSERT_TRUE(ds);
  cost::Efficiency ev = cost::efficiency(v100, *ds);
  EXPECT_DOUBLE_EQ(ev.matrix, *v100.achieved.matrix);
  EXPECT_DOUBLE_EQ(ev.launchSeconds, 61e-6);
  EXPECT_DOUBLE_EQ(ev.microBatchSeconds, 5e-3);
  EXPECT_DOUBLE_EQ(ev.memory, 0.8);  // not calibrated: the default stays
  // Every GPU pays the stack's host overhead and keeps the documented
  // defaults for what was not measured on it.
  cost::Efficiency ea = cost::efficiency(device("A100-80GB"), *ds);
  EXPECT_EQ(ea.matrix, 0.6);
  EXPECT_DOUBLE_EQ(ea.launchSeconds, 61e-6);
  // The default stack is hetplan's runtime: 4 us per kernel, no engine.
  EXPECT_DOUBLE_EQ(cost::defaultEfficiency(t4).launchSeconds, 4e-6);
  EXPECT_DOUBLE_EQ(cost::defaultEfficiency(t4).microBatchSeconds, 0);
  // The overhead term is per kernel call: it is paid at every call and does
  // not grow with the samples.
  cost::OpCost add;
  add.bytesPerSample = 1e3;
  double one = cost::opTime(add, 1, t4, cost::DType::FP16);
  double two = cost::opTime(add, 2, t4, cost::DType::FP16);
  EXPECT_NEAR(one, 4e-6 + 1e3 / (320e9 * 0.8), 1e-12);
  EXPECT_NEAR(two - one, 1e3 / (320e9 * 0.8), 1e-12);
  // What the fit says about the two cards: a T4 is slower than a V100 on
  // the same large product, by less than their peaks' ratio (125 / 65).
  cost::OpCost mm;
  mm.matrixEngine = true;
  mm.flopsPerSample = 1e11;
  double tv = cost::opTime(mm, 1, v100, cost::DType::FP16);
  double tt = cost::opTime(mm, 1, t4, cost::DType::FP16);
  EXPECT_GT(tt, tv);
  EXPECT_LT(tt / tv, 125.0 / 65.0);
}

/// A one-device catalog (GPU "X1") whose entry has `achieved: ACHIEVED`.
llvm::Expected<cluster::DeviceCatalog> catalogWithAchieved(const std::string &achieved) {
  return cluster::DeviceCatalog::parse(R"(version: 1
devices:
  - name: X1
    aliases: []
    vendor: v
    kind: gpu
    memory_gib: 16
    memory_bandwidth_gbs: 300
    peak_tflops: {fp32: 8}
    intra_node_link: {kind: pcie3, bandwidth_gbs: 16}
    pcie: {generation: 3, bandwidth_gbs: 16}
    tdp_watts: 70
    price_per_hour_usd: null
    sources: ["s"]
    achieved: )" + achieved + "\n", "c.yaml");
}

TEST(CostModel, CatalogAchievedBlockIsChecked) {
  auto bad = catalogWithAchieved("{matrix: 1.5}");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("share of the peak"), std::string::npos);
}

TEST(CostModel, CatalogMicroBatchOverheadIsRead) {
  // A device's own host figures (a measured override) win over the stack's.
  auto cat = catalogWithAchieved("{kernel_us: 40, micro_batch_us: 3000}");
  ASSERT_TRUE(bool(cat)) << llvm::toString(cat.takeError());
  const cluster::DeviceType *x = cat->find("X1");
  ASSERT_TRUE(x);
  const cluster::Stack *ds = cluster::DeviceCatalog::builtin().findStack("deepspeed-2021");
  ASSERT_TRUE(ds);
  for (cost::Efficiency eff : {cost::defaultEfficiency(*x), cost::efficiency(*x, *ds)}) {
    EXPECT_DOUBLE_EQ(eff.launchSeconds, 40e-6);
    EXPECT_DOUBLE_EQ(eff.microBatchSeconds, 3e-3);
  }
  EXPECT_EQ(cost::defaultEfficiency(device("A100-80GB")).microBatchSeconds, 0);
}

TEST(CostModel, TensorParallelRanksRunSmallerKernelsAndPayEveryLaunch) {
  const cluster::DeviceType &a100 = device("A100-80GB");
  cost::Efficiency eff = cost::defaultEfficiency(a100);
  eff.launchSeconds = 50e-6;
  eff.matrixHalfFlops = 1e10;
  cost::LayerCost layer;
  cost::OpCost mm;
  mm.matrixEngine = true;
  mm.flopsPerSample = 1e10;
  mm.bytesPerSample = 1e6;
  mm.weightBytes = 1e7;
  mm.tensorParallelSplit = true;
  cost::OpCost ln;
  ln.flopsPerSample = 1e6;
  ln.bytesPerSample = 1e7;
  layer.ops = {mm, ln};
  auto time = [&](int tp) {
    return cost::layerForwardTime(layer, 1, a100, cost::DType::FP16, eff, {}, tp);
  };
  cost::OpCost half = mm;
  half.flopsPerSample /= 2;
  half.bytesPerSample /= 2;
  half.weightBytes /= 2;
  EXPECT_DOUBLE_EQ(time(1), cost::opTime(mm, 1, a100, cost::DType::FP16, eff) +
                                cost::opTime(ln, 1, a100, cost::DType::FP16, eff));
  EXPECT_DOUBLE_EQ(time(2), cost::opTime(half, 1, a100, cost::DType::FP16, eff) +
                                cost::opTime(ln, 1, a100, cost::DType::FP16, eff));
  // The split product is smaller, so it runs at a lower share of the peak:
  // half the FLOPs take more than half the compute time; launches stay.
  double computeFull = cost::opTime(mm, 1, a100, cost::DType::FP16, eff) - eff.launchSeconds;
  double computeHalf = cost::opTime(half, 1, a100, cost::DType::FP16, eff) - eff.launchSeconds;
  EXPECT_GT(computeHalf, computeFull / 2);
  EXPECT_GT(time(8), 2 * eff.launchSeconds);
}
