/*
 * The metrics endpoint's server thread and the agent's exposition text (metrics.h).
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/validate.h"
#include "common/sock.h"
#include "common/time.h"

typedef struct {
  int fd;
  int64_t deadline; /* monotonic ms */
  char req[METRICS_REQ_MAX + 1];
  size_t nreq;
  char *out; /* the whole answer once the request is complete (malloc'ed) */
  size_t nout, sent;
} conn_t;

struct bagua__metrics {
  pthread_t thread;
  int lfd, wake_fd, port;
  pthread_mutex_t mu;
  int stop;   /* under mu */
  char *text; /* under mu: the exposition served */
  size_t ntext;
  conn_t conns[METRICS_MAX_CONNS]; /* server thread only */
};

static void conn_close(conn_t *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->out);
  memset(c, 0, sizeof(*c));
  c->fd = -1;
}

static void answer(bagua__metrics_t *m, conn_t *c, const char *status, const char *ctype,
                   const char *body, size_t nbody) {
  char head[256];
  int nh = snprintf(head, sizeof(head),
                    "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: "
                    "close\r\n\r\n",
                    status, ctype, nbody);
  (void)m;
  c->out = malloc((size_t)nh + nbody);
  if (!c->out) {
    conn_close(c);
    return;
  }
  memcpy(c->out, head, (size_t)nh);
  if (nbody) memcpy(c->out + nh, body, nbody);
  c->nout = (size_t)nh + nbody;
  c->sent = 0;
}

static void answer_text(bagua__metrics_t *m, conn_t *c, const char *status, const char *msg) {
  answer(m, c, status, "text/plain; charset=utf-8", msg, strlen(msg));
}

/* The request is complete (an empty line ended its head): answer it. Only "GET /metrics" (or
 * "GET /metrics?...") is served; HEAD gets the head only. */
static void handle_request(bagua__metrics_t *m, conn_t *c) {
  c->req[c->nreq] = '\0';
  char method[8] = "", path[256] = "";
  int n = sscanf(c->req, "%7s %255s", method, path);
  if (n != 2 || !strchr(c->req, '\n')) {
    answer_text(m, c, "400 Bad Request", "malformed request; accepted: GET /metrics\n");
    return;
  }
  int head = strcmp(method, "HEAD") == 0;
  if (strcmp(method, "GET") != 0 && !head) {
    answer_text(m, c, "405 Method Not Allowed", "accepted: GET /metrics\n");
    return;
  }
  size_t plen = strcspn(path, "?");
  if (!(plen == 8 && strncmp(path, "/metrics", 8) == 0)) {
    answer_text(m, c, "404 Not Found", "not found; accepted: GET /metrics\n");
    return;
  }
  pthread_mutex_lock(&m->mu);
  const char *ctype = "text/plain; version=0.0.4; charset=utf-8";
  if (head) {
    answer(m, c, "200 OK", ctype, "", 0);
    pthread_mutex_unlock(&m->mu);
    return;
  }
  answer(m, c, "200 OK", ctype, m->text ? m->text : "", m->text ? m->ntext : 0);
  pthread_mutex_unlock(&m->mu);
}

static void on_readable(bagua__metrics_t *m, conn_t *c) {
  for (;;) {
    if (c->nreq >= METRICS_REQ_MAX) {
      answer_text(m, c, "431 Request Header Fields Too Large", "request larger than 4096 bytes\n");
      return;
    }
    ssize_t r = recv(c->fd, c->req + c->nreq, METRICS_REQ_MAX - c->nreq, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) {
      conn_close(c);
      return;
    }
    c->nreq += (size_t)r;
    c->req[c->nreq] = '\0';
    if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
      handle_request(m, c);
      return;
    }
  }
}

