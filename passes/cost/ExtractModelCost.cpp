//===- ExtractModelCost.cpp - the planner's view of a graph ---------------===//

#include "passes/cost/ExtractModelCost.h"
#include "passes/cost/FusedAttention.h"
#include "passes/cost/LayerGrouping.h"
#include "passes/cost/OpCosts.h"
#include "passes/cost/OpTableAdapter.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringSet.h"

#include <functional>
#include <map>
#include <numeric>
#include <set>

using namespace mlir;
using namespace hetplan::het;

namespace hetplan::cost {

namespace {

llvm::Error failure(GraphOp graph, const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 ("graph @" + graph.getSymName() + ": " + why).str());
}

/// The op's tensor-parallel role in the op table (ops/OpTable.h).
ops::TpRole tpRole(StringRef op) {
  const ops::OpDef *def = opDefOf(op);
  return def ? def->tp : ops::TpRole::None;
}

/// A matrix product tensor parallelism splits (MatMul).
bool isMatMul(NodeOp node) {
  return node.getDomain().empty() && tpRole(node.getOpType()) == ops::TpRole::Product;
}

/// A MatMul of two activations: the Q K^T or P V product of an attention
/// written out in ops.
bool isActivationProduct(NodeOp node, const GraphInfo &info) {
  return isMatMul(node) && node.getInputs().size() == 2 &&
         info.kind(node.getInputs()[0]) == ValueKind::Activation &&
         info.kind(node.getInputs()[1]) == ValueKind::Activation;
}

/// Whether `v` reaches a Softmax through at most a few elementwise ops (scale,
/// mask): then the MatMul producing it computes attention scores.
bool feedsSoftmax(Value v, int depth = 4) {
  for (Operation *user : v.getUsers()) {
    auto node = dyn_cast<NodeOp>(user);
    if (!node || !node.getDomain().empty())
      continue;
    StringRef op = node.getOpType();
    if (tpRole(op) == ops::TpRole::AttentionNormalizer)
      return true;
    if (depth > 0 && (op == "Div" || op == "Mul" || op == "Add" || op == "Sub" ||
                      op == "Where" || op == "Cast" || op == "Reshape"))
      for (Value r : node.getResults())
        if (feedsSoftmax(r, depth - 1))
          return true;
  }
  return false;
}

/// Bytes of the keys (or values) an attention caches: `k` as the product
/// reads it, or, when it was repeated from fewer heads (grouped-query
/// attention: Unsqueeze -> Expand -> Reshape, as Llama-2-70B, Mistral and
/// Qwen2 exports write it), the tensor before the repeat. Layout ops never
/// shrink a tensor, so the smallest on the chain is what is kept.
double cachedBytes(Value k, DType dtype, int depth = 8) {
  double bytes = valueBytes(k.getType(), dtype);
  auto node = k.getDefiningOp<NodeOp>();
  if (depth == 0 || !node || !node.getDomain().empty() || node.getInputs().empty())
    return bytes;
  StringRef op = node.getOpType();
  if (op != "Transpose" && op != "Reshape" && op != "Expand" && op != "Unsqueeze" &&
      op != "Squeeze" && op != "Tile" && op != "Identity")
    return bytes;
  double before = cachedBytes(node.getInputs()[0], dtype, depth - 1);
  return before > 0 ? std::min(bytes, before) : bytes;
}

//===----------------------------------------------------------------------===//
// Tensor parallelism: what a tp-way group splits
//===----------------------------------------------------------------------===//

/// A value split over the group: along `axis`, `extent` elements in all,
/// each rank holding its contiguous 1/tp -- except while `fresh` names the
/// column MatMul it came straight from (through elementwise ops), whose
/// columns may be segments (a fused Q|K|V weight split by a later Split).
struct SplitValue {
  int axis = 0;
  int root = 0;       // a column MatMul of the region (union-find)
  int64_t extent = 0;
  int fresh = -1;
};

bool isUnaryElementwise(StringRef op) {
  return tpRole(op) == ops::TpRole::Elementwise ||
         llvm::is_contained({"Erf", "Gelu", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Abs",
                             "Sqrt", "Reciprocal", "Softplus", "Identity", "Cast", "LeakyRelu",
                             "Elu", "HardSigmoid", "Silu", "Mish", "FastGelu"},
                            op);
}

std::optional<llvm::SmallVector<int64_t>> staticShape(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return std::nullopt;
  return llvm::SmallVector<int64_t>(t.getShape());
}

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

/// A float initializer of rank `rank` that only this node reads.
std::optional<llvm::SmallVector<int64_t>> ownWeight(Value v, int64_t rank) {
  if (!v.getDefiningOp<WeightOp>() || !v.hasOneUse())
    return std::nullopt;
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape() || t.getRank() != rank || !isa<FloatType>(t.getElementType()))
    return std::nullopt;
  return llvm::SmallVector<int64_t>(t.getShape());
}

int64_t normalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

int64_t intAttr(NodeOp node, StringRef name, int64_t otherwise) {
  if (auto a = dyn_cast_or_null<IntegerAttr>(node.getOnnxAttr(name)))
    return a.getInt();
  return otherwise;
}

/// One round of findTensorParallelUnits' scan over a layer's nodes: the
/// regions grown from column MatMuls (union-find over their first column
/// MatMul), their members and what each adds to its unit's divisor and
/// traffic. The column MatMuls in `lone` start no region.
struct RegionScan {
  using Role = TensorParallelRole;
  struct Member {
    int root;
    TensorParallelNode node;
    int seed = -1;  // Column/Bias: the column MatMul whose columns it slices
  };
  /// A node reading split values, as the rules see it.
  struct Reader {
    int i;
    NodeOp node;
    Operation::operand_range inputs;
    llvm::SmallVector<size_t> splitIn;
    StringRef op;
    int root = 0;
    SplitValue first0;
    std::optional<llvm::SmallVector<int64_t>> inShape, outShape;
    int inRank = 0, outRank = 0, fromRight = 0;
    SplitValue same;  // first0 in the merged region: the usual output
  };

