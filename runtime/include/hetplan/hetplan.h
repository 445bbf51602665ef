/*===- hetplan.h - the hetplan runtime's C API ------------------*- C -*-===//
 *
 * Embeds the runtime in a service: create a session from a model or a
 * compiled plan once, run it from any number of threads, destroy it. Links
 * against libhetplan.so (find_package(hetplan) -> hetplan::hetplan, or
 * pkg-config hetplan) or the static hetplan_embed.
 *
 *   hetplan_session *s; hetplan_error *err = NULL;
 *   if (hetplan_session_create_from_model("m.onnx", &s, &err) != HETPLAN_OK) {
 *     fprintf(stderr, "%s\n", hetplan_error_message(err)); hetplan_error_free(err);
 *   }
 *   int64_t shape[2] = {1, 8}; int64_t ids[8] = {...};
 *   hetplan_tensor in = {"input_ids", HETPLAN_INT64, 2, shape, ids, sizeof ids};
 *   hetplan_result *r;
 *   if (hetplan_session_run(s, &in, 1, &r, &err) == HETPLAN_OK) {
 *     hetplan_tensor logits; hetplan_result_find(r, "logits", &logits);
 *     ... logits.data, logits.shape ...
 *     hetplan_result_free(r);
 *   }
 *   hetplan_session_destroy(s);
 *
 * Errors: every fallible call returns a hetplan_status and, when `error` is
 * not NULL, stores a hetplan_error (code + message) the caller owns and frees
 * with hetplan_error_free. There is no global or thread-local error state.
 * Threads: hetplan_session_run may be called concurrently on one session;
 * a hetplan_result belongs to one caller. Create/destroy are not concurrent
 * with runs on the same session.
 *===----------------------------------------------------------------------===*/
#ifndef HETPLAN_HETPLAN_H
#define HETPLAN_HETPLAN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define HETPLAN_API
#else
#define HETPLAN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Same numbers as hetplan::StatusCode. */
typedef enum hetplan_status {
  HETPLAN_OK = 0,
  HETPLAN_INVALID_ARGUMENT = 1, /* unknown/missing input, wrong dtype/shape/size, NULL pointer */
  HETPLAN_NOT_FOUND = 2,        /* the model file cannot be opened; no such output */
  HETPLAN_INVALID_MODEL = 3,    /* not a valid model */
  HETPLAN_UNSUPPORTED = 4,      /* ops/types/attributes the runtime cannot run (reported at create) */
  HETPLAN_RUNTIME_ERROR = 5,    /* a kernel failed while running */
  HETPLAN_OUT_OF_MEMORY = 6,
  HETPLAN_NOT_IMPLEMENTED = 7,  /* not returned any more (kept for the numbering) */
  HETPLAN_INTERNAL = 8
} hetplan_status;

/* Element types, numbered as ONNX's TensorProto.DataType. */
typedef enum hetplan_dtype {
  HETPLAN_UNDEFINED = 0, HETPLAN_FLOAT32 = 1, HETPLAN_UINT8 = 2, HETPLAN_INT8 = 3,
  HETPLAN_UINT16 = 4, HETPLAN_INT16 = 5, HETPLAN_INT32 = 6, HETPLAN_INT64 = 7,
  HETPLAN_BOOL = 9, HETPLAN_FLOAT16 = 10, HETPLAN_FLOAT64 = 11, HETPLAN_UINT32 = 12,
  HETPLAN_UINT64 = 13, HETPLAN_BFLOAT16 = 16
} hetplan_dtype;

/* Where a session's kernels run (hetplan_session_options_set_device). */
typedef enum hetplan_device {
  HETPLAN_DEVICE_CPU = 0,
  HETPLAN_DEVICE_CUDA = 1 /* model sessions, CUDA builds: GPU 0; else HETPLAN_UNSUPPORTED */
} hetplan_device;

/* How a plan session runs the plan's ranks (hetplan_session_options_set_plan_ranks). */
typedef enum hetplan_plan_ranks {
  HETPLAN_RANKS_AUTO = 0,       /* MPI when started by mpirun, else in-process */
  HETPLAN_RANKS_IN_PROCESS = 1, /* every rank a thread of this process */
  HETPLAN_RANKS_MPI = 2         /* this process is one rank of MPI_COMM_WORLD; runs are
                                   collective (every process calls run, same order and
                                   inputs) and every process gets the whole outputs */
} hetplan_plan_ranks;

