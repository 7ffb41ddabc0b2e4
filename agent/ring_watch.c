/*
 * Carrying out the liveness ring (ring.h): the records of the members this node watches, the
 * connections to them, and the revocation of a dead one's lease.
 *
 * The watched set comes with each new round (this node's assignment names its successors) and
 * their records are read only when it changed (one request for all of them), so a round that
 * leaves this node's neighbourhood alone costs this node nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/time.h"

/* Retry delay of a read of the watched records that failed. */
#define FETCH_RETRY_MS 500

/* Reads the watched members' node records in one request and makes them the liveness peers.
 * A record that is gone, or of another registration than the round names, is left out: that
 * member has left, and the next round will say so. */
static int fetch(bagua__agent_t *a) {
  bagua__agent_ring_t *g = &a->ring;
  char keys[BAGUA__RING_WATCH][BAGUA_RDZV_KEY_MAX];
  bagua__etcd_read_t rd[BAGUA__RING_WATCH];
  memset(rd, 0, sizeof(rd));
  for (int i = 0; i < g->n; i++) {
    bagua__agent_key(a, keys[i], sizeof(keys[i]), BAGUA__RDZV_KEY_NODE, 0, g->w[i].id);
    rd[i].span.key = keys[i];
  }
  g->npeers = 0;
  if (g->n == 0) return 0;
  if (bagua__etcd_read_ranges(a->etcd, rd, (size_t)g->n, NULL) != BAGUA_OK) return -1;
  for (int i = 0; i < g->n; i++) {
    if (rd[i].n != 1) continue;
    const bagua__etcd_kv_t *kv = &rd[i].kvs[0];
    bagua__rdzv_node_t node;
    memset(&node, 0, sizeof(node));
    if ((g->w[i].rev && kv->create_revision != g->w[i].rev) || kv->lease == 0 ||
        bagua__rdzv_node_decode(kv->value, &node, NULL, 0) != 0 || node.live_port <= 0)
      continue;
    bagua__live_peer_t *p = &g->peers[g->npeers++];
    snprintf(p->id, sizeof(p->id), "%s", g->w[i].id);
    snprintf(p->addr, sizeof(p->addr), "%s", node.addr);
    p->port = node.live_port;
    p->lease = kv->lease;
  }
  bagua__etcd_reads_clear(rd, (size_t)g->n);
  return 0;
}

void bagua__agent_ring_follow(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  bagua__agent_ring_t *g = &a->ring;
  int64_t now = bagua__now_ms();
  if (!a->live) return;
  const bagua__rdzv_assign_t *P = &s->place;
  if (s->has_place && (P->round != g->round || P->time_ms != g->round_time)) {
    /* A spare (index -1) watches nobody; the leader's assignment names the successors. */
    int n = P->index < 0 ? 0 : P->nwatch < BAGUA__RING_WATCH ? P->nwatch : BAGUA__RING_WATCH;
    int same = n == g->n;
    for (int i = 0; i < n && same; i++)
      same = strcmp(g->w[i].id, P->watch[i].id) == 0 && g->w[i].rev == P->watch[i].rev;
    g->round = P->round;
    g->round_time = P->time_ms;
    if (!same) {
      g->n = n;
      for (int i = 0; i < n; i++) {
        snprintf(g->w[i].id, sizeof(g->w[i].id), "%s", P->watch[i].id);
        g->w[i].rev = P->watch[i].rev;
        g->w[i].dead = 0;
      }
      g->fetched = 0;
      g->retry_at = 0;
    }
  }
  if (!g->fetched && now >= g->retry_at) {
    if (fetch(a) == 0) {
      g->fetched = 1;
      g->fetches++;
    } else {
      g->retry_at = now + FETCH_RETRY_MS;
    }
  }
  bagua__liveness_update(a->live, g->peers, g->fetched ? (size_t)g->npeers : 0, now);
}

