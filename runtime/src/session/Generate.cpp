//===- Generate.cpp - greedy decoding with a KV cache, continuous batching ===//
//
// The cache tensors stay whole tensors of the model's layout; only their
// batch axis (rows join and leave) and sequence axis (left padding to a
// common length, trimmed when every row's mask starts with padding) change
// between runs. Each row keeps its attention-mask row, so a request decodes
// exactly as it would alone: padding is masked out and positions count only
// the request's own tokens.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Generate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <stdexcept>

namespace hetplan {

using runtime::DType;
using runtime::Tensor;

struct Generator::Io {
  struct Cache {
    std::string past, present;
    DType dtype = DType::Float32;
    std::vector<int64_t> dims; // declared, -1 for the batch and sequence axes
    int batchAxis = -1, seqAxis = -1;
  };
  std::string ids, mask, positions, logits;
  DType idsType = DType::Int64, maskType = DType::Int64, positionsType = DType::Int64;
  // Decode-step-only exports fix input_ids' sequence dim (often at 1): the
  // prompt then runs in chunks of that many tokens (0: any length, one run).
  int64_t chunk = 0;
  // Exports that fix the batch at 1 decode one request at a time.
  bool singleRow = false;
  std::vector<Cache> caches;
  std::vector<std::pair<std::string, std::string>> pairs;
  /// Encoder-decoders (createSeq2Seq): what runs before the decoder.
  struct Seq2Seq {
    RunFunction encoder, first; // `first` may be empty
    std::vector<TensorInfo> encoderInputs;
    std::string encoderOutput, encoderMask; // last_hidden_state; its attention_mask input
    std::string firstIds, firstHidden, firstMask;
    std::string hidden, encMask; // the decoder's inputs the encoder feeds
    /// The decoder's cross caches and the first decoder's outputs that make
    /// them (past_key_values.0.encoder.key <- present.0.encoder.key).
    std::vector<std::pair<std::string, std::string>> cross;
  };
  std::unique_ptr<Seq2Seq> s2s;
};

namespace {

/// present_3 for past_3, present.0.key for past_key_values.0.key.
std::string presentName(const std::string &past) {
  if (past.rfind("past_key_values", 0) == 0) return "present" + past.substr(15);
  if (past.rfind("past", 0) == 0) return "present" + past.substr(4);
  return "";
}

int64_t outerOf(const Tensor &t, int axis) {
  int64_t n = 1;
  for (int i = 0; i < axis; ++i) n *= t.shape()[size_t(i)];
  return n;
}

/// Bytes of one step along `axis` (the product of the dims after it).
size_t innerBytes(const Tensor &t, int axis) {
  int64_t n = 1;
  for (size_t i = size_t(axis) + 1; i < t.shape().size(); ++i) n *= t.shape()[i];
  return size_t(n) * runtime::dtypeSize(t.dtype());
}

/// t with `rows` of `axis`, in that order.
Tensor selectAlong(const Tensor &t, int axis, const std::vector<int64_t> &rows) {
  std::vector<int64_t> shape = t.shape();
  int64_t old = shape[size_t(axis)];
  shape[size_t(axis)] = int64_t(rows.size());
  Tensor out(t.dtype(), shape);
  size_t inner = innerBytes(t, axis);
  int64_t outer = outerOf(t, axis);
  const char *src = static_cast<const char *>(t.raw());
  char *dst = static_cast<char *>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t r = 0; r < rows.size(); ++r)
      std::memcpy(dst + (o * int64_t(rows.size()) + int64_t(r)) * inner, src + (o * old + rows[r]) * inner, inner);
  return out;
}

/// t with `pad` zero steps before its own along `axis` (pad < 0: drops -pad
/// steps from the front).
Tensor padFront(const Tensor &t, int axis, int64_t pad) {
  if (pad == 0) return t;
  std::vector<int64_t> shape = t.shape();
  int64_t old = shape[size_t(axis)];
  shape[size_t(axis)] = old + pad;
  Tensor out(t.dtype(), shape);
  size_t inner = innerBytes(t, axis);
  int64_t outer = outerOf(t, axis), keep = std::min(old, old + pad);
  const char *src = static_cast<const char *>(t.raw());
  char *dst = static_cast<char *>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + (o * (old + pad) + std::max<int64_t>(pad, 0)) * int64_t(inner),
                src + (o * old + std::max<int64_t>(-pad, 0)) * int64_t(inner), keep * inner);
  return out;
}

