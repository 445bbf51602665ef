//===- RunNodeTests.cpp - hetplan-run-node-tests --------------------------===//
//
// Runs ONNX node test cases (model.onnx + test_data_set_0/{input,output}_N.pb)
// through the CPU runtime, each in a forked child (a crash cannot take the
// driver down), and classifies each case:
//   pass         outputs match (float: |a-b| <= 1e-4 + 1e-3*|b|; others exact)
//   unsupported  the load-time check refused the model, or loading/running
//                threw a "not supported"/"unsupported" error
//   wrong        wrong output: values, shape or element type differ
//   error        any other error while loading or running
//   crash        the child died on a signal or timed out
// ("fail" in the summary lines is wrong + error.)
// A case without test_data_set_0 (../shared/models/onnx-node-v1.22 has
// model.onnx only) is loaded and checked, not run: "pass" there means the
// load-time check accepted it.
//
// Counts are reported for all cases and per group, by the element types of
// the graph inputs and outputs: float32 (all float32), float16 (any
// float16/bfloat16), int8 (any int8/uint8, no half type), other (the
// rest: int64, bool, double, mixed types).
//
// --expected FILE pins what is not expected to pass (test/runtime/
// node-expected.txt): a case not pinned must pass, a pinned case must keep
// its class (a pinned case that passes must be unpinned), and each group
// must reach its floor. A wrong output or a crash always fails and cannot be
// pinned (except an explicit "known-wrong" line, for a real wrong result
// kept on record with its reason). --update-expected rewrites FILE from the
// run and refuses while any case gives a wrong output or crashes.
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
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace hetplan::runtime;

namespace {

enum Outcome { Pass = 0, Wrong = 1, Unsupported = 2, Error = 3, Crash = 4 };
const char *kNames[] = {"pass", "wrong", "unsupported", "error", "crash"};
/// The child reports its outcome as kExitBase + Outcome, so a library that
/// calls exit(1) on its own reads as a crash, not as an outcome.
const int kExitBase = 40;

/// A refusal worded as such ("X is not supported", "unsupported Y") is a
/// missing feature; any other exception is an error.
bool soundsUnsupported(const std::string &msg) {
  return msg.find("not supported") != std::string::npos || msg.find("unsupported") != std::string::npos ||
         msg.find("no CPU kernel") != std::string::npos;
}

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
      if (!why.empty()) { msg = why; return Wrong; }
    }
    return Pass;
  } catch (const std::exception &e) {
    msg = e.what();
    return soundsUnsupported(msg) ? Unsupported : Error;
  }
}

enum Group { GFloat32 = 0, GFloat16 = 1, GInt8 = 2, GOther = 3 };
const char *kGroupNames[] = {"float32", "float16", "int8/uint8", "other"};
const char *kGroupKeys[] = {"float32", "float16", "int8", "other"}; // in the expectation file
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
    ::_exit(kExitBase + static_cast<int>(o));
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
  if (WIFEXITED(status) && WEXITSTATUS(status) >= kExitBase + Pass && WEXITSTATUS(status) <= kExitBase + Error)
    return static_cast<Outcome>(WEXITSTATUS(status) - kExitBase);
  msg = WIFSIGNALED(status) ? std::string("killed by signal ") + strsignal(WTERMSIG(status)) : "exit status " + std::to_string(WEXITSTATUS(status));
  return Crash;
}

/// One case's result.
struct Result {
  std::string name;
  Group group;
  Outcome outcome;
  std::string msg;
};

/// A pin: a case not expected to pass, with its class and why.
struct Pin {
  Outcome outcome; // Unsupported, Error, or Wrong for a "known-wrong" line
  std::string reason;
  bool seen = false;
};

/// The expectation file: floors per group and pins per case.
struct Expected {
  long floor[4] = {-1, -1, -1, -1};
  std::map<std::string, Pin> pins;
};

const char *pinClass(Outcome o) { return o == Wrong ? "known-wrong" : kNames[o]; }

