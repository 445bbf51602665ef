//===- RunNodeTests.cpp - hetplan-run-node-tests --------------------------===//
//
// Runs ONNX node test cases (model.onnx + test_data_set_0/{input,output}_N.pb)
// through the CPU runtime, each in a forked child (a crash cannot take the
// driver down), and classifies each case:
//   pass         outputs match (float: |a-b| <= 1e-4 + 1e-3*|b|; others exact)
//   unsupported  the load-time check refused the model
//   fail         wrong numbers or a runtime error
//   crash        the child died on a signal or timed out
// A case without test_data_set_0 (../shared/models/onnx-node-v1.22 has
// model.onnx only) is loaded and checked, not run: "pass" there means the
// load-time check accepted it.
//
// Counts are reported for all cases and per group, by the element types of
// the graph inputs and outputs: float32 (all float32), float16 (any
// float16/bfloat16), int8 (any int8/uint8, no half type).
//
// float16/bfloat16 outputs are compared within one unit in the last place
// of their type (2^-10, 2^-7 relative) on top of the float tolerance: the
// runtime computes them in float32 and rounds once, references may round
// per step, and ONNX 1.12's bfloat16 data was made by truncation.
// ONNX 1.12 stores bfloat16 test tensors as uint16: such a file tensor is
// read as bfloat16 when the graph declares bfloat16.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <iostream>
#include <map>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace hetplan::runtime;

namespace {

enum Outcome { Pass = 0, Fail = 1, Unsupported = 2, Crash = 3 };
const char *kNames[] = {"pass", "fail", "unsupported", "crash"};

bool exists(const std::string &p) { struct stat st; return ::stat(p.c_str(), &st) == 0; }

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> out;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) if (e->d_name[0] != '.') out.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

double valueAt(const Tensor &t, int64_t i) { return t.scalarAsDouble(i); }

/// ONNX 1.12 test data holds bfloat16 tensors as uint16 (same bits).
Tensor retag(const Tensor &t, DType declared) {
  if (declared == DType::BFloat16 && t.dtype() == DType::UInt16)
    return Tensor::view(DType::BFloat16, t.shape(), t.raw(), std::make_shared<Tensor>(t));
  return t;
}

std::string compare(const Tensor &got, const Tensor &want, const std::string &name) {
  if (got.dtype() != want.dtype())
    return "output '" + name + "': element type " + dtypeName(got.dtype()) + ", expected " + dtypeName(want.dtype());
  if (got.shape() != want.shape())
    return "output '" + name + "': shape " + shapeString(got.shape()) + ", expected " + shapeString(want.shape());
  bool isFloat = isFloatType(want.dtype());
  if (!isFloat) {
    if (std::memcmp(got.raw(), want.raw(), want.nbytes()) != 0) {
      for (int64_t i = 0; i < want.numel(); ++i)
        if (valueAt(got, i) != valueAt(want, i))
          return "output '" + name + "'[" + std::to_string(i) + "] = " + std::to_string(valueAt(got, i)) + ", expected " + std::to_string(valueAt(want, i));
    }
    return "";
  }
  double ulp = want.dtype() == DType::Float16 ? 1.0 / 1024 : want.dtype() == DType::BFloat16 ? 1.0 / 128 : 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = valueAt(got, i), b = valueAt(want, i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b) continue;
    if (!(std::fabs(a - b) <= 1e-4 + (1e-3 + ulp) * std::fabs(b)))
      return "output '" + name + "'[" + std::to_string(i) + "] = " + std::to_string(a) + ", expected " + std::to_string(b);
  }
  return "";
}

