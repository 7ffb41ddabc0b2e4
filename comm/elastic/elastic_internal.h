/*
 * The elastic context shared by the files of comm/elastic/: its definition and the internal
 * functions of round-record parsing (record.c), the commit registry (registry.c) and the
 * round watch, departure timer and rebuild (rebuild.c). elastic.c creates and destroys it.
 * Not installed.
 */
#ifndef BAGUA_COMM_ELASTIC_INTERNAL_H
#define BAGUA_COMM_ELASTIC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../communicator.h"
#include "bagua/elastic.h"
#include "common/etcd/etcd.h"

#define BAGUA__ELASTIC_NAME_MAX 64
#define BAGUA__ELASTIC_MAX_CALLBACKS 16
#define BAGUA__ELASTIC_MAX_MEMBERS 4096

/* One registered buffer. */
typedef struct {
  char name[BAGUA__ELASTIC_NAME_MAX];
  void *ptr;
  size_t bytes;
  void *copy; /* the last commit, owned by the library */
} bagua__elastic_entry_t;

struct bagua_elastic_s {
  char *endpoint, *job_id, *node_id;
  int local_rank, round_wait_ms, etcd_timeout_ms;
  /* How each round's communicator is built (transport, timeouts, streams; job_id and node_id
   * point at the copies above). Its rank and size are those of the starting round only. */
  bagua__comm_settings_t comm_settings;
  int64_t round;
  int rank, size;
  bagua_comm_t *comm;
  bagua__etcd_t *etcd;
  bagua__etcd_watch_t *watch;
  /* This node's assignment, assign/<node> (record.c), which the worker follows; and the round
   * key, followed (round_watch) only once the assignment is gone (record.c says why). */
  char assign_key[512], round_key[512];
  bagua__etcd_watch_t *round_watch; /* under `lock` */
  /* Highest round number the watch has seen; read without the lock by check(). */
  _Atomic int64_t seen_round;
  /* The communicator being bootstrapped, so that the watch can cut a bootstrap short when
   * an even newer round makes it pointless (peers will never join the old one). */
  pthread_mutex_t lock;
  bagua_comm_t *building;
  int64_t building_round;
  /* Under `lock`: the current round's number, and the highest round of an assignment the watch
   * has seen (a round it skipped may have dropped a member). e->comm changes under it too,
   * so that the departure abort never touches a destroyed communicator. */
  int64_t cur_round, last_assigned;
  /* The departure timer: when a new round drops a member, communication still running in the
   * old round is aborted `abort_delay_ms` later (a node that left gracefully meets the others
   * at the next step boundary first). Under `lock`; the thread sleeps on `timer_cv`. */
  pthread_t timer;
  int timer_started, timer_stop;
  int abort_delay_ms;
  int64_t abort_at, abort_round; /* a common/time.h deadline and its round; 0: none pending */
  pthread_cond_t timer_cv;       /* bagua__cond_init (monotonic) */
  bagua__elastic_entry_t *entries;
  size_t nentries, cap;
  int64_t step, epoch;
  struct {
    bagua_elastic_participant_t p;
    void *arg;
  } parts[BAGUA__ELASTIC_MAX_CALLBACKS];
  int nparts;
};

/* ---- assignments (record.c) ---- */

/* The round number of an assignment (JSON) and its count of departed members; -1 when the
 * schema refuses it, with a warning naming `key` (at `mod_rev`). */
int64_t bagua__elastic_assign_round(const char *json, const char *key, int64_t mod_rev,
                                    int *departed);
/*
 * This worker's place in the round of assignment `json` (read from `key`, named in warnings):
 * rank = the assignment's first rank + `local_rank`, size = the round's world. Fills
 * round/rank/size; BAGUA_ERR_ABORTED when the node is not a member of the round or
 * `local_rank` is not below its nprocs, BAGUA_ERR_ETCD when the record is malformed.
 */
bagua_status_t bagua__elastic_place(const char *json, const char *key, const char *node_id,
                                    int local_rank, int64_t *round, int *rank, int *size);
/* The assignment the round record `json` (of `key` at `mod_rev`) gives node `node_id`, as the
 * leader would write it (malloc'ed JSON; "not a member" when the round does not list it), with
 * the round's number and its departures (1 when the node is not a member); NULL with a warning
 * when the record is refused. */
char *bagua__elastic_assign_from_round(const char *json, const char *key, int64_t mod_rev,
                                       const char *node_id, int64_t *round, int *departed);

/* ---- commit registry (registry.c) ---- */

/* Copies every registered buffer into its commit copy. */
void bagua__elastic_commit_entries(bagua_elastic_t *e);
/* Frees the registry's copies and table. */
void bagua__elastic_registry_free(bagua_elastic_t *e);

/* ---- round watch, departure timer and rebuild (rebuild.c) ---- */

/* Starts the departure timer thread (sets timer_started); BAGUA_ERR_SYSTEM if it cannot. */
bagua_status_t bagua__elastic_timer_start(bagua_elastic_t *e);
/* Stops and joins the timer thread when it was started. */
void bagua__elastic_timer_stop(bagua_elastic_t *e);
/* Reads this node's assignment, then watches it from the next revision, so that no round is
 * missed in between. */
bagua_status_t bagua__elastic_watch_start(bagua_elastic_t *e);
/* Builds the world communicator of `round` (collective over its ranks), abortable by the watch
 * while it bootstraps. */
bagua_status_t bagua__elastic_comm_for_round(bagua_elastic_t *e, int64_t round, int rank, int size,
                                             bagua_comm_t **out);

#endif