/// a and b joined along `axis` (their other dims equal).
Tensor concatAlong(const Tensor &a, const Tensor &b, int axis) {
  std::vector<int64_t> shape = a.shape();
  int64_t na = a.shape()[size_t(axis)], nb = b.shape()[size_t(axis)];
  shape[size_t(axis)] = na + nb;
  Tensor out(a.dtype(), shape);
  size_t inner = innerBytes(a, axis);
  int64_t outer = outerOf(a, axis);
  const char *pa = static_cast<const char *>(a.raw()), *pb = static_cast<const char *>(b.raw());
  char *dst = static_cast<char *>(out.raw());
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * (na + nb) * int64_t(inner), pa + o * na * int64_t(inner), size_t(na) * inner);
    std::memcpy(dst + (o * (na + nb) + na) * int64_t(inner), pb + o * nb * int64_t(inner), size_t(nb) * inner);
  }
  return out;
}

Tensor intTensor(DType type, const std::vector<int64_t> &shape, const std::vector<int64_t> &values) {
  Tensor t(type, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == DType::Int32) t.data<int32_t>()[i] = int32_t(values[i]);
    else t.data<int64_t>()[i] = values[i];
  }
  return t;
}

/// One request in the batch.
struct Row {
  size_t request;
  std::vector<int64_t> mask; // 1 for the request's tokens, 0 for padding
  int64_t last = 0;          // the token the next step feeds
  GenerateResult result;
};

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

} // namespace

Status Generator::create(const Session &session, std::unique_ptr<Generator> *generator) {
  if (!generator) return {StatusCode::InvalidArgument, "generator is null"};
  if (session.isPlan())
    return {StatusCode::Unsupported,
            "generation runs on a model session: a plan is compiled for one input shape, and each "
            "decode step has another (serve the plan's ONNX model)"};
  const Session *s = &session;
  return create([s](const std::map<std::string, Tensor> &in, std::map<std::string, Tensor> *out,
                    const std::vector<std::string> &names) { return s->run(in, out, names); },
                session.inputs(), session.outputs(), generator);
}

Status Generator::create(RunFunction run, const std::vector<TensorInfo> &inputs,
                         const std::vector<TensorInfo> &outputInfos, std::unique_ptr<Generator> *generator) {
  if (!generator) return {StatusCode::InvalidArgument, "generator is null"};
  auto io = std::make_unique<Io>();
  Status st = classify(inputs, outputInfos, {}, *io);
  if (!st.ok()) return st;
  generator->reset(new Generator(std::move(run), std::move(io)));
  return Status::OK();
}

