//===- CheckSamples.cpp - the het-check-samples pass ----------------------===//
//
// Whether the batch of a graph may be split (data-parallel shares,
// micro-batches), and on which axis each graph input and output carries it.
// The graph is bound with the batch at an unusual size S: a dim that S
// divides carries the batch; a node that loses it, doubles it or works
// along it combines samples.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "dialects/het/IR/HetOps.h"
#include "passes/cost/OpTableAdapter.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace hetplan::het {

#define GEN_PASS_DEF_HETCHECKSAMPLES
#include "passes/Passes.h.inc"

namespace {

/// How often S divides each dim of a static shape; nullopt when the type
/// is not a tensor with a static shape.
std::optional<SmallVector<int>> batchFactors(Type type, int64_t S) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  if (!ranked || !ranked.hasStaticShape())
    return std::nullopt;
  SmallVector<int> f;
  for (int64_t d : ranked.getShape()) {
    int k = 0;
    while (d > 0 && d % S == 0) {
      d /= S;
      ++k;
    }
    f.push_back(k);
  }
  return f;
}

int total(ArrayRef<int> f) {
  int t = 0;
  for (int k : f)
    t += k;
  return t;
}

/// The only batch-carrying axis of `f`, or -1 (none, or several).
int64_t onlyAxis(ArrayRef<int> f) {
  int64_t axis = -1;
  for (auto [i, k] : llvm::enumerate(f)) {
    if (!k)
      continue;
    if (axis >= 0 || k > 1)
      return -1;
    axis = int64_t(i);
  }
  return axis;
}

