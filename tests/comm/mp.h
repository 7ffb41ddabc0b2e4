/*
 * Multi-process test runner: forks N ranks on loopback, each creates a communicator and runs
 * a test body. The parent enforces a deadline and kills every child if it passes, so a hang
 * fails the test instead of stalling CI.
 */
#ifndef BAGUA_TEST_MP_H
#define BAGUA_TEST_MP_H

#include <sys/types.h>

#include "bagua/bagua.h"

typedef struct {
  int nranks;
  int transport;           /* bagua_transport_kind_t */
  int ranks_per_node;      /* > 0: emulate nodes of this many ranks through node ids */
  int timeout_ms;          /* communicator timeout; 0 = default */
  int deadline_s;          /* whole run; 0 = 60 */
  const char *setenv_list; /* "NAME=VALUE;NAME=VALUE" applied in every child before init */
} mp_opts_t;

typedef int (*mp_body_fn)(bagua_comm_t *c, void *arg);

/* Returns 0 when every rank's body returned 0. */
int mp_run(const mp_opts_t *o, mp_body_fn body, void *arg);
/* A free loopback TCP port. */
int mp_free_port(void);
/* Fills cfg for rank r of the run (bootstrap, node id, transport); the strings live in static
 * storage of the child. */
void mp_config(const mp_opts_t *o, int port, int rank, bagua_comm_config_t *cfg);
void mp_apply_env(const char *list);
double mp_now(void);

/* The scheduling state of thread `tid` of this process: its state letter and the CPU clock
 * ticks it has used (fields 3, 14 and 15 of /proc/self/task/<tid>/stat). Exits the process
 * with a message when the file cannot be read. */
void mp_thread_sched(pid_t tid, char *state, unsigned long *ticks);
/*
 * Waits until thread `tid`, which has announced that it is entering a call that cannot
 * complete, is waiting inside it: asleep in the kernel (a condition variable or poll), or
 * busy-waiting (two clock ticks of CPU since the announcement; shared memory spins). Exits the
 * process with a message after 20 s.
 */
void mp_wait_blocked(pid_t tid);

#endif
