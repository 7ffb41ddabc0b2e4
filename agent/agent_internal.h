/*
 * State shared by the agent's control-loop files: agent.c (loop, job start and end), wait.c
 * (waiting for signals, events and worker exits), register.c (lease, node record,
 * leadership), follow.c (rounds to workers, reports), lead.c (carrying out the leader's
 * decisions), ring_watch.c (the liveness ring) and leave.c (leaving the job on a signal).
 *
 * Everything here is touched by the main thread only (the mirror's watch thread only queues
 * events inside the mirror).
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
#include "mirror.h"
#include "output.h"
#include "progress.h"
#include "ring.h"
#include "schema.h"
#include "workers.h"

/* A member of the liveness ring this node watches (ring.h). */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  int64_t rev; /* the registration the round names */
  int dead;    /* its confirmed liveness connection ended */
} bagua__agent_watched_t;

/* A dead member's lease this node revokes at `due_ms` unless a round without it comes first. */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  int64_t lease, rev, due_ms;
  int64_t round; /* the round it was found dead in */
} bagua__agent_revoke_t;

typedef struct {
  int64_t round, round_time; /* the round (number, time) the watched set comes from */
  int n;
  bagua__agent_watched_t w[BAGUA__RING_WATCH];
  bagua__live_peer_t peers[BAGUA__RING_WATCH]; /* their records, once fetched */
  int npeers;
  int fetched;      /* peers hold the records of w */
  int64_t retry_at; /* when to read them again after a failed read (0: now) */
  bagua__agent_revoke_t pending[2 * BAGUA__RING_WATCH];
  int npending;
  uint64_t fetches, revokes; /* for the metrics endpoint */
} bagua__agent_ring_t;

/* The leader key's owner as this follower checked it (register.c): the record of the node the
 * leader key names, read once per value of the key. */
typedef struct {
  int64_t leader_mod_rev; /* the leader key's revision checked (0: none) */
  int present;            /* the named node is registered */
  int64_t lease;          /* on this lease */
  /* The revision waiting for its check, and when the check is due (ring.h's tier wait). */
  int64_t due_rev, due_ms;
  /* Since when the leader key has been vacant (monotonic ms; 0: held), and when this node's
   * campaign is due (0: none pending): ring.h's tier wait, so the first members campaign. */
  int64_t vacant_since, campaign_at;
} bagua__agent_leader_check_t;

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
  /* The keys this agent follows (mirror.h): the job's whole prefix while it leads
   * (mirror_full), else the job's own keys and this node's. */
  bagua__mirror_t *mirror;
  int mirror_full;
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
  /* This node has been a member of a round (started workers for it): from then on the job runs
   * with it, and another agent refused its node id is only warned about (register.c). */
  int joined;
  /* The clash/<node> record (its mod_revision) already acted on, so each is said once. */
  int64_t clash_rev;
  bagua__rdzv_done_t report;

  int is_leader;
  bagua__leader_state_t lead;
  /* The last valid round this agent read while leading (a copy, and its key's mod_revision):
   * what the leader restores the round key from when it finds it corrupt or deleted (lead.c). */
  bagua__rdzv_round_t seen;
  int64_t seen_mod_rev;
  /* This node's place in the latest round it saw (its assignment), for progress and metrics. */
  bagua__rdzv_assign_t place;

  /* The job's secret (64 hex digits and a NUL; "" until known): read from etcd, or from
   * --secret-file, before any worker starts; the workers get it as BAGUA_JOB_SECRET and the
   * agent's own authenticated connections (liveness) use it. */
  char secret[BAGUA_RDZV_SECRET_HEX + 1];
  int secret_used; /* workers were started with `secret`: it may not change any more */

  bagua__agent_ring_t ring;
  bagua__agent_leader_check_t leader_check;

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

/* wait.c: waits up to `timeout_ms` (-1: no bound) for a signal, a watch event, a liveness
 * event or a worker exit. Returns 1 when a second terminating signal came. */
