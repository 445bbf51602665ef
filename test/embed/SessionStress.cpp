//===- SessionStress.cpp - many threads x many requests on one Session ----===//
//
// Loads each model once, computes single-threaded reference outputs for a
// set of distinct requests (random ids, varying batch and sequence length),
// then has T threads each send N requests to the one Session at the same
// time, half through the C++ API and half through the C API, with a bad
// request now and then, and checks every result against the reference.
// Links the runtime only; test/runtime-asan.sh builds it with ASan + LSan.
//
//   hetplan-session-stress [--threads T] [--requests N] MODEL.onnx...
//
//===----------------------------------------------------------------------===//
#include "hetplan/hetplan.h"
#include "hetplan/runtime/Session.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using hetplan::Session;
using hetplan::Status;
using hetplan::runtime::DType;
using hetplan::runtime::Tensor;
using TensorMap = std::map<std::string, Tensor>;

namespace {

std::atomic<int> failures{0};

void failure(const std::string &msg) {
  if (failures.fetch_add(1) < 20) std::fprintf(stderr, "FAIL: %s\n", msg.c_str());
}

// Request k: batch 1..2, seq 1..24, ids below 512 for input_ids, 0/1 otherwise.
TensorMap makeRequest(const Session &s, int k) {
  std::mt19937_64 rng(1000 + k);
  int64_t batch = 1 + k % 2, seq = 1 + (k * 7) % 24;
  TensorMap in;
  for (const auto &info : s.inputs()) {
    std::vector<int64_t> shape = {batch, seq};
    Tensor t(DType::Int64, shape);
    int64_t hi = info.name == "input_ids" ? 512 : 2;
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<int64_t>()[i] = info.name == "attention_mask" ? 1 : static_cast<int64_t>(rng() % hi);
    in[info.name] = t;
  }
  return in;
}

bool same(const Tensor &ref, DType dtype, const std::vector<int64_t> &shape, const void *data,
          std::string *why) {
  if (dtype != ref.dtype() || shape != ref.shape()) {
    *why = "got " + std::string(hetplan::runtime::dtypeName(dtype)) +
           hetplan::runtime::shapeString(shape) + ", want " + ref.describe();
    return false;
  }
  if (ref.dtype() != DType::Float32)
    return std::memcmp(ref.raw(), data, ref.nbytes()) == 0 || (*why = "bytes differ", false);
  const float *a = ref.data<float>(), *b = static_cast<const float *>(data);
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= 1e-5f + 1e-5f * std::fabs(a[i]))) {
      *why = "element " + std::to_string(i) + ": " + std::to_string(b[i]) + " vs reference " +
             std::to_string(a[i]);
      return false;
    }
  return true;
}

void checkCpp(const Session &s, const TensorMap &in, const TensorMap &ref, const std::string &tag) {
  TensorMap out;
  Status st = s.run(in, &out);
  if (!st.ok()) return failure(tag + ": " + st.toString());
  if (out.size() != ref.size()) return failure(tag + ": output count differs");
  for (const auto &[name, r] : ref) {
    auto it = out.find(name);
    std::string why;
    if (it == out.end()) return failure(tag + ": no output '" + name + "'");
    if (!same(r, it->second.dtype(), it->second.shape(), it->second.raw(), &why))
      return failure(tag + ": output '" + name + "': " + why);
  }
}

void checkC(const hetplan_session *s, const TensorMap &in, const TensorMap &ref, const std::string &tag) {
  std::vector<hetplan_tensor> ts;
  for (const auto &[name, t] : in)
    ts.push_back({name.c_str(), static_cast<hetplan_dtype>(t.dtype()), t.shape().size(),
                  t.shape().data(), t.raw(), t.nbytes()});
  hetplan_result *r = nullptr;
  hetplan_error *err = nullptr;
  hetplan_status st = hetplan_session_run(s, ts.data(), ts.size(), &r, &err);
  if (st != HETPLAN_OK) {
    failure(tag + ": C run: " + hetplan_error_message(err));
    hetplan_error_free(err);
    return;
  }
  if (hetplan_result_count(r) != ref.size()) failure(tag + ": C output count differs");
  for (const auto &[name, rt] : ref) {
    hetplan_tensor o;
    std::string why;
    if (hetplan_result_find(r, name.c_str(), &o) != HETPLAN_OK)
      failure(tag + ": C: no output '" + name + "'");
    else if (!same(rt, static_cast<DType>(o.dtype), std::vector<int64_t>(o.shape, o.shape + o.rank),
                   o.data, &why))
      failure(tag + ": C output '" + name + "': " + why);
  }
  hetplan_result_free(r);
}

