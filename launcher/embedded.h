/*
 * A rendezvous with no etcd to run (torchrun's c10d and static backends across nodes): the
 * node whose address the endpoint names hosts the job's etcd on that port, as a private etcd
 * under a keeper, and every other node joins it. Two bagua-launch commands on one machine
 * (both "at" the address) race for the port: the one that binds it hosts, the other joins.
 *
 * The hosting launcher keeps its etcd after its own agents end until the other nodes'
 * registrations are gone (they revoke their leases as they exit) or a lease TTL and its grace
 * have passed, so a node that finishes a moment later still reaches the rendezvous. The etcd
 * has one member: the job ends with the node that hosts it (docs/launcher.md, "A rendezvous
 * with no etcd to run").
 */
#ifndef BAGUA_LAUNCHER_EMBEDDED_H
#define BAGUA_LAUNCHER_EMBEDDED_H

#include <stddef.h>

#include "common/etcd/etcd.h"
#include "etcd_local.h"
#include "launch.h"

/*
 * Hosts or joins the rendezvous at cfg's endpoint. When this machine has the endpoint's
 * address and its port is free, starts etcd there into `priv` and sets *hosting; otherwise
 * waits, up to the rendezvous timeout, until an etcd answers at the endpoint. Signals on
 * `sigfd` (a signalfd of SIGINT, SIGTERM and SIGHUP) abort either. *lock_fd gets the lock
 * that makes this launcher the machine's one host of that address and port (-1 when not
 * hosting), which the caller releases with bagua__launch_embedded_unlock after stopping etcd.
 * Returns 0; the signal number when one arrived; -1 with a message in err when no etcd answered in
 * time.
 */
int bagua__launch_embedded_open(const bagua__launch_config_t *cfg, int sigfd,
                                bagua__launch_etcd_t *priv, int *hosting, int *lock_fd, char *err,
                                size_t errlen);

/* 0 when nothing accepts a TCP connection at the first HOST:PORT of `endpoint` (refused, or no
 * answer within a short probe), 1 otherwise or when it does not resolve: a probe that costs no
 * etcd request and logs nothing. */
int bagua__launch_endpoint_listens(const char *endpoint);

/* Releases the lock bagua__launch_embedded_open took (-1: nothing to do). */
void bagua__launch_embedded_unlock(int lock_fd);

/*
 * The hosting launcher, once its own agents have ended: waits until no node of the job is
 * registered in `etcd`, at most the lease TTL plus the stop grace and 5 s, or until a signal
 * is readable on `sigfd`. Returns the number of nodes still registered at the end.
 */
int bagua__launch_embedded_linger(const bagua__launch_config_t *cfg, bagua__etcd_t *etcd,
                                  int sigfd);

/* The host's grower (embedded_members.c): a thread that adds the members joining launchers
 * offer, as learners, and promotes them, up to three. `endpoint` reaches the host's etcd. */
typedef struct bagua__launch_grower bagua__launch_grower_t;
int bagua__launch_grower_start(const bagua__launch_config_t *cfg, const char *endpoint,
                               bagua__launch_grower_t **out);
/* Stops the thread and frees it. NULL ok. */
void bagua__launch_grower_stop(bagua__launch_grower_t *g);

/*
 * A joining launcher, once the host's etcd answers: a thread offers a member on this node
 * (keyed by `node_id`) and, when the host answers, starts it into `member`. Writes into
 * `endpoints` the list the agents get: the endpoint, this node's member-to-be, then every
 * member known now. Never fails the job: on any error the list is the endpoint alone and *out
 * NULL. Returns 0.
 */
typedef struct bagua__launch_member bagua__launch_member_t;
int bagua__launch_member_start(const bagua__launch_config_t *cfg, const char *node_id,
                               bagua__launch_etcd_t *member, char *endpoints, size_t len,
                               bagua__launch_member_t **out);
/* Stops the thread (NULL ok); 1 when the member's etcd runs, which the caller stops once it no
 * longer needs it. */
int bagua__launch_member_stop(bagua__launch_member_t *m);

#endif
