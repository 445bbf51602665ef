//===- CApi.cpp - hetplan.h over hetplan::Session ------------------------===//
//
// No exception leaves these functions; errors go to the caller's
// hetplan_error out-parameter (no global or thread-local state).
//
//===----------------------------------------------------------------------===//
#include "hetplan/hetplan.h"
#include "hetplan/runtime/Checked.h"
#include "hetplan/runtime/Generate.h"
#include "hetplan/runtime/Session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

using hetplan::Session;
using hetplan::Status;
using hetplan::StatusCode;
using hetplan::TensorInfo;
using hetplan::runtime::DType;
using hetplan::runtime::Tensor;

struct hetplan_session {
  std::unique_ptr<Session> session;
  std::string profilePath; // the last hetplan_session_end_profiling's file
};

struct hetplan_session_options {
  hetplan::SessionOptions options;
};

struct hetplan_result {
  std::vector<std::string> names;
  std::vector<Tensor> tensors; // same order as names
};

struct hetplan_error {
  hetplan_status code;
  std::string message;
};

namespace {

static_assert(static_cast<int>(StatusCode::Internal) == HETPLAN_INTERNAL, "status numbering");
static_assert(static_cast<int>(DType::BFloat16) == HETPLAN_BFLOAT16, "dtype numbering");

hetplan_status fail(hetplan_error **error, hetplan_status code, std::string message) {
  if (error) {
    *error = nullptr;
    try {
      *error = new hetplan_error{code, std::move(message)};
    } catch (...) { // no memory for the message: the code still tells
    }
  }
  return code;
}

hetplan_status report(hetplan_error **error, const Status &st) {
  if (st.ok()) {
    if (error) *error = nullptr;
    return HETPLAN_OK;
  }
  return fail(error, static_cast<hetplan_status>(st.code()), st.message());
}

bool knownDType(int d) {
  switch (d) {
  case HETPLAN_FLOAT32: case HETPLAN_UINT8: case HETPLAN_INT8: case HETPLAN_UINT16:
  case HETPLAN_INT16: case HETPLAN_INT32: case HETPLAN_INT64: case HETPLAN_BOOL:
  case HETPLAN_FLOAT16: case HETPLAN_FLOAT64: case HETPLAN_UINT32: case HETPLAN_UINT64:
  case HETPLAN_BFLOAT16: return true;
  default: return false;
  }
}

void describe(const TensorInfo &i, hetplan_tensor *out) {
  out->name = i.name.c_str();
  out->dtype = static_cast<hetplan_dtype>(i.dtype);
  out->rank = i.hasShape ? i.shape.size() : 0;
  out->shape = i.hasShape ? i.shape.data() : nullptr;
  out->data = nullptr;
  out->nbytes = 0;
}

template <typename Fn> hetplan_status guarded(hetplan_error **error, Fn &&fn) {
  try {
    return fn();
  } catch (const std::bad_alloc &) {
    return fail(error, HETPLAN_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return fail(error, HETPLAN_INTERNAL, e.what());
  } catch (...) {
    return fail(error, HETPLAN_INTERNAL, "unknown exception");
  }
}

enum class Kind { Model, Plan, Either };

hetplan_status create(const char *path, const hetplan_session_options *options,
                      hetplan_session **session, hetplan_error **error, Kind kind) {
  if (error) *error = nullptr;
  if (!session) return fail(error, HETPLAN_INVALID_ARGUMENT, "session out-pointer is NULL");
  *session = nullptr;
  if (!path) return fail(error, HETPLAN_INVALID_ARGUMENT, "path is NULL");
  return guarded(error, [&]() -> hetplan_status {
    hetplan::SessionOptions o = options ? options->options : hetplan::SessionOptions{};
    std::unique_ptr<Session> s;
    Status st = kind == Kind::Plan    ? Session::fromPlan(path, &s, o)
                : kind == Kind::Model ? Session::fromModel(path, &s, o)
                                      : Session::create(path, &s, o);
    if (!st.ok()) return report(error, st);
    *session = new hetplan_session{std::move(s), {}};
    return HETPLAN_OK;
  });
}

} // namespace

extern "C" {

#ifndef HETPLAN_VERSION_STRING
#define HETPLAN_VERSION_STRING "0.1.0"
#endif
const char *hetplan_version(void) { return HETPLAN_VERSION_STRING; }

const char *hetplan_status_name(hetplan_status status) {
  switch (status) {
  case HETPLAN_OK: return "HETPLAN_OK";
  case HETPLAN_INVALID_ARGUMENT: return "HETPLAN_INVALID_ARGUMENT";
  case HETPLAN_NOT_FOUND: return "HETPLAN_NOT_FOUND";
  case HETPLAN_INVALID_MODEL: return "HETPLAN_INVALID_MODEL";
  case HETPLAN_UNSUPPORTED: return "HETPLAN_UNSUPPORTED";
  case HETPLAN_RUNTIME_ERROR: return "HETPLAN_RUNTIME_ERROR";
  case HETPLAN_OUT_OF_MEMORY: return "HETPLAN_OUT_OF_MEMORY";
  case HETPLAN_NOT_IMPLEMENTED: return "HETPLAN_NOT_IMPLEMENTED";
  case HETPLAN_INTERNAL: return "HETPLAN_INTERNAL";
  }
  return "HETPLAN_UNKNOWN_STATUS";
}

size_t hetplan_dtype_size(hetplan_dtype dtype) {
  return knownDType(dtype) ? hetplan::runtime::dtypeSize(static_cast<DType>(dtype)) : 0;
}

hetplan_status hetplan_error_code(const hetplan_error *error) {
  return error ? error->code : HETPLAN_OK;
}
const char *hetplan_error_message(const hetplan_error *error) {
  return error ? error->message.c_str() : "";
}
void hetplan_error_free(hetplan_error *error) { delete error; }

hetplan_status hetplan_session_create_from_model(const char *path, hetplan_session **session,
                                                 hetplan_error **error) {
  return create(path, nullptr, session, error, Kind::Model);
}
hetplan_status hetplan_session_create_from_plan(const char *path, hetplan_session **session,
                                                hetplan_error **error) {
  return create(path, nullptr, session, error, Kind::Plan);
}
hetplan_status hetplan_session_create(const char *path, const hetplan_session_options *options,
                                      hetplan_session **session, hetplan_error **error) {
  return create(path, options, session, error, Kind::Either);
}
hetplan_status hetplan_session_create_from_model_with_options(const char *path,
                                                              const hetplan_session_options *options,
                                                              hetplan_session **session,
                                                              hetplan_error **error) {
  return create(path, options, session, error, Kind::Model);
}
hetplan_status hetplan_session_create_from_plan_with_options(const char *path,
                                                             const hetplan_session_options *options,
                                                             hetplan_session **session,
                                                             hetplan_error **error) {
  return create(path, options, session, error, Kind::Plan);
}

hetplan_status hetplan_session_options_create(hetplan_session_options **options) {
  if (!options) return HETPLAN_INVALID_ARGUMENT;
  *options = new (std::nothrow) hetplan_session_options{};
  return *options ? HETPLAN_OK : HETPLAN_OUT_OF_MEMORY;
}
void hetplan_session_options_free(hetplan_session_options *options) { delete options; }
hetplan_status hetplan_session_options_set_threads(hetplan_session_options *options, int threads) {
  if (!options || threads < 0) return HETPLAN_INVALID_ARGUMENT;
  options->options.threads = threads;
  return HETPLAN_OK;
}
hetplan_status hetplan_session_options_set_device(hetplan_session_options *options,
                                                  hetplan_device device) {
  if (!options || (device != HETPLAN_DEVICE_CPU && device != HETPLAN_DEVICE_CUDA))
    return HETPLAN_INVALID_ARGUMENT;
  options->options.device = static_cast<hetplan::Device>(device);
  return HETPLAN_OK;
}
hetplan_status hetplan_session_options_set_plan_ranks(hetplan_session_options *options,
                                                      hetplan_plan_ranks ranks) {
  if (!options || (ranks != HETPLAN_RANKS_AUTO && ranks != HETPLAN_RANKS_IN_PROCESS &&
                   ranks != HETPLAN_RANKS_MPI))
    return HETPLAN_INVALID_ARGUMENT;
  options->options.ranks = static_cast<hetplan::PlanRanks>(ranks);
  return HETPLAN_OK;
}
hetplan_status hetplan_session_options_set_model_path(hetplan_session_options *options,
                                                      const char *model_path) {
  if (!options) return HETPLAN_INVALID_ARGUMENT;
  try {
    options->options.modelPath = model_path ? model_path : "";
  } catch (...) {
    return HETPLAN_OUT_OF_MEMORY;
  }
  return HETPLAN_OK;
}
hetplan_status hetplan_session_options_set_profiling(hetplan_session_options *options, int enable,
                                                     const char *file_prefix) {
  if (!options) return HETPLAN_INVALID_ARGUMENT;
  try {
    options->options.profiling = enable != 0;
    options->options.profilePrefix = file_prefix && *file_prefix ? file_prefix : "hetplan_profile";
  } catch (...) {
    return HETPLAN_OUT_OF_MEMORY;
  }
  return HETPLAN_OK;
}

hetplan_status hetplan_session_options_set_rebalance(hetplan_session_options *options, double threshold,
                                                     int steps) {
  if (!options || !(threshold >= 0) || !(threshold <= 10) || steps < 1) return HETPLAN_INVALID_ARGUMENT;
  options->options.rebalanceThreshold = threshold;
  options->options.rebalanceSteps = steps;
  return HETPLAN_OK;
}

int hetplan_session_is_plan(const hetplan_session *session) {
  return session && session->session->isPlan() ? 1 : 0;
}
int hetplan_session_rank_count(const hetplan_session *session) {
  return session ? session->session->ranks() : 0;
}
int hetplan_session_process_rank(const hetplan_session *session) {
  return session ? session->session->processRank() : -1;
}
hetplan_status hetplan_session_end_profiling(hetplan_session *session, const char **path,
                                             hetplan_error **error) {
  if (error) *error = nullptr;
  if (!session) return fail(error, HETPLAN_INVALID_ARGUMENT, "session is NULL");
  if (!path) return fail(error, HETPLAN_INVALID_ARGUMENT, "path out-pointer is NULL");
  *path = nullptr;
  return guarded(error, [&]() -> hetplan_status {
    std::string file;
    Status st = session->session->endProfiling(&file);
    if (!st.ok()) return report(error, st);
    session->profilePath = std::move(file);
    *path = session->profilePath.c_str();
    return HETPLAN_OK;
  });
}
void hetplan_session_destroy(hetplan_session *session) { delete session; }

size_t hetplan_session_input_count(const hetplan_session *session) {
  return session ? session->session->inputs().size() : 0;
}
size_t hetplan_session_output_count(const hetplan_session *session) {
  return session ? session->session->outputs().size() : 0;
}
hetplan_status hetplan_session_input_info(const hetplan_session *session, size_t index,
                                          hetplan_tensor *info) {
  if (!session || !info || index >= session->session->inputs().size())
    return HETPLAN_INVALID_ARGUMENT;
  describe(session->session->inputs()[index], info);
  return HETPLAN_OK;
}
hetplan_status hetplan_session_output_info(const hetplan_session *session, size_t index,
                                           hetplan_tensor *info) {
  if (!session || !info || index >= session->session->outputs().size())
    return HETPLAN_INVALID_ARGUMENT;
  describe(session->session->outputs()[index], info);
  return HETPLAN_OK;
}

hetplan_status hetplan_session_run(const hetplan_session *session, const hetplan_tensor *inputs,
                                   size_t num_inputs, hetplan_result **result,
                                   hetplan_error **error) {
  if (error) *error = nullptr;
  if (!result) return fail(error, HETPLAN_INVALID_ARGUMENT, "result out-pointer is NULL");
  *result = nullptr;
  if (!session) return fail(error, HETPLAN_INVALID_ARGUMENT, "session is NULL");
  if (num_inputs && !inputs) return fail(error, HETPLAN_INVALID_ARGUMENT, "inputs is NULL");
  return guarded(error, [&]() -> hetplan_status {
    std::map<std::string, Tensor> in;
    for (size_t i = 0; i < num_inputs; ++i) {
      const hetplan_tensor &t = inputs[i];
      std::string where = "input " + std::to_string(i);
      if (!t.name) return fail(error, HETPLAN_INVALID_ARGUMENT, where + ": name is NULL");
      where = "input '" + std::string(t.name) + "'";
      if (!knownDType(t.dtype))
        return fail(error, HETPLAN_INVALID_ARGUMENT,
                    where + ": unknown dtype " + std::to_string(static_cast<int>(t.dtype)));
      if (t.rank && !t.shape) return fail(error, HETPLAN_INVALID_ARGUMENT, where + ": shape is NULL");
      std::vector<int64_t> shape(t.shape, t.shape + t.rank);
      for (int64_t d : shape)
        if (d < 0) return fail(error, HETPLAN_INVALID_ARGUMENT, where + ": negative dimension");
      // Checked: a shape whose size overflows must not wrap to a small
      // byte count that 0 bytes of data would satisfy.
      size_t want = 0;
      try {
        want = hetplan::runtime::checkedBytes(hetplan::runtime::checkedNumel(shape),
                                              hetplan::runtime::dtypeSize(static_cast<DType>(t.dtype)),
                                              where);
      } catch (const std::exception &e) {
        return fail(error, HETPLAN_INVALID_ARGUMENT,
                    where + ": shape " + hetplan::runtime::shapeString(shape) + " is too large (" + e.what() + ")");
      }
      if (t.nbytes != want)
        return fail(error, HETPLAN_INVALID_ARGUMENT,
                    where + ": nbytes is " + std::to_string(t.nbytes) + ", the shape " +
                        hetplan::runtime::shapeString(shape) + " needs " + std::to_string(want));
      if (want && !t.data) return fail(error, HETPLAN_INVALID_ARGUMENT, where + ": data is NULL");
      if (in.count(t.name)) return fail(error, HETPLAN_INVALID_ARGUMENT, where + " is given twice");
      // A view of the caller's memory: only read, only during this call.
      in.emplace(t.name, Tensor::view(static_cast<DType>(t.dtype), std::move(shape), t.data, nullptr));
    }
    std::map<std::string, Tensor> out;
    Status st = session->session->run(in, &out);
    if (!st.ok()) return report(error, st);
    auto r = std::make_unique<hetplan_result>();
    for (const auto &o : session->session->outputs()) {
      auto it = out.find(o.name);
      if (it == out.end()) continue;
      r->names.push_back(o.name);
      r->tensors.push_back(std::move(it->second));
    }
    *result = r.release();
    return HETPLAN_OK;
  });
}

size_t hetplan_result_count(const hetplan_result *result) { return result ? result->names.size() : 0; }

hetplan_status hetplan_result_get(const hetplan_result *result, size_t index, hetplan_tensor *out) {
  if (!result || !out || index >= result->names.size()) return HETPLAN_INVALID_ARGUMENT;
  const Tensor &t = result->tensors[index];
  out->name = result->names[index].c_str();
  out->dtype = static_cast<hetplan_dtype>(t.dtype());
  out->rank = t.shape().size();
  out->shape = t.shape().data();
  out->data = t.raw();
  out->nbytes = t.nbytes();
  return HETPLAN_OK;
}

hetplan_status hetplan_result_find(const hetplan_result *result, const char *name,
                                   hetplan_tensor *out) {
  if (!result || !name || !out) return HETPLAN_INVALID_ARGUMENT;
  for (size_t i = 0; i < result->names.size(); ++i)
    if (result->names[i] == name) return hetplan_result_get(result, i, out);
  return HETPLAN_NOT_FOUND;
}

void hetplan_result_free(hetplan_result *result) { delete result; }

} // extern "C"

hetplan_status hetplan_session_generate(const hetplan_session *session, const int64_t *const *prompts,
                                        const size_t *prompt_lengths, size_t num_prompts,
                                        int32_t max_new_tokens, int32_t max_batch, int64_t eos_token_id,
                                        int64_t **tokens, size_t *token_counts, hetplan_error **error) {
  if (error) *error = nullptr;
  if (!tokens) return fail(error, HETPLAN_INVALID_ARGUMENT, "tokens out-pointer is NULL");
  *tokens = nullptr;
  if (!session) return fail(error, HETPLAN_INVALID_ARGUMENT, "session is NULL");
  if (num_prompts && (!prompts || !prompt_lengths || !token_counts))
    return fail(error, HETPLAN_INVALID_ARGUMENT, "prompts, prompt_lengths and token_counts must not be NULL");
  return guarded(error, [&]() -> hetplan_status {
    std::vector<hetplan::GenerateRequest> requests;
    for (size_t i = 0; i < num_prompts; ++i) {
      if (prompt_lengths[i] && !prompts[i])
        return fail(error, HETPLAN_INVALID_ARGUMENT, "prompt " + std::to_string(i) + " is NULL");
      requests.push_back({std::vector<int64_t>(prompts[i], prompts[i] + prompt_lengths[i]), max_new_tokens});
    }
    std::unique_ptr<hetplan::Generator> generator;
    Status st = hetplan::Generator::create(*session->session, &generator);
    if (!st.ok()) return report(error, st);
    hetplan::GenerateOptions options;
    options.maxBatch = max_batch;
    options.eosTokenId = eos_token_id;
    std::vector<hetplan::GenerateResult> results;
    st = generator->generate(requests, options, &results);
    if (!st.ok()) return report(error, st);
    size_t total = 0;
    for (const auto &r : results) total += r.tokens.size();
    auto *out = static_cast<int64_t *>(std::malloc(std::max<size_t>(total, 1) * sizeof(int64_t)));
    if (!out) return fail(error, HETPLAN_OUT_OF_MEMORY, "cannot allocate the generated tokens");
    size_t at = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      token_counts[i] = results[i].tokens.size();
      std::copy(results[i].tokens.begin(), results[i].tokens.end(), out + at);
      at += results[i].tokens.size();
    }
    *tokens = out;
    return HETPLAN_OK;
  });
}

void hetplan_tokens_free(int64_t *tokens) { std::free(tokens); }