Status Generator::classify(const std::vector<TensorInfo> &inputs, const std::vector<TensorInfo> &outputInfos,
                           const std::vector<std::string> &firstOutputs, Io &ioRef) {
  Io *io = &ioRef;
  Io::Seq2Seq *s2s = io->s2s.get();
  std::vector<std::string> outputs;
  for (const auto &o : outputInfos) outputs.push_back(o.name);
  auto isInt = [](DType t) { return t == DType::Int32 || t == DType::Int64; };
  for (const auto &in : inputs) {
    if (in.name == "input_ids" || (s2s && in.name == "decoder_input_ids")) {
      io->ids = in.name, io->idsType = in.dtype;
      if (in.hasShape && in.shape.size() != 2)
        return {StatusCode::InvalidArgument, "input_ids has " + std::to_string(in.shape.size()) +
                                                 " dims; generation feeds [batch, sequence]"};
      if (in.hasShape && in.shape[0] > 1)
        return {StatusCode::InvalidArgument, "input_ids fixes the batch at " + std::to_string(in.shape[0]) +
                                                 "; generation needs a dynamic batch or 1"};
      if (in.hasShape && in.shape[0] == 1) io->singleRow = true;
      if (in.hasShape && in.shape[1] == 0)
        return {StatusCode::InvalidArgument, "input_ids fixes the sequence at 0 tokens"};
      if (in.hasShape && in.shape[1] > 0) io->chunk = in.shape[1];
    } else if (in.name == "attention_mask") {
      io->mask = in.name, io->maskType = in.dtype;
    } else if (in.name == "position_ids") {
      io->positions = in.name, io->positionsType = in.dtype;
    } else if (s2s && in.name == "encoder_hidden_states") {
      s2s->hidden = in.name;
    } else if (s2s && in.name == "encoder_attention_mask") {
      s2s->encMask = in.name;
    } else if (in.name.rfind("past", 0) == 0) {
      Io::Cache c;
      c.past = in.name;
      c.present = presentName(in.name);
      c.dtype = in.dtype;
      c.dims = in.shape;
      bool hasPresent = std::find(outputs.begin(), outputs.end(), c.present) != outputs.end();
      // A cross-attention cache: made once by the first decoder, then fed
      // unchanged.
      if (s2s && !hasPresent &&
          std::find(firstOutputs.begin(), firstOutputs.end(), c.present) != firstOutputs.end()) {
        s2s->cross.emplace_back(c.past, c.present);
        continue;
      }
      if (s2s && !hasPresent)
        return {StatusCode::InvalidArgument,
                "cache input '" + in.name + "' has no output '" + c.present + "' in the decoder" +
                    (s2s->first ? " nor in the first decoder" : "") +
                    (s2s->first ? std::string() : std::string(": a cross-attention cache needs the first-step "
                                                              "decoder that makes it (decoder_model.onnx)"))};
      if (!hasPresent)
        return {StatusCode::InvalidArgument,
                "cache input '" + in.name + "' has no output '" + c.present +
                    "' to feed it from (generation needs past/present pairs" +
                    (in.name.find("encoder") != std::string::npos || in.name.find("cross") != std::string::npos
                         ? "; a cross-attention cache comes from an encoder-decoder's first step: hetplan serve "
                           "--encoder E --first-decoder D, or optimum's folder)"
                         : ")")};
      for (size_t d = 0; d < c.dims.size(); ++d)
        if (c.dims[d] < 0) (c.batchAxis < 0 ? c.batchAxis : c.seqAxis) = int(d);
      int dynamic = int(std::count_if(c.dims.begin(), c.dims.end(), [](int64_t d) { return d < 0; }));
      // A cache of a batch-1 export has one dynamic dim (the sequence) and
      // its batch axis first, fixed at 1.
      if (in.hasShape && dynamic == 1 && c.dims.size() >= 2 && c.dims[0] == 1)
        c.seqAxis = c.batchAxis, c.batchAxis = 0, c.dims[0] = -1, dynamic = 2, io->singleRow = true;
      if (!in.hasShape || dynamic != 2)
        return {StatusCode::InvalidArgument, "cache input '" + in.name +
                                                 "' needs a shape with two dynamic dims (batch, then sequence), "
                                                 "or one (sequence) after a batch fixed at 1"};
      io->caches.push_back(c);
      io->pairs.emplace_back(c.past, c.present);
    } else {
      return {StatusCode::InvalidArgument,
              "input '" + in.name + "' is none generation feeds (input_ids, attention_mask, position_ids, past*" +
                  (s2s ? ", decoder_input_ids, encoder_hidden_states, encoder_attention_mask)"
                       : std::string("; an encoder-decoder's decoder needs its encoder: hetplan serve --encoder)"))};
    }
  }
  if (io->ids.empty()) return {StatusCode::InvalidArgument, "the model has no input_ids input"};
  if (io->caches.empty())
    return {StatusCode::InvalidArgument,
            "the model has no KV cache inputs (past_N or past_key_values.N.key/value with present outputs): "
            "export the decoder with its cache (use_cache=True)"};
  for (const auto &[name, type] : {std::make_pair(io->ids, io->idsType), std::make_pair(io->mask, io->maskType),
                                   std::make_pair(io->positions, io->positionsType)})
    if (!name.empty() && !isInt(type))
      return {StatusCode::InvalidArgument, "input '" + name + "' must be int32 or int64"};
  // A fixed chunk longer than one token pads decode steps (and a prompt's
  // last chunk) at the front: only a mask can hide that padding.
  if (io->chunk > 1 && io->mask.empty())
    return {StatusCode::InvalidArgument, "input_ids is fixed at " + std::to_string(io->chunk) +
                                             " tokens per run and the model has no attention_mask to pad a "
                                             "shorter step with"};
  io->logits = std::find(outputs.begin(), outputs.end(), "logits") != outputs.end() ? "logits" : "";
  if (io->logits.empty()) return {StatusCode::InvalidArgument, "the model has no logits output"};
  return Status::OK();
}

