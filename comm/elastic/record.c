/*
 * Round records: what bagua-agent publishes under /bagua/<job>/round, read here for its
 * number, its members, and this worker's place in it. Decoding and the rank rule are
 * common/rdzv's (the one schema), so a record the agent would refuse is refused here too,
 * with a warning naming the key and the field.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "elastic_internal.h"

/* Decodes `json` (the value of `key` at `mod_rev`; key NULL: no warning). */
static int decode(const char *json, const char *key, int64_t mod_rev, bagua__rdzv_round_t *r) {
  char why[160];
  if (bagua__rdzv_round_decode(json, r, why, sizeof(why)) == 0) return 0;
  if (key) bagua__rdzv_reject(key, mod_rev, "a round record", why);
  return -1;
}

int64_t bagua__elastic_round_number(const char *json, const char *key, int64_t mod_rev) {
  bagua__rdzv_round_t r;
  int64_t n = decode(json, key, mod_rev, &r) == 0 ? r.round : -1;
  bagua__rdzv_round_clear(&r);
  return n;
}

void bagua__elastic_free_members(char **m, int n) {
  for (int i = 0; i < n; i++) free(m[i]);
  free(m);
}

static bagua_status_t copy_members(const bagua__rdzv_round_t *r, char ***out, int *n) {
  char **m = calloc((size_t)r->nmembers + 1, sizeof(*m));
  if (!m) return BAGUA_ERR_NO_MEMORY;
  for (int i = 0; i < r->nmembers; i++) {
    m[i] = strdup(r->members[i].id);
    if (!m[i]) {
      bagua__elastic_free_members(m, i);
      return BAGUA_ERR_NO_MEMORY;
    }
  }
  *out = m;
  *n = r->nmembers;
  return BAGUA_OK;
}

bagua_status_t bagua__elastic_members(const char *json, char ***out, int *n) {
  *out = NULL;
  *n = 0;
  bagua__rdzv_round_t r;
  if (decode(json, NULL, 0, &r) != 0) return BAGUA_ERR_ETCD;
  bagua_status_t st = copy_members(&r, out, n);
  bagua__rdzv_round_clear(&r);
  return st;
}

int bagua__elastic_drops_member(char *const *members, int n, const char *json) {
  bagua__rdzv_round_t r;
  int dropped = 0;
  if (!members || decode(json, NULL, 0, &r) != 0) return 0;
  for (int i = 0; i < n && !dropped; i++) dropped = bagua__rdzv_round_find(&r, members[i]) < 0;
  bagua__rdzv_round_clear(&r);
  return dropped;
}

bagua_status_t bagua__elastic_place(const char *json, const char *key, const char *node_id,
                                    int local_rank, int64_t *round, int *rank, int *size,
                                    char ***members_out, int *nmembers_out) {
  bagua__rdzv_round_t r;
  if (decode(json, key, 0, &r) != 0) return BAGUA_ERR_ETCD;
  bagua_status_t st = BAGUA_OK;
  int group = -1, rk = -1;
  switch (bagua__rdzv_place(&r, node_id, local_rank, &rk, &group)) {
    case -1:
      BAGUA_WARN("elastic: node %s is not a member of round %lld; this worker leaves the job",
                 node_id, (long long)r.round);
      st = BAGUA_ERR_ABORTED;
      goto out;
    case -2:
      BAGUA_WARN("elastic: LOCAL_RANK %d is not below the nprocs of node %s in round %lld",
                 local_rank, node_id, (long long)r.round);
      st = BAGUA_ERR_ABORTED;
      goto out;
    default:
      break;
  }
  *round = r.round;
  *size = r.world_size;
  *rank = rk;
  if (members_out) st = copy_members(&r, members_out, nmembers_out);
out:
  bagua__rdzv_round_clear(&r);
  return st;
}
