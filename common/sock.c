#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "log.h"
#include "params.h"
#include "validate.h"

void bagua__ipv4_str(uint32_t addr, char *out, size_t len) {
  struct in_addr a = {.s_addr = addr};
  if (!inet_ntop(AF_INET, &a, out, (socklen_t)len)) snprintf(out, len, "?");
}

bagua_status_t bagua__resolve_ipv4(const char *host, uint32_t *addr) {
  struct in_addr a;
  if (inet_pton(AF_INET, host, &a) == 1) {
    *addr = a.s_addr;
    return BAGUA_OK;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res) {
    BAGUA_WARN("cannot resolve host \"%s\": %s (an IPv4 address or resolvable name is needed)",
               host, gai_strerror(rc));
    return BAGUA_ERR_INVALID_ARG;
  }
  *addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
  freeaddrinfo(res);
  return BAGUA_OK;
}

bagua_status_t bagua__route_addr_ipv4(uint32_t remote, uint16_t port, uint32_t *addr) {
  uint32_t local = 0;
  *addr = 0;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return BAGUA_ERR_SYSTEM;
  struct sockaddr_in sa = {
      .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = remote};
  /* A UDP connect sends nothing: it only asks the kernel for the route and its source. */
  errno = 0;
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) local = bagua__sock_local_addr(fd);
  int e = errno;
  close(fd);
  if (local == 0) {
    errno = e ? e : EADDRNOTAVAIL;
    return BAGUA_ERR_SYSTEM;
  }
  *addr = local;
  return BAGUA_OK;
}

bagua_status_t bagua__route_addr(const char *endpoint, uint32_t *addr) {
  char host[256], err[512];
  uint16_t port = 0;
  uint32_t remote = 0;
  *addr = 0;
  if (bagua__endpoint_first(endpoint, host, sizeof(host), &port, err, sizeof(err)) != BAGUA_OK) {
    BAGUA_WARN("cannot find the route to etcd: %s", err);
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CHECK(bagua__resolve_ipv4(host, &remote));
  if (bagua__route_addr_ipv4(remote, port, addr) != BAGUA_OK) {
    BAGUA_WARN("cannot find the route to etcd at %s: %s", endpoint, strerror(errno));
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

int bagua__sock_set_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void bagua__sock_tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int buf = (int)bagua__param_int(BAGUA_P_NET_SOCKBUF_BYTES);
  if (buf > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  }
  bagua__sock_set_nonblock(fd, 1);
}

uint32_t bagua__sock_local_addr(int fd) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) return 0;
  return sa.sin_addr.s_addr;
}

bagua_status_t bagua__listen(uint32_t addr, uint16_t port, int *fd, uint16_t *bound_port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    BAGUA_WARN("socket() failed: %s", strerror(errno));
    return BAGUA_ERR_SYSTEM;
  }
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = addr};
  if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(s, 1024) != 0) {
    char ip[32];
    bagua__ipv4_str(addr, ip, sizeof(ip));
    BAGUA_WARN("cannot listen on %s:%u: %s", ip, (unsigned)port, strerror(errno));
    close(s);
    return BAGUA_ERR_SYSTEM;
  }
  socklen_t len = sizeof(sa);
  getsockname(s, (struct sockaddr *)&sa, &len);
  if (bound_port) *bound_port = ntohs(sa.sin_port);
  bagua__sock_set_nonblock(s, 1);
  *fd = s;
  return BAGUA_OK;
}

/* Binds `port` on addr (0: a port the kernel picks) and returns the port bound, or -1. */
static int try_bind(uint32_t addr, int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_in sa = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = addr};
  socklen_t len = sizeof(sa);
  int ok = bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
           getsockname(s, (struct sockaddr *)&sa, &len) == 0;
  close(s);
  return ok ? ntohs(sa.sin_port) : -1;
}

