/*
 * Host discovery (--host-discovery-script), Horovod's contract: the script prints one
 * "HOST[:SLOTS]" line per available host, SLOTS being the workers on that host. bagua-launch
 * runs it once at start (its hosts replace --hosts) and, for an elastic job (--nnodes MIN:MAX),
 * again every --discovery-interval-ms: hosts that appear get an agent (while MAX allows), hosts
 * that vanish have their agent drained (SIGTERM: it leaves the job gracefully).
 *
 * The parsing and the diff are pure functions (no processes), unit-tested on their own; the
 * script runs as a child process with its stdout on a pipe, read without blocking so the
 * launcher's main loop keeps serving signals while the script runs, and killed at its timeout.
 */
#ifndef BAGUA_LAUNCHER_DISCOVERY_H
#define BAGUA_LAUNCHER_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A script may print at most this much; more is an error (a runaway script). */
#define BAGUA_DISCOVERY_MAX_OUTPUT (1 << 20)
#define BAGUA_DISCOVERY_ACCEPTED \
  "one HOST or HOST:SLOTS per line (SLOTS in [1, 4096], each host once), # comments"

typedef struct {
  char *name;
  int slots; /* 0: the line gave none (nproc_per_node applies) */
  int line;  /* line of the script's output it came from */
} bagua__discovery_host_t;

/*
 * Parses a script's output into hosts, in the order printed. Blank lines and text after '#'
 * are ignored. A bad host name, bad slots, a duplicate host or no host at all is an error:
 * `err` then names the line and what is accepted ("line 3: \"a b\": ...; accepted: ..."), and
 * nothing is returned. Returns 0 or -1; free the list with bagua__discovery_hosts_free.
 */
int bagua__discovery_parse(const char *text, size_t len, bagua__discovery_host_t **hosts, int *n,
                           char *err, size_t errlen);
void bagua__discovery_hosts_free(bagua__discovery_host_t *hosts, int n);

/*
 * What to do with the agents after a script run.
 *
 *   running: hosts with an agent that is not being drained;
 *   draining: hosts whose agent was told to leave and has not exited yet (they still hold a
 *     place below MAX, and a host that reappears meanwhile waits until its old agent is gone,
 *     since both would use the same node id);
 *   found: the script's hosts; max: MAX of --nnodes.
 *
 * Out: `start` (indices into found, in the script's order: the oldest hosts keep the lowest
 * ranks, new ones come after), `drain` (indices into running), `waiting` (found hosts left
 * out because MAX is reached, or because their old agent is still draining), `changed`
 * (indices into found of running hosts whose slots differ from `running_slots`: the running
 * agent keeps its count). Arrays are malloc'ed; free with bagua__discovery_diff_free.
 */
typedef struct {
  int *start, nstart;
  int *drain, ndrain;
  int *waiting, nwaiting;
  int *changed, nchanged;
} bagua__discovery_diff_t;

int bagua__discovery_diff(const char *const *running, const int *running_slots, int nrunning,
                          const char *const *draining, int ndraining,
                          const bagua__discovery_host_t *found, int nfound, int max,
                          bagua__discovery_diff_t *out);
void bagua__discovery_diff_free(bagua__discovery_diff_t *d);

/* One run of the script in flight. */
typedef struct {
  pid_t pid; /* 0 when none runs */
  int fd;    /* read end of its stdout, -1 when closed */
  char *buf;
  size_t len, cap;
  int overflow;        /* it printed more than BAGUA_DISCOVERY_MAX_OUTPUT */
  int64_t deadline_ms; /* monotonic: killed when still running then */
  int timed_out;
  int status; /* wait status once reaped */
  int reaped;
  int timeout_ms;
} bagua__discovery_run_t;

/*
 * Starts `command` (split into words like a shell would, without expansions: "PATH" or
 * "python3 discover.py") with stdin from /dev/null, stdout on a pipe, stderr inherited, in its
 * own process group. Returns 0, or -1 with a message.
 */
int bagua__discovery_spawn(const char *command, int timeout_ms, bagua__discovery_run_t *r,
                           char *err, size_t errlen);
/* Reads what the script printed, reaps it, kills it at its deadline. Returns 1 when the run is
 * over (check it with bagua__discovery_finish), 0 while it goes on. Never blocks. */
int bagua__discovery_pump(bagua__discovery_run_t *r);
/*
 * After pump returned 1: 0 when the script exited 0 (its output in r->buf, r->len), else -1
 * with "exited with code N", "was killed by signal N", "did not finish within N ms" or "printed
 * more than N bytes" in err. Frees nothing; call bagua__discovery_run_free.
 */
int bagua__discovery_finish(const bagua__discovery_run_t *r, char *err, size_t errlen);
/* Kills a run still in flight (its process group) and reaps it; frees the buffer. */
void bagua__discovery_run_free(bagua__discovery_run_t *r);

/*
 * Runs the script to completion (spawn, pump until over, bounded by timeout_ms) and parses its
 * output. Used at start, before anything else runs. Returns 0 or -1 with a message that names
 * the script.
 */
int bagua__discovery_once(const char *command, int timeout_ms, bagua__discovery_host_t **hosts,
                          int *n, char *err, size_t errlen);

#endif
