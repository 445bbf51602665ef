/* hetplan_session_generate from C (C11): the prompts given as arguments
 * ("636,511,..."), MAX new tokens each, batched; prints "request I: ids"
 * per request, which the ctest matches against onnxruntime's greedy tokens
 * (models/ort-genai/greedy.json).
 *
 *   hetplan-generate-check MODEL MAX PROMPT... */
#include "hetplan/hetplan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL MAX PROMPT...\n", argv[0]);
    return 2;
  }
  size_t n = (size_t)(argc - 3);
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
  for (size_t i = 0; i < n; ++i) {
    printf("request %zu:", i);
    for (size_t k = 0; k < counts[i]; ++k) printf(" %lld", (long long)tokens[at++]);
    printf("\n");
  }
  hetplan_tokens_free(tokens);
  /* An empty prompt is an argument error, not a crash. */
  size_t zero = 0;
  const int64_t *none[1] = {NULL};
  hetplan_status st = hetplan_session_generate(session, none, &zero, 1, 4, 1, -1, &tokens, counts, &error);
  printf("empty prompt: %s\n", hetplan_status_name(st));
  hetplan_error_free(error);
  hetplan_tokens_free(tokens);
  hetplan_session_destroy(session);
  for (size_t i = 0; i < n; ++i) free(prompts[i]);
  free(prompts), free(lengths), free(counts);
  return 0;
}
