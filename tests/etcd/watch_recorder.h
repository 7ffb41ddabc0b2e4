/*
 * Test helper: a watch callback that records events, and a bounded wait for a count of them.
 * Header-only so each watch test stays one executable.
 */
#ifndef BAGUA_TESTS_ETCD_WATCH_RECORDER_H
#define BAGUA_TESTS_ETCD_WATCH_RECORDER_H

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/etcd/etcd.h"
#include "test.h"

#define REC_MAX 256

typedef struct {
  bagua__etcd_event_type_t type;
  char key[64];
  char *value; /* copy of the value, NUL-terminated */
  size_t value_len;
  int64_t mod_revision, create_revision, compact_revision;
  bagua_status_t status;
  int range, last; /* which range of a multi-range watch; the last event of its message */
} rec_event_t;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
  int stop_after; /* the callback returns 1 on this event number (1-based); 0 never */
  rec_event_t ev[REC_MAX];
} recorder_t;

static inline void rec_init(recorder_t *r) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
}

static inline void rec_free(recorder_t *r) {
  for (int i = 0; i < r->n; i++) free(r->ev[i].value);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

static inline int rec_cb(void *arg, const bagua__etcd_event_t *ev) {
  recorder_t *r = arg;
  pthread_mutex_lock(&r->mu);
  if (r->n >= REC_MAX) TEST_FAIL("too many watch events");
  rec_event_t *e = &r->ev[r->n++];
  e->type = ev->type;
  if (ev->key) snprintf(e->key, sizeof(e->key), "%s", ev->key);
  e->value = malloc(ev->value_len + 1);
  if (ev->value) memcpy(e->value, ev->value, ev->value_len);
  e->value[ev->value_len] = '\0';
  e->value_len = ev->value_len;
  e->mod_revision = ev->mod_revision;
  e->create_revision = ev->create_revision;
  e->compact_revision = ev->compact_revision;
  e->status = ev->status;
  e->range = ev->range;
  e->last = ev->last;
  int stop = r->stop_after > 0 && r->n == r->stop_after;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return stop;
}

/* Waits until at least `n` events arrived; fails the test after `timeout_ms`. */
static inline void rec_wait(recorder_t *r, int n, int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_mutex_lock(&r->mu);
  while (r->n < n) {
    if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT) {
      int got = r->n;
      pthread_mutex_unlock(&r->mu);
      TEST_FAIL("waited %d ms for %d watch events, got %d", timeout_ms, n, got);
    }
  }
  pthread_mutex_unlock(&r->mu);
}

static inline int rec_count(recorder_t *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

static inline void rec_expect(const recorder_t *r, int i, bagua__etcd_event_type_t type,
                              const char *key, const char *value) {
  const rec_event_t *e = &r->ev[i];
  if (e->type != type || strcmp(e->key, key) != 0 || strcmp(e->value, value) != 0)
    TEST_FAIL(
        "event %d: got type %d key \"%s\" value \"%s\", expected type %d key \"%s\" "
        "value \"%s\"",
        i, (int)e->type, e->key, e->value, (int)type, key, value);
}

#endif
