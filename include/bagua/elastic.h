/*
 * Bagua-C in-process elasticity (docs/elastic.md, the "in-process" mode; Horovod's elastic
 * State is the model): workers stay alive while the world grows or shrinks.
 *
 * A program registers every buffer that must survive a world change (parameters, optimizer
 * state, its own counters), commits after each completed step and checks for a pending change
 * at step boundaries:
 *
 *   bagua_elastic_create(NULL, &e);                 // round, rank, size from bagua-agent
 *   bagua_elastic_register(e, "params", w, bytes);  // ... every piece of state
 *   bagua_elastic_sync(e);                          // everyone adopts rank 0's state
 *   while (bagua_elastic_step(e) < steps) {
 *     if (bagua_elastic_check(e)) { bagua_elastic_rebuild(e); continue; }
 *     st = bagua_allreduce(bagua_elastic_comm(e), ...);
 *     if (st != BAGUA_OK) { bagua_elastic_restore(e); bagua_elastic_rebuild(e); continue; }
 *     ...apply the update...
 *     bagua_elastic_set_step(e, bagua_elastic_step(e) + 1);
 *     bagua_elastic_commit(e);
 *   }
 *
 * Rounds come from bagua-agent through etcd: the key /bagua/<job>/round holds
 * {"round":N, "members":[node ids], "nprocs":[workers per member], "world_size":W, ...}
 * (docs/agent.md). A worker's rank in round N is the agent's rule: the sum of `nprocs` of the
 * members listed before this worker's node (BAGUA_NODE_ID), plus LOCAL_RANK. A member list
 * without `nprocs` counts one worker per member. Members are ordered oldest-first, so the new
 * rank 0 is a survivor and holds valid state.
 *
 * Threading: one thread drives an elastic context (as for communicators). A background watch
 * thread only raises the "change pending" flag.
 */
#ifndef BAGUA_ELASTIC_H
#define BAGUA_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/comm.h"
#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bagua_elastic_s bagua_elastic_t;

/*
 * Creation settings. Initialise with BAGUA_ELASTIC_CONFIG_INIT; a field left at its "unset"
 * value (-1 / NULL) takes the environment parameter named in its comment. As for
 * bagua_comm_config_t, a numeric field that is set must lie within that parameter's bounds
 * (round_wait_ms: those of BAGUA_RDZV_TIMEOUT_MS, where 0 means BAGUA_RDZV_TIMEOUT_S), and the
 * job id follows the id rule of bagua-launch --job-id; bagua_elastic_create() refuses anything
 * else with BAGUA_ERR_INVALID_ARG before it contacts etcd.
 */
typedef struct {
  size_t struct_size;     /* sizeof(bagua_elastic_config_t), for ABI growth */
  const char *etcd;       /* NULL: the endpoint(s) of BAGUA_BOOTSTRAP=etcd://HOST:PORT[,...] */
  const char *job_id;     /* NULL: BAGUA_JOB_ID */
  const char *node_id;    /* NULL: BAGUA_NODE_ID (required: it locates us in `members`) */
  int64_t round;          /* -1: BAGUA_ROUND, the round this worker was started in */
  int rank;               /* -1: RANK in that round */
  int size;               /* -1: WORLD_SIZE of that round */
  int local_rank;         /* -1: LOCAL_RANK, or 0 when unset */
  int transport;          /* -1: BAGUA_TRANSPORT; else a bagua_transport_kind_t */
  int timeout_ms;         /* -1: BAGUA_COMM_TIMEOUT_MS (collectives) */
  int connect_timeout_ms; /* -1: BAGUA_CONNECT_TIMEOUT_MS (bootstrap of each round) */
  int round_wait_ms; /* -1: BAGUA_RDZV_TIMEOUT_MS (set by bagua-agent), else BAGUA_RDZV_TIMEOUT_S;
                      how long rebuild waits for a new round */
} bagua_elastic_config_t;

#define BAGUA_ELASTIC_CONFIG_INIT \
  { sizeof(bagua_elastic_config_t), NULL, NULL, NULL, -1, -1, -1, -1, -1, -1, -1, -1 }

/* What a reset callback learns about the world change that just completed. */
typedef struct {
  int64_t old_round, new_round;
  int old_rank, new_rank;
  int old_size, new_size;
} bagua_elastic_reset_t;

/* Called by bagua_elastic_rebuild() after the new world holds rank 0's state, in registration
 * order. A non-OK return makes rebuild return that status. */
typedef bagua_status_t (*bagua_elastic_reset_cb)(bagua_elastic_t *e,
                                                 const bagua_elastic_reset_t *info, void *arg);

/*
 * Creates the context and the communicator of the starting round (collective over that
 * round's ranks, bounded by the connect timeout), and starts watching the round key. The
 * program then registers its state and calls bagua_elastic_sync(): a worker that joins a
 * running job receives the state that way.
 */
BAGUA_EXTERN bagua_status_t bagua_elastic_create(const bagua_elastic_config_t *cfg,
                                                 bagua_elastic_t **out);
/* Stops the watch, destroys the communicator and frees all copies. NULL is accepted. */
BAGUA_EXTERN void bagua_elastic_destroy(bagua_elastic_t *e);

