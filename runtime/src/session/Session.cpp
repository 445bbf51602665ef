//===- Session.cpp - the embedding API over the single-rank Executor ------===//
#include "hetplan/runtime/Session.h"
#include "hetplan/runtime/Executor.h"
#include "hetplan/runtime/Model.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
#include <fstream>
#include <new>
#include <sstream>
#include <stdexcept>

namespace hetplan {

using runtime::DType;
using runtime::Tensor;

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok: return "Ok";
  case StatusCode::InvalidArgument: return "InvalidArgument";
  case StatusCode::NotFound: return "NotFound";
  case StatusCode::InvalidModel: return "InvalidModel";
  case StatusCode::Unsupported: return "Unsupported";
  case StatusCode::RuntimeError: return "RuntimeError";
  case StatusCode::OutOfMemory: return "OutOfMemory";
  case StatusCode::NotImplemented: return "NotImplemented";
  case StatusCode::Internal: return "Internal";
  }
  return "Unknown";
}

std::string Status::toString() const {
  return ok() ? std::string("Ok") : std::string(statusCodeName(code_)) + ": " + message_;
}

namespace detail {

/// What a Session runs: today the whole model on the CPU Executor; a plan
/// backend (multi-rank PlanExecutor) will sit behind the same interface.
class SessionBackend {
public:
  virtual ~SessionBackend() = default;
  virtual const std::string &source() const = 0;
  virtual const std::vector<TensorInfo> &inputs() const = 0;
  virtual const std::vector<TensorInfo> &outputs() const = 0;
  /// Inputs are already validated against inputs(). May throw.
  virtual std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs) const = 0;
  /// True when `t`'s bytes may belong to the model (weights) or another
  /// owner the caller must not write through.
  virtual bool sharesModelMemory(const Tensor &t) const = 0;
};