  const GraphInfo &info;
  const std::set<int> &lone;
  double samples;
  llvm::DenseMap<Value, SplitValue> split;
  std::map<int, int> parent;
  std::vector<Member> members;
  std::set<int> failed, rowSeen;
  std::map<int, int> segmentsOf;
  std::map<int, int64_t> columnsOf;
  std::vector<std::pair<int, int64_t>> extents;
  std::vector<std::pair<int, double>> forwardElements, backwardElements;
  std::vector<std::pair<int, int>> needsPlain;  // (root, seed): no segments allowed
  std::set<Operation *> accepted;

  RegionScan(const GraphInfo &info, const std::set<int> &lone)
      : info(info), lone(lone), samples(double(std::max<int64_t>(info.samples, 1))) {}

  double perSample(Value v) const { return double(numElements(v.getType())) / samples; }

  int find(int x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  }
  int unite(int a, int b) {
    a = find(a);
    b = find(b);
    parent[std::max(a, b)] = std::min(a, b);
    return std::min(a, b);
  }
  void fail(const Reader &r) { failed.insert(r.root); }
  void emit(Reader &r, Role role, SplitValue out, int axis = 0) {
    members.push_back({r.root, {r.i, role, axis}, -1});
    split[r.node.getResult(0)] = out;
    accepted.insert(r.node);
  }

  /// Node i: a column MatMul seeds a region; a node reading split values
  /// joins their region (merging them) or fails it.
  void visit(int i) {
    NodeOp node = info.nodes[i];
    auto inputs = node.getInputs();
    Reader r{i, node, inputs, {}, {}};
    for (auto [k, v] : llvm::enumerate(inputs))
      if (split.count(v))
        r.splitIn.push_back(k);
    r.op = node.getOpType();
    bool plain = node.getDomain().empty() && node->getNumRegions() == 0;
    if (r.splitIn.empty()) {
      if (plain && isMatMul(node) && inputs.size() == 2 && node.getNumResults() == 1 &&
          info.kind(inputs[0]) == ValueKind::Activation && !lone.count(i))
        seedColumn(i, node);
      return;
    }
    r.root = split[inputs[r.splitIn[0]]].root;
    for (size_t k : r.splitIn)
      r.root = unite(r.root, split[inputs[k]].root);
    r.first0 = split[inputs[r.splitIn[0]]];
    if (!plain) {
      fail(r);
      return;
    }
    r.inShape = staticShape(inputs[r.splitIn[0]]);
    r.outShape = node.getNumResults() ? staticShape(node.getResult(0)) : std::nullopt;
    if (!r.inShape || !r.outShape) {
      fail(r);
      return;
    }
    r.inRank = int(r.inShape->size());
    r.outRank = int(r.outShape->size());
    r.fromRight = r.inRank - 1 - r.first0.axis;
    r.same = r.first0;
    r.same.root = r.root;
    if (followElementwise(r) || followBinary(r) || followNormalizer(r) || followTranspose(r) ||
        followSplit(r) || followReshape(r) || followMatMul(r))
      return;
    fail(r);
  }

  /// A MatMul of an activation by a 2-D weight only it reads: split by
  /// the weight's columns.
  void seedColumn(int i, NodeOp node) {
    auto inputs = node.getInputs();
    if (auto w = ownWeight(inputs[1], 2)) {
      parent[i] = i;
      segmentsOf[i] = 1;
      columnsOf[i] = (*w)[1];
      auto out = staticShape(node.getResult(0));
      if (!out)
        return;
      split[node.getResult(0)] = {int(out->size()) - 1, i, (*w)[1], i};
      members.push_back({i, {i, Role::Column}, i});
      backwardElements.push_back({i, perSample(inputs[0])});
      accepted.insert(node);
    }
  }

  // Each follow* below takes the node (true) when its rule's op matches,
  // failing the region when the rule does not hold.

  bool followElementwise(Reader &r) {
    if (isUnaryElementwise(r.op) && r.splitIn.size() == 1 && r.inputs.size() == 1) {
      r.same.axis = r.outRank - 1 - r.fromRight;
      emit(r, Role::Local, r.same);
      return true;
    }
    // Dropout (Megatron's on the attention probabilities and after the
    // projections): elementwise on the slice; its ratio and training flag
    // are scalars. A used mask output is not followed.
    if (r.op == "Dropout" && r.splitIn.size() == 1 && r.splitIn[0] == 0 &&
        (r.node.getNumResults() < 2 || r.node.getResult(1).use_empty())) {
      r.same.axis = r.outRank - 1 - r.fromRight;
      emit(r, Role::Local, r.same);
      return true;
    }
    return false;
  }

