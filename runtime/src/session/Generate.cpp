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
  std::vector<Cache> caches;
  std::vector<std::pair<std::string, std::string>> pairs;
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
  std::vector<std::string> outputs;
  for (const auto &o : outputInfos) outputs.push_back(o.name);
  auto isInt = [](DType t) { return t == DType::Int32 || t == DType::Int64; };
  for (const auto &in : inputs) {
    if (in.name == "input_ids") {
      io->ids = in.name, io->idsType = in.dtype;
    } else if (in.name == "attention_mask") {
      io->mask = in.name, io->maskType = in.dtype;
    } else if (in.name == "position_ids") {
      io->positions = in.name, io->positionsType = in.dtype;
    } else if (in.name.rfind("past", 0) == 0) {
      Io::Cache c;
      c.past = in.name;
      c.present = presentName(in.name);
      c.dtype = in.dtype;
      c.dims = in.shape;
      if (std::find(outputs.begin(), outputs.end(), c.present) == outputs.end())
        return {StatusCode::InvalidArgument, "cache input '" + in.name + "' has no output '" + c.present +
                                                 "' to feed it from (generation needs past/present pairs)"};
      for (size_t d = 0; d < c.dims.size(); ++d)
        if (c.dims[d] < 0) (c.batchAxis < 0 ? c.batchAxis : c.seqAxis) = int(d);
      int dynamic = int(std::count_if(c.dims.begin(), c.dims.end(), [](int64_t d) { return d < 0; }));
      if (!in.hasShape || dynamic != 2)
        return {StatusCode::InvalidArgument, "cache input '" + in.name +
                                                 "' needs a shape with two dynamic dims (batch, then sequence)"};
      io->caches.push_back(c);
      io->pairs.emplace_back(c.past, c.present);
    } else {
      return {StatusCode::InvalidArgument, "input '" + in.name +
                                               "' is none generation feeds (input_ids, attention_mask, "
                                               "position_ids, past*)"};
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
  io->logits = std::find(outputs.begin(), outputs.end(), "logits") != outputs.end() ? "logits" : "";
  if (io->logits.empty()) return {StatusCode::InvalidArgument, "the model has no logits output"};
  generator->reset(new Generator(std::move(run), std::move(io)));
  return Status::OK();
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
    std::vector<std::string> want{io.logits};
    for (const auto &c : io.caches) want.push_back(c.present);
    Status st = run(in, &out, want);
    if (!st.ok()) return st;
    const Tensor &logits = out[io.logits];
    if (logits.rank() != 3 || logits.shape()[0] != B || logits.shape()[1] != S || logits.dtype() != DType::Float32)
      return {StatusCode::RuntimeError, "logits " + logits.describe() + " is not float32 [" + std::to_string(B) +
                                            ", " + std::to_string(S) + ", vocabulary]"};
    int64_t V = logits.shape()[2];
    next->assign(size_t(B), 0);
    for (int64_t b = 0; b < B; ++b) {
      const float *row = logits.data<float>() + (b * S + S - 1) * V;
      (*next)[size_t(b)] = std::max_element(row, row + V) - row; // first maximum, as numpy's argmax
    }
    present->clear();
    for (const auto &c : io.caches) {
      Tensor &p = out[c.present];
      if (p.rank() != int64_t(c.dims.size()) || p.shape()[size_t(c.batchAxis)] != B ||
          p.shape()[size_t(c.seqAxis)] != T)
        return {StatusCode::RuntimeError, "output '" + c.present + "' " + p.describe() + " is not the cache of " +
                                              std::to_string(B) + " rows of " + std::to_string(T) + " positions"};
      present->push_back(std::move(p));
    }
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
    Status st = step(ids, G, L, masks, empty, &next, &present);
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
    for (Row &r : rows) {
      r.mask.push_back(1);
      ids.push_back(r.last);
      masks.push_back(r.mask);
    }
    std::vector<int64_t> next;
    std::vector<Tensor> present;
    Status st = step(ids, B, 1, masks, caches, &next, &present);
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
  }
  const Io &io = *io_;
  // Without an attention mask, padding could not be masked out: one request
  // at a time then (each decodes exactly as alone).
  const int maxBatch = io.mask.empty() ? 1 : options.maxBatch;
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
