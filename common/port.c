/* bagua_spare_port (include/bagua/port.h) over the socket helpers. */
#include "bagua/port.h"

#include <stdint.h>

#include "common/log.h"
#include "common/sock.h"

bagua_status_t bagua_spare_port(const char *host, int *port) {
  if (!port) {
    BAGUA_WARN("bagua_spare_port: port is NULL");
    return BAGUA_ERR_INVALID_ARG;
  }
  uint32_t addr = 0; /* INADDR_ANY */
  if (host && host[0] && bagua__resolve_ipv4(host, &addr) != BAGUA_OK) {
    BAGUA_WARN("bagua_spare_port: host \"%s\" does not resolve to an IPv4 address", host);
    return BAGUA_ERR_INVALID_ARG;
  }
  int p = bagua__sock_spare_port(addr);
  if (p < 0) {
    BAGUA_WARN("bagua_spare_port: no TCP port binds on \"%s\"", host && host[0] ? host : "*");
    return BAGUA_ERR_SYSTEM;
  }
  *port = p;
  return BAGUA_OK;
}
