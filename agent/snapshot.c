/*
 * The snapshot an agent decides from, built from its copy of the job's keys (mirror.h).
 *
 * The agent is level-triggered: watch events only update the copy and wake the loop, and
 * every decision is taken from a snapshot of the copy, so a repeated or reordered wake-up
 * cannot matter. Each key is decoded once per revision and the result kept with the key
 * (bagua__agent_rec_t): a snapshot copies records, which keeps the leader's pass over a
 * thousand node records well under a millisecond.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "ring.h"
#include "schema.h"

struct bagua__agent_rec {
  int64_t rev; /* the key's mod_revision this was decoded at (0: not decoded) */
  bagua__rdzv_key_kind_t kind;
  int64_t round; /* rounds/ kinds */
  int ok;        /* the value is what the schema accepts */
  union {
    bagua__rdzv_node_t node;
    bagua__agent_ack_t ack;
    bagua__agent_done_entry_t done; /* done records, and the failure key (node "") */
    bagua__rdzv_rebuild_t rebuild;
    bagua__rdzv_round_t round;
    bagua__rdzv_status_t status;
    bagua__rdzv_jobcfg_t jobcfg;
    bagua__rdzv_assign_t assign;
    bagua__rdzv_clash_t clash;
    char text[BAGUA_RDZV_SECRET_HEX + BAGUA_RDZV_ID_MAX + 1]; /* the leader id or the secret */
  } u;
  char why[160];
};

void bagua__agent_rec_free(bagua__agent_rec_t *rec) {
  if (!rec) return;
  if (rec->kind == BAGUA__RDZV_KEY_ROUND) bagua__rdzv_round_clear(&rec->u.round);
  free(rec);
}