static int revoke(bagua__agent_t *a, const char *id, int64_t lease) {
  bagua_status_t st = bagua__etcd_lease_revoke(a->etcd, lease);
  a->ring.revokes++;
  if (st != BAGUA_OK)
    BAGUA_WARN("agent: cannot revoke node %s's lease %lld: %s (it expires by itself)", id,
               (long long)lease, bagua_strerror(st));
  return st == BAGUA_OK;
}

/* Whether the dead registration (id, rev), found dead in round `round`, may still be in the
 * current round: the round has not changed, or this node still watches it. (A node knows its
 * own place in the round, not the whole membership.) */
static int still_member(const bagua__agent_snap_t *s, const bagua__agent_revoke_t *p) {
  if (!s->has_place || s->place.round == p->round) return 1;
  for (int i = 0; i < s->place.nwatch; i++)
    if (strcmp(s->place.watch[i].id, p->id) == 0 && s->place.watch[i].rev == p->rev) return 1;
  return 0;
}

void bagua__agent_ring_deaths(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  bagua__agent_ring_t *g = &a->ring;
  int64_t now = bagua__now_ms();
  if (!a->live) return;
  size_t n = 0;
  const bagua__liveness_death_t *d = bagua__liveness_deaths(a->live, &n);
  for (size_t i = 0; i < n; i++) {
    int k = 0;
    while (k < g->n && strcmp(g->w[k].id, d[i].id) != 0) k++;
    if (k == g->n || strcmp(d[i].id, a->cfg->node_id) == 0) continue;
    g->w[k].dead = 1;
    int dead[BAGUA__RING_WATCH];
    for (int j = 0; j < g->n; j++) dead[j] = g->w[j].dead;
    if (bagua__ring_revokes_first(k + 1, dead)) {
      bagua__agent_say(
          "node %s's agent closed its liveness connection: revoking its lease %lld (it died)",
          d[i].id, (long long)d[i].lease);
      revoke(a, d[i].id, d[i].lease);
    } else if (g->npending < (int)(sizeof(g->pending) / sizeof(g->pending[0]))) {
      /* A nearer watcher lives and revokes it; this one does only if no round without the
       * dead member comes within the longest settle window (it closes at most
       * BAGUA__LEADER_SETTLE_CAP windows after the first change) and a margin for a leader
       * election. A shorter wait revoked leases twice whenever deaths spread the window. */
      bagua__agent_revoke_t *p = &g->pending[g->npending++];
      snprintf(p->id, sizeof(p->id), "%s", d[i].id);
      p->lease = d[i].lease;
      p->rev = g->w[k].rev;
      p->round = g->round;
      p->due_ms = now + (int64_t)BAGUA__LEADER_SETTLE_CAP * a->cfg->settle_ms + 1500 + 500 * k;
      BAGUA_INFO(BAGUA_SUBSYS_AGENT,
                 "agent: node %s's liveness connection ended; its nearer watcher revokes its "
                 "lease (this node does in %lld ms unless a round without it comes first)",
                 d[i].id, (long long)(p->due_ms - now));
    }
  }
  bagua__liveness_clear_deaths(a->live);
  for (int i = 0; i < g->npending;) {
    bagua__agent_revoke_t *p = &g->pending[i];
    if (!still_member(s, p)) {
      *p = g->pending[--g->npending];
      continue;
    }
    if (now >= p->due_ms) {
      bagua__agent_say("node %s died and is still in round %lld: revoking its lease %lld", p->id,
                       (long long)p->round, (long long)p->lease);
      revoke(a, p->id, p->lease);
      *p = g->pending[--g->npending];
      continue;
    }
    i++;
  }
}

int64_t bagua__agent_ring_next_ms(const bagua__agent_t *a) {
  const bagua__agent_ring_t *g = &a->ring;
  int64_t at = 0;
  if (!g->fetched && g->retry_at) at = g->retry_at;
  for (int i = 0; i < g->npending; i++)
    if (!at || g->pending[i].due_ms < at) at = g->pending[i].due_ms;
  return at;
}