Status Generator::createSeq2Seq(const Session &encoder, const Session *firstDecoder, const Session &decoder,
                                std::unique_ptr<Generator> *generator) {
  if (!generator) return {StatusCode::InvalidArgument, "generator is null"};
  for (const Session *s : {&encoder, firstDecoder, &decoder})
    if (s && s->isPlan())
      return {StatusCode::Unsupported, "generation runs on model sessions (an encoder-decoder's three models)"};
  auto runner = [](const Session *s) -> RunFunction {
    return [s](const std::map<std::string, Tensor> &in, std::map<std::string, Tensor> *out,
               const std::vector<std::string> &names) { return s->run(in, out, names); };
  };
  auto io = std::make_unique<Io>();
  io->s2s = std::make_unique<Io::Seq2Seq>();
  Io::Seq2Seq &s2s = *io->s2s;
  s2s.encoder = runner(&encoder);
  s2s.encoderInputs = encoder.inputs();
  for (const auto &o : encoder.outputs())
    if (o.name == "last_hidden_state" || o.name == "encoder_hidden_states") s2s.encoderOutput = o.name;
  if (s2s.encoderOutput.empty() && encoder.outputs().size() == 1) s2s.encoderOutput = encoder.outputs()[0].name;
  if (s2s.encoderOutput.empty())
    return {StatusCode::InvalidArgument, "encoder: no last_hidden_state output (the encoder's hidden states)"};
  for (const auto &in : encoder.inputs())
    if (in.name == "attention_mask") s2s.encoderMask = in.name;
  std::vector<std::string> firstOutputs;
  if (firstDecoder) {
    s2s.first = runner(firstDecoder);
    for (const auto &in : firstDecoder->inputs()) {
      if (in.name == "input_ids" || in.name == "decoder_input_ids") s2s.firstIds = in.name;
      else if (in.name == "encoder_hidden_states") s2s.firstHidden = in.name;
      else if (in.name == "encoder_attention_mask") s2s.firstMask = in.name;
      else
        return {StatusCode::InvalidArgument, "first decoder: input '" + in.name +
                                                 "' is none generation feeds (input_ids, encoder_hidden_states, "
                                                 "encoder_attention_mask)"};
    }
    if (s2s.firstIds.empty() || s2s.firstHidden.empty())
      return {StatusCode::InvalidArgument, "first decoder: needs input_ids and encoder_hidden_states inputs"};
    for (const auto &o : firstDecoder->outputs()) firstOutputs.push_back(o.name);
  }
  Status st = classify(decoder.inputs(), decoder.outputs(), firstOutputs, *io);
  if (!st.ok()) return {st.code(), "decoder: " + st.message()};
  if (!firstDecoder && s2s.hidden.empty())
    return {StatusCode::InvalidArgument, "decoder: takes no encoder_hidden_states, so the encoder's output reaches "
                                         "it only through the cross caches of a first-step decoder "
                                         "(decoder_model.onnx)"};
  // Self caches the first decoder must make too.
  for (const auto &c : io->caches)
    if (firstDecoder && std::find(firstOutputs.begin(), firstOutputs.end(), c.present) == firstOutputs.end())
      return {StatusCode::InvalidArgument, "first decoder: no output '" + c.present + "' for the decoder's '" +
                                               c.past + "'"};
  if (firstDecoder && std::find(firstOutputs.begin(), firstOutputs.end(), "logits") == firstOutputs.end())
    return {StatusCode::InvalidArgument, "first decoder: no logits output"};
  const Session *d = &decoder;
  generator->reset(new Generator(runner(d), std::move(io)));
  return Status::OK();
}

