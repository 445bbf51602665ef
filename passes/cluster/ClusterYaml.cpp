//===- ClusterYaml.cpp - YAML reading for catalogs and clusters -----------===//

#include "passes/cluster/ClusterYaml.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/YAMLParser.h"

#include <cmath>

using namespace llvm;

namespace hetplan::cluster::detail {

const YamlValue *YamlValue::get(StringRef key) const {
  for (const YamlField &f : fields)
    if (f.key == key)
      return &f.value;
  return nullptr;
}

namespace {

/// Copies a yaml::Node into a YamlValue. Returns false on anything the
/// readers do not accept (aliases); scanner errors arrive through the
/// SourceMgr's handler instead.
/// The parser starts a flow collection ("[...]", "{...}") at its first
/// entry; errors read better at the bracket.
SMLoc bracketStart(SMLoc loc, StringRef text) {
  const char *p = loc.getPointer();
  if (!p || p <= text.begin() || p > text.end())
    return loc;
  const char *q = p - 1;
  while (q > text.begin() && (*q == ' ' || *q == '\t' || *q == '\n' ||
                              *q == '\r'))
    --q;
  return *q == '[' || *q == '{' ? SMLoc::getFromPointer(q) : loc;
}

/// Deepest nesting of mappings/sequences accepted. Cluster files and
/// catalogs nest 5 deep; the limit stops a hostile file (nested 100,000
/// deep) from overflowing the stack of this recursive copy.
constexpr int kMaxYamlDepth = 64;

bool convert(yaml::Node *node, YamlValue &out, YamlReader &reader,
             StringRef text, int depth = 0) {
  if (!node) {
    out.kind = YamlValue::Null;
    return true;
  }
  out.loc = node->getSourceRange().Start;
  if (isa<yaml::MappingNode, yaml::SequenceNode>(node)) {
    out.loc = bracketStart(out.loc, text);
    if (depth >= kMaxYamlDepth)
      return reader.error(out.loc, "nested more than " +
                                       Twine(kMaxYamlDepth) +
                                       " levels deep (not a cluster file)");
  }
  switch (node->getType()) {
  case yaml::Node::NK_Null:
    out.kind = YamlValue::Null;
    return true;
  case yaml::Node::NK_Scalar: {
    auto *scalar = cast<yaml::ScalarNode>(node);
    SmallString<64> storage;
    StringRef value = scalar->getValue(storage);
    StringRef raw = scalar->getRawValue();
    bool quoted = raw.starts_with("\"") || raw.starts_with("'");
    // YAML's null spellings; a quoted "null" stays a string.
    if (!quoted && (value == "null" || value == "Null" || value == "NULL" ||
                    value == "~")) {
      out.kind = YamlValue::Null;
      return true;
    }
    out.kind = YamlValue::Scalar;
    out.scalar = value.str();
    return true;
  }
  case yaml::Node::NK_BlockScalar:
    out.kind = YamlValue::Scalar;
    out.scalar = cast<yaml::BlockScalarNode>(node)->getValue().str();
    return true;
  case yaml::Node::NK_KeyValue:
    return reader.error(out.loc, "unexpected key/value pair");
  case yaml::Node::NK_Mapping: {
    out.kind = YamlValue::Mapping;
    for (yaml::KeyValueNode &kv : *cast<yaml::MappingNode>(node)) {
      YamlField field;
      yaml::Node *key = kv.getKey();
      if (!key)
        break;  // a scanner error, already reported
      field.keyLoc = key->getSourceRange().Start;
      auto *keyScalar = dyn_cast<yaml::ScalarNode>(key);
      if (!keyScalar)
        return reader.error(field.keyLoc, "keys must be plain strings");
      SmallString<64> storage;
      field.key = keyScalar->getValue(storage).str();
      if (!convert(kv.getValue(), field.value, reader, text, depth + 1))
        return false;
      if (field.value.isNull() && !field.value.loc.isValid())
        field.value.loc = field.keyLoc;
      out.fields.push_back(std::move(field));
    }
    return !reader.failed();
  }
  case yaml::Node::NK_Sequence: {
    out.kind = YamlValue::Sequence;
    for (yaml::Node &item : *cast<yaml::SequenceNode>(node)) {
      YamlValue value;
      if (!convert(&item, value, reader, text, depth + 1))
        return false;
      out.items.push_back(std::move(value));
    }
    return !reader.failed();
  }
  case yaml::Node::NK_Alias:
    return reader.error(out.loc, "YAML aliases (*name) are not supported");
  }
  return reader.error(out.loc, "unsupported YAML node");
}

} // namespace

YamlReader::YamlReader(StringRef text, StringRef bufferName)
    : bufferId(bufferName.str()) {
  // The scanner reports malformed YAML here; keep the first message.
  sourceMgr.setDiagHandler(
      [](const SMDiagnostic &diag, void *context) {
        auto *self = static_cast<YamlReader *>(context);
        self->error(diag.getLoc(), "malformed YAML: " + diag.getMessage());
      },
      this);
  yaml::Stream stream(MemoryBufferRef(text, bufferId), sourceMgr,
                      /*ShowColors=*/false);
  auto root = std::make_unique<YamlValue>();
  int documents = 0;
  for (yaml::Document &doc : stream) {
    yaml::Node *node = doc.getRoot();
    if (failed())
      return;
    if (++documents > 1) {
      error(node ? node->getSourceRange().Start : SMLoc(),
            "expected one YAML document, found more");
      return;
    }
    if (!convert(node, *root, *this, text))
      return;
  }
  if (failed())
    return;
  if (documents == 0 || root->isNull()) {
    error(SMLoc::getFromPointer(text.data()), "empty file");
    return;
  }
  rootValue = std::move(root);
}

bool YamlReader::error(SMLoc loc, const Twine &message) {
  if (failed())
    return false;
  std::string where = bufferId;
  if (loc.isValid() && sourceMgr.getNumBuffers() &&
      sourceMgr.FindBufferContainingLoc(loc)) {
    auto [line, col] = sourceMgr.getLineAndColumn(loc);
    where += ":" + std::to_string(line) + ":" + std::to_string(col);
  }
  firstError = where + ": " + message.str();
  return false;
}

Error YamlReader::takeError() {
  if (!failed())
    return Error::success();
  std::string text = std::move(firstError);
  firstError.clear();
  return createStringError(inconvertibleErrorCode(), text);
}

bool YamlReader::checkMapping(const YamlValue &v, ArrayRef<StringRef> known,
                              StringRef what, StringRef where) {
  if (failed())
    return false;
  if (v.kind != YamlValue::Mapping)
    return error(v, Twine("expected ") + what + " to be a mapping " + where);
  StringSet<> seen;
  for (const YamlField &f : v.fields) {
    if (!is_contained(known, StringRef(f.key))) {
      // Suggest the field meant when the key looks like a typo.
      std::string hint;
      unsigned best = 3;
      for (StringRef k : known) {
        unsigned d = StringRef(f.key).edit_distance(k, true, best);
        if (d < best) {
          best = d;
          hint = (" (did you mean '" + k + "'?)").str();
        }
      }
      return error(f.keyLoc,
                   "unknown field '" + f.key + "' " + where + hint);
    }
    if (!seen.insert(f.key).second)
      return error(f.keyLoc, "duplicate field '" + f.key + "' " + where);
  }
  return true;
}

bool YamlReader::require(const YamlValue &map, StringRef key,
                         StringRef where) {
  if (failed())
    return false;
  if (map.get(key))
    return true;
  return error(map, "missing field '" + key + "' " + where);
}

bool YamlReader::readString(const YamlValue &v, StringRef field,
                            std::string &out) {
  if (failed())
    return false;
  if (v.kind != YamlValue::Scalar || v.scalar.empty())
    return error(v, "'" + field + "' must be a non-empty string");
  out = v.scalar;
  return true;
}

bool YamlReader::readNumber(const YamlValue &v, StringRef field,
                            double &out) {
  if (failed())
    return false;
  double value;
  if (v.kind != YamlValue::Scalar ||
      StringRef(v.scalar).trim().getAsDouble(value) || !std::isfinite(value))
    return error(v, "'" + field + "' must be a number" +
                        (v.kind == YamlValue::Scalar
                             ? ", not '" + v.scalar + "'"
                             : std::string()));
  out = value;
  return true;
}

bool YamlReader::readPositive(const YamlValue &v, StringRef field,
                              double &out, bool allowZero) {
  double value;
  if (!readNumber(v, field, value))
    return false;
  if (value < 0 || (!allowZero && value == 0))
    return error(v, "'" + field + "' must be " +
                        (allowZero ? ">= 0" : "> 0") + ", not " + v.scalar);
  out = value;
  return true;
}

bool YamlReader::readInt(const YamlValue &v, StringRef field, int64_t &out) {
  if (failed())
    return false;
  int64_t value;
  if (v.kind != YamlValue::Scalar ||
      StringRef(v.scalar).trim().getAsInteger(10, value))
    return error(v, "'" + field + "' must be an integer" +
                        (v.kind == YamlValue::Scalar
                             ? ", not '" + v.scalar + "'"
                             : std::string()));
  out = value;
  return true;
}

bool YamlReader::readStringList(const YamlValue &v, StringRef field,
                                std::vector<std::string> &out) {
  if (failed())
    return false;
  if (v.kind != YamlValue::Sequence)
    return error(v, "'" + field + "' must be a list of strings");
  out.clear();
  for (const YamlValue &item : v.items) {
    std::string s;
    if (!readString(item, field, s))
      return false;
    out.push_back(std::move(s));
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Device entries
//===----------------------------------------------------------------------===//

static constexpr StringRef kDeviceFields[] = {
    "name",        "aliases",         "vendor",
    "kind",        "memory_gib",      "memory_bandwidth_gbs",
    "peak_tflops", "intra_node_link", "pcie",
    "tdp_watts",   "price_per_hour_usd", "sources",
    "achieved"};

bool readAchieved(YamlReader &r, const YamlValue &v, const std::string &where, Achieved &achieved) {
  static constexpr StringRef known[] = {"matrix", "matrix_half_gflop", "memory", "kernel_us",
                                        "micro_batch_us", "collective_us", "link", "source"};
  if (!r.checkMapping(v, known, "'achieved'", where))
    return false;
  for (const YamlField &a : v.fields) {
    if (a.key == "source") {
      if (!r.readString(a.value, a.key, achieved.source))
        return false;
      continue;
    }
    double x;
    if (!r.readPositive(a.value, a.key, x, /*allowZero=*/a.key == "kernel_us" || a.key == "micro_batch_us" ||
                                                 a.key == "matrix_half_gflop" || a.key == "collective_us"))
      return false;
    if ((a.key == "matrix" || a.key == "memory" || a.key == "link") && x > 1)
      return r.error(a.value, "'" + a.key + "' is a share of the peak (0-1] " + where);
    if (a.key == "matrix")
      achieved.matrix = x;
    else if (a.key == "matrix_half_gflop")
      achieved.matrixHalfGflop = x;
    else if (a.key == "memory")
      achieved.memory = x;
    else if (a.key == "micro_batch_us")
      achieved.microBatchUs = x;
    else if (a.key == "collective_us")
      achieved.collectiveUs = x;
    else if (a.key == "link")
      achieved.link = x;
    else
      achieved.kernelUs = x;
  }
  return true;
}

bool readDeviceFields(YamlReader &r, const YamlValue &map, DeviceType &type,
                      StringSet<> &given) {
  if (map.kind != YamlValue::Mapping)
    return r.error(map, "expected a device (a mapping with 'name', "
                        "'memory_gib', ...)");
  // The name first, so that every later message can say which device.
  if (!r.require(map, "name", "in device entry"))
    return false;
  std::string name;
  if (!r.readString(*map.get("name"), "name", name))
    return false;
  type.name = name;
  std::string where = "in device '" + name + "'";
  if (!r.checkMapping(map, kDeviceFields, "a device", where))
    return false;

  for (const YamlField &f : map.fields) {
    StringRef key = f.key;
    const YamlValue &v = f.value;
    given.insert(key);
    bool ok = true;
    if (key == "name") {
      continue;
    } else if (key == "aliases") {
      ok = r.readStringList(v, key, type.aliases);
    } else if (key == "vendor") {
      ok = r.readString(v, key, type.vendor);
    } else if (key == "kind") {
      std::string kind;
      ok = r.readString(v, key, kind);
      if (ok && kind == "gpu")
        type.kind = DeviceKind::GPU;
      else if (ok && kind == "cpu")
        type.kind = DeviceKind::CPU;
      else if (ok)
        ok = r.error(v, "'kind' must be gpu or cpu, not '" + kind + "' " +
                            where);
    } else if (key == "memory_gib") {
      ok = r.readPositive(v, key, type.memoryGiB);
    } else if (key == "memory_bandwidth_gbs") {
      ok = r.readPositive(v, key, type.memoryBandwidthGBs);
    } else if (key == "peak_tflops") {
      static constexpr StringRef known[] = {"fp32", "tf32", "fp16", "bf16",
                                            "int8"};
      ok = r.checkMapping(v, known, "'peak_tflops'", where);
      for (const YamlField &rate : v.fields) {
        if (!ok)
          break;
        auto &slot = type.peakTflops[size_t(*parseDType(rate.key))];
        if (rate.value.isNull()) {  // an override removes a fast path
          slot.reset();
          continue;
        }
        double tflops;
        ok = r.readPositive(rate.value, rate.key, tflops);
        slot = tflops;
      }
    } else if (key == "intra_node_link") {
      static constexpr StringRef known[] = {"kind", "bandwidth_gbs"};
      ok = r.checkMapping(v, known, "'intra_node_link'", where);
      if (const YamlValue *kind = v.get("kind"); ok && kind)
        ok = r.readString(*kind, "kind", type.intraNodeLink.kind);
      if (const YamlValue *bw = v.get("bandwidth_gbs"); ok && bw)
        ok = r.readPositive(*bw, "bandwidth_gbs",
                            type.intraNodeLink.bandwidthGBs);
      if (ok && (type.intraNodeLink.kind.empty() ||
                 type.intraNodeLink.bandwidthGBs <= 0))
        ok = r.error(v, "'intra_node_link' needs 'kind' and "
                        "'bandwidth_gbs' " + where);
    } else if (key == "pcie") {
      static constexpr StringRef known[] = {"generation", "bandwidth_gbs"};
      ok = r.checkMapping(v, known, "'pcie'", where);
      if (const YamlValue *gen = v.get("generation"); ok && gen) {
        int64_t generation;
        ok = r.readInt(*gen, "generation", generation);
        if (ok && (generation < 1 || generation > 7))
          ok = r.error(*gen, "'generation' must be a PCIe generation (1-7) " +
                                 where);
        type.pcie.generation = int(generation);
      }
      if (const YamlValue *bw = v.get("bandwidth_gbs"); ok && bw)
        ok = r.readPositive(*bw, "bandwidth_gbs", type.pcie.bandwidthGBs);
      if (ok && (type.pcie.generation == 0 || type.pcie.bandwidthGBs <= 0))
        ok = r.error(v, "'pcie' needs 'generation' and 'bandwidth_gbs' " +
                            where);
    } else if (key == "tdp_watts") {
      ok = r.readPositive(v, key, type.tdpWatts);
    } else if (key == "price_per_hour_usd") {
      if (v.isNull()) {
        type.pricePerHourUSD.reset();
      } else {
        double price;
        ok = r.readPositive(v, key, price, /*allowZero=*/true);
        type.pricePerHourUSD = price;
      }
    } else if (key == "sources") {
      ok = r.readStringList(v, key, type.sources);
    } else if (key == "achieved") {
      ok = readAchieved(r, v, where, type.achieved);
    }
    if (!ok)
      return false;
  }
  return true;
}

bool requireComplete(YamlReader &r, const YamlValue &map,
                     const StringSet<> &given, StringRef where, bool strict) {
  // A planner needs memory, speed and links; the rest has a default
  // (kind gpu) or is informative.
  static constexpr StringRef needed[] = {"memory_gib", "memory_bandwidth_gbs",
                                         "peak_tflops", "intra_node_link",
                                         "pcie"};
  for (StringRef key : strict ? ArrayRef<StringRef>(kDeviceFields)
                              : ArrayRef<StringRef>(needed))
    if (!given.contains(key) && key != "achieved")  // optional calibration
      return r.error(map, "missing field '" + key + "' " + where);
  // fp32 is the end of every fallback (DeviceType::peakFlops).
  const YamlValue *rates = map.get("peak_tflops");
  if (!rates->get("fp32") || rates->get("fp32")->isNull())
    return r.error(*rates, "missing field 'fp32' in 'peak_tflops' " + where);
  if (strict && map.get("sources")->items.empty())
    return r.error(*map.get("sources"), "'sources' is empty " + where);
  return true;
}

} // namespace hetplan::cluster::detail