void bagua__agent_snap_clear(bagua__agent_snap_t *s) {
  if (!s) return;
  free(s->nodes);
  bagua__rdzv_round_clear(&s->round);
  free(s->done);
  free(s->acks);
  free(s->old_rounds);
  free(s->assigned);
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

/* A record named by its key (nodes/<id>, progress/<id>, done/<id>): the name must be an id. */
static int name_ok(const bagua__etcd_kv_t *kv, const char *name, const char *what) {
  if (strlen(name) < BAGUA_RDZV_ID_MAX && bagua__rdzv_id_valid(name)) return 1;
  bagua__rdzv_reject(kv->key, kv->mod_revision, what, "the key's node id is invalid");
  return 0;
}

/* A node record: valid JSON of the schema, and on a lease. A record on no lease is not an
 * agent's (every agent registers on its lease, so its record vanishes with it): admitting it
 * would make a round wait for workers that never come. A record on a lease needs no further
 * check: etcd refuses a write on a lease it does not know and deletes a lease's keys with it,
 * so the key's own lease field is the proof that its lease lives. */
static int decode_node(const bagua__etcd_kv_t *kv, const char *id, bagua__rdzv_node_t *node) {
  char why[160];
  memset(node, 0, sizeof(*node));
  if (!name_ok(kv, id, "a node record")) return 0;
  snprintf(node->id, sizeof(node->id), "%s", id);
  if (bagua__rdzv_node_decode(kv->value, node, why, sizeof(why)) != 0) {
    bagua__rdzv_reject(kv->key, kv->mod_revision, "a node record", why);
    return 0;
  }
  if (kv->lease == 0) {
    bagua__rdzv_reject(kv->key, kv->mod_revision, "a node record",
                       "it is on no lease (no agent holds it)");
    return 0;
  }
  node->create_rev = kv->create_revision;
  node->lease = kv->lease;
  return 1;
}

/* Decodes one key into `r` (whose previous contents are gone). */
static void decode(const char *prefix, const bagua__etcd_kv_t *kv, bagua__agent_rec_t *r) {
  bagua__rdzv_key_info_t ki;
  char why[160];
  memset(r, 0, sizeof(*r));
  r->rev = kv->mod_revision;
  r->round = -1;
  if (bagua__rdzv_key_parse(prefix, kv->key, &ki) != 0) {
    r->kind = BAGUA__RDZV_KEY_OTHER;
    return;
  }
  r->kind = ki.kind;
  r->round = ki.round;
  switch (ki.kind) {
    case BAGUA__RDZV_KEY_NODE:
      r->ok = decode_node(kv, ki.name, &r->u.node);
      break;
    case BAGUA__RDZV_KEY_LEADER:
      r->ok =
          bagua__rdzv_leader_decode(kv->value, r->u.text, BAGUA_RDZV_ID_MAX, why, sizeof(why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a leader record", why);
      break;
    case BAGUA__RDZV_KEY_ROUND:
      r->ok = bagua__rdzv_round_decode(kv->value, &r->u.round, r->why, sizeof(r->why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a round record", r->why);
      break;
    case BAGUA__RDZV_KEY_STATUS:
      r->ok = bagua__rdzv_status_decode(kv->value, &r->u.status, r->why, sizeof(r->why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a status record", r->why);
      break;
    case BAGUA__RDZV_KEY_CONFIG:
      r->ok = bagua__rdzv_jobcfg_decode(kv->value, &r->u.jobcfg, why, sizeof(why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a config record", why);
      break;
    case BAGUA__RDZV_KEY_SECRET:
      r->ok = bagua__rdzv_secret_decode(kv->value, kv->value_len, r->u.text, why, sizeof(why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a secret record", why);
      break;
    case BAGUA__RDZV_KEY_REBUILD:
      r->ok = bagua__rdzv_rebuild_decode(kv->value, &r->u.rebuild, why, sizeof(why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a rebuild request", why);
      break;
    case BAGUA__RDZV_KEY_PROGRESS: {
      /* Only the round and the lease matter here: they say the node's agent took that round
       * (leader.c). A refused record counts as no acknowledgement. */
      if (!name_ok(kv, ki.name, "a progress record")) break;
      bagua__rdzv_progress_t p;
      memset(&p, 0, sizeof(p));
      snprintf(p.node, sizeof(p.node), "%s", ki.name);
      if (bagua__rdzv_progress_decode(kv->value, &p, why, sizeof(why)) != 0) {
        bagua__rdzv_reject(kv->key, kv->mod_revision, "a progress record", why);
      } else {
        snprintf(r->u.ack.node, sizeof(r->u.ack.node), "%s", ki.name);
        r->u.ack.round = p.round;
        r->u.ack.lease = kv->lease;
        r->ok = 1;
      }
      bagua__rdzv_progress_clear(&p);
      break;
    }
    case BAGUA__RDZV_KEY_CLASH:
      if (!name_ok(kv, ki.name, "a clash record")) break;
      snprintf(r->u.clash.node, sizeof(r->u.clash.node), "%s", ki.name);
      r->ok = bagua__rdzv_clash_decode(kv->value, &r->u.clash, why, sizeof(why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "a clash record", why);
      break;
    case BAGUA__RDZV_KEY_ASSIGN:
      if (!name_ok(kv, ki.name, "an assignment")) break;
      snprintf(r->u.assign.node, sizeof(r->u.assign.node), "%s", ki.name);
      r->ok = bagua__rdzv_assign_decode(kv->value, &r->u.assign, why, sizeof(why)) == 0;
      if (!r->ok) bagua__rdzv_reject(kv->key, kv->mod_revision, "an assignment", why);
      break;
    case BAGUA__RDZV_KEY_DONE:
    case BAGUA__RDZV_KEY_FAILURE: {
      bagua__agent_done_entry_t *e = &r->u.done;
      const char *what = ki.kind == BAGUA__RDZV_KEY_DONE ? "a done record" : "a failure record";
      if (ki.kind == BAGUA__RDZV_KEY_DONE && !name_ok(kv, ki.name, what)) break;
      if (bagua__rdzv_done_decode(kv->value, &e->done, why, sizeof(why)) != 0) {
        bagua__rdzv_reject(kv->key, kv->mod_revision, what, why);
        break;
      }
      if (ki.kind == BAGUA__RDZV_KEY_DONE) {
        snprintf(e->node, sizeof(e->node), "%s", ki.name);
        snprintf(e->done.f.node, sizeof(e->done.f.node), "%s", e->node);
      } else if (e->done.state != BAGUA__DONE_FAILED) {
        bagua__rdzv_reject(kv->key, kv->mod_revision, what, "it reports no failure");
        break;
      }
      r->ok = 1;
      break;
    }
    default:
      break;
  }
}

/* The entry's record, decoded at the key's current revision. NULL when out of memory. */
static const bagua__agent_rec_t *rec_of(const char *prefix, bagua__agent_entry_t *e) {
  if (e->rec && e->rec->rev == e->kv.mod_revision && e->kv.mod_revision != 0) return e->rec;
  bagua__agent_rec_free(e->rec);
  e->rec = malloc(sizeof(*e->rec));
  if (!e->rec) return NULL;
  decode(prefix, &e->kv, e->rec);
  return e->rec;
}

/* Takes one non-round record into the snapshot (the round is taken first). */
static void take(bagua__agent_snap_t *s, const char *self, const bagua__etcd_kv_t *kv,
                 const bagua__agent_rec_t *r, size_t *cap_rounds) {
  switch (r->kind) {
    case BAGUA__RDZV_KEY_ASSIGN:
      if (!r->ok) break;
      if (s->full) {
        bagua__agent_assigned_t *x = &s->assigned[s->nassigned++];
        snprintf(x->node, sizeof(x->node), "%s", r->u.assign.node);
        x->round = r->u.assign.round;
        x->index = r->u.assign.index;
        x->rev = r->u.assign.rev;
        x->time_ms = r->u.assign.time_ms;
        x->lease = kv->lease;
      } else if (self && strcmp(r->u.assign.node, self) == 0) {
        s->has_place = 1;
        s->place = r->u.assign;
      }
      break;
    case BAGUA__RDZV_KEY_NODE:
      if (r->ok) s->nodes[s->nnodes++] = r->u.node;
      break;
    case BAGUA__RDZV_KEY_CLASH:
      /* The leader's copy holds every node's; only this node's own concerns this agent. */
      if (r->ok && self && strcmp(r->u.clash.node, self) == 0) {
        s->has_clash = 1;
        s->clash = r->u.clash;
        s->clash_mod_rev = kv->mod_revision;
      }
      break;
    case BAGUA__RDZV_KEY_LEADER:
      s->has_leader = 1;
      s->leader_lease = kv->lease;
      s->leader_mod_rev = kv->mod_revision;
      s->leader_valid = r->ok;
      if (r->ok) {
        memcpy(s->leader, r->u.text, sizeof(s->leader));
        s->leader[sizeof(s->leader) - 1] = '\0';
      }
      break;
    case BAGUA__RDZV_KEY_STATUS:
      s->status_mod_rev = kv->mod_revision;
      if (r->ok) {
        s->has_status = 1;
        s->status = r->u.status;
      } else {
        s->status_bad = 1;
        snprintf(s->status_why, sizeof(s->status_why), "%s", r->why);
      }
      break;
    case BAGUA__RDZV_KEY_CONFIG:
      if (r->ok) {
        s->has_jobcfg = 1;
        s->jobcfg = r->u.jobcfg;
      }
      break;
    case BAGUA__RDZV_KEY_SECRET:
      s->secret_mod_rev = kv->mod_revision;
      if (r->ok) {
        s->has_secret = 1;
        memcpy(s->secret, r->u.text, sizeof(s->secret));
        s->secret[sizeof(s->secret) - 1] = '\0';
      }
      break;
    case BAGUA__RDZV_KEY_FAILURE:
      if (r->ok) {
        s->has_failure = 1;
        s->failure = r->u.done.done;
      }
      break;
    case BAGUA__RDZV_KEY_ROUND_DIR:
    case BAGUA__RDZV_KEY_BOOTSTRAP_DIR:
    case BAGUA__RDZV_KEY_BOOTSTRAP:
      note_round(s, r->round, cap_rounds);
      break;
    case BAGUA__RDZV_KEY_REBUILD:
      note_round(s, r->round, cap_rounds);
      if (!r->ok || !s->has_round || r->round != s->round.round) break;
      if (s->nrebuild++ == 0) s->rebuild = r->u.rebuild;
      break;
    case BAGUA__RDZV_KEY_PROGRESS:
      if (r->ok) s->acks[s->nacks++] = r->u.ack;
      break;
    case BAGUA__RDZV_KEY_DONE:
      note_round(s, r->round, cap_rounds);
      if (r->ok && s->has_round && r->round == s->round.round) s->done[s->ndone++] = r->u.done;
      break;
    default:
      break;
  }
}

int bagua__agent_snap_build(const char *prefix, const char *self, bagua__agent_entry_t *e, size_t n,
                            const int64_t *rounds, size_t nrounds, int full,
                            bagua__agent_snap_t *s) {
  size_t cap_rounds = 0, nnodes = 0, ndone = 0, nacks = 0, nassigned = 0;
  memset(s, 0, sizeof(*s));
  s->full = full;
  /* The round first: only then can its done records be told apart from older ones. The
   * sizes are counted on the way, so the arrays are allocated once, exactly. */
  for (size_t i = 0; i < n; i++) {
    const bagua__agent_rec_t *r = rec_of(prefix, &e[i]);
    if (!r) goto oom;
    nnodes += r->kind == BAGUA__RDZV_KEY_NODE;
    ndone += r->kind == BAGUA__RDZV_KEY_DONE;
    nacks += r->kind == BAGUA__RDZV_KEY_PROGRESS;
    nassigned += r->kind == BAGUA__RDZV_KEY_ASSIGN;
    if (r->kind != BAGUA__RDZV_KEY_ROUND) continue;
    s->round_mod_rev = e[i].kv.mod_revision;
    if (r->ok) {
      if (bagua__rdzv_round_copy(&s->round, &r->u.round) != 0) goto oom;
      s->has_round = 1;
    } else {
      s->round_bad = 1;
      snprintf(s->round_why, sizeof(s->round_why), "%s", r->why);
    }
  }
  s->nodes = calloc(nnodes ? nnodes : 1, sizeof(*s->nodes));
  s->done = calloc(ndone ? ndone : 1, sizeof(*s->done));
  s->acks = calloc(nacks ? nacks : 1, sizeof(*s->acks));
  s->assigned = calloc(full && nassigned ? nassigned : 1, sizeof(*s->assigned));
  if (!s->nodes || !s->done || !s->acks || !s->assigned) goto oom;
  for (size_t i = 0; i < n; i++)
    if (e[i].rec->kind != BAGUA__RDZV_KEY_ROUND) take(s, self, &e[i].kv, e[i].rec, &cap_rounds);
  /* The whole round is at hand: the place comes from it, not from an assignment that the
   * leader may not have written yet. */
  if (full && s->has_round && self) {
    bagua__rdzv_assign_of(&s->round, bagua__rdzv_round_find(&s->round, self), BAGUA__RING_WATCH,
                          &s->place);
    snprintf(s->place.node, sizeof(s->place.node), "%s", self);
    s->has_place = 1;
  }
  for (size_t i = 0; i < nrounds; i++) note_round(s, rounds[i], &cap_rounds);
  qsort(s->nodes, s->nnodes, sizeof(*s->nodes), cmp_node);
  return 0;
oom:
  bagua__agent_snap_clear(s);
  BAGUA_WARN("agent: out of memory building a snapshot of %zu etcd keys", n);
  return -1;
}

int bagua__agent_snap_parse(const char *prefix, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__agent_snap_t *s) {
  bagua__agent_entry_t *e = calloc(n ? n : 1, sizeof(*e));
  if (!e) return -1;
  for (size_t i = 0; i < n; i++) e[i].kv = kvs[i]; /* borrowed: only the records are freed */
  int rc = bagua__agent_snap_build(prefix, NULL, e, n, NULL, 0, 1, s);
  for (size_t i = 0; i < n; i++) bagua__agent_rec_free(e[i].rec);
  free(e);
  return rc;
}
