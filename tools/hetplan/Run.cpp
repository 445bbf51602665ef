//===- Run.cpp - hetplan run: execute an inference plan on CPU threads ----===//
//
//   hetplan run PLAN --input NAME=FILE.npy ... --output DIR [--ranks N]
//               [--model MODEL]
//
// Runs one step of the plan with one thread per rank (the in-process
// communicator) and writes DIR/<output>.npy. Errors are one line, exit 1,
// and leave no output files behind.
//
//===----------------------------------------------------------------------===//

#include "tools/hetplan/Commands.h"

#include "hetplan/runtime/Npy.h"
#include "hetplan/runtime/PlanExecutor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cctype>
#include <cstdio>
#include <set>
#include <unistd.h>

namespace cl = llvm::cl;

namespace hetplan::tools {

cl::SubCommand runCmd("run", "Run an inference plan (one CPU thread per rank)");

namespace {
cl::opt<std::string> runPlan(cl::Positional, cl::Required, cl::desc("<plan file>"), cl::sub(runCmd));
cl::list<std::string> runInputs("input", cl::desc("A graph input as a NumPy file (batch on dim 0)"),
                                cl::value_desc("NAME=FILE.npy"), cl::sub(runCmd));
cl::opt<std::string> runOutput("output", cl::Required,
                               cl::desc("Folder for the outputs (<output name>.npy)"),
                               cl::value_desc("DIR"), cl::sub(runCmd));
cl::opt<int> runRanks("ranks", cl::desc("Ranks (threads); must equal the plan's rank count"),
                      cl::init(0), cl::sub(runCmd));
cl::opt<std::string> runModel("model", cl::desc("The model file (default: the path in the plan)"),
                              cl::value_desc("MODEL"), cl::sub(runCmd));
cl::opt<bool> runQuiet("quiet", cl::desc("No summary line"), cl::sub(runCmd));

/// A file name for an output: path separators and odd characters become '_'.
std::string fileNameFor(const std::string &name) {
  std::string out;
  for (char c : name)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (out.empty() || out[0] == '.') out = "_" + out;
  return out;
}
} // namespace

int runRun() {
  using namespace hetplan::runtime;
  std::vector<std::string> written; // temporary files, removed on failure
  try {
    auto exec = PlanExecutor::load(runPlan, runModel);
    if (runRanks != 0 && runRanks != exec->ranks())
      return fail(runPlan + ": the plan has " + std::to_string(exec->ranks()) + " ranks, --ranks is " +
                  std::to_string(runRanks));
    std::map<std::string, Tensor> inputs;
    for (const std::string &arg : runInputs) {
      size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        return fail("--input " + arg + ": expected NAME=FILE.npy");
      std::string name = arg.substr(0, eq);
      if (inputs.count(name)) return fail("--input " + name + " is given twice");
      Tensor t = readNpy(arg.substr(eq + 1));
      inputs[name] = std::move(t);
    }
    auto outputs = exec->run(inputs);

    if (auto ec = llvm::sys::fs::create_directories(runOutput))
      return fail(runOutput + ": cannot create: " + ec.message());
    // Write every output to a temporary name first, then rename them all:
    // a failure leaves no output files.
    std::vector<std::pair<std::string, std::string>> renames;
    std::set<std::string> used;
    for (const auto &[name, t] : outputs) {
      std::string file = fileNameFor(name);
      if (!used.insert(file).second) return fail("outputs '" + name + "' and another map to the same file " + file);
      llvm::SmallString<256> final(runOutput.getValue());
      llvm::sys::path::append(final, file + ".npy");
      std::string tmp = std::string(final) + ".tmp-" + std::to_string(::getpid());
      written.push_back(tmp);
      writeNpy(tmp, t);
      renames.push_back({tmp, std::string(final)});
    }
    for (const auto &[tmp, final] : renames)
      if (std::rename(tmp.c_str(), final.c_str()) != 0)
        throw std::runtime_error(final + ": cannot write");
    written.clear();
    if (!runQuiet) {
      llvm::outs() << "ran " << runPlan << " on " << exec->ranks() << " ranks ("
                   << exec->plan().stages_size() << " stage(s), " << exec->plan().settings().micro_batches()
                   << " micro-batch(es)); wrote";
      for (const auto &[name, t] : outputs)
        llvm::outs() << " " << fileNameFor(name) << ".npy " << t.describe();
      llvm::outs() << " to " << runOutput << "\n";
    }
    return 0;
  } catch (const std::exception &e) {
    for (const auto &f : written) std::remove(f.c_str());
    return fail(e.what());
  }
}

} // namespace hetplan::tools
