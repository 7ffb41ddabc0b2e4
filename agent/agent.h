/*
 * bagua-agent: one per node. Registers the node in etcd, takes part in leader election and
 * rendezvous rounds, and supervises the node's worker processes (restart, in-process and auto
 * elastic modes).
 *
 * This header holds what the agent's files share: the configuration, exit statuses, and the
 * entry points of the pieces (cli.c, agent.c). docs/agent.md documents the etcd schema, the
 * round protocol, the worker environment and the exit statuses for users.
 */
#ifndef BAGUA_AGENT_AGENT_H
#define BAGUA_AGENT_AGENT_H

#include <stdint.h>
#include <stdio.h>

#include "bagua/error.h"
#include "bagua/version.h"

/* Room for a node or job id and its terminating NUL. The ids themselves are checked by
 * bagua__check_id() (common/validate.h), which bounds them to BAGUA_ID_MAX_LEN characters;
 * the buffers stay larger so that records read from etcd are bounded by the schema alone. */
#define BAGUA_AGENT_ID_MAX 128

/*
 * --elastic-mode: what a round formed for a membership change does to this node's running
 * workers. AUTO keeps them when every one has announced that it runs libbagua's elastic API
 * (it created its BAGUA_ELASTIC_MARK file), and restarts them otherwise.
 */
typedef enum {
  BAGUA__ELASTIC_AUTO = 0,
  BAGUA__ELASTIC_RESTART,
  BAGUA__ELASTIC_IN_PROCESS
} bagua__elastic_mode_t;

/* "auto", "restart" or "in-process": the value workers get as BAGUA_ELASTIC_MODE. */
const char *bagua__elastic_mode_name(bagua__elastic_mode_t m);

/* Exit statuses (docs/agent.md). A failed job exits with its root-cause worker's code. */
enum {
  BAGUA_AGENT_EXIT_OK = 0,
  BAGUA_AGENT_EXIT_USAGE = 2,        /* bad flag, value, environment or conflicting config */
  BAGUA_AGENT_EXIT_RDZV = 3,         /* etcd unreachable, or below MIN nodes too long */
  BAGUA_AGENT_EXIT_INTERRUPTED = 130 /* SIGINT (SIGTERM gives 143, SIGHUP 129) */
};

typedef struct {
  const char *endpoints; /* etcd endpoint list, "HOST:PORT[,HOST:PORT]" or URLs */
  char job_id[BAGUA_AGENT_ID_MAX];
  char node_id[BAGUA_AGENT_ID_MAX];
  char node_addr[256]; /* "" until resolved: the local address towards etcd */
  const char *tag;     /* free-form label recorded in the node record, or "" */
  const char *log_dir; /* log files DIR/<node>.<local rank>.log, or NULL */
  /* --secret-file: a file (mode 0600 or stricter) holding the job's secret, for agents started
   * outside bagua-launch; NULL or "": the secret comes from etcd (the first agent makes it). */
  const char *secret_file;
  /* The job secret this agent was given (--secret-file, else BAGUA_JOB_SECRET), read and
   * checked by the parser before anything is written to etcd; "" when none was given. */
  char secret[65];
  int nnodes_min, nnodes_max;
  int nproc;
  int max_restarts;
  int lease_ttl_s;
  int rdzv_timeout_s;
  int last_call_ms;
  int settle_ms;
  int grace_ms;
  int etcd_timeout_ms;
  bagua__elastic_mode_t elastic_mode; /* --elastic-mode */
  int metrics_port;                   /* --metrics-port: Prometheus endpoint (metrics.h); 0: off */
  const char *metrics_addr;           /* --metrics-addr: the address it binds (default 127.0.0.1) */
  /* --node-rank (BAGUA_NODE_RANK): torchrun's --node_rank, the node's place among newcomers
   * (leader.c); -1: none. */
  int node_rank;
  /* --role (BAGUA_ROLE, default "default"): the workers' ROLE_NAME, torchrun's --role. */
  char role[BAGUA_AGENT_ID_MAX];
  /* 1: the workers get OMP_NUM_THREADS=1, as torchrun gives them: more than one worker runs
   * on this node and the agent's environment does not set OMP_NUM_THREADS (cli.c). */
  int omp_default;
  /* BAGUA_PROGRESS_INTERVAL_MS: how often the workers' progress is read and published; 0:
   * off (progress.c). */
  int progress_interval_ms;
  /* BAGUA_RDZV_ACK_TIMEOUT_MS: how long the leader waits for a member to act in a round
   * before it drops the member (leader.c); 0: never. */
  int ack_timeout_ms;
  char **argv; /* the worker program and its arguments, NULL-terminated (from main's argv) */
  int argc;
} bagua__agent_config_t;

/*
 * Parses the command line into `cfg`, with BAGUA_* environment parameters as defaults.
 * Returns 0 to run, 1 when --help or --version was printed (exit 0), or 2 after printing a
 * message that names the bad flag or variable and what is accepted (exit 2).
 */
int bagua__agent_parse_cli(int argc, char **argv, bagua__agent_config_t *cfg);

/* Writes the user-facing line "bagua-agent[<node>]: <message>\n" to stderr in one write
 * (bagua__say() of common/output.h, with the node's name in the tool name). */
void bagua__agent_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The node name used by bagua__agent_say (set once the node id is known). */
void bagua__agent_set_name(const char *node);

/*
 * Runs the agent until the job ends or the agent is interrupted and returns the exit status.
 * `sigfd` is a signalfd for SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2,
 * which the caller has blocked in every thread (main() does it before any thread starts).
 */
int bagua__agent_run(bagua__agent_config_t *cfg, int sigfd, int endfd);
/* Whether bagua-agent has the command-line flag `flag` ("--name"). */
int bagua__agent_flag_known(const char *flag);

/* Formats wall-clock milliseconds as "YYYY-mm-ddTHH:MM:SS.mmmZ". */
void bagua__agent_format_time(int64_t wall_ms, char *out, size_t len);

#endif