int bagua__sock_spare_port(uint32_t addr) {
  int low = 32768;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%d", &low) != 1) low = 32768;
    fclose(f);
  }
  /* Up to 12000 ports under the ephemeral range, never the privileged ones. A system whose
   * ephemeral range starts near 1024 leaves no such room: there the kernel's pick is all
   * there is. */
  int base = low - 12000 < 1024 ? 1024 : low - 12000;
  if (low - base < 256) return try_bind(addr, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned seed = (unsigned)ts.tv_nsec ^ ((unsigned)getpid() << 16) ^ (unsigned)ts.tv_sec;
  for (int i = 0; i < 64; i++) {
    int port = try_bind(addr, base + (int)(rand_r(&seed) % (unsigned)(low - base)));
    if (port > 0) return port;
  }
  return try_bind(addr, 0);
}

/* Waits for `events` on fd in slices of at most 50 ms so that the abort flag is honoured. */
static bagua_status_t wait_fd(int fd, short events, int64_t deadline_ms,
                              const volatile int *abort_flag) {
  for (;;) {
    if (bagua__flag_get(abort_flag)) return BAGUA_ERR_ABORTED;
    int64_t left = deadline_ms - bagua__now_ms();
    if (left <= 0) return BAGUA_ERR_TIMEOUT;
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, left > 50 ? 50 : (int)left);
    if (rc > 0) return BAGUA_OK;
    if (rc < 0 && errno != EINTR) return BAGUA_ERR_SYSTEM;
  }
}

bagua_status_t bagua__connect(uint32_t addr, uint16_t port, int64_t deadline_ms,
                              const volatile int *abort_flag, int *fd) {
  char ip[32];
  bagua__ipv4_str(addr, ip, sizeof(ip));
  int delay_ms = 10;
  for (;;) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return BAGUA_ERR_SYSTEM;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = addr};
    int rc = connect(s, (struct sockaddr *)&sa, sizeof(sa));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      bagua_status_t st = wait_fd(s, POLLOUT, deadline_ms, abort_flag);
      if (st != BAGUA_OK) {
        close(s);
        if (st == BAGUA_ERR_TIMEOUT)
          BAGUA_WARN("connecting to %s:%u timed out", ip, (unsigned)port);
        return st;
      }
      socklen_t len = sizeof(err);
      getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      bagua__sock_tune(s);
      *fd = s;
      return BAGUA_OK;
    }
    close(s);
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH) {
      BAGUA_WARN("connect to %s:%u failed: %s", ip, (unsigned)port, strerror(err));
      return BAGUA_ERR_SYSTEM;
    }
    /* The listener may not be up yet (rank 0 starts later): back off and retry. */
    if (bagua__flag_get(abort_flag)) return BAGUA_ERR_ABORTED;
    if (bagua__now_ms() + delay_ms >= deadline_ms) {
      BAGUA_WARN("could not connect to %s:%u before the timeout: %s", ip, (unsigned)port,
                 strerror(err));
      return BAGUA_ERR_TIMEOUT;
    }
    struct timespec ts = {0, delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 200) delay_ms *= 2;
  }
}

bagua_status_t bagua__accept(int lfd, int64_t deadline_ms, const volatile int *abort_flag,
                             int *fd) {
  for (;;) {
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s >= 0) {
      bagua__sock_tune(s);
      *fd = s;
      return BAGUA_OK;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      BAGUA_WARN("accept failed: %s", strerror(errno));
      return BAGUA_ERR_SYSTEM;
    }
    BAGUA_CHECK(wait_fd(lfd, POLLIN, deadline_ms, abort_flag));
  }
}

bagua_status_t bagua__send_all(int fd, const void *buf, size_t len, int64_t deadline_ms,
                               const volatile int *abort_flag) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      BAGUA_CHECK(wait_fd(fd, POLLOUT, deadline_ms, abort_flag));
      continue;
    }
    return BAGUA_ERR_REMOTE;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__recv_all(int fd, void *buf, size_t len, int64_t deadline_ms,
                               const volatile int *abort_flag) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return BAGUA_ERR_REMOTE;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      BAGUA_CHECK(wait_fd(fd, POLLIN, deadline_ms, abort_flag));
      continue;
    }
    return BAGUA_ERR_REMOTE;
  }
  return BAGUA_OK;
}
