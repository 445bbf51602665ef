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

#include <set>

using namespace mlir;

namespace hetplan::planner {

namespace {

struct InputInfo {
  std::string name;
  RankedTensorType type;             // null for unranked / non-tensor inputs
  std::vector<std::string> dimNames; // "" where a dim has no name
};

std::vector<InputInfo> graphInputs(het::GraphOp graph) {
  std::vector<InputInfo> inputs;
  for (auto [i, type] : llvm::enumerate(graph.getArgumentTypes())) {
    InputInfo info;
    info.name = "#" + std::to_string(i);
    if (auto attrs = graph.getArgAttrsAttr())
      if (auto d = dyn_cast<DictionaryAttr>(attrs[i]))
        if (auto n = d.getAs<StringAttr>("het.name"))
          info.name = n.str();
    info.type = dyn_cast<RankedTensorType>(type);
    if (info.type) {
      info.dimNames.assign(info.type.getRank(), "");
      if (auto names = dyn_cast_or_null<het::DimsAttr>(info.type.getEncoding()))
        for (auto [k, n] : llvm::enumerate(names.getNames()))
          info.dimNames[k] = n.str();
    }
    inputs.push_back(std::move(info));
  }
  return inputs;
}

/// Every symbolic dim name the graph's types mention.
std::set<std::string> allDimNames(het::GraphOp graph) {
  std::set<std::string> names;
  auto note = [&](Type type) {
    if (auto ranked = dyn_cast<RankedTensorType>(type))
      if (auto dims = dyn_cast_or_null<het::DimsAttr>(ranked.getEncoding()))
        for (StringAttr n : dims.getNames())
          if (!n.empty())
            names.insert(n.str());
  };
  for (Type t : graph.getArgumentTypes())
    note(t);
  for (Type t : graph.getResultTypes())
    note(t);
  graph.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      note(t);
  });
  return names;
}

std::string lowered(llvm::StringRef name) { return name.lower(); }

bool looksLikeBatch(llvm::StringRef name) {
  std::string l = lowered(name);
  return llvm::StringRef(l).contains("batch") || l == "n" || l == "b" || l == "bs" ||
         l == "bsz";
}

bool looksLikeSequence(llvm::StringRef name) {
  std::string lower = lowered(name);
  llvm::StringRef l(lower);
  return l.contains("seq") || l.contains("len") || l.contains("token") || l == "s" ||
         l == "t" || l.contains("time");
}

/// A length that is not the sequence being processed: a KV cache's, a
/// total, a maximum, or an expression over dims.
bool qualifiedLength(llvm::StringRef name) {
  std::string lower = lowered(name);
  llvm::StringRef l(lower);
  for (const char *q : {"past", "total", "cache", "present", "prev", "max", "kv"})
    if (l.contains(q))
      return true;
  return l.contains('+') || l.contains('-') || l.contains('*') || l.contains(' ');
}

std::optional<std::vector<int64_t>> parseShape(llvm::StringRef text) {
  std::vector<int64_t> dims;
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, 'x');
  for (llvm::StringRef p : parts) {
    int64_t d;
    if (p.getAsInteger(10, d) || d < 0)
      return std::nullopt;
    dims.push_back(d);
  }
  return dims;
}

std::string shapeText(const InputInfo &in) {
  std::string out = "[";
  for (int64_t k = 0; k < in.type.getRank(); ++k) {
    if (k)
      out += " x ";
    if (!in.dimNames[k].empty())
      out += in.dimNames[k];
    else if (ShapedType::isDynamic(in.type.getDimSize(k)))
      out += "?";
    else
      out += std::to_string(in.type.getDimSize(k));
  }
  return out + "]";
}

