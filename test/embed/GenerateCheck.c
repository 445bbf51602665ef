/* hetplan_session_generate from C (C11): the prompts given as arguments
 * ("636,511,..."), MAX new tokens each, batched; prints "request I: ids"
 * per request and checks them against the expected tokens given after
 * --expect (one list per prompt: onnxruntime's greedy tokens,
 * models/ort-genai/greedy.json), and that an empty prompt is refused with
 * HETPLAN_INVALID_ARGUMENT. Exit 0 only when everything matches.
 *
 *   hetplan-generate-check MODEL MAX PROMPT... --expect TOKENS... */
#include "hetplan/hetplan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  int expectAt = 0;
  for (int i = 3; i < argc; ++i)
    if (strcmp(argv[i], "--expect") == 0) expectAt = i;
  if (argc < 4 || expectAt < 4 || argc - expectAt - 1 != expectAt - 3) {
    fprintf(stderr, "usage: %s MODEL MAX PROMPT... --expect TOKENS... (one TOKENS per PROMPT)\n", argv[0]);
    return 2;
  }
  size_t n = (size_t)(expectAt - 3);
  int64_t **prompts = calloc(n, sizeof *prompts);
  size_t *lengths = calloc(n, sizeof *lengths), *counts = calloc(n, sizeof *counts);
  for (size_t i = 0; i < n; ++i) {
    prompts[i] = calloc(strlen(argv[3 + i]) + 1, sizeof **prompts);
    for (char *p = argv[3 + i]; *p;) {
      prompts[i][lengths[i]++] = strtoll(p, &p, 10);
      if (*p == ',') ++p;
    }
  }
  hetplan_session *session = NULL;
  hetplan_error *error = NULL;
  if (hetplan_session_create_from_model(argv[1], &session, &error) != HETPLAN_OK) {
    fprintf(stderr, "error: %s\n", hetplan_error_message(error));
    return 1;
  }
  int64_t *tokens = NULL;
  if (hetplan_session_generate(session, (const int64_t *const *)prompts, lengths, n, atoi(argv[2]), 2, -1,
                               &tokens, counts, &error) != HETPLAN_OK) {
    fprintf(stderr, "error: %s\n", hetplan_error_message(error));
    return 1;
  }
  size_t at = 0;
  int failures = 0;
  for (size_t i = 0; i < n; ++i) {
    printf("request %zu:", i);
    /* The expected list, parsed as the prompts are: the same count, the same ids. */
    const char *want = argv[expectAt + 1 + i];
    int same = 1;
    for (size_t k = 0; k < counts[i]; ++k) {
      long long got = (long long)tokens[at++];
      printf(" %lld", got);
      char *end = NULL;
      long long w = strtoll(want, &end, 10);
      if (end == want || w != got) same = 0;
      want = *end == ',' ? end + 1 : end;
    }
    if (*want || counts[i] == 0) same = 0; /* expected tokens left over, or none generated */
    printf("\n");
    if (!same) {
      printf("FAIL: request %zu expected %s\n", i, argv[expectAt + 1 + i]);
      ++failures;
    }
  }
  hetplan_tokens_free(tokens);
  /* An empty prompt is an argument error, not a crash. */
  size_t zero = 0;
  const int64_t *none[1] = {NULL};
  hetplan_status st = hetplan_session_generate(session, none, &zero, 1, 4, 1, -1, &tokens, counts, &error);
  printf("empty prompt: %s\n", hetplan_status_name(st));
  if (st != HETPLAN_INVALID_ARGUMENT) printf("FAIL: an empty prompt must be HETPLAN_INVALID_ARGUMENT\n"), ++failures;
  hetplan_error_free(error);
  hetplan_tokens_free(tokens);
  hetplan_session_destroy(session);
  for (size_t i = 0; i < n; ++i) free(prompts[i]);
  free(prompts), free(lengths), free(counts);
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
