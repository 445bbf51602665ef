/* embed_example.c - a service-like use of the hetplan C API (C11).
 *
 * Creates one session from an ONNX model or a compiled plan (hetplan
 * compile ... -o PLAN; all its ranks run as threads of this process), then
 * serves N requests from a pool of worker threads that all run on that one
 * session concurrently. Each request is random input_ids [batch x seq]
 * (int64, below --vocab); the program prints a latency summary. A plan's
 * batch and sequence are the ones it was compiled for, unless given.
 *
 *   embed_example [--threads T] [--requests N] [--batch B] [--seq S]
 *                 [--vocab V] [--kernel-threads K] MODEL.onnx|PLAN
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, rand_r under -std=c11 */
#include "hetplan/hetplan.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const hetplan_session *session;
  const char *input_name;
  int64_t batch, seq, vocab;
  int total;               /* requests to serve, all workers together */
  int next;                /* next request index (under lock) */
  pthread_mutex_t lock;
  double *latency_ms;      /* one per request */
  int failures;
  double checksum;         /* sum of logits[0] over requests, to use the outputs */
} server;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *worker(void *arg) {
  server *srv = (server *)arg;
  size_t n = (size_t)(srv->batch * srv->seq);
  int64_t *ids = malloc(n * sizeof *ids);
  int64_t shape[2] = {srv->batch, srv->seq};
  for (;;) {
    pthread_mutex_lock(&srv->lock);
    int req = srv->next < srv->total ? srv->next++ : -1;
    pthread_mutex_unlock(&srv->lock);
    if (req < 0) break;
    unsigned seed = 1234u + (unsigned)req;
    for (size_t i = 0; i < n; ++i) ids[i] = rand_r(&seed) % srv->vocab;
    hetplan_tensor in = {srv->input_name, HETPLAN_INT64, 2, shape, ids, n * sizeof *ids};
    hetplan_result *result = NULL;
    hetplan_error *err = NULL;
    double t0 = now_ms();
    hetplan_status st = hetplan_session_run(srv->session, &in, 1, &result, &err);
    double t1 = now_ms();
    srv->latency_ms[req] = t1 - t0;
    if (st != HETPLAN_OK) {
      fprintf(stderr, "request %d: %s: %s\n", req, hetplan_status_name(st), hetplan_error_message(err));
      hetplan_error_free(err);
      pthread_mutex_lock(&srv->lock);
      srv->failures++;
      pthread_mutex_unlock(&srv->lock);
      continue;
    }
    hetplan_tensor out;
    if (hetplan_result_get(result, 0, &out) == HETPLAN_OK && out.dtype == HETPLAN_FLOAT32 && out.nbytes) {
      pthread_mutex_lock(&srv->lock);
      srv->checksum += ((const float *)out.data)[0];
      pthread_mutex_unlock(&srv->lock);
    }
    hetplan_result_free(result);
  }
  free(ids);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, int n, double p) {
  int i = (int)(p / 100.0 * (n - 1) + 0.5);
  return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

int main(int argc, char **argv) {
  int threads = 4, requests = 200, kernel_threads = 0;
  int64_t batch = 0, seq = 0, vocab = 512; /* 0: the plan's, else 1 x 32 */
  const char *model = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--requests") && i + 1 < argc) requests = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--seq") && i + 1 < argc) seq = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--kernel-threads") && i + 1 < argc) kernel_threads = atoi(argv[++i]);
    else if (argv[i][0] != '-' && !model) model = argv[i];
    else {
      fprintf(stderr, "usage: %s [--threads T] [--requests N] [--batch B] [--seq S] [--vocab V] [--kernel-threads K] MODEL.onnx|PLAN\n", argv[0]);
      return 2;
    }
  }
  if (!model || threads < 1 || requests < 1 || batch < 0 || seq < 0 || vocab < 1 || kernel_threads < 0) {
    fprintf(stderr, "usage: %s [--threads T] [--requests N] [--batch B] [--seq S] [--vocab V] [--kernel-threads K] MODEL.onnx|PLAN\n", argv[0]);
    return 2;
  }

  hetplan_session *session = NULL;
  hetplan_error *err = NULL;
  hetplan_session_options *options = NULL;
  if (hetplan_session_options_create(&options) != HETPLAN_OK ||
      hetplan_session_options_set_threads(options, kernel_threads) != HETPLAN_OK) {
    fprintf(stderr, "cannot set the session options\n");
    return 1;
  }
  double t0 = now_ms();
  hetplan_status st = hetplan_session_create(model, options, &session, &err);
  hetplan_session_options_free(options);
  if (st != HETPLAN_OK) {
    fprintf(stderr, "%s: %s\n", hetplan_status_name(st), hetplan_error_message(err));
    hetplan_error_free(err);
    return 1;
  }
  double loaded = now_ms() - t0;
  hetplan_tensor in_info, out_info;
  hetplan_session_input_info(session, 0, &in_info);
  hetplan_session_output_info(session, 0, &out_info);
  if (hetplan_session_input_count(session) != 1 || in_info.dtype != HETPLAN_INT64) {
    fprintf(stderr, "%s: this example feeds one int64 input (input_ids)\n", model);
    hetplan_session_destroy(session);
    return 1;
  }
  /* A plan runs the shape it was compiled for: take its batch and sequence. */
  if (batch == 0) batch = in_info.rank == 2 && in_info.shape[0] > 0 ? in_info.shape[0] : 1;
  if (seq == 0) seq = in_info.rank == 2 && in_info.shape[1] > 0 ? in_info.shape[1] : 32;
  printf("hetplan %s: %s %s loaded in %.1f ms (%d rank%s; input '%s', output '%s')\n", hetplan_version(),
         hetplan_session_is_plan(session) ? "plan" : "model", model, loaded,
         hetplan_session_rank_count(session), hetplan_session_rank_count(session) == 1 ? "" : "s",
         in_info.name, out_info.name);

  server srv = {session, in_info.name, batch, seq, vocab, requests, 0, PTHREAD_MUTEX_INITIALIZER,
                calloc((size_t)requests, sizeof(double)), 0, 0.0};
  pthread_t *pool = malloc((size_t)threads * sizeof *pool);
  double start = now_ms();
  for (int i = 0; i < threads; ++i) pthread_create(&pool[i], NULL, worker, &srv);
  for (int i = 0; i < threads; ++i) pthread_join(pool[i], NULL);
  double wall = now_ms() - start;

  qsort(srv.latency_ms, (size_t)requests, sizeof(double), cmp_double);
  double sum = 0;
  for (int i = 0; i < requests; ++i) sum += srv.latency_ms[i];
  printf("%d requests [%lldx%lld] on %d threads: %.1f ms wall, %.1f requests/s, %d failed\n",
         requests, (long long)batch, (long long)seq, threads, wall, requests / (wall / 1e3),
         srv.failures);
  printf("latency ms: mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", sum / requests,
         percentile(srv.latency_ms, requests, 50), percentile(srv.latency_ms, requests, 90),
         percentile(srv.latency_ms, requests, 99), srv.latency_ms[requests - 1]);
  printf("checksum %.6g\n", srv.checksum);

  free(pool);
  free(srv.latency_ms);
  hetplan_session_destroy(session);
  return srv.failures ? 1 : 0;
}