/// Where a diagnostic is, in the user's terms: "node 'name'" for a node of
/// the model, "file:line" for IR text; never MLIR's raw loc(...) syntax.
std::string describeLocation(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return "node '" + name.getName().str() + "'";
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return file.getLine() > 0 ? (file.getFilename().str() + ":" + std::to_string(file.getLine()))
                              : file.getFilename().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location part : fused.getLocations())
      if (std::string d = describeLocation(part); !d.empty()) return d;
  if (auto call = dyn_cast<CallSiteLoc>(loc)) return describeLocation(call.getCallee());
  return "";
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
/// Returns why the model cannot be planned ("" when it can).
std::string checkSamples(ModuleOp probe, het::GraphOp bound, const std::vector<std::string> &probeDims,
                  const std::vector<std::string> &probeShapes,
                  const std::vector<std::string> &inputValues, CostedModel &result) {
  PassManager pm(probe.getContext());
  het::HetBindShapesOptions bindOptions;
  bindOptions.dims.assign(probeDims.begin(), probeDims.end());
  bindOptions.inputShapes.assign(probeShapes.begin(), probeShapes.end());
  bindOptions.inputValues.assign(inputValues.begin(), inputValues.end());
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
  // A value whose rank changes with the batch (a Squeeze without axes of
  // the batch dim: found by the compile fuzzer) has no shape per sample.
  for (const auto *list : {&result.inputs, &result.outputs})
    for (const IoShape &io : *list)
      if (io.batchAxis >= 0 && size_t(io.batchAxis) >= io.dims.size())
        return "'" + io.name + "' carries the batch on axis " + std::to_string(io.batchAxis) +
               " at other batch sizes but has rank " + std::to_string(io.dims.size()) +
               " at one sample (its rank changes with the batch, e.g. a Squeeze without axes of the batch "
               "dim); give the Squeeze its axes";
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
    // Every input dim fixed (a streaming model exported at batch 1 with its
    // state [2, 1, 128]): nothing to split; it runs whole.
    if (!anyBatched) {
      result.wholeBatchReason = "no input has a batch dim (the model's dims are fixed)";
      return "";
    }
    for (const IoShape &io : result.outputs)
      if (anyBatched && io.batchAxis < 0) {
        result.wholeBatchReason = "output '" + io.name + "' has no batch dim";
        break;
      }
  }
  return "";
}

/// The sizes `costModelFile` gives the graph's symbolic dims, gathered flag
/// by flag (ModelPipeline.h gives the rules). Each step returns the first
/// error in the user's terms.
struct Binder {
  Binder(const PipelineOptions &o, het::GraphOp graph, CostedModel &result)
      : o(o), inputs(graphInputs(graph)), known(allDimNames(graph)),
        bound(result.boundDims), warnings(result.warnings) {}

  const PipelineOptions &o;
  std::vector<InputInfo> inputs;
  std::set<std::string> known;
  std::map<std::string, std::optional<int64_t>> declaredAxis;
  std::set<std::string> batchNames;
  std::map<std::string, int64_t> &bound;  // as the plan records them
  std::map<std::string, int64_t> bindTo;  // what het-bind-shapes gets
  std::vector<std::string> inputShapes, probeShapes; // probe: the batch at kProbeBatch
  std::vector<std::string> inputValues;              // --value, as het-bind-shapes takes them
  std::map<std::string, int64_t> values;
  std::set<std::string> shaped;
  std::string sequenceName, sequenceInput;
  std::vector<std::string> &warnings;

  static llvm::Error fail(const llvm::Twine &message) {
    return llvm::createStringError(message.str());
  }

  const InputInfo *findInput(llvm::StringRef name) const {
    for (const InputInfo &in : inputs)
      if (in.name == name)
        return &in;
    return nullptr;
  }
  std::string inputList() const {
    std::vector<std::string> names;
    for (const InputInfo &in : inputs)
      names.push_back("'" + in.name + "'");
    return llvm::join(names, ", ");
  }
  std::string dimList() const {
    return known.empty() ? std::string("none")
                         : llvm::join(std::vector<std::string>(known.begin(), known.end()), ", ");
  }

  /// --batch-axis INPUT=AXIS|none
  llvm::Error declareBatchAxes() {
    for (const std::string &entry : o.batchAxes) {
      auto [name, value] = llvm::StringRef(entry).split('=');
      const InputInfo *in = findInput(name);
      if (name.empty() || value.empty())
        return fail("--batch-axis '" + entry + "': expected INPUT=AXIS (e.g. h0=1) or INPUT=none");
      if (!in)
        return fail("--batch-axis '" + entry + "': the model has no input '" + name.str() +
                    "' (its inputs: " + inputList() + ")");
      if (value == "none") {
        declaredAxis[name.str()] = std::nullopt;
        continue;
      }
      int64_t axis;
      int64_t rank = in->type ? in->type.getRank() : 0;
      if (value.getAsInteger(10, axis) || axis < -rank || axis >= rank)
        return fail("--batch-axis '" + entry + "': input '" + name.str() + "' has rank " +
                    std::to_string(rank) + "; the axis must be in [" + std::to_string(-rank) +
                    ", " + std::to_string(rank) + ") or none");
      declaredAxis[name.str()] = axis < 0 ? axis + rank : axis;
    }
    return llvm::Error::success();
  }

