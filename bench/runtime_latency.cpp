//===- runtime_latency.cpp - latency of one model on the CPU runtime ------===//
//
//   hetplan-bench-runtime MODEL --input NAME=FILE.npy ... [--warmup W]
//                         [--iters N] [--save-outputs DIR]
//
// Loads MODEL with hetplan::Session::fromModel (the embedding API), reads
// each input from a NumPy .npy file (hetplan/runtime/Npy.h), runs W
// unmeasured warm-up iterations and N measured ones (each a Session::run on
// the same inputs, timed with steady_clock around the call), and prints one
// JSON object: load time, median/p90/min/mean/max latency in ms, and the
// threads the GEMM library was told to use (OPENBLAS_NUM_THREADS /
// OMP_NUM_THREADS; other kernels are single-threaded). --save-outputs writes
// every output of the last run to DIR/NAME.npy (names with '/' get '_'), so
// a driver (bench/runtime_bench.py) can compare them with another runtime.
// Exit status: 0, 1 on any error (message on stderr), 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Json.h"
#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/Session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using hetplan::runtime::Tensor;

namespace {

int usage(const char *msg = nullptr) {
  if (msg) std::cerr << "hetplan-bench-runtime: " << msg << "\n";
  std::cerr << "usage: hetplan-bench-runtime MODEL --input NAME=FILE.npy ... [--warmup W] "
               "[--iters N] [--save-outputs DIR]\n";
  return 2;
}

namespace json = hetplan::runtime::json;

std::string shapeJson(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Nearest-rank percentile of sorted samples (p in [0, 100]).
double percentile(const std::vector<double> &sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank ? rank - 1 : 0)];
}

double median(const std::vector<double> &sorted) {
  size_t n = sorted.size();
  if (!n) return 0;
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

std::string envOr(const char *name, const char *dflt) {
  const char *v = std::getenv(name);
  return v ? v : dflt;
}

} // namespace

int main(int argc, char **argv) {
  std::string model, saveDir;
  std::vector<std::pair<std::string, std::string>> inputFiles;
  long warmup = 3, iters = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](const char *what) -> const char * {
      if (i + 1 >= argc) return nullptr;
      (void)what;
      return argv[++i];
    };
    if (a == "--input") {
      const char *v = next("--input");
      if (!v) return usage("--input needs NAME=FILE.npy");
      std::string s = v;
      size_t eq = s.rfind('=');
      if (eq == std::string::npos || eq == 0) return usage("--input needs NAME=FILE.npy");
      inputFiles.emplace_back(s.substr(0, eq), s.substr(eq + 1));
    } else if (a == "--warmup" || a == "--iters") {
      const char *v = next(a.c_str());
      if (!v) return usage((a + " needs a number").c_str());
      char *end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (*end || n < 0 || (a == "--iters" && n < 1)) return usage((a + ": bad number").c_str());
      (a == "--warmup" ? warmup : iters) = n;
    } else if (a == "--save-outputs") {
      const char *v = next(a.c_str());
      if (!v) return usage("--save-outputs needs a folder");
      saveDir = v;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      return usage(("unknown option " + a).c_str());
    } else if (model.empty()) {
      model = a;
    } else {
      return usage("more than one model given");
    }
  }
  if (model.empty()) return usage("no model given");

  std::map<std::string, Tensor> inputs;
  try {
    for (const auto &[name, file] : inputFiles) inputs[name] = hetplan::runtime::readNpy(file);
  } catch (const std::exception &e) {
    std::cerr << "hetplan-bench-runtime: " << e.what() << "\n";
    return 1;
  }

  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };

  auto t0 = Clock::now();
  std::unique_ptr<hetplan::Session> session;
  hetplan::Status st = hetplan::Session::fromModel(model, &session);
  double loadMs = ms(Clock::now() - t0);
  if (!st.ok()) {
    std::cerr << "hetplan-bench-runtime: " << st.toString() << "\n";
    return 1;
  }

  std::map<std::string, Tensor> outputs;
  for (long i = 0; i < warmup; ++i) {
    st = session->run(inputs, &outputs);
    if (!st.ok()) {
      std::cerr << "hetplan-bench-runtime: " << st.toString() << "\n";
      return 1;
    }
  }
  std::vector<double> samples;
  samples.reserve(iters);
  for (long i = 0; i < iters; ++i) {
    auto s = Clock::now();
    st = session->run(inputs, &outputs);
    samples.push_back(ms(Clock::now() - s));
    if (!st.ok()) {
      std::cerr << "hetplan-bench-runtime: " << st.toString() << "\n";
      return 1;
    }
  }

  std::map<std::string, std::string> saved;
  if (!saveDir.empty()) {
    try {
      for (const auto &[name, t] : outputs) {
        std::string file = name;
        std::replace(file.begin(), file.end(), '/', '_');
        file = saveDir + "/" + file + ".npy";
        hetplan::runtime::writeNpy(file, t);
        saved[name] = file;
      }
    } catch (const std::exception &e) {
      std::cerr << "hetplan-bench-runtime: " << e.what() << "\n";
      return 1;
    }
  }

  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double v : samples) sum += v;

  std::ostringstream js;
  js.setf(std::ios::fixed);
  js.precision(4);
  js << "{\n  \"model\": " << json::quoted(model) << ",\n  \"inputs\": {";
  bool first = true;
  for (const auto &[name, t] : inputs) {
    js << (first ? "" : ", ") << json::quoted(name) << ": {\"dtype\": "
       << json::quoted(hetplan::runtime::dtypeName(t.dtype())) << ", \"shape\": " << shapeJson(t.shape())
       << "}";
    first = false;
  }
  js << "},\n  \"outputs\": {";
  first = true;
  for (const auto &[name, t] : outputs) {
    js << (first ? "" : ", ") << json::quoted(name) << ": {\"dtype\": "
       << json::quoted(hetplan::runtime::dtypeName(t.dtype())) << ", \"shape\": " << shapeJson(t.shape());
    if (saved.count(name)) js << ", \"file\": " << json::quoted(saved[name]);
    js << "}";
    first = false;
  }
  js << "},\n  \"openblas_num_threads\": " << json::quoted(envOr("OPENBLAS_NUM_THREADS", ""))
     << ",\n  \"omp_num_threads\": " << json::quoted(envOr("OMP_NUM_THREADS", ""))
     << ",\n  \"warmup\": " << warmup << ",\n  \"iters\": " << iters
     << ",\n  \"load_ms\": " << loadMs << ",\n  \"median_ms\": " << median(sorted)
     << ",\n  \"p90_ms\": " << percentile(sorted, 90) << ",\n  \"min_ms\": " << sorted.front()
     << ",\n  \"mean_ms\": " << sum / samples.size() << ",\n  \"max_ms\": " << sorted.back()
     << "\n}\n";
  std::cout << js.str();
  return 0;
}