/// The reason as written in a pin: one line, without the case's folder and
/// model file (the pin must not depend on where the data lies), at most 160
/// characters.
std::string pinReason(const Result &r, const std::string &dir) {
  std::string s = r.msg;
  for (size_t p; (p = s.find(dir + "/")) != std::string::npos;) s.erase(p, dir.size() + 1);
  if (s.rfind("model.onnx: ", 0) == 0) s.erase(0, 12);
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

std::string pinLine(const std::string &name, Outcome o, const std::string &reason) {
  return name + " " + pinClass(o) + " " + reason;
}

bool readExpected(const std::string &path, Expected &e, std::string &err) {
  std::ifstream in(path);
  if (!in) { err = "cannot read " + path; return false; }
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string first, second, rest;
    ss >> first >> second;
    std::getline(ss >> std::ws, rest);
    auto bad = [&](const std::string &why) { err = path + ":" + std::to_string(no) + ": " + why + ": " + line; return false; };
    if (first == "floor") {
      int g = 0;
      while (g < 4 && second != kGroupKeys[g]) ++g;
      if (g == 4) return bad("unknown group");
      try { e.floor[g] = std::stol(rest); } catch (...) { return bad("floor is not a number"); }
      continue;
    }
    Outcome o;
    if (second == "unsupported") o = Unsupported;
    else if (second == "error") o = Error;
    else if (second == "known-wrong") o = Wrong;
    else return bad("class must be unsupported, error or known-wrong (a crash cannot be pinned)");
    if (rest.empty()) return bad("a pin needs a reason");
    if (!e.pins.emplace(first, Pin{o, rest}).second) return bad("case pinned twice");
  }
  return true;
}

/// Compares the run with the pins; returns the problems, one per line.
std::vector<std::string> checkExpected(const std::vector<Result> &results, const std::vector<std::string> &dirs,
                                       Expected &e, const std::string &file, const long passed[4]) {
  std::vector<std::string> bad;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result &r = results[i];
    std::string tag = r.name + kGroupTags[r.group];
    auto it = e.pins.find(r.name);
    if (r.outcome == Crash) { bad.push_back("CRASH " + tag + ": " + r.msg); if (it != e.pins.end()) it->second.seen = true; continue; }
    if (it == e.pins.end()) {
      if (r.outcome == Wrong) bad.push_back("WRONG OUTPUT " + tag + ": " + r.msg);
      else if (r.outcome != Pass)
        bad.push_back("NOT PINNED " + tag + " gives " + kNames[r.outcome] + ": " + r.msg + "\n    (fix it, or if it is expected add to " + file +
                      ": " + pinLine(r.name, r.outcome, pinReason(r, dirs[i])) + ")");
      continue;
    }
    Pin &p = it->second;
    p.seen = true;
    if (p.outcome == r.outcome) continue;
    if (r.outcome == Pass)
      bad.push_back("NOW PASSES " + tag + ": remove this line from " + file + ": " + pinLine(r.name, p.outcome, p.reason));
    else if (r.outcome == Wrong)
      bad.push_back("WRONG OUTPUT " + tag + " (pinned as " + pinClass(p.outcome) + "): " + r.msg);
    else
      bad.push_back("CHANGED " + tag + ": pinned as " + pinClass(p.outcome) + ", now " + kNames[r.outcome] + ": " + r.msg +
                    "\n    (if expected, replace its line in " + file + " with: " + pinLine(r.name, r.outcome, pinReason(r, dirs[i])) + ")");
  }
  for (const auto &[name, p] : e.pins)
    if (!p.seen) bad.push_back("STALE PIN " + name + ": no such case in the folders run; remove its line from " + file);
  for (int g = GFloat32; g <= GOther; ++g)
    if (e.floor[g] >= 0 && passed[g] < e.floor[g])
      bad.push_back(std::string("FLOOR ") + std::to_string(passed[g]) + " " + kGroupNames[g] + " cases pass, the floor in " + file +
                    " is " + std::to_string(e.floor[g]));
  return bad;
}

