/*
 * Round formation (docs/agent.md, "Rounds"). The leader publishes round N+1 when:
 *  - no round exists yet and at least MIN nodes are registered, after the last-call window
 *    (at once when MAX are registered);
 *  - the membership changed (a member's lease expired or it left, or a node joined while the
 *    round has fewer than MAX members), after the settle window that batches simultaneous
 *    changes; restart_count is unchanged, so membership changes are free;
 *  - a worker failed and every member has reported (or a lease TTL passed, long enough for a
 *    dead node's lease to expire), with restart_count + 1, until --max-restarts is used up
 *    and the job fails with the earliest failure as root cause.
 * Members are ordered previous members first (in their previous order) and then newcomers by
 * node rank (torchrun's --node_rank, for those that have one) and registration revision, so the
 * survivors keep the lowest ranks and rank 0 is a survivor, and a first round of nodes started
 * with torchrun's static ranks takes them in that order.
 *
 * A member must act in every round that names it: its agent acknowledges the round (writes
 * progress/<node> naming it) on the first pass of its loop that sees it, and later reports the
 * end of its workers. A registration that does neither for the act deadline (leader time,
 * counted across rounds, so membership changes cannot restart it) is dropped: its lease is
 * revoked and the next round leaves it out. That is a node record no agent holds (written by
 * hand on a lease someone keeps alive), which would otherwise hold every round it is in until
 * its lease ends. A real agent dropped so registers again as a new node.
 */
#include "leader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "index.h"

void bagua__leader_state_clear(bagua__leader_state_t *st) {
  free(st->silent);
  memset(st, 0, sizeof(*st));
  st->round_seen = -1;
}

void bagua__lead_decision_clear(bagua__lead_decision_t *d) {
  bagua__rdzv_round_clear(&d->round);
  free(d->drops);
  d->drops = NULL;
  d->ndrops = 0;
}

int64_t bagua__leader_ack_bound(int64_t ack_ms, int grace_ms, int lease_ttl_s) {
  if (ack_ms <= 0) return 0;
  int64_t floor = 2 * (int64_t)grace_ms + (int64_t)lease_ttl_s * 1000;
  return ack_ms > floor ? ack_ms : floor;
}

/* The silence list is kept sorted by (id, rev) between decisions, so that it is searched in
 * O(log N); entries added during a decision are appended and sorted in at its end (a member
 * appears once in a round, so nothing searches for an entry added in the same pass). */
static int silent_cmp_key(const bagua__lead_silent_t *e, const char *id, int64_t rev) {
  int c = strcmp(e->id, id);
  return c ? c : (e->rev > rev) - (e->rev < rev);
}

static int silent_cmp(const void *a, const void *b) {
  const bagua__lead_silent_t *y = b;
  return silent_cmp_key(a, y->id, y->rev);
}

