//===- ShapeInference.cpp - libonnx shape inference, out of process ------===//
//
// libonnx's checker and shape inference on the payload-stripped model, run
// in a forked worker so that a crash or hang in libonnx costs only the
// types it would have inferred.
//
//===----------------------------------------------------------------------===//

#include "dialects/het/import/Importer.h"

#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace hetplan::import::detail {

namespace {

/// Runs libonnx shape inference when libonnx knows every imported opset, and
/// says in one line what happened (recorded in the IR for the curious).
std::string inferShapesInProcess(onnx::ModelProto &model) {
  const auto &ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  // A domain libonnx has no schemas for (com.microsoft, ...) only leaves its
  // own nodes untyped; a known domain at a newer version than libonnx knows
  // would be typed by outdated schemas, so inference is skipped then.
  std::string unknownDomains;
  for (const auto &opset : model.opset_import()) {
    std::string domain = canonicalDomain(opset.domain());
    auto it = ranges.find(domain);
    if (it == ranges.end()) {
      unknownDomains += (unknownDomains.empty() ? "" : ", ") + domain;
      continue;
    }
    if (opset.version() > it->second.second)
      return "skipped: opset " + std::to_string(opset.version()) + " of '" +
             (domain.empty() ? std::string("ai.onnx") : domain) +
             "' is newer than libonnx knows (" +
             std::to_string(it->second.second) + "); types come from value_info";
  }
  // libonnx's inference functions index attributes and inputs without
  // checking them (they crash on malformed nodes): every node, subgraphs
  // included, must first pass its schema's own check (attribute types,
  // required attributes, input/output counts). A model with a node that
  // does not is typed from its value_info only (het's own shape rules bind
  // the rest). (Not onnx::checker::check_model: it also checks weights,
  // which the importer strips before parsing.)
  std::map<std::string, int64_t> versions;
  for (const auto &opset : model.opset_import())
    versions[canonicalDomain(opset.domain())] = opset.version();
  std::function<void(const onnx::GraphProto &)> verifyNodes = [&](const onnx::GraphProto &g) {
    for (const auto &node : g.node()) {
      auto v = versions.find(canonicalDomain(node.domain()));
      if (v != versions.end())
        if (const auto *schema = onnx::OpSchemaRegistry::Schema(node.op_type(), int(v->second), node.domain()))
          schema->Verify(node);
      for (const auto &attr : node.attribute()) {
        if (attr.has_g()) verifyNodes(attr.g());
        for (const auto &sub : attr.graphs()) verifyNodes(sub);
      }
    }
  };
  try {
    verifyNodes(model.graph());
    // ONNX's checker over the graph's structure (values defined before use,
    // topological order, ...), on a copy whose initializers are graph
    // inputs: their payloads were stripped, which check_model would refuse.
    onnx::ModelProto shape = model;
    auto *g = shape.mutable_graph();
    std::set<std::string> declared;
    for (const auto &in : g->input()) declared.insert(in.name());
    for (const auto &init : g->initializer()) {
      if (declared.count(init.name())) continue;
      auto *in = g->add_input();
      in->set_name(init.name());
      auto *tt = in->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(init.data_type());
      auto *sh = tt->mutable_shape();
      for (int64_t d : init.dims()) sh->add_dim()->set_dim_value(d);
    }
    g->clear_initializer();
    g->clear_sparse_initializer();
    onnx::checker::check_model(shape);
  } catch (const std::exception &e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return "skipped: a node fails its ONNX schema (" + what + "); types come from value_info";
  }
  try {
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(),
        onnx::ShapeInferenceOptions(/*check_type=*/false, /*error_mode=*/0,
                                    /*data_prop=*/true));
  } catch (const std::exception &e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return "failed: " + what;
  }
  if (!unknownDomains.empty())
    return "onnx (no schemas for " + unknownDomains + ")";
  return "onnx";
}

/// Reads exactly `size` bytes from `fd`, waiting at most until `deadline`.
bool readAll(int fd, char *out, size_t size,
             std::chrono::steady_clock::time_point deadline) {
  while (size > 0) {
    auto left = deadline == std::chrono::steady_clock::time_point::max()
                    ? std::chrono::milliseconds(1000)
                    : std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return false;
    if (ready == 0) continue;
    if (!(p.revents & POLLIN) && (p.revents & (POLLHUP | POLLERR))) return false;
    ssize_t got = ::read(fd, out, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    size -= size_t(got);
  }
  return true;
}

bool writeAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t put = ::send(fd, data, size, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data += put;
    size -= size_t(put);
  }
  return true;
}

} // namespace