/// Runs one case in this process; returns the outcome and a message.
Outcome runCase(const std::string &dir, std::string &msg) {
  try {
    Model model = loadModel(dir + "/model.onnx");
    Executor exec(model);
    auto problems = exec.check();
    if (!problems.empty()) { msg = problems[0]; return Unsupported; }
    std::string data = dir + "/test_data_set_0";
    if (!exists(data)) return Pass; // model only: loading and the check are the test
    std::map<std::string, Tensor> inputs;
    // input_N.pb lines up with the graph inputs that are not initializers
    for (size_t i = 0; exists(data + "/input_" + std::to_string(i) + ".pb"); ++i) {
      std::string name;
      Tensor t = loadTensorFile(data + "/input_" + std::to_string(i) + ".pb", &name);
      if (i < model.inputs.size()) { name = model.inputs[i].name; t = retag(t, model.inputs[i].dtype); }
      inputs[name] = t;
    }
    auto outputs = exec.run(inputs);
    for (size_t i = 0; i < model.outputs.size(); ++i) {
      std::string file = data + "/output_" + std::to_string(i) + ".pb";
      if (!exists(file)) continue;
      Tensor want = retag(loadTensorFile(file), model.outputs[i].dtype);
      std::string why = compare(outputs.at(model.outputs[i].name), want, model.outputs[i].name);
      if (!why.empty()) { msg = why; return Fail; }
    }
    return Pass;
  } catch (const std::exception &e) {
    msg = e.what();
    return Fail;
  }
}

enum Group { GFloat32 = 0, GFloat16 = 1, GInt8 = 2, GOther = 3 };
const char *kGroupNames[] = {"float32", "float16", "int8/uint8", "other"};
const char *kGroupTags[] = {" [f32]", " [f16]", " [i8]", ""};

/// float32: every graph input and output is float32; float16: any of them
/// is float16/bfloat16; int8: any is int8/uint8 (and none is a half type).
Group caseGroup(const std::string &dir) {
  try {
    Model m = loadModel(dir + "/model.onnx");
    bool all32 = !m.outputs.empty(), half = false, i8 = false;
    for (const auto *list : {&m.inputs, &m.outputs})
      for (const auto &v : *list) {
        all32 = all32 && v.dtype == DType::Float32;
        half = half || v.dtype == DType::Float16 || v.dtype == DType::BFloat16;
        i8 = i8 || v.dtype == DType::Int8 || v.dtype == DType::UInt8;
      }
    return half ? GFloat16 : i8 ? GInt8 : all32 ? GFloat32 : GOther;
  } catch (...) { return GOther; }
}

