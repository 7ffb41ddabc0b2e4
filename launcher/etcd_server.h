/*
 * A private single-member etcd server: the one helper that bagua-launch (for standalone jobs)
 * and the test fixture (tests/etcd/etcd_fixture.h) use to run etcd-server themselves.
 *
 * Start picks free ports, makes a temporary directory holding data/ and etcd.log, runs etcd
 * with its output in that log and waits, bounded by a deadline, until GET /health answers
 * healthy. An etcd that exits during start-up (another process took a port between the probe
 * and etcd's bind, for example) is retried on fresh ports and a fresh directory. Stop sends
 * SIGTERM (and SIGCONT, so a frozen etcd can act on it), waits a bounded time, then sends
 * SIGKILL, and removes the directory. Nothing here blocks forever.
 *
 * etcd runs in one of two ways:
 *  - directly: etcd is a child of the caller with a parent-death signal, so it cannot outlive
 *    the thread that started it, and it can be stopped and started again on the same ports
 *    and data (bagua__etcd_local_down/up) or signalled (SIGSTOP to freeze it, for example);
 *  - under a keeper (opts.keeper): etcd runs under a small keeper process (a fork of the
 *    caller, in its own process group so a terminal's Ctrl-C does not reach it). The caller
 *    holds the write end of a pipe to the keeper; when the caller closes it, or dies in any
 *    way (even SIGKILL), the keeper sees end-of-file, stops etcd and removes the directory.
 *    etcd's parent-death signal is tied to the keeper, so it cannot outlive the keeper either.
 *    Down, up and signal are not supported in this mode.
 *
 * The state is plain data: processes forked after the start can read the endpoint. Only the
 * process that started etcd (`owner`) may stop, restart or signal it; in any other process
 * those calls return BAGUA_ERR_INVALID_USAGE and do nothing. None of the functions is
 * thread-safe for one state; different states are independent. Failures are described in
 * `err` (the helper prints nothing but the end of etcd's log when a start fails).
 */
#ifndef BAGUA_LAUNCHER_ETCD_SERVER_H
#define BAGUA_LAUNCHER_ETCD_SERVER_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "bagua/error.h"

/* The etcd binary of the Debian package etcd-server. */
#define BAGUA__ETCD_LOCAL_BIN "/usr/bin/etcd"
/* Default upper bound on one start attempt: process start to a healthy answer. */
#define BAGUA__ETCD_LOCAL_START_TIMEOUT_MS 15000
/* Default time etcd gets to exit after SIGTERM before SIGKILL. */
#define BAGUA__ETCD_LOCAL_STOP_TIMEOUT_MS 5000
/* Start attempts when etcd keeps exiting during start-up. */
#define BAGUA__ETCD_LOCAL_ATTEMPTS 3

typedef struct {
  const char *bin;        /* etcd executable; NULL: BAGUA__ETCD_LOCAL_BIN */
  const char *addr;       /* IPv4 address of the client URL; NULL: 127.0.0.1. etcd listens on
                             127.0.0.1 as well, so local clients can always use loopback. */
  const char *name;       /* member name, also used in the cluster token; NULL: "bagua" */
  const char *dir_prefix; /* the temporary directory is PREFIX-XXXXXX; NULL: /tmp/bagua-etcd */
  int keeper;             /* 1: run etcd under a keeper process (see above) */
  int sigfd;              /* a signalfd watched during start: a SIGINT, SIGTERM or SIGHUP read
                             there aborts the start; -1: none */
  int start_timeout_ms;   /* per attempt; 0: BAGUA__ETCD_LOCAL_START_TIMEOUT_MS */
  int stop_timeout_ms;    /* SIGTERM to SIGKILL; 0: BAGUA__ETCD_LOCAL_STOP_TIMEOUT_MS */
  int client_port;        /* the client URL's port; 0: a free one. A given port is tried once
                             (a port someone holds does not free itself), and an etcd that
                             exits during start-up then leaves its log to the caller. */
  /* A member of a larger cluster (the embedded rendezvous grows to three): the peer URL's
   * address and port (NULL/0: 127.0.0.1 and a free port), and the cluster to join, as
   * "name=http://ip:port,...", this member included (NULL: a new cluster of this member). A
   * joining member counts as started once it answers HTTP at all: a learner reports itself
   * unhealthy until it is promoted. */
  const char *peer_addr;
  int peer_port;
  const char *initial_cluster;
} bagua__etcd_local_opts_t;

/* Options with every default; set the fields that differ after initialising with this. */
#define BAGUA__ETCD_LOCAL_OPTS_INIT \
  { .sigfd = -1 }

