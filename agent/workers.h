/*
 * The node's worker processes for one round: start them with the round's environment, record
 * how each ended, and stop them (signal, grace period, SIGKILL).
 *
 * Every worker leads its own process group, so a signal reaches the helpers it forks too, and
 * has PR_SET_PDEATHSIG = SIGKILL, so it dies with the agent even when the agent is SIGKILLed.
 */
#ifndef BAGUA_AGENT_WORKERS_H
#define BAGUA_AGENT_WORKERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent.h"
#include "output.h"

/* What a worker is told about its place in the round (docs/agent.md, "Worker environment"). */
typedef struct {
  int64_t round;
  int restart_count;
  int group_rank, group_world_size;
  int rank_base; /* RANK of local rank 0 */
  int world_size;
  const char *master_addr;
  int master_port;
  const char *bootstrap; /* BAGUA_BOOTSTRAP value, or NULL to leave the environment's */
  const char *mark_dir;  /* auto mode: BAGUA_ELASTIC_MARK goes under it (marks.h); or NULL */
  const char *secret;    /* BAGUA_JOB_SECRET for the workers (64 hex digits), or NULL */
  /* BAGUA_PROGRESS_FILE goes under it (progress.h); NULL: progress reports are off. */
  const char *progress_dir;
  /* TORCHELASTIC_ERROR_FILE goes under it (bagua__workers_error_path); NULL: the agent has no
   * private directory, and the workers get none. */
  const char *error_dir;
} bagua__worker_assign_t;

typedef struct {
  pid_t pid; /* also the process group id */
  int local_rank, rank;
  int running;     /* not reaped yet */
  int wait_status; /* from waitpid, once reaped */
  int64_t exit_ms; /* wall clock when reaped */
  int expected;    /* it ended because the agent stopped it: not a failure */
} bagua__worker_t;

typedef struct {
  bagua__worker_t *w;
  int n;
  int nrunning;
  int64_t round;       /* the round they run in (an adopted round replaces the start round) */
  int64_t start_round; /* the round they were started in (names their elastic marks) */
  int stopping;        /* the agent is stopping them: exits from now on are expected */
} bagua__workers_t;

/* Starts cfg->nproc workers for `a`. On failure, the ones already started are killed. */
bagua_status_t bagua__workers_start(bagua__workers_t *ws, const bagua__agent_config_t *cfg,
                                    const bagua__worker_assign_t *a, bagua__outpump_t *out);

/*
 * The round changed while the workers keep running (in-process elasticity): each worker's
 * rank becomes rank_base + its local rank, its console prefix shows the new rank, and its log
 * file gets a header line for the round. `out` may be NULL (no output to retag).
 */
void bagua__workers_renumber(bagua__workers_t *ws, const bagua__agent_config_t *cfg,
                             bagua__outpump_t *out, int64_t round, int restart_count,
                             int rank_base);

/* The log file of the worker with `local_rank` on `node`: "<log_dir>/<node>.<local_rank>.log",
 * the same file in every round. Returns 0, or -1 when it does not fit. */
int bagua__workers_log_path(const char *log_dir, const char *node, int local_rank, char *buf,
                            size_t len);
/* The line that heads each round's output in a log file:
 * "=== bagua-agent: job J round N restart K rank R<how> ===\n". */
void bagua__workers_log_header(const char *job, int64_t round, int restart_count, int rank,
                               const char *how, char *buf, size_t len);

/*
 * The worker's TORCHELASTIC_ERROR_FILE: "<dir>/error.<local rank>.json", in the agent's
 * private directory, where torch's @record decorator writes the exception that ended the
 * worker. The directory is emptied before workers start (marks.h), so a file there was written
 * by the worker that holds the slot now. Returns 0, or -1 when it does not fit.
 */
int bagua__workers_error_path(const char *dir, int local_rank, char *buf, size_t len);
/*
 * The message of the error file the worker of `local_rank` (rank `rank`, for messages) left
 * in `dir`, made one bounded line by bagua__rdzv_error_file_decode(), into out[len]. The file
 * is the worker's writing, so it is read as untrusted input: only a regular file (never a FIFO,
 * a device or a symbolic link, and without blocking) of at most BAGUA_RDZV_ERROR_FILE_MAX
 * bytes holding torch's record is used; anything else is ignored with a warning that names it.
 * Returns 1 with the message, 0 without one (no file, or one that was refused: out is "").
 */
int bagua__workers_error_message(const char *dir, int local_rank, int rank, char *out, size_t len);

/* Records that `pid` ended with `wait_status`. Returns 1 if it was one of ours. */
int bagua__workers_on_exit(bagua__workers_t *ws, pid_t pid, int wait_status);

/* Sends `sig` to every running worker's process group. */
void bagua__workers_signal(bagua__workers_t *ws, int sig);

/*
 * The first worker (in reaping order, earliest exit time) that failed on its own — exited
 * non-zero or was killed by a signal the agent did not send — or NULL.
 */
const bagua__worker_t *bagua__workers_first_failure(const bagua__workers_t *ws);

/* 1 when every worker has exited with status 0 (and there was at least one). */
int bagua__workers_all_succeeded(const bagua__workers_t *ws);

/*
 * Waits for events: returns after at most `timeout_ms`, having reaped whatever exited (through
 * bagua__workers_on_exit). Returns non-zero when the caller asked to hurry (a second
 * interrupt): the stop then skips the rest of the grace period.
 */
typedef int (*bagua__workers_wait_fn)(void *arg, int timeout_ms);

/*
 * Stops every running worker: `sig` to each process group (0: they were signalled already),
 * up to `grace_ms` for them to exit,
 * then SIGKILL and up to 5 s more (a process stuck in the kernel cannot be waited for
 * forever; it is reported and left). Their exits are marked expected. Returns when none runs.
 */
void bagua__workers_stop(bagua__workers_t *ws, int sig, int grace_ms, bagua__workers_wait_fn wait,
                         void *arg);

/* Frees the table (workers must have been stopped). */
void bagua__workers_clear(bagua__workers_t *ws);

#endif
