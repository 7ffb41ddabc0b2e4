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
  bagua__agent_round_clear(&s->round);
  free(s->done);
  free(s->old_rounds);
  memset(s, 0, sizeof(*s));
}

const bagua__agent_node_t *bagua__agent_snap_node(const bagua__agent_snap_t *s, const char *id) {
  for (size_t i = 0; i < s->nnodes; i++)
    if (strcmp(s->nodes[i].id, id) == 0) return &s->nodes[i];
  return NULL;
}

const bagua__agent_done_t *bagua__agent_snap_done(const bagua__agent_snap_t *s, const char *node) {
  for (size_t i = 0; i < s->ndone; i++)
    if (strcmp(s->done[i].node, node) == 0) return &s->done[i].done;
  return NULL;
}

static int cmp_node(const void *a, const void *b) {
  const bagua__agent_node_t *x = a, *y = b;
  return (x->create_rev > y->create_rev) - (x->create_rev < y->create_rev);
}

/* Parses "<digits>/" at `p`; returns the number and sets *rest past the slash, or -1. */
static int64_t parse_round_dir(const char *p, const char **rest) {
  int64_t v = 0;
  const char *q = p;
  while (*q >= '0' && *q <= '9' && v < ((int64_t)1 << 50)) v = v * 10 + (*q++ - '0');
  if (q == p || *q != '/') return -1;
  *rest = q + 1;
  return v;
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

int bagua__agent_snap_parse(const char *prefix, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__agent_snap_t *s) {
  size_t plen = strlen(prefix), cap_rounds = 0;
  s->nodes = calloc(n ? n : 1, sizeof(*s->nodes));
  s->done = calloc(n ? n : 1, sizeof(*s->done));
  if (!s->nodes || !s->done) return -1;

  /* The round is needed before its done records can be told apart from older ones. */
  for (size_t i = 0; i < n; i++) {
    const char *k = kvs[i].key;
    if (strncmp(k, prefix, plen) != 0 || strcmp(k + plen, "round") != 0) continue;
    if (bagua__agent_round_decode(kvs[i].value, &s->round) == 0) {
      s->has_round = 1;
      s->round_mod_rev = kvs[i].mod_revision;
    } else {
      BAGUA_WARN("agent: ignoring %s: not a round record: \"%.120s\"", k, kvs[i].value);
    }
  }

  for (size_t i = 0; i < n; i++) {
    const bagua__etcd_kv_t *kv = &kvs[i];
    if (strncmp(kv->key, prefix, plen) != 0) continue;
    const char *k = kv->key + plen;
    if (strncmp(k, "nodes/", 6) == 0) {
      bagua__agent_node_t *node = &s->nodes[s->nnodes];
      memset(node, 0, sizeof(*node));
      snprintf(node->id, sizeof(node->id), "%s", k + 6);
      if (!node->id[0] || strchr(node->id, '/') || bagua__agent_node_decode(kv->value, node) != 0) {
        BAGUA_WARN("agent: ignoring %s: not a node record: \"%.120s\"", kv->key, kv->value);
        continue;
      }
      node->create_rev = kv->create_revision;
      node->lease = kv->lease;
      s->nnodes++;
    } else if (strcmp(k, "leader") == 0) {
      s->has_leader = 1;
      snprintf(s->leader, sizeof(s->leader), "%s", kv->value);
      s->leader_lease = kv->lease;
    } else if (strcmp(k, "status") == 0) {
      if (bagua__agent_status_decode(kv->value, &s->status) == 0) {
        s->has_status = 1;
        s->status_mod_rev = kv->mod_revision;
      } else {
        BAGUA_WARN("agent: ignoring %s: not a status record: \"%.120s\"", kv->key, kv->value);
      }
    } else if (strcmp(k, "config") == 0) {
      if (bagua__agent_jobcfg_decode(kv->value, &s->jobcfg) == 0)
        s->has_jobcfg = 1;
      else
        BAGUA_WARN("agent: ignoring %s: not a config record: \"%.120s\"", kv->key, kv->value);
    } else if (strncmp(k, "rounds/", 7) == 0) {
      const char *rest = NULL;
      int64_t r = parse_round_dir(k + 7, &rest);
      if (r < 0) continue;
      note_round(s, r, &cap_rounds);
      if (!s->has_round || r != s->round.round || strncmp(rest, "done/", 5) != 0) continue;
      bagua__agent_done_entry_t *e = &s->done[s->ndone];
      snprintf(e->node, sizeof(e->node), "%s", rest + 5);
      if (bagua__agent_done_decode(kv->value, &e->done) != 0) {
        BAGUA_WARN("agent: ignoring %s: not a done record: \"%.120s\"", kv->key, kv->value);
        continue;
      }
      snprintf(e->done.f.node, sizeof(e->done.f.node), "%s", e->node);
      s->ndone++;
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
