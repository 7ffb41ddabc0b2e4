/*
 * The agent's view of the rendezvous schema (common/rdzv/rdzv.h): how a failure reads, and the
 * snapshot of a job's keys at one revision that the agent's loop decides from.
 *
 * Every key lives under /bagua/<job_id>/ (docs/agent.md, "etcd schema"). The snapshot takes
 * only what the schema accepts: a refused value is reported (key and field) and left out, and
 * the snapshot says which of the keys the leader owns (leader, round, status) held a refused
 * value, so that the leader can rewrite them.
 */
#ifndef BAGUA_AGENT_SCHEMA_H
#define BAGUA_AGENT_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "common/etcd/etcd.h"
#include "common/rdzv/rdzv.h"

/* One line describing a failure, e.g. "rank 3 (node n2, host h, local rank 1, pid 77) exited
 * with code 7" or "... was killed by signal 9 (Killed)", followed by ": <message>" when the
 * worker left an error file (torch's @record). */
void bagua__agent_failure_describe(const bagua__rdzv_failure_t *f, char *out, size_t len);
/* The exit status an agent reports for a failure: its code, or 128 + signal. */
int bagua__agent_failure_exit_code(const bagua__rdzv_failure_t *f);

/* ---------------------------------------------------------------------------------------- */
/* Snapshot of the keys of /bagua/<job>/ that an agent follows                               */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
  char node[BAGUA_AGENT_ID_MAX];
  bagua__rdzv_done_t done;
} bagua__agent_done_entry_t;

/* progress/<node>: the round a node's agent last wrote its progress record for, and the lease
 * the record is on. Every agent writes it as soon as it sees a round that names it (follow.c),
 * so it is also the node's acknowledgement of that round (leader.c). */
typedef struct {
  char node[BAGUA_AGENT_ID_MAX];
  int64_t round;
  int64_t lease;
} bagua__agent_ack_t;

/* assign/<node> as the leader's snapshot holds it: enough to tell a stale one. */
typedef struct {
  char node[BAGUA_AGENT_ID_MAX];
  int64_t round;
  int index;
  int64_t rev, time_ms;
  int64_t lease; /* the lease the record is on */
} bagua__agent_assigned_t;

typedef struct {
  int64_t revision;
  /* 1: built from the job's whole key space (the leader's view); 0: from the keys a follower
   * follows (mirror.h): then `nodes`, `acks` and `done` hold at most this node's own records,
   * and the round is known only as this node's place in it. */
  int full;
  /* This node's place in the current round: computed from the round in a full snapshot, read
   * from its assign/<node> record in a follower's. */
  int has_place;
  bagua__rdzv_assign_t place;
  bagua__rdzv_node_t *nodes; /* live registrations, oldest (lowest create_rev) first */
  size_t nnodes;

  /* The leader key exists (has_leader) and names a valid id (leader_valid; whether that
   * node holds it on its own lease is for register.c to judge). */
  int has_leader, leader_valid;
  char leader[BAGUA_AGENT_ID_MAX];
  int64_t leader_lease;
  int64_t leader_mod_rev;

  /* has_X: the key holds a valid record; X_bad: it exists but was refused (X_why says why).
   * X_mod_rev is the key's mod_revision either way (0: absent), for compare-and-swaps. */
  int has_round, round_bad;
  bagua__rdzv_round_t round;
  int64_t round_mod_rev;
  char round_why[160];

  int has_status, status_bad;
  bagua__rdzv_status_t status;
  int64_t status_mod_rev;
  char status_why[160];

  int has_jobcfg;
  bagua__rdzv_jobcfg_t jobcfg;

  /* secret: the job's secret (hex, NUL-terminated) when has_secret; secret_mod_rev is the
   * key's mod_revision, valid value or not (0: absent). */
  int has_secret;
  int64_t secret_mod_rev;
  char secret[BAGUA_RDZV_SECRET_HEX + 1];

  /* rounds/<round.round>/rebuild/<rank>: elastic workers of the current round that asked for
   * a new one (their communication stalled or broke); the first such request is kept. */
  int nrebuild;
  bagua__rdzv_rebuild_t rebuild;

  /* failure: the first failure some member reported in a round (the round is in
   * failure.f.round); every member follows this one key instead of every done record. */
  int has_failure;
  bagua__rdzv_done_t failure;

  /* rounds/<round.round>/done/<node> records of the current round. */
  bagua__agent_done_entry_t *done;
  size_t ndone;

  /* progress/<node> records that the schema accepts (any round). */
  bagua__agent_ack_t *acks;
  size_t nacks;

  /* Distinct round numbers that still have keys under rounds/ (for clean-up). */
  int64_t *old_rounds;
  size_t nold_rounds;

  /* clash/<self>: another agent was refused this node's id (rdzv.h); clash_mod_rev is the
   * key's mod_revision (0: absent or refused). Only this node's own record is taken. */
  int has_clash;
  bagua__rdzv_clash_t clash;
  int64_t clash_mod_rev;

  /* Full snapshots: the assign/<node> records that the schema accepts. */
  bagua__agent_assigned_t *assigned;
  size_t nassigned;
} bagua__agent_snap_t;

/*
 * What the schema made of one key, kept with the key in the agent's copy of etcd (mirror.h)
 * so that a record is decoded once per revision, not once per decision: at a thousand nodes
 * the leader's decision then copies records instead of parsing a thousand JSON objects.
 */
typedef struct bagua__agent_rec bagua__agent_rec_t;
/* One key of the copy and its decoded form (NULL until first decoded; owned). */
typedef struct {
  bagua__etcd_kv_t kv;
  bagua__agent_rec_t *rec;
} bagua__agent_entry_t;
void bagua__agent_rec_free(bagua__agent_rec_t *rec);

/*
 * Builds the snapshot of the `n` entries of keys under `prefix` ("/bagua/<job>/"), decoding
 * (and caching in the entries) what was not decoded at its current revision. A value that does
 * not parse is reported once and left out. `rounds` lists rounds that hold keys the entries
 * leave out (endpoint records); `full` says whether the entries are the whole prefix; `self` is
 * this node's id (its place in the round, its assignment). Returns 0,
 * or -1 when out of memory (the snapshot is then cleared). Free with bagua__agent_snap_clear.
 */
int bagua__agent_snap_build(const char *prefix, const char *self, bagua__agent_entry_t *e, size_t n,
                            const int64_t *rounds, size_t nrounds, int full,
                            bagua__agent_snap_t *s);
/* Builds a full snapshot of an already-read key list (`self` may be NULL: no place). */
int bagua__agent_snap_parse(const char *prefix, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__agent_snap_t *s);
void bagua__agent_snap_clear(bagua__agent_snap_t *s);
/* The live node record with this id, or NULL. */
const bagua__rdzv_node_t *bagua__agent_snap_node(const bagua__agent_snap_t *s, const char *id);
/* The done record of `node` in the current round, or NULL. */
const bagua__rdzv_done_t *bagua__agent_snap_done(const bagua__agent_snap_t *s, const char *node);
/* The progress record of `node` (its round and lease), or NULL. */
const bagua__agent_ack_t *bagua__agent_snap_ack(const bagua__agent_snap_t *s, const char *node);

#endif