// libFuzzer's death callback would save the parent's input as a crash when
// the child dies; the child clears it (weak: absent outside sanitizer builds).
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {

/// libonnx's checker and shape inference (Debian's 1.12) still crash on some
/// malformed models that pass every schema check (found by the onnx-import
/// fuzzer: data propagation through Shape/Gather, GRU, Conv). They run in a
/// forked worker process, on the payload-stripped model: a crash or hang
/// there costs the types libonnx would have inferred (value_info and het's
/// own shape rules type the model instead), never the process. The worker
/// is forked once and serves every import of the process (a fork per model
/// costs the parent copy-on-write faults on all its memory); a worker that
/// died is replaced at the next import.
class ShapeInferenceWorker {
public:
  static constexpr int kTimeoutSeconds = 120;

  std::string infer(onnx::ModelProto &model) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string input;
    if (!model.SerializeToString(&input))
      return "skipped: the model does not serialize for libonnx";
    if (pid <= 0 && !start())
      return "skipped: no worker process for libonnx's shape inference";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
    uint64_t size = input.size();
    uint64_t sizes[2] = {0, 0};
    std::string note, output;
    bool ok = writeAll(fd, reinterpret_cast<const char *>(&size), sizeof size) &&
              writeAll(fd, input.data(), input.size()) &&
              readAll(fd, reinterpret_cast<char *>(sizes), sizeof sizes, deadline) &&
              sizes[0] < (1u << 20) && sizes[1] < (uint64_t(1) << 32);
    if (ok) {
      note.resize(sizes[0]);
      output.resize(sizes[1]);
      ok = readAll(fd, note.data(), note.size(), deadline) &&
           readAll(fd, output.data(), output.size(), deadline);
    }
    onnx::ModelProto inferred;
    if (ok && inferred.ParseFromString(output)) {
      model = std::move(inferred);
      return note;
    }
    bool late = std::chrono::steady_clock::now() >= deadline;
    int status = stop();
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
      return "skipped: libonnx's shape inference crashed on this model (signal " +
             std::to_string(WTERMSIG(status)) + "); types come from value_info";
    if (late)
      return "skipped: libonnx's shape inference ran over " +
             std::to_string(kTimeoutSeconds) + " s; types come from value_info";
    return "skipped: libonnx's shape inference failed; types come from value_info";
  }

  ~ShapeInferenceWorker() { stop(); }

private:
  bool start() {
    // A socket pair, not pipes: a write to a worker that died must fail
    // with EPIPE (MSG_NOSIGNAL), not kill this process with SIGPIPE.
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
    std::fflush(nullptr);
    pid_t child = ::fork();
    if (child < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return false;
    }
    if (child == 0) {
      ::close(fds[0]);
      serve(fds[1]);
    }
    ::close(fds[1]);
    pid = child;
    fd = fds[0];
    return true;
  }

  /// Kills the worker (if any) and returns how it ended.
  int stop() {
    int status = 0;
    if (pid <= 0) return status;
    ::close(fd);
    // A worker that answered wrongly may still run: end it, then reap it.
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid = -1;
    return status;
  }

  [[noreturn]] static void serve(int in) {
    int out = in;
    // Die quietly by the signal: no crash banner, no sanitizer report that
    // a fuzzer would take for the parent's input.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      ::signal(sig, SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto never = std::chrono::steady_clock::time_point::max();
    for (;;) {
      uint64_t size = 0;
      if (!readAll(in, reinterpret_cast<char *>(&size), sizeof size, never))
        ::_exit(0); // the parent closed the pipe or exited
      std::string input(size, '\0'), note, output;
      if (!readAll(in, input.data(), input.size(), never)) ::_exit(0);
      try {
        onnx::ModelProto model;
        if (!model.ParseFromString(input)) ::_exit(3);
        note = inferShapesInProcess(model);
        if (!model.SerializeToString(&output)) ::_exit(3);
      } catch (...) {
        ::_exit(3);
      }
      uint64_t sizes[2] = {note.size(), output.size()};
      if (!writeAll(out, reinterpret_cast<const char *>(sizes), sizeof sizes) ||
          !writeAll(out, note.data(), note.size()) ||
          !writeAll(out, output.data(), output.size()))
        ::_exit(0);
    }
  }

  std::mutex mutex;
  pid_t pid = -1;
  int fd = -1; // this process's end of the socket pair
};

} // namespace

std::string inferShapes(onnx::ModelProto &model) {
  static ShapeInferenceWorker worker;
  return worker.infer(model);
}

} // namespace hetplan::import::detail