static void on_writable(conn_t *c) {
  while (c->sent < c->nout) {
    ssize_t w = send(c->fd, c->out + c->sent, c->nout - c->sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (w <= 0) break;
    c->sent += (size_t)w;
  }
  conn_close(c); /* HTTP/1.0: the answer ends with the connection */
}

static void accept_all(bagua__metrics_t *m, int64_t now) {
  for (;;) {
    int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return; /* EAGAIN, or a transient failure: the next poll retries */
    conn_t *slot = NULL, *oldest_idle = NULL;
    for (int i = 0; i < METRICS_MAX_CONNS && !slot; i++) {
      conn_t *c = &m->conns[i];
      if (c->fd < 0)
        slot = c;
      else if (!c->out && (!oldest_idle || c->deadline < oldest_idle->deadline))
        oldest_idle = c;
    }
    if (!slot && oldest_idle) {
      /* Full: the connection that has waited longest without a complete request gives way
       * (metrics.h). */
      conn_close(oldest_idle);
      slot = oldest_idle;
    }
    if (!slot) {
      close(fd); /* every slot is sending an answer: the scraper retries */
      continue;
    }
    slot->fd = fd;
    slot->deadline = now + METRICS_DEADLINE_MS;
  }
}

static void *thread_main(void *arg) {
  bagua__metrics_t *m = arg;
  struct pollfd pfd[2 + METRICS_MAX_CONNS];
  int idx[METRICS_MAX_CONNS];
  for (;;) {
    pthread_mutex_lock(&m->mu);
    int stop = m->stop;
    pthread_mutex_unlock(&m->mu);
    if (stop) break;
    int64_t now = bagua__now_ms();
    size_t n = 0;
    pfd[n++] = (struct pollfd){.fd = m->wake_fd, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = m->lfd, .events = POLLIN};
    int nc = 0;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
      conn_t *c = &m->conns[i];
      if (c->fd < 0) continue;
      if (now >= c->deadline) {
        conn_close(c); /* too slow to ask or to read the answer */
        continue;
      }
      idx[nc++] = i;
      pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
    }
    int rc = poll(pfd, n, 200);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    if (pfd[0].revents) {
      uint64_t v;
      ssize_t r = read(m->wake_fd, &v, sizeof(v));
      (void)r;
    }
    now = bagua__now_ms();
    for (int k = 0; k < nc; k++) {
      conn_t *c = &m->conns[idx[k]];
      short ev = pfd[2 + k].revents;
      if (!ev || c->fd < 0) continue;
      if (c->out)
        on_writable(c);
      else if (ev & (POLLIN | POLLHUP | POLLERR))
        on_readable(m, c);
      if (c->fd >= 0 && c->out) on_writable(c); /* usually the whole answer fits at once */
    }
    if (pfd[1].revents) accept_all(m, now);
  }
  for (int i = 0; i < METRICS_MAX_CONNS; i++) conn_close(&m->conns[i]);
  return NULL;
}

int bagua__metrics_start(const char *addr, int port, bagua__metrics_t **out, char *err,
                         size_t errlen) {
  *out = NULL;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (bagua__check_listen_addr("--metrics-addr", addr, err, errlen) != BAGUA_OK) return -1;
  inet_pton(AF_INET, addr, &sa.sin_addr);
  bagua__metrics_t *m = calloc(1, sizeof(*m));
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < METRICS_MAX_CONNS; i++) m->conns[i].fd = -1;
  m->wake_fd = -1;
  m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (m->lfd >= 0) setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(sa);
  if (m->lfd < 0 || bind(m->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(m->lfd, 64) != 0 || getsockname(m->lfd, (struct sockaddr *)&sa, &len) != 0) {
    snprintf(err, errlen,
             "cannot serve metrics on %s:%d: %s; accepted: --metrics-port of a free port (or 0 "
             "for no metrics endpoint)",
             addr, port, strerror(errno));
    goto fail;
  }
  m->port = ntohs(sa.sin_port);
  m->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  pthread_mutex_init(&m->mu, NULL);
  int rc = m->wake_fd < 0 ? errno : pthread_create(&m->thread, NULL, thread_main, m);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the metrics thread: %s", strerror(rc));
    pthread_mutex_destroy(&m->mu);
    goto fail;
  }
  *out = m;
  return 0;
fail:
  if (m->lfd >= 0) close(m->lfd);
  if (m->wake_fd >= 0) close(m->wake_fd);
  free(m);
  return -1;
}

int bagua__metrics_port(const bagua__metrics_t *m) {
  return m ? m->port : 0;
}

void bagua__metrics_publish(bagua__metrics_t *m, const char *text, size_t len) {
  if (!m || !text) return;
  char *copy = malloc(len + 1);
  if (!copy) return; /* the previous text stays served */
  memcpy(copy, text, len);
  copy[len] = '\0';
  pthread_mutex_lock(&m->mu);
  free(m->text);
  m->text = copy;
  m->ntext = len;
  pthread_mutex_unlock(&m->mu);
}

void bagua__metrics_stop(bagua__metrics_t *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  m->stop = 1;
  pthread_mutex_unlock(&m->mu);
  uint64_t one = 1;
  ssize_t w = write(m->wake_fd, &one, sizeof(one));
  (void)w;
  pthread_join(m->thread, NULL);
  close(m->lfd);
  close(m->wake_fd);
  pthread_mutex_destroy(&m->mu);
  free(m->text);
  free(m);
}

