/*
 * The rendezvous one node hosts (embedded.h).
 */
#include "embedded.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/output.h"
#include "common/rdzv/rdzv.h"
#include "common/sock.h"
#include "common/time.h"
#include "common/validate.h"
#include "status.h"

/* Pause between two probes of an etcd that does not answer yet. */
#define PROBE_PAUSE_MS 200
/* How long one connect probe waits for a host that does not answer at all. */
#define CONNECT_PROBE_MS 500

/* 1 when a listener could bind `ip`:`port` now (nobody holds it). */
static int port_free(uint32_t ip, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = ip};
  int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return ok;
}

/* An exclusive lock for hosting ip:port on this machine, held while this launcher hosts the
 * etcd there: a Unix socket bound in the abstract namespace ("@bagua-launch-etcd-IP-PORT"),
 * which the kernel releases however the holder ends and which leaves no file behind. Abstract
 * names are per network namespace, as addresses are. -1 when another process holds it. */
static int host_lock(uint32_t ip, uint16_t port) {
  char ipstr[64];
  bagua__ipv4_str(ip, ipstr, sizeof(ipstr));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "bagua-launch-etcd-%s-%u", ipstr,
                   (unsigned)port);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&sa,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Waits up to `ms` for a stop signal on `sigfd`: its number, or 0 (SIGCHLD is not one). */
static int wait_signal(int sigfd, int ms) {
  struct pollfd p = {.fd = sigfd, .events = POLLIN};
  if (sigfd < 0 || poll(&p, 1, ms) <= 0) return 0;
  struct signalfd_siginfo si;
  if (read(sigfd, &si, sizeof(si)) != (ssize_t)sizeof(si)) return 0;
  return si.ssi_signo == SIGCHLD ? 0 : (int)si.ssi_signo;
}

/* 1 when a TCP connection to ip:port is accepted within CONNECT_PROBE_MS. */
static int listening(uint32_t ip, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return 1; /* let the etcd client say what is wrong */
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = ip};
  int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  if (!ok && errno == EINPROGRESS) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    ok = poll(&p, 1, CONNECT_PROBE_MS) == 1 &&
         getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  close(fd);
  return ok;
}

int bagua__launch_endpoint_listens(const char *endpoint) {
  char host[256], what[256];
  uint16_t port = 0;
  uint32_t ip = 0;
  if (bagua__endpoint_first(endpoint, host, sizeof(host), &port, what, sizeof(what)) != BAGUA_OK ||
      bagua__resolve_ipv4(host, &ip) != BAGUA_OK)
    return 1; /* the etcd client says what is wrong */
  return listening(ip, port);
}

/* Waits until an etcd answers at the endpoint (the job's status key can be read). */
static int join(const bagua__launch_config_t *cfg, int sigfd, char *err, size_t errlen) {
  const char *endpoint = cfg->v[LS_ENDPOINT].s;
  int64_t t0 = bagua__now_ms();
  int64_t deadline = t0 + cfg->v[LS_RDZV_TIMEOUT].i * 1000;
  int per_call = (int)cfg->v[LS_ETCD_TIMEOUT_MS].i;
  if (per_call > 1000) per_call = 1000;
  bagua__etcd_t *c = NULL;
  if (bagua__etcd_create(endpoint, per_call, &c) != BAGUA_OK) {
    snprintf(err, errlen, "bagua-launch: cannot create an etcd client for %s", endpoint);
    return -1;
  }
  bagua__etcd_set_interrupt_fd(c, sigfd);
  int said = 0, rc = -1;
  bagua_status_t last = BAGUA_OK;
  char host[256], what[256];
  uint16_t port = 0;
  uint32_t ip = 0;
  int resolved =
      bagua__endpoint_first(endpoint, host, sizeof(host), &port, what, sizeof(what)) == BAGUA_OK &&
      bagua__resolve_ipv4(host, &ip) == BAGUA_OK;
  for (;;) {
    bagua__launch_status_t st;
    /* Until something listens there, a plain connect says so without the etcd client's
     * warning for each refused request. */
    if (resolved && !listening(ip, port))
      last = BAGUA_ERR_CURL;
    else
      last = bagua__launch_read_status(c, cfg->v[LS_JOB_ID].s, &st);
    if (last == BAGUA_OK) {
      BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "the job's etcd at %s answered after %lld ms", endpoint,
                 (long long)(bagua__now_ms() - t0));
      rc = 0;
      break;
    }
    int sig = wait_signal(sigfd, last == BAGUA_ERR_ABORTED ? 0 : PROBE_PAUSE_MS);
    if (sig) {
      rc = sig;
      break;
    }
    if (bagua__now_ms() >= deadline) {
      snprintf(err, errlen,
               "bagua-launch: no etcd answered at %s within the rendezvous timeout (%lld s; last: "
               "%s); accepted: start the node at that address too (it hosts the job's etcd), or "
               "a longer --rdzv-timeout",
               endpoint, (long long)cfg->v[LS_RDZV_TIMEOUT].i, bagua_err_name(last));
      break;
    }
    if (!said) {
      bagua__say(LAUNCH_TOOL,
                 "waiting for the job's etcd at %s (the node at that address hosts it)", endpoint);
      said = 1;
    }
  }
  bagua__etcd_destroy(c);
  return rc;
}

