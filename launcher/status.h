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

/*
 * /bagua/<job>/status: {state, exit_code, message, root_cause: {time_ms, node, host, rank,
 * exit_code | signal, round, reason}}. Only `state` is required; the rest is used when present.
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

/* Exit status a root cause maps to: the exit code, or 128+N for signal N. */
int bagua__launch_status_code(const bagua__launch_status_t *st);

/* "2026-11-21 09:39:44.123" in local time. */
void bagua__launch_format_time(int64_t ms, char *out, size_t len);

/* "exit code 7" or "signal 9 (SIGKILL)" for an exit status as a shell reports it. */
void bagua__launch_format_code(int code_or_128_plus_sig, int is_signal, char *out, size_t len);

#endif
