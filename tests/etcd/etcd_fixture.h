/*
 * Test fixture: a real single-member etcd on free loopback ports with a temporary data dir.
 * The process itself is run by the launcher's helper (launcher/etcd_server.h), directly: etcd is a
 * child of the test, so it can be stopped, restarted on the same ports and data, or frozen.
 *
 * The fixture is plain data, so processes forked after etcd_fixture_start() can read
 * `endpoint` and talk to etcd. Only the process that started it (`etcd.owner`) may stop,
 * restart or signal it; in any other process those calls return -1 and do nothing. Call the
 * start functions from the main thread (or one that outlives the fixture): etcd is started
 * with a parent-death signal, so it cannot outlive a test that crashes or is killed by ctest,
 * and that signal is tied to the thread that forked it. A test that exits without stopping
 * the fixture (a failed assertion, for example) still stops etcd and removes its directory at
 * exit.
 *
 * Every wait polls a condition against a deadline; none is a fixed sleep.
 */
#ifndef BAGUA_TESTS_ETCD_FIXTURE_H
#define BAGUA_TESTS_ETCD_FIXTURE_H

#include "etcd_server.h"

#ifndef ETCD_FIXTURE_BIN
#define ETCD_FIXTURE_BIN BAGUA__ETCD_LOCAL_BIN
#endif

/* Upper bound on etcd start-up (process start to a healthy answer). */
#define ETCD_FIXTURE_START_TIMEOUT_MS BAGUA__ETCD_LOCAL_START_TIMEOUT_MS
/* How long etcd gets to exit after SIGTERM before SIGKILL. */
#define ETCD_FIXTURE_STOP_TIMEOUT_MS BAGUA__ETCD_LOCAL_STOP_TIMEOUT_MS

typedef struct {
  /* The process: etcd.pid (0 while down), etcd.owner, etcd.client_port, etcd.peer_port,
   * etcd.dir, etcd.data_dir, etcd.log_path. */
  bagua__etcd_local_t etcd;
  char endpoint[64];  /* "http://127.0.0.1:<client_port>" */
  char host_port[32]; /* "127.0.0.1:<client_port>" */
} etcd_fixture_t;

/* 1 when ETCD_FIXTURE_BIN exists and is executable. */
int etcd_fixture_available(void);

/*
 * Starts etcd and waits until it answers /health. Returns 0 on success, 77 when the etcd
 * binary is missing (after printing which Debian package provides it), -1 on failure (after
 * printing the end of etcd's log). Retries with new ports if another process took the ones
 * chosen.
 */
int etcd_fixture_try_start(etcd_fixture_t *fx);

/* etcd_fixture_try_start, exiting with 77 (skip) or 1 (failure) when it does not succeed. */
void etcd_fixture_start(etcd_fixture_t *fx);

/* Stops etcd (SIGTERM, then SIGKILL after ETCD_FIXTURE_STOP_TIMEOUT_MS) and removes the
 * directory. Safe to call twice. Returns 0, or -1 when called from another process. */
int etcd_fixture_stop(etcd_fixture_t *fx);

/* Stops the etcd process but keeps its ports and data, for outage tests. */
int etcd_fixture_down(etcd_fixture_t *fx);
/* Starts etcd again on the same ports and data dir and waits until it is healthy. */
int etcd_fixture_up(etcd_fixture_t *fx);
/* etcd_fixture_down then etcd_fixture_up. */
int etcd_fixture_restart(etcd_fixture_t *fx);

/* Sends `sig` to etcd (SIGSTOP/SIGCONT to freeze it, for example). */
int etcd_fixture_signal(etcd_fixture_t *fx, int sig);

/* Polls /health until etcd answers healthy or `timeout_ms` passes. Returns 0 or -1. */
int etcd_fixture_wait_healthy(etcd_fixture_t *fx, int timeout_ms);

/* Prints the last `max_bytes` of etcd's log to stderr (for failure diagnostics). */
void etcd_fixture_dump_log(const etcd_fixture_t *fx, long max_bytes);

/* A loopback TCP port that was free a moment ago (bind to port 0), or -1. */
int etcd_fixture_free_port(void);

/* Monotonic milliseconds, for tests that poll with deadlines. */
long long etcd_fixture_now_ms(void);

#endif
