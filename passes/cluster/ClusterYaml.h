//===- ClusterYaml.h - YAML reading for catalogs and clusters ---*- C++ -*-===//
//
// Internal to passes/cluster. llvm::yaml::Stream parses lazily and lets each
// collection be walked once, so the document is first copied into a small
// tree (YamlValue) that keeps every node's location; the readers then look
// fields up in any order and name FILE:LINE:COL in each error.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_PASSES_CLUSTER_CLUSTERYAML_H
#define HETPLAN_PASSES_CLUSTER_CLUSTERYAML_H

#include "passes/cluster/DeviceCatalog.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hetplan::cluster::detail {

struct YamlField;

/// One YAML node. JSON is read the same way (it is YAML flow syntax).
struct YamlValue {
  enum Kind { Null, Scalar, Mapping, Sequence };
  Kind kind = Null;
  std::string scalar;              // Scalar: the unquoted, unescaped text
  std::vector<YamlField> fields;   // Mapping, in file order
  std::vector<YamlValue> items;    // Sequence
  llvm::SMLoc loc;

  bool isNull() const { return kind == Null; }
  /// The field `key`, or null when absent.
  const YamlValue *get(llvm::StringRef key) const;
};

struct YamlField {
  std::string key;
  llvm::SMLoc keyLoc;
  YamlValue value;
};

/// Parses one YAML document and reports the first error as
/// `BUFFER:LINE:COL: message`. Every check returns false once an error is
/// recorded, so callers stop at the first problem.
class YamlReader {
public:
  YamlReader(llvm::StringRef text, llvm::StringRef bufferName);

  /// The document's root, or null (with an error) when the text is not
  /// YAML, holds no document, or holds more than one.
  const YamlValue *root() const { return rootValue.get(); }

  bool failed() const { return !firstError.empty(); }
  llvm::Error takeError();

  /// Records `message` at `loc` (first error wins); returns false.
  bool error(llvm::SMLoc loc, const llvm::Twine &message);
  bool error(const YamlValue &v, const llvm::Twine &message) {
    return error(v.loc, message);
  }

  /// Checks that `v` is a mapping whose keys are all in `known` and appear
  /// once. `where` ends the messages, e.g. "in device 'T4'".
  bool checkMapping(const YamlValue &v, llvm::ArrayRef<llvm::StringRef> known,
                    llvm::StringRef what, llvm::StringRef where);
  /// Error `missing field 'key' where` unless `map` has `key`.
  bool require(const YamlValue &map, llvm::StringRef key,
               llvm::StringRef where);

  bool readString(const YamlValue &v, llvm::StringRef field,
                  std::string &out);
  bool readNumber(const YamlValue &v, llvm::StringRef field, double &out);
  /// A number > 0 (or >= 0 with allowZero).
  bool readPositive(const YamlValue &v, llvm::StringRef field, double &out,
                    bool allowZero = false);
  bool readInt(const YamlValue &v, llvm::StringRef field, int64_t &out);
  bool readStringList(const YamlValue &v, llvm::StringRef field,
                      std::vector<std::string> &out);

private:
  llvm::SourceMgr sourceMgr;
  std::string bufferId;
  std::string firstError;
  std::unique_ptr<YamlValue> rootValue;
};

/// Reads the fields of one device mapping into `type`, on top of what `type`
/// already holds (a catalog entry when overriding). `given` receives the keys
/// present. Checks types and ranges, not completeness (see requireComplete).
/// An `achieved` mapping (matrix, matrix_half_gflop, memory, kernel_us,
/// micro_batch_us, source) into `achieved`; errors say `where`.
bool readAchieved(YamlReader &reader, const YamlValue &value, const std::string &where, Achieved &achieved);

bool readDeviceFields(YamlReader &reader, const YamlValue &map,
                      DeviceType &type, llvm::StringSet<> &given);

/// Error unless every field a new device type needs is in `given`. `strict`
/// (the shipped catalog) requires every field, sources included.
bool requireComplete(YamlReader &reader, const YamlValue &map,
                     const llvm::StringSet<> &given, llvm::StringRef where,
                     bool strict);

/// The catalog's `stacks:` list: each entry a new stack with every field
/// (strict: the shipped catalog, `source` included) or, in a cluster file,
/// an override of the named stack's given fields.
bool readStacks(YamlReader &reader, const YamlValue &list, DeviceCatalog &catalog,
                bool strict);
/// A cluster file's `stack:`: a name the catalog knows, or a mapping that
/// overrides fields of a known stack or defines a new one (then every field
/// but `source` is required). `selected` gets the stack's name.
bool readStackSelection(YamlReader &reader, const YamlValue &value, DeviceCatalog &catalog,
                        std::string &selected);

} // namespace hetplan::cluster::detail

#endif
