/*
 * The output thread: poll() over every worker pipe plus an eventfd that announces new
 * streams and the stop request. Lines are written with one write() each (prefix included),
 * so lines from different workers never mix even when the agent's output is a shared pipe.
 */
#include "output.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"
#include "common/time.h"

/* A longer line is cut into pieces of this size, each written as its own prefixed line. */
#define LINE_MAX_BYTES 8192
#define PREFIX_MAX 192

typedef struct {
  bagua__outpump_t *owner;
  int fd, dest, log_fd;
  int64_t tag; /* the worker's pid */
  char prefix[PREFIX_MAX];
  size_t prefix_len;
  /* A retag waiting for the output thread (under the pump's mutex): the new prefix, and the
   * line to append to the log file first (malloc'ed; NULL for none). */
  int retag;
  char next_prefix[PREFIX_MAX];
  char *next_line;
  char buf[LINE_MAX_BYTES];
  size_t len;
} stream_t;

struct bagua__outpump {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* signalled when the stream count drops */
  int wake_fd;
  int stop; /* under mu */
  stream_t **streams;
  size_t n, cap; /* under mu; only the thread removes streams */
  /* Lines a log file did not take (a full disk, a quota): the first failure is reported at
   * once, the count when the pump stops, so a full disk is never silent and never floods
   * the console. Written by the output thread, read after it was joined. */
  uint64_t log_failures;
  char log_error[160];
};

/* Returns 0, or an errno value when the line could not be written whole. */
static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void log_failed(stream_t *s, int err) {
  bagua__outpump_t *p = s->owner;
  if (p->log_failures++ > 0) return;
  snprintf(p->log_error, sizeof(p->log_error), "%s", strerror(err));
  /* The prefix names the worker ("[node/rank] "); its log file loses lines from here on. */
  BAGUA_WARN(
      "agent: cannot write the log file of %.*s: %s; its lines still reach the console, "
      "and the lost ones are counted when the workers end",
      (int)(s->prefix_len > 1 ? s->prefix_len - 1 : s->prefix_len), s->prefix, p->log_error);
}

static void emit(stream_t *s, const char *line, size_t n) {
  char out[PREFIX_MAX + LINE_MAX_BYTES + 1];
  memcpy(out, s->prefix, s->prefix_len);
  memcpy(out + s->prefix_len, line, n);
  out[s->prefix_len + n] = '\n';
  /* A closed console must not stop the workers: such a line is dropped. No console (-1): a
   * redirected stream, its lines go to the log file only. */
  if (s->dest >= 0) (void)write_all(s->dest, out, s->prefix_len + n + 1);
  if (s->log_fd >= 0) {
    int err = write_all(s->log_fd, out + s->prefix_len, n + 1);
    if (err) log_failed(s, err);
  }
}

/* Emits every complete line in the buffer and keeps the tail; `eof` flushes the tail too. */
static void flush_lines(stream_t *s, int eof) {
  size_t start = 0;
  for (size_t i = 0; i < s->len; i++) {
    if (s->buf[i] != '\n') continue;
    emit(s, s->buf + start, i - start);
    start = i + 1;
  }
  if (start < s->len && (eof || (start == 0 && s->len == sizeof(s->buf)))) {
    emit(s, s->buf + start, s->len - start);
    start = s->len;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

/* Reads what is available; returns 0 while the stream lives, 1 at end-of-file or error. */
static int pump(stream_t *s) {
  for (;;) {
    ssize_t r = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return 0;
    if (r <= 0) {
      flush_lines(s, 1);
      return 1;
    }
    s->len += (size_t)r;
    flush_lines(s, 0);
    /* One read per wake-up keeps one chatty worker from starving the others. */
    return 0;
  }
}

static void close_stream(stream_t *s) {
  close(s->fd);
  if (s->log_fd >= 0) close(s->log_fd);
  free(s->next_line);
  free(s);
}

/* Output thread, under the pump's mutex: applies a pending retag to `s`. The lines read so far
 * were emitted already (only a partial line may wait in the buffer), so the new prefix and the
 * log line head exactly what the worker writes from now on, give or take that partial line. */
static void apply_retag(stream_t *s) {
  if (!s->retag) return;
  s->retag = 0;
  snprintf(s->prefix, sizeof(s->prefix), "%s", s->next_prefix);
  s->prefix_len = strlen(s->prefix);
  if (s->next_line && s->log_fd >= 0) {
    int err = write_all(s->log_fd, s->next_line, strlen(s->next_line));
    if (err) log_failed(s, err);
  }
  free(s->next_line);
  s->next_line = NULL;
}

static void *thread_main(void *arg) {
  bagua__outpump_t *p = arg;
  struct pollfd *pfd = NULL;
  stream_t **snap = NULL;
  size_t cap = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int stop = p->stop;
    size_t n = p->n;
    if (n + 1 > cap) {
      size_t nc = (n + 1) * 2;
      struct pollfd *np = realloc(pfd, nc * sizeof(*np));
      if (np) pfd = np;
      stream_t **ns = np ? realloc(snap, nc * sizeof(*ns)) : NULL;
      if (ns) snap = ns;
      if (np && ns) cap = nc;
    }
    if (n + 1 > cap) n = cap ? cap - 1 : 0; /* out of memory: serve the first ones for now */
    for (size_t i = 0; i < n; i++) {
      snap[i] = p->streams[i];
      apply_retag(snap[i]);
      pfd[i + 1] = (struct pollfd){.fd = snap[i]->fd, .events = POLLIN};
    }
    pthread_mutex_unlock(&p->mu);
    if (stop) break;
    if (!pfd) {
      bagua__sleep_ms(50); /* out of memory: try again shortly */
      continue;
    }
    pfd[0] = (struct pollfd){.fd = p->wake_fd, .events = POLLIN};
    /* No timeout: new streams and the stop are announced on the eventfd, and a retag is applied
     * before the stream's next bytes are read, so an idle agent's output thread sleeps. */
    int rc = poll(pfd, n + 1, -1);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    if (pfd[0].revents) {
      uint64_t v;
      ssize_t r = read(p->wake_fd, &v, sizeof(v));
      (void)r;
    }
    for (size_t i = 0; i < n; i++) {
      if (!pfd[i + 1].revents) continue;
      /* A retag made before the worker wrote these bytes must apply to them, also when it
       * came after this pass's snapshot (poll reports the wake-up and the data together). */
      pthread_mutex_lock(&p->mu);
      apply_retag(snap[i]);
      pthread_mutex_unlock(&p->mu);
      if (!pump(snap[i])) continue;
      pthread_mutex_lock(&p->mu);
      for (size_t j = 0; j < p->n; j++)
        if (p->streams[j] == snap[i]) {
          p->streams[j] = p->streams[--p->n];
          break;
        }
      pthread_cond_broadcast(&p->cv);
      pthread_mutex_unlock(&p->mu);
      close_stream(snap[i]);
    }
  }
  free(pfd);
  free(snap);
  return NULL;
}

bagua_status_t bagua__outpump_start(bagua__outpump_t **out) {
  *out = NULL;
  bagua__outpump_t *p;
  BAGUA_CALLOC(p, 1);
  p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->wake_fd < 0) {
    BAGUA_WARN("agent: eventfd for the output thread failed: %s", strerror(errno));
    free(p);
    return BAGUA_ERR_SYSTEM;
  }
  pthread_mutex_init(&p->mu, NULL);
  bagua__cond_init(&p->cv); /* on the monotonic clock the drain deadline uses */
  int rc = pthread_create(&p->thread, NULL, thread_main, p);
  if (rc != 0) {
    BAGUA_WARN("agent: cannot start the output thread: %s", strerror(rc));
    close(p->wake_fd);
    free(p);
    return BAGUA_ERR_SYSTEM;
  }
  *out = p;
  return BAGUA_OK;
}

