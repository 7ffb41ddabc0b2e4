/*
 * The worker contract (common/worker_env.def): the variables bagua-agent sets for its
 * workers, and what that means for configurations and for forwarding. Pure lookups over a
 * constant table: thread-safe, no allocation.
 */
#ifndef BAGUA_COMMON_WORKER_ENV_H
#define BAGUA_COMMON_WORKER_ENV_H
#include <stddef.h>

typedef enum {
#define BAGUA_WORKER_VAR(id, name, kind, help) BAGUA__WV_##id,
#include "worker_env.def"
#undef BAGUA_WORKER_VAR
  BAGUA__WV_COUNT
} bagua__worker_var_t;

typedef enum {
  BAGUA__WV_PER_WORKER,
  BAGUA__WV_JOB,
  BAGUA__WV_SETTING,
  BAGUA__WV_USER_FIRST,
  BAGUA__WV_DEFAULT
} bagua__worker_var_kind_t;

const char *bagua__worker_var_name(bagua__worker_var_t v);
bagua__worker_var_kind_t bagua__worker_var_kind(bagua__worker_var_t v);
const char *bagua__worker_var_help(bagua__worker_var_t v);
/* The variable named by the first `n` bytes of `name` (so "NAME=VALUE" entries can pass
 * strcspn(entry, "=")), or -1 when the agent does not set it. */
int bagua__worker_var_find(const char *name, size_t n);
/* Whether the agent sets `name` for every worker from its own state (kinds PER_WORKER, JOB,
 * USER_FIRST): a configuration ([env], -x) must not set it, and the launcher never forwards
 * it to a remote agent. */
int bagua__worker_var_agent_owned(const char *name);
#endif