const std::vector<TensorInfo> &Generator::encoderInputs() const {
  static const std::vector<TensorInfo> none;
  return io_->s2s ? io_->s2s->encoderInputs : none;
}

Generator::Generator(RunFunction run, std::unique_ptr<Io> io) : run_(std::move(run)), io_(std::move(io)) {}
Generator::~Generator() = default;

const std::vector<std::pair<std::string, std::string>> &Generator::cache() const { return io_->pairs; }

namespace {

/// One generate() call: the rows in flight, their caches, and the steps
/// that admit and decode them.
struct Decoding {
  const Generator::RunFunction &run;
  const Generator::Io &io;
  const std::vector<GenerateRequest> &requests;
  const GenerateOptions &options;
  std::vector<GenerateResult> *results;
  const std::function<void(size_t, const GenerateResult &)> &onDone;
  Clock::time_point t0;
  std::deque<size_t> waiting;
  std::vector<Row> rows;
  std::vector<Tensor> caches; // undefined while no row is active
  /// Encoder-decoders: the decoder's feeds that stay for the row's life
  /// (its encoder states and mask, its cross caches).
  std::map<std::string, Tensor> extra;

  // Runs the model on `ids` [B, S] with `masks` (B rows of past + S) and
  // `past`; returns the argmax of each row's last logits and the presents.
  Status step(const std::vector<int64_t> &ids, int64_t B, int64_t S, const std::vector<std::vector<int64_t>> &masks,
              const std::vector<Tensor> &past, std::vector<int64_t> *next, std::vector<Tensor> *present) const {
    std::map<std::string, Tensor> in, out;
    in[io.ids] = intTensor(io.idsType, {B, S}, ids);
    int64_t T = masks.empty() ? S : int64_t(masks[0].size());
    if (!io.mask.empty()) {
      std::vector<int64_t> flat;
      for (const auto &m : masks) flat.insert(flat.end(), m.begin(), m.end());
      in[io.mask] = intTensor(io.maskType, {B, T}, flat);
    }
    if (!io.positions.empty()) {
      // Each row's positions count only its own tokens (padding: 0).
      std::vector<int64_t> pos;
      for (const auto &m : masks) {
        int64_t seen = 0;
        std::vector<int64_t> all;
        for (int64_t v : m) all.push_back(v ? seen++ : 0);
        pos.insert(pos.end(), all.end() - S, all.end());
      }
      in[io.positions] = intTensor(io.positionsType, {B, S}, pos);
    }
    for (size_t k = 0; k < io.caches.size(); ++k) in[io.caches[k].past] = past[k];
    for (const auto &[name, t] : extra) in[name] = t;
    std::vector<std::string> want{io.logits};
    for (const auto &c : io.caches) want.push_back(c.present);
    Status st = run(in, &out, want);
    if (!st.ok()) return st;
    st = argmax(out[io.logits], B, S, next);
    if (!st.ok()) return st;
    return takeCaches(out, B, T, "output '", present);
  }

  // The self caches among `out` (B rows of T positions each) into `present`.
  Status takeCaches(std::map<std::string, Tensor> &out, int64_t B, int64_t T, const std::string &what,
                    std::vector<Tensor> *present) const {
    present->clear();
    for (const auto &c : io.caches) {
      Tensor &p = out[c.present];
      if (p.rank() != int64_t(c.dims.size()) || p.shape()[size_t(c.batchAxis)] != B ||
          p.shape()[size_t(c.seqAxis)] != T)
        return {StatusCode::RuntimeError, what + c.present + "' " + p.describe() + " is not the cache of " +
                                              std::to_string(B) + " rows of " + std::to_string(T) + " positions"};
      present->push_back(std::move(p));
    }
    return Status::OK();
  }

