/*
 * A small HTTP/1.1 client for the lease keeper's renewals (raw.h).
 *
 * One persistent connection; the request goes out in one send, the reply is read until its
 * end (Content-Length, or chunked as the gateway streams a keep-alive reply). Nothing else:
 * no redirects, no proxies, no TLS; a reply it does not understand ends the connection with
 * BAGUA_ERR_CURL (or BAGUA_ERR_ETCD for a malformed body), and the keeper's next attempt
 * connects afresh.
 */
#include "raw.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"

/* A reply head (status line and headers) longer than this is refused. */
#define HEAD_MAX 16384

struct bagua__etcd_raw {
  char host[256], port[16];
  int fd;      /* the connection, -1 when there is none */
  int wake_fd; /* eventfd: readable while an interrupt is pending */
  char in[HEAD_MAX];
  size_t inlen; /* bytes received and not yet consumed */
};

int bagua__etcd_raw_parse(const char *endpoint, char *host, size_t hlen, char *port, size_t plen) {
  const char *p = endpoint;
  if (strncmp(p, "http://", 7) != 0) return -1;
  p += 7;
  const char *colon = strrchr(p, ':');
  if (!colon || colon == p || strchr(p, '/') || strchr(p, '[') || strchr(p, '@')) return -1;
  size_t n = (size_t)(colon - p), m = strlen(colon + 1);
  if (n >= hlen || m == 0 || m >= plen || strspn(colon + 1, "0123456789") != m) return -1;
  memcpy(host, p, n);
  host[n] = '\0';
  memcpy(port, colon + 1, m + 1);
  return 0;
}

bagua_status_t bagua__etcd_raw_create(const char *endpoint, bagua__etcd_raw_t **out) {
  *out = NULL;
  bagua__etcd_raw_t *r = calloc(1, sizeof(*r));
  if (!r) return BAGUA_ERR_NO_MEMORY;
  if (bagua__etcd_raw_parse(endpoint, r->host, sizeof(r->host), r->port, sizeof(r->port)) != 0) {
    free(r);
    return BAGUA_ERR_NOT_SUPPORTED;
  }
  r->fd = -1;
  r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (r->wake_fd < 0) {
    free(r);
    return BAGUA_ERR_SYSTEM;
  }
  *out = r;
  return BAGUA_OK;
}

static void drop(bagua__etcd_raw_t *r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
  r->inlen = 0;
}

void bagua__etcd_raw_destroy(bagua__etcd_raw_t *r) {
  if (!r) return;
  drop(r);
  close(r->wake_fd);
  free(r);
}

void bagua__etcd_raw_interrupt(bagua__etcd_raw_t *r, int on) {
  if (on) {
    uint64_t one = 1;
    ssize_t w = write(r->wake_fd, &one, sizeof(one));
    (void)w;
  } else {
    uint64_t v;
    ssize_t n = read(r->wake_fd, &v, sizeof(v));
    (void)n;
  }
}

/* Waits until fd is ready for `events`, the deadline, or an interrupt. */
static bagua_status_t wait_fd(bagua__etcd_raw_t *r, int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = bagua__ms_left(deadline);
    if (left <= 0) return BAGUA_ERR_TIMEOUT;
    struct pollfd p[2] = {{fd, events, 0}, {r->wake_fd, POLLIN, 0}};
    int rc = poll(p, 2, (int)left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return BAGUA_ERR_SYSTEM;
    if (p[1].revents) return BAGUA_ERR_ABORTED;
    if (rc > 0) return BAGUA_OK;
  }
}

static bagua_status_t connect_to(bagua__etcd_raw_t *r, int64_t deadline) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(r->host, r->port, &hints, &ai) != 0 || !ai) return BAGUA_ERR_CURL;
  bagua_status_t st = BAGUA_ERR_CURL;
  for (struct addrinfo *a = ai; a && st != BAGUA_OK; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen), err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      st = wait_fd(r, fd, POLLOUT, deadline);
      socklen_t len = sizeof(err);
      if (st == BAGUA_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (st != BAGUA_OK) {
        close(fd);
        if (st == BAGUA_ERR_ABORTED || st == BAGUA_ERR_TIMEOUT) break;
        st = BAGUA_ERR_CURL;
        continue;
      }
    }
    if (err != 0) {
      close(fd);
      st = BAGUA_ERR_CURL;
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    r->fd = fd;
    st = BAGUA_OK;
  }
  freeaddrinfo(ai);
  return st;
}

