/*
 * The agent's etcd keys: common/rdzv's key rule applied to this job. A file of its own at the
 * bottom of the agent, so that every control file (registration, progress, the leader) builds
 * keys without calling into another one.
 */
#include "agent_internal.h"

void bagua__agent_key(const bagua__agent_t *a, char *buf, size_t len, bagua__rdzv_key_kind_t kind,
                      int64_t round, const char *name) {
  /* Ids are bounded by the command line's checks, so every key fits BAGUA_RDZV_KEY_MAX. */
  bagua__rdzv_key(buf, len, a->cfg->job_id, kind, round, name, 0);
}