  bool followBinary(Reader &r) {
    if (!llvm::is_contained({"Add", "Sub", "Mul", "Div", "Pow", "Where"}, r.op))
      return false;
    const SplitValue &first0 = r.first0;
    int fromRight = r.fromRight;
    bool ok = r.outRank >= fromRight + 1, mixed = false;
    int bias = -1;
    for (auto [k, v] : llvm::enumerate(r.inputs)) {
      if (!ok)
        break;
      auto shape = staticShape(v);
      if (!shape) {
        ok = false;
        break;
      }
      int rank = int(shape->size());
      if (split.count(v)) {
        const SplitValue &sv = split[v];
        ok = rank - 1 - sv.axis == fromRight && sv.extent == first0.extent;
        if (sv.fresh != first0.fresh) {
          // Outputs of two column MatMuls (SwiGLU's gate and up): both
          // must be contiguous slices.
          needsPlain.push_back({r.root, sv.fresh});
          needsPlain.push_back({r.root, first0.fresh});
          mixed = true;
        }
        continue;
      }
      int64_t d = rank > fromRight ? (*shape)[size_t(rank - 1 - fromRight)] : 1;
      if (d == 1)
        continue;
      // A bias on the split columns of a column MatMul's output.
      if (r.op == "Add" && bias < 0 && fromRight == 0 && first0.fresh >= 0 && ownWeight(v, 1) &&
          d == first0.extent) {
        bias = int(k);
        continue;
      }
      ok = false;
    }
    if (!ok) {
      fail(r);
      return true;
    }
    r.same.axis = r.outRank - 1 - fromRight;
    if (mixed)
      r.same.fresh = -1;
    if (bias >= 0) {
      members.push_back({r.root, {r.i, Role::Bias, bias}, first0.fresh});
      split[r.node.getResult(0)] = r.same;
      accepted.insert(r.node);
    } else {
      emit(r, Role::Local, r.same);
    }
    return true;
  }

  /// Softmax and its kin, off the split axis.
  bool followNormalizer(Reader &r) {
    if (!((tpRole(r.op) == ops::TpRole::AxisNormalizer ||
           tpRole(r.op) == ops::TpRole::AttentionNormalizer) &&
          r.splitIn.size() == 1))
      return false;
    NodeOp node = r.node;
    int64_t axis = normalizeAxis(intAttr(node, "axis", node.getOpset() >= 13 ? -1 : 1), r.inRank);
    if (axis == r.first0.axis || (node.getOpset() < 13 && axis <= r.first0.axis)) {
      fail(r);
      return true;
    }
    needsPlain.push_back({r.root, r.first0.fresh});
    emit(r, Role::Local, r.same);
    return true;
  }

  bool followTranspose(Reader &r) {
    if (!(r.op == "Transpose" && r.splitIn.size() == 1))
      return false;
    llvm::SmallVector<int64_t> perm;
    if (auto a = dyn_cast_or_null<DenseI64ArrayAttr>(r.node.getOnnxAttr("perm")))
      perm.assign(a.asArrayRef().begin(), a.asArrayRef().end());
    else
      for (int k = r.inRank - 1; k >= 0; --k)
        perm.push_back(k);
    auto it = llvm::find(perm, r.first0.axis);
    if (it == perm.end()) {
      fail(r);
      return true;
    }
    r.same.axis = int(it - perm.begin());
    r.same.fresh = -1;
    needsPlain.push_back({r.root, r.first0.fresh});
    emit(r, Role::Local, r.same);
    return true;
  }

  /// Split along the split axis of a column MatMul's output (a fused
  /// Q|K|V weight): its columns become segments.
  bool followSplit(Reader &r) {
    const SplitValue &first0 = r.first0;
    if (!(r.op == "Split" && r.splitIn.size() == 1 && r.splitIn[0] == 0 &&
          normalizeAxis(intAttr(r.node, "axis", 0), r.inRank) == first0.axis &&
          first0.fresh >= 0 && segmentsOf[first0.fresh] == 1))
      return false;
    int n = int(r.node.getNumResults());
    bool equal = first0.extent % n == 0;
    for (Value res : r.node.getResults()) {
      auto shape = staticShape(res);
      equal &= shape && int(shape->size()) == r.inRank &&
               (*shape)[size_t(first0.axis)] * n == first0.extent;
    }
    if (!equal) {
      fail(r);
      return true;
    }
    segmentsOf[first0.fresh] = n;
    members.push_back({r.root, {r.i, Role::Split, first0.axis}, -1});
    for (Value res : r.node.getResults())
      split[res] = {first0.axis, r.root, first0.extent / n, -1};
    extents.push_back({r.root, first0.extent / n});
    accepted.insert(r.node);
    return true;
  }

  /// Reshape keeping the outermost dim of the split one divided.
  bool followReshape(Reader &r) {
    if (!(r.op == "Reshape" && r.splitIn.size() == 1 && r.splitIn[0] == 0))
      return false;
    ArrayRef<int64_t> in = *r.inShape, out = *r.outShape;
    int inRank = r.inRank, outRank = r.outRank;
    int a = r.first0.axis;
    int64_t prefix = product(in.take_front(a));
    int j = -1;
    for (int k = 0; k <= outRank && j < 0; ++k)
      if (product(out.take_front(k)) == prefix && k < outRank)
        j = k;
    bool ok = j >= 0;
    if (ok) {
      if (out[j] >= in[a])  // merged with inner dims
        ok = out[j] % in[a] == 0 &&
             llvm::any_of(llvm::seq<int>(a + 1, inRank + 1), [&](int e) {
               return product(in.slice(a, e - a)) == out[j];
             });
      else  // split into dims, the outermost keeps the slices
        ok = in[a] % out[j] == 0 &&
             llvm::any_of(llvm::seq<int>(j + 1, outRank + 1), [&](int e) {
               return product(out.slice(j, e - j)) == in[a];
             });
    }
    if (!ok) {
      fail(r);
      return true;
    }
    extents.push_back({r.root, out[j]});
    needsPlain.push_back({r.root, r.first0.fresh});
    emit(r, Role::Reshape, {j, r.root, out[j], -1}, j);
    return true;
  }