static bagua_status_t send_all(bagua__etcd_raw_t *r, const char *p, size_t n, int64_t deadline) {
  while (n > 0) {
    ssize_t w = send(r->fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return BAGUA_ERR_CURL;
    bagua_status_t st = wait_fd(r, r->fd, POLLOUT, deadline);
    if (st != BAGUA_OK) return st;
  }
  return BAGUA_OK;
}

/* Receives more bytes into r->in. */
static bagua_status_t fill(bagua__etcd_raw_t *r, int64_t deadline) {
  if (r->inlen == sizeof(r->in)) return BAGUA_ERR_CURL;
  for (;;) {
    ssize_t n = recv(r->fd, r->in + r->inlen, sizeof(r->in) - r->inlen, 0);
    if (n > 0) {
      r->inlen += (size_t)n;
      return BAGUA_OK;
    }
    if (n == 0) return BAGUA_ERR_CURL; /* closed by etcd */
    if (errno != EAGAIN && errno != EINTR) return BAGUA_ERR_CURL;
    bagua_status_t st = wait_fd(r, r->fd, POLLIN, deadline);
    if (st != BAGUA_OK) return st;
  }
}

static void consume(bagua__etcd_raw_t *r, size_t n) {
  memmove(r->in, r->in + n, r->inlen - n);
  r->inlen -= n;
}

/* Takes the next `n` bytes (n <= sizeof(r->in)) into the reply. */
static bagua_status_t take(bagua__etcd_raw_t *r, size_t n, etcd_buf_t *reply, int64_t deadline) {
  while (n > 0) {
    if (r->inlen == 0) {
      bagua_status_t st = fill(r, deadline);
      if (st != BAGUA_OK) return st;
    }
    size_t k = r->inlen < n ? r->inlen : n;
    if (bagua__etcd_buf_append(reply, r->in, k) != 0) return BAGUA_ERR_NO_MEMORY;
    consume(r, k);
    n -= k;
  }
  return BAGUA_OK;
}

/* One CRLF-terminated line (without it) of at most `max` bytes into line[]. */
static bagua_status_t read_line(bagua__etcd_raw_t *r, char *line, size_t max, int64_t deadline) {
  for (;;) {
    char *nl = memchr(r->in, '\n', r->inlen);
    if (nl) {
      size_t n = (size_t)(nl - r->in);
      size_t len = n > 0 && r->in[n - 1] == '\r' ? n - 1 : n;
      if (len >= max) return BAGUA_ERR_CURL;
      memcpy(line, r->in, len);
      line[len] = '\0';
      consume(r, n + 1);
      return BAGUA_OK;
    }
    bagua_status_t st = fill(r, deadline);
    if (st != BAGUA_OK) return st;
  }
}

/* The reply: status line, headers, then the body by its length or in chunks. */
static bagua_status_t read_reply(bagua__etcd_raw_t *r, etcd_buf_t *reply, long *http, int *keep,
                                 int64_t deadline) {
  char line[1024];
  bagua_status_t st = read_line(r, line, sizeof(line), deadline);
  if (st != BAGUA_OK) return st;
  int minor = 0;
  if (sscanf(line, "HTTP/1.%d %ld", &minor, http) != 2) return BAGUA_ERR_CURL;
  long long length = -1;
  int chunked = 0;
  *keep = minor >= 1;
  for (int n = 0;; n++) {
    if (n > 100) return BAGUA_ERR_CURL;
    st = read_line(r, line, sizeof(line), deadline);
    if (st != BAGUA_OK) return st;
    if (line[0] == '\0') break;
    if (strncasecmp(line, "Content-Length:", 15) == 0) {
      char *end = NULL;
      length = strtoll(line + 15, &end, 10);
      if (length < 0 || (unsigned long long)length > ETCD_MAX_REPLY_BYTES ||
          (end && *end && *end != ' '))
        return BAGUA_ERR_CURL;
    } else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0) {
      chunked = strcasestr(line + 18, "chunked") != NULL;
    } else if (strncasecmp(line, "Connection:", 11) == 0 && strcasestr(line + 11, "close")) {
      *keep = 0;
    }
  }
  if (!chunked) {
    if (length < 0) return BAGUA_ERR_CURL; /* a body up to the close: not for a kept link */
    return take(r, (size_t)length, reply, deadline);
  }
  for (;;) {
    st = read_line(r, line, sizeof(line), deadline);
    if (st != BAGUA_OK) return st;
    char *end = NULL;
    unsigned long long size = strtoull(line, &end, 16);
    if (end == line || size > ETCD_MAX_REPLY_BYTES || reply->len + size > ETCD_MAX_REPLY_BYTES)
      return BAGUA_ERR_CURL;
    if (size == 0) {
      /* Trailers, if any, up to the empty line. */
      do {
        st = read_line(r, line, sizeof(line), deadline);
        if (st != BAGUA_OK) return st;
      } while (line[0] != '\0');
      return BAGUA_OK;
    }
    st = take(r, (size_t)size, reply, deadline);
    if (st != BAGUA_OK) return st;
    st = read_line(r, line, sizeof(line), deadline);
    if (st != BAGUA_OK) return st;
    if (line[0] != '\0') return BAGUA_ERR_CURL;
  }
}

bagua_status_t bagua__etcd_raw_post(bagua__etcd_raw_t *r, const char *path, const char *body,
                                    int timeout_ms, etcd_buf_t *reply, long *http) {
  int64_t deadline = bagua__deadline_in(timeout_ms);
  *http = 0;
  reply->len = 0;
  char head[512];
  size_t blen = strlen(body);
  int hn = snprintf(head, sizeof(head),
                    "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    path, r->host, r->port, blen);
  if (hn < 0 || (size_t)hn >= sizeof(head)) return BAGUA_ERR_INVALID_ARG;
  char *msg = malloc((size_t)hn + blen);
  if (!msg) return BAGUA_ERR_NO_MEMORY;
  memcpy(msg, head, (size_t)hn);
  memcpy(msg + hn, body, blen);
  /* A kept connection etcd closed while idle fails at the first send or read: one more try
   * on a new connection then, within the same deadline. */
  bagua_status_t st = BAGUA_OK;
  for (int attempt = 0; attempt < 2; attempt++) {
    int reused = r->fd >= 0;
    if (!reused && (st = connect_to(r, deadline)) != BAGUA_OK) break;
    int keep = 0;
    reply->len = 0;
    st = send_all(r, msg, (size_t)hn + blen, deadline);
    if (st == BAGUA_OK) st = read_reply(r, reply, http, &keep, deadline);
    if (st == BAGUA_OK) {
      if (!keep || r->inlen != 0) drop(r);
      break;
    }
    drop(r);
    if (!reused || st == BAGUA_ERR_ABORTED || st == BAGUA_ERR_TIMEOUT || st == BAGUA_ERR_NO_MEMORY)
      break;
  }
  free(msg);
  if (st == BAGUA_OK && reply->data) reply->data[reply->len] = '\0';
  return st;
}
