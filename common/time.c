/*
 * The one monotonic clock, deadlines and the timed condition wait (common/time.h).
 */
#include "common/time.h"

#include <errno.h>
#include <stdio.h>

int64_t bagua__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t bagua__now_ms(void) {
  return bagua__now_ns() / 1000000;
}

double bagua__now_s(void) {
  return (double)bagua__now_ns() * 1e-9;
}

int64_t bagua__deadline_in(int64_t ms) {
  if (ms < 0) return BAGUA__NO_DEADLINE;
  int64_t now = bagua__now_ns();
  /* Saturate: a huge timeout means "effectively never", not an overflow into the past. */
  if (ms > (BAGUA__NO_DEADLINE - now) / 1000000) return BAGUA__NO_DEADLINE;
  return now + ms * 1000000;
}

int64_t bagua__ms_left(int64_t deadline) {
  if (deadline == BAGUA__NO_DEADLINE) return INT64_MAX;
  int64_t left = deadline - bagua__now_ns();
  return left > 0 ? (left + 999999) / 1000000 : 0;
}

int bagua__expired(int64_t deadline) {
  return deadline != BAGUA__NO_DEADLINE && bagua__now_ns() >= deadline;
}

int64_t bagua__wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void bagua__format_wall_ms(int64_t wall_ms, char *out, size_t len) {
  time_t t = (time_t)(wall_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char base[32];
  strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, len, "%s.%03dZ", base, (int)(wall_ms % 1000));
}

int bagua__cond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  int rc = pthread_condattr_init(&ca);
  if (rc != 0) return rc;
  rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
}

int bagua__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline) {
  if (deadline == BAGUA__NO_DEADLINE) return pthread_cond_wait(cv, mu);
  struct timespec ts = {.tv_sec = deadline / 1000000000, .tv_nsec = deadline % 1000000000};
  int rc = pthread_cond_timedwait(cv, mu, &ts);
  return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

void bagua__sleep_ms(int64_t ms) {
  if (ms <= 0) return;
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}
