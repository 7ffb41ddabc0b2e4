/*
 * The agent's copy of the keys it follows (mirror.h): a hash table of entries, loaded by one
 * multi-range read and updated from one watch's events.
 */
#include "mirror.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* An event as the watch thread queued it: a copy, since the watch's pointers die with the
 * callback. */
typedef struct {
  int del;
  int last; /* the last event of etcd's message */
  bagua__etcd_kv_t kv;
} queued_t;

struct bagua__mirror {
  char prefix[BAGUA_RDZV_KEY_MAX];
  int wake_fd;
  bagua__mirror_range_t ranges[BAGUA__MIRROR_RANGES_MAX];
  size_t nranges;
  int loaded;
  int64_t revision;
  bagua__etcd_watch_t *watch;

  /* Entries, densely, and an open-addressing index over their keys: slot value = entry + 1. */
  bagua__agent_entry_t *e;
  size_t n, cap;
  size_t *slots;
  size_t nslots; /* a power of two, at least twice n */

  int64_t *rounds;
  size_t nrounds, rounds_cap;

  /* The watch thread's queue. `committed` events (those up to the last one that ended a
   * message) may be applied; the rest wait for the end of their message. */
  pthread_mutex_t mu;
  queued_t *q;
  size_t nq, qcap, committed;
  int failed; /* the watch ended by itself: load again */

  bagua__mirror_stats_t stats;
};

