//===- ModelPipeline.cpp - from a model file to its layer costs -----------===//

#include "passes/planner/ModelPipeline.h"

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/OnnxImporter.h"
#include "passes/Passes.h"
#include "passes/cost/ExtractModelCost.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace hetplan::planner {

namespace {

/// Symbolic dims of the graph inputs, in first-seen order.
std::vector<std::pair<std::string, std::string>> symbolicDims(het::GraphOp graph) {
  std::vector<std::pair<std::string, std::string>> dims;  // (dim, input)
  for (auto [i, type] : llvm::enumerate(graph.getArgumentTypes())) {
    auto ranked = dyn_cast<RankedTensorType>(type);
    auto names = ranked ? dyn_cast_or_null<het::DimsAttr>(ranked.getEncoding()) : nullptr;
    if (!names)
      continue;
    std::string input = "#" + std::to_string(i);
    if (auto attrs = graph.getArgAttrsAttr())
      if (auto d = dyn_cast<DictionaryAttr>(attrs[i]))
        if (auto n = d.getAs<StringAttr>("het.name"))
          input = n.str();
    for (StringAttr n : names.getNames())
      if (!n.empty() && llvm::none_of(dims, [&](auto &p) { return p.first == n.str(); }))
        dims.push_back({n.str(), input});
  }
  return dims;
}

bool looksLikeSequence(llvm::StringRef name) {
  std::string lower = name.lower();
  llvm::StringRef l(lower);
  return l.contains("seq") || l.contains("len") || l.contains("token") || l == "s" ||
         l == "t" || l.contains("time");
}

constexpr int64_t kProbeBatch = 9973; // a prime no model uses as a size

std::vector<IoShape> ioShapes(TypeRange types, ArrayAttr attrs, DenseI64ArrayAttr axes) {
  std::vector<IoShape> out;
  for (auto [i, type] : llvm::enumerate(types)) {
    IoShape io;
    io.name = "#" + std::to_string(i);
    if (attrs && i < attrs.size())
      if (auto d = dyn_cast<DictionaryAttr>(attrs[i]))
        if (auto n = d.getAs<StringAttr>("het.name"))
          io.name = n.str();
    if (auto ranked = dyn_cast<RankedTensorType>(type))
      io.dims.assign(ranked.getShape().begin(), ranked.getShape().end());
    io.batchAxis = axes && i < size_t(axes.size()) ? axes[i] : -1;
    out.push_back(std::move(io));
  }
  return out;
}

/// Binds `probe` (the unbound module) with the batch at kProbeBatch, runs
/// het-check-samples and records the inputs' and outputs' batch axes and
/// whether the batch may be split. `bound` is the graph bound at one sample.
void checkSamples(ModuleOp probe, het::GraphOp bound,
                                        const std::vector<std::string> &dims,
                                        const std::vector<std::string> &inputShapes,
                                        CostedModel &result) {
  std::string batchName;
  for (auto &[name, value] : result.boundDims)
    if (llvm::is_contained(dims, name + "=1"))
      batchName = name;
  std::vector<std::string> probeDims, probeShapes;
  for (const std::string &d : dims)
    probeDims.push_back(!batchName.empty() && d == batchName + "=1"
                            ? batchName + "=" + std::to_string(kProbeBatch)
                            : d);
  for (const std::string &s : inputShapes) {
    auto [name, value] = llvm::StringRef(s).split('=');
    auto [lead, rest] = value.split('x');
    probeShapes.push_back((name + "=" + std::to_string(kProbeBatch) +
                           (rest.empty() ? "" : "x" + rest)).str());
  }
  PassManager pm(probe.getContext());
  het::HetBindShapesOptions bindOptions;
  bindOptions.dims.assign(probeDims.begin(), probeDims.end());
  bindOptions.inputShapes.assign(probeShapes.begin(), probeShapes.end());
  pm.addPass(het::createHetBindShapes(bindOptions));
  het::HetCheckSamplesOptions checkOptions;
  checkOptions.batch = kProbeBatch;
  pm.addPass(het::createHetCheckSamples(checkOptions));
  std::string diag;
  ScopedDiagnosticHandler handler(probe.getContext(), [&](Diagnostic &d) {
    if (diag.empty())
      diag = d.str();
    return success();
  });
  auto graphs = llvm::to_vector(probe.getOps<het::GraphOp>());
  DenseI64ArrayAttr inAxes, outAxes;
  if (failed(pm.run(probe)) || graphs.size() != 1) {
    // The graph does not bind at another batch size (a Reshape to a fixed
    // batch of one, say): whatever it does, it cannot be split.
    result.wholeBatchReason =
        "the graph does not bind with another batch size (" + diag + ")";
  } else {
    het::GraphOp g = graphs.front();
    if (auto axes = g->getAttrOfType<DictionaryAttr>("het.batch_axes")) {
      inAxes = axes.getAs<DenseI64ArrayAttr>("inputs");
      outAxes = axes.getAs<DenseI64ArrayAttr>("outputs");
    }
    if (auto mixed = g->getAttrOfType<StringAttr>("het.samples_mixed"))
      result.wholeBatchReason = "samples are combined at " + mixed.str();
  }
  result.inputs = ioShapes(bound.getArgumentTypes(), bound.getArgAttrsAttr(), inAxes);
  result.outputs = ioShapes(bound.getResultTypes(), bound.getResAttrsAttr(), outAxes);
  if (result.wholeBatchReason.empty())
    for (const auto *list : {&result.inputs, &result.outputs})
      for (const IoShape &io : *list)
        if (io.batchAxis > 0 && result.wholeBatchReason.empty()) {
          result.wholeBatchReason = "'" + io.name + "' carries the batch on axis " +
                                    std::to_string(io.batchAxis) + ", not 0";
          break;
        }
  if (result.wholeBatchReason.empty()) {
    bool anyBatched = false;
    for (const IoShape &io : result.inputs)
      anyBatched |= io.batchAxis == 0;
    for (const IoShape &io : result.outputs)
      if (anyBatched && io.batchAxis < 0) {
        result.wholeBatchReason = "output '" + io.name + "' has no batch dim";
        break;
      }
  }
}

} // namespace