  /// A row MatMul (by a 2-D weight, of a value split on its last axis), or
  /// a MatMul of two values split on the same batch dim (attention heads).
  bool followMatMul(Reader &r) {
    if (!(isMatMul(r.node) && r.inputs.size() == 2))
      return false;
    const SplitValue &first0 = r.first0;
    if (r.splitIn.size() == 1 && r.splitIn[0] == 0 && first0.axis == r.inRank - 1)
      if (auto w = ownWeight(r.inputs[1], 2); w && (*w)[0] == first0.extent) {
        needsPlain.push_back({r.root, first0.fresh});
        members.push_back({r.root, {r.i, Role::Row}, -1});
        forwardElements.push_back({r.root, perSample(r.node.getResult(0))});
        rowSeen.insert(r.root);
        accepted.insert(r.node);
        return true;  // the output is whole again
      }
    if (r.splitIn.size() == 2) {
      const SplitValue &b = split[r.inputs[1]];
      auto bShape = staticShape(r.inputs[1]);
      if (bShape && int(bShape->size()) == r.inRank && b.axis == first0.axis &&
          first0.axis < r.inRank - 2 && b.extent == first0.extent) {
        needsPlain.push_back({r.root, first0.fresh});
        needsPlain.push_back({r.root, b.fresh});
        emit(r, Role::Local, {first0.axis, r.root, first0.extent, -1});
        return true;
      }
    }
    return false;
  }

  /// The roots of the failed regions, after the checks that need the
  /// whole layer seen.
  std::set<int> collectFailedRoots() {
    // Split values read outside their region (another layer, the graph's
    // outputs, a node that could not take them) drop the region.
    for (auto &[v, sv] : split)
      for (Operation *user : v.getUsers())
        if (!accepted.count(user))
          failed.insert(find(sv.root));
    for (auto [root, seed] : needsPlain)
      if (seed >= 0 && segmentsOf[seed] > 1)
        failed.insert(find(root));
    for (auto &[seed, p] : parent)
      if (!rowSeen.count(find(seed)))
        failed.insert(find(seed));
    std::set<int> failedRoots;
    for (int r : failed)
      failedRoots.insert(find(r));
    return failedRoots;
  }

  /// The regions that hold, as units ordered by root.
  std::vector<TensorParallelUnit> regionUnits(const std::set<int> &failedRoots) {
    std::map<int, TensorParallelUnit> regions;
    for (const Member &m : members) {
      int root = find(m.root);
      if (failedRoots.count(root))
        continue;
      TensorParallelUnit &u = regions[root];
      u.pair = true;
      TensorParallelNode n = m.node;
      if (m.seed >= 0)
        n.segments = segmentsOf[m.seed];
      if (n.role == Role::Column) {
        u.divisor = std::gcd(u.divisor, columnsOf[m.seed] / segmentsOf[m.seed]);
        ++u.backwardCollectives;
      }
      if (n.role == Role::Row)
        ++u.forwardCollectives;
      u.nodes.push_back(n);
    }
    for (auto [root, e] : extents)
      if (regions.count(find(root)))
        regions[find(root)].divisor = std::gcd(regions[find(root)].divisor, e);
    for (auto [root, e] : forwardElements)
      if (regions.count(find(root)))
        regions[find(root)].forwardElementsPerSample += e;
    for (auto [seed, e] : backwardElements)
      if (regions.count(find(seed)))
        regions[find(seed)].backwardElementsPerSample += e;
    std::vector<TensorParallelUnit> units;
    for (auto &[root, u] : regions) {
      llvm::sort(u.nodes, [](const TensorParallelNode &a, const TensorParallelNode &b) {
        return a.node < b.node;
      });
      units.push_back(std::move(u));
    }
    return units;
  }

  /// Column MatMul i alone, all-gathered.
  TensorParallelUnit loneUnit(int i) const {
    NodeOp node = info.nodes[i];
    TensorParallelUnit u;
    u.divisor = (*ownWeight(node.getInputs()[1], 2))[1];
    u.nodes.push_back({i, Role::AllGather});
    u.forwardElementsPerSample = perSample(node.getResult(0));
    u.backwardElementsPerSample = perSample(node.getInputs()[0]);
    u.forwardCollectives = u.backwardCollectives = 1;
    return u;
  }
};

/// Finds Megatron's column/row regions among nodes [first, last] (one
/// layer), the same rules the runtime executes (docs/runtime.md,
/// "Tensor-parallel stages"): a MatMul by a 2-D weight no other node reads
/// starts a region split by the weight's columns; elementwise ops, Softmax
/// off the split axis, Transpose, Reshape (the outermost dim of the split
/// one divided), Split along it (a fused Q|K|V weight) and MatMuls of two
/// values split on a batch dim (attention heads) run on each rank's slice;
/// a MatMul by a 2-D weight of a value split on its last axis takes the
/// weight's rows and all-reduces. A region that meets anything else, or
/// whose split values leave it, is dropped: its first MatMuls are split by
/// columns alone and all-gathered.
std::vector<TensorParallelUnit> findTensorParallelUnits(const GraphInfo &info, int first,
                                                        int last) {
  std::set<int> lone;  // column MatMuls whose region failed: all-gathered
  for (int round = 0;; ++round) {
    RegionScan scan(info, lone);
    for (int i = first; i <= last; ++i)
      scan.visit(i);
    std::set<int> failedRoots = scan.collectFailedRoots();
    bool more = false;
    for (auto &[seed, p] : scan.parent)
      if (failedRoots.count(scan.find(seed)) && lone.insert(seed).second)
        more = true;
    if (more && round < 64)
      continue;

    // The regions that hold, then the lone column MatMuls.
    std::vector<TensorParallelUnit> units = scan.regionUnits(failedRoots);
    for (int i : lone)
      units.push_back(scan.loneUnit(i));
    llvm::sort(units, [](const TensorParallelUnit &a, const TensorParallelUnit &b) {
      return a.nodes.front().node < b.nodes.front().node;
    });
    return units;
  }
}

