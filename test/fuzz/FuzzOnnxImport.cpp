//===- FuzzOnnxImport.cpp - ONNX importer (bytes -> het dialect) ----------===//
//
// Bytes -> importOnnxBytes, the code behind `hetplan-translate
// --import-onnx` and every hetplan command that reads a model: protobuf
// (or ONNX text when the bytes start with '<') parse, ONNX's checker and
// shape inference, the importer proper and the MLIR verifier. Weights may
// be missing (as for planning) and external data resolves below a folder
// that does not exist. One MLIRContext per input: nothing carries over.
//
//===----------------------------------------------------------------------===//
#include "FuzzTarget.h"

#include "dialects/het/import/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdlib>

// LLVM's BumpPtrAllocator poisons its slabs when the including code is built
// with ASan, but libMLIR's own (uninstrumented) copy hands out memory from
// the same slabs without unpoisoning it: every StringAttr made after a
// header-inlined allocation reads as use-after-poison. Manual poisoning is
// therefore off; ASan's own redzones still catch every overflow.
extern "C" const char *__asan_default_options() { return "allow_user_poisoning=0"; }

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  google::protobuf::SetLogHandler(nullptr); // invalid UTF-8 in strings is logged per parse
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  hetplan::import::ImportOptions options;
  options.allowMissingWeights = true;
  std::string error;
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto module = hetplan::import::importOnnxBytes(
      bytes, "/nonexistent-hetplan-fuzz/model.onnx", &context, options, error);
  // Either a module or one line saying why not.
  if (!module && (error.empty() || error.find('\n') != std::string::npos))
    std::abort();
  return 0;
}