Outcome runIsolated(const std::string &dir, std::string &msg, int timeoutS) {
  int fds[2];
  if (::pipe(fds) != 0) { msg = "pipe failed"; return Crash; }
  std::cout.flush();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(timeoutS);
    std::string m;
    Outcome o = runCase(dir, m);
    m = m.substr(0, 400);
    (void)!::write(fds[1], m.data(), m.size());
    ::close(fds[1]);
    ::_exit(static_cast<int>(o));
  }
  ::close(fds[1]);
  std::string buf;
  char tmp[512];
  ssize_t n;
  while ((n = ::read(fds[0], tmp, sizeof tmp)) > 0) buf.append(tmp, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  msg = buf;
  if (WIFEXITED(status) && WEXITSTATUS(status) <= 2) return static_cast<Outcome>(WEXITSTATUS(status));
  msg = WIFSIGNALED(status) ? std::string("killed by signal ") + strsignal(WTERMSIG(status)) : "exit status " + std::to_string(WEXITSTATUS(status));
  return Crash;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> roots;
  long minPassed[3] = {-1, -1, -1}; // float32, float16, int8 groups
  int timeoutS = 60, listMax = 30;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--min-float32-passed" && i + 1 < argc) minPassed[GFloat32] = std::stol(argv[++i]);
    else if (a == "--min-float16-passed" && i + 1 < argc) minPassed[GFloat16] = std::stol(argv[++i]);
    else if (a == "--min-int8-passed" && i + 1 < argc) minPassed[GInt8] = std::stol(argv[++i]);
    else if (a == "--timeout" && i + 1 < argc) timeoutS = std::stoi(argv[++i]);
    else if (a == "--list" && i + 1 < argc) listMax = std::stoi(argv[++i]);
    else if (a == "-v") verbose = true;
    else if (a == "-h" || a == "--help") {
      std::cout << "usage: hetplan-run-node-tests [--min-float32-passed N] [--min-float16-passed N] [--min-int8-passed N] [--timeout S] [--list N] [-v] DIR...\n"
                   "  DIR is a case folder (model.onnx) or a folder of case folders\n";
      return 0;
    } else roots.push_back(a);
  }
  std::vector<std::string> cases;
  for (const auto &r : roots) {
    if (exists(r + "/model.onnx")) cases.push_back(r);
    else for (const auto &e : listDir(r)) if (exists(r + "/" + e + "/model.onnx")) cases.push_back(r + "/" + e);
  }
  if (cases.empty()) { std::cerr << "hetplan-run-node-tests: no cases found\n"; return 2; }
  auto t0 = std::chrono::steady_clock::now();
  long counts[4] = {0, 0, 0, 0}, gcounts[4][4] = {}, nGroup[4] = {};
  std::vector<std::string> failures, crashes;
  std::map<std::string, int> unsupportedWhy;
  for (const auto &dir : cases) {
    std::string msg;
    Outcome o = runIsolated(dir, msg, timeoutS);
    Group g = caseGroup(dir);
    ++counts[o];
    ++nGroup[g]; ++gcounts[g][o];
    std::string name = dir.substr(dir.find_last_of('/') + 1);
    if (o == Fail) failures.push_back(name + kGroupTags[g] + ": " + msg);
    if (o == Crash) crashes.push_back(name + ": " + msg);
    if (o == Unsupported) {
      auto p = msg.rfind(": ");
      std::string why = p == std::string::npos ? msg : msg.substr(msg.find("): ") == std::string::npos ? p + 2 : msg.find("): ") + 3);
      ++unsupportedWhy[why];
    }
    if (verbose) std::cout << kNames[o] << " " << (kGroupTags[g][0] ? kGroupTags[g] + 1 : "") << " " << name << (msg.empty() ? "" : "  " + msg) << "\n";
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto line = [&](const char *label, long *c, long total) {
    std::cout << label << ": " << total << " cases: " << c[Pass] << " pass, " << c[Unsupported] << " unsupported, "
              << c[Fail] << " fail, " << c[Crash] << " crash";
    if (total) std::cout << " (" << (100.0 * c[Pass] / total) << "% pass)";
    std::cout << "\n";
  };
  if (verbose || listMax > 0) {
    std::cout << "unsupported, by reason:\n";
    std::vector<std::pair<int, std::string>> v;
    for (auto &[k, n] : unsupportedWhy) v.push_back({n, k});
    std::sort(v.rbegin(), v.rend());
    for (size_t i = 0; i < v.size() && (int)i < listMax; ++i) std::cout << "  " << v[i].first << "  " << v[i].second << "\n";
    std::cout << "failures (" << failures.size() << "):\n";
    for (size_t i = 0; i < failures.size() && (int)i < listMax; ++i) std::cout << "  " << failures[i] << "\n";
  }
  for (const auto &c : crashes) std::cout << "CRASH " << c << "\n";
  line("all", counts, cases.size());
  for (int g = GFloat32; g <= GInt8; ++g) line(kGroupNames[g], gcounts[g], nGroup[g]);
  std::cout << "time: " << secs << " s\n";
  int rc = 0;
  if (counts[Crash]) { std::cout << "FAILED: " << counts[Crash] << " crashes\n"; rc = 1; }
  for (int g = GFloat32; g <= GInt8; ++g)
    if (minPassed[g] >= 0 && gcounts[g][Pass] < minPassed[g]) {
      std::cout << "FAILED: " << gcounts[g][Pass] << " " << kGroupNames[g] << " cases pass, the bar is " << minPassed[g] << "\n";
      rc = 1;
    }
  return rc;
}
