//===- OnnxImporter.h - ONNX to het IR --------------------------*- C++ -*-===//
//
// The only interface to the ONNX importer. It exposes MLIR types only: the
// protobuf and ONNX types stay inside this folder's .cpp files and its
// internal Importer.h, built with exceptions (libonnx throws) while the rest
// of the project is not.
//
//===----------------------------------------------------------------------===//
#ifndef HETPLAN_DIALECTS_HET_IMPORT_ONNXIMPORTER_H
#define HETPLAN_DIALECTS_HET_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace hetplan::import {

struct ImportOptions {
  /// Run libonnx shape inference when it knows every opset the model uses.
  bool shapeInference = true;
  /// Accept external-data files that are absent: planning needs only shapes,
  /// so a 350 GB model can be planned without its weights on disk.
  bool allowMissingWeights = false;
};

/// Imports the ONNX model at `path` (binary `.onnx`, or the ONNX text format
/// when the name ends in `.onnxtext`/`.txt` or the file starts as text) into a
/// module holding one `het.graph`. On failure returns null and sets `error` to
/// one line naming the file and, where there is one, the node.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(llvm::StringRef path,
                                                 mlir::MLIRContext *context,
                                                 const ImportOptions &options,
                                                 std::string &error);

/// Imports an ONNX model from `bytes` (binary or text, as above); `path`
/// names it in errors and locations, and external data is looked up beside
/// it. The fuzz target of the importer calls this.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxBytes(llvm::StringRef bytes,
                                                  llvm::StringRef path,
                                                  mlir::MLIRContext *context,
                                                  const ImportOptions &options,
                                                  std::string &error);

/// The highest ONNX IR version the importer reads.
int64_t maxSupportedIrVersion();

} // namespace hetplan::import

#endif