namespace {

bool overlaps(const Tensor &a, const Tensor &b) {
  if (!a.raw() || !b.raw() || !a.nbytes() || !b.nbytes()) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a.raw()), b0 = reinterpret_cast<uintptr_t>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

TensorInfo toInfo(const runtime::ValueInfo &v) {
  TensorInfo t;
  t.name = v.name;
  t.dtype = v.dtype;
  t.hasShape = v.hasShape;
  t.shape = v.shape;
  return t;
}

class ModelBackend final : public SessionBackend {
public:
  // The Executor keeps a reference to the Model: both live here, immutable.
  explicit ModelBackend(runtime::Model model)
      : model_(std::move(model)), executor_(model_) {
    for (const auto &v : model_.inputs) inputs_.push_back(toInfo(v));
    for (const auto &v : model_.outputs) outputs_.push_back(toInfo(v));
    // The model's bytes (initializers, Constant nodes' values) as sorted,
    // disjoint address ranges, so sharesModelMemory is a binary search.
    auto add = [&](const Tensor &w) {
      if (!w.raw() || !w.nbytes()) return;
      auto b = reinterpret_cast<uintptr_t>(w.raw());
      spans_.emplace_back(b, b + w.nbytes());
    };
    for (const auto &[name, w] : model_.initializers) add(w);
    for (const auto &n : model_.nodes)
      for (const auto &[name, a] : n.attrs)
        if (a.kind == runtime::Attribute::TensorKind) add(a.t);
    std::sort(spans_.begin(), spans_.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (const auto &sp : spans_)
      if (!merged.empty() && sp.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, sp.second);
      else
        merged.push_back(sp);
    spans_ = std::move(merged);
  }
  std::vector<std::string> check() const { return executor_.check(); }
  const std::string &source() const override { return model_.path; }
  const std::vector<TensorInfo> &inputs() const override { return inputs_; }
  const std::vector<TensorInfo> &outputs() const override { return outputs_; }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs) const override {
    return executor_.run(inputs);
  }
  bool sharesModelMemory(const Tensor &t) const override {
    if (t.isView()) return true;
    if (!t.raw() || !t.nbytes()) return false;
    auto b = reinterpret_cast<uintptr_t>(t.raw()), e = b + t.nbytes();
    // The last range starting before t's end overlaps t iff it ends after t's start.
    auto it = std::lower_bound(spans_.begin(), spans_.end(), e,
                               [](const std::pair<uintptr_t, uintptr_t> &sp, uintptr_t v) { return sp.first < v; });
    return it != spans_.begin() && std::prev(it)->second > b;
  }

private:
  const runtime::Model model_;
  const runtime::Executor executor_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_; // model memory [begin, end), disjoint, sorted
};

bool fileReadable(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return f.good();
}

std::string joinLines(const std::vector<std::string> &lines) {
  std::string out;
  for (const auto &l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

} // namespace
} // namespace detail

Session::Session(std::unique_ptr<detail::SessionBackend> backend) : backend_(std::move(backend)) {}
Session::~Session() = default;

const std::string &Session::source() const { return backend_->source(); }
const std::vector<TensorInfo> &Session::inputs() const { return backend_->inputs(); }
const std::vector<TensorInfo> &Session::outputs() const { return backend_->outputs(); }

Status Session::fromModel(const std::string &path, std::unique_ptr<Session> *session,
                          const SessionOptions &options) {
  if (!session) return {StatusCode::InvalidArgument, "Session::fromModel: null session pointer"};
  session->reset();
  if (!detail::fileReadable(path)) return {StatusCode::NotFound, path + ": cannot open the model file"};
  try {
    auto backend = std::make_unique<detail::ModelBackend>(runtime::loadModel(path));
    if (options.checkAtLoad) {
      std::vector<std::string> problems = backend->check();
      if (!problems.empty()) return {StatusCode::Unsupported, detail::joinLines(problems)};
    }
    session->reset(new Session(std::move(backend)));
    return Status::OK();
  } catch (const std::bad_alloc &) {
    return {StatusCode::OutOfMemory, path + ": out of memory while loading the model"};
  } catch (const std::exception &e) {
    return {StatusCode::InvalidModel, e.what()};
  }
}

Status Session::fromPlan(const std::string &path, std::unique_ptr<Session> *session,
                         const SessionOptions &) {
  if (session) session->reset();
  return {StatusCode::NotImplemented,
          path + ": running a plan file is not implemented yet; create the session from the "
                 "ONNX model with Session::fromModel"};
}

Status Session::run(const std::map<std::string, Tensor> &inputs,
                    std::map<std::string, Tensor> *outputs,
                    const std::vector<std::string> &outputNames) const {
  if (!outputs) return {StatusCode::InvalidArgument, "run: null outputs pointer"};
  outputs->clear();
  const std::string &src = backend_->source();
  const auto &declared = backend_->inputs();
  // Every given name is a graph input...
  for (const auto &[name, t] : inputs) {
    auto it = std::find_if(declared.begin(), declared.end(),
                           [&](const TensorInfo &i) { return i.name == name; });
    if (it == declared.end()) {
      std::string names;
      for (const auto &d : declared) names += (names.empty() ? "'" : ", '") + d.name + "'";
      return {StatusCode::InvalidArgument,
              src + ": unknown input '" + name + "' (the model's inputs: " + names + ")"};
    }
    if (!t.defined())
      return {StatusCode::InvalidArgument, src + ": input '" + name + "' is an empty tensor"};
    if (it->dtype != DType::Undefined && t.dtype() != it->dtype)
      return {StatusCode::InvalidArgument, src + ": input '" + name + "' has element type " +
                                               runtime::dtypeName(t.dtype()) + ", the model wants " +
                                               runtime::dtypeName(it->dtype)};
    if (it->hasShape) {
      bool okShape = t.rank() == static_cast<int64_t>(it->shape.size());
      for (size_t d = 0; okShape && d < it->shape.size(); ++d)
        okShape = it->shape[d] < 0 || it->shape[d] == t.shape()[d];
      if (!okShape)
        return {StatusCode::InvalidArgument, src + ": input '" + name + "' has shape " +
                                                 runtime::shapeString(t.shape()) +
                                                 ", the model wants " +
                                                 runtime::shapeString(it->shape) + " (-1: any)"};
    }
    for (int64_t d : t.shape())
      if (d < 0)
        return {StatusCode::InvalidArgument, src + ": input '" + name + "' has a negative dimension"};
    if (t.numel() > 0 && !t.raw())
      return {StatusCode::InvalidArgument, src + ": input '" + name + "' has no data"};
  }
  // ...and every graph input is given.
  for (const auto &d : declared)
    if (!inputs.count(d.name))
      return {StatusCode::InvalidArgument, src + ": input '" + d.name + "' was not given"};
  for (const auto &n : outputNames)
    if (std::none_of(backend_->outputs().begin(), backend_->outputs().end(),
                     [&](const TensorInfo &o) { return o.name == n; }))
      return {StatusCode::InvalidArgument, src + ": unknown output '" + n + "'"};

  std::map<std::string, Tensor> produced;
  try {
    produced = backend_->run(inputs);
    for (auto &[name, t] : produced) {
      if (!outputNames.empty() &&
          std::find(outputNames.begin(), outputNames.end(), name) == outputNames.end())
        continue;
      // An output may be a weight or an input passed through (Identity,
      // Reshape): give the caller its own bytes.
      bool aliased = backend_->sharesModelMemory(t);
      for (const auto &[iname, in] : inputs)
        aliased = aliased || detail::overlaps(t, in);
      (*outputs)[name] = aliased ? t.clone() : std::move(t);
    }
  } catch (const std::bad_alloc &) {
    outputs->clear();
    return {StatusCode::OutOfMemory, src + ": out of memory while running"};
  } catch (const std::exception &e) {
    outputs->clear();
    return {StatusCode::RuntimeError, e.what()};
  }
  return Status::OK();
}

} // namespace hetplan
