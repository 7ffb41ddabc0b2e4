/* The workers' progress: read, rated and published (progress.h). */
#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/time.h"

/* Workers without a progress file are looked for at most this many intervals apart. */
#define IDLE_FACTOR 16

int bagua__agent_progress_path(const char *dir, int lr, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/progress.%d", dir, lr);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

void bagua__agent_progress_free(bagua__agent_progress_t *p) {
  free(p->w);
  free(p->base);
  free(p->sent);
  memset(p, 0, sizeof(*p));
}

/*
 * Reads one progress file. The writer updates the record in place, so a copy is kept only when
 * two copies in a row agree and decode (an even sequence count): at most three attempts, then
 * the slot keeps its last good record. Returns 0 with `out` filled, or -1.
 */
static int read_file(const char *path, bagua__progress_file_t *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return -1; /* no step yet, or not a libbagua DDP program */
  unsigned char a[sizeof(*out)], b[sizeof(*out)];
  int rc = -1;
  char why[160] = "";
  for (int tries = 0; tries < 3 && rc != 0; tries++) {
    ssize_t na = pread(fd, a, sizeof(a), 0);
    ssize_t nb = pread(fd, b, sizeof(b), 0);
    if (na < 0 || na != nb) break;
    if (memcmp(a, b, (size_t)na) != 0) continue;
    if (bagua__progress_file_decode(a, (size_t)na, out, why, sizeof(why)) == 0)
      rc = 0;
    else if (!(out->seq & 1))
      break; /* not a torn copy: a bad file, trying again cannot help */
  }
  close(fd);
  if (rc != 0 && why[0])
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: ignoring progress file %s: %s", path, why);
  return rc;
}

static int ensure_slots(bagua__agent_progress_t *p, int n) {
  if (p->n == n) return 0;
  bagua__agent_wprog_t *w = calloc((size_t)n, sizeof(*w));
  int64_t *base = calloc((size_t)n, sizeof(*base));
  if (!w || !base) {
    free(w);
    free(base);
    return -1;
  }
  free(p->w);
  free(p->base);
  p->w = w;
  p->base = base;
  p->n = n;
  return 0;
}

/* A new round for this node's workers: recovery is measured from its publication to the first
 * step any worker completes in it (kept workers: a step beyond the count they had). */
static void note_round(bagua__agent_t *a, bagua__agent_progress_t *p) {
  p->round = a->ws.round;
  p->from_ms =
      a->place.round == a->ws.round && a->place.time_ms > 0 ? a->place.time_ms : bagua__wall_ms();
  p->pending = 1;
  for (int i = 0; i < p->n; i++) {
    const bagua__worker_t *w = i < a->ws.n ? &a->ws.w[i] : NULL;
    p->base[i] = w && p->w[i].have && p->w[i].pid == w->pid ? p->w[i].f.step : -1;
  }
}

/* Returns how many workers' progress files were read. */
static int sample(bagua__agent_t *a, bagua__agent_progress_t *p, int64_t wall) {
  int found = 0;
  for (int i = 0; i < p->n && i < a->ws.n; i++) {
    const bagua__worker_t *w = &a->ws.w[i];
    bagua__agent_wprog_t *s = &p->w[i];
    if (s->have && s->pid != w->pid) memset(s, 0, sizeof(*s)); /* a restarted worker */
    char path[600];
    bagua__progress_file_t f;
    if (!w->running ||
        bagua__agent_progress_path(a->mark_dir, w->local_rank, path, sizeof(path)) != 0 ||
        read_file(path, &f) != 0 || f.pid != w->pid)
      continue;
    found++;
    if (!s->have) {
      s->prev_step = f.step;
      s->prev_update_ms = f.update_ms;
    } else if (f.step > s->prev_step && f.update_ms > s->prev_update_ms) {
      s->rate_milli = (f.step - s->prev_step) * 1000000 / (f.update_ms - s->prev_update_ms);
      s->prev_step = f.step;
      s->prev_update_ms = f.update_ms;
    }
    /* No step for three step periods (and three intervals): the worker is idle or stuck. */
    int64_t period = s->rate_milli > 0 ? 1000000 / s->rate_milli : 0;
    int64_t idle =
        3 * (period > a->cfg->progress_interval_ms ? period : a->cfg->progress_interval_ms);
    if (f.update_ms > 0 && wall - f.update_ms > idle) s->rate_milli = 0;
    s->have = 1;
    s->pid = w->pid;
    s->f = f;
    if (p->pending && f.step > p->base[i] && f.step > 0 && f.update_ms >= p->from_ms) {
      p->recovery_ms = f.update_ms - p->from_ms;
      p->pending = 0;
    }
  }
  return found;
}

static void publish(bagua__agent_t *a, bagua__agent_progress_t *p, int64_t wall) {
  bagua__rdzv_wprogress_t ws[p->n > 0 ? p->n : 1];
  bagua__rdzv_progress_t rec;
  memset(&rec, 0, sizeof(rec));
  rec.round = a->ws.round;
  rec.restart_count = a->place.round == a->ws.round ? a->place.restart_count : 0;
  rec.w = ws;
  for (int i = 0; i < p->n && i < a->ws.n; i++) {
    const bagua__agent_wprog_t *s = &p->w[i];
    if (!s->have) continue;
    bagua__rdzv_wprogress_t *x = &ws[rec.nworkers++];
    memset(x, 0, sizeof(*x));
    x->local_rank = a->ws.w[i].local_rank;
    x->rank = a->ws.w[i].rank;
    x->pid = (int)s->pid;
    x->step = s->f.step;
    x->total_steps = s->f.total_steps;
    x->samples = s->f.samples;
    x->bytes_sent = s->f.bytes_sent;
    x->comm_ms = s->f.comm_us / 1000;
    x->rate_milli = s->rate_milli;
    x->update_ms = s->f.update_ms;
  }
  if (rec.nworkers == 0 || rec.round <= 0) return;
  /* Compared without its time: an unchanged record is not written again (the key lives on
   * the lease), so an idle job costs etcd nothing. */
  char *cmp = bagua__rdzv_progress_encode(&rec);
  if (!cmp) return;
  if (p->sent && strcmp(p->sent, cmp) == 0) {
    free(cmp);
    return;
  }
  rec.time_ms = wall;
  char *v = bagua__rdzv_progress_encode(&rec);
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_PROGRESS, 0, a->cfg->node_id);
  if (v && bagua__etcd_put(a->etcd, key, v, strlen(v), a->lease, NULL, NULL) == BAGUA_OK) {
    free(p->sent);
    p->sent = cmp;
    cmp = NULL;
  }
  free(cmp);
  free(v);
}

