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
  pid_t pid; /* 0 before start and after it was reaped */
  int started;
  int exited;
  int code;          /* exit status, 128+N for signal N */
  int64_t exit_ms;   /* wall-clock time of the exit (ms since the epoch) */
  int64_t exit_mono; /* monotonic time of the exit, for ordering */
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

/* Exports the [algorithm] and [env] variables into this process's environment, for the local
 * agents to inherit (a registry parameter already set in the environment keeps its value). */
int bagua__launch_export_vars(const bagua__launch_config_t *cfg);

/* Starts one agent (own process group, parent-death SIGTERM, stdin from /dev/null). */
int bagua__launch_start_agent(bagua__launch_agent_t *a, char *err, size_t errlen);

/* Prints an agent's command line, shell-quoted. */
void bagua__launch_print_command(const bagua__launch_agent_t *a, FILE *out);

#endif