/* ---------------------------------------------------------------------------------------- */
/* The exposition text                                                                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct {
  char *buf;
  size_t len, cap;
  int oom;
} text_t;

static void put(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *fmt, ...) {
  if (t->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = 1;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t nc = (t->cap + (size_t)n + 1) * 2;
    char *nb = realloc(t->buf, nc);
    if (!nb) {
      t->oom = 1;
      return;
    }
    t->buf = nb;
    t->cap = nc;
  }
}

static void family(text_t *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *bagua__agent_metrics_render(const bagua__agent_t *a, size_t *len) {
  text_t t = {malloc(4096), 0, 4096, 0};
  if (!t.buf) return NULL;
  t.buf[0] = '\0';
  const bagua__agent_config_t *cfg = a->cfg;
  /* Ids are of [A-Za-z0-9._-]: nothing in a label value needs escaping. */
  char lab[300];
  snprintf(lab, sizeof(lab), "job=\"%s\",node=\"%s\"", cfg->job_id, cfg->node_id);
  /* The round as this node knows it: its own place (a follower reads no member list). */
  const bagua__rdzv_assign_t *r = &a->place;
  int have_round = r->round > 0;
  family(&t, "bagua_agent_info", "gauge", "Always 1; the labels name the job and node.");
  put(&t, "bagua_agent_info{%s,version=\"%s\"} 1\n", lab, BAGUA_VERSION_STRING);
  family(&t, "bagua_agent_round", "gauge", "The job's current rendezvous round (0: none yet).");
  put(&t, "bagua_agent_round{%s} %lld\n", lab, have_round ? (long long)r->round : 0LL);
  family(&t, "bagua_agent_round_nodes", "gauge", "Nodes (members) of the current round.");
  put(&t, "bagua_agent_round_nodes{%s} %d\n", lab, have_round ? r->nmembers : 0);
  family(&t, "bagua_agent_world_size", "gauge", "Workers of the current round.");
  put(&t, "bagua_agent_world_size{%s} %d\n", lab, have_round ? r->world_size : 0);
  family(&t, "bagua_agent_is_member", "gauge", "1 when this node runs workers in the round.");
  put(&t, "bagua_agent_is_member{%s} %d\n", lab, a->member);
  family(&t, "bagua_agent_is_leader", "gauge", "1 when this agent leads the job (forms rounds).");
  put(&t, "bagua_agent_is_leader{%s} %d\n", lab, a->is_leader);
  family(&t, "bagua_agent_restarts", "gauge",
         "Worker-failure restarts the job has spent (the round's restart_count).");
  put(&t, "bagua_agent_restarts{%s} %d\n", lab, have_round ? r->restart_count : 0);
  family(&t, "bagua_agent_rounds_total", "counter", "Rounds this agent has seen published.");
  put(&t, "bagua_agent_rounds_total{%s} %llu\n", lab, (unsigned long long)a->rounds_seen);
  family(&t, "bagua_agent_worker_exits_total", "counter",
         "Worker processes of this node that ended, by outcome.");
  static const char *const outcome[3] = {"succeeded", "failed", "stopped"};
  for (int i = 0; i < 3; i++)
    put(&t, "bagua_agent_worker_exits_total{%s,outcome=\"%s\"} %llu\n", lab, outcome[i],
        (unsigned long long)a->exits[i]);
  family(&t, "bagua_agent_workers_running", "gauge", "Worker processes of this node running.");
  put(&t, "bagua_agent_workers_running{%s} %d\n", lab, a->ws.nrunning);
  family(&t, "bagua_agent_last_recovery_seconds", "gauge",
         "From the publication of this node's latest round to its workers' first step in it; "
         "absent until measured.");
  if (a->prog.recovery_ms >= 0 && a->prog.round > 0)
    put(&t, "bagua_agent_last_recovery_seconds{%s,round=\"%lld\"} %.3f\n", lab,
        (long long)a->prog.round, (double)a->prog.recovery_ms / 1000.0);
  static const struct {
    const char *name, *type, *help;
  } wf[] = {
      {"bagua_worker_step", "gauge", "Training steps the worker completed (bagua_ddp_step)."},
      {"bagua_worker_steps_per_second", "gauge", "The worker's recent step rate."},
      {"bagua_worker_total_steps", "gauge", "The total steps the program stated (0: unknown)."},
      {"bagua_worker_bytes_sent_total", "counter", "Bytes the worker's DDP context sent."},
      {"bagua_worker_comm_seconds_total", "counter",
       "Seconds the worker's communication thread worked."},
  };
  for (size_t k = 0; k < sizeof(wf) / sizeof(wf[0]); k++) {
    family(&t, wf[k].name, wf[k].type, wf[k].help);
    for (int i = 0; i < a->prog.n && i < a->ws.n; i++) {
      const bagua__agent_wprog_t *s = &a->prog.w[i];
      if (!s->have) continue;
      char wl[400];
      snprintf(wl, sizeof(wl), "%s,local_rank=\"%d\",rank=\"%d\"", lab, a->ws.w[i].local_rank,
               a->ws.w[i].rank);
      switch (k) {
        case 0:
          put(&t, "%s{%s} %lld\n", wf[k].name, wl, (long long)s->f.step);
          break;
        case 1:
          put(&t, "%s{%s} %.3f\n", wf[k].name, wl, (double)s->rate_milli / 1000.0);
          break;
        case 2:
          put(&t, "%s{%s} %lld\n", wf[k].name, wl, (long long)s->f.total_steps);
          break;
        case 3:
          put(&t, "%s{%s} %lld\n", wf[k].name, wl, (long long)s->f.bytes_sent);
          break;
        default:
          put(&t, "%s{%s} %.6f\n", wf[k].name, wl, (double)s->f.comm_us / 1e6);
          break;
      }
    }
  }
  if (t.oom) {
    free(t.buf);
    return NULL;
  }
  *len = t.len;
  return t.buf;
}