int bagua__agent_progress_tick(bagua__agent_t *a, int64_t now_ms) {
  bagua__agent_progress_t *p = &a->prog;
  const int interval = a->cfg->progress_interval_ms;
  if (interval <= 0 || !a->mark_dir[0]) return -1;
  /* New workers may create their files soon: look at the full rate again. */
  if (a->ws.n > 0 && a->ws.round != p->round) {
    p->idle_ms = 0;
    p->next_ms = now_ms;
  }
  if (now_ms < p->next_ms) return (int)(p->next_ms - now_ms);
  if (ensure_slots(p, a->cfg->nproc) != 0) return interval;
  if (a->ws.n > 0 && a->ws.round != p->round) note_round(a, p);
  int64_t wall = bagua__wall_ms();
  int found = sample(a, p, wall);
  if (a->member && a->lease) publish(a, p, wall);
  /* Workers that keep no progress file (not libbagua programs, or not started yet) are looked
   * for ever more rarely (1, 4, 16 intervals apart), up to IDLE_FACTOR intervals: an agent at
   * rest then wakes about once in that many seconds, not every second, and a file that appears
   * late is still found. */
  if (found)
    p->idle_ms = 0;
  else
    p->idle_ms = p->idle_ms ? (p->idle_ms * 4 > IDLE_FACTOR * interval ? IDLE_FACTOR * interval
                                                                       : p->idle_ms * 4)
                            : interval;
  int wait = found ? interval : (int)p->idle_ms;
  p->next_ms = now_ms + wait;
  return wait;
}