/// Training: the LM head among nodes [first, last] as a vocab-parallel unit
/// (Role::Vocab), when there is one: a MatMul of an activation by a 2-D
/// weight or by Transpose(perm [1, 0]) of one, making the graph's first
/// output (the loss output). It replaces a lone column unit of that node.
void addVocabHead(const GraphInfo &info, int first, int last, std::vector<TensorParallelUnit> &units) {
  auto ret = dyn_cast<ReturnOp>(info.graph.getBody().front().getTerminator());
  if (!ret || ret.getNumOperands() == 0)
    return;
  auto node = ret.getOperand(0).getDefiningOp<NodeOp>();
  int i = node ? info.indexOf(node) : -1;
  if (i < first || i > last || !isMatMul(node) ||
      node.getInputs().size() != 2 || info.kind(node.getInputs()[0]) != ValueKind::Activation)
    return;
  Value w = node.getInputs()[1];
  if (auto t = w.getDefiningOp<NodeOp>()) {
    auto perm = dyn_cast_or_null<DenseI64ArrayAttr>(t.getOnnxAttr("perm"));
    if (t.getOpType() != "Transpose" || t.getInputs().size() != 1 ||
        (perm && perm.asArrayRef() != ArrayRef<int64_t>{1, 0}))
      return;
    w = t.getInputs()[0];
  }
  auto wt = dyn_cast<RankedTensorType>(w.getType());
  auto out = dyn_cast<RankedTensorType>(node.getResult(0).getType());
  if (!w.getDefiningOp<WeightOp>() || !wt || !wt.hasStaticShape() || wt.getRank() != 2 || !out ||
      !out.hasStaticShape() || out.getRank() < 1)
    return;
  double samples = double(std::max<int64_t>(info.samples, 1));
  int64_t vocab = out.getShape().back();
  llvm::erase_if(units, [&](const TensorParallelUnit &u) {
    return llvm::any_of(u.nodes, [&](const TensorParallelNode &n) { return n.node == i; });
  });
  TensorParallelUnit u;
  u.pair = true;  // priced as all-reduces, like a pair's
  u.vocabHead = true;
  u.divisor = vocab;
  u.nodes.push_back({i, TensorParallelRole::Vocab});
  u.forwardElementsPerSample = 3.0 * double(out.getNumElements() / vocab) / samples;
  u.forwardCollectives = 2;
  u.backwardElementsPerSample = double(numElements(node.getInputs()[0].getType())) / samples;
  u.backwardCollectives = 1;
  u.stepAllReduceElements = double(wt.getNumElements());
  units.push_back(std::move(u));
  llvm::sort(units, [](const TensorParallelUnit &a, const TensorParallelUnit &b) {
    return a.nodes.front().node < b.nodes.front().node;
  });
}

double activationBytes(ValueRange values, const GraphInfo &info, DType dtype) {
  double total = 0;
  for (Value v : values)
    if (info.kind(v) == ValueKind::Activation)
      total += valueBytes(v.getType(), dtype);
  return total;
}


/// `p` as an embedding table: a float weight of rank >= 2 whose every use
/// is the data of a row lookup (ONNX Gather) along axis 0 with activation
/// indices, each sample reading numel(indices) / samples rows per lookup.
std::optional<LayerCost::Embedding> embeddingTable(const Parameter &p, const GraphInfo &info,
                                                   double samples) {
  auto weight = p.value.getDefiningOp<WeightOp>();
  auto type = dyn_cast<RankedTensorType>(p.value.getType());
  if (!weight || !type || type.getRank() < 2 || !type.hasStaticShape() ||
      !isa<FloatType>(type.getElementType()) || p.value.use_empty())
    return std::nullopt;
  LayerCost::Embedding e;
  e.name = weight.getSymName().str();
  e.rows = type.getDimSize(0);
  e.rowElements = type.getNumElements() / std::max<int64_t>(e.rows, 1);
  for (OpOperand &use : p.value.getUses()) {
    auto node = dyn_cast<NodeOp>(use.getOwner());
    const ops::OpDef *def = node ? opDefOf(node) : nullptr;
    if (!def || !def->rowLookup || !node.getDomain().empty() || use.getOperandNumber() != 0 ||
        info.isFolded(node) || node.getInputs().size() < 2 ||
        info.kind(node.getInputs()[1]) != ValueKind::Activation)
      return std::nullopt;
    if (auto axis = dyn_cast_or_null<IntegerAttr>(node.getOnnxAttr("axis")); axis && axis.getInt() != 0)
      return std::nullopt;
    auto indices = dyn_cast<RankedTensorType>(node.getInputs()[1].getType());
    if (!indices || !indices.hasStaticShape())
      return std::nullopt;
    e.lookupsPerSample += double(indices.getNumElements()) / samples;
  }
  return e;
}

//===----------------------------------------------------------------------===//
// What the backward pass keeps (docs/cost-model.md, "Training and memory")
//===----------------------------------------------------------------------===//

/// What an op's gradient needs from its forward pass: the op table's
/// declaration (ops::Keeps), which the backward kernels are checked against
/// (test/unit/OpTableTest.cpp); the ops not in the table yet are listed here.
using ops::Keeps;