static uint64_t hash_key(const char *k) {
  uint64_t h = 1469598103934665603ULL;
  for (; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ULL;
  return h;
}

/* The slot holding `key`, or the empty slot where it would go. */
static size_t slot_of(const bagua__mirror_t *m, const char *key) {
  size_t mask = m->nslots - 1, i = (size_t)hash_key(key) & mask;
  while (m->slots[i] && strcmp(m->e[m->slots[i] - 1].kv.key, key) != 0) i = (i + 1) & mask;
  return i;
}

static int rehash(bagua__mirror_t *m, size_t nslots) {
  size_t *s = calloc(nslots, sizeof(*s));
  if (!s) return -1;
  free(m->slots);
  m->slots = s;
  m->nslots = nslots;
  for (size_t i = 0; i < m->n; i++) m->slots[slot_of(m, m->e[i].kv.key)] = i + 1;
  return 0;
}

static void entry_free(bagua__agent_entry_t *e) {
  bagua__etcd_kv_clear(&e->kv);
  bagua__agent_rec_free(e->rec);
  e->rec = NULL;
}

static void clear_entries(bagua__mirror_t *m) {
  for (size_t i = 0; i < m->n; i++) entry_free(&m->e[i]);
  m->n = 0;
  if (m->slots) memset(m->slots, 0, m->nslots * sizeof(*m->slots));
  m->nrounds = 0;
}

static void note_round(bagua__mirror_t *m, int64_t round) {
  for (size_t i = 0; i < m->nrounds; i++)
    if (m->rounds[i] == round) return;
  if (m->nrounds == m->rounds_cap) {
    size_t nc = m->rounds_cap ? 2 * m->rounds_cap : 8;
    int64_t *p = realloc(m->rounds, nc * sizeof(*p));
    if (!p) return; /* clean-up is best effort: a round left out only lingers */
    m->rounds = p;
    m->rounds_cap = nc;
  }
  m->rounds[m->nrounds++] = round;
}

/* Whether a key is kept as an entry (endpoint records are not); `*round` gets the round of a
 * rounds/ key, else -1. */
static int keep_key(const bagua__mirror_t *m, const char *key, int64_t *round) {
  bagua__rdzv_key_info_t ki;
  *round = -1;
  if (bagua__rdzv_key_parse(m->prefix, key, &ki) != 0) return 1;
  *round = ki.round;
  return ki.kind != BAGUA__RDZV_KEY_BOOTSTRAP && ki.kind != BAGUA__RDZV_KEY_BOOTSTRAP_DIR;
}

/* Takes `kv` (moved in) as the entry of its key. Returns 1 when the copy changed. */
static int upsert(bagua__mirror_t *m, bagua__etcd_kv_t *kv) {
  int64_t round;
  int keep = keep_key(m, kv->key, &round);
  if (round >= 0) note_round(m, round); /* a round with keys: the leader cleans it up later */
  if (!keep) {
    bagua__etcd_kv_clear(kv);
    return 0;
  }
  if (2 * (m->n + 1) > m->nslots && rehash(m, m->nslots ? 2 * m->nslots : 64) != 0) goto oom;
  size_t s = slot_of(m, kv->key);
  if (m->slots[s]) {
    bagua__agent_entry_t *e = &m->e[m->slots[s] - 1];
    entry_free(e);
    e->kv = *kv;
    memset(kv, 0, sizeof(*kv));
    return 1;
  }
  if (m->n == m->cap) {
    size_t nc = m->cap ? 2 * m->cap : 64;
    bagua__agent_entry_t *p = realloc(m->e, nc * sizeof(*p));
    if (!p) goto oom;
    m->e = p;
    m->cap = nc;
  }
  m->e[m->n].kv = *kv;
  m->e[m->n].rec = NULL;
  memset(kv, 0, sizeof(*kv));
  m->slots[s] = ++m->n;
  return 1;
oom:
  /* The copy now lacks a key it should hold: load it whole again. */
  BAGUA_WARN("agent: out of memory following etcd key %s; reading the job's keys again", kv->key);
  bagua__etcd_kv_clear(kv);
  m->loaded = 0;
  return 1;
}

/* Removes the entry of `key`, keeping the index valid (backward-shift deletion). */
static int erase(bagua__mirror_t *m, const char *key) {
  int64_t round;
  if (!keep_key(m, key, &round) || !m->nslots) return 0;
  size_t mask = m->nslots - 1, s = slot_of(m, key);
  if (!m->slots[s]) return 0;
  size_t idx = m->slots[s] - 1;
  entry_free(&m->e[idx]);
  m->slots[s] = 0;
  for (size_t j = (s + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
    size_t home = (size_t)hash_key(m->e[m->slots[j] - 1].kv.key) & mask;
    /* Moves the entry back into the hole when its home lies cyclically at or before it. */
    if (((j - home) & mask) >= ((j - s) & mask)) {
      m->slots[s] = m->slots[j];
      m->slots[j] = 0;
      s = j;
    }
  }
  /* The last entry fills the hole in the dense array. */
  if (idx != m->n - 1) {
    m->e[idx] = m->e[m->n - 1];
    m->slots[slot_of(m, m->e[idx].kv.key)] = idx + 1;
  }
  m->n--;
  return 1;
}

static void drop_queue(bagua__mirror_t *m) {
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->nq; i++) bagua__etcd_kv_clear(&m->q[i].kv);
  m->nq = m->committed = 0;
  m->failed = 0;
  pthread_mutex_unlock(&m->mu);
}

static void poke(bagua__mirror_t *m) {
  uint64_t one = 1;
  ssize_t w = write(m->wake_fd, &one, sizeof(one));
  (void)w;
}

/* Whether an event concerns a decision at once. Endpoint records concern none, and progress
 * records (a node's acknowledgement, and its workers' progress every second while they train)
 * only the act deadline, whose timer wakes the leader anyway: waking every agent for them would
 * cost a pass per node and second. */
static int wakes(const bagua__mirror_t *m, const char *key) {
  bagua__rdzv_key_info_t ki;
  if (bagua__rdzv_key_parse(m->prefix, key, &ki) != 0) return 1;
  return ki.kind != BAGUA__RDZV_KEY_BOOTSTRAP && ki.kind != BAGUA__RDZV_KEY_BOOTSTRAP_DIR &&
         ki.kind != BAGUA__RDZV_KEY_PROGRESS;
}

static int on_event(void *arg, const bagua__etcd_event_t *ev) {
  bagua__mirror_t *m = arg;
  int wake = 1;
  pthread_mutex_lock(&m->mu);
  if (ev->type == BAGUA__ETCD_EVENT_FAILED) {
    m->failed = 1;
  } else if (m->nq == m->qcap &&
             !(m->q = realloc(m->q, (m->qcap = m->qcap ? 2 * m->qcap : 64) * sizeof(*m->q)))) {
    m->nq = m->qcap = m->committed = 0;
    m->failed = 1; /* an event is lost: load again */
  } else {
    queued_t *q = &m->q[m->nq];
    memset(q, 0, sizeof(*q));
    q->del = ev->type == BAGUA__ETCD_EVENT_DELETE;
    q->last = ev->last;
    q->kv.key = malloc(ev->key_len + 1);
    q->kv.value = malloc(ev->value_len + 1);
    if (!q->kv.key || !q->kv.value) {
      bagua__etcd_kv_clear(&q->kv);
      m->failed = 1;
    } else {
      memcpy(q->kv.key, ev->key, ev->key_len);
      q->kv.key[ev->key_len] = '\0';
      q->kv.key_len = ev->key_len;
      memcpy(q->kv.value, ev->value, ev->value_len);
      q->kv.value[ev->value_len] = '\0';
      q->kv.value_len = ev->value_len;
      q->kv.create_revision = ev->create_revision;
      q->kv.mod_revision = ev->mod_revision;
      q->kv.version = ev->version;
      q->kv.lease = ev->lease;
      m->nq++;
      if (ev->last) m->committed = m->nq;
      wake = wakes(m, q->kv.key);
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (wake) poke(m);
  return 0;
}

bagua__mirror_t *bagua__mirror_create(const char *prefix, int wake_fd) {
  bagua__mirror_t *m = calloc(1, sizeof(*m));
  if (!m) return NULL;
  snprintf(m->prefix, sizeof(m->prefix), "%s", prefix);
  m->wake_fd = wake_fd;
  pthread_mutex_init(&m->mu, NULL);
  return m;
}

void bagua__mirror_destroy(bagua__mirror_t *m) {
  if (!m) return;
  bagua__etcd_watch_stop(m->watch);
  drop_queue(m);
  clear_entries(m);
  free(m->e);
  free(m->slots);
  free(m->rounds);
  free(m->q);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

int bagua__mirror_set_ranges(bagua__mirror_t *m, const bagua__mirror_range_t *r, size_t n) {
  if (n == 0 || n > BAGUA__MIRROR_RANGES_MAX) return -1;
  if (n == m->nranges && memcmp(r, m->ranges, n * sizeof(*r)) == 0) return 0;
  memcpy(m->ranges, r, n * sizeof(*r));
  m->nranges = n;
  bagua__etcd_watch_stop(m->watch);
  m->watch = NULL;
  m->loaded = 0;
  return 0;
}

static void span_of(const bagua__mirror_range_t *r, bagua__etcd_span_t *s) {
  s->key = r->key;
  s->end = r->end[0] ? r->end : NULL;
  s->prefix = r->prefix;
}

static bagua_status_t load(bagua__mirror_t *m, bagua__etcd_t *c) {
  bagua__etcd_read_t rd[BAGUA__MIRROR_RANGES_MAX];
  bagua__etcd_span_t spans[BAGUA__MIRROR_RANGES_MAX];
  memset(rd, 0, sizeof(rd));
  bagua__etcd_watch_stop(m->watch);
  m->watch = NULL;
  drop_queue(m);
  for (size_t i = 0; i < m->nranges; i++) {
    span_of(&m->ranges[i], &spans[i]);
    rd[i].span = spans[i];
  }
  int64_t rev = 0;
  bagua_status_t st = bagua__etcd_read_ranges(c, rd, m->nranges, &rev);
  if (st != BAGUA_OK) return st;
  clear_entries(m);
  m->loaded = 1;
  for (size_t i = 0; i < m->nranges; i++)
    for (size_t k = 0; k < rd[i].n; k++) upsert(m, &rd[i].kvs[k]);
  bagua__etcd_reads_clear(rd, m->nranges);
  bagua__etcd_watch_opts_t opts = {.prefix = 0, .start_revision = rev + 1, .max_outage_ms = 0};
  st = bagua__etcd_watch_ranges(c, spans, m->nranges, &opts, on_event, m, &m->watch);
  if (st != BAGUA_OK) {
    m->watch = NULL;
    m->loaded = 0;
    return st;
  }
  m->revision = rev;
  m->stats.loads++;
  return BAGUA_OK;
}

bagua_status_t bagua__mirror_sync(bagua__mirror_t *m, bagua__etcd_t *c, int *changed) {
  if (changed) *changed = 0;
  if (m->nranges == 0) return BAGUA_ERR_INVALID_USAGE;
  pthread_mutex_lock(&m->mu);
  int failed = m->failed;
  pthread_mutex_unlock(&m->mu);
  if (failed) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: the watch of job keys %s ended; reading them again",
               m->prefix);
    m->loaded = 0;
  }
  if (!m->loaded) {
    bagua_status_t st = load(m, c);
    if (changed) *changed = 1;
    return st;
  }
  queued_t *q;
  size_t nq;
  pthread_mutex_lock(&m->mu);
  q = m->q;
  nq = m->committed;
  /* The uncommitted tail stays queued for the next sync. */
  size_t rest = m->nq - nq;
  queued_t *tail = NULL;
  size_t tail_cap = rest > 64 ? rest : 64;
  if (rest) {
    tail = malloc(tail_cap * sizeof(*tail));
    if (tail) memcpy(tail, q + nq, rest * sizeof(*tail));
  }
  if (rest && !tail) {
    nq = 0; /* no memory to split the queue: apply nothing this time */
  } else {
    m->q = tail;
    m->qcap = rest ? tail_cap : 0;
    m->nq = rest;
    m->committed = 0;
  }
  pthread_mutex_unlock(&m->mu);
  if (rest && !tail) return BAGUA_OK;
  int ch = 0;
  for (size_t i = 0; i < nq; i++) {
    if (q[i].kv.mod_revision > m->revision) m->revision = q[i].kv.mod_revision;
    if (q[i].del) {
      ch |= erase(m, q[i].kv.key);
      bagua__etcd_kv_clear(&q[i].kv);
    } else {
      ch |= upsert(m, &q[i].kv);
    }
  }
  m->stats.events += nq;
  free(q);
  if (changed) *changed = ch;
  return BAGUA_OK;
}

void bagua__mirror_invalidate(bagua__mirror_t *m) {
  m->loaded = 0;
}

int bagua__mirror_loaded(const bagua__mirror_t *m) {
  return m->loaded;
}

int64_t bagua__mirror_revision(const bagua__mirror_t *m) {
  return m->revision;
}

bagua__agent_entry_t *bagua__mirror_entries(bagua__mirror_t *m, size_t *n) {
  *n = m->n;
  return m->e;
}

const int64_t *bagua__mirror_rounds(const bagua__mirror_t *m, size_t *n) {
  *n = m->nrounds;
  return m->rounds;
}

void bagua__mirror_forget_round(bagua__mirror_t *m, int64_t round) {
  for (size_t i = 0; i < m->nrounds; i++)
    if (m->rounds[i] == round) {
      m->rounds[i] = m->rounds[--m->nrounds];
      return;
    }
}

bagua__mirror_stats_t bagua__mirror_stats(const bagua__mirror_t *m) {
  return m->stats;
}