typedef struct {
  pid_t owner;  /* the process that started etcd; 0 before the first start */
  pid_t pid;    /* etcd when run directly; 0 while it is down, and always under a keeper */
  pid_t keeper; /* the keeper process; 0 when not running or run directly */
  int ctl_fd;   /* keeper: write end of the control pipe (closing it stops etcd); else -1 */
  int evt_fd;   /* keeper: read end of the event pipe, readable once etcd exited; else -1 */
  int client_port;
  int peer_port; /* on 127.0.0.1 */
  int start_timeout_ms;
  int stop_timeout_ms;
  int signo;                  /* the signal that aborted the last start (BAGUA_ERR_ABORTED) */
  char addr[64];              /* address the client URL listens on */
  char endpoint[96];          /* "ADDR:PORT" of the client URL */
  char name[32];              /* member name */
  char peer_addr[64];         /* address of the peer URL */
  char initial_cluster[1024]; /* the cluster joined; "" for a new one */
  char dir[128];              /* temporary directory holding data/ and etcd.log; "" once removed */
  char data_dir[160];         /* DIR/data */
  char log_path[160];         /* DIR/etcd.log */
  char bin[PATH_MAX];
  char err[512]; /* why the last failing call failed */
} bagua__etcd_local_t;

/* 1 when `bin` (NULL: BAGUA__ETCD_LOCAL_BIN) exists and is executable. */
int bagua__etcd_local_available(const char *bin);

/*
 * Starts etcd as `opts` says and waits until it is healthy; blocks at most
 * BAGUA__ETCD_LOCAL_ATTEMPTS start timeouts plus the stop timeouts. Returns BAGUA_OK, or on
 * failure (nothing is left behind, and `e->err` says why):
 *  - BAGUA_ERR_INVALID_ARG: the binary cannot be run, or an option does not fit;
 *  - BAGUA_ERR_ABORTED: a stop signal arrived on opts.sigfd (its number is in e->signo);
 *  - BAGUA_ERR_TIMEOUT: etcd did not answer healthy within the start timeout;
 *  - BAGUA_ERR_REMOTE: etcd exited during start-up on every attempt;
 *  - BAGUA_ERR_SYSTEM: no temporary directory, free port, pipe or process.
 * The end of etcd's log is copied to stderr when etcd ran but did not become healthy.
 */
bagua_status_t bagua__etcd_local_start(bagua__etcd_local_t *e,
                                       const bagua__etcd_local_opts_t *opts);

/*
 * Polls GET /health until etcd answers healthy or `timeout_ms` passes. Returns BAGUA_OK,
 * BAGUA_ERR_TIMEOUT, or BAGUA_ERR_REMOTE at once when etcd has exited.
 */
bagua_status_t bagua__etcd_local_wait_healthy(bagua__etcd_local_t *e, int timeout_ms);

/* 1 when etcd is not running any more: it exited by itself (reaped here when run directly, as
 * the keeper reported under a keeper) or was never started. Never blocks. */
int bagua__etcd_local_exited(bagua__etcd_local_t *e);

/* Run directly only: stops etcd (as stop does) but keeps its ports, data and log. */
bagua_status_t bagua__etcd_local_down(bagua__etcd_local_t *e);
/* Run directly only: starts etcd again on the same ports and data and waits until it is
 * healthy (one start timeout); on failure etcd stays down. */
bagua_status_t bagua__etcd_local_up(bagua__etcd_local_t *e);
/* Run directly only: sends `sig` to etcd. */
bagua_status_t bagua__etcd_local_signal(bagua__etcd_local_t *e, int sig);

/* Stops etcd (and its keeper) and removes the directory. Safe to call twice, and on a state
 * whose start failed. Blocks at most about twice the stop timeout plus one second. */
bagua_status_t bagua__etcd_local_stop(bagua__etcd_local_t *e);

/* Copies the last `max_bytes` of etcd's log to stderr, between two marker lines. */
void bagua__etcd_local_dump_log(const bagua__etcd_local_t *e, long max_bytes);

/* A TCP port on `addr` (NULL: 127.0.0.1) that was free a moment ago, or -1; below the
 * ephemeral range (bagua__sock_spare_port). */
int bagua__etcd_local_free_port(const char *addr);

/* SIGTERM and SIGCONT to a child `pid`, a wait of up to `stop_timeout_ms`, then SIGKILL and a
 * second such wait. Returns 1 once the child has been reaped, 0 if it could not be. */
int bagua__etcd_local_kill(pid_t pid, int stop_timeout_ms);

/* Removes a directory tree; does nothing for NULL or "". */
void bagua__etcd_local_remove_tree(const char *dir);

#endif