/* The communicator of the current round; it changes on every rebuild (do not keep it). */
BAGUA_EXTERN bagua_comm_t *bagua_elastic_comm(const bagua_elastic_t *e);
BAGUA_EXTERN int64_t bagua_elastic_round(const bagua_elastic_t *e);
BAGUA_EXTERN int bagua_elastic_rank(const bagua_elastic_t *e);
BAGUA_EXTERN int bagua_elastic_size(const bagua_elastic_t *e);

/*
 * Registers `bytes` bytes at `ptr` as state under a unique `name` (at most 63 characters).
 * Every worker must register the same names with the same sizes in the same order; sync
 * checks this. The memory stays the caller's; the library keeps a commit copy of its own.
 */
BAGUA_EXTERN bagua_status_t bagua_elastic_register(bagua_elastic_t *e, const char *name, void *ptr,
                                                   size_t bytes);
/* Built-in step and epoch counters, registered as state ("bagua.step", "bagua.epoch"). */
BAGUA_EXTERN int64_t bagua_elastic_step(const bagua_elastic_t *e);
BAGUA_EXTERN void bagua_elastic_set_step(bagua_elastic_t *e, int64_t step);
BAGUA_EXTERN int64_t bagua_elastic_epoch(const bagua_elastic_t *e);
BAGUA_EXTERN void bagua_elastic_set_epoch(bagua_elastic_t *e, int64_t epoch);

/* Snapshots every registered buffer into the library's copies (memcpy only, no I/O). */
BAGUA_EXTERN bagua_status_t bagua_elastic_commit(bagua_elastic_t *e);
/* Copies the last commit (or the state at sync/registration when none) back. */
BAGUA_EXTERN bagua_status_t bagua_elastic_restore(bagua_elastic_t *e);
/*
 * Broadcasts every registered buffer from rank 0 of the current communicator and commits.
 * Collective. BAGUA_ERR_INVALID_USAGE on every rank when the registrations differ.
 */
BAGUA_EXTERN bagua_status_t bagua_elastic_sync(bagua_elastic_t *e);

/* 1 when a round newer than the current one has been published (cheap; call every step). */
BAGUA_EXTERN int bagua_elastic_check(const bagua_elastic_t *e);

/*
 * Moves to the newest round: aborts and destroys the current communicator, waits (up to
 * round_wait_ms) for a round newer than the current one, computes this worker's rank in it,
 * builds its communicator through the etcd bootstrap (connect timeout; retried on a still
 * newer round), syncs the state from the new rank 0 and runs the reset callbacks. Call
 * bagua_elastic_restore() first when a collective was cut off. On failure the context has no
 * communicator; BAGUA_ERR_ABORTED means this node is not a member of the new round.
 */
BAGUA_EXTERN bagua_status_t bagua_elastic_rebuild(bagua_elastic_t *e);

/* Adds a reset callback (at most 16 callbacks and participants together). Reset callbacks
 * must not communicate: a newcomer runs none, so its collectives would not match. */
BAGUA_EXTERN bagua_status_t bagua_elastic_on_reset(bagua_elastic_t *e, bagua_elastic_reset_cb cb,
                                                   void *arg);

/*
 * Collective over the current communicator: sets *changed to 1 on every rank when any rank
 * has seen a newer round. Calling it at each step boundary (instead of bagua_elastic_check)
 * makes all ranks leave the round after the same step, so a graceful change (a join, a node
 * leaving on SIGTERM) cuts off no collective and rolls nothing back. It costs one 8-byte
 * allreduce. On failure (a dead peer) restore and rebuild as for any failed collective.
 */
BAGUA_EXTERN bagua_status_t bagua_elastic_check_all(bagua_elastic_t *e, int *changed);

/*
 * A participant is a component with private state that follows the elastic context, such as
 * a bagua_ddp_t (bagua_ddp_elastic_attach()). Every hook may be NULL; `arg` is passed back.
 *  - commit: in bagua_elastic_commit(), after the registered buffers were copied.
 *  - restore: in bagua_elastic_restore(); the participant returns to its last commit.
 *  - abort: called from the watch thread (under an internal lock, so it must not block or call
 *    back into the context) when a published round no longer lists a member of the current
 *    round: the participant ends its communication in flight, which could otherwise wait for
 *    a stalled node until the communication timeout. The world communicator is aborted too.
 *  - reset: in bagua_elastic_rebuild(), in order with the reset callbacks. It may communicate
 *    (on the new world communicator) only in the same sequence that a newcomer's set-up of the
 *    participant performs after its bagua_elastic_sync().
 */
typedef struct {
  size_t struct_size; /* sizeof(bagua_elastic_participant_t) */
  bagua_status_t (*commit)(void *arg);
  void (*restore)(void *arg);
  void (*abort)(void *arg);
  bagua_elastic_reset_cb reset;
} bagua_elastic_participant_t;

/* Adds a participant (the struct is copied). Detach it before `arg` goes away. */
BAGUA_EXTERN bagua_status_t bagua_elastic_attach(bagua_elastic_t *e,
                                                 const bagua_elastic_participant_t *p, void *arg);
/* Removes every participant and reset callback registered with `arg`. Thread-safe against the
 * abort hook: when it returns, no hook of `arg` runs any more. */
BAGUA_EXTERN void bagua_elastic_detach(bagua_elastic_t *e, void *arg);

#ifdef __cplusplus
}
#endif
#endif
