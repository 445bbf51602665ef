//===- Serve.cpp - hetplan serve: prompts in, generated token ids out -----===//
//
//   hetplan serve MODEL|PLAN|DIR [--prompts FILE|-] [-o FILE|-] [--max-batch N]
//                 [--max-new-tokens N] [--eos ID] [--pad ID] [--threads N]
//                 [--pipeline-groups N] [--encoder FILE [--first-decoder FILE]]
//
// An encoder-decoder is optimum's folder (encoder_model.onnx,
// decoder_model.onnx, decoder_with_past_model.onnx) or the decoder with
// --encoder (and --first-decoder); each request line then gives its
// "encoder" inputs.
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
#include "llvm/Support/Path.h"
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
cl::opt<std::string> serveEncoder("encoder",
                                  cl::desc("Encoder-decoders: the encoder model (optimum's encoder_model.onnx); "
                                           "MODEL is then the decoder that takes the caches"),
                                  cl::value_desc("FILE"), cl::sub(serveCmd));
cl::opt<std::string> serveFirstDecoder("first-decoder",
                                       cl::desc("Encoder-decoders: the first step's decoder, which makes the "
                                                "cross-attention caches (optimum's decoder_model.onnx)"),
                                       cl::value_desc("FILE"), cl::sub(serveCmd));
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
/// Each line's "encoder" arrays as tensors of the encoder's `inputs` (their
/// element type, a batch dim of 1 in front) into request.encoderInputs; or
/// one error naming `name:LINE` and the input. Lines without "encoder" are
/// an error when `inputs` is not empty, and the reverse.
Error encoderTensors(std::vector<PromptLine> &lines, const std::vector<TensorInfo> &inputs, StringRef name) {
  for (PromptLine &l : lines) {
    auto where = [&] { return (name + ":" + Twine(l.line) + ": ").str(); };
    if (inputs.empty()) {
      if (!l.encoder.empty())
        return createStringError(where() + "\"encoder\" inputs given to a decoder-only model (give an "
                                           "encoder-decoder: --encoder, or optimum's folder)");
      continue;
    }
    if (l.encoder.empty())
      return createStringError(where() + "needs \"encoder\": the encoder's inputs for this request");
    for (const auto &[key, a] : l.encoder) {
      const TensorInfo *info = nullptr;
      for (const TensorInfo &i : inputs)
        if (i.name == key) info = &i;
      if (!info) {
        std::string names;
        for (const TensorInfo &i : inputs) names += (names.empty() ? "'" : ", '") + i.name + "'";
        return createStringError(where() + "the encoder has no input '" + printableName(key) +
                                 "' (its inputs: " + names + ")");
      }
      std::vector<int64_t> shape{1};
      shape.insert(shape.end(), a.shape.begin(), a.shape.end());
      runtime::Tensor t(info->dtype, shape);
      for (size_t i = 0; i < a.values.size(); ++i) {
        double v = a.values[i];
        switch (info->dtype) {
        case runtime::DType::Float32: t.data<float>()[i] = float(v); break;
        case runtime::DType::Int64:
        case runtime::DType::Int32: {
          bool is32 = info->dtype == runtime::DType::Int32;
          double lim = is32 ? 2147483648.0 : 9223372036854775808.0;
          if (v != std::floor(v) || v < -lim || v >= lim)
            return createStringError(where() + "encoder input '" + printableName(key) + "' holds " + std::to_string(v) +
                                     ", not an " + (is32 ? "int32" : "int64"));
          if (is32) t.data<int32_t>()[i] = int32_t(v);
          else t.data<int64_t>()[i] = int64_t(v);
          break;
        }
        default:
          return createStringError(where() + "encoder input '" + printableName(key) + "' is " +
                                   runtime::dtypeName(info->dtype) + ": JSON feeds float32, int32 and int64 only");
        }
      }
      l.request.encoderInputs[key] = std::move(t);
    }
  }
  return Error::success();
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
  // threads; an encoder-decoder (optimum's folder, or --encoder): three
  // model sessions; anything else: a model (or plan) session.
  std::unique_ptr<ServingPlan> serving;
  std::unique_ptr<Session> session, encoder, firstDecoder;
  std::unique_ptr<Generator> generator;
  std::string decoderPath = serveModel, encoderPath = serveEncoder, firstPath = serveFirstDecoder;
  if (sys::fs::is_directory(serveModel)) {
    if (!encoderPath.empty() || !firstPath.empty())
      return fail(serveModel + ": a folder names its own models; --encoder and --first-decoder take a decoder file");
    auto in = [&](const char *file) { return (Twine(serveModel) + "/" + file).str(); };
    encoderPath = in("encoder_model.onnx"), firstPath = in("decoder_model.onnx");
    decoderPath = in("decoder_with_past_model.onnx");
    for (const std::string &p : {encoderPath, firstPath, decoderPath})
      if (!sys::fs::is_regular_file(p))
        return fail(serveModel + ": a folder serves an encoder-decoder in optimum's layout (encoder_model.onnx, "
                                 "decoder_model.onnx, decoder_with_past_model.onnx); " +
                    sys::path::filename(p).str() + " is missing");
  } else if (!firstPath.empty() && encoderPath.empty()) {
    return fail("--first-decoder needs --encoder (an encoder-decoder's three models)");
  }
  const bool seq2seq = !encoderPath.empty();
  if (sys::fs::exists(serveModel) && !sys::fs::is_regular_file(serveModel) && !seq2seq)
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
  if (seq2seq) {
    if (planFile) return fail(serveModel + ": --encoder serves models, not plans (encoder-decoder serving plans "
                                           "are not supported yet)");
    SessionOptions options;
    options.threads = serveThreads;
    auto open = [&](const std::string &p, std::unique_ptr<Session> *s) -> bool {
      Status o = Session::create(p, s, options);
      if (!o.ok()) st = {o.code(), StringRef(o.message()).starts_with(p) ? o.message() : p + ": " + o.message()};
      return o.ok();
    };
    if (!open(encoderPath, &encoder) || (!firstPath.empty() && !open(firstPath, &firstDecoder)) ||
        !open(decoderPath, &session))
      return fail(st.message());
    st = Generator::createSeq2Seq(*encoder, firstDecoder.get(), *session, &generator);
    if (!st.ok()) return fail(serveModel + ": cannot generate: " + st.message());
  } else if (isServingPlan) {
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

  if (Error e = encoderTensors(*lines, generator ? generator->encoderInputs() : std::vector<TensorInfo>{},
                               promptName))
    return fail(toString(std::move(e)));
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
  // Session errors name the model already: name it once.
  if (!st.ok())
    return fail(StringRef(st.message()).starts_with(serveModel) ? st.message() : serveModel + ": " + st.message());
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
         << " tokens/s ("
         << (seq2seq ? std::string("one at a time: an encoder-decoder's decoders take no attention mask")
                     : "at most " + std::to_string(serveMaxBatch) + " at once")
         << ")\n";
  return 0;
}

} // namespace hetplan::tools
