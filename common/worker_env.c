/* The worker contract's table and lookups (see worker_env.h). */
#include "worker_env.h"

#include <string.h>

static const struct {
  const char *name, *help;
  bagua__worker_var_kind_t kind;
} g_vars[] = {
#define BAGUA_WORKER_VAR(id, name, kind, help) {name, help, BAGUA__WV_##kind},
#include "worker_env.def"
#undef BAGUA_WORKER_VAR
};

_Static_assert(sizeof(g_vars) / sizeof(g_vars[0]) == BAGUA__WV_COUNT,
               "one row per bagua__worker_var_t");

const char *bagua__worker_var_name(bagua__worker_var_t v) {
  return g_vars[v].name;
}

bagua__worker_var_kind_t bagua__worker_var_kind(bagua__worker_var_t v) {
  return g_vars[v].kind;
}

const char *bagua__worker_var_help(bagua__worker_var_t v) {
  return g_vars[v].help;
}

int bagua__worker_var_find(const char *name, size_t n) {
  for (int i = 0; i < BAGUA__WV_COUNT; i++)
    if (strlen(g_vars[i].name) == n && strncmp(name, g_vars[i].name, n) == 0) return i;
  return -1;
}

/* The agent derives these from its own state: nobody else may choose them. */
int bagua__worker_var_agent_owned(const char *name) {
  int v = bagua__worker_var_find(name, strlen(name));
  return v >= 0 && g_vars[v].kind != BAGUA__WV_SETTING && g_vars[v].kind != BAGUA__WV_DEFAULT;
}