  /// The batch dim names, bound at one sample (costs are per sample).
  void bindBatch() {
    for (auto &[input, axis] : declaredAxis)
      if (axis)
        if (const std::string &n = findInput(input)->dimNames[*axis]; !n.empty())
          batchNames.insert(n);
    if (batchNames.empty())
      for (const InputInfo &in : inputs)
        if (!declaredAxis.count(in.name))
          for (const std::string &n : in.dimNames)
            if (!n.empty() && looksLikeBatch(n))
              batchNames.insert(n);
    if (batchNames.empty())
      for (const InputInfo &in : inputs)
        if (!declaredAxis.count(in.name) && !in.dimNames.empty() && !in.dimNames[0].empty()) {
          if (!looksLikeSequence(in.dimNames[0]))
            batchNames.insert(in.dimNames[0]);
          break;
        }
    for (const std::string &n : batchNames) {
      bindTo[n] = 1; // costs are per sample
      bound[n] = o.batch;
    }
  }

  /// An input's batch axis: declared, else where a batch dim sits.
  std::optional<int64_t> batchAxisOf(const InputInfo &in) const {
    if (auto it = declaredAxis.find(in.name); it != declaredAxis.end())
      return it->second;
    for (auto [k, n] : llvm::enumerate(in.dimNames))
      if (!n.empty() && batchNames.count(n))
        return int64_t(k);
    return std::nullopt;
  }

  /// --dim NAME=VALUE
  llvm::Error bindDims() {
    for (const std::string &entry : o.dims) {
      auto [name, value] = llvm::StringRef(entry).split('=');
      int64_t size;
      if (name.empty() || value.getAsInteger(10, size) || size < 0)
        return fail("--dim '" + entry + "': expected NAME=VALUE with VALUE >= 0 "
                    "(e.g. past_sequence_length=0)");
      if (!known.count(name.str()))
        return fail("--dim '" + entry + "': the model has no symbolic dim '" + name.str() +
                    "' (its dims: " + dimList() + ")");
      if (batchNames.count(name.str())) {
        if (size != o.batch)
          return fail("--dim '" + entry + "': '" + name.str() +
                      "' is the batch dim, which --batch sets (" + std::to_string(o.batch) +
                      "); give --batch " + std::to_string(size) +
                      ", or --batch-axis INPUT=AXIS if the batch is another dim");
        continue;
      }
      bindTo[name.str()] = size;
      bound[name.str()] = size;
    }
    return llvm::Error::success();
  }

  /// --shape INPUT=D0xD1x...
  llvm::Error bindShapes() {
    for (const std::string &entry : o.shapes)
      if (llvm::Error e = bindShape(entry))
        return e;
    return llvm::Error::success();
  }

