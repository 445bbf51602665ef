//===- LayerGrouping.cpp - cut a graph into layers ------------------------===//

#include "passes/cost/LayerGrouping.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace hetplan::het;

namespace hetplan::cost {

namespace {

/// A value read in the same way by several nodes far apart (an attention
/// mask added in every block, an encoder's output projected in every decoder
/// block) is carried along by every stage; it does not say where a block
/// ends, so the count of live values ignores it. A residual stream is read by
/// different ops (a norm, then the residual Add) within one block.
bool isBroadcastValue(const ValueSpan &s, int numNodes) {
  return s.users >= 2 && s.uniformUsers &&
         3 * (std::min(s.lastUse, numNodes) - s.def) >= numNodes;
}

using Signature = std::vector<unsigned>;

unsigned editDistance(const Signature &a, const Signature &b) {
  std::vector<unsigned> prev(b.size() + 1), cur(b.size() + 1);
  std::iota(prev.begin(), prev.end(), 0u);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = unsigned(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// Two segments play the same role when their op sequences are equal or
/// differ in at most a quarter of their ops (a ResNet block with a
/// projection shortcut is a block without one plus Conv + BatchNorm).
bool similar(const Signature &a, const Signature &b) {
  if (a == b)
    return true;
  size_t lo = std::min(a.size(), b.size()), hi = std::max(a.size(), b.size());
  if (lo < 2 || 4 * (hi - lo) > hi || hi > 4000)
    return false;
  return 4 * editDistance(a, b) <= hi;
}

/// The longest common prefix of the names, cut at a '.', '/' or ':'
/// boundary, without leading/trailing separators ("h.3.attn.qkv",
/// "h.3.mlp.c_fc" -> "h.3").
std::string commonPrefix(ArrayRef<StringRef> names) {
  if (names.empty())
    return "";
  auto isSep = [](char c) { return c == '.' || c == '/' || c == ':'; };
  StringRef first = names.front();
  size_t len = first.size();
  for (StringRef n : names.drop_front()) {
    size_t i = 0;
    while (i < len && i < n.size() && n[i] == first[i])
      ++i;
    len = i;
  }
  // Back off to a component boundary in every name.
  auto boundary = [&](size_t at) {
    return llvm::all_of(names, [&](StringRef n) { return at == n.size() || isSep(n[at]); });
  };
  while (len > 0 && !boundary(len))
    --len;
  StringRef prefix = first.take_front(len);
  while (!prefix.empty() && isSep(prefix.front()))
    prefix = prefix.drop_front();
  while (!prefix.empty() && isSep(prefix.back()))
    prefix = prefix.drop_back();
  return prefix.str();
}

int componentCount(StringRef prefix) {
  if (prefix.empty())
    return 0;
  return 1 + int(llvm::count_if(prefix, [](char c) { return c == '.' || c == '/' || c == ':'; }));
}

struct Grouper {
  const GraphInfo &info;
  int numNodes;
  std::vector<std::pair<int, int>> segments;  // node ranges, inclusive
  std::vector<Signature> signatures;

  struct Layer {
    int firstSeg, lastSeg;  // inclusive
    bool unit;
  };
  std::vector<Layer> layers;

  /// Activations crossing each cut (between nodes c and c+1).
  std::vector<int> counts;

  explicit Grouper(const GraphInfo &info)
      : info(info), numNodes(int(info.nodes.size())), counts(liveCounts()) {}

  std::vector<StringRef> namesOf(int first, int last) const {
    std::vector<StringRef> names;
    for (int i = first; i <= last; ++i) {
      NodeOp node = info.nodes[i];
      if (info.isFolded(node))
        continue;
      if (auto name = node.getName(); name && !name->empty())
        names.push_back(*name);
    }
    return names;
  }

  /// The live counts at each cut, ascending and distinct (ignoring cuts
  /// nothing crosses).
  std::vector<int> levels() const {
    std::vector<int> out;
    for (int c : counts)
      if (c >= 1)
        out.push_back(c);
    llvm::sort(out);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  std::vector<int> liveCounts() const {
    int n = numNodes;
    // Live across cut c (between nodes c and c+1) when def <= c < the last
    // node reading it: a graph output leaves from the stage making it, so
    // a KV cache's presents do not mark every later cut.
    std::vector<int> count(std::max(n, 1), 0);
    for (const ValueSpan &s : info.spans) {
      if (isBroadcastValue(s, n))
        continue;
      int end = std::min(s.lastNodeUse, n - 1);
      if (s.def < end) {
        ++count[s.def];
        --count[end];
      }
    }
    for (int c = 1; c < n; ++c)
      count[c] += count[c - 1];
    count.resize(std::max(n - 1, 0));
    return count;
  }

  /// Cuts wherever at most `level` activations (>= 1) cross.
  void cut(int level) {
    int n = numNodes;
    segments.clear();
    signatures.clear();
    layers.clear();
    int start = 0;
    for (int c = 0; c < n - 1; ++c)
      if (counts[c] >= 1 && counts[c] <= level) {
        segments.push_back({start, c});
        start = c + 1;
      }
    if (start < n)
      segments.push_back({start, n - 1});

    llvm::StringMap<unsigned> ids;
    for (auto [first, last] : segments) {
      Signature sig;
      for (int i = first; i <= last; ++i) {
        NodeOp node = info.nodes[i];
        if (info.isFolded(node))
          continue;
        std::string key = (node.getDomain() + ":" + node.getOpType()).str();
        sig.push_back(ids.try_emplace(key, unsigned(ids.size())).first->second);
      }
      signatures.push_back(std::move(sig));
    }
    // A segment of folded nodes only (a shape computation between two cuts
    // with the same live set) joins the segment after it.
    for (size_t i = 0; i + 1 < segments.size();) {
      if (signatures[i].empty()) {
        segments[i + 1].first = segments[i].first;
        segments.erase(segments.begin() + i);
        signatures.erase(signatures.begin() + i);
      } else {
        ++i;
      }
    }
    if (segments.size() > 1 && signatures.back().empty()) {
      segments[segments.size() - 2].second = segments.back().second;
      segments.pop_back();
      signatures.pop_back();
    }
  }

  struct Run {
    int period = 0, start = 0, length = 0;
    int coverage() const { return period ? (length / period) * period : 0; }
  };

  /// Non-folded nodes of segments [first, first + count).
  int opCount(int first, int count) const {
    int ops = 0;
    for (int k = first; k < first + count; ++k)
      ops += int(signatures[k].size());
    return ops;
  }

  /// The longest run of similar units; units of fewer than `minOps` ops
  /// do not count.
  Run bestRun(int lo, int hi, int minOps) const {
    Run best;
    int k = hi - lo;
    for (int p = 1; 2 * p <= k; ++p) {
      int i = lo;
      while (i + p < hi) {
        if (!similar(signatures[i], signatures[i + p])) {
          ++i;
          continue;
        }
        int a = i;
        while (i + p < hi && similar(signatures[i], signatures[i + p]))
          ++i;
        Run run{p, a, i + p - a};
        if (run.length / p >= 2 && run.coverage() > best.coverage() && opCount(a, p) >= minOps)
          best = run;
      }
    }
    return best;
  }

  /// How well units of `period` segments starting at `start` follow the
  /// node names: the name components their nodes share, summed.
  int nameScore(int start, int units, int period) const {
    int score = 0;
    for (int u = 0; u < units; ++u) {
      int first = segments[start + u * period].first;
      int last = segments[start + (u + 1) * period - 1].second;
      score += componentCount(commonPrefix(namesOf(first, last)));
    }
    return score;
  }

  void build(int lo, int hi, bool top) {
    if (lo >= hi)
      return;
    // Before and after the blocks, a repeat of single ops (the two Casts
    // of input ids and positions) is not a block.
    Run run = bestRun(lo, hi, top ? 1 : 2);
    if (!run.period) {
      if (top) {
        for (int s = lo; s < hi; ++s)
          layers.push_back({s, s, false});
      } else {
        layers.push_back({lo, hi - 1, false});
      }
      return;
    }
    int units = run.length / run.period;
    int spare = run.length - units * run.period;
    int phase = 0, bestScore = -1;
    for (int r = 0; r <= spare; ++r) {
      int score = nameScore(run.start + r, units, run.period);
      if (score > bestScore)
        bestScore = score, phase = r;
    }
    int first = run.start + phase;
    int end = first + units * run.period;
    build(lo, first, false);
    for (int u = 0; u < units; ++u)
      layers.push_back({first + u * run.period, first + (u + 1) * run.period - 1, true});
    build(end, hi, false);
  }

  /// Nodes inside repeated blocks.
  int unitNodes() const {
    int nodes = 0;
    for (const Layer &l : layers)
      if (l.unit)
        nodes += segments[l.lastSeg].second - segments[l.firstSeg].first + 1;
    return nodes;
  }

  std::vector<LayerRange> ranges() const {
    std::vector<LayerRange> out;
    int firstUnit = -1, lastUnit = -1;
    for (auto [i, l] : llvm::enumerate(layers))
      if (l.unit) {
        if (firstUnit < 0)
          firstUnit = int(i);
        lastUnit = int(i);
      }
    int block = 0;
    for (auto [i, l] : llvm::enumerate(layers)) {
      LayerRange r;
      r.first = segments[l.firstSeg].first;
      r.last = segments[l.lastSeg].second;
      if (l.unit)
        r.name = "block" + std::to_string(block++);
      else if (firstUnit >= 0 && int(i) < firstUnit)
        r.name = "stem";
      else if (firstUnit >= 0 && int(i) > lastUnit)
        r.name = "head";
      else
        r.name = "layer" + std::to_string(i);
      out.push_back(r);
    }
    nameFromNodes(out);
    return out;
  }

  /// Layers whose nodes share a name prefix ("h.3", "encoder.layer.7") take
  /// it, unless two layers would share it.
  void nameFromNodes(std::vector<LayerRange> &out) const {
    std::vector<std::string> prefixes;
    llvm::StringMap<int> uses;
    for (const LayerRange &r : out) {
      prefixes.push_back(commonPrefix(namesOf(r.first, r.last)));
      ++uses[prefixes.back()];
    }
    llvm::StringMap<int> taken;
    for (const LayerRange &r : out)
      ++taken[r.name];
    for (auto [r, prefix] : llvm::zip(out, prefixes))
      if (!prefix.empty() && uses[prefix] == 1 && !taken.count(prefix))
        r.name = prefix;
  }
};

double layerWeight(const GraphInfo &info, const LayerRange &r) {
  double flops = 0;
  for (int i = r.first; i <= r.last; ++i)
    flops += computeOpCost(info.nodes[i], info, DType::FP32).flopsPerSample;
  return flops + (r.last - r.first + 1); // node count breaks ties without shapes
}

} // namespace

std::vector<LayerRange> groupLayers(const GraphInfo &info, const GroupingOptions &options) {
  if (info.nodes.empty())
    return {};
  Grouper g(info);
  // Cut where the fewest activations cross. When that finds no repeated
  // block covering half the nodes, allow a few more crossing values: fused
  // exports (onnxruntime's SkipLayerNormalization hands on the normalized
  // value and the residual sum) carry two or three values between blocks.
  std::vector<int> levels = g.levels();
  if (levels.empty())
    levels.push_back(std::numeric_limits<int>::max());
  std::vector<LayerRange> layers;
  for (size_t k = 0; k < levels.size() && k < 3; ++k) {
    g.cut(levels[k]);
    g.build(0, int(g.segments.size()), /*top=*/true);
    std::vector<LayerRange> found = g.ranges();
    if (k == 0)
      layers = found;
    if (2 * g.unitNodes() >= g.numNodes) {
      layers = std::move(found);
      break;
    }
  }

  if (options.maxLayers > 0 && int(layers.size()) > options.maxLayers) {
    std::vector<double> weight;
    for (const LayerRange &r : layers)
      weight.push_back(layerWeight(info, r));
    while (int(layers.size()) > options.maxLayers) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < layers.size(); ++i)
        if (weight[i] + weight[i + 1] < weight[best] + weight[best + 1])
          best = i;
      layers[best].name += "+" + layers[best + 1].name;
      layers[best].last = layers[best + 1].last;
      weight[best] += weight[best + 1];
      layers.erase(layers.begin() + best + 1);
      weight.erase(weight.begin() + best + 1);
    }
  }
  return layers;
}

std::vector<Value> liveAcross(const GraphInfo &info, int cut) {
  std::vector<Value> live;
  for (const ValueSpan &s : info.spans)
    if (s.def <= cut && s.lastUse > cut)
      live.push_back(s.value);
  return live;
}

llvm::Expected<std::vector<LayerRange>> readLayers(const GraphInfo &info) {
  auto fail = [&](const Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   ("graph @" + info.graph.getSymName() + ": " + why).str());
  };
  auto array = info.graph->getAttrOfType<ArrayAttr>("het.layers");
  if (!array)
    return fail("no het.layers; run het-group-layers first");
  std::vector<LayerRange> layers;
  int next = 0;
  for (Attribute a : array) {
    auto dict = dyn_cast<DictionaryAttr>(a);
    auto name = dict ? dict.getAs<StringAttr>("name") : StringAttr();
    auto first = dict ? dict.getAs<IntegerAttr>("first") : IntegerAttr();
    auto last = dict ? dict.getAs<IntegerAttr>("last") : IntegerAttr();
    if (!name || !first || !last)
      return fail("het.layers entries must be {name, first, last}");
    LayerRange r{name.str(), int(first.getInt()), int(last.getInt())};
    if (r.first != next || r.last < r.first || r.last >= int(info.nodes.size()))
      return fail(llvm::formatv("het.layers entry '{0}' [{1}, {2}] does not continue the "
                                "node order at {3} (of {4} nodes); rerun het-group-layers",
                                r.name, r.first, r.last, next, info.nodes.size())
                      .str());
    next = r.last + 1;
    layers.push_back(r);
  }
  if (next != int(info.nodes.size()))
    return fail(llvm::formatv("het.layers cover {0} of {1} nodes; rerun het-group-layers",
                              next, info.nodes.size())
                    .str());
  return layers;
}

} // namespace hetplan::cost
