/*
 * One clock for the whole tree: CLOCK_MONOTONIC in nanoseconds (immune to wall-clock steps),
 * deadlines on that clock, and the timed condition wait that every waiter uses.
 *
 * A deadline is an absolute time on this clock (bagua__deadline_in(ms)); BAGUA__NO_DEADLINE
 * never expires and is only for waits that another path (an abort flag, a stop request) is
 * guaranteed to end. Condition variables waited on with bagua__cond_wait_until() must be
 * created by bagua__cond_init(), which puts them on the same clock.
 *
 * Threading: every function is thread-safe and never blocks, except bagua__cond_wait_until(),
 * which blocks as pthread_cond_timedwait() does.
 */
#ifndef BAGUA_COMMON_TIME_H
#define BAGUA_COMMON_TIME_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define BAGUA__NO_DEADLINE INT64_MAX

/* Monotonic time since an arbitrary start. */
int64_t bagua__now_ns(void);
int64_t bagua__now_ms(void);
double bagua__now_s(void);

/* The deadline `ms` milliseconds from now; a negative `ms` means BAGUA__NO_DEADLINE. */
int64_t bagua__deadline_in(int64_t ms);
/* Milliseconds left until `deadline` (0 once it passed; INT64_MAX for no deadline). */
int64_t bagua__ms_left(int64_t deadline);
/* 1 once `deadline` has passed. */
int bagua__expired(int64_t deadline);

/* Wall-clock time in milliseconds since the epoch, for timestamps shown to people or stored
 * in etcd records; never for measuring an interval. */
int64_t bagua__wall_ms(void);

/* `wall_ms` as ISO 8601 UTC with milliseconds, "2026-12-04T05:13:19.123Z" (25 bytes with the
 * NUL). */
void bagua__format_wall_ms(int64_t wall_ms, char *out, size_t len);

/* Initialises `cv` on the monotonic clock. Returns 0 or an errno value. */
int bagua__cond_init(pthread_cond_t *cv);
/* pthread_cond_timedwait() up to a monotonic `deadline` (BAGUA__NO_DEADLINE: untimed).
 * Returns 0 when woken (maybe spuriously: re-check the predicate) and ETIMEDOUT once the
 * deadline passed. The usual loop:
 *   while (!predicate && bagua__cond_wait_until(&cv, &mu, deadline) == 0) {}  */
int bagua__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline);

/* Sleeps for `ms` milliseconds (restarted after signals). */
void bagua__sleep_ms(int64_t ms);

#endif
