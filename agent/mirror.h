/*
 * The agent's copy of the etcd keys it follows (docs/agent.md, "What an agent reads").
 *
 * The copy is loaded with one multi-range read and then kept current by one watch over the
 * same ranges, whose events carry every change with its key, value and revision. So a wake-up
 * reads nothing from etcd, an agent at rest sends etcd nothing (its lease keeper aside), and
 * the work of an event is O(1) for the agent that receives it. A full read happens only to
 * load, when the ranges change, and to resynchronise after the watch failed (its history was
 * compacted, or etcd stayed unreachable): never periodically.
 *
 * Consistency: the watch thread queues events; bagua__mirror_sync() applies them on the
 * caller's thread, but only up to the last event of a complete message from etcd, and etcd
 * sends all of one revision's events for one range in one message. A copy of one range (the
 * leader's: the job's whole prefix) is therefore always the range at one revision; a copy of
 * several ranges is each range at a revision of its own, which may trail another's by the
 * microseconds between two messages of the same revision.
 *
 * Workers' bootstrap and rebuild keys (rounds/<N>/bootstrap/, rebuild/) are not kept, only the numbers of the
 * rounds that have keys (for the leader's clean-up): a world of them concerns no decision.
 *
 * Ownership: the mirror owns its entries, their decoded records (snapshot.c fills and frees
 * them) and its watch. Threading: every function on one thread; the watch thread only queues.
 */
#ifndef BAGUA_AGENT_MIRROR_H
#define BAGUA_AGENT_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "common/etcd/etcd.h"
#include "schema.h"

typedef struct bagua__mirror bagua__mirror_t;

#define BAGUA__MIRROR_RANGES_MAX 8

/* One range to follow: `key` alone, every key under `key` (prefix), or [key, end). */
typedef struct {
  char key[BAGUA_RDZV_KEY_MAX];
  char end[BAGUA_RDZV_KEY_MAX]; /* "": no explicit end */
  int prefix;
} bagua__mirror_range_t;

/* Counters for tests and the metrics endpoint. */
typedef struct {
  uint64_t loads;  /* full reads: the first one, range changes and resynchronisations */
  uint64_t events; /* watch events applied */
} bagua__mirror_stats_t;

/* A mirror of the job whose keys start with `prefix`; `wake_fd` (an eventfd) is written when
 * the watch queued something. Returns NULL when out of memory. */
bagua__mirror_t *bagua__mirror_create(const char *prefix, int wake_fd);
void bagua__mirror_destroy(bagua__mirror_t *m);

/* The ranges to follow from now on (1..BAGUA__MIRROR_RANGES_MAX). When they differ from the
 * current ones, the watch stops and the next sync loads the new ones. Returns 0 or -1. */
int bagua__mirror_set_ranges(bagua__mirror_t *m, const bagua__mirror_range_t *r, size_t n);

/*
 * Brings the copy up to date: loads it when it must (see above), one read and a watch from
 * the revision after it; otherwise applies what the watch queued. Returns BAGUA_OK, or the
 * status of a load that failed (etcd unreachable: the copy keeps what it had, and the next
 * sync tries again). `*changed` (optional) is set to 1 when an entry changed.
 */
bagua_status_t bagua__mirror_sync(bagua__mirror_t *m, bagua__etcd_t *c, int *changed);

/* Makes the next sync load the copy again (after an outage, when it may be stale). */
void bagua__mirror_invalidate(bagua__mirror_t *m);
/* 1 once a load has succeeded for the current ranges. */
int bagua__mirror_loaded(const bagua__mirror_t *m);
/* The revision of the last load or of the last event applied. */
int64_t bagua__mirror_revision(const bagua__mirror_t *m);
/* The entries, in no particular order (valid until the next sync). */
bagua__agent_entry_t *bagua__mirror_entries(bagua__mirror_t *m, size_t *n);
/* The rounds that had endpoint records when they were last seen (for clean-up), and the
 * removal of one the leader deleted. */
const int64_t *bagua__mirror_rounds(const bagua__mirror_t *m, size_t *n);
void bagua__mirror_forget_round(bagua__mirror_t *m, int64_t round);
bagua__mirror_stats_t bagua__mirror_stats(const bagua__mirror_t *m);

#endif