Keeps backwardKeeps(NodeOp node, const GraphInfo &info) {
  StringRef op = node.getOpType();
  if (const ops::OpDef *def = opDefOf(op))
    return def->keeps;
  if (op == "Dropout")
    return Keeps::Mask;
  static const llvm::StringSet<> output = {
      "Sigmoid", "Tanh", "Exp", "Sqrt", "Reciprocal", "HardSigmoid"};
  static const llvm::StringSet<> nothing = {
      "Add", "Sub", "Neg", "Sum", "Mean", "Identity", "Reshape", "Flatten", "Squeeze",
      "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "GatherND", "Cast", "CastLike", "Expand", "Tile", "Pad", "ReduceSum", "ReduceMean",
      "AveragePool", "GlobalAveragePool", "DepthToSpace", "SpaceToDepth", "Shape", "Size",
      "ConstantOfShape", "Range", "Trilu", "Resize", "Upsample", "CumSum", "Equal",
      "Less", "Greater", "Not", "And", "Or", "ArgMax", "ArgMin", "OneHot"};
  if (output.contains(op))
    return Keeps::Output;
  if (nothing.contains(op))
    return Keeps::Nothing;
  // A product or quotient by a constant is linear: no data kept.
  // (A node with fewer inputs than its op takes keeps its inputs: the
  // shape rules refuse it before a cost is asked for, but nothing here may
  // index past them.)
  auto inputs = node.getInputs();
  if ((op == "Mul" || op == "Div") && inputs.size() >= 2) {
    int activations = 0;
    for (Value in : inputs)
      activations += info.kind(in) == ValueKind::Activation;
    if (activations < 2 && (op == "Mul" || info.kind(inputs[1]) != ValueKind::Activation))
      return Keeps::Nothing;
  }
  if (op == "Where" && !inputs.empty())
    return info.kind(inputs[0]) == ValueKind::Activation ? Keeps::Inputs : Keeps::Nothing;
  return Keeps::Inputs;
}

/// Elementwise ops that a training framework fuses into one kernel when one
/// feeds only another (PyTorch's JIT fusers, Megatron's fused bias-GELU):
/// the fused kernel keeps the chain's inputs and recomputes its inside.
bool isElementwise(NodeOp node) {
  static const llvm::StringSet<> ops = {
      "Add", "Sub", "Mul", "Div", "Pow", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt",
      "Neg", "Abs", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Clip",
      "LeakyRelu", "Where", "Cast", "Reciprocal", "Softplus", "Swish", "HardSwish",
      "HardSigmoid", "Elu", "Selu", "Celu", "Mish"};
  if (!node.getDomain().empty() && node.getDomain() != "com.microsoft")
    return false;
  const ops::OpDef *def = opDefOf(node.getOpType());
  return (def && def->fusible) || ops.contains(node.getOpType());
}

/// Bytes (at `dtype`, the whole call) of the activations the backward pass
/// of nodes [first, last] keeps: each op keeps what its gradient needs
/// (backwardKeeps); a chain of elementwise ops in which each feeds only the
/// next is one fused kernel that keeps the chain's activation inputs when
/// any of its ops needs data; a tensor kept by several ops counts once.
/// `split[i - first]` marks the ops tensor parallelism splits; `splitBytes`
/// gets the part of the result that lies in values it shards: outputs of a
/// split product whose activation input is whole (column-parallel) or of
/// an attention product, and everything computed from them until a split
/// product with a weight reads them (row-parallel: its output is reduced).
struct Kept {
  double bytes = 0, splitBytes = 0;
};

