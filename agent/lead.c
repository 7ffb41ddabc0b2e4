/*
 * Carrying out the leader's decisions (leader.c decides, this file writes).
 *
 * Every write is a compare-and-swap on what the decision was based on: the round key's
 * mod_revision for a new round, the status key's for the job's end. A leader that lost its
 * lease without noticing, racing the new one, therefore cannot overwrite a newer round; the
 * loser simply re-reads and decides again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

static int write_status(bagua__agent_t *a, const bagua__agent_snap_t *s,
                        const bagua__rdzv_status_t *st) {
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_STATUS, 0, NULL);
  char *v = bagua__rdzv_status_encode(st);
  int swapped = 0;
  if (v) bagua__etcd_cas(a->etcd, key, s->status_mod_rev, v, strlen(v), 0, &swapped, NULL, NULL);
  free(v);
  return swapped;
}

/* Deletes rounds/<k>/ for every k <= N - 2: nothing reads them any more. */
static void clean_rounds(bagua__agent_t *a, const bagua__agent_snap_t *s, int64_t n) {
  for (size_t i = 0; i < s->nold_rounds; i++) {
    if (s->old_rounds[i] > n - 2) continue;
    char key[BAGUA_RDZV_KEY_MAX];
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_ROUND_DIR, s->old_rounds[i], NULL);
    if (bagua__etcd_delete_prefix(a->etcd, key, NULL) == BAGUA_OK)
      bagua__mirror_forget_round(a->mirror, s->old_rounds[i]);
  }
}

static void publish(bagua__agent_t *a, const bagua__agent_snap_t *s, const bagua__rdzv_round_t *r) {
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_ROUND, 0, NULL);
  char *v = bagua__rdzv_round_encode(r);
  int swapped = 0;
  if (v) bagua__etcd_cas(a->etcd, key, s->round_mod_rev, v, strlen(v), 0, &swapped, NULL, NULL);
  free(v);
  if (!swapped) return;
  /* Every node learns the round from its own assignment (assign.c). */
  bagua__agent_sync_assigns(a, s, r, 1);
  char members[1024] = "";
  size_t off = 0;
  for (int i = 0; i < r->nmembers && off + 2 < sizeof(members); i++)
    off += (size_t)snprintf(members + off, sizeof(members) - off, "%s%s", i ? "," : "",
                            r->members[i].id);
  BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: published round %lld (%s, restart %d): [%s] world %d",
             (long long)r->round, bagua__round_reason_word(r->reason), r->restart_count, members,
             r->world_size);
  if (!s->has_status) {
    bagua__rdzv_status_t st;
    memset(&st, 0, sizeof(st));
    st.state = BAGUA__JOB_RUNNING;
    st.time_ms = r->time_ms;
    st.round = r->round;
    write_status(a, s, &st);
  }
  clean_rounds(a, s, r->round);
}

/*
 * The keys the leader owns (round, status) must hold what the schema accepts: a refused
 * value is never trusted, and left in place it would block every compare-and-swap the leader
 * makes. They are rewritten from the leader's own state: the round from the last valid round
 * this agent saw, the status as running (a terminal status ends every agent, so a leader that
 * is still leading never saw one). A round the leader holds no copy of cannot be restored,
 * and the job fails with that as its root cause. Returns 1 when it wrote (or had to give up):
 * the next snapshot decides further.
 */
static int repair(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  char key[BAGUA_RDZV_KEY_MAX];
  int swapped = 0;
  if (s->round_bad || (!s->has_round && a->seen.round > 0)) {
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_ROUND, 0, NULL);
    if (a->seen.round > 0) {
      char *v = bagua__rdzv_round_encode(&a->seen);
      if (v) bagua__etcd_cas(a->etcd, key, s->round_mod_rev, v, strlen(v), 0, &swapped, NULL, NULL);
      free(v);
      if (swapped)
        bagua__agent_say("%s %s: restored round %lld from the leader's copy", key,
                         s->round_bad ? "held a corrupt value" : "was deleted",
                         (long long)a->seen.round);
      return 1;
    }
    bagua__rdzv_status_t st;
    memset(&st, 0, sizeof(st));
    st.state = BAGUA__JOB_FAILED;
    st.time_ms = bagua__wall_ms();
    st.exit_code = BAGUA_AGENT_EXIT_RDZV;
    snprintf(st.message, sizeof(st.message),
             "etcd key %.160s holds a corrupt value (%.160s) and the leader (node %.64s) has no "
             "copy of the round to restore it from",
             key, s->round_why, a->cfg->node_id);
    bagua__agent_say("%s", st.message);
    write_status(a, s, &st);
    return 1;
  }
  if (s->status_bad) {
    bagua__rdzv_status_t st;
    memset(&st, 0, sizeof(st));
    st.state = BAGUA__JOB_RUNNING;
    st.time_ms = bagua__wall_ms();
    st.round = s->has_round ? s->round.round : 0;
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_STATUS, 0, NULL);
    if (write_status(a, s, &st))
      bagua__agent_say("%s held a corrupt value (%s): rewrote it as running (round %lld)", key,
                       s->status_why, (long long)st.round);
    return 1;
  }
  return 0;
}

/*
 * Ends the registrations the leader dropped for not acting in their round (leader.c). The
 * lease is revoked, as for a node the liveness channel found dead: the record and whatever
 * else is on that lease vanish, a forger must grant a new lease and write a new record to be
 * admitted again (a new registration, watched from its first round), and a real agent whose
 * loop was held up finds its lease gone and registers again as a new node. A lease that
 * another registered node's record is on too (a record written on someone else's lease) is not
 * revoked: only the record is deleted, compare-and-delete on the registration it had.
 */