int bagua__agent_wait(void *agent, int timeout_ms);
/* wait.c: stops the workers with `sig` and the configured grace period. */
void bagua__agent_stop_workers(bagua__agent_t *a, int sig);

/* start.c: what the first contact with etcd learns about the job, in one request. */
typedef struct {
  bagua__agent_snap_t s; /* the job's status, nothing else */
  int64_t round_rev;     /* mod revision of the round key (0: none); its value is not read */
  int64_t nodes;         /* registrations */
  int64_t round_keys;    /* keys under rounds/ */
} bagua__agent_probe_t;
void bagua__agent_probe_clear(bagua__agent_probe_t *p);
/* Probes the job, retrying while etcd is unreachable up to --rdzv-timeout. Returns -1 to go
 * on, or an exit status. */
int bagua__agent_first_contact(bagua__agent_t *a, bagua__agent_probe_t *p);
/* State of an earlier run under the job id: exits with the job's result when it is ending,
 * clears it when no agent is registered. Returns -1 to go on, or an exit status. */
int bagua__agent_handle_stale(bagua__agent_t *a, bagua__agent_probe_t *p);
/* The settings that must agree across the job's agents. Returns -1 or an exit status. */
int bagua__agent_check_jobcfg(bagua__agent_t *a);
/* The exit status for a terminal job status, and the line that says how the job ended. */
int bagua__agent_job_exit_code(const bagua__rdzv_status_t *st);
void bagua__agent_describe_end(const bagua__agent_t *a, const bagua__rdzv_status_t *st,
                               const char *how);
/* 128 + sig: the exit status of an agent a signal ended. */
int bagua__agent_interrupted_code(int sig);

/* secret.c: the job secret before any worker starts (-1 to go on, or an exit status), and
 * keeping it the job's against the snapshot. */
int bagua__agent_setup_secret(bagua__agent_t *a);
void bagua__agent_check_secret(bagua__agent_t *a, const bagua__agent_snap_t *s);

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
/* Another agent was refused this node's id and said so in clash/<node> (its own lease): before
 * this node has joined a round the agent stops (exit 2: the id is the user's mistake, and the
 * job could only wait for a node that never comes); afterwards it warns once. Returns -1 to go
 * on, or the exit status. */
int bagua__agent_check_clash(bagua__agent_t *a, const bagua__agent_snap_t *s);
/* Campaigns for leadership when the leader key is free; updates a->is_leader. */
void bagua__agent_check_leadership(bagua__agent_t *a, const bagua__agent_snap_t *s);
/* Stops the keeper and revokes the lease (deleting nodes/<id> and a held leader key). */
void bagua__agent_deregister(bagua__agent_t *a);

/* ring_watch.c: follows the round's liveness ring (the watched members' records, the
 * connections), and acts on the deaths the liveness channel found (ring.h's rule). */
void bagua__agent_ring_follow(bagua__agent_t *a, const bagua__agent_snap_t *s);
void bagua__agent_ring_deaths(bagua__agent_t *a, const bagua__agent_snap_t *s);
/* When the ring needs the loop again (a retry, a revocation due), monotonic ms; 0: never. */
int64_t bagua__agent_ring_next_ms(const bagua__agent_t *a);

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

/* assign.c: writes the assign/<node> record of every node registered in `s` whose record does
 * not say its place in round R (`fresh`: R is new, write them all). Returns how many were
 * written, or -1 when out of memory. */
int bagua__agent_sync_assigns(bagua__agent_t *a, const bagua__agent_snap_t *s,
                              const bagua__rdzv_round_t *R, int fresh);

/* lead.c: the leader's step for this snapshot. */
void bagua__agent_lead(bagua__agent_t *a, const bagua__agent_snap_t *s);

/* key.c: the job's key of `kind` (common/rdzv's key rule) into buf; `round` and `name`
 * as bagua__rdzv_key takes them. */
void bagua__agent_key(const bagua__agent_t *a, char *buf, size_t len, bagua__rdzv_key_kind_t kind,
                      int64_t round, const char *name);

#endif
