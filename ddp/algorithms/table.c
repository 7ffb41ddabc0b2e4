/* The table of algorithms (common/algorithms.h) and the lookup by name. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../ddp_internal.h"

const bagua__ddp_algo_t *const bagua__ddp_algorithms[] = {
#define ENTRY(sep, name) &bagua__ddp_##name,
    BAGUA__ALGORITHMS(ENTRY)
#undef ENTRY
};

const int bagua__ddp_nalgorithms =
    (int)(sizeof(bagua__ddp_algorithms) / sizeof(bagua__ddp_algorithms[0]));

const bagua__ddp_algo_t *bagua__ddp_algorithm(const char *name, int any_case) {
  for (int i = 0; name && i < bagua__ddp_nalgorithms; i++)
    if ((any_case ? strcasecmp : strcmp)(name, bagua__ddp_algorithms[i]->name) == 0)
      return bagua__ddp_algorithms[i];
  return NULL;
}

/* The config fields each capability brings (bagua_ddp_algorithm_options). */
static const struct {
  unsigned cap, without; /* applies when the algorithm has `cap` (0: always) and not `without` */
  const char *field;
} k_fields[] = {
    {0, BAGUA__ALGO_BACKGROUND, "hierarchical"}, {BAGUA__ALGO_PEER_CHOICE, 0, "peer_mode"},
    {BAGUA__ALGO_PEERS, 0, "comm_interval"},     {BAGUA__ALGO_ERROR_FEEDBACK, 0, "error_feedback"},
    {BAGUA__ALGO_WARMUP, 0, "warmup_steps"},     {BAGUA__ALGO_BACKGROUND, 0, "sync_interval_ms"},
    {BAGUA__ALGO_LOW_RANK, 0, "rank"},
};

#define MAX_ALGORITHMS 32
static char g_names[512], g_options[MAX_ALGORITHMS][128];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill(void) {
  size_t n = 0;
  for (int i = 0; i < bagua__ddp_nalgorithms && i < MAX_ALGORITHMS; i++) {
    const bagua__ddp_algo_t *a = bagua__ddp_algorithms[i];
    n += (size_t)snprintf(g_names + n, sizeof(g_names) - n, "%s%s", i ? " " : "", a->name);
    if (n >= sizeof(g_names)) n = sizeof(g_names) - 1;
    size_t m = 0;
    for (size_t k = 0; k < sizeof(k_fields) / sizeof(k_fields[0]); k++) {
      if ((k_fields[k].cap && !(a->caps & k_fields[k].cap)) || (a->caps & k_fields[k].without))
        continue;
      m += (size_t)snprintf(g_options[i] + m, sizeof(g_options[i]) - m, "%s%s", m ? " " : "",
                            k_fields[k].field);
      if (m >= sizeof(g_options[i])) m = sizeof(g_options[i]) - 1;
    }
  }
}

const char *bagua_ddp_algorithms(void) {
  pthread_once(&g_once, fill);
  return g_names;
}

const char *bagua_ddp_algorithm_options(const char *name) {
  pthread_once(&g_once, fill);
  for (int i = 0; name && i < bagua__ddp_nalgorithms && i < MAX_ALGORITHMS; i++)
    if (strcmp(name, bagua__ddp_algorithms[i]->name) == 0) return g_options[i];
  return NULL;
}
