/*
 * A job's whole key space, read in one range request and parsed.
 *
 * The agent is level-triggered: watch events only wake its loop, and every decision is taken
 * from a snapshot read at a single revision. That keeps the logic free of event-ordering
 * cases (a missed or repeated event cannot matter) at the price of one small range request
 * per wake-up, which is cheap for the handful of keys a job has.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "schema.h"

void bagua__agent_snap_clear(bagua__agent_snap_t *s) {
  if (!s) return;
  free(s->nodes);
  bagua__rdzv_round_clear(&s->round);
  free(s->done);
  free(s->acks);
  free(s->old_rounds);
  memset(s, 0, sizeof(*s));
}

const bagua__rdzv_node_t *bagua__agent_snap_node(const bagua__agent_snap_t *s, const char *id) {
  for (size_t i = 0; i < s->nnodes; i++)
    if (strcmp(s->nodes[i].id, id) == 0) return &s->nodes[i];
  return NULL;
}

const bagua__rdzv_done_t *bagua__agent_snap_done(const bagua__agent_snap_t *s, const char *node) {
  for (size_t i = 0; i < s->ndone; i++)
    if (strcmp(s->done[i].node, node) == 0) return &s->done[i].done;
  return NULL;
}

const bagua__agent_ack_t *bagua__agent_snap_ack(const bagua__agent_snap_t *s, const char *node) {
  for (size_t i = 0; i < s->nacks; i++)
    if (strcmp(s->acks[i].node, node) == 0) return &s->acks[i];
  return NULL;
}

static int cmp_node(const void *a, const void *b) {
  const bagua__rdzv_node_t *x = a, *y = b;
  return (x->create_rev > y->create_rev) - (x->create_rev < y->create_rev);
}

static void note_round(bagua__agent_snap_t *s, int64_t n, size_t *cap) {
  for (size_t i = 0; i < s->nold_rounds; i++)
    if (s->old_rounds[i] == n) return;
  if (s->nold_rounds == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    int64_t *p = realloc(s->old_rounds, nc * sizeof(*p));
    if (!p) return; /* clean-up is best effort; missing one entry only delays it */
    s->old_rounds = p;
    *cap = nc;
  }
  s->old_rounds[s->nold_rounds++] = n;
}

/* A node record: valid JSON of the schema, and on a lease. A record on no lease is not an
 * agent's (every agent registers on its lease, so its record vanishes with it): admitting it
 * would make a round wait for workers that never come. */
static void parse_node(bagua__agent_snap_t *s, const bagua__etcd_kv_t *kv, const char *id) {
  bagua__rdzv_node_t *node = &s->nodes[s->nnodes];
  char why[160];
  memset(node, 0, sizeof(*node));
  if (strlen(id) >= sizeof(node->id) || !bagua__rdzv_id_valid(id)) {
    bagua__rdzv_reject(kv->key, kv->mod_revision, "a node record", "the key's node id is invalid");
    return;
  }
  snprintf(node->id, sizeof(node->id), "%s", id);
  if (bagua__rdzv_node_decode(kv->value, node, why, sizeof(why)) != 0) {
    bagua__rdzv_reject(kv->key, kv->mod_revision, "a node record", why);
    return;
  }
  if (kv->lease == 0) {
    bagua__rdzv_reject(kv->key, kv->mod_revision, "a node record",
                       "it is on no lease (no agent holds it)");
    return;
  }
  node->create_rev = kv->create_revision;
  node->lease = kv->lease;
  s->nnodes++;
}