static bagua__lead_silent_t *silent_find(bagua__leader_state_t *st, const char *id, int64_t rev) {
  size_t lo = 0, hi = st->nsorted;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = silent_cmp_key(&st->silent[mid], id, rev);
    if (c == 0) return &st->silent[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static void silent_sort(bagua__leader_state_t *st) {
  if (st->nsilent > 1) qsort(st->silent, st->nsilent, sizeof(*st->silent), silent_cmp);
  st->nsorted = st->nsilent;
}

static bagua__lead_silent_t *silent_add(bagua__leader_state_t *st, const char *id, int64_t rev) {
  if (st->nsilent == st->silent_cap) {
    size_t nc = st->silent_cap ? st->silent_cap * 2 : 8;
    bagua__lead_silent_t *v = realloc(st->silent, nc * sizeof(*v));
    if (!v) return NULL;
    st->silent = v;
    st->silent_cap = nc;
  }
  bagua__lead_silent_t *e = &st->silent[st->nsilent++];
  memset(e, 0, sizeof(*e));
  snprintf(e->id, sizeof(e->id), "%s", id);
  e->rev = rev;
  e->since = -1;
  return e;
}

/* Whether registration (id, rev) was dropped for not acting (rev 0: any registration of the
 * id, as a round written by hand may carry no revisions). It stays out of every round while it
 * lives: only a new registration of the id is admitted again. */
static int banned(const bagua__leader_state_t *st, const char *id, int64_t rev) {
  /* The first entry of the id in the sorted part, then every registration of it. */
  size_t lo = 0, hi = st->nsorted;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(st->silent[mid].id, id) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (size_t i = lo; i < st->nsorted && strcmp(st->silent[i].id, id) == 0; i++) {
    const bagua__lead_silent_t *e = &st->silent[i];
    if (e->dropped_round && (!rev || e->rev == rev)) return 1;
  }
  /* Entries appended in this decision are never dropped yet. */
  return 0;
}

/*
 * The act deadline. For each member of R still registered as R names it (the leader itself
 * aside: it acts by deciding), whether it acted in R: a done record, or a progress record for
 * R on the member's own lease. A member that has not is silent from the first decision that
 * saw it so, and stays silent through later rounds that name it until it acts; one silent for
 * p->ack_timeout_ms of leader time is dropped. Every dropped registration that is still
 * registered is put in d->drops, on each decision, so that ending it is tried again until it
 * is gone. Sets *wake to when the next silent member's deadline falls (0: none) and *pending
 * to how many are silent within their deadline. Returns 0, or -1 when out of memory.
 */
static int check_acts(const bagua__leader_params_t *p, bagua__leader_state_t *st,
                      const bagua__agent_index_t *x, const bagua__rdzv_round_t *R, int64_t now,
                      bagua__lead_decision_t *d, int64_t *wake, int *pending) {
  *wake = 0;
  *pending = 0;
  for (size_t i = 0; i < st->nsilent; i++) st->silent[i].seen = 0;
  for (int i = 0; i < R->nmembers; i++) {
    const bagua__rdzv_member_t *m = &R->members[i];
    const bagua__rdzv_node_t *node = bagua__agent_index_node(x, m->id);
    if (!node || (m->rev && node->create_rev != m->rev)) continue; /* left: a membership change */
    if (p->self && strcmp(m->id, p->self) == 0) continue;
    bagua__lead_silent_t *e = silent_find(st, m->id, node->create_rev);
    if (!e && !(e = silent_add(st, m->id, node->create_rev))) return -1;
    e->seen = 1;
    e->lease = node->lease;
    if (e->dropped_round) continue;
    const bagua__agent_ack_t *ack = bagua__agent_index_ack(x, m->id);
    if (bagua__agent_index_done(x, m->id) ||
        (ack && ack->round == R->round && ack->lease == node->lease)) {
      e->acted_round = R->round;
      e->since = -1;
      continue;
    }
    /* It acted earlier in R (its record has since changed, e.g. rewritten by hand). */
    if (e->acted_round >= R->round) continue;
    if (e->since < 0) e->since = st->clock;
    int64_t silent = st->clock - e->since;
    if (silent >= p->ack_timeout_ms) {
      e->dropped_round = R->round;
      continue;
    }
    int64_t at = now + (p->ack_timeout_ms - silent);
    if (!*wake || at < *wake) *wake = at;
    (*pending)++;
  }
  /* A registration that left is forgotten (one that comes back is a new registration), except
   * one dropped from R: until the next round, R's decisions must still leave it out. Silence
   * counts only in rounds that name the registration. */
  size_t k = 0;
  for (size_t i = 0; i < st->nsilent; i++) {
    bagua__lead_silent_t *e = &st->silent[i];
    const bagua__rdzv_node_t *node = bagua__agent_index_node(x, e->id);
    int registered = node && node->create_rev == e->rev;
    if (!e->seen && !e->dropped_round) e->since = -1;
    if (!registered && !(e->dropped_round && e->dropped_round == R->round)) continue;
    if (k != i) st->silent[k] = *e; /* no self-copy: memcpy's ranges must not overlap */
    k++;
    if (!registered || !e->dropped_round) continue;
    bagua__lead_drop_t *v = realloc(d->drops, (size_t)(d->ndrops + 1) * sizeof(*v));
    if (!v) return -1;
    d->drops = v;
    bagua__lead_drop_t *x = &d->drops[d->ndrops++];
    memset(x, 0, sizeof(*x));
    snprintf(x->id, sizeof(x->id), "%s", e->id);
    x->rev = e->rev;
    x->lease = node->lease;
    x->silent_ms = st->clock - e->since;
  }
  st->nsilent = k;
  silent_sort(st);
  return 0;
}

/* Nodes chosen for a round, as pointers into the snapshot. */
typedef struct {
  const bagua__rdzv_node_t **v;
  int n;
} pick_t;

/* Whether `id` is a member of the snapshot's round (`r`, when there is one). */
static int in_round(const bagua__agent_index_t *x, const bagua__rdzv_round_t *r, const char *id) {
  return r && bagua__agent_index_member(x, id) >= 0;
}

/* Newcomers with a node rank first, by it, then those without; ties by registration. */
static int newcomer_cmp(const void *pa, const void *pb) {
  const bagua__rdzv_node_t *a = *(const bagua__rdzv_node_t *const *)pa;
  const bagua__rdzv_node_t *b = *(const bagua__rdzv_node_t *const *)pb;
  if (a->has_node_rank != b->has_node_rank) return a->has_node_rank ? -1 : 1;
  if (a->has_node_rank && a->node_rank != b->node_rank) return a->node_rank < b->node_rank ? -1 : 1;
  return a->create_rev < b->create_rev ? -1 : a->create_rev > b->create_rev;
}

/*
 * The membership the leader wants: the previous members still registered, then (when
 * `admit` is set) the other registered nodes, oldest first, up to MAX.
 */
static int desired_members(const bagua__leader_params_t *p, const bagua__leader_state_t *st,
                           const bagua__agent_index_t *x, const bagua__rdzv_round_t *prev,
                           int admit, pick_t *out) {
  const bagua__agent_snap_t *s = x->s;
  out->n = 0;
  out->v = calloc(s->nnodes ? s->nnodes : 1, sizeof(*out->v));
  if (!out->v) return -1;
  /* The world is summed in 64 bits and kept within what workers can be told (RANK and
   * WORLD_SIZE are bounded by BAGUA_RDZV_WORLD_MAX); a node that would pass it waits. */
  int64_t world = 0;
  if (prev) {
    for (int i = 0; i < prev->nmembers && out->n < p->nnodes_max; i++) {
      const bagua__rdzv_node_t *node = bagua__agent_index_node(x, prev->members[i].id);
      /* A registration dropped for not acting stays out, even while its lease lives on. */
      if (node && banned(st, node->id, node->create_rev)) continue;
      if (node && world + node->nproc <= BAGUA_RDZV_WORLD_MAX) {
        out->v[out->n++] = node;
        world += node->nproc;
      }
    }
  }
  if (admit) {
    /* Newcomers in node-rank order (torchrun's --node_rank), then the rest; registration
     * order otherwise, which is the order of s->nodes. */
    const bagua__rdzv_node_t **cand = calloc(s->nnodes ? s->nnodes : 1, sizeof(*cand));
    if (!cand) return -1;
    size_t nc = 0;
    for (size_t i = 0; i < s->nnodes; i++)
      if (!in_round(x, prev, s->nodes[i].id) && !banned(st, s->nodes[i].id, s->nodes[i].create_rev))
        cand[nc++] = &s->nodes[i];
    qsort(cand, nc, sizeof(*cand), newcomer_cmp);
    for (size_t i = 0; i < nc && out->n < p->nnodes_max; i++)
      if (world + cand[i]->nproc <= BAGUA_RDZV_WORLD_MAX) {
        out->v[out->n++] = cand[i];
        world += cand[i]->nproc;
      }
    free(cand);
  }
  return 0;
}

static int build_round(const bagua__leader_params_t *p, const pick_t *pk, int64_t number,
                       int restart_count, bagua__round_reason_t reason, int departed,
                       int64_t wall_ms, bagua__rdzv_round_t *r) {
  memset(r, 0, sizeof(*r));
  r->members = calloc((size_t)pk->n, sizeof(*r->members));
  if (!r->members) return -1;
  r->nmembers = pk->n;
  int64_t world = 0; /* desired_members() kept it within BAGUA_RDZV_WORLD_MAX */
  for (int i = 0; i < pk->n; i++) {
    snprintf(r->members[i].id, sizeof(r->members[i].id), "%s", pk->v[i]->id);
    r->members[i].nproc = pk->v[i]->nproc;
    r->members[i].rev = pk->v[i]->create_rev;
    world += pk->v[i]->nproc;
  }
  r->world_size = (int)world;
  r->round = number;
  snprintf(r->master_addr, sizeof(r->master_addr), "%s", pk->v[0]->addr);
  r->master_port = pk->v[0]->master_port;
  r->restart_count = restart_count;
  r->reason = reason;
  snprintf(r->leader, sizeof(r->leader), "%s", p->self);
  r->time_ms = wall_ms;
  r->departed = departed;
  return 0;
}

/* Below MIN: start or check the rendezvous timer. */
static void below_min(const bagua__leader_params_t *p, bagua__leader_state_t *st, int have,
                      int64_t now, bagua__lead_decision_t *d) {
  st->settle_at = 0;
  st->last_call_at = 0;
  if (!st->below_min_since) st->below_min_since = now;
  int64_t deadline = st->below_min_since + (int64_t)p->rdzv_timeout_s * 1000;
  if (now >= deadline) {
    d->action = BAGUA__LEAD_RDZV_FAILED;
    snprintf(d->message, sizeof(d->message),
             "rendezvous timed out: %d node(s) registered, fewer than the %d needed "
             "(--nnodes %d:%d), for %d s (--rdzv-timeout)",
             have, p->nnodes_min, p->nnodes_min, p->nnodes_max, p->rdzv_timeout_s);
    return;
  }
  d->wake_at = deadline;
}

static int decide_initial(const bagua__leader_params_t *p, bagua__leader_state_t *st,
                          const bagua__agent_index_t *x, int64_t now, int64_t wall,
                          bagua__lead_decision_t *d) {
  const bagua__agent_snap_t *s = x->s;
  int have = (int)s->nnodes;
  if (have < p->nnodes_min) {
    below_min(p, st, have, now, d);
    return 0;
  }
  st->below_min_since = 0;
  if (!st->last_call_at) st->last_call_at = now + p->last_call_ms;
  if (have < p->nnodes_max && now < st->last_call_at) {
    d->wake_at = st->last_call_at;
    return 0;
  }
  pick_t pk;
  if (desired_members(p, st, x, NULL, 1, &pk) != 0) return -1;
  if (pk.n < p->nnodes_min) { /* the world bound left too few */
    free(pk.v);
    below_min(p, st, pk.n, now, d);
    return 0;
  }
  int64_t number = s->has_round ? s->round.round + 1 : 1;
  int rc = build_round(p, &pk, number, 0, BAGUA__ROUND_INITIAL, 0, wall, &d->round);
  free(pk.v);
  if (rc == 0) d->action = BAGUA__LEAD_PUBLISH;
  return rc;
}

/* The earliest reported failure of the round (lowest rank on a tie). */
static const bagua__rdzv_failure_t *root_cause(const bagua__agent_snap_t *s) {
  const bagua__rdzv_failure_t *best = NULL;
  for (size_t i = 0; i < s->ndone; i++) {
    const bagua__rdzv_done_t *dn = &s->done[i].done;
    if (dn->state != BAGUA__DONE_FAILED) continue;
    if (!best || dn->f.time_ms < best->time_ms ||
        (dn->f.time_ms == best->time_ms && dn->f.rank < best->rank))
      best = &dn->f;
  }
  return best;
}

/*
 * Whether the round agrees with the registrations it was formed from: every member still
 * registered under the same registration has the worker count its node record states, and
 * the world is their sum. Rounds the leader forms always do; one that does not was written by
 * someone else, and its workers would wait for ranks that never come (until their
 * communication timeout). Such a round is replaced at once. Returns 1 when consistent, else 0
 * with the reason in `why`.
 */
static int round_consistent(const bagua__rdzv_round_t *R, const bagua__agent_index_t *x, char *why,
                            size_t len) {
  int64_t world = 0;
  for (int i = 0; i < R->nmembers; i++) {
    const bagua__rdzv_member_t *m = &R->members[i];
    const bagua__rdzv_node_t *node = bagua__agent_index_node(x, m->id);
    world += m->nproc;
    if (!node || (m->rev && node->create_rev != m->rev) || node->nproc == m->nproc) continue;
    snprintf(why, len, "member %s has %d worker(s) in the round but %d in its node record", m->id,
             m->nproc, node->nproc);
    return 0;
  }
  if (world != R->world_size) {
    snprintf(why, len, "its world size %d is not the sum of its members' workers (%lld)",
             R->world_size, (long long)world);
    return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* The rules of a round in progress                                                          */
/* ---------------------------------------------------------------------------------------- */

/* What the rules look at: decide() computes it once per decision. */
typedef struct {
  const bagua__leader_params_t *p;
  bagua__leader_state_t *st;
  const bagua__agent_index_t *x;
  const bagua__rdzv_round_t *R;
  const pick_t *pk; /* the members the next round would have */
  int64_t now;
  int departed;       /* members gone, re-registered or dropped */
  int joiners;        /* registered nodes the next round would add */
  int all_reported;   /* every active member reported its end */
  int silent_pending; /* a member that has not acted is still within its act deadline */
  int any_succeeded;
  const bagua__rdzv_failure_t *root; /* the round's earliest failure, or NULL */
  char why[256];
} rules_in_t;

/* A rule's verdict: it does not apply (the next one is asked); it applies and holds (the
 * decision says what to wait for, or a terminal status); or a round with its reason goes out. */
typedef enum { RULE_NO = 0, RULE_HOLD, RULE_GO } rule_verdict_t;

/* Every new round needs MIN nodes; below, the rendezvous timer runs. */
static rule_verdict_t enough(rules_in_t *in, bagua__lead_decision_t *d) {
  if (in->pk->n >= in->p->nnodes_min) return RULE_GO;
  below_min(in->p, in->st, in->pk->n, in->now, d);
  return RULE_HOLD;
}

/* What the settle window has seen: changes in how many left, joined or asked for a rebuild. */
static int64_t change_sig(const rules_in_t *in) {
  return ((int64_t)in->departed << 42) ^ ((int64_t)in->joiners << 21) ^ (int64_t)in->x->s->nrebuild;
}

/*
 * The settle window batches changes that arrive close together into one round. It closes
 * settle_ms after the latest change it saw, not after the first: agents that a launcher starts
 * together register over a spread that grows with their number and the host's load, and a
 * window fixed from the first one would cut the batch into two rounds (two restarts of every
 * worker). The cap bounds how long a stream of changes can hold a round back.
 */
static rule_verdict_t settled(rules_in_t *in, bagua__lead_decision_t *d) {
  bagua__leader_state_t *st = in->st;
  int64_t sig = change_sig(in);
  if (!st->settle_at) {
    st->settle_first = in->now;
    st->settle_sig = sig;
    st->settle_at = in->now + in->p->settle_ms;
  } else if (sig != st->settle_sig) {
    int64_t cap = st->settle_first + (int64_t)BAGUA__LEADER_SETTLE_CAP * in->p->settle_ms;
    int64_t at = in->now + in->p->settle_ms;
    st->settle_sig = sig;
    if (at > cap) at = cap;
    if (at > st->settle_at) st->settle_at = at;
  }
  if (in->now >= st->settle_at) return RULE_GO;
  d->wake_at = st->settle_at;
  return RULE_HOLD;
}

/* A forged round is replaced at once, by the round the registered nodes make; no window
 * applies, since no membership change needs batching. */
static rule_verdict_t rule_invalid(rules_in_t *in, bagua__lead_decision_t *d) {
  if (round_consistent(in->R, in->x, in->why, sizeof(in->why))) return RULE_NO;
  BAGUA_WARN("agent: round %lld is inconsistent with the registered nodes (%s): replacing it",
             (long long)in->R->round, in->why);
  return enough(in, d);
}

/* A worker failed and no member left: every worker restarts, unless the restarts are spent
 * or the failure is permanent. */
static rule_verdict_t rule_failure(rules_in_t *in, bagua__lead_decision_t *d) {
  if (!in->root || in->departed) return RULE_NO;
  bagua__leader_state_t *st = in->st;
  if (!st->failure_seen) st->failure_seen = in->now;
  /* A member that neither reported nor left may be dead with its lease still running:
   * waiting one TTL lets its lease expire, so its death is a membership change. */
  int64_t deadline = st->failure_seen + (int64_t)in->p->lease_ttl_s * 1000 + 1000;
  /* A member that never acted in the round is waited for until its act deadline instead:
   * restarting the round with it would spend a restart and wait for it again. */
  if (!in->all_reported && (in->now < deadline || in->silent_pending)) {
    d->wake_at = in->now < deadline ? deadline : 0;
    return RULE_HOLD;
  }
  /* A program that cannot be executed fails the same way in every round: restarting it
   * would only spend the restarts and the user's time. */
  if (in->R->restart_count >= in->p->max_restarts || in->root->permanent) {
    d->action = BAGUA__LEAD_FAILED;
    d->root = *in->root;
    return RULE_HOLD;
  }
  return enough(in, d);
}

/*
 * An elastic worker asked for a new round: its communication in this round stalled (a peer
 * made no progress for BAGUA_COMM_TIMEOUT_MS) or broke, and no membership change explains
 * it. The round is retried with the members still registered (a stalled node is not
 * dropped: its lease is the judge of whether it lives), after the settle window that also
 * collects the other workers' requests; each worker, the stalled one once it resumes, moves
 * to it. A stall that never ends is bounded by the workers' own timeouts (the bootstrap of
 * the new round fails, the worker exits, and that is a worker failure).
 */
static rule_verdict_t rule_stall(rules_in_t *in, bagua__lead_decision_t *d) {
  if (in->x->s->nrebuild == 0 || in->departed || in->joiners || in->any_succeeded) return RULE_NO;
  rule_verdict_t v = enough(in, d);
  return v == RULE_GO ? settled(in, d) : v;
}

/* Nodes joined or left: a new round after the settle window. */
static rule_verdict_t rule_membership(rules_in_t *in, bagua__lead_decision_t *d) {
  if (!in->departed && !in->joiners) return RULE_NO;
  rule_verdict_t v = enough(in, d);
  if (v != RULE_GO) return v;
  in->st->below_min_since = 0;
  return settled(in, d);
}

/* In priority order: the first rule that applies decides. Whether a round of a reason keeps
 * in-process workers or spends a restart is the reason's row (common/rdzv/reason.c). */
static const struct {
  bagua__round_reason_t reason;
  rule_verdict_t (*judge)(rules_in_t *in, bagua__lead_decision_t *d);
} RULES[] = {
    {BAGUA__ROUND_INVALID, rule_invalid},
    {BAGUA__ROUND_FAILURE, rule_failure},
    {BAGUA__ROUND_STALL, rule_stall},
    {BAGUA__ROUND_MEMBERSHIP, rule_membership},
};

static int decide(const bagua__leader_params_t *p, bagua__leader_state_t *st,
                  const bagua__agent_index_t *x, int64_t now, int64_t wall,
                  bagua__lead_decision_t *d) {
  const bagua__agent_snap_t *s = x->s;
  if (s->has_status && s->status.state != BAGUA__JOB_RUNNING) return 0;
  const bagua__rdzv_round_t *R = s->has_round ? &s->round : NULL;
  int64_t number = R ? R->round : 0;
  if (st->round_seen != number) {
    /* A new round settles every change seen so far: restart the windows. */
    st->round_seen = number;
    st->settle_at = 0;
    st->last_call_at = 0;
    st->failure_seen = 0;
    st->finish_seen = 0;
    st->below_min_since = 0;
  }
  /* The leader clock advances only while decisions come at the loop's pace: a long gap is
   * time the leader could not read etcd (an outage), in which no agent could acknowledge. */
  if (st->clock_on) {
    int64_t dt = now - st->clock_at;
    if (dt > 0) st->clock += dt < BAGUA__LEADER_CLOCK_STEP_MS ? dt : BAGUA__LEADER_CLOCK_STEP_MS;
  }
  st->clock_on = 1;
  st->clock_at = now;
  /* A round from before a stale-state reset, or none: form the first one. */
  if (!R) return decide_initial(p, st, x, now, wall, d);

  int64_t ack_wake = 0;
  int silent_pending = 0;
  if (p->ack_timeout_ms > 0 && check_acts(p, st, x, R, now, d, &ack_wake, &silent_pending) != 0) {
    BAGUA_WARN("agent: out of memory checking the members of round %lld", (long long)number);
    bagua__lead_decision_clear(d);
    d->action = BAGUA__LEAD_NONE;
    d->wake_at = now + 100;
    return -1;
  }

  int all_succeeded = 1, all_reported = 1, any_succeeded = 0, departed = 0, active = 0;
  int kept_succeeded = 0, kept_failed = 0;
  for (int i = 0; i < R->nmembers; i++) {
    const bagua__rdzv_member_t *m = &R->members[i];
    const bagua__rdzv_done_t *dn = bagua__agent_index_done(x, m->id);
    const bagua__rdzv_node_t *node = bagua__agent_index_node(x, m->id);
    /* Dropped for not acting: its workers never ran (no agent took the round), so it owes no
     * report; it has left the round, whether or not its registration is gone yet. */
    if (banned(st, m->id, m->rev)) {
      departed++;
      continue;
    }
    active++;
    if (!dn) all_reported = 0;
    if (!dn || dn->state != BAGUA__DONE_SUCCEEDED) all_succeeded = 0;
    if (dn && dn->kept) kept_succeeded |= dn->state == BAGUA__DONE_SUCCEEDED;
    if (dn && dn->kept) kept_failed |= dn->state == BAGUA__DONE_FAILED;
    if (dn && dn->state == BAGUA__DONE_SUCCEEDED) {
      any_succeeded = 1;
      continue; /* a member that finished may leave without disturbing the others */
    }
    /* Gone, or registered again (its lease was lost): either way its workers are gone. */
    if (!node || (m->rev && node->create_rev != m->rev)) departed++;
  }
  if (all_succeeded && active > 0) {
    d->action = BAGUA__LEAD_SUCCEEDED;
    return 0;
  }
  /*
   * In-process elastic training finished on a node that kept its workers through this round's
   * membership change: all ranks of a data-parallel job end at the same step, so training is
   * over. A node that started workers for this round and has not reported may be a newcomer
   * that arrived during the last steps and now waits for peers that already finished (its
   * bootstrap would only end at the connect timeout, and then as a failure). It gets one lease
   * TTL to report; after that, or when it reports a failure, the job succeeds without it.
   */
  if (kept_succeeded && !kept_failed) {
    if (!st->finish_seen) st->finish_seen = now;
    int64_t deadline = st->finish_seen + (int64_t)p->lease_ttl_s * 1000 + 1000;
    if (all_reported || now >= deadline) {
      d->action = BAGUA__LEAD_SUCCEEDED;
      return 0;
    }
    d->wake_at = deadline;
    return 0;
  }

  /* Once any member succeeded the job is finishing: newcomers wait as spares. */
  pick_t pk;
  if (desired_members(p, st, x, R, !any_succeeded, &pk) != 0) return -1;
  int rc = 0;

  rules_in_t in = {p,
                   st,
                   x,
                   R,
                   &pk,
                   now,
                   departed,
                   0,
                   all_reported,
                   silent_pending,
                   any_succeeded,
                   root_cause(s),
                   ""};
  for (int i = 0; i < pk.n; i++)
    if (!in_round(x, R, pk.v[i]->id)) in.joiners++;
  /* The first rule that applies decides; the table's order is the priority. */
  for (size_t k = 0; k < sizeof(RULES) / sizeof(RULES[0]); k++) {
    rule_verdict_t v = RULES[k].judge(&in, d);
    if (v == RULE_NO) continue;
    if (v == RULE_GO) {
      bagua__round_reason_t why = RULES[k].reason;
      /* The previous members kept are the picked ones that are not joining. */
      rc = build_round(p, &pk, number + 1,
                       R->restart_count + bagua__round_reason_counts_restart(why), why,
                       R->nmembers - (pk.n - in.joiners), wall, &d->round);
      if (rc == 0) d->action = BAGUA__LEAD_PUBLISH;
    }
    goto out;
  }
  st->settle_at = 0;
  st->below_min_since = 0;
out:
  free(pk.v);
  if (d->action == BAGUA__LEAD_NONE && ack_wake && (!d->wake_at || ack_wake < d->wake_at))
    d->wake_at = ack_wake;
  if (rc != 0) {
    BAGUA_WARN("agent: out of memory forming round %lld", (long long)number + 1);
    d->action = BAGUA__LEAD_NONE;
    d->wake_at = now + 100;
  }
  return rc;
}

int bagua__leader_decide(const bagua__leader_params_t *p, bagua__leader_state_t *st,
                         const bagua__agent_snap_t *s, int64_t now, int64_t wall,
                         bagua__lead_decision_t *d) {
  memset(d, 0, sizeof(*d));
  bagua__agent_index_t x;
  if (bagua__agent_index_build(&x, s) != 0) {
    BAGUA_WARN("agent: out of memory indexing %zu node records", s->nnodes);
    d->wake_at = now + 100;
    return -1;
  }
  int rc = decide(p, st, &x, now, wall, d);
  bagua__agent_index_clear(&x);
  return rc;
}