static void drop_members(bagua__agent_t *a, const bagua__agent_snap_t *s,
                         const bagua__lead_decision_t *d) {
  for (int i = 0; i < d->ndrops; i++) {
    const bagua__lead_drop_t *x = &d->drops[i];
    int shared = x->lease == a->lease;
    for (size_t k = 0; k < s->nnodes && !shared; k++) {
      if (s->nodes[k].lease != x->lease) continue;
      int dropped = 0;
      for (int j = 0; j < d->ndrops && !dropped; j++)
        dropped = strcmp(d->drops[j].id, s->nodes[k].id) == 0;
      shared = !dropped;
    }
    char key[BAGUA_RDZV_KEY_MAX];
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_NODE, 0, x->id);
    bagua_status_t st = BAGUA_OK;
    int done = 0;
    if (!shared) {
      /* etcd's "not found" counts as done: the lease ended meanwhile. */
      st = bagua__etcd_lease_revoke(a->etcd, x->lease);
      done = st == BAGUA_OK;
    } else {
      bagua__etcd_kv_t cur;
      int found = 0;
      memset(&cur, 0, sizeof(cur));
      st = bagua__etcd_get(a->etcd, key, &cur, &found, NULL);
      if (st == BAGUA_OK && found && cur.create_revision == x->rev)
        st = bagua__etcd_cad(a->etcd, key, cur.mod_revision, &done);
      else
        done = st == BAGUA_OK; /* gone, or registered again since */
      bagua__etcd_kv_clear(&cur);
    }
    if (!done) {
      BAGUA_WARN("agent: cannot drop node %s (lease %lld): %s; trying again", x->id,
                 (long long)x->lease, st == BAGUA_OK ? "its record changed" : bagua_strerror(st));
      continue;
    }
    bagua__agent_say(
        "dropped node %s from round %lld: it has not acted in the round (no acknowledgement, no "
        "report of its workers) for %lld ms (deadline %lld ms: BAGUA_RDZV_ACK_TIMEOUT_MS, at "
        "least 2 x --grace-ms + --lease-ttl); %s so that it comes back only as a new "
        "registration",
        x->id, (long long)(s->has_round ? s->round.round : 0), (long long)x->silent_ms,
        (long long)bagua__leader_ack_bound(a->cfg->ack_timeout_ms, a->cfg->grace_ms,
                                           a->cfg->lease_ttl_s),
        shared ? "deleted its record (its lease is another node's)" : "revoked its lease");
  }
}

void bagua__agent_lead(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  const bagua__agent_config_t *cfg = a->cfg;
  if (repair(a, s)) {
    a->wake_at = bagua__now_ms() + 100;
    return;
  }
  bagua__leader_params_t p = {
      .nnodes_min = cfg->nnodes_min,
      .nnodes_max = cfg->nnodes_max,
      .max_restarts = cfg->max_restarts,
      .last_call_ms = cfg->last_call_ms,
      .settle_ms = cfg->settle_ms,
      .rdzv_timeout_s = cfg->rdzv_timeout_s,
      .lease_ttl_s = cfg->lease_ttl_s,
      .ack_timeout_ms =
          bagua__leader_ack_bound(cfg->ack_timeout_ms, cfg->grace_ms, cfg->lease_ttl_s),
      .self = cfg->node_id,
  };
  bagua__lead_decision_t d;
  bagua__leader_decide(&p, &a->lead, s, bagua__now_ms(), bagua__wall_ms(), &d);
  a->wake_at = d.wake_at;
  if (d.ndrops > 0) drop_members(a, s, &d);
  bagua__rdzv_status_t st;
  memset(&st, 0, sizeof(st));
  st.time_ms = bagua__wall_ms();
  st.round = s->has_round ? s->round.round : 0;
  /* Assignments missing or stale (a node registered since, a leader that died before writing
   * them, a value written over one) are written again; a new round writes its own. */
  if (d.action != BAGUA__LEAD_PUBLISH && s->has_round)
    bagua__agent_sync_assigns(a, s, &s->round, 0);
  switch (d.action) {
    case BAGUA__LEAD_NONE:
      break;
    case BAGUA__LEAD_PUBLISH:
      publish(a, s, &d.round);
      break;
    case BAGUA__LEAD_SUCCEEDED:
      st.state = BAGUA__JOB_SUCCEEDED;
      snprintf(st.message, sizeof(st.message), "every worker of round %lld exited 0",
               (long long)st.round);
      write_status(a, s, &st);
      break;
    case BAGUA__LEAD_FAILED:
      st.state = BAGUA__JOB_FAILED;
      st.has_root = 1;
      st.root = d.root;
      st.exit_code = bagua__agent_failure_exit_code(&d.root);
      snprintf(st.message, sizeof(st.message),
               "a worker failed after %d restart(s) (--max-restarts %d)",
               s->has_round ? s->round.restart_count : 0, cfg->max_restarts);
      write_status(a, s, &st);
      break;
    case BAGUA__LEAD_RDZV_FAILED:
      st.state = BAGUA__JOB_FAILED;
      st.exit_code = BAGUA_AGENT_EXIT_RDZV;
      snprintf(st.message, sizeof(st.message), "%s", d.message);
      write_status(a, s, &st);
      break;
  }
  bagua__lead_decision_clear(&d);
}