/// Rewrites the expectation file from the run. Refuses (writes nothing)
/// while a case crashes or gives a wrong output not already on record as
/// known-wrong: those are bugs to fix, never expectations.
bool writeExpected(const std::string &file, const std::vector<Result> &results, const std::vector<std::string> &dirs,
                   const Expected &old, const long passed[4]) {
  std::vector<std::string> refused, pins, knownWrong;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result &r = results[i];
    auto it = old.pins.find(r.name);
    if (r.outcome == Crash || (r.outcome == Wrong && (it == old.pins.end() || it->second.outcome != Wrong)))
      refused.push_back(std::string(kNames[r.outcome]) + " " + r.name + kGroupTags[r.group] + ": " + r.msg);
    else if (r.outcome == Wrong) knownWrong.push_back(pinLine(r.name, Wrong, it->second.reason));
    else if (r.outcome != Pass) pins.push_back(pinLine(r.name, r.outcome, pinReason(r, dirs[i])));
  }
  if (!refused.empty()) {
    std::cout << "REFUSED to write " << file << ": " << refused.size()
              << " case(s) crash or give a wrong output; fix them (a wrong number is never an expectation):\n";
    for (const auto &l : refused) std::cout << "  " << l << "\n";
    return false;
  }
  std::ofstream out(file);
  if (!out) { std::cout << "cannot write " << file << "\n"; return false; }
  out << "# Expected results of hetplan-run-node-tests (written by --update-expected; see docs/runtime.md,\n"
         "# \"Conformance\"). Every case not listed must pass. A line is CASE CLASS REASON, CLASS being\n"
         "# unsupported (refused at load, or a \"not supported\" error) or error (any other error). A wrong\n"
         "# output or a crash is never pinned. \"floor GROUP N\": at least N cases of the group pass.\n";
  for (int g = GFloat32; g <= GOther; ++g) out << "floor " << kGroupKeys[g] << " " << passed[g] << "\n";
  for (const auto &l : pins) out << l << "\n";
  out << "# Known wrong: real wrong outputs kept on record, each with its reason (\"known-wrong\"; added by\n"
         "# hand only, kept by --update-expected while the case stays wrong).\n";
  for (const auto &l : knownWrong) out << l << "\n";
  std::cout << "wrote " << file << ": " << pins.size() << " pinned, " << knownWrong.size() << " known wrong; floors";
  for (int g = GFloat32; g <= GOther; ++g) std::cout << " " << kGroupKeys[g] << " " << passed[g];
  std::cout << "\n";
  return true;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> roots;
  long minPassed[4] = {-1, -1, -1, -1}; // float32, float16, int8, other groups
  int timeoutS = 60, listMax = 30;
  bool verbose = false, update = false, skipMissing = false;
  std::string expectedFile;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--min-float32-passed" && i + 1 < argc) minPassed[GFloat32] = std::stol(argv[++i]);
    else if (a == "--min-float16-passed" && i + 1 < argc) minPassed[GFloat16] = std::stol(argv[++i]);
    else if (a == "--min-int8-passed" && i + 1 < argc) minPassed[GInt8] = std::stol(argv[++i]);
    else if (a == "--min-other-passed" && i + 1 < argc) minPassed[GOther] = std::stol(argv[++i]);
    else if (a == "--expected" && i + 1 < argc) expectedFile = argv[++i];
    else if (a == "--update-expected") update = true;
    else if (a == "--skip-missing") skipMissing = true;
    else if (a == "--timeout" && i + 1 < argc) timeoutS = std::stoi(argv[++i]);
    else if (a == "--list" && i + 1 < argc) listMax = std::stoi(argv[++i]);
    else if (a == "-v") verbose = true;
    else if (a == "-h" || a == "--help") {
      std::cout << "usage: hetplan-run-node-tests [--expected FILE [--update-expected]] [--min-{float32,float16,int8,other}-passed N]\n"
                   "                              [--skip-missing] [--timeout S] [--list N] [-v] DIR...\n"
                   "  DIR is a case folder (model.onnx) or a folder of case folders\n"
                   "  --expected FILE     cases not expected to pass and floors per group: any other failure fails the run\n"
                   "  --update-expected   rewrite FILE from this run (refused while a case crashes or gives a wrong output)\n"
                   "  --skip-missing      exit 77 (skipped) when a DIR is absent\n"
                   "Without --expected a wrong output or a crash still fails the run.\n";
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "hetplan-run-node-tests: unknown option " << a << " (see --help)\n";
      return 2;
    } else roots.push_back(a);
  }
  if (update && expectedFile.empty()) { std::cerr << "hetplan-run-node-tests: --update-expected needs --expected FILE\n"; return 2; }
  for (const auto &r : roots)
    if (!exists(r)) {
      // The "SKIP: PATH is absent" line is what scripts/test-summary.py reads.
      if (skipMissing) { std::cout << "SKIP: " << r << " is absent\n"; return 77; }
      std::cerr << "hetplan-run-node-tests: " << r << " is absent\n";
      return 2;
    }
  Expected expected;
  if (!expectedFile.empty()) {
    std::string err;
    if (!readExpected(expectedFile, expected, err) && !(update && !exists(expectedFile))) {
      std::cerr << "hetplan-run-node-tests: " << err << "\n";
      return 2;
    }
  }
  std::vector<std::string> cases;
  for (const auto &r : roots) {
    if (exists(r + "/model.onnx")) cases.push_back(r);
    else for (const auto &e : listDir(r)) if (exists(r + "/" + e + "/model.onnx")) cases.push_back(r + "/" + e);
  }
  if (cases.empty()) { std::cerr << "hetplan-run-node-tests: no cases found\n"; return 2; }
  auto t0 = std::chrono::steady_clock::now();
  long counts[5] = {}, gcounts[4][5] = {}, nGroup[4] = {};
  std::vector<std::string> failures, crashes;
  std::vector<Result> results;
  std::map<std::string, int> unsupportedWhy;
  for (const auto &dir : cases) {
    std::string msg;
    Outcome o = runIsolated(dir, msg, timeoutS);
    Group g = caseGroup(dir);
    ++counts[o];
    ++nGroup[g]; ++gcounts[g][o];
    std::string name = dir.substr(dir.find_last_of('/') + 1);
    results.push_back({name, g, o, msg});
    if (o == Wrong || o == Error) failures.push_back(std::string(kNames[o]) + " " + name + kGroupTags[g] + ": " + msg);
    if (o == Crash) crashes.push_back(name + ": " + msg);
    if (o == Unsupported) {
      auto p = msg.rfind(": ");
      std::string why = p == std::string::npos ? msg : msg.substr(msg.find("): ") == std::string::npos ? p + 2 : msg.find("): ") + 3);
      ++unsupportedWhy[why];
    }
    if (verbose) std::cout << kNames[o] << " " << (kGroupTags[g][0] ? kGroupTags[g] + 1 : "") << " " << name << (msg.empty() ? "" : "  " + msg) << "\n";
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // "fail" (wrong + error) keeps the summary's shape, which scripts read.
  auto line = [&](const char *label, long *c, long total) {
    std::cout << label << ": " << total << " cases: " << c[Pass] << " pass, " << c[Unsupported] << " unsupported, "
              << c[Wrong] + c[Error] << " fail, " << c[Crash] << " crash";
    if (total) std::cout << " (" << (100.0 * c[Pass] / total) << "% pass; fail: " << c[Wrong] << " wrong output, " << c[Error] << " error)";
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
  long passed[4];
  for (int g = GFloat32; g <= GOther; ++g) {
    line(kGroupNames[g], gcounts[g], nGroup[g]);
    passed[g] = gcounts[g][Pass];
  }
  std::cout << "time: " << secs << " s\n";
  if (update) return writeExpected(expectedFile, results, cases, expected, passed) ? 0 : 1;
  int rc = 0;
  if (!expectedFile.empty()) {
    auto bad = checkExpected(results, cases, expected, expectedFile, passed);
    for (const auto &b : bad) std::cout << b << "\n";
    if (!bad.empty()) {
      std::cout << "FAILED: " << bad.size() << " difference(s) from " << expectedFile;
      if (counts[Wrong] || counts[Crash]) std::cout << " (fix the wrong outputs and crashes: they are never pinned)\n";
      else std::cout << " (a case that now passes or is newly refused for a good reason: rerun with --update-expected)\n";
      rc = 1;
    }
  } else {
    if (counts[Crash]) { std::cout << "FAILED: " << counts[Crash] << " crashes\n"; rc = 1; }
    if (counts[Wrong]) {
      for (const auto &r : results)
        if (r.outcome == Wrong) std::cout << "WRONG OUTPUT " << r.name << kGroupTags[r.group] << ": " << r.msg << "\n";
      std::cout << "FAILED: " << counts[Wrong] << " wrong outputs\n";
      rc = 1;
    }
  }
  for (int g = GFloat32; g <= GOther; ++g)
    if (minPassed[g] >= 0 && gcounts[g][Pass] < minPassed[g]) {
      std::cout << "FAILED: " << gcounts[g][Pass] << " " << kGroupNames[g] << " cases pass, the bar is " << minPassed[g] << "\n";
      rc = 1;
    }
  return rc;
}
