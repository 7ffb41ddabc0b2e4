/*
 * State shared by the agent's control-loop files: agent.c (loop, signals, job start and end),
 * register.c (lease, node record, leadership), follow.c (rounds to workers, reports), lead.c
 * (carrying out the leader's decisions) and leave.c (leaving the job on a signal).
 *
 * Everything here is touched by the main thread only, except `watch_failed`, which the watch
 * callback sets.
 */
#ifndef BAGUA_AGENT_AGENT_INTERNAL_H
#define BAGUA_AGENT_AGENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "common/etcd/etcd.h"
#include "leader.h"
#include "liveness.h"
#include "metrics.h"
#include "output.h"
#include "progress.h"
#include "schema.h"
#include "workers.h"

typedef struct bagua__agent_s {
  bagua__agent_config_t *cfg;
  int sigfd;                       /* signalfd: SIGCHLD and the signals the agent handles */
  int wake_fd;                     /* eventfd written by the watch callback */
  char prefix[BAGUA_RDZV_KEY_MAX]; /* "/bagua/<job>/" */
  char host[256];
  char bootstrap[1024]; /* "etcd://HOST:PORT[,...]" for workers, "" to leave the env's */
  /* The agent's private directory (marks.h): the workers' elastic marks (auto mode) and
   * progress files (progress.h); "" when neither is used or it could not be made. */
  char mark_dir[512];

  bagua__etcd_t *etcd;
  bagua__etcd_keeper_t *keeper;
  bagua__etcd_watch_t *watch;
  int watch_failed; /* atomic: the watch ended by itself and must be restarted */
  int64_t lease;
  int master_port; /* advertised in the node record */
  int64_t join_ms; /* wall clock of the (latest) registration */

  bagua__outpump_t *out;
  bagua__workers_t ws;

  /* The liveness channel (liveness.h), or NULL when the agent could not listen: then other
   * nodes notice this one's death only when its lease expires. */
  bagua__liveness_t *live;
  struct pollfd *pfd; /* bagua__agent_wait's poll array, grown with the liveness channel */
  size_t pfd_cap;

  /* The round this node's worker state belongs to. */
  int64_t cur_round;
  int member;      /* this node is a member of cur_round */
  int have_report; /* `report` is decided for cur_round */
  int kept;        /* cur_round was adopted in-process: the workers started in an earlier one */
  int reported;    /* ... and written to etcd */
  /* The last round this node acknowledged (follow.c): progress/<node> naming it is written. */
  int64_t acked_round;
  bagua__rdzv_done_t report;

  int is_leader;
  bagua__leader_state_t lead;
  /* The last valid round this agent read (a copy, and its key's mod_revision): what the
   * leader restores the round key from when it finds it corrupt or deleted (lead.c). */
  bagua__rdzv_round_t seen;
  int64_t seen_mod_rev;

  /* The job's secret (64 hex digits and a NUL; "" until known): read from etcd, or from
   * --secret-file, before any worker starts; the workers get it as BAGUA_JOB_SECRET and the
   * agent's own authenticated connections (liveness) use it. */
  char secret[BAGUA_RDZV_SECRET_HEX + 1];
  int secret_used; /* workers were started with `secret`: it may not change any more */

  /* Leases of other nodes' records that etcd confirmed alive (agent.c), so that each is asked
   * about once: a record whose lease etcd does not know is never admitted. */
  int64_t *leases_ok;
  size_t nleases_ok, leases_cap;

  /* Observability: the workers' progress (progress.h), the metrics endpoint (metrics.h, NULL
   * when off) and the counters only the agent knows. */
  bagua__agent_progress_t prog;
  bagua__metrics_t *metrics;
  int64_t metrics_at; /* monotonic ms of the last text handed to the endpoint */
  uint64_t exits[3];  /* worker exits: succeeded, failed, stopped by the agent */
  uint64_t rounds_seen;

  int term_sig;    /* first SIGINT/SIGTERM/SIGHUP/SIGQUIT received, 0 if none */
  int term_again;  /* another one since: skip the grace period */
  int64_t wake_at; /* monotonic ms the loop must look again (leader timers), 0: none */
} bagua__agent_t;

/* agent.c: waits up to `timeout_ms` for a signal, a watch event or a worker exit. */
int bagua__agent_wait(void *agent, int timeout_ms);
/* agent.c: stops the workers with `sig` and the configured grace period. */
void bagua__agent_stop_workers(bagua__agent_t *a, int sig);

/* register.c */
int bagua__agent_pick_port(void);
void bagua__agent_detect_addr(bagua__agent_t *a);
/* Grants a lease, writes nodes/<id> and starts the keeper. Returns 0, 2 (the id is used by
 * another live agent) or 3 (etcd unreachable / interrupted: a->term_sig is set then). */
int bagua__agent_register(bagua__agent_t *a);
/* Keeps the registration valid against `s`: re-puts a vanished node key, re-registers when the
 * lease is lost. Returns 0, or an exit status. */
int bagua__agent_check_registration(bagua__agent_t *a, const bagua__agent_snap_t *s);
/* Updates the node record (new master port) under the current lease. */
void bagua__agent_refresh_record(bagua__agent_t *a);
/* Campaigns for leadership when the leader key is free; updates a->is_leader. */
void bagua__agent_check_leadership(bagua__agent_t *a, const bagua__agent_snap_t *s);
/* Stops the keeper and revokes the lease (deleting nodes/<id> and a held leader key). */
void bagua__agent_deregister(bagua__agent_t *a);
/* Revokes the leases of the nodes the liveness channel found dead that `s` (read after they
 * were found) still shows under the same registration; forgets the found deaths. */
void bagua__agent_revoke_dead(bagua__agent_t *a, const bagua__agent_snap_t *s);

/* follow.c: applies the snapshot's round to this node's workers and reports their end. */
void bagua__agent_follow(bagua__agent_t *a, const bagua__agent_snap_t *s);
/*
 * follow.c: 1 when this node's running workers follow rounds by themselves: always in
 * in-process mode, never in restart mode, and in auto mode when every running worker has
 * created its elastic mark. Otherwise 0, with the reason in `why` (auto mode only; "" else).
 */
int bagua__agent_workers_elastic(const bagua__agent_t *a, char *why, size_t len);

/* leave.c: SIGINT/SIGTERM/SIGHUP/SIGQUIT: leaves the job; returns the exit status. */
int bagua__agent_leave(bagua__agent_t *a);

/* lead.c: the leader's step for this snapshot. */
void bagua__agent_lead(bagua__agent_t *a, const bagua__agent_snap_t *s);

/* register.c: the job's key of `kind` (common/rdzv's key rule) into buf; `round` and `name`
 * as bagua__rdzv_key takes them. */
void bagua__agent_key(const bagua__agent_t *a, char *buf, size_t len, bagua__rdzv_key_kind_t kind,
                      int64_t round, const char *name);

#endif
