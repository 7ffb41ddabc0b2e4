/*
 * Picking a TCP port for a rendezvous that has not started yet (a bootstrap address that
 * rank 0 publishes before it listens).
 *
 * Threading: no state; safe from any thread.
 */
#ifndef BAGUA_PORT_H
#define BAGUA_PORT_H

#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A TCP port that binds on `host` now (NULL or "" for every address), below the kernel's
 * ephemeral range where there is room: port 0's pick would come from that range, where
 * outgoing connections can take it before the listener binds. The port is free, not
 * reserved. Returns BAGUA_ERR_INVALID_ARG for a host that does not resolve to an IPv4
 * address, BAGUA_ERR_SYSTEM when no port binds.
 */
BAGUA_EXTERN bagua_status_t bagua_spare_port(const char *host, int *port);

#ifdef __cplusplus
}
#endif
#endif