int bagua__launch_embedded_open(const bagua__launch_config_t *cfg, int sigfd,
                                bagua__launch_etcd_t *priv, int *hosting, int *lock_fd, char *err,
                                size_t errlen) {
  char host[256], what[256], ipstr[64];
  uint16_t port = 0;
  uint32_t ip = 0;
  *hosting = 0;
  *lock_fd = -1;
  if (bagua__endpoint_first(cfg->v[LS_ENDPOINT].s, host, sizeof(host), &port, what, sizeof(what)) !=
      BAGUA_OK) {
    snprintf(err, errlen, "bagua-launch: the rendezvous endpoint: %s", what);
    return -1;
  }
  /* A node that names its address (--node-addr, torchrun's --local-addr) hosts only when the
   * endpoint is that address; any other node when the endpoint is one of this machine's. */
  const char *mine = cfg->v[LS_NODE_ADDR].s;
  uint32_t my_ip = 0;
  int here = mine[0]
                 ? bagua__resolve_ipv4(mine, &my_ip) == BAGUA_OK &&
                       bagua__resolve_ipv4(host, &ip) == BAGUA_OK && ip == my_ip
                 : bagua__launch_host_is_local(host) && bagua__resolve_ipv4(host, &ip) == BAGUA_OK;
  /* Two launches on one machine race for the port: a lock per address and port picks the
   * one that hosts (etcd's health check cannot tell one etcd from another). */
  if (here && (*lock_fd = host_lock(ip, port)) >= 0 && port_free(ip, port)) {
    bagua__ipv4_str(ip, ipstr, sizeof(ipstr));
    char serr[LAUNCH_ERR_LEN];
    /* The peer URL is on the node's address too: the etcd grows to three members on other
     * nodes (embedded_members.c). */
    bagua__etcd_local_opts_t o = BAGUA__ETCD_LOCAL_OPTS_INIT;
    o.bin = cfg->v[LS_ETCD_BIN].s;
    o.addr = ipstr;
    o.client_port = port;
    o.peer_addr = ipstr;
    o.sigfd = sigfd;
    int r = bagua__launch_etcd_start_opts(&o, priv, serr, sizeof(serr));
    if (r != 0) {
      bagua__launch_embedded_unlock(*lock_fd);
      *lock_fd = -1;
    }
    if (r > 0) return r;
    if (r == 0) {
      *hosting = 1;
      bagua__say(LAUNCH_TOOL, "hosting the job's etcd at %s:%u (the other nodes join it)", ipstr,
                 (unsigned)port);
      return 0;
    }
    /* Another launcher took the port between the probe and etcd's bind: join its etcd. */
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "not hosting the job's etcd at %s:%u (%s); joining it", ipstr,
               (unsigned)port, serr);
  }
  return join(cfg, sigfd, err, errlen);
}

int bagua__launch_embedded_linger(const bagua__launch_config_t *cfg, bagua__etcd_t *etcd,
                                  int sigfd) {
  char prefix[BAGUA_RDZV_KEY_MAX];
  if (bagua__rdzv_key(prefix, sizeof(prefix), cfg->v[LS_JOB_ID].s, BAGUA__RDZV_KEY_NODES_DIR, 0,
                      NULL, 0) != 0)
    return 0;
  int64_t deadline = bagua__now_ms() + cfg->v[LS_LEASE_TTL].i * 1000 + cfg->v[LS_GRACE_MS].i + 5000;
  int said = 0;
  size_t n = 0;
  for (;;) {
    bagua__etcd_kv_t *kvs = NULL;
    n = 0;
    bagua_status_t st = bagua__etcd_range_prefix(etcd, prefix, &kvs, &n, NULL);
    bagua__etcd_kvs_free(kvs, n);
    if (st != BAGUA_OK || n == 0 || bagua__now_ms() >= deadline) break;
    if (!said) {
      BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "keeping the job's etcd while %zu other node(s) finish", n);
      said = 1;
    }
    if (wait_signal(sigfd, PROBE_PAUSE_MS)) break;
  }
  return (int)n;
}

void bagua__launch_embedded_unlock(int lock_fd) {
  if (lock_fd >= 0) close(lock_fd);
}
