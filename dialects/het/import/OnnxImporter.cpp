//===- OnnxImporter.cpp - ONNX to het IR ----------------------------------===//
//
// Reads an ONNX model (binary or text), runs libonnx shape inference where
// libonnx knows the model's opsets, and builds one het.graph. Weight bytes are
// not copied: OnnxWire strips large payloads before protobuf parses the model
// and the weights refer to their place in the file.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/OnnxImporter.h"

#include "dialects/het/IR/HetOps.h"
#include "dialects/het/import/Importer.h"
#include "dialects/het/import/OnnxWire.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include "onnx/defs/parser.h"

#include <map>
#include <stdexcept>

using namespace mlir;
using namespace hetplan;
using namespace hetplan::het;

namespace hetplan::import {

// ONNX 1.22 writes IR version 13 at most.
int64_t maxSupportedIrVersion() { return 13; }

namespace {

constexpr int64_t kMinIrVersion = 3;

bool looksLikeText(llvm::StringRef path, llvm::StringRef bytes) {
  if (path.ends_with(".onnxtext") || path.ends_with(".txt"))
    return true;
  llvm::StringRef head = bytes.ltrim();
  return head.starts_with("<");
}

/// The rank a shape operand of `length` entries gives: no tensor has more
/// than this many dims. (libonnx's shape inference builds the output shape
/// dim by dim: a ConstantOfShape of a declared [2^40] shape input ran for
/// a minute and most of the memory before anything refused it: the compile
/// fuzzer.)
constexpr int64_t kMaxShapeOperandLength = 64;

/// The first node of `g` (or of its subgraphs) whose shape operand
/// (ConstantOfShape's input, Expand's and Reshape's second) is declared
/// 1-D with more entries than any tensor has dims; "" when none is.
std::string oversizedShapeOperand(const onnx::GraphProto &g) {
  std::map<std::string, int64_t> length;  // declared 1-D values: their length
  auto note = [&](const std::string &name, const onnx::TypeProto &t) {
    if (t.has_tensor_type() && t.tensor_type().has_shape() && t.tensor_type().shape().dim_size() == 1 &&
        t.tensor_type().shape().dim(0).has_dim_value())
      length[name] = t.tensor_type().shape().dim(0).dim_value();
  };
  for (const auto &v : g.input()) note(v.name(), v.type());
  for (const auto &v : g.value_info()) note(v.name(), v.type());
  for (const auto &t : g.initializer())
    if (t.dims_size() == 1) length[t.name()] = t.dims(0);
  for (const auto &n : g.node()) {
    int operand = n.op_type() == "ConstantOfShape" ? 0 : (n.op_type() == "Expand" || n.op_type() == "Reshape") ? 1 : -1;
    if (n.domain().empty() && operand >= 0 && operand < n.input_size()) {
      auto it = length.find(n.input(operand));
      if (it != length.end() && it->second > kMaxShapeOperandLength)
        return "node '" + (n.name().empty() ? n.output_size() ? n.output(0) : std::string("?") : n.name()) + "' (" +
               n.op_type() + "): its shape operand '" + n.input(operand) + "' has " + std::to_string(it->second) +
               " entries, a tensor of that many dims (at most " + std::to_string(kMaxShapeOperandLength) + ")";
    }
    for (const auto &a : n.attribute()) {
      if (a.has_g())
        if (std::string why = oversizedShapeOperand(a.g()); !why.empty()) return why;
      for (const auto &sub : a.graphs())
        if (std::string why = oversizedShapeOperand(sub); !why.empty()) return why;
    }
  }
  return "";
}

} // namespace

using detail::fail;
using detail::ImportError;
using detail::Importer;
using detail::inferShapes;

OwningOpRef<ModuleOp> importOnnxFile(llvm::StringRef path, MLIRContext *context,
                                     const ImportOptions &options,
                                     std::string &error) {
  context->loadDialect<HetDialect>();
  std::string file = path.str();
  // Regular files only: a FIFO would block and /dev/zero read forever.
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path)) {
    error = file + ": not a regular file";
    return {};
  }
  // mmap (for large files): pages of weight payloads are never touched.
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    error = file + ": cannot open: " + buffer.getError().message();
    return {};
  }
  return importOnnxBytes((*buffer)->getBuffer(), path, context, options, error);
}

OwningOpRef<ModuleOp> importOnnxBytes(llvm::StringRef bytes, llvm::StringRef path,
                                      MLIRContext *context,
                                      const ImportOptions &options,
                                      std::string &error) {
  context->loadDialect<HetDialect>();
  std::string file = path.str();
  try {
    if (bytes.empty())
      fail(file + ": empty file, not an ONNX model");

    onnx::ModelProto model;
    if (looksLikeText(path, bytes)) {
      std::string text = bytes.str();
      onnx::OnnxParser parser(text.c_str());
      auto status = parser.Parse(model);
      if (!status.IsOK())
        fail(file + ": ONNX text parse error: " + status.ErrorMessage());
    } else {
      std::string stripped, wireError;
      if (!stripLargePayloads(std::string_view(bytes.data(), bytes.size()),
                              stripped, wireError))
        fail(file + ": " + wireError);
      if (!model.ParseFromString(stripped))
        fail(file + ": not a valid ONNX protobuf (ModelProto parse failed)");
    }
    if (!model.has_graph())
      fail(file + ": not an ONNX model: it has no graph" +
           (model.ir_version() ? "" : " and no IR version"));
    if (model.ir_version() < kMinIrVersion ||
        model.ir_version() > maxSupportedIrVersion())
      fail(file + ": ONNX IR version " + std::to_string(model.ir_version()) +
           " is not supported (hetplan reads IR versions " +
           std::to_string(kMinIrVersion) + " to " +
           std::to_string(maxSupportedIrVersion()) + ")");

    if (std::string why = oversizedShapeOperand(model.graph()); !why.empty())
      fail(file + ": " + why);
    std::string note = options.shapeInference ? inferShapes(model)
                                              : std::string("skipped: disabled");
    Importer importer(context, path, model, options.allowMissingWeights);
    OwningOpRef<ModuleOp> module = importer.run(note);

    std::string diag;
    {
      ScopedDiagnosticHandler handler(context, [&](Diagnostic &d) {
        if (diag.empty()) {
          // The value's ONNX name, not MLIR's loc(...) syntax.
          Location loc = d.getLocation();
          if (auto name = dyn_cast<NameLoc>(loc))
            diag = "'" + name.getName().str() + "': ";
          diag += d.str();
        }
        return success();
      });
      if (failed(verify(*module)))
        fail(file + ": imported IR does not verify: " + diag);
    }
    return module;
  } catch (const ImportError &e) {
    error = e.message;
  } catch (const std::exception &e) {
    error = file + ": " + e.what();
  }
  // One line: libonnx's messages (the text parser's "Error context:", the
  // checker's) span several.
  std::string oneLine;
  for (char ch : error) {
    if (ch == '\n' || ch == '\r') ch = ' ';
    if (ch == ' ' && !oneLine.empty() && oneLine.back() == ' ') continue;
    oneLine += ch;
  }
  while (!oneLine.empty() && oneLine.back() == ' ') oneLine.pop_back();
  error = oneLine;
  return {};
}

} // namespace hetplan::import
