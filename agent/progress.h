/*
 * The workers' progress, as the agent sees it (docs/observability.md): every worker gets
 * BAGUA_PROGRESS_FILE=<private dir>/progress.<local rank>, which libbagua's DDP layer keeps up
 * to date after each step (common/rdzv/rdzv.h, bagua__progress_file_t). About every
 * BAGUA_PROGRESS_INTERVAL_MS the agent's loop reads those files (one open and two 128-byte
 * preads per worker), derives each worker's step rate, notes how long this node took to
 * resume training after the last round change, and publishes progress/<node> on its lease
 * when something changed. While no worker of the node keeps a file (a program that is not a
 * libbagua one), the reads come ever more rarely, 4 times further apart each time up to 16
 * intervals, and again at the full rate when new workers start: an idle agent wakes about once
 * in 16 s.
 *
 * Threading: the agent's main thread only. Bad file contents (a foreign or torn record) are
 * skipped with an INFO line; an etcd write that fails is retried at the next interval.
 */
#ifndef BAGUA_AGENT_PROGRESS_H
#define BAGUA_AGENT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/rdzv/rdzv.h"

/* One local worker slot. */
typedef struct {
  int have;  /* f holds a valid record of the worker `pid` */
  pid_t pid; /* the worker the record belongs to */
  bagua__progress_file_t f;
  int64_t rate_milli; /* steps/s x 1000 between the last two step counts seen */
  int64_t prev_step, prev_update_ms;
} bagua__agent_wprog_t;

typedef struct {
  bagua__agent_wprog_t *w; /* one per local rank (cfg->nproc) */
  int n;
  int64_t next_ms;     /* monotonic: the next read */
  int64_t idle_ms;     /* the current gap between reads while no file is found (0: none) */
  char *sent;          /* the last record published, without its time (NULL: none) */
  int64_t round;       /* the round the recovery below belongs to */
  int64_t from_ms;     /* wall clock the round was published */
  int64_t *base;       /* per slot: the step count when the round changed (-1: a new worker) */
  int pending;         /* no worker has completed a step in `round` yet */
  int64_t recovery_ms; /* last round change to the first step in it; -1: none measured */
} bagua__agent_progress_t;

/* The path of local rank `lr`'s progress file in `dir`. Returns 0, or -1 when it does not
 * fit. */
int bagua__agent_progress_path(const char *dir, int lr, char *buf, size_t len);

struct bagua__agent_s;
/* Reads and publishes when the interval has passed; returns the ms until the next time (for
 * the loop's wait), or -1 when progress is off. */
int bagua__agent_progress_tick(struct bagua__agent_s *a, int64_t now_ms);
void bagua__agent_progress_free(bagua__agent_progress_t *p);

#endif