static void wake(bagua__outpump_t *p) {
  uint64_t one = 1;
  ssize_t w = write(p->wake_fd, &one, sizeof(one));
  (void)w;
}

bagua_status_t bagua__outpump_add(bagua__outpump_t *p, int fd, int dest, const char *prefix,
                                  int log_fd, int64_t tag) {
  stream_t *s = calloc(1, sizeof(*s));
  if (!s) goto nomem;
  s->owner = p;
  s->tag = tag;
  s->fd = fd;
  s->dest = dest;
  s->log_fd = log_fd;
  snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
  s->prefix_len = strlen(s->prefix);
  pthread_mutex_lock(&p->mu);
  if (p->n == p->cap) {
    size_t nc = p->cap ? p->cap * 2 : 16;
    stream_t **ns = realloc(p->streams, nc * sizeof(*ns));
    if (!ns) {
      pthread_mutex_unlock(&p->mu);
      free(s);
      goto nomem;
    }
    p->streams = ns;
    p->cap = nc;
  }
  p->streams[p->n++] = s;
  pthread_mutex_unlock(&p->mu);
  wake(p);
  return BAGUA_OK;
nomem:
  close(fd);
  if (log_fd >= 0) close(log_fd);
  BAGUA_WARN("agent: out of memory adding a worker output stream");
  return BAGUA_ERR_NO_MEMORY;
}

void bagua__outpump_retag(bagua__outpump_t *p, int64_t tag, const char *prefix,
                          const char *log_line) {
  int line_done = log_line == NULL;
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->n; i++) {
    stream_t *s = p->streams[i];
    if (s->tag != tag) continue;
    s->retag = 1;
    snprintf(s->next_prefix, sizeof(s->next_prefix), "%s", prefix);
    /* stdout and stderr share one log file: the line goes to it once. Out of memory loses the
     * line, never the output. */
    if (!line_done && s->log_fd >= 0 && !s->next_line) {
      s->next_line = strdup(log_line);
      line_done = 1;
    }
  }
  pthread_mutex_unlock(&p->mu);
  wake(p);
}

void bagua__outpump_drain(bagua__outpump_t *p, int timeout_ms) {
  int64_t deadline = bagua__deadline_in(timeout_ms);
  pthread_mutex_lock(&p->mu);
  while (p->n > 0)
    if (bagua__cond_wait_until(&p->cv, &p->mu, deadline) != 0) break;
  pthread_mutex_unlock(&p->mu);
}

void bagua__outpump_stop(bagua__outpump_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_mutex_unlock(&p->mu);
  wake(p);
  pthread_join(p->thread, NULL);
  for (size_t i = 0; i < p->n; i++) {
    apply_retag(p->streams[i]);
    flush_lines(p->streams[i], 1);
    close_stream(p->streams[i]);
  }
  if (p->log_failures)
    BAGUA_WARN(
        "agent: %llu line(s) of worker output could not be written to the log files "
        "(first error: %s)",
        (unsigned long long)p->log_failures, p->log_error);
  free(p->streams);
  close(p->wake_fd);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
