/*
 * The leader keeps every registered node's assign/<node> record (common/rdzv/rdzv.h) true to
 * the current round: after it publishes a round, and on every pass, each registered node whose
 * record is missing, refused or of another round gets its place written, on its own lease (so
 * the record goes with the node). A node that registered after the round learns from it that it
 * is a spare; a leader that died between the round and the assignments is made up for by the
 * next one. Writes go BAGUA_ETCD_READS_MAX to a request: a round of a thousand nodes costs the
 * leader eight requests, and each follower one event of its own place.
 */
#include <stdlib.h>
#include <string.h>

#include "agent_internal.h"
#include "common/log.h"
#include "index.h"

/* The assign/<node> records of a full snapshot, by node. */
static int by_node(const void *a, const void *b) {
  return strcmp(((const bagua__agent_assigned_t *)a)->node,
                ((const bagua__agent_assigned_t *)b)->node);
}

static const bagua__agent_assigned_t *assigned_of(const bagua__agent_assigned_t *v, size_t n,
                                                  const char *node) {
  bagua__agent_assigned_t key;
  snprintf(key.node, sizeof(key.node), "%s", node);
  return bsearch(&key, v, n, sizeof(*v), by_node);
}

/* Whether the stored record says what place `want` says, on the node's lease. */
static int current(const bagua__agent_assigned_t *have, const bagua__rdzv_assign_t *want,
                   int64_t lease) {
  return have && have->round == want->round && have->index == want->index &&
         have->rev == want->rev && have->time_ms == want->time_ms && have->lease == lease;
}

int bagua__agent_sync_assigns(bagua__agent_t *a, const bagua__agent_snap_t *s,
                              const bagua__rdzv_round_t *R, int fresh) {
  if (!R || s->nnodes == 0) return 0;
  bagua__agent_index_t x;
  bagua__agent_assigned_t *have = NULL;
  bagua__rdzv_assign_t *place = calloc((size_t)R->nmembers + 1, sizeof(*place));
  bagua__etcd_put_t *puts = calloc(s->nnodes, sizeof(*puts));
  char **vals = calloc(s->nnodes, sizeof(*vals));
  char(*keys)[BAGUA_RDZV_KEY_MAX] = calloc(s->nnodes, sizeof(*keys));
  size_t nput = 0, written = 0;
  int rc = -1;
  /* An index of this round's members (the snapshot's round may be an older one). */
  bagua__agent_snap_t view = *s;
  view.round = *R;
  view.has_round = 1;
  if (!place || !puts || !vals || !keys || bagua__agent_index_build(&x, &view) != 0) {
    BAGUA_WARN("agent: out of memory writing the assignments of round %lld", (long long)R->round);
    goto out;
  }
  if (!fresh && s->nassigned) {
    have = malloc(s->nassigned * sizeof(*have));
    if (!have) goto out_index;
    memcpy(have, s->assigned, s->nassigned * sizeof(*have));
    qsort(have, s->nassigned, sizeof(*have), by_node);
  }
  bagua__rdzv_assign_all(R, BAGUA__RING_WATCH, place);
  bagua__rdzv_assign_t *spare = &place[R->nmembers];
  bagua__rdzv_assign_of(R, -1, 0, spare);
  for (size_t i = 0; i < s->nnodes; i++) {
    const bagua__rdzv_node_t *n = &s->nodes[i];
    int idx = bagua__agent_index_member(&x, n->id);
    const bagua__rdzv_assign_t *want = idx >= 0 ? &place[idx] : spare;
    if (have && current(assigned_of(have, s->nassigned, n->id), want, n->lease)) continue;
    vals[nput] = bagua__rdzv_assign_encode(want);
    if (!vals[nput]) continue;
    bagua__agent_key(a, keys[nput], sizeof(keys[nput]), BAGUA__RDZV_KEY_ASSIGN, 0, n->id);
    puts[nput] = (bagua__etcd_put_t){keys[nput], vals[nput], strlen(vals[nput]), n->lease};
    nput++;
  }
  if (nput) {
    bagua_status_t st = bagua__etcd_put_many(a->etcd, puts, nput, &written);
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: wrote %zu of %zu assignment(s) of round %lld%s%s",
               written, nput, (long long)R->round, st == BAGUA_OK ? "" : ": ",
               st == BAGUA_OK ? "" : bagua_strerror(st));
  }
  rc = (int)written;
  free(have);
out_index:
  bagua__agent_index_clear(&x);
out:
  for (size_t i = 0; vals && i < nput; i++) free(vals[i]);
  free(vals);
  free(keys);
  free(puts);
  free(place);
  return rc;
}
