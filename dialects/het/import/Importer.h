//===- Importer.h - the ONNX importer's internals --------------*- C++ -*-===//
//
// Internal to dialects/het/import: the Importer class (one ONNX model to
// het IR), declared here and defined by concern in ImportGraph.cpp,
// ImportTypes.cpp, ImportTensors.cpp and ImportAttributes.cpp; and libonnx
// shape inference in its worker process (ShapeInference.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_DIALECTS_HET_IMPORT_IMPORTER_H
#define HETPLAN_DIALECTS_HET_IMPORT_IMPORTER_H

#include "dialects/het/IR/HetOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include "onnx/onnx_pb.h"

#include <map>
#include <string>
#include <vector>

namespace hetplan::import::detail {

using namespace mlir;
using namespace hetplan::het;

/// Thrown inside the importer only; importOnnxBytes turns it into `error`.
struct ImportError {
  std::string message;
};

[[noreturn]] inline void fail(const std::string &message) {
  throw ImportError{message};
}

inline std::string canonicalDomain(const std::string &domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

/// A lexical scope of ONNX value names: a subgraph sees its parents' values.
struct Scope {
  Scope *parent = nullptr;
  llvm::StringMap<Value> values;
  llvm::StringMap<const onnx::TypeProto *> types;

  Value lookup(llvm::StringRef name) const {
    for (const Scope *s = this; s; s = s->parent) {
      auto it = s->values.find(name);
      if (it != s->values.end())
        return it->second;
    }
    return {};
  }
  const onnx::TypeProto *lookupType(llvm::StringRef name) const {
    for (const Scope *s = this; s; s = s->parent) {
      auto it = s->types.find(name);
      if (it != s->types.end())
        return it->second;
    }
    return nullptr;
  }
};

/// Runs libonnx's checker and shape inference on `model` in the worker
/// process; says in one line what happened (recorded in the IR).
std::string inferShapes(onnx::ModelProto &model);

class Importer {
public:
  Importer(MLIRContext *context, llvm::StringRef path,
           const onnx::ModelProto &model, bool allowMissingWeights);

  OwningOpRef<ModuleOp> run(llvm::StringRef shapeInferenceNote);

private:
  // ImportGraph.cpp: the module, the graphs, their nodes and subgraphs
  [[noreturn]] void failHere(const std::string &message);
  Location nodeLoc(const onnx::NodeProto &node);
  void collectTypes(const onnx::GraphProto &g, Scope &scope);
  SmallVector<Value> importBody(const onnx::GraphProto &g, Scope &scope);
  void importNode(const onnx::NodeProto &node, ArrayRef<Value> inputs,
                  Scope &scope);
  void importSubgraph(const onnx::GraphProto &g, Region &region,
                      Scope &outer);
  void importConstant(const onnx::NodeProto &node, Location loc, Scope &scope);
  void importTopGraph(const onnx::GraphProto &g);

  // ImportTypes.cpp: ONNX types as MLIR types
  Type elementType(int32_t dt);
  Type requireElementType(int32_t dt, llvm::StringRef what);
  Type convertType(const onnx::TypeProto &type, llvm::StringRef what);
  Type typeOf(const Scope &scope, llvm::StringRef name);

  // ImportTensors.cpp: tensor payloads (inline, packed, external)
  void unpackRaw(llvm::StringRef bytes, unsigned bits, int64_t count,
                 std::vector<uint64_t> &out, llvm::StringRef what);
  Attribute denseValue(const onnx::TensorProto &t, RankedTensorType type,
                       llvm::StringRef what);
  Attribute tensorValue(const onnx::TensorProto &t, RankedTensorType &type,
                        llvm::StringRef what);

  // ImportAttributes.cpp: node attributes
  Attribute convertAttribute(const onnx::AttributeProto &a);

  static bool isSubByte(Type element) {
    return element.isIntOrFloat() && element.getIntOrFloatBitWidth() < 8 &&
           !element.isInteger(1);
  }

  static bool isGraphAttribute(const onnx::AttributeProto &a) {
    return a.type() == onnx::AttributeProto::GRAPH ||
           a.type() == onnx::AttributeProto::GRAPHS ||
           (a.type() == onnx::AttributeProto::UNDEFINED &&
            (a.has_g() || a.graphs_size()));
  }

  MLIRContext *context;
  OpBuilder builder;
  std::string path;
  std::string modelDir;
  const onnx::ModelProto &model;
  bool allowMissingWeights;
  std::map<std::string, int64_t> opsets; // sorted: deterministic output
  llvm::StringSet<> functionDomains;
  const onnx::NodeProto *currentNode = nullptr;
  int currentNodeIndex = 0;
};

} // namespace hetplan::import::detail

#endif
