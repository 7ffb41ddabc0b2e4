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
  const char *self; /* the leader's node id, recorded in rounds it publishes */
} bagua__leader_params_t;

/* Timers of one leadership term; zero-initialise when leadership is (re)gained. */
typedef struct {
  int64_t round_seen;      /* round number the timers below belong to */
  int64_t last_call_at;    /* monotonic ms the last-call window closes (0: not open) */
  int64_t settle_at;       /* monotonic ms the settle window closes (0: not open) */
  int64_t below_min_since; /* monotonic ms since fewer than MIN nodes (0: not below) */
  int64_t failure_seen;    /* monotonic ms the current round's first failure was seen */
  int64_t finish_seen;     /* monotonic ms a kept member first reported success */
} bagua__leader_state_t;

typedef enum {
  BAGUA__LEAD_NONE = 0,   /* nothing to write now */
  BAGUA__LEAD_PUBLISH,    /* write `round` (cas on the snapshot's round mod_revision) */
  BAGUA__LEAD_SUCCEEDED,  /* write status succeeded */
  BAGUA__LEAD_FAILED,     /* write status failed with root cause `root` */
  BAGUA__LEAD_RDZV_FAILED /* write status failed with `message` (agents exit 3) */
} bagua__lead_action_t;

typedef struct {
  bagua__lead_action_t action;
  bagua__rdzv_round_t round; /* PUBLISH: the new round; free with bagua__agent_round_clear */
  bagua__rdzv_failure_t root;
  char message[512];
  int64_t wake_at; /* monotonic ms to decide again even without news (0: no timer) */
} bagua__lead_decision_t;

/*
 * Decides the leader's next step. `now_ms` is monotonic; `wall_ms` stamps published rounds.
 * Returns 0, or -1 when out of memory (the decision is then NONE with a retry timer).
 */
int bagua__leader_decide(const bagua__leader_params_t *p, bagua__leader_state_t *st,
                         const bagua__agent_snap_t *s, int64_t now_ms, int64_t wall_ms,
                         bagua__lead_decision_t *d);

#endif