  // Encoder-decoders: request `r`'s encoder run, which sets `extra`; then,
  // with a first-step decoder, its run over the prompt `ids` [1, L], which
  // makes the self and cross caches.
  Status encode(size_t r, const std::vector<int64_t> &ids, int64_t L, std::vector<int64_t> *next,
                std::vector<Tensor> *present) {
    const Generator::Io::Seq2Seq &s2s = *io.s2s;
    const GenerateRequest &req = requests[r];
    std::map<std::string, Tensor> in = req.encoderInputs, out;
    if (!s2s.encoderMask.empty() && !in.count(s2s.encoderMask)) {
      // All ones over the first given input's second dim (T5: input_ids).
      const Tensor *like = in.count("input_ids") ? &in.at("input_ids") : in.empty() ? nullptr : &in.begin()->second;
      if (!like || like->rank() < 2)
        return {StatusCode::InvalidArgument, "request " + std::to_string(r) +
                                                 ": the encoder's attention_mask needs an input_ids to size it"};
      std::vector<int64_t> ones(size_t(like->shape()[1]), 1);
      const TensorInfo *info = nullptr;
      for (const auto &i : s2s.encoderInputs)
        if (i.name == s2s.encoderMask) info = &i;
      in[s2s.encoderMask] = intTensor(info && info->dtype == DType::Int32 ? DType::Int32 : DType::Int64,
                                      {1, like->shape()[1]}, ones);
    }
    for (const auto &i : s2s.encoderInputs)
      if (!in.count(i.name))
        return {StatusCode::InvalidArgument,
                "request " + std::to_string(r) + " gives no encoder input '" + i.name + "'"};
    Status st = s2s.encoder(in, &out, {s2s.encoderOutput});
    if (!st.ok()) return {st.code(), "request " + std::to_string(r) + ": encoder: " + st.message()};
    Tensor hidden = out[s2s.encoderOutput];
    if (hidden.rank() != 3 || hidden.shape()[0] != 1)
      return {StatusCode::RuntimeError, "encoder output '" + s2s.encoderOutput + "' " + hidden.describe() +
                                            " is not [1, sequence, hidden]"};
    Tensor mask = s2s.encoderMask.empty()
                      ? intTensor(DType::Int64, {1, hidden.shape()[1]},
                                  std::vector<int64_t>(size_t(hidden.shape()[1]), 1))
                      : in[s2s.encoderMask];
    extra.clear();
    if (!s2s.hidden.empty()) extra[s2s.hidden] = hidden;
    if (!s2s.encMask.empty()) extra[s2s.encMask] = mask;
    if (!s2s.first) return Status::OK();
    std::map<std::string, Tensor> fin, fout;
    fin[s2s.firstIds] = intTensor(io.idsType, {1, L}, ids);
    fin[s2s.firstHidden] = hidden;
    if (!s2s.firstMask.empty()) fin[s2s.firstMask] = mask;
    std::vector<std::string> want{io.logits};
    for (const auto &c : io.caches) want.push_back(c.present);
    for (const auto &x : s2s.cross) want.push_back(x.second);
    st = s2s.first(fin, &fout, want);
    if (!st.ok()) return {st.code(), "first decoder: " + st.message()};
    st = argmax(fout[io.logits], 1, L, next);
    if (!st.ok()) return st;
    st = takeCaches(fout, 1, L, "first decoder output '", present);
    if (!st.ok()) return st;
    for (const auto &x : s2s.cross) extra[x.first] = std::move(fout[x.second]);
    return Status::OK();
  }

  // The argmax of each row's last position of `logits` [B, S, V].
  static Status argmax(const Tensor &logits, int64_t B, int64_t S, std::vector<int64_t> *next) {
    if (logits.rank() != 3 || logits.shape()[0] != B || logits.shape()[1] != S || logits.dtype() != DType::Float32)
      return {StatusCode::RuntimeError, "logits " + logits.describe() + " is not float32 [" + std::to_string(B) +
                                            ", " + std::to_string(S) + ", vocabulary]"};
    int64_t V = logits.shape()[2];
    next->assign(size_t(B), 0);
    for (int64_t b = 0; b < B; ++b) {
      const float *row = logits.data<float>() + (b * S + S - 1) * V;
      (*next)[size_t(b)] = std::max_element(row, row + V) - row; // first maximum, as numpy's argmax
    }
    return Status::OK();
  }