/// Elementwise chains as one kernel (ExtractOptions::fusedElementwise): an
/// elementwise op whose one result feeds only another elementwise op of the
/// layer launches nothing of its own (the chain's last op launches it) and
/// neither writes that result nor has it read back. The groups are the
/// memory model's (keptBytes).
void fuseElementwiseCosts(const GraphInfo &info, int first, int last, double samples, DType dtype,
                          std::vector<OpCost> &ops) {
  llvm::DenseMap<Operation *, int> index;
  for (int i = first; i <= last; ++i)
    index[info.nodes[i]] = i;
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (!isElementwise(node) || info.isFolded(node) || node.getNumResults() != 1 ||
        ops[size_t(i - first)].launches <= 0)
      continue;
    Value out = node.getResult(0);
    if (!out.hasOneUse())
      continue;
    auto it = index.find(*out.getUsers().begin());
    if (it == index.end() || !isElementwise(cast<NodeOp>(info.nodes[it->second])) ||
        info.isFolded(info.nodes[it->second]))
      continue;
    double bytes = valueBytes(out.getType(), dtype) / samples;
    OpCost &producer = ops[size_t(i - first)], &consumer = ops[size_t(it->second - first)];
    producer.launches = 0;
    producer.bytesPerSample = std::max(0.0, producer.bytesPerSample - bytes);
    consumer.bytesPerSample = std::max(0.0, consumer.bytesPerSample - bytes);
  }
}
Kept keptBytes(const GraphInfo &info, int first, int last, DType dtype,
               const std::vector<bool> &split,
               const std::vector<AttentionChain> &fused = {}) {
  // Values a fused attention kernel never writes are never kept; it keeps
  // its softmax statistics instead (fp32, one per row of the scores).
  llvm::DenseSet<Value> away = fusedAwayValues(info, fused);
  llvm::DenseMap<Operation *, int> index;
  for (int i = first; i <= last; ++i)
    index[info.nodes[i]] = i;
  // Fusion groups: union a producer into its only consumer.
  std::vector<int> parent(last - first + 1);
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return parent[x] == x ? x : parent[x] = find(parent[x]);
  };
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (!isElementwise(node) || info.isFolded(node) || node.getNumResults() != 1)
      continue;
    Value out = node.getResult(0);
    if (!out.hasOneUse())
      continue;
    Operation *user = *out.getUsers().begin();
    auto it = index.find(user);
    if (it == index.end() || !isElementwise(cast<NodeOp>(user)))
      continue;
    parent[find(i - first)] = find(it->second - first);
  }
  // Which groups need data, and the values each group reads from outside.
  std::vector<bool> needsData(parent.size(), false);
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (!info.isFolded(node) && isElementwise(node) &&
        backwardKeeps(node, info) != Keeps::Nothing)
      needsData[find(i - first)] = true;
  }
  llvm::DenseSet<Value> sharded;
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    bool anySharded = false, hasWeight = false;
    for (Value in : node.getInputs()) {
      anySharded |= sharded.contains(in);
      hasWeight |= info.kind(in) != ValueKind::Activation;
    }
    bool out = split[i - first] && hasWeight ? !anySharded : anySharded || split[i - first];
    if (out)
      for (Value r : node.getResults())
        sharded.insert(r);
  }
  llvm::DenseSet<Value> kept;
  double maskBytes = 0, maskSplit = 0;
  auto keep = [&](Value v) {
    if (info.kind(v) == ValueKind::Activation && !away.contains(v))
      kept.insert(v);
  };
  for (int i = first; i <= last; ++i) {
    NodeOp node = info.nodes[i];
    if (info.isFolded(node))
      continue;
    int group = find(i - first);
    if (isElementwise(node)) {
      if (!needsData[group])
        continue;
      for (Value in : node.getInputs()) {
        auto def = in.getDefiningOp();
        auto it = def ? index.find(def) : index.end();
        if (it == index.end() || find(it->second - first) != group)
          keep(in);
      }
      continue;
    }
    switch (backwardKeeps(node, info)) {
    case Keeps::Nothing:
      break;
    case Keeps::Inputs:
      for (Value in : node.getInputs())
        keep(in);
      break;
    case Keeps::Output:
      for (Value out : node.getResults())
        keep(out);
      break;
    case Keeps::Mask:
      for (Value out : node.getResults())
        if (info.kind(out) == ValueKind::Activation && !away.contains(out))
          if (auto t = dyn_cast<ShapedType>(out.getType()); t && t.hasStaticShape()) {
            maskBytes += double(t.getNumElements());
            if (sharded.contains(out))
              maskSplit += double(t.getNumElements());
          }
      break;
    }
  }
  Kept result{maskBytes, maskSplit};
  for (const AttentionChain &c : fused) {
    result.bytes += 4 * c.statisticsElements;
    if (sharded.contains(c.scoresValue))
      result.splitBytes += 4 * c.statisticsElements;
  }
  for (Value v : kept) {
    double b = valueBytes(v.getType(), dtype);
    result.bytes += b;
    if (sharded.contains(v))
      result.splitBytes += b;
  }
  return result;
}

} // namespace

