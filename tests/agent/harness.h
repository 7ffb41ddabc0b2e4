/*
 * Harness for the agent integration tests: a real etcd (tests/etcd/etcd_fixture), real
 * bagua-agent processes started with --node-id so several emulate nodes on this host, and
 * the worker program agent_worker, which leaves one env file per worker and round.
 *
 * Every wait polls a condition against a deadline; none is a fixed sleep. Agents get a
 * parent-death signal, so a failing test never leaves them running.
 */
#ifndef BAGUA_TESTS_AGENT_HARNESS_H
#define BAGUA_TESTS_AGENT_HARNESS_H

#include <sys/types.h>

#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "schema.h"

typedef struct {
  pid_t pid;
  char node[64];
  char out_path[512], err_path[512];
  int exited;
  int code; /* exit status, or 128 + signal */
  long long start_ms, exit_ms;
} agent_proc_t;

typedef struct {
  etcd_fixture_t fx;
  int have_etcd;
  bagua__etcd_t *c;
  char dir[256];  /* temporary directory: agent output, worker env files */
  char wdir[300]; /* dir/w: worker env files */
  char job[64];
} harness_t;

/* Creates the directory; starts etcd when `with_etcd` (exits 77 when etcd is missing). Points
 * TMPDIR at the directory, so the agents' private directories are removed with it. */
void h_init(harness_t *h, const char *job, int with_etcd);
/* Stops etcd and removes the directory. */
void h_fini(harness_t *h);

/*
 * Starts `bagua-agent --rdzv-endpoint <etcd> --job-id <h->job> --node-id <node> ARGS... --
 * agent_worker --out <wdir> WORKER_ARGS...`. Both lists are NULL-terminated; `endpoint`
 * overrides the etcd endpoint when not NULL.
 */
void h_spawn(harness_t *h, agent_proc_t *ap, const char *node, const char *endpoint,
             const char *const *args, const char *const *worker_args);
/* Like h_spawn with an arbitrary program (NULL-terminated; NULL: no "--" and no program). */
void h_spawn_cmd(harness_t *h, agent_proc_t *ap, const char *node, const char *endpoint,
                 const char *const *args, const char *const *cmd);
/* Like h_spawn_cmd, with the agent's output in dir/<files>.out and .err instead of files named
 * after the node (two agents given one node id). */
void h_spawn_files(harness_t *h, agent_proc_t *ap, const char *node, const char *files,
                   const char *endpoint, const char *const *args, const char *const *cmd);
/* Waits for the agent to exit; fails the test after `timeout_ms`. Returns its exit code. */
int h_wait_exit(agent_proc_t *ap, int timeout_ms);
/* 1 if the agent has exited (without waiting). */
int h_poll_exit(agent_proc_t *ap);
/* Sends a signal to the agent. */
void h_kill(agent_proc_t *ap, int sig);

/* Waits until nodes/<node> exists in etcd. */
void h_wait_registered(harness_t *h, const char *node, int timeout_ms);
/* Waits until `n` worker env files of round `round` exist; returns the elapsed ms. */
long long h_wait_round_files(harness_t *h, int round, int n, int timeout_ms);
/* Number of env files of `round`. */
int h_count_round_files(harness_t *h, int round);
/* Value of `key` in the env file of (round, node, local rank) into buf; fails if missing. */
const char *h_env(harness_t *h, int round, const char *node, int local_rank, const char *key,
                  char *buf, size_t len);
int h_env_int(harness_t *h, int round, const char *node, int local_rank, const char *key);

/* Reads and decodes the job's status / round; returns 0 if found. */
int h_status(harness_t *h, bagua__rdzv_status_t *st);
int h_round(harness_t *h, bagua__rdzv_round_t *r);

/* Membership settings shared by most scenarios: short windows, a short lease (2 s). */
#define FAST "--last-call-ms", "200", "--settle-ms", "300", "--lease-ttl", "2", "--grace-ms", "2000"

/* Agents started one after the other, each once the previous one registered, so that their
 * registration order (and so their ranks) is known. */
void h_spawn_in_order(harness_t *h, agent_proc_t *aps, int n, const char *const *nodes,
                      const char *const *const *args, const char *const *wargs);
/* Fail the test unless the agent's stderr / stdout contains `needle`. */
void h_expect_stderr(const agent_proc_t *ap, const char *needle);
void h_expect_stdout(const agent_proc_t *ap, const char *needle);
/* Fail unless the env file of (round, node, local rank) has key=want. */
void h_expect_env(harness_t *h, int round, const char *node, int lr, const char *key,
                  const char *want);
/* Waits until the agent's stderr contains `needle`; fails after `timeout_ms`. */
void h_wait_stderr(const agent_proc_t *ap, const char *needle, int timeout_ms);
/* The file's contents (NUL-terminated, malloc'd; "" when unreadable). */
char *h_slurp(const char *path);
/* Occurrences of `needle` in `hay`. */
int h_count_in(const char *hay, const char *needle);
/* The integer after the first `needle` in the file, or -1; the wait variant fails after
 * `timeout_ms` without one. */
long long h_file_value_after(const char *path, const char *needle);
long long h_wait_value_after(const char *path, const char *needle, int timeout_ms);

/* 1 if the file contains `needle`. */
int h_file_contains(const char *path, const char *needle);
/* Prints the agents' output files (for failure diagnosis). */
void h_dump(const agent_proc_t *aps, int n);
/* Creates an empty file at dir/name and returns its path in buf. */
const char *h_touch(harness_t *h, const char *name, char *buf, size_t len);
/* Path of dir/name in buf (the file is not created). */
const char *h_path(harness_t *h, const char *name, char *buf, size_t len);
/* The live (non-zombie) children of `parent` (an agent's workers) into out[0..cap); returns
 * how many were found. */
int h_children(pid_t parent, pid_t *out, int cap);
/* 1 while `pid` exists and is not a zombie. */
int h_pid_alive(pid_t pid);

#endif
