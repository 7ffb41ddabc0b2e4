/*
 * Internal TCP socket helpers (IPv4). All blocking helpers take an absolute deadline in
 * monotonic milliseconds and an optional abort flag, so no caller can block forever.
 */
#ifndef BAGUA_COMMON_SOCK_H
#define BAGUA_COMMON_SOCK_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"
#include "common/time.h" /* the clock the socket deadlines use */

/* Reads an abort flag that another thread may set (NULL means "never aborted"). The flag is a
 * plain int so it can live in any struct; every access goes through these atomic builtins. */
static inline int bagua__flag_get(const volatile int *flag) {
  return flag && __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}
static inline void bagua__flag_set(volatile int *flag) {
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
}

/* Resolves "host" (name or dotted quad) to an IPv4 address in network order. */
bagua_status_t bagua__resolve_ipv4(const char *host, uint32_t *addr);

/* Listens on addr:port (port 0 picks a free one); returns the fd and the bound port. */
bagua_status_t bagua__listen(uint32_t addr, uint16_t port, int *fd, uint16_t *bound_port);

/*
 * A TCP port on addr that nothing listens on now, for a listener that another process will
 * open a moment later (a test's rank 0, a local etcd). Binding port 0 and closing is racy:
 * the kernel hands the same ephemeral ports to outgoing connections, so under a parallel test
 * run a connect() elsewhere can take the port before its listener binds it. This picks a
 * random port below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), where only
 * explicit binds land, and checks that it binds. Where that range starts too low to leave
 * room, or 64 tries found nothing, it falls back to the kernel's pick. Returns the port, or
 * -1 when nothing binds at all.
 */
int bagua__sock_spare_port(uint32_t addr);

/* Connects to addr:port, retrying refused connections until the deadline. */
bagua_status_t bagua__connect(uint32_t addr, uint16_t port, int64_t deadline_ms,
                              const volatile int *abort_flag, int *fd);

/* Accepts one connection before the deadline (BAGUA_ERR_TIMEOUT otherwise). */
bagua_status_t bagua__accept(int lfd, int64_t deadline_ms, const volatile int *abort_flag, int *fd);

/* Sends/receives exactly len bytes before the deadline; EOF is BAGUA_ERR_REMOTE. */
bagua_status_t bagua__send_all(int fd, const void *buf, size_t len, int64_t deadline_ms,
                               const volatile int *abort_flag);
bagua_status_t bagua__recv_all(int fd, void *buf, size_t len, int64_t deadline_ms,
                               const volatile int *abort_flag);

/* Non-blocking mode, TCP_NODELAY and the socket buffer sizes used for data streams. */
void bagua__sock_tune(int fd);
int bagua__sock_set_nonblock(int fd, int on);
/* Local address of a connected socket (network order). */
uint32_t bagua__sock_local_addr(int fd);
/* The source address the kernel would use towards remote:port (network order); sets errno and
 * returns BAGUA_ERR_SYSTEM without logging when there is no route. */
bagua_status_t bagua__route_addr_ipv4(uint32_t remote, uint16_t port, uint32_t *addr);
/*
 * The local address of the route to the first entry of an etcd endpoint list
 * ("[http://]HOST[:PORT][,...]"): the source address the kernel would use towards it, which is
 * the address peers on that network can reach this host at. A connected UDP socket gives it
 * without sending anything. Returns BAGUA_OK, or BAGUA_ERR_INVALID_ARG with a warning naming
 * the endpoint (malformed port, unresolvable host, no route).
 */
bagua_status_t bagua__route_addr(const char *endpoint, uint32_t *addr);
/* Writes "a.b.c.d" for an address in network order. */
void bagua__ipv4_str(uint32_t addr, char *out, size_t len);

#endif