llvm::Expected<CostedModel> costModelFile(const PipelineOptions &o) {
  const std::string &path = o.path;
  auto err = [](const llvm::Twine &message) -> llvm::Expected<CostedModel> {
    return llvm::createStringError(message.str());
  };
  CostedModel result;
  MLIRContext context;
  context.loadDialect<het::HetDialect>();
  std::string error;
  OwningOpRef<ModuleOp> module;
  if (llvm::StringRef(path).ends_with(".mlir")) {
    llvm::SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    module = parseSourceFile<ModuleOp>(path, sourceMgr, &context);
    if (!module)
      return err(path + ": not valid het IR (see above)");
  } else {
    import::ImportOptions io;
    io.allowMissingWeights = o.allowMissingWeights;
    module = import::importOnnxFile(path, &context, io, error);
    if (!module)
      return err(error);
  }
  auto graphs = llvm::to_vector(module->getOps<het::GraphOp>());
  if (graphs.size() != 1)
    return err(path + ": expected one het.graph, found " + std::to_string(graphs.size()));
  het::GraphOp graph = graphs.front();

  // Bind the batch (one sample: costs are per sample), the sequence and any
  // shapes given; every other symbolic dim must be bound by the user.
  std::vector<std::string> dims, inputShapes;
  for (const std::string &entry : o.shapes) {
    // The leading dim of a shape is the batch: costs are per sample, so it
    // is bound to 1 and must agree with --batch.
    auto [name, value] = llvm::StringRef(entry).split('=');
    auto [lead, rest] = value.split('x');
    int64_t b;
    if (name.empty() || lead.getAsInteger(10, b) || b <= 0)
      return err("--shape '" + entry + "': expected NAME=D0xD1x... (e.g. x=8x3x640x640)");
    if (b != o.batch)
      return err("--shape '" + entry + "' has batch " + std::to_string(b) +
                 " but --batch is " + std::to_string(o.batch));
    inputShapes.push_back((name + "=1" + (rest.empty() ? "" : "x" + rest)).str());
  }
  std::map<std::string, int64_t> &bound = result.boundDims;
  auto symbolic = symbolicDims(graph);
  std::vector<std::string> unbound;
  for (auto [i, entry] : llvm::enumerate(symbolic)) {
    auto &[name, input] = entry;
    bool shaped = llvm::any_of(o.shapes, [&, in = input](const std::string &s) {
      return llvm::StringRef(s).starts_with(in + "=");
    });
    if (shaped)
      continue;
    if (i == 0 && !looksLikeSequence(name)) {
      dims.push_back(name + "=1");
      bound[name] = o.batch;
    } else if (looksLikeSequence(name) && o.sequence > 0) {
      dims.push_back(name + "=" + std::to_string(o.sequence));
      bound[name] = o.sequence;
    } else {
      unbound.push_back(name + " (of input '" + input + "')");
    }
  }
  if (!unbound.empty())
    return err(path + ": symbolic dims " + llvm::join(unbound, ", ") +
                " need sizes: give --seq L for a sequence dim or --shape NAME=D0xD1x... "
                "with a leading 1 for the batch");

  // The same binding with the batch at an unusual size tells whether the
  // batch may be split and where each input and output carries it.
  OwningOpRef<ModuleOp> probe = module->clone();

  PassManager pm(&context);
  het::HetBindShapesOptions bindOptions;
  bindOptions.dims.assign(dims.begin(), dims.end());
  bindOptions.inputShapes.assign(inputShapes.begin(), inputShapes.end());
  bindOptions.requireStatic = true;
  pm.addPass(het::createHetBindShapes(bindOptions));
  pm.addPass(het::createHetGroupLayers());
  {
    std::string diag;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
      if (diag.empty()) {
        llvm::raw_string_ostream os(diag);
        os << d.getLocation() << ": " << d.str();
      }
      return success();
    });
    if (failed(pm.run(*module)))
      return err(path + ": " + diag);
  }
  checkSamples(*probe, graph, dims, inputShapes, result);

  cost::ExtractOptions extract;
  extract.dtype = o.dtype;
  extract.samples = 1;  // the batch dim was bound to one sample
  auto modelCost = cost::extractModelCost(graph, extract);
  if (!modelCost)
    return err(path + ": " + llvm::toString(modelCost.takeError()));

  result.cost = std::move(*modelCost);
  return result;
}

} // namespace hetplan::planner