  llvm::Error bindShape(const std::string &entry) {
    auto [name, value] = llvm::StringRef(entry).split('=');
    auto dims = parseShape(value);
    if (name.empty() || !dims)
      return fail("--shape '" + entry + "': expected INPUT=D0xD1x... (e.g. x=8x3x640x640)");
    const InputInfo *in = findInput(name);
    if (!in)
      return fail("--shape '" + entry + "': the model has no input '" + name.str() +
                  "' (its inputs: " + inputList() + ")");
    if (!in->type)
      return fail("--shape '" + entry + "': input '" + name.str() + "' has no ranked shape");
    if (int64_t(dims->size()) != in->type.getRank())
      return fail("--shape '" + entry + "': input '" + name.str() + "' has rank " +
                  std::to_string(in->type.getRank()) + " " + shapeText(*in) + ", not " +
                  std::to_string(dims->size()));
    std::optional<int64_t> axis = batchAxisOf(*in);
    if (!axis && !declaredAxis.count(in->name) && in->type.getRank() > 0 &&
        ShapedType::isDynamic(in->type.getDimSize(0)) && in->dimNames[0].empty())
      axis = 0; // a dynamic, unnamed leading dim: the batch
    for (int64_t k = 0; k < in->type.getRank(); ++k) {
      int64_t fixed = in->type.getDimSize(k), want = (*dims)[k];
      if (axis && k == *axis) {
        if (want != o.batch)
          return fail("--shape '" + entry + "': its batch (dim " + std::to_string(k) +
                      (in->dimNames[k].empty() ? "" : ", '" + in->dimNames[k] + "'") +
                      ") is " + std::to_string(want) + " but --batch is " +
                      std::to_string(o.batch) +
                      (k == 0 ? "" : "") + "; input '" + in->name + "' is " + shapeText(*in));
        (*dims)[k] = 1; // costs are per sample
        continue;
      }
      if (!ShapedType::isDynamic(fixed) && fixed != want)
        return fail("--shape '" + entry + "': dim " + std::to_string(k) + " of input '" +
                    in->name + "' is fixed at " + std::to_string(fixed) + " " +
                    shapeText(*in));
      const std::string &n = in->dimNames[k];
      if (n.empty())
        continue;
      if (auto it = bindTo.find(n); it != bindTo.end() && it->second != want)
        return fail("--shape '" + entry + "' gives '" + n + "' = " + std::to_string(want) +
                    " but it is already " + std::to_string(bound[n]));
      bindTo[n] = want;
      bound[n] = want;
    }
    std::vector<std::string> parts, probeParts;
    for (auto [k, d] : llvm::enumerate(*dims)) {
      parts.push_back(std::to_string(d));
      probeParts.push_back(std::to_string(axis && int64_t(k) == *axis ? kProbeBatch : d));
    }
    inputShapes.push_back((name + "=" + llvm::join(parts, "x")).str());
    probeShapes.push_back((name + "=" + llvm::join(probeParts, "x")).str());
    shaped.insert(name.str());
    return llvm::Error::success();
  }

  /// --value INPUT=V: an integer scalar input's value (an If on it folds).
  llvm::Error bindValues() {
    for (const std::string &entry : o.values) {
      auto [name, value] = llvm::StringRef(entry).split('=');
      int64_t v;
      if (name.empty() || value.trim().getAsInteger(10, v))
        return fail("--value '" + entry + "': expected INPUT=VALUE with an integer VALUE "
                    "(e.g. rate=16000)");
      const InputInfo *in = findInput(name);
      if (!in)
        return fail("--value '" + entry + "': the model has no input '" + name.str() +
                    "' (its inputs: " + inputList() + ")");
      if (!in->type || !in->type.hasStaticShape() || in->type.getNumElements() != 1 ||
          !in->type.getElementType().isInteger())
        return fail("--value '" + entry + "': input '" + name.str() +
                    "' is not an integer or bool scalar" +
                    (in->type ? " (it is " + shapeText(*in) + ")" : std::string()));
      values[name.str()] = v;
      inputValues.push_back(name.str() + "=" + std::to_string(v));
    }
    return llvm::Error::success();
  }

  /// --seq L: the sequence dim (see ModelPipeline.h for the rule).
  void bindSequence() {
    if (o.sequence <= 0)
      return;
    for (const InputInfo &in : inputs) {
      if (shaped.count(in.name))
        continue;
      for (const std::string &n : in.dimNames)
        if (!n.empty() && !bindTo.count(n) && looksLikeSequence(n) && !qualifiedLength(n)) {
          sequenceName = n;
          sequenceInput = in.name;
          break;
        }
      if (!sequenceName.empty())
        break;
    }
    if (!sequenceName.empty()) {
      bindTo[sequenceName] = o.sequence;
      bound[sequenceName] = o.sequence;
    } else {
      warnings.push_back(
          "--seq " + std::to_string(o.sequence) +
          " binds no dim: no input has an unbound dim named like a sequence (seq, len, "
          "token, time) that is not a past/total/cache length; use --dim NAME=VALUE");
    }
  }