  // The prompts `ids` [B, L] through the model: in one run, or in runs of
  // the model's fixed chunk, each feeding the caches the last one made.
  Status prefill(const std::vector<int64_t> &ids, int64_t B, int64_t L, const std::vector<std::vector<int64_t>> &masks,
                 std::vector<Tensor> past, std::vector<int64_t> *next, std::vector<Tensor> *present) const {
    int64_t S = io.chunk > 0 ? io.chunk : L;
    for (int64_t at = 0; at < L; at += S) {
      std::vector<int64_t> part;
      std::vector<std::vector<int64_t>> seen;
      for (int64_t b = 0; b < B; ++b) {
        part.insert(part.end(), ids.begin() + b * L + at, ids.begin() + b * L + at + S);
        seen.emplace_back(masks[size_t(b)].begin(), masks[size_t(b)].begin() + at + S);
      }
      Status st = step(part, B, S, seen, past, next, present);
      if (!st.ok()) return st;
      past = std::move(*present);
    }
    *present = std::move(past);
    return Status::OK();
  }

  // Records `token` for row r; true when the request is finished.
  bool accept(Row &r, int64_t token) {
    if (r.result.tokens.empty()) r.result.firstTokenMs = msSince(t0);
    r.result.tokens.push_back(token);
    r.last = token;
    return int(r.result.tokens.size()) >= requests[r.request].maxNewTokens ||
           (options.eosTokenId >= 0 && token == options.eosTokenId);
  }

  // Drops finished rows (their results delivered) and the padding every
  // remaining row starts with.
  void retire(const std::vector<char> &done) {
    std::vector<int64_t> keep;
    std::vector<Row> kept;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!done[i]) {
        keep.push_back(int64_t(i));
        kept.push_back(std::move(rows[i]));
        continue;
      }
      rows[i].result.totalMs = msSince(t0);
      (*results)[rows[i].request] = rows[i].result;
      if (onDone) onDone(rows[i].request, rows[i].result);
    }
    rows = std::move(kept);
    if (rows.empty()) {
      for (auto &c : caches) c = Tensor();
      return;
    }
    int64_t lead = int64_t(rows[0].mask.size());
    for (const Row &r : rows)
      lead = std::min<int64_t>(lead, std::find(r.mask.begin(), r.mask.end(), 1) - r.mask.begin());
    for (size_t k = 0; k < caches.size(); ++k) {
      if (keep.size() != done.size()) caches[k] = selectAlong(caches[k], io.caches[k].batchAxis, keep);
      caches[k] = padFront(caches[k], io.caches[k].seqAxis, -lead);
    }
    for (Row &r : rows) r.mask.erase(r.mask.begin(), r.mask.begin() + lead);
  }

  /// Admits waiting requests up to maxBatch rows: their own prefill, then
  /// they join the batch.
  Status admit(int maxBatch) {
    std::vector<Row> group;
    while (!waiting.empty() && int(rows.size() + group.size()) < maxBatch) {
      group.push_back(Row{waiting.front(), {}, 0, {}});
      waiting.pop_front();
    }
    int64_t G = int64_t(group.size()), L = 0;
    for (const Row &r : group) L = std::max<int64_t>(L, int64_t(requests[r.request].prompt.size()));
    // A fixed chunk: the prompts padded at the front to whole chunks.
    if (io.chunk > 0) L = (L + io.chunk - 1) / io.chunk * io.chunk;
    std::vector<int64_t> ids;
    std::vector<std::vector<int64_t>> masks;
    for (Row &r : group) {
      const auto &p = requests[r.request].prompt;
      int64_t pad = L - int64_t(p.size());
      r.mask.assign(size_t(pad), 0);
      r.mask.resize(size_t(L), 1);
      for (int64_t i = 0; i < pad; ++i) ids.push_back(options.padTokenId);
      ids.insert(ids.end(), p.begin(), p.end());
      masks.push_back(r.mask);
    }
    std::vector<Tensor> empty;
    for (const auto &c : io.caches) {
      std::vector<int64_t> shape = c.dims;
      shape[size_t(c.batchAxis)] = G;
      shape[size_t(c.seqAxis)] = 0;
      empty.emplace_back(c.dtype, shape);
    }
    std::vector<int64_t> next;
    std::vector<Tensor> present;
    Status st;
    if (io.s2s) st = encode(group[0].request, ids, L, &next, &present);
    if (st.ok() && !(io.s2s && io.s2s->first)) st = prefill(ids, G, L, masks, std::move(empty), &next, &present);
    if (!st.ok()) return st;
    // Join: both sides left-padded to the longer cache.
    int64_t T = rows.empty() ? 0 : int64_t(rows[0].mask.size()), U = std::max(T, L);
    for (size_t k = 0; k < caches.size(); ++k) {
      Tensor fresh = padFront(present[k], io.caches[k].seqAxis, U - L);
      caches[k] = rows.empty() ? fresh
                               : concatAlong(padFront(caches[k], io.caches[k].seqAxis, U - T), fresh,
                                             io.caches[k].batchAxis);
    }
    for (Row &r : rows) r.mask.insert(r.mask.begin(), size_t(U - T), 0);
    std::vector<char> done(rows.size(), 0);
    for (size_t g = 0; g < group.size(); ++g) {
      group[g].mask.insert(group[g].mask.begin(), size_t(U - L), 0);
      done.push_back(accept(group[g], next[g]));
      rows.push_back(std::move(group[g]));
    }
    retire(done);
    return Status::OK();
  }

  /// One decode step for every row.
  Status decode() {
    int64_t B = int64_t(rows.size());
    std::vector<int64_t> ids;
    std::vector<std::vector<int64_t>> masks;
    // A fixed chunk of S > 1 tokens: the new token after S - 1 masked pads.
    int64_t S = std::max<int64_t>(io.chunk, 1);
    for (Row &r : rows) {
      r.mask.insert(r.mask.end(), size_t(S - 1), 0);
      r.mask.push_back(1);
      ids.insert(ids.end(), size_t(S - 1), options.padTokenId);
      ids.push_back(r.last);
      masks.push_back(r.mask);
    }
    std::vector<int64_t> next;
    std::vector<Tensor> present;
    Status st = step(ids, B, S, masks, caches, &next, &present);
    if (!st.ok()) return st;
    caches = std::move(present);
    std::vector<char> done;
    for (int64_t b = 0; b < B; ++b) done.push_back(accept(rows[size_t(b)], next[size_t(b)]));
    retire(done);
    return Status::OK();
  }
};

} // namespace

