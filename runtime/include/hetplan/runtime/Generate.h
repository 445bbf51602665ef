//===- Generate.h - greedy decoding with a KV cache over a Session -*- C++ -*-===//
//
// Token generation for decoder models exported with their KV cache as
// graph inputs and outputs (past_N -> present_N as onnxruntime's GPT-2
// export writes them, past_key_values.N.key -> present.N.key as
// Hugging Face optimum's): a prefill of the prompt, then one run per token
// that feeds each present back as the next past. Requests are batched
// continuously: up to maxBatch decode together, a finished one leaves the
// batch at once and the next waiting request joins it after its own
// prefill (caches left-padded to a common length, the padding masked out).
// Works on any Session: a model on one rank, or a plan whose ranks
// pipeline the decoder's layers. Decode-step-only exports (input_ids fixed
// at one token, or at k) prefill the prompt in runs of that many tokens;
// encoder-decoders (createSeq2Seq) run the encoder once per request.
//
//   std::unique_ptr<hetplan::Generator> g;
//   hetplan::Generator::create(*session, &g);
//   std::vector<hetplan::GenerateResult> out;
//   g->generate({{{98, 5, 7}, 16}}, {}, &out);   // out[0].tokens
//
//===----------------------------------------------------------------------===//
#pragma once

#include "hetplan/runtime/Session.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hetplan {

struct GenerateRequest {
  std::vector<int64_t> prompt; // token ids, at least one (encoder-decoders: the decoder's start)
  int maxNewTokens = 16;
  /// Encoder-decoders only: the encoder's inputs for this request, each
  /// with its batch dim of 1 (T5: input_ids [1, S], and attention_mask, all
  /// ones when left out; Whisper: input_features [1, mels, frames]).
  std::map<std::string, runtime::Tensor> encoderInputs;
};

struct GenerateResult {
  std::vector<int64_t> tokens; // generated ids (the prompt excluded)
  double firstTokenMs = 0;     // from the call's start to the first token
  double totalMs = 0;          // from the call's start to the last token
};

struct GenerateOptions {
  /// Requests decoded together at most (continuous batching). A model
  /// without an attention_mask input decodes one request at a time (its
  /// padding could not be masked out).
  int maxBatch = 8;
  /// A request stops after generating this id (-1: only maxNewTokens).
  int64_t eosTokenId = -1;
  /// The id written into padding positions (masked out; any valid id).
  int64_t padTokenId = 0;
  /// Serving plans (ServingPlan.h) only: groups of requests in flight
  /// through a replica's pipeline at once, each with its own batch (the
  /// replica's max batch, capped by maxBatch, is shared among them, so
  /// there are never more groups than it). 0: one per stage; 1: no
  /// overlap (every stage waits for the one before).
  int pipelineGroups = 0;
};

class HETPLAN_CXX_API Generator {
public:
  /// One run of the decoder: Session::run's contract.
  using RunFunction = std::function<Status(const std::map<std::string, runtime::Tensor> &,
                                           std::map<std::string, runtime::Tensor> *,
                                           const std::vector<std::string> &)>;

  /// InvalidArgument when the session's model has no input_ids input, no
  /// logits output ([batch, sequence, vocabulary]) or a past input without
  /// its present output; Unsupported for a plan session (its shapes are
  /// fixed). The session must outlive the generator.
  static Status create(const Session &session, std::unique_ptr<Generator> *generator);
  /// The same over any runner of the model (a serving plan's replica,
  /// ServingPlan.h) whose graph inputs and outputs are `inputs`/`outputs`.
  static Status create(RunFunction run, const std::vector<TensorInfo> &inputs,
                       const std::vector<TensorInfo> &outputs, std::unique_ptr<Generator> *generator);
  /// An encoder-decoder in Hugging Face optimum's layout: `encoder`
  /// (encoder_model.onnx: its inputs -> last_hidden_state), `firstDecoder`
  /// (decoder_model.onnx: input_ids, encoder_hidden_states[,
  /// encoder_attention_mask] -> logits and present.N.decoder.* /
  /// present.N.encoder.*) and `decoder` (decoder_with_past_model.onnx:
  /// input_ids and past_key_values.N.decoder.* / .encoder.* -> logits and
  /// present.N.decoder.*). The encoder runs once per request and the cross-
  /// attention caches the first step makes are kept. `firstDecoder` may be
  /// null when `decoder` makes no cross caches of its own (it takes
  /// encoder_hidden_states every step and starts from empty caches).
  /// Requests decode one at a time: these decoders take no decoder
  /// attention mask, so rows of different lengths could not share a batch.
  static Status createSeq2Seq(const Session &encoder, const Session *firstDecoder, const Session &decoder,
                              std::unique_ptr<Generator> *generator);
  ~Generator();

  /// Encoder-decoders: the encoder's inputs (empty for a decoder-only model).
  const std::vector<TensorInfo> &encoderInputs() const;

  /// Greedy (argmax) decoding of every request; results[i] answers
  /// requests[i]. `onDone`, when set, is called as each request finishes
  /// (in finishing order). Thread-safe (each call has its own caches).
  Status generate(const std::vector<GenerateRequest> &requests, const GenerateOptions &options,
                  std::vector<GenerateResult> *results,
                  const std::function<void(size_t, const GenerateResult &)> &onDone = {}) const;

  /// The past inputs paired with their present outputs, as found.
  const std::vector<std::pair<std::string, std::string>> &cache() const;

  struct Io;

private:
  Generator(RunFunction run, std::unique_ptr<Io> io);
  /// Fills `io` from a decoder's inputs and outputs (`firstOutputs`: the
  /// first-step decoder's, for an encoder-decoder's cross caches).
  static Status classify(const std::vector<TensorInfo> &inputs, const std::vector<TensorInfo> &outputs,
                         const std::vector<std::string> &firstOutputs, Io &io);
  RunFunction run_;
  std::unique_ptr<Io> io_;
};

} // namespace hetplan