  /// A KV cache's length (serve mode): past/cache dims, and totals over them.
  void bindCache() {
    if (o.cacheLength < 0 || o.sequence <= 0)
      return;
    // The new tokens of a run: the sequence, or input_ids' fixed length when
    // no dim took the sequence (a decode-step-only export).
    int64_t fresh = o.sequence;
    if (sequenceName.empty())
      for (const InputInfo &in : inputs)
        if (in.name == "input_ids" && in.type && in.type.getRank() == 2 &&
            !ShapedType::isDynamic(in.type.getDimSize(1)))
          fresh = in.type.getDimSize(1);
    for (const InputInfo &in : inputs) {
      if (shaped.count(in.name))
        continue;
      for (const std::string &n : in.dimNames) {
        if (n.empty() || bindTo.count(n) || !qualifiedLength(n))
          continue;
        std::string lower = lowered(n);
        llvm::StringRef l(lower);
        int64_t size = -1;
        if (l.contains("total"))
          size = o.cacheLength + fresh;
        else if (l.contains("past") || l.contains("cache") || l.contains("prev") || l.contains("kv"))
          size = o.cacheLength;
        if (size >= 0)
          bindTo[n] = bound[n] = size;
      }
    }
  }

  /// Every symbolic dim of an input needs a size: the error names each
  /// with its input and says which flag binds it.
  llvm::Error checkAllBound() const {
    std::vector<std::string> unbound, unboundNames;
    bool sequenceLike = false;
    for (const InputInfo &in : inputs) {
      if (shaped.count(in.name))
        continue;
      for (const std::string &n : in.dimNames)
        if (!n.empty() && !bindTo.count(n) &&
            llvm::find(unboundNames, n) == unboundNames.end()) {
          unboundNames.push_back(n);
          unbound.push_back(n + " (of input '" + in.name + "')");
          sequenceLike |= looksLikeSequence(n) && !qualifiedLength(n);
        }
    }
    if (unbound.empty())
      return checkUnnamedBound();
    std::string hint;
    if (o.sequence <= 0 && sequenceLike)
      hint = "give --seq L for the sequence dim, --dim NAME=VALUE for others";
    else
      hint = "give them with --dim NAME=VALUE[,NAME=VALUE] (e.g. --dim " + unboundNames[0] +
             "=" + (qualifiedLength(unboundNames[0]) ? "0" : "128") + ")";
    hint += ", or --shape INPUT=D0xD1x... for a whole input (its batch axis holds --batch)";
    if (batchNames.empty())
      hint += "; no dim was taken as the batch: name its axis with --batch-axis INPUT=AXIS";
    if (!sequenceName.empty())
      hint += "; --seq bound only '" + sequenceName + "' (of input '" + sequenceInput + "')";
    return fail(o.path + ": symbolic dims " + llvm::join(unbound, ", ") + " need sizes: " + hint);
  }

  /// Dims without a name (`?`, empty) take their sizes from --shape only.
  llvm::Error checkUnnamedBound() const {
    for (const InputInfo &in : inputs) {
      if (shaped.count(in.name) || !in.type)
        continue;
      std::vector<std::string> open;
      for (int64_t k = 0; k < in.type.getRank(); ++k)
        if (ShapedType::isDynamic(in.type.getDimSize(k)) && in.dimNames[k].empty())
          open.push_back(std::to_string(k));
      if (!open.empty())
        return fail(o.path + ": input '" + in.name + "' " + shapeText(in) + " has dim" +
                    (open.size() > 1 ? "s " : " ") + llvm::join(open, ", ") +
                    " without a name: give its shape with --shape " + in.name +
                    "=D0xD1x... (its batch axis holds --batch)");
    }
    return llvm::Error::success();
  }

  /// All of the above, in the order their errors are reported.
  llvm::Error bindAll() {
    if (llvm::Error e = declareBatchAxes())
      return e;
    bindBatch();
    if (llvm::Error e = bindDims())
      return e;
    if (llvm::Error e = bindShapes())
      return e;
    if (llvm::Error e = bindValues())
      return e;
    bindSequence();
    bindCache();
    return checkAllBound();
  }
};

/// The model at `path`: het IR text, else ONNX imported.
OwningOpRef<ModuleOp> loadModule(const PipelineOptions &o, MLIRContext &context,
                                 std::string &error) {
  const std::string &path = o.path;
  if (llvm::StringRef(path).ends_with(".mlir")) {
    llvm::SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(path, sourceMgr, &context);
    if (!module)
      error = path + ": not valid het IR (see above)";
    return module;
  }
  import::ImportOptions io;
  io.allowMissingWeights = o.allowMissingWeights;
  return import::importOnnxFile(path, &context, io, error);
}

