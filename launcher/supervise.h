/*
 * Supervision of the agents: their start, signal forwarding, reaping, progress and the job's
 * final outcome.
 */
#ifndef BAGUA_LAUNCHER_SUPERVISE_H
#define BAGUA_LAUNCHER_SUPERVISE_H

#include "agents.h"
#include "common/etcd/etcd.h"
#include "etcd_local.h"
#include "launch.h"

/* Extra time an agent gets beyond the stop grace before SIGKILL: it has to stop its workers
 * (which get the grace) and then leave etcd. */
#define LAUNCH_KILL_MARGIN_MS 3000
/* How often the launcher reads the job's status and round from etcd. */
#define LAUNCH_POLL_MS 500

typedef struct {
  const bagua__launch_config_t *cfg;
  bagua__launch_agent_t *agents;
  int nagents;
  bagua__etcd_t *etcd;        /* the launcher's etcd client; NULL if none */
  bagua__launch_etcd_t *priv; /* the private etcd; NULL with --rdzv-endpoint */
  int sigfd;                  /* signalfd for SIGINT, SIGTERM, SIGHUP and SIGCHLD */
  int progress;               /* print round changes (stderr is a terminal) */
  int64_t stale_status_rev;   /* mod_revision of a status an earlier run left; 0 if none */
} bagua__launch_run_t;

/*
 * Starts the agents, none of which may have been started yet, --fanout at a time (fanout.h),
 * runs until every started agent has exited and returns bagua-launch's exit status: 0 when the
 * job succeeded; the root cause's code (from etcd's status when recorded, else the first
 * failing agent's); 128+N when bagua-launch was stopped by signal N; 1 when this machine
 * could not start an agent. Prints the first failure.
 */
int bagua__launch_supervise(bagua__launch_run_t *r);

#endif