std::string shapeText(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

int64_t intAttr(NodeOp node, StringRef name, int64_t def) {
  if (auto a = dyn_cast_or_null<IntegerAttr>(node.getOnnxAttr(name)))
    return a.getInt();
  return def;
}

/// Why `node` combines samples, or "" when it keeps them apart (as far as
/// the static shapes tell).
std::string whyMixed(NodeOp node, int64_t S) {
  StringRef op = node.getOpType();
  if (op == "Shape" || op == "Size")
    return "";
  bool inCarries = false;
  SmallVector<std::optional<SmallVector<int>>> ins;
  for (Value v : node.getInputs()) {
    ins.push_back(batchFactors(v.getType(), S));
    inCarries |= ins.back() && total(*ins.back()) > 0;
  }
  bool outsKnown = true, outCarries = false;
  for (auto [i, v] : llvm::enumerate(node.getOutputs())) {
    auto f = batchFactors(v.getType(), S);
    if (!f) {
      outsKnown = false;
      continue;
    }
    if (total(*f) > 1)
      return "output #" + std::to_string(i) + " (" + shapeText(v.getType()) +
             ") holds the batch twice: it pairs every sample with every other";
    outCarries |= total(*f) == 1;
  }
  if (inCarries && outsKnown && !outCarries && node.getNumResults() > 0)
    return "its outputs lose the batch dim: it reduces over the samples or picks some of them";
  if (inCarries && (op == "NonZero" || op == "Unique" || op == "Compress" ||
                    op == "NonMaxSuppression"))
    return "its output lists entries of the whole batch (its size depends on every sample)";
  if (!inCarries || ins.empty() || !ins[0])
    return "";
  ArrayRef<int> x = *ins[0];
  int64_t rank = int64_t(x.size());
  auto norm = [&](int64_t a) { return a < 0 ? a + rank : a; };
  auto alongFrom = [&](int64_t first, StringRef what) -> std::string {
    first = norm(first);
    for (int64_t a = std::max<int64_t>(first, 0); a < rank; ++a)
      if (x[a])
        return (what + " along axis " + Twine(a) + ", which carries the batch").str();
    return "";
  };
  // The op table's rule (ops/OpTable.h) where it has one.
  if (const ops::OpDef *def = opDefOf(op); def && def->mixesSamples)
    return def->mixesSamples(NodeAttrs(node), node.getOpset(), std::vector<int>(x.begin(), x.end()),
                             op.str());
  if (op == "LpNormalization") {
    int64_t a = norm(intAttr(node, "axis", -1));
    return a >= 0 && a < rank && x[a] ? alongFrom(a, "it normalizes") : "";
  }
  if (op == "MeanVarianceNormalization") {
    SmallVector<int64_t> axes = {0, 2, 3};
    if (auto a = dyn_cast_or_null<DenseI64ArrayAttr>(node.getOnnxAttr("axes")))
      axes.assign(a.asArrayRef().begin(), a.asArrayRef().end());
    for (int64_t a : axes)
      if (norm(a) >= 0 && norm(a) < rank && x[norm(a)])
        return "it normalizes along axis " + std::to_string(norm(a)) + ", which carries the batch";
    return "";
  }
  if (op == "BatchNormalization" && intAttr(node, "training_mode", 0) && x[0])
    return "it computes batch statistics (training_mode = 1)";
  if (op == "Concat") {
    int64_t a = intAttr(node, "axis", 0);
    int carriers = 0;
    for (auto &f : ins)
      if (f && !f->empty()) {
        int64_t b = a < 0 ? a + int64_t(f->size()) : a;
        carriers += b >= 0 && b < int64_t(f->size()) && (*f)[b] > 0;
      }
    if (carriers > 1)
      return "it joins batches along axis " + std::to_string(a);
    return "";
  }
  if (op == "Reshape" || op == "Flatten") {
    auto out = batchFactors(node.getOutputs()[0].getType(), S);
    int64_t i = onlyAxis(x), j = out ? onlyAxis(*out) : -1;
    if (i < 0 || j < 0)
      return "";
    auto inShape = cast<RankedTensorType>(node.getInputs()[0].getType()).getShape();
    auto outShape = cast<RankedTensorType>(node.getOutputs()[0].getType()).getShape();
    int64_t before = 1, after = 1;
    for (int64_t d = 0; d < i; ++d)
      before *= inShape[d];
    for (int64_t d = 0; d < j; ++d)
      after *= outShape[d];
    if (before != after)
      return "it moves the batch in row-major order (" + shapeText(node.getInputs()[0].getType()) +
             " to " + shapeText(node.getOutputs()[0].getType()) + ")";
  }
  return "";
}

struct HetCheckSamplesPass : impl::HetCheckSamplesBase<HetCheckSamplesPass> {
  using HetCheckSamplesBase::HetCheckSamplesBase;

  void runOnOperation() override {
    if (batch < 2) {
      getOperation().emitError("het-check-samples: batch must be at least 2, got ") << batch;
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    for (GraphOp graph : getOperation().getOps<GraphOp>()) {
      std::string mixed;
      graph.walk([&](NodeOp node) {
        if (!mixed.empty())
          return WalkResult::interrupt();
        std::string why = whyMixed(node, batch);
        if (!why.empty()) {
          std::string name = node.getName() ? node.getName()->str() : "";
          mixed = "node '" + name + "' (" + node.getOpType().str() + "): " + why;
          return WalkResult::interrupt();
        }
        return WalkResult::advance();
      });
      auto axes = [&](TypeRange types) {
        SmallVector<int64_t> out;
        for (Type t : types) {
          auto f = batchFactors(t, batch);
          int64_t axis = -1;
          if (f)
            for (auto [i, k] : llvm::enumerate(*f))
              if (k) {
                axis = int64_t(i);
                break;
              }
          out.push_back(axis);
        }
        return b.getDenseI64ArrayAttr(out);
      };
      NamedAttribute entries[] = {
          b.getNamedAttr("inputs", axes(graph.getArgumentTypes())),
          b.getNamedAttr("outputs", axes(graph.getResultTypes()))};
      graph->setAttr("het.batch_axes", b.getDictionaryAttr(entries));
      if (!mixed.empty())
        graph->setAttr("het.samples_mixed", b.getStringAttr(mixed));
      else
        graph->removeAttr("het.samples_mixed");
    }
  }
};

} // namespace

} // namespace hetplan::het
