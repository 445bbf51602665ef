//===- Model.h - an ONNX model as the CPU runtime sees it -------*- C++ -*-===//
//
// loadModel reads an ONNX model file (protobuf) without MLIR: its nodes,
// attributes and weights. Initializers stored as raw_data are viewed in the
// parsed model (no second copy); ONNX external data files are memory-mapped
// and viewed. Errors are one line: `FILE: initializer 'NAME': what`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

namespace hetplan::runtime {

struct Graph;

struct Attribute {
  enum Kind { Undefined, Float, Int, String, TensorKind, Graph, Floats, Ints, Strings, Tensors, Graphs, Other };
  Kind kind = Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  // (qualified: the enumerator Graph hides the struct in here)
  std::shared_ptr<const runtime::Graph> g;                   // Graph: the parsed subgraph
  std::vector<std::shared_ptr<const runtime::Graph>> graphs; // Graphs
};

struct Node {
  std::string name, opType, domain;
  std::vector<std::string> inputs;  // "" for an omitted optional input
  std::vector<std::string> outputs; // "" for an omitted optional output
  std::map<std::string, Attribute> attrs;
  /// Values of enclosing scopes that the node's subgraphs (If branches,
  /// Loop/Scan bodies, recursively) read by name (ONNX lexical scoping):
  /// dependencies of the node besides `inputs`. Sorted; empty for nodes
  /// without subgraphs.
  std::vector<std::string> implicitInputs;

  bool has(const std::string &a) const { return attrs.count(a) != 0; }
  int64_t getInt(const std::string &a, int64_t def) const;
  float getFloat(const std::string &a, float def) const;
  std::string getString(const std::string &a, const std::string &def) const;
  std::vector<int64_t> getInts(const std::string &a, std::vector<int64_t> def = {}) const;
  std::vector<float> getFloats(const std::string &a, std::vector<float> def = {}) const;
  /// "'name' (OpType)"
  std::string describe() const;
  /// Calls f(name) for every value the node reads: inputs (non-empty) and
  /// implicitInputs.
  template <typename F> void forEachRead(F &&f) const {
    for (const auto &s : inputs)
      if (!s.empty()) f(s);
    for (const auto &s : implicitInputs) f(s);
  }
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::Undefined;
  bool isTensor = true; // false for sequence/map/optional values
  bool hasShape = false;
  std::vector<int64_t> shape; // -1 for unknown/symbolic dims
};

/// A subgraph (GRAPH/GRAPHS attribute: If's then_branch/else_branch, Loop's
/// and Scan's body): formal inputs and outputs in order, its nodes in a
/// topological order (by the values produced inside the graph), its own
/// initializers and value types. Names a node reads that the graph neither
/// declares nor produces come from the enclosing scopes.
struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::map<std::string, Tensor> initializers;
  std::vector<ValueInfo> inputs; // formal inputs, in order
  std::vector<ValueInfo> outputs;
  std::map<std::string, DType> valueTypes;
};

struct Model {
  std::string path;
  std::map<std::string, int64_t> opsets; // domain ("" = ai.onnx) -> version
  std::vector<Node> nodes;
  /// Initializers and the values of top-level Constant nodes (which are
  /// not nodes here, as in the compiler's het IR).
  std::map<std::string, Tensor> initializers;
  /// The names in `initializers` that Constant nodes define: constants of the
  /// graph, never trained and not written back as initializers.
  std::set<std::string> constants;
  std::vector<ValueInfo> inputs;  // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::map<std::string, DType> valueTypes; // every typed value (inputs, outputs, value_info)
  std::shared_ptr<const void> storage;     // keeps viewed weights alive

  int64_t opset(const std::string &domain = "") const;
};

/// Reads an ONNX model; throws std::runtime_error with one line on error.
/// `checkSha256`, when given, is called with the SHA-256 (hex) of the file's
/// bytes before they are parsed, hashed from the same mapping (the file is
/// read once); it throws to refuse the file.
Model loadModel(const std::string &path,
                const std::function<void(const std::string &)> &checkSha256 = {});
/// Reads an ONNX model from `size` bytes at `data` (copied: the caller may
/// free them after the call). `path` names the model in errors, and external
/// data is read relative to its folder.
Model parseModel(const void *data, size_t size, const std::string &path);
/// Writes `model` (read by loadModel) as one self-contained ONNX file at
/// `path`: every initializer inline (raw_data), those named in `replace`
/// with the given values (same shape and type; trained weights). Written to
/// a temporary file and renamed: a failure leaves no file. Throws one line.
void saveModel(const Model &model, const std::map<std::string, Tensor> &replace,
               const std::string &path);
/// Reads one serialized TensorProto (ONNX test data input_0.pb, ...).
Tensor loadTensorFile(const std::string &path, std::string *name = nullptr);

} // namespace hetplan::runtime