int bagua__agent_snap_parse(const char *prefix, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__agent_snap_t *s) {
  size_t cap_rounds = 0;
  char why[160];
  s->nodes = calloc(n ? n : 1, sizeof(*s->nodes));
  s->done = calloc(n ? n : 1, sizeof(*s->done));
  s->acks = calloc(n ? n : 1, sizeof(*s->acks));
  if (!s->nodes || !s->done || !s->acks) return -1;

  /* The round is needed before its done records can be told apart from older ones. */
  for (size_t i = 0; i < n; i++) {
    bagua__rdzv_key_info_t ki;
    if (bagua__rdzv_key_parse(prefix, kvs[i].key, &ki) != 0 || ki.kind != BAGUA__RDZV_KEY_ROUND)
      continue;
    s->round_mod_rev = kvs[i].mod_revision;
    if (bagua__rdzv_round_decode(kvs[i].value, &s->round, s->round_why, sizeof(s->round_why)) ==
        0) {
      s->has_round = 1;
    } else {
      s->round_bad = 1;
      bagua__rdzv_reject(kvs[i].key, kvs[i].mod_revision, "a round record", s->round_why);
    }
  }

  for (size_t i = 0; i < n; i++) {
    const bagua__etcd_kv_t *kv = &kvs[i];
    bagua__rdzv_key_info_t ki;
    if (bagua__rdzv_key_parse(prefix, kv->key, &ki) != 0) continue;
    switch (ki.kind) {
      case BAGUA__RDZV_KEY_NODE:
        parse_node(s, kv, ki.name);
        break;
      case BAGUA__RDZV_KEY_LEADER:
        s->has_leader = 1;
        s->leader_lease = kv->lease;
        s->leader_mod_rev = kv->mod_revision;
        s->leader_valid = bagua__rdzv_leader_decode(kv->value, s->leader, sizeof(s->leader), why,
                                                    sizeof(why)) == 0;
        if (!s->leader_valid) bagua__rdzv_reject(kv->key, kv->mod_revision, "a leader record", why);
        break;
      case BAGUA__RDZV_KEY_STATUS:
        s->status_mod_rev = kv->mod_revision;
        if (bagua__rdzv_status_decode(kv->value, &s->status, s->status_why,
                                      sizeof(s->status_why)) == 0) {
          s->has_status = 1;
        } else {
          s->status_bad = 1;
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a status record", s->status_why);
        }
        break;
      case BAGUA__RDZV_KEY_CONFIG:
        if (bagua__rdzv_jobcfg_decode(kv->value, &s->jobcfg, why, sizeof(why)) == 0)
          s->has_jobcfg = 1;
        else
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a config record", why);
        break;
      case BAGUA__RDZV_KEY_SECRET:
        s->secret_mod_rev = kv->mod_revision;
        if (bagua__rdzv_secret_decode(kv->value, kv->value_len, s->secret, why, sizeof(why)) == 0)
          s->has_secret = 1;
        else
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a secret record", why);
        break;
      case BAGUA__RDZV_KEY_ROUND_DIR:
      case BAGUA__RDZV_KEY_BOOTSTRAP_DIR:
      case BAGUA__RDZV_KEY_BOOTSTRAP:
        note_round(s, ki.round, &cap_rounds);
        break;
      case BAGUA__RDZV_KEY_REBUILD: {
        note_round(s, ki.round, &cap_rounds);
        if (!s->has_round || ki.round != s->round.round) break;
        bagua__rdzv_rebuild_t rb;
        if (bagua__rdzv_rebuild_decode(kv->value, &rb, why, sizeof(why)) != 0) {
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a rebuild request", why);
          break;
        }
        if (s->nrebuild++ == 0) s->rebuild = rb;
        break;
      }
      case BAGUA__RDZV_KEY_PROGRESS: {
        /* Only the round and the lease matter here: they say the node's agent took that round
         * (leader.c). A refused record counts as no acknowledgement. */
        bagua__agent_ack_t *e = &s->acks[s->nacks];
        if (strlen(ki.name) >= sizeof(e->node) || !bagua__rdzv_id_valid(ki.name)) {
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a progress record",
                             "the key's node id is invalid");
          break;
        }
        bagua__rdzv_progress_t p;
        memset(&p, 0, sizeof(p));
        snprintf(p.node, sizeof(p.node), "%s", ki.name);
        if (bagua__rdzv_progress_decode(kv->value, &p, why, sizeof(why)) != 0) {
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a progress record", why);
          break;
        }
        snprintf(e->node, sizeof(e->node), "%s", ki.name);
        e->round = p.round;
        e->lease = kv->lease;
        bagua__rdzv_progress_clear(&p);
        s->nacks++;
        break;
      }
      case BAGUA__RDZV_KEY_DONE: {
        note_round(s, ki.round, &cap_rounds);
        if (!s->has_round || ki.round != s->round.round) break;
        bagua__agent_done_entry_t *e = &s->done[s->ndone];
        if (strlen(ki.name) >= sizeof(e->node) || !bagua__rdzv_id_valid(ki.name)) {
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a done record",
                             "the key's node id is invalid");
          break;
        }
        snprintf(e->node, sizeof(e->node), "%s", ki.name);
        if (bagua__rdzv_done_decode(kv->value, &e->done, why, sizeof(why)) != 0) {
          bagua__rdzv_reject(kv->key, kv->mod_revision, "a done record", why);
          break;
        }
        snprintf(e->done.f.node, sizeof(e->done.f.node), "%s", e->node);
        s->ndone++;
        break;
      }
      default:
        break;
    }
  }
  qsort(s->nodes, s->nnodes, sizeof(*s->nodes), cmp_node);
  return 0;
}

bagua_status_t bagua__agent_snap_read(bagua__etcd_t *c, const char *prefix,
                                      bagua__agent_snap_t *s) {
  memset(s, 0, sizeof(*s));
  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  bagua_status_t st = bagua__etcd_range_prefix(c, prefix, &kvs, &n, &s->revision);
  if (st != BAGUA_OK) return st;
  int64_t rev = s->revision;
  if (bagua__agent_snap_parse(prefix, kvs, n, s) != 0) {
    bagua__etcd_kvs_free(kvs, n);
    bagua__agent_snap_clear(s);
    BAGUA_WARN("agent: out of memory parsing %zu etcd keys", n);
    return BAGUA_ERR_NO_MEMORY;
  }
  s->revision = rev;
  bagua__etcd_kvs_free(kvs, n);
  return BAGUA_OK;
}
