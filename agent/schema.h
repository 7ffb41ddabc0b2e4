/*
 * The agent's etcd records (docs/agent.md, "etcd schema"): their C form, their JSON encoding,
 * and the snapshot of a job's whole key space that the agent's loop decides from.
 *
 * Every key lives under /bagua/<job_id>/. Encoders return a malloc'ed NUL-terminated JSON
 * string (NULL when out of memory); decoders return 0, or -1 for a value that is not the JSON
 * the agent writes (a foreign or corrupt value, which the caller skips with a warning).
 */
#ifndef BAGUA_AGENT_SCHEMA_H
#define BAGUA_AGENT_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "common/etcd/etcd.h"

/* nodes/<node_id>: one per live agent, on the agent's lease. */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  char host[256];
  char addr[256];
  char tag[128];
  char version[32];
  int nproc;
  int pid;
  int master_port;
  /* The agent's liveness port (agent/liveness.h); 0 when the record has none (an older agent,
   * or one that could not listen), and then nobody watches the node but its lease. */
  int live_port;
  int64_t join_ms;
  /* From etcd, not the JSON: registration order and the owning lease. */
  int64_t create_rev;
  int64_t lease;
} bagua__agent_node_t;

/* One member of a round. */
typedef struct {
  char id[BAGUA_AGENT_ID_MAX];
  int nproc;
  int64_t rev; /* create_revision of the member's node key when the round was formed */
} bagua__agent_member_t;

/* round: the current rendezvous round, written only by the leader. */
typedef struct {
  int64_t round; /* 1, 2, ...; 0 means none */
  bagua__agent_member_t *members;
  int nmembers;
  int world_size;
  char master_addr[256];
  int master_port;
  int restart_count;
  char reason[16]; /* "initial", "membership" or "failure" */
  char leader[BAGUA_AGENT_ID_MAX];
  int64_t time_ms;
} bagua__agent_round_t;

/* The state one member reports for its workers in rounds/<N>/done/<node>. */
typedef enum {
  BAGUA__DONE_SUCCEEDED = 0, /* every local worker exited 0 */
  BAGUA__DONE_FAILED = 1,    /* a local worker failed: the fields below describe the first */
  BAGUA__DONE_STOPPED = 2    /* stopped because another node's worker failed */
} bagua__done_state_t;

/* A worker failure, as reported in done records and the job status's root cause. */
typedef struct {
  char node[BAGUA_AGENT_ID_MAX];
  char host[256];
  int64_t time_ms; /* wall clock when the agent reaped it */
  int64_t round;
  int rank, local_rank, pid;
  int exit_code; /* valid when signal == 0 */
  int signal;    /* terminating signal, 0 for a normal exit */
} bagua__agent_failure_t;

typedef struct {
  bagua__done_state_t state;
  bagua__agent_failure_t f; /* FAILED only (node is always set) */
  /* The node's workers were started in an earlier round and kept through this one's
   * membership change (in-process elasticity): JSON "kept": true. */
  int kept;
} bagua__agent_done_t;

typedef enum {
  BAGUA__JOB_RUNNING = 0,
  BAGUA__JOB_SUCCEEDED,
  BAGUA__JOB_FAILED,
  BAGUA__JOB_CLOSED
} bagua__job_state_t;

/* status: the job's state; terminal states are written once and never changed. */
typedef struct {
  bagua__job_state_t state;
  int64_t time_ms;
  int64_t round;
  int exit_code;     /* what every agent exits with once the state is terminal */
  int has_root;      /* FAILED because of a worker: root cause below */
  char message[512]; /* human-readable reason (rendezvous failures, closing) */
  bagua__agent_failure_t root;
} bagua__agent_status_t;

/* config: the job-wide settings the first agent fixed; later agents must agree. */
typedef struct {
  int nnodes_min, nnodes_max, max_restarts;
  char node[BAGUA_AGENT_ID_MAX]; /* who wrote it */
} bagua__agent_jobcfg_t;

char *bagua__agent_node_encode(const bagua__agent_node_t *n);
int bagua__agent_node_decode(const char *json, bagua__agent_node_t *n);

char *bagua__agent_round_encode(const bagua__agent_round_t *r);
int bagua__agent_round_decode(const char *json, bagua__agent_round_t *r);
void bagua__agent_round_clear(bagua__agent_round_t *r);
/* Deep copy; returns 0 or -1 (out of memory, dst left cleared). */
int bagua__agent_round_copy(bagua__agent_round_t *dst, const bagua__agent_round_t *src);
/* Index of `node` in the round's members, or -1. */
int bagua__agent_round_find(const bagua__agent_round_t *r, const char *node);

char *bagua__agent_done_encode(const bagua__agent_done_t *d);
int bagua__agent_done_decode(const char *json, bagua__agent_done_t *d);

char *bagua__agent_status_encode(const bagua__agent_status_t *s);
int bagua__agent_status_decode(const char *json, bagua__agent_status_t *s);
const char *bagua__agent_job_state_name(bagua__job_state_t st);
/* One line describing a failure, e.g. "rank 3 (node n2, host h, local rank 1, pid 77) exited
 * with code 7" or "... was killed by signal 9 (Killed)". */
void bagua__agent_failure_describe(const bagua__agent_failure_t *f, char *out, size_t len);
/* The exit status an agent reports for a failure: its code, or 128 + signal. */
int bagua__agent_failure_exit_code(const bagua__agent_failure_t *f);

char *bagua__agent_jobcfg_encode(const bagua__agent_jobcfg_t *c);
int bagua__agent_jobcfg_decode(const char *json, bagua__agent_jobcfg_t *c);

/* ---------------------------------------------------------------------------------------- */
/* Snapshot of /bagua/<job>/ read at one revision                                            */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
  char node[BAGUA_AGENT_ID_MAX];
  bagua__agent_done_t done;
} bagua__agent_done_entry_t;

typedef struct {
  int64_t revision;
  bagua__agent_node_t *nodes; /* live registrations, oldest (lowest create_rev) first */
  size_t nnodes;

  int has_leader;
  char leader[BAGUA_AGENT_ID_MAX];
  int64_t leader_lease;

  int has_round;
  bagua__agent_round_t round;
  int64_t round_mod_rev;

  int has_status;
  bagua__agent_status_t status;
  int64_t status_mod_rev;

  int has_jobcfg;
  bagua__agent_jobcfg_t jobcfg;

  /* rounds/<round.round>/done/<node> records of the current round. */
  bagua__agent_done_entry_t *done;
  size_t ndone;

  /* Distinct round numbers that still have keys under rounds/ (for clean-up). */
  int64_t *old_rounds;
  size_t nold_rounds;
} bagua__agent_snap_t;

/*
 * Reads every key under `prefix` ("/bagua/<job>/") in one range request and parses it.
 * Values that do not parse are skipped with a warning. Free with bagua__agent_snap_clear.
 */
bagua_status_t bagua__agent_snap_read(bagua__etcd_t *c, const char *prefix, bagua__agent_snap_t *s);
/* Parses an already-read key list (used by bagua__agent_snap_read and by unit tests). */
int bagua__agent_snap_parse(const char *prefix, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__agent_snap_t *s);
void bagua__agent_snap_clear(bagua__agent_snap_t *s);
/* The live node record with this id, or NULL. */
const bagua__agent_node_t *bagua__agent_snap_node(const bagua__agent_snap_t *s, const char *id);
/* The done record of `node` in the current round, or NULL. */
const bagua__agent_done_t *bagua__agent_snap_done(const bagua__agent_snap_t *s, const char *node);

#endif
