/*
 * The agent's view of the rendezvous schema (common/rdzv/rdzv.h): how a failure reads, and the
 * snapshot of a job's whole key space that the agent's loop decides from.
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
 * with code 7" or "... was killed by signal 9 (Killed)". */
void bagua__agent_failure_describe(const bagua__rdzv_failure_t *f, char *out, size_t len);
/* The exit status an agent reports for a failure: its code, or 128 + signal. */
int bagua__agent_failure_exit_code(const bagua__rdzv_failure_t *f);

/* ---------------------------------------------------------------------------------------- */
/* Snapshot of /bagua/<job>/ read at one revision                                            */
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

typedef struct {
  int64_t revision;
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

  /* rounds/<round.round>/done/<node> records of the current round. */
  bagua__agent_done_entry_t *done;
  size_t ndone;

  /* progress/<node> records that the schema accepts (any round). */
  bagua__agent_ack_t *acks;
  size_t nacks;

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
const bagua__rdzv_node_t *bagua__agent_snap_node(const bagua__agent_snap_t *s, const char *id);
/* The done record of `node` in the current round, or NULL. */
const bagua__rdzv_done_t *bagua__agent_snap_done(const bagua__agent_snap_t *s, const char *node);
/* The progress record of `node` (its round and lease), or NULL. */
const bagua__agent_ack_t *bagua__agent_snap_ack(const bagua__agent_snap_t *s, const char *node);

#endif