typedef struct hetplan_session hetplan_session; /* opaque */
typedef struct hetplan_session_options hetplan_session_options; /* opaque */
typedef struct hetplan_result hetplan_result;   /* opaque: one run's outputs */
typedef struct hetplan_error hetplan_error;     /* opaque: code + message */

/* A tensor passed in or out: dense, row-major.
 * In:  the caller's memory, only read, only during hetplan_session_run;
 *      nbytes must equal product(shape) * hetplan_dtype_size(dtype).
 * Out: owned by the hetplan_result (valid until hetplan_result_free).
 * Describing a session's inputs/outputs: data is NULL, nbytes 0, and a
 *      dimension of -1 is dynamic; strings live as long as the session. */
typedef struct hetplan_tensor {
  const char *name;
  hetplan_dtype dtype;
  size_t rank;
  const int64_t *shape;
  const void *data;
  size_t nbytes;
} hetplan_tensor;

HETPLAN_API const char *hetplan_version(void);
HETPLAN_API const char *hetplan_status_name(hetplan_status status);
/* Bytes per element; 0 for HETPLAN_UNDEFINED or an unknown value. */
HETPLAN_API size_t hetplan_dtype_size(hetplan_dtype dtype);

HETPLAN_API hetplan_status hetplan_error_code(const hetplan_error *error);
/* One line per problem; "" for NULL. Valid until hetplan_error_free. */
HETPLAN_API const char *hetplan_error_message(const hetplan_error *error);
HETPLAN_API void hetplan_error_free(hetplan_error *error);

/* Loads an ONNX model and checks every node can run (HETPLAN_UNSUPPORTED
 * lists every problem otherwise). On error *session is NULL. */
HETPLAN_API hetplan_status hetplan_session_create_from_model(const char *path,
                                                             hetplan_session **session,
                                                             hetplan_error **error);
/* A compiled inference plan (hetplan compile ... -o PLAN) and the model it
 * names (relative to the plan's folder): HETPLAN_NOT_FOUND when either file
 * is missing, HETPLAN_INVALID_MODEL for a corrupt plan or one that does not
 * match its model, HETPLAN_UNSUPPORTED for a training plan. Runs every rank
 * as a thread of this process, or (under mpirun) this process's rank. */
HETPLAN_API hetplan_status hetplan_session_create_from_plan(const char *path,
                                                            hetplan_session **session,
                                                            hetplan_error **error);

/* Session options, as onnxruntime's SessionOptions: create, set, pass to a
 * create call (which copies them), free. Defaults: threads 0 (OMP_NUM_THREADS,
 * else every core), device CPU, plan ranks AUTO, the plan's own model path,
 * profiling off. Setters return HETPLAN_INVALID_ARGUMENT for NULL or a bad value. */
HETPLAN_API hetplan_status hetplan_session_options_create(hetplan_session_options **options);
/* NULL is fine. */
HETPLAN_API void hetplan_session_options_free(hetplan_session_options *options);
/* Kernel threads per run (per rank for plans); 0 for the default. */
HETPLAN_API hetplan_status hetplan_session_options_set_threads(hetplan_session_options *options,
                                                               int threads);
HETPLAN_API hetplan_status hetplan_session_options_set_device(hetplan_session_options *options,
                                                              hetplan_device device);
HETPLAN_API hetplan_status hetplan_session_options_set_plan_ranks(hetplan_session_options *options,
                                                                  hetplan_plan_ranks ranks);
/* Plans: the ONNX model to run instead of the plan's model path (NULL: the plan's). */
HETPLAN_API hetplan_status hetplan_session_options_set_model_path(hetplan_session_options *options,
                                                                  const char *model_path);
/* enable != 0: time every run; hetplan_session_end_profiling writes
 * FILE_PREFIX_<pid>_<date>_<time>.json (a Chrome/Perfetto trace). NULL prefix:
 * "hetplan_profile". */
HETPLAN_API hetplan_status hetplan_session_options_set_profiling(hetplan_session_options *options,
                                                                 int enable, const char *file_prefix);
/* Plan sessions with in-process ranks: threshold > 0 moves data-parallel
 * shares to the measured speeds between runs when a stage's slowest worker is
 * more than threshold (e.g. 0.1) slower than that optimum for `steps` runs in
 * a row (stragglers; docs/runtime.md). 0: off (the default). */
