/*
 * The agents bagua-launch starts: their command lines (local, or wrapped in the remote
 * command template) and their processes.
 */
#ifndef BAGUA_LAUNCHER_AGENTS_H
#define BAGUA_LAUNCHER_AGENTS_H

#include <stdint.h>
#include <sys/types.h>

#include "launch.h"

typedef struct {
  bagua__launch_argv_t argv; /* what is exec'ed here (the agent, or the remote command) */
  char *host;                /* host it runs on ("localhost" for the single local agent) */
  char *node_id;             /* --node-id passed, or NULL (the agent chooses) */
  int local;
  /* Remote agents: "NAME=VALUE\0" entries written to the agent's stdin (--env-stdin), so
   * that [env] and -x values (often secrets) appear on no command line; NULL for none. */
  char *stdin_data;
  size_t stdin_len;
  pid_t pid; /* 0 before start and after it was reaped */
  int started;
  int exited;
  /* Remote agents: the read end of a pipe that carries the remote command's stderr (ssh's
   * own errors included), which the launcher copies to its stderr, keeping the last line for
   * the report of an agent that could not be started. -1 for local agents. */
  int err_fd;
  char err_line[512]; /* last complete non-empty line of that stderr */
  char err_part[512]; /* the line being read */
  size_t err_part_len;
  int registered;    /* its node key was seen in etcd */
  int start_failed;  /* it exited before registering (the host could not start it) */
  int code;          /* exit status, 128+N for signal N */
  int exit_signal;   /* N when it was killed by signal N, else 0 (exit 255 is no signal) */
  int64_t exit_ms;   /* wall-clock time of the exit (ms since the epoch) */
  int64_t exit_mono; /* monotonic time of the exit, for ordering */
  /* Counts against --fanout (fanout.h): started, and its node not yet seen in etcd, its
   * process still running and its start timeout not yet passed. */
  int starting;
  int64_t start_ms; /* monotonic time of the start */
  /* What it was built with, so the supervisor can build more agents alike (discovery). */
  char *agent_path;
  char *endpoint;
  int nproc;
  /* Host discovery: started by a later run of the script (not at start), and drained (told
   * to leave because its host vanished from the script's output; its exit is no failure). */
  int discovered;
  int draining;
  int64_t drain_kill_ms; /* monotonic: SIGKILL its process group if still running then */
} bagua__launch_agent_t;

/*
 * Finds the agent binary: `configured` when not empty, else bagua-agent next to this
 * executable, else ../agent/bagua-agent (the build tree). Writes the path to `out`. Returns 0,
 * or -1 with a message when `need_local` and no executable is found.
 */
int bagua__launch_find_agent(const char *configured, int need_local, char *out, size_t outlen,
                             char *err, size_t errlen);

/*
 * Builds one entry per agent (one per host entry, or a single local one) for rendezvous
 * endpoint `endpoint`. Returns the count, or -1 with a message.
 */
int bagua__launch_build_agents(const bagua__launch_config_t *cfg, const char *agent_path,
                               const char *endpoint, bagua__launch_agent_t **out, char *err,
                               size_t errlen);
void bagua__launch_free_agents(bagua__launch_agent_t *a, int n);

/*
 * A registry secret (BAGUA_JOB_SECRET: common/params.def) reaches a remote agent on its stdin
 * only. A remote command that allocates a terminal (ssh -t) would echo it: with remote hosts
 * (or a discovery script, which may report some) and a secret to send, returns -1 with a
 * message naming the secret, where it came from and what is accepted; else 0.
 */
int bagua__launch_check_remote_secrets(const bagua__launch_config_t *cfg, char *err, size_t errlen);
/* Frees what n entries own without freeing the array (entries are zeroed). */
void bagua__launch_free_agents_in_place(bagua__launch_agent_t *a, int n);

/* Builds the entry of one more agent, for host `h` found by discovery (node id: the host name).
 * Returns 0 or -1 with a message. */
int bagua__launch_build_agent(const bagua__launch_config_t *cfg, const char *agent_path,
                              const char *endpoint, const bagua__launch_host_t *h,
                              bagua__launch_agent_t *out, char *err, size_t errlen);

/* Exports the [algorithm] and [env] variables into this process's environment, for the local
 * agents to inherit (a registry parameter already set in the environment keeps its value). */
int bagua__launch_export_vars(const bagua__launch_config_t *cfg);

/* Copies what the agent's stderr pipe holds to this process's stderr and remembers the last
 * line. Returns 1 at end-of-file (the pipe is closed then), else 0. */
int bagua__launch_pump_stderr(bagua__launch_agent_t *a);

/* Starts one agent (own process group, parent-death SIGTERM, stdin from /dev/null, or a pipe
 * that holds `stdin_data` and then ends). */
int bagua__launch_start_agent(bagua__launch_agent_t *a, char *err, size_t errlen);

/*
 * Removes the private directories ($TMPDIR/bagua-agent.<node>.<pid>.XXXXXX) that the agent
 * with `pid` left in `parent` (NULL or "": /tmp), when that pid no longer runs and the
 * directory is ours. Returns how many were removed. For local agents, after they were reaped.
 */
int bagua__launch_sweep_agent_dirs(const char *parent, pid_t pid);

/* Prints an agent's command line, shell-quoted, and the names of the variables it gets on its
 * stdin (never their values). */
void bagua__launch_print_command(const bagua__launch_agent_t *a, FILE *out);

#endif
