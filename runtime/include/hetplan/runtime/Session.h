//===- Session.h - the embedding API: one model, many concurrent runs -*- C++ -*-===//
//
// A Session is what a service embeds: it loads a model once (graph and
// weights, immutable and shared by every call) and runs it on the CPU from
// any number of threads at once. Each run has its own value store; nothing a
// run writes is visible to another. Errors are a Status (code + one message),
// never exceptions. The C API (hetplan/hetplan.h) is a thin layer over this.
//
//   std::unique_ptr<hetplan::Session> s;
//   hetplan::Status st = hetplan::Session::fromModel("gpt2-tiny.onnx", &s);
//   std::map<std::string, hetplan::runtime::Tensor> out;
//   st = s->run({{"input_ids", ids}}, &out);   // out["logits"]
//
// Sessions come from an ONNX model today (single rank, the CPU Executor);
// Session::fromPlan (a compiled plan file) answers NotImplemented until plan
// execution lands, behind the same run() interface.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Tensor.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hetplan {

/// Numbered as the C API's hetplan_status (hetplan/hetplan.h).
enum class StatusCode : int {
  Ok = 0,
  InvalidArgument = 1, // a bad call: unknown/missing input, wrong dtype/shape, null pointer
  NotFound = 2,        // the model/plan file does not exist or cannot be read
  InvalidModel = 3,    // the file is not a valid model (parse error, broken graph)
  Unsupported = 4,     // the model uses ops/types/attributes the runtime cannot run
  RuntimeError = 5,    // a kernel failed while running
  OutOfMemory = 6,
  NotImplemented = 7,  // e.g. Session::fromPlan, for now
  Internal = 8,
};

const char *statusCodeName(StatusCode code);

class Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return {}; }
  bool ok() const { return code_ == StatusCode::Ok; }
  StatusCode code() const { return code_; }
  /// One line per problem; empty when ok().
  const std::string &message() const { return message_; }
  /// "InvalidArgument: message" (or "Ok").
  std::string toString() const;

private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

/// A graph input or output as the model declares it.
struct TensorInfo {
  std::string name;
  runtime::DType dtype = runtime::DType::Undefined;
  bool hasShape = false;
  std::vector<int64_t> shape; // -1 for a dynamic (symbolic or unknown) dimension
};

struct SessionOptions {
  /// Run Executor::check() at creation and refuse the model with every
  /// problem listed (Unsupported). Only turn off to probe a partial model.
  bool checkAtLoad = true;
};

namespace detail {
class SessionBackend;
}

class Session {
public:
  /// Loads an ONNX model and prepares it for running on the CPU.
  static Status fromModel(const std::string &path, std::unique_ptr<Session> *session,
                          const SessionOptions &options = {});
  /// A compiled plan file (docs/plan-format.md). Not yet: NotImplemented.
  static Status fromPlan(const std::string &path, std::unique_ptr<Session> *session,
                         const SessionOptions &options = {});

  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// The file the session was created from.
  const std::string &source() const;
  const std::vector<TensorInfo> &inputs() const;
  const std::vector<TensorInfo> &outputs() const;

  /// Runs once. Thread-safe: any number of concurrent calls on one Session.
  /// `inputs` must name every graph input exactly once with the declared
  /// element type and rank (fixed dimensions must match). Input bytes are
  /// only read, and only during the call (views of caller memory are fine).
  /// `outputs` receives every graph output by name (or only those in
  /// `outputNames` when it is not empty); output tensors own their bytes or
  /// share them with nothing the caller or other runs can see.
  Status run(const std::map<std::string, runtime::Tensor> &inputs,
             std::map<std::string, runtime::Tensor> *outputs,
             const std::vector<std::string> &outputNames = {}) const;

private:
  explicit Session(std::unique_ptr<detail::SessionBackend> backend);
  std::unique_ptr<detail::SessionBackend> backend_;
};

} // namespace hetplan
