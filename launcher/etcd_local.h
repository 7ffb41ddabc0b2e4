/*
 * The private etcd bagua-launch runs when no --rdzv-endpoint is given.
 *
 * etcd runs under a small keeper process (a fork of the launcher, in its own process group so
 * a terminal's Ctrl-C does not reach it). The launcher holds the write end of a pipe to the
 * keeper; when the launcher closes it, or dies in any way (even SIGKILL), the keeper sees
 * end-of-file, stops etcd (SIGTERM, then SIGKILL) and removes the temporary directory. etcd
 * itself has a parent-death signal tied to the keeper, so it cannot outlive the keeper either.
 */
#ifndef BAGUA_LAUNCHER_ETCD_LOCAL_H
#define BAGUA_LAUNCHER_ETCD_LOCAL_H

#include <sys/types.h>

/* Upper bound on etcd start-up: process start to a healthy answer. */
#define LAUNCH_ETCD_START_TIMEOUT_MS 15000
/* How long etcd gets after SIGTERM before SIGKILL. */
#define LAUNCH_ETCD_STOP_TIMEOUT_MS 5000

typedef struct {
  pid_t keeper; /* 0 when not running */
  int ctl_fd;   /* write end of the keeper's control pipe; closing it stops etcd */
  int evt_fd;   /* read end: readable when etcd exited by itself */
  int client_port;
  char addr[64];     /* address the client URL listens on */
  char endpoint[96]; /* "ADDR:PORT" for the agents */
  char dir[64];      /* temporary directory holding data/ and etcd.log */
  char log_path[96];
} bagua__launch_etcd_t;

/*
 * Starts etcd from `bin` with its client URL on `addr` (and on 127.0.0.1 as well when `addr`
 * is another address) and waits until it is healthy. While waiting it watches `sigfd` (a
 * signalfd): a SIGINT, SIGTERM or SIGHUP there aborts the start. Returns 0 on success; the
 * signal number when a signal aborted the start; -1 with a message in err on failure (the end
 * of etcd's log is included). Nothing is left behind unless 0 is returned.
 */
int bagua__launch_etcd_start(const char *bin, const char *addr, int sigfd, bagua__launch_etcd_t *e,
                             char *err, size_t errlen);

/* 1 when etcd has exited by itself (the keeper reported it). */
int bagua__launch_etcd_died(bagua__launch_etcd_t *e);

/* Copies the last `max_bytes` of etcd's log to stderr. */
void bagua__launch_etcd_dump_log(const bagua__launch_etcd_t *e, long max_bytes);

/* Stops etcd, waits for the keeper and removes the directory. Safe to call twice. */
void bagua__launch_etcd_stop(bagua__launch_etcd_t *e);

/* Removes a directory tree (used on every exit path that owns one). */
void bagua__launch_remove_tree(const char *dir);

#endif
