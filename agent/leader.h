/*
 * The leader's round logic, as a pure function of a snapshot, the leader's timers and the
 * time: what to write next (a round, a terminal status) and when to look again. Keeping it
 * free of I/O lets tests/agent/test_leader.c cover the corner cases without etcd.
 */
#ifndef BAGUA_AGENT_LEADER_H
#define BAGUA_AGENT_LEADER_H

#include <stdint.h>

#include "schema.h"

typedef struct {
  int nnodes_min, nnodes_max;
  int max_restarts;
  int last_call_ms;
  int settle_ms;
  int rdzv_timeout_s;
  int lease_ttl_s;
  /* How long a member may go without acting in a round (acknowledging it or reporting its
   * end) before it is dropped, in leader time (see bagua__leader_state_t.clock); 0: never.
   * bagua__leader_ack_bound() computes it from the settings. */
  int64_t ack_timeout_ms;
  const char *self; /* the leader's node id, recorded in rounds it publishes */
} bagua__leader_params_t;

/*
 * A registration (node id and create revision) that was a member of a round without acting
 * in it: the leader's memory of how long it has been silent, across rounds, so that a record
 * no agent holds cannot be kept in the job by membership changes that restart the round.
 */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  int64_t rev;           /* create revision of its node key */
  int64_t lease;         /* the lease its record is on */
  int64_t acted_round;   /* the last round it was seen acting in (0: none) */
  int64_t since;         /* leader clock when its current silence began (-1: not silent) */
  int64_t dropped_round; /* the round it was dropped from (0: not dropped) */
  int seen;              /* scratch: still registered in the snapshot being decided */
} bagua__lead_silent_t;

/* Timers of one leadership term; zero-initialise when leadership is (re)gained. */
typedef struct {
  int64_t round_seen;      /* round number the timers below belong to */
  int64_t last_call_at;    /* monotonic ms the last-call window closes (0: not open) */
  int64_t settle_at;       /* monotonic ms the settle window closes (0: not open) */
  int64_t settle_first;    /* monotonic ms the settle window opened */
  int64_t settle_sig;      /* the changes the window has seen (leader.c: change_sig) */
  int64_t below_min_since; /* monotonic ms since fewer than MIN nodes (0: not below) */
  int64_t failure_seen;    /* monotonic ms the current round's first failure was seen */
  int64_t finish_seen;     /* monotonic ms a kept member first reported success */
  /* Leader clock for the act deadline: the monotonic time between consecutive decisions,
   * each gap counted up to BAGUA__LEADER_CLOCK_STEP_MS, so that time in which the leader
   * could not read etcd (and nobody could write an acknowledgement) does not count. */
  int64_t clock;
  int64_t clock_at; /* monotonic ms of the last decision (valid when clock_on) */
  int clock_on;
  /* Members that have not acted in the current round (or were dropped from it); owned:
   * bagua__leader_state_clear(). */
  bagua__lead_silent_t *silent;
  size_t nsilent, silent_cap;
  size_t nsorted; /* silent[0..nsorted) is sorted by (id, rev) (leader.c) */
} bagua__leader_state_t;

/* A settle window that later changes keep extending closes at the latest this many settle
 * windows after it opened, so that a steady trickle of joiners cannot hold a round back. */
#define BAGUA__LEADER_SETTLE_CAP 4

/* The longest gap between two decisions that the leader clock counts in full. The leader's
 * loop decides at least once a second while etcd answers. */
#define BAGUA__LEADER_CLOCK_STEP_MS 2000

/* Frees what the state owns and zeroes it (round_seen becomes -1: nothing seen yet). */
void bagua__leader_state_clear(bagua__leader_state_t *st);

/*
 * The act deadline the leader applies: BAGUA_RDZV_ACK_TIMEOUT_MS (`ack_ms`; 0 turns the rule
 * off), but never less than 2 x grace_ms + the lease TTL. A live agent acknowledges a round on
 * the first pass of its loop that sees it, before it stops or starts a worker, and that pass
 * can be held up by the stop of the previous round's workers (SIGTERM, the grace period,
 * SIGKILL); a stalled agent whose lease then expires leaves by the usual membership change.
 */
int64_t bagua__leader_ack_bound(int64_t ack_ms, int grace_ms, int lease_ttl_s);

/* A member the leader drops for not acting in its round: its registration, and how long it
 * was silent (leader clock). */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  int64_t rev;
  int64_t lease;
  int64_t silent_ms;
} bagua__lead_drop_t;

typedef enum {
  BAGUA__LEAD_NONE = 0,   /* nothing to write now */
  BAGUA__LEAD_PUBLISH,    /* write `round` (cas on the snapshot's round mod_revision) */
  BAGUA__LEAD_SUCCEEDED,  /* write status succeeded */
  BAGUA__LEAD_FAILED,     /* write status failed with root cause `root` */
  BAGUA__LEAD_RDZV_FAILED /* write status failed with `message` (agents exit 3) */
} bagua__lead_action_t;

typedef struct {
  bagua__lead_action_t action;
  bagua__rdzv_round_t round; /* PUBLISH: the new round (bagua__lead_decision_clear) */
  bagua__rdzv_failure_t root;
  char message[512];
  int64_t wake_at; /* monotonic ms to decide again even without news (0: no timer) */
  /* Members to remove before the action, whatever it is: their registrations are ended
   * (lead.c revokes their leases), and the rounds the leader forms leave them out. */
  bagua__lead_drop_t *drops;
  int ndrops;
} bagua__lead_decision_t;

/* Frees what a decision owns (its round and drops). */
void bagua__lead_decision_clear(bagua__lead_decision_t *d);

/*
 * Decides the leader's next step. `now_ms` is monotonic; `wall_ms` stamps published rounds.
 * Returns 0, or -1 when out of memory (the decision is then NONE with a retry timer).
 */
int bagua__leader_decide(const bagua__leader_params_t *p, bagua__leader_state_t *st,
                         const bagua__agent_snap_t *s, int64_t now_ms, int64_t wall_ms,
                         bagua__lead_decision_t *d);

#endif