llvm::Expected<ModelCost> extractModelCost(GraphOp graph, const ExtractOptions &options) {
  GraphInfo info(graph, options.samples);
  if (auto bad = info.findNonStatic())
    return failure(graph, bad->second);
  auto ranges = readLayers(info);
  if (!ranges)
    return ranges.takeError();
  DType dtype = options.dtype.value_or(graphDType(info));
  double samples = double(std::max<int64_t>(info.samples, 1));

  ModelCost model;
  model.graphName = graph.getSymName().str();
  model.dtype = dtype;
  model.boundSamples = info.samples;
  std::vector<OpCost> costs;
  for (NodeOp node : info.nodes) {
    costs.push_back(computeOpCost(node, info, dtype));
    model.nodeNames.push_back(costs.back().name);
  }
  model.inputBytesPerSample =
      activationBytes(graph.getBody().front().getArguments(), info, dtype) /
      samples;

  std::vector<int> layerOf(info.nodes.size(), 0);
  for (auto [l, r] : llvm::enumerate(*ranges))
    for (int i = r.first; i <= r.last; ++i)
      layerOf[i] = int(l);

  for (const LayerRange &r : *ranges) {
    LayerCost layer;
    layer.name = r.name;
    layer.firstNode = r.first;
    layer.lastNode = r.last;
    double bigFlops = 0;  // MatMuls by a weight worth splitting
    // For the memory model: Megatron's split points (the weight MatMuls,
    // and the attention products when those are split).
    std::vector<bool> splitOps;
    std::vector<size_t> attentionOps;
    std::vector<AttentionChain> chains;
    if (options.fusedAttention)
      chains = findAttentionChains(info, r.first, r.last);
    llvm::DenseSet<int> fusedAway = fusedAwayNodes(chains);
    llvm::DenseSet<Value> neverWritten = fusedAwayValues(info, chains);
    llvm::DenseMap<int, int> chainOfOutput;  // P·V node -> its Q·Kᵀ node
    for (const AttentionChain &c : chains)
      chainOfOutput[c.output] = c.scores;
    for (int i = r.first; i <= r.last; ++i) {
      NodeOp node = info.nodes[i];
      const OpCost &cost = costs[i];
      layer.ops.push_back(cost);
      if (cost.launches > 0 && !fusedAway.contains(i)) {
        double out = activationBytes(node.getResults(), info, dtype);
        layer.largestActivationBytesPerSample =
            std::max(layer.largestActivationBytesPerSample, out / samples);
        double in = 0;
        for (Value v : node.getInputs())
          if (info.kind(v) == ValueKind::Activation && !neverWritten.contains(v))
            in += valueBytes(v.getType(), dtype);
        if (auto it = chainOfOutput.find(i); it != chainOfOutput.end())
          in += activationBytes(info.nodes[it->second].getInputs(), info, dtype);  // Q and K
        layer.largestInOutBytesPerSample = std::max(layer.largestInOutBytesPerSample, (in + out) / samples);
      }
      auto w = matmulWeightBytes(node, info, dtype);
      bool big = w && *w >= options.tensorParallelMinWeightBytes;
      if (big)
        bigFlops += cost.flopsPerSample;
      splitOps.push_back(big);
      bool fused = node.getDomain().empty() && node.getOpType() == "Attention";
      if (fused || isActivationProduct(node, info))
        attentionOps.push_back(splitOps.size() - 1);
      // KV cache: the keys and values an attention reads.
      if (fused && node.getInputs().size() >= 3) {
        if (node.getNumResults() >= 3)
          layer.kvCacheBytesPerSample +=
              (valueBytes(node.getResult(1).getType(), dtype) +
               valueBytes(node.getResult(2).getType(), dtype)) / samples;
        else
          layer.kvCacheBytesPerSample +=
              (valueBytes(node.getInputs()[1].getType(), dtype) +
               valueBytes(node.getInputs()[2].getType(), dtype)) / samples;
      } else if (node.getDomain() == "com.microsoft" && node.getOpType() == "Attention" &&
                 node.getNumResults() >= 2) {
        // onnxruntime's fused Attention: `present` holds the keys and values
        // of every position ([2, batch, heads, past + sequence, head size]).
        layer.kvCacheBytesPerSample += valueBytes(node.getResult(1).getType(), dtype) / samples;
      } else if (isActivationProduct(node, info) && feedsSoftmax(node.getResult(0))) {
        // Q K^T: K is the second operand; V has as many elements.
        layer.kvCacheBytesPerSample += 2 * cachedBytes(node.getInputs()[1], dtype) / samples;
      }
    }
    fuseAttentionCosts(info, chains, r.first, layer.ops, dtype);
    if (options.fusedElementwise)
      fuseElementwiseCosts(info, r.first, r.last, samples, dtype, layer.ops);
    double flops = layer.flopsPerSample();
    layer.outputBytesPerSample = activationBytes(liveAcross(info, r.last), info, dtype) / samples;
    // Tensor parallelism as the runtime runs it: what runs split is exactly
    // the units (in training an LM head splits by vocabulary with its loss);
    // the rest runs whole on every rank.
    layer.tensorParallelUnits = findTensorParallelUnits(info, r.first, r.last);
    if (options.training)
      addVocabHead(info, r.first, r.last, layer.tensorParallelUnits);
    double splitFlops = 0;
    for (OpCost &op : layer.ops)
      op.tensorParallelSplit = false;
    for (auto [u, unit] : llvm::enumerate(layer.tensorParallelUnits))
      for (const TensorParallelNode &n : unit.nodes) {
        OpCost &op = layer.ops[size_t(n.node - r.first)];
        op.tensorParallelUnit = int(u);
        splitFlops += op.flopsPerSample;
      }
    layer.tensorParallelFraction = bigFlops > 0 && flops > 0 ? std::min(1.0, splitFlops / flops) : 0;
    // What the backward keeps (Korthikanti et al.), the split part divided
    // by the tensor-parallel degree: keptBytes follows the shards from the
    // split points (a column MatMul makes its output a shard, a row MatMul
    // makes it whole again; what runs between inherits).
    if (bigFlops > 0)
      for (size_t k : attentionOps)
        splitOps[k] = true;
    Kept kept = keptBytes(info, r.first, r.last, dtype, splitOps, chains);
    layer.stashBytesPerSample = kept.bytes / samples;
    layer.stashSplitBytesPerSample = kept.splitBytes / samples;
    model.layers.push_back(std::move(layer));
  }

  for (const Parameter &p : info.parameters) {
    LayerCost &layer = model.layers[layerOf[p.firstUser]];
    layer.parameters += p.elements;
    layer.parameterBytes += valueBytes(p.value.getType(), dtype);
    if (std::optional<LayerCost::Embedding> e = embeddingTable(p, info, samples))
      layer.embeddings.push_back(std::move(*e));
  }
  // Tied parameters: read (directly or through folded ops) by a layer that
  // does not own them.
  llvm::DenseMap<Value, size_t> paramIndex;
  for (auto [k, p] : llvm::enumerate(info.parameters))
    paramIndex[p.value] = k;
  for (auto [index, r] : llvm::enumerate(*ranges)) {
    size_t l = index; // C++17 lambdas cannot capture structured bindings
    llvm::DenseSet<size_t> seen;
    std::function<void(Value)> visit = [&](Value v) {
      if (auto it = paramIndex.find(v); it != paramIndex.end()) {
        const Parameter &p = info.parameters[it->second];
        if (layerOf[p.firstUser] != int(l) && seen.insert(it->second).second)
          model.layers[l].tiedParameters.push_back({layerOf[p.firstUser], p.elements});
        return;
      }
      auto node = dyn_cast_or_null<NodeOp>(v.getDefiningOp());
      if (node && info.kind(v) == ValueKind::Constant)
        for (Value in : node.getInputs())
          visit(in);
    };
    for (int i = r.first; i <= r.last; ++i)
      if (!info.isFolded(info.nodes[i]))
        for (Value in : info.nodes[i].getInputs())
          if (info.kind(in) == ValueKind::Constant)
            visit(in);
  }
  for (const LayerCost &layer : model.layers) {
    model.parameters += layer.parameters;
    model.parameterBytes += layer.parameterBytes;
  }
  return model;
}

} // namespace hetplan::cost
