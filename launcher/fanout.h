/*
 * The agents' start with a bounded fan-out, as pdsh does: at most --fanout agents are
 * starting at once. An agent is starting from its start until its node record
 * (nodes/<node_id>) appears in etcd, its process (the remote command) ends, or its start
 * timeout passes; then the next host's agent starts. A job of a thousand hosts thus never
 * forks a thousand ssh processes at once, and etcd never takes a thousand registrations in
 * the same instant.
 *
 * Registrations are learned with one keys-only range read of the job's nodes/ directory,
 * however many agents wait: one request per poll, O(N) bytes.
 *
 * Threading: the supervisor's thread only.
 */
#ifndef BAGUA_LAUNCHER_FANOUT_H
#define BAGUA_LAUNCHER_FANOUT_H

#include <stdint.h>

#include "agents.h"
#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "launch.h"

/* The longest an agent counts against the fan-out (--rdzv-timeout when that is shorter): a
 * host that neither registers nor fails within it (ssh hangs on a dead host) must not hold a
 * slot for the whole job. It is still supervised as before. */
#define LAUNCH_START_TIMEOUT_MS 60000
/* How often registrations are read while agents are starting: a slot is freed at most this
 * long after its agent registered. */
#define LAUNCH_START_POLL_MS 100

typedef struct {
  int limit;          /* --fanout */
  int64_t timeout_ms; /* how long one start may count against the fan-out */
  int next;           /* every agent before this index is started or will never be */
  int starting;       /* agents counting against the limit now */
  int started;        /* agents started so far */
} bagua__launch_fanout_t;

/* Where a start stands (bagua__launch_fanout_settle). */
typedef enum {
  LAUNCH_START_GOING = 0, /* still starting */
  LAUNCH_START_REGISTERED,
  LAUNCH_START_EXITED,
  LAUNCH_START_TIMED_OUT,
  /* Its node id is the agent's choice (the single local agent): its registration cannot be
   * seen, so it does not count from the start on. */
  LAUNCH_START_UNSEEN
} bagua__launch_start_state_t;

/* What the agents are doing, for the progress line and the log. */
typedef struct {
  int total;
  int waiting;  /* not started yet, and still to start */
  int starting; /* counting against the fan-out */
  int started;  /* started at some point (running or ended) */
  int registered;
} bagua__launch_fanout_counts_t;

void bagua__launch_fanout_init(bagua__launch_fanout_t *f, const bagua__launch_config_t *cfg);

/* The next agent to start, when one waits and fewer than the limit are starting; else NULL.
 * Agents start in their order in the array (the hosts' order, then discovery's). */
bagua__launch_agent_t *bagua__launch_fanout_next(bagua__launch_fanout_t *f,
                                                 bagua__launch_agent_t *a, int n);

/* Agent `a` was started at monotonic time `now_ms`: it counts against the limit. */
void bagua__launch_fanout_began(bagua__launch_fanout_t *f, bagua__launch_agent_t *a,
                                int64_t now_ms);

/* For an agent that is starting: whether it still is at `now_ms`, or why not; in that case it
 * no longer counts against the limit. */
bagua__launch_start_state_t bagua__launch_fanout_settle(bagua__launch_fanout_t *f,
                                                        bagua__launch_agent_t *a, int64_t now_ms);

void bagua__launch_fanout_count(const bagua__launch_agent_t *a, int n,
                                bagua__launch_fanout_counts_t *out);

/* 1 when some running agent with a known node id has not been seen registered. */
int bagua__launch_any_unregistered(const bagua__launch_agent_t *a, int n);

/*
 * Reads the job's nodes/ directory once (keys only) and marks every running agent whose node
 * id is there as registered. Returns BAGUA_OK, or the etcd client's error (nothing marked).
 */
bagua_status_t bagua__launch_read_registered(bagua__etcd_t *c, const char *job,
                                             bagua__launch_agent_t *a, int n);

#endif