Status Generator::generate(const std::vector<GenerateRequest> &requests, const GenerateOptions &options,
                           std::vector<GenerateResult> *results,
                           const std::function<void(size_t, const GenerateResult &)> &onDone) const {
  if (!results) return {StatusCode::InvalidArgument, "results is null"};
  if (options.maxBatch < 1) return {StatusCode::InvalidArgument, "maxBatch must be at least 1"};
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt.empty())
      return {StatusCode::InvalidArgument, "request " + std::to_string(i) + " has an empty prompt"};
    if (requests[i].maxNewTokens < 1)
      return {StatusCode::InvalidArgument, "request " + std::to_string(i) + ": maxNewTokens must be at least 1"};
    if (!io_->s2s && !requests[i].encoderInputs.empty())
      return {StatusCode::InvalidArgument, "request " + std::to_string(i) +
                                               " gives encoder inputs to a decoder-only model"};
  }
  const Io &io = *io_;
  // Without an attention mask, padding could not be masked out: one request
  // at a time then (each decodes exactly as alone).
  const int maxBatch = io.mask.empty() || io.singleRow || io.s2s ? 1 : options.maxBatch;
  results->assign(requests.size(), {});
  Decoding d{run_, io, requests, options, results, onDone, Clock::now(), {}, {}, std::vector<Tensor>(io.caches.size())};
  for (size_t i = 0; i < requests.size(); ++i) d.waiting.push_back(i);

  try {
    while (!d.rows.empty() || !d.waiting.empty()) {
      if (!d.waiting.empty() && int(d.rows.size()) < maxBatch) {
        Status st = d.admit(maxBatch);
        if (!st.ok()) return st;
        continue; // admit more before decoding if room is left
      }
      Status st = d.decode();
      if (!st.ok()) return st;
    }
  } catch (const std::exception &e) {
    return {StatusCode::RuntimeError, std::string("generation: ") + e.what()};
  }
  return Status::OK();
}

} // namespace hetplan