/// het-bind-shapes with the binding, then het-group-layers; warnings go to
/// `result`, the first error to the returned text.
llvm::Error bindAndGroup(ModuleOp module, const Binder &binder, CostedModel &result) {
  MLIRContext *context = module.getContext();
  std::vector<std::string> dims;
  for (auto &[n, v] : binder.bindTo)
    dims.push_back(n + "=" + std::to_string(v));
  PassManager pm(context);
  het::HetBindShapesOptions bindOptions;
  bindOptions.dims.assign(dims.begin(), dims.end());
  bindOptions.inputShapes.assign(binder.inputShapes.begin(), binder.inputShapes.end());
  bindOptions.inputValues.assign(binder.inputValues.begin(), binder.inputValues.end());
  bindOptions.requireStatic = true;
  pm.addPass(het::createHetBindShapes(bindOptions));
  pm.addPass(het::createHetGroupLayers());
  std::string diag;
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &d) {
    std::string where = describeLocation(d.getLocation());
    std::string text = (where.empty() ? "" : where + ": ") + d.str();
    if (d.getSeverity() == DiagnosticSeverity::Warning) {
      result.warnings.push_back(text);
      return success();
    }
    if (diag.empty()) diag = text;
    return success();
  });
  if (failed(pm.run(module)))
    return llvm::createStringError(binder.o.path + ": " + diag);
  return llvm::Error::success();
}

} // namespace

std::string oneLineMessage(llvm::StringRef message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

namespace {
llvm::Expected<CostedModel> costModelFileImpl(const PipelineOptions &o);
} // namespace

llvm::Expected<CostedModel> costModelFile(const PipelineOptions &o) {
  // Names in the model are the model's: a newline in one must not split the
  // error the user (or a script) reads as one line.
  auto result = costModelFileImpl(o);
  if (!result)
    return llvm::createStringError(oneLineMessage(llvm::toString(result.takeError())));
  return result;
}

namespace {
llvm::Expected<CostedModel> costModelFileImpl(const PipelineOptions &o) {
  const std::string &path = o.path;
  auto err = [](const llvm::Twine &message) -> llvm::Expected<CostedModel> {
    return llvm::createStringError(message.str());
  };
  CostedModel result;
  MLIRContext context;
  context.loadDialect<het::HetDialect>();
  std::string error;
  OwningOpRef<ModuleOp> module = loadModule(o, context, error);
  if (!module)
    return err(error);
  auto graphs = llvm::to_vector(module->getOps<het::GraphOp>());
  if (graphs.size() != 1)
    return err(path + ": expected one het.graph, found " + std::to_string(graphs.size()));
  het::GraphOp graph = graphs.front();

  Binder binder(o, graph, result);
  if (llvm::Error e = binder.bindAll())
    return std::move(e);
  result.sequenceDim = binder.sequenceName;
  std::vector<std::string> probeDims;
  for (auto &[n, v] : binder.bindTo)
    probeDims.push_back(n + "=" + std::to_string(binder.batchNames.count(n) ? kProbeBatch : v));

  // The same binding with the batch at an unusual size tells whether the
  // batch may be split and where each input and output carries it.
  OwningOpRef<ModuleOp> probe = module->clone();
  if (llvm::Error e = bindAndGroup(*module, binder, result))
    return std::move(e);
  if (std::string why = checkSamples(*probe, graph, probeDims, binder.probeShapes, binder.inputValues, result);
      !why.empty())
    return err(path + ": " + why);
  for (IoShape &io : result.inputs)
    if (auto it = binder.values.find(io.name); it != binder.values.end())
      io.values = {it->second};

  cost::ExtractOptions extract;
  extract.dtype = o.dtype;
  extract.samples = 1;  // the batch dim was bound to one sample
  extract.training = o.training;
  extract.fusedAttention = o.fusedAttention;
  extract.fusedElementwise = o.fusedElementwise;
  auto modelCost = cost::extractModelCost(graph, extract);
  if (!modelCost)
    return err(path + ": " + llvm::toString(modelCost.takeError()));
  for (const cost::LayerCost &layer : modelCost->layers)
    for (const cost::OpCost &op : layer.ops)
      if (!op.note.empty())
        result.warnings.push_back((op.name == op.opType ? "a " + op.opType + " node"
                                                        : "node '" + op.name + "' (" +
                                                              op.opType + ")") +
                                  ": " + op.note);

  result.cost = std::move(*modelCost);
  return result;
}
} // namespace

} // namespace hetplan::planner
