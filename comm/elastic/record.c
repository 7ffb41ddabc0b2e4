/*
 * Assignments: what bagua-agent's leader writes under /bagua/<job>/assign/<node> for every
 * registered node after each round (common/rdzv/rdzv.h, bagua__rdzv_assign_t), read here for
 * the round's number, whether members left, and this worker's place. A worker follows its own
 * node's record, a few hundred bytes whatever the size of the job, instead of the round record,
 * which lists every member: N workers reading an O(N) record at every round cost O(N^2) bytes
 * per round. Decoding is common/rdzv's (the one schema), so a record the agent would refuse is
 * refused here too, with a warning naming the key and the field.
 *
 * A node that is no longer registered (its agent left the job, or lost its lease) has no
 * assignment: the leader writes them for registered nodes only. Its workers then fall back to
 * the round record, rarely and for that node only, to learn whether a newer round still has
 * it (bagua__elastic_assign_from_round).
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "elastic_internal.h"

/* Decodes `json` (the value of `key` at `mod_rev`; a warning names them when it is refused). */
static int decode(const char *json, const char *key, int64_t mod_rev, bagua__rdzv_assign_t *a) {
  char why[160];
  memset(a, 0, sizeof(*a));
  if (bagua__rdzv_assign_decode(json, a, why, sizeof(why)) == 0) return 0;
  bagua__rdzv_reject(key, mod_rev, "an assignment", why);
  return -1;
}

int64_t bagua__elastic_assign_round(const char *json, const char *key, int64_t mod_rev,
                                    int *departed) {
  bagua__rdzv_assign_t a;
  *departed = 0;
  if (decode(json, key, mod_rev, &a) != 0) return -1;
  *departed = a.departed;
  return a.round;
}

bagua_status_t bagua__elastic_place(const char *json, const char *key, const char *node_id,
                                    int local_rank, int64_t *round, int *rank, int *size) {
  bagua__rdzv_assign_t a;
  if (decode(json, key, 0, &a) != 0) return BAGUA_ERR_ETCD;
  if (a.index < 0) {
    BAGUA_WARN("elastic: node %s is not a member of round %lld; this worker leaves the job",
               node_id, (long long)a.round);
    return BAGUA_ERR_ABORTED;
  }
  if (local_rank < 0 || local_rank >= a.nproc) {
    BAGUA_WARN("elastic: LOCAL_RANK %d is not below the nprocs of node %s in round %lld (%d)",
               local_rank, node_id, (long long)a.round, a.nproc);
    return BAGUA_ERR_ABORTED;
  }
  *round = a.round;
  *size = a.world_size;
  *rank = a.rank_base + local_rank;
  return BAGUA_OK;
}

char *bagua__elastic_assign_from_round(const char *json, const char *key, int64_t mod_rev,
                                       const char *node_id, int64_t *round, int *departed) {
  bagua__rdzv_round_t r;
  char why[160];
  *round = -1;
  *departed = 0;
  if (bagua__rdzv_round_decode(json, &r, why, sizeof(why)) != 0) {
    bagua__rdzv_reject(key, mod_rev, "a round record", why);
    return NULL;
  }
  bagua__rdzv_assign_t a;
  int idx = bagua__rdzv_round_find(&r, node_id);
  bagua__rdzv_assign_of(&r, idx, 0, &a);
  snprintf(a.node, sizeof(a.node), "%s", node_id);
  *round = r.round;
  /* A round without this node is, for this node's workers, one that lost a member. */
  *departed = idx < 0 ? 1 : r.departed;
  bagua__rdzv_round_clear(&r);
  return bagua__rdzv_assign_encode(&a);
}
