//===- Serve.cpp - hetplan serve: prompts in, generated token ids out -----===//
//
//   hetplan serve MODEL|PLAN [--prompts FILE|-] [-o FILE|-] [--max-batch N]
//                 [--max-new-tokens N] [--eos ID] [--pad ID] [--threads N]
//                 [--pipeline-groups N]
//
// Reads one JSON object per line ({"prompt": [ids], "max_new_tokens": N,
// "id": anything}), decodes them greedily with the model's KV cache and
// continuous batching (hetplan::Generator, Generate.h), and writes one JSON
// line per request: {"index", "id", "tokens", "first_token_ms",
// "total_ms"}. To stdout the lines come as requests finish; to a file, in
// input order, written whole or not at all. A summary line (requests,
// tokens, tokens/s) goes to stderr.
//
//===----------------------------------------------------------------------===//
#include "tools/hetplan/Commands.h"
#include "tools/hetplan/ServePrompts.h"

#include "hetplan/runtime/Files.h"
#include "hetplan/runtime/Generate.h"
#include "hetplan/runtime/ServingPlan.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>

using namespace llvm;

namespace hetplan::tools {

cl::SubCommand serveCmd("serve", "Generate tokens for prompts (JSON lines) with a decoder model or plan: "
                                 "KV cache, greedy decoding, continuous batching");

namespace {
cl::opt<std::string> serveModel(cl::Positional, cl::Required, cl::desc("<model.onnx or plan file>"),
                                cl::sub(serveCmd));
cl::opt<std::string> servePrompts("prompts", cl::desc("JSON lines, one request each: {\"prompt\": [ids], "
                                                      "\"max_new_tokens\": N, \"id\": ...} (- for stdin)"),
                                  cl::value_desc("FILE"), cl::init("-"), cl::sub(serveCmd));
cl::opt<std::string> serveOutput("o", cl::desc("Where the JSON lines of generated ids go (- for stdout, "
                                               "as requests finish)"),
                                 cl::value_desc("FILE"), cl::init("-"), cl::sub(serveCmd));
cl::opt<int> serveMaxBatch("max-batch", cl::desc("Requests decoded together at most (continuous batching)"),
                           cl::init(8), cl::sub(serveCmd));
cl::opt<int> serveMaxNew("max-new-tokens", cl::desc("Tokens per request unless its line says otherwise"),
                         cl::init(16), cl::sub(serveCmd));
cl::opt<int64_t> serveEos("eos", cl::desc("Stop a request after this token id (-1: never)"), cl::init(-1),
                          cl::sub(serveCmd));
cl::opt<int64_t> servePad("pad", cl::desc("Token id written into (masked) padding"), cl::init(0),
                          cl::sub(serveCmd));
cl::opt<std::string> serveModelPath("model", cl::desc("Serving plans: the ONNX model to run (default: the plan's)"),
                                    cl::value_desc("MODEL"), cl::sub(serveCmd));
cl::opt<int> servePipelineGroups("pipeline-groups",
                                 cl::desc("Serving plans: groups of requests in flight through a replica's "
                                          "stages at once (0: one per stage; 1: no overlap)"),
                                 cl::init(0), cl::sub(serveCmd));
cl::opt<int> serveThreads("threads", cl::desc("Kernel threads (0: OMP_NUM_THREADS or every core)"),
                          cl::init(0), cl::sub(serveCmd));

std::string resultLine(size_t index, const PromptLine &line, const GenerateResult &r) {
  json::Array tokens;
  for (int64_t t : r.tokens) tokens.push_back(t);
  json::Object o{{"index", int64_t(index)},
                 {"id", line.id},
                 {"tokens", std::move(tokens)},
                 {"first_token_ms", std::round(r.firstTokenMs * 1000) / 1000},
                 {"total_ms", std::round(r.totalMs * 1000) / 1000}};
  std::string s;
  raw_string_ostream os(s);
  os << json::Value(std::move(o));
  return s;
}
} // namespace

int runServe() {
  if (serveMaxBatch < 1) return fail("--max-batch must be at least 1");
  if (serveMaxNew < 1 || serveMaxNew > (1 << 20)) return fail("--max-new-tokens must be from 1 to 1048576");
  if (serveThreads < 0) return fail("--threads must be >= 0");
  if (servePipelineGroups < 0) return fail("--pipeline-groups must be >= 0 (0: one per stage)");
  std::string promptName = servePrompts == "-" ? std::string("<stdin>") : std::string(servePrompts);
  if (servePrompts != "-" && sys::fs::exists(servePrompts) && !sys::fs::is_regular_file(servePrompts))
    return fail(servePrompts + ": not a regular file");
  auto buffer = servePrompts == "-" ? MemoryBuffer::getSTDIN() : MemoryBuffer::getFile(servePrompts);
  if (!buffer) return fail(promptName + ": cannot read: " + buffer.getError().message());
  auto lines = parsePrompts((*buffer)->getBuffer(), promptName, serveMaxNew);
  if (!lines) return fail(toString(lines.takeError()));

  // A serving plan (hetplan compile --mode serve): its replicas on CPU
  // threads; anything else: a model (or plan) session.
  std::unique_ptr<ServingPlan> serving;
  std::unique_ptr<Session> session;
  std::unique_ptr<Generator> generator;
  if (sys::fs::exists(serveModel) && !sys::fs::is_regular_file(serveModel))
    return fail(serveModel + ": not a regular file");
  bool planFile = false;
  if (auto head = MemoryBuffer::getFileSlice(serveModel, 8, 0); head && (*head)->getBuffer() == "HETPLAN\n")
    planFile = true;
  Status st;
  bool isServingPlan = false;
  if (planFile) {
    st = ServingPlan::load(serveModel, serveModelPath, &serving);
    isServingPlan = st.ok();
    // InvalidArgument: a plan of another mode, run as a plan session below.
    if (!isServingPlan && st.code() != StatusCode::InvalidArgument) return fail(st.message());
  }
  if (isServingPlan) {
    for (int r = 0; r < serving->replicas(); ++r) errs() << "hetplan serve: " << serving->describeReplica(r) << "\n";
  } else {
    SessionOptions options;
    options.threads = serveThreads;
    if (!serveModelPath.empty()) options.modelPath = serveModelPath;
    st = Session::create(serveModel, &session, options);
    if (!st.ok())
      return fail(StringRef(st.message()).starts_with(serveModel) ? st.message() : serveModel + ": " + st.message());
    st = Generator::create(*session, &generator);
    if (!st.ok()) return fail(serveModel + ": cannot generate: " + st.message());
  }

  std::vector<GenerateRequest> requests;
  for (const PromptLine &l : *lines) requests.push_back(l.request);
  GenerateOptions gen;
  gen.maxBatch = serveMaxBatch;
  gen.eosTokenId = serveEos;
  gen.padTokenId = servePad;
  gen.pipelineGroups = servePipelineGroups;
  bool toStdout = serveOutput == "-";
  std::vector<GenerateResult> results;
  std::vector<int> replicaOf;
  auto t0 = std::chrono::steady_clock::now();
  auto onDone = [&](size_t i, const GenerateResult &r) {
    if (toStdout) outs() << resultLine(i, (*lines)[i], r) << "\n", outs().flush();
  };
  st = isServingPlan ? serving->generate(requests, gen, &results, &replicaOf, onDone)
                     : generator->generate(requests, gen, &results, onDone);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return fail(serveModel + ": " + st.message());
  if (!toStdout) {
    std::string text;
    for (size_t i = 0; i < results.size(); ++i) text += resultLine(i, (*lines)[i], results[i]) + "\n";
    std::string error;
    if (!runtime::writeFileAtomically(serveOutput, text, error)) return fail(error);
  }
  size_t tokens = 0;
  for (const auto &r : results) tokens += r.tokens.size();
  errs() << "served " << results.size() << " requests, " << tokens << " tokens in "
         << format("%.3f", seconds) << " s: " << format("%.1f", seconds > 0 ? tokens / seconds : 0.0)
         << " tokens/s (at most " << serveMaxBatch << " at once)\n";
  return 0;
}

} // namespace hetplan::tools