HETPLAN_API hetplan_status hetplan_session_options_set_rebalance(hetplan_session_options *options,
                                                                 double threshold, int steps);

/* A model or a plan (told apart by the plan file's header) with options
 * (NULL: the defaults). */
HETPLAN_API hetplan_status hetplan_session_create(const char *path,
                                                  const hetplan_session_options *options,
                                                  hetplan_session **session, hetplan_error **error);
HETPLAN_API hetplan_status hetplan_session_create_from_model_with_options(
    const char *path, const hetplan_session_options *options, hetplan_session **session,
    hetplan_error **error);
HETPLAN_API hetplan_status hetplan_session_create_from_plan_with_options(
    const char *path, const hetplan_session_options *options, hetplan_session **session,
    hetplan_error **error);
/* NULL is fine. No run may be in flight on the session. */
HETPLAN_API void hetplan_session_destroy(hetplan_session *session);

/* 1 for a plan session, 0 for a model session (or NULL). */
HETPLAN_API int hetplan_session_is_plan(const hetplan_session *session);
/* The plan's ranks; 1 for a model session, 0 for NULL. */
HETPLAN_API int hetplan_session_rank_count(const hetplan_session *session);
/* This process's rank in an MPI plan session, else -1. */
HETPLAN_API int hetplan_session_process_rank(const hetplan_session *session);
/* Profiling sessions: writes the trace of the runs so far and starts a new
 * one; *path (owned by the session) stays valid until the next call or
 * destroy. HETPLAN_INVALID_ARGUMENT when profiling is off. Not concurrent
 * with runs on the session. */
HETPLAN_API hetplan_status hetplan_session_end_profiling(hetplan_session *session,
                                                         const char **path, hetplan_error **error);

HETPLAN_API size_t hetplan_session_input_count(const hetplan_session *session);
HETPLAN_API size_t hetplan_session_output_count(const hetplan_session *session);
/* Fills *info (data NULL); HETPLAN_INVALID_ARGUMENT when index is out of range. */
HETPLAN_API hetplan_status hetplan_session_input_info(const hetplan_session *session, size_t index,
                                                      hetplan_tensor *info);
HETPLAN_API hetplan_status hetplan_session_output_info(const hetplan_session *session, size_t index,
                                                       hetplan_tensor *info);

/* Runs once; thread-safe. `inputs` names every model input once. On
 * success *result holds every model output (free it with
 * hetplan_result_free); on error *result is NULL. */
HETPLAN_API hetplan_status hetplan_session_run(const hetplan_session *session,
                                               const hetplan_tensor *inputs, size_t num_inputs,
                                               hetplan_result **result, hetplan_error **error);

HETPLAN_API size_t hetplan_result_count(const hetplan_result *result);
/* Output `index` (in the model's output order). */
HETPLAN_API hetplan_status hetplan_result_get(const hetplan_result *result, size_t index,
                                              hetplan_tensor *out);
/* Output by name; HETPLAN_NOT_FOUND when the model has no such output. */
HETPLAN_API hetplan_status hetplan_result_find(const hetplan_result *result, const char *name,
                                               hetplan_tensor *out);
/* NULL is fine. */
HETPLAN_API void hetplan_result_free(hetplan_result *result);

/* Greedy generation with the model's KV cache and continuous batching
 * (hetplan/runtime/Generate.h): prompts[i] holds prompt_lengths[i] token ids.
 * Each request generates up to max_new_tokens ids (fewer when it produces
 * eos_token_id; -1: none), at most max_batch requests decoding together.
 * On success *tokens (free it with hetplan_tokens_free) holds every
 * request's ids, request after request, and token_counts[i] (an array of
 * num_prompts the caller owns) how many request i got. Model sessions
 * only. */
HETPLAN_API hetplan_status hetplan_session_generate(const hetplan_session *session,
                                                    const int64_t *const *prompts,
                                                    const size_t *prompt_lengths, size_t num_prompts,
                                                    int32_t max_new_tokens, int32_t max_batch,
                                                    int64_t eos_token_id, int64_t **tokens,
                                                    size_t *token_counts, hetplan_error **error);
/* NULL is fine. */
HETPLAN_API void hetplan_tokens_free(int64_t *tokens);

#ifdef __cplusplus
}
#endif

#endif /* HETPLAN_HETPLAN_H */
