/*
 * The private etcd bagua-launch runs when no --rdzv-endpoint is given: the common helper
 * (etcd_server.h) with etcd under a keeper process, so that etcd is stopped and its
 * directory removed however the launcher ends (even by SIGKILL).
 */
#ifndef BAGUA_LAUNCHER_ETCD_LOCAL_H
#define BAGUA_LAUNCHER_ETCD_LOCAL_H

#include <stddef.h>

#include "etcd_server.h"

/* The launcher uses the helper's state as is: `endpoint` ("ADDR:PORT") for the agents,
 * `client_port` for its own loopback client, `evt_fd` (readable once etcd exited) to poll. */
typedef bagua__etcd_local_t bagua__launch_etcd_t;

/*
 * Starts etcd from `bin` with its client URL on `addr` (and on 127.0.0.1 as well when `addr`
 * is another address), on `port` (0: a free one), and waits until it is healthy. While waiting it
 * watches `sigfd` (a signalfd): a SIGINT, SIGTERM or SIGHUP there aborts the start. Returns 0 on
 * success; the signal number when a signal aborted the start; -1 with a message in err on failure
 * (the end of etcd's log is included). Nothing is left behind unless 0 is returned.
 */
int bagua__launch_etcd_start(const char *bin, const char *addr, int port, int sigfd,
                             bagua__launch_etcd_t *e, char *err, size_t errlen);

/* The same with every option of the helper (bin, addr, ports, peer address, cluster to join,
 * sigfd); the launcher sets the name when none is given, the directory and the keeper. */
int bagua__launch_etcd_start_opts(bagua__etcd_local_opts_t *opts, bagua__launch_etcd_t *e,
                                  char *err, size_t errlen);

/* 1 when etcd has exited by itself (the keeper reported it). */
static inline int bagua__launch_etcd_died(bagua__launch_etcd_t *e) {
  return bagua__etcd_local_exited(e);
}

/* Copies the last `max_bytes` of etcd's log to stderr. */
static inline void bagua__launch_etcd_dump_log(const bagua__launch_etcd_t *e, long max_bytes) {
  bagua__etcd_local_dump_log(e, max_bytes);
}

/* Stops etcd, waits for the keeper and removes the directory. Safe to call twice. */
static inline void bagua__launch_etcd_stop(bagua__launch_etcd_t *e) {
  (void)bagua__etcd_local_stop(e);
}

#endif
