/*
 * What bagua-launch reads back from etcd: the job's status (and its root cause) and the
 * current rendezvous round, for the final report and the progress display.
 */
#ifndef BAGUA_LAUNCHER_STATUS_H
#define BAGUA_LAUNCHER_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "common/rdzv/rdzv.h"

/*
 * /bagua/<job>/status: {state, exit_code, message, root_cause: {time_ms, node, host, rank,
 * exit_code | signal, round, reason, error}}. Only `state` is required; the rest is used when
 * present.
 */
typedef struct {
  int found;
  int64_t mod_revision;  /* of the key, to tell a record from an earlier run apart */
  char state[16];        /* running, succeeded, failed, closed */
  int64_t job_exit_code; /* what the agents exit with; -1 when not recorded */
  char message[256];
  int has_root_cause;
  int64_t time_ms; /* wall-clock ms since the epoch; 0 when not recorded */
  char node[96];
  char host[256];
  int64_t rank;      /* -1 when not recorded */
  int64_t exit_code; /* -1 when the worker was killed by a signal */
  int64_t signal;    /* 0 when it exited */
  int64_t round;     /* -1 when not recorded */
  char reason[256];  /* why the worker never started (its exec error); "" otherwise */
  /* The worker's own account of its failure, from its error file (torch's @record); "" when it
   * left none. */
  char error[BAGUA_RDZV_ERROR_MAX];
} bagua__launch_status_t;

/* /bagua/<job>/round: {round, members: [...], world_size, ...}. */
typedef struct {
  int found;
  int64_t round;
  int nmembers;
  char members[256]; /* "a, b, c" (shortened with "..." when long) */
  int64_t world_size;
} bagua__launch_round_t;

/* Parses a status value. Returns 0, or -1 when it is not a JSON object with a "state". */
int bagua__launch_parse_status(const char *json, size_t len, bagua__launch_status_t *out);
int bagua__launch_parse_round(const char *json, size_t len, bagua__launch_round_t *out);

/* Reads and parses the keys (found = 0 when absent). */
bagua_status_t bagua__launch_read_status(bagua__etcd_t *c, const char *job,
                                         bagua__launch_status_t *out);
bagua_status_t bagua__launch_read_round(bagua__etcd_t *c, const char *job,
                                        bagua__launch_round_t *out);

/* ---------------------------------------------------------------------------------------- */
/* A whole job, for bagua-launch status / list and the progress line                         */
/* ---------------------------------------------------------------------------------------- */

/* One node: registered (nodes/<id>), a member of the round, or both. */
typedef struct {
  char id[BAGUA_RDZV_ID_MAX];
  int registered; /* nodes/<id> holds a valid record: `rec` */
  bagua__rdzv_node_t rec;
  int member;    /* index in the round's members, -1 when not a member */
  int rank_base; /* its first rank in the round (member only) */
  int nproc;     /* the round's nproc for a member, else the record's */
  int has_progress;
  bagua__rdzv_progress_t prog; /* progress/<id> (owns prog.w) */
} bagua__launch_node_view_t;

typedef struct {
  char job[BAGUA_RDZV_ID_MAX];
  size_t nkeys; /* keys under the job's prefix; 0: no such job */
  int has_status;
  bagua__rdzv_status_t status;
  int has_round;
  bagua__rdzv_round_t round; /* owns its members */
  int has_cfg;
  bagua__rdzv_jobcfg_t cfg;
  char leader[BAGUA_RDZV_ID_MAX]; /* "" when none */
  /* Members in round order first, then the other registered nodes (spares). */
  bagua__launch_node_view_t *nodes;
  size_t nnodes;
  /* The job's progress, summed over the current round's workers that reported. */
  int nreporting;      /* workers with a progress report of the current round */
  int64_t min_step;    /* the slowest one's step (a data-parallel job moves together) */
  int64_t total_steps; /* the largest stated total, 0: unknown */
  double rate;         /* mean steps per second of the reporting workers */
} bagua__launch_job_t;

/*
 * Builds the view of job `job` from the keys under its prefix (kvs as a range read returns
 * them; other keys are skipped). Every value goes through common/rdzv's decoders: a refused
 * one counts as absent. Returns 0, or -1 when out of memory. Free with bagua__launch_job_clear.
 */
int bagua__launch_job_parse(const char *job, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__launch_job_t *out);
/* Reads /bagua/<job>/ in one range request (bounded by the client's timeout) and parses it. */
bagua_status_t bagua__launch_read_job(bagua__etcd_t *c, const char *job, bagua__launch_job_t *out);
void bagua__launch_job_clear(bagua__launch_job_t *j);
/* "running", "succeeded", "failed", "closed" from the status; without one, "running" once a
 * round exists, "waiting" while nodes are registered, else "unknown". */
const char *bagua__launch_job_state(const bagua__launch_job_t *j);

/* Exit status a root cause maps to: the exit code, or 128+N for signal N. */
int bagua__launch_status_code(const bagua__launch_status_t *st);

/* "2026-11-21 09:39:44.123" in local time. */
void bagua__launch_format_time(int64_t ms, char *out, size_t len);

/* "exit code 7" or "signal 9 (SIGKILL)" for an exit status as a shell reports it. */
void bagua__launch_format_code(int code_or_128_plus_sig, int is_signal, char *out, size_t len);

#endif