// Requests that must fail, and fail cleanly (no leak, no crash).
void badRequests(const Session &s, const hetplan_session *cs, const TensorMap &good, int k) {
  TensorMap in = good, out;
  if (k % 2 == 0) {
    in["no_such_input"] = good.begin()->second;
  } else {
    in[good.begin()->first] = Tensor(DType::Float32, good.begin()->second.shape());
  }
  if (s.run(in, &out).code() != hetplan::StatusCode::InvalidArgument || !out.empty())
    failure("a bad request did not fail with InvalidArgument");
  int64_t shape[2] = {1, 4};
  int64_t ids[3] = {1, 2, 3}; // nbytes does not match the shape
  hetplan_tensor t = {good.begin()->first.c_str(), HETPLAN_INT64, 2, shape, ids, sizeof ids};
  hetplan_result *r = nullptr;
  hetplan_error *err = nullptr;
  if (hetplan_session_run(cs, &t, 1, &r, &err) != HETPLAN_INVALID_ARGUMENT || r ||
      hetplan_error_code(err) != HETPLAN_INVALID_ARGUMENT)
    failure("a bad C request did not fail with HETPLAN_INVALID_ARGUMENT");
  hetplan_error_free(err);
}

int stress(const std::string &path, int threads, int requests) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Session> s;
  Status st = Session::fromModel(path, &s);
  hetplan_session *cs = nullptr;
  hetplan_error *err = nullptr;
  if (!st.ok() || hetplan_session_create_from_model(path.c_str(), &cs, &err) != HETPLAN_OK) {
    std::fprintf(stderr, "FAIL: %s: %s %s\n", path.c_str(), st.toString().c_str(), hetplan_error_message(err));
    hetplan_error_free(err);
    return 1;
  }
  const int kDistinct = 16;
  std::vector<TensorMap> inputs, refs;
  for (int k = 0; k < kDistinct; ++k) {
    inputs.push_back(makeRequest(*s, k));
    TensorMap out;
    Status rs = s->run(inputs.back(), &out);
    if (!rs.ok()) {
      std::fprintf(stderr, "FAIL: reference run %d: %s\n", k, rs.toString().c_str());
      hetplan_session_destroy(cs);
      return 1;
    }
    for (auto &[name, t] : out) t = t.clone();
    refs.push_back(std::move(out));
  }
  int before = failures.load();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < requests; ++i) {
        int k = (t * 5 + i * 3) % kDistinct;
        std::string tag = path + ": thread " + std::to_string(t) + " request " + std::to_string(i);
        if ((t + i) % 2) checkC(cs, inputs[k], refs[k], tag);
        else checkCpp(*s, inputs[k], refs[k], tag);
        if (i % 10 == 9) badRequests(*s, cs, inputs[k], t + i);
      }
    });
  for (auto &th : pool) th.join();
  hetplan_session_destroy(cs);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int failed = failures.load() - before;
  std::printf("%s: %d threads x %d requests on one session (+%d reference runs): %s, %.2f s\n",
              path.c_str(), threads, requests, kDistinct, failed ? "FAILED" : "all match", secs);
  return failed ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  int threads = 8, requests = 50;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--requests") && i + 1 < argc) requests = std::atoi(argv[++i]);
    else models.push_back(argv[i]);
  }
  if (models.empty()) {
    std::fprintf(stderr, "usage: %s [--threads T] [--requests N] MODEL.onnx...\n", argv[0]);
    return 2;
  }
  int rc = 0;
  for (const auto &m : models) rc |= stress(m, threads, requests);
  return rc;
}
