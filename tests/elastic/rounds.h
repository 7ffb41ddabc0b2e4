/*
 * Helpers shared by the elastic tests, which play bagua-agent: publishing round records and
 * giving a forked worker the environment an agent would.
 */
#ifndef BAGUA_TESTS_ELASTIC_ROUNDS_H
#define BAGUA_TESTS_ELASTIC_ROUNDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Puts `json` under /bagua/<job>/round through the agent's own etcd client, then, as the
 * leader does, every node's assign/<node> record: its place for the members, "not a member"
 * for the nodes an earlier call assigned, and the count of the last round's members that are
 * gone (unless `json` has "departed"). */
void rounds_put_json(const char *endpoint, const char *job, const char *json);
/* Publishes round `round` with members n<first> .. n<first+n-1>, one worker each. */
void rounds_put(const char *endpoint, const char *job, int round, int first, int n);
/* Sets the worker variables of (round, rank, size) on node n<slot> and reloads the params. */
void rounds_worker_env(const char *endpoint, const char *job, int round, int rank, int size,
                       int slot);
void rounds_sleep_ms(int ms);

/* A forked worker and the read end of the pipe it writes its result to. */
typedef struct {
  pid_t pid;
  int rfd;
} rounds_proc_t;

/* The body of a forked worker: writes its result to `wfd` and returns its exit status. */
typedef int (*rounds_worker_fn)(const char *endpoint, int round, int rank, int size, int slot,
                                int wfd);

/* Forks a worker running fn(endpoint, round, rank, size, slot, wfd). */
rounds_proc_t rounds_spawn(rounds_worker_fn fn, const char *endpoint, int round, int rank, int size,
                           int slot);
/* Waits for a worker that must exit 0 and reads its `bytes`-byte result. */
void rounds_finish(rounds_proc_t p, void *result, size_t bytes);
/* Waits (up to 30 s) until progress[slot] >= step; `progress` is shared with the workers. */
void rounds_wait_progress(volatile int64_t *progress, int slot, int64_t step);

#endif
