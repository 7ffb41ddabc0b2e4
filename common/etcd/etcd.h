/*
 * Internal etcd v3 client over etcd's JSON gateway (HTTP/1.1 + JSON through libcurl).
 *
 * Used by bagua-agent and bagua-launch for membership, rendezvous rounds and job status. Only
 * plain http:// endpoints are used by the project; https:// URLs are passed to libcurl as is.
 *
 * Conventions shared by every function here:
 *  - Every call returns a bagua_status_t. Transport failures are BAGUA_ERR_CURL (refused,
 *    reset, unresolvable) or BAGUA_ERR_TIMEOUT (no answer within the client's timeout), each
 *    with a warning naming the endpoint and path. An error reported by etcd, or a reply that
 *    is not the JSON we expect, is BAGUA_ERR_ETCD with etcd's message in the warning. A call
 *    cancelled by bagua__etcd_abort() is BAGUA_ERR_ABORTED.
 *  - Every call is bounded: a unary request returns within the client's timeout (counted
 *    from the call, including time queued behind another thread's call on the same client),
 *    and the background threads (lease keeper, watch) stop promptly when asked.
 *  - Keys are NUL-terminated strings. Values are byte strings with an explicit length; values
 *    handed back are additionally NUL-terminated one byte past their length, so text values
 *    can be used as C strings.
 *  - Revisions and lease ids are int64_t. A lease id of 0 means "no lease".
 *  - On failure, output structures are zeroed and output pointers NULL, so freeing them is
 *    always safe; other outputs (revisions, flags) are meaningful only on BAGUA_OK.
 *
 * Thread safety: one client may be shared by threads; its calls are serialised by an internal
 * mutex (one HTTP connection per client). Use one client per thread for parallel requests.
 * The lease keeper and each watch open their own connections, so they never queue behind the
 * caller's requests.
 */
#ifndef BAGUA_COMMON_ETCD_ETCD_H
#define BAGUA_COMMON_ETCD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"

typedef struct bagua__etcd bagua__etcd_t;

/* One key-value pair. Strings are malloc'ed and owned by the structure. */
typedef struct {
  char *key;      /* NUL-terminated */
  size_t key_len; /* bytes before the NUL (keys with embedded NULs are kept whole) */
  char *value;    /* NUL-terminated one byte past value_len; "" for an empty value */
  size_t value_len;
  int64_t create_revision; /* revision that created the key (0: the key does not exist) */
  int64_t mod_revision;    /* revision of the last modification */
  int64_t version;         /* modifications since creation */
  int64_t lease;           /* attached lease, 0 for none */
} bagua__etcd_kv_t;

/* Frees the strings of `kv` and zeroes it; NULL and zeroed structures are accepted. */
void bagua__etcd_kv_clear(bagua__etcd_kv_t *kv);
/* Frees an array returned by bagua__etcd_range_prefix (each element and the array). */
void bagua__etcd_kvs_free(bagua__etcd_kv_t *kvs, size_t n);

/* ---------------------------------------------------------------------------------------- */
/* Client                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/*
 * Creates a client. `endpoints` is one endpoint or a comma-separated list; each is a URL
 * ("http://127.0.0.1:2379") or "host:port" (http:// is assumed). When an endpoint cannot be
 * connected to, the next one is tried within the same call; a request that may have reached a
 * server is never re-sent elsewhere. `timeout_ms` (> 0) bounds each call as a whole, including
 * failover. No connection is made here. Destroy with bagua__etcd_destroy.
 */
bagua_status_t bagua__etcd_create(const char *endpoints, int timeout_ms, bagua__etcd_t **out);
/* Closes connections and frees the client. It must not be in use by other threads. NULL ok. */
void bagua__etcd_destroy(bagua__etcd_t *c);
/* The endpoint that answered last (or the first one), e.g. "http://127.0.0.1:2379". */
const char *bagua__etcd_endpoint(const bagua__etcd_t *c);
/* The per-call timeout given at creation (or by the last bagua__etcd_set_timeout_ms). */
int bagua__etcd_timeout_ms(const bagua__etcd_t *c);
/* Changes the per-call timeout (> 0) for calls started from now on; e.g. to fit the next call
 * in what is left of a larger deadline. Only from the thread that makes the client's calls. */
void bagua__etcd_set_timeout_ms(bagua__etcd_t *c, int timeout_ms);
/* When etcd stopped answering this client: the monotonic time (bagua__now_ms) at which the
 * first call that failed to reach it began, since the last call that got a reply; 0 while
 * it answers. */
int64_t bagua__etcd_unreachable_since_ms(const bagua__etcd_t *c);
/*
 * Sets (`on` = 1) or clears a sticky abort flag: the call in flight on this client, and all
 * later ones until cleared, return BAGUA_ERR_ABORTED at once. Safe to call from any thread
 * (not from a signal handler) while the client exists.
 */
void bagua__etcd_abort(bagua__etcd_t *c, int on);
/*
 * Makes every call of this client (not of its clones: leases' keepers and watches) end with
 * BAGUA_ERR_ABORTED as soon as `fd` is readable, and while it stays so; -1 removes it. The
 * descriptor is polled, never read. A program that blocks its termination signals into a
 * signalfd passes one for those signals alone, so a signal that arrives during a request
 * ends the request at once and the caller reads the signal next. Any thread.
 */
void bagua__etcd_set_interrupt_fd(bagua__etcd_t *c, int fd);

/* ---------------------------------------------------------------------------------------- */
/* Key-value                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/*
 * Writes `key` = `value` (`value_len` bytes; `value` may be NULL when value_len is 0), attached
 * to `lease` (0 for none). Optional outputs: `*revision` gets the revision of this write, and
 * `prev` the previous pair (prev->key is NULL and its revisions 0 when there was none; clear it
 * with bagua__etcd_kv_clear).
 */
bagua_status_t bagua__etcd_put(bagua__etcd_t *c, const char *key, const void *value,
                               size_t value_len, int64_t lease, int64_t *revision,
                               bagua__etcd_kv_t *prev);

/*
 * Reads `key`. `*found` is set to 1 and `kv` filled when it exists; when it does not, `*found`
 * is 0, `kv` is zeroed and the call still returns BAGUA_OK. `revision` (optional) gets the store
 * revision the read was served at, so a watch from revision + 1 misses nothing.
 */
bagua_status_t bagua__etcd_get(bagua__etcd_t *c, const char *key, bagua__etcd_kv_t *kv, int *found,
                               int64_t *revision);

/*
 * Reads every key that starts with `prefix` ("" reads the whole key space), sorted by key.
 * `*kvs` gets a malloc'ed array of `*n` pairs (NULL when *n is 0) that the caller frees with
 * bagua__etcd_kvs_free. `revision` as for bagua__etcd_get.
 */
bagua_status_t bagua__etcd_range_prefix(bagua__etcd_t *c, const char *prefix,
                                        bagua__etcd_kv_t **kvs, size_t *n, int64_t *revision);

/*
 * A key range: `key` alone (prefix 0, end NULL), every key that starts with `key` (prefix 1),
 * or the keys from `key` up to but not including `end` (end set, prefix 0).
 */
typedef struct {
  const char *key;
  const char *end;
  int prefix;
} bagua__etcd_span_t;

/* One range of bagua__etcd_read_ranges: what to read, and what came back. */
typedef struct {
  bagua__etcd_span_t span;
  int count_only; /* 1: only `count` is filled, no pairs are sent */
  int keys_only;  /* 1: the pairs come without their values ("") */
  /* Outputs: the pairs, sorted by key (free with bagua__etcd_reads_clear), and how many keys
   * the range holds. */
  bagua__etcd_kv_t *kvs;
  size_t n;
  int64_t count;
} bagua__etcd_read_t;

/*
 * Reads several ranges in one request (a transaction of range operations), so every range is
 * read at the same revision: `*revision` (optional) gets it, and a watch of those ranges from
 * revision + 1 misses nothing. At most BAGUA_ETCD_READS_MAX ranges (etcd's default bound on the
 * operations of one transaction). On failure every output is cleared.
 */
#define BAGUA_ETCD_READS_MAX 128
bagua_status_t bagua__etcd_read_ranges(bagua__etcd_t *c, bagua__etcd_read_t *r, size_t n,
                                       int64_t *revision);
/* Frees the outputs of `n` reads and zeroes them (the spans are kept). */
void bagua__etcd_reads_clear(bagua__etcd_read_t *r, size_t n);

/* One put of bagua__etcd_put_many: `value_len` bytes of `value` on `lease` (0: none). */
typedef struct {
  const char *key;
  const void *value;
  size_t value_len;
  int64_t lease;
} bagua__etcd_put_t;

/*
 * Writes `n` keys, BAGUA_ETCD_READS_MAX per request (each batch one transaction). A batch that
 * etcd refuses (a key's lease has ended) is written key by key instead, so only the keys etcd
 * refuses are left out. `*written` (optional) gets how many were written. Returns BAGUA_OK, or
 * the first failure (a transport failure stops at once).
 */
bagua_status_t bagua__etcd_put_many(bagua__etcd_t *c, const bagua__etcd_put_t *p, size_t n,
                                    size_t *written);

/* Deletes `key`; `deleted` (optional) gets 1 or 0. Deleting a missing key is not an error. */
bagua_status_t bagua__etcd_delete(bagua__etcd_t *c, const char *key, int64_t *deleted);
/* Deletes every key under `prefix` (must not be empty); `deleted` gets the count. */
bagua_status_t bagua__etcd_delete_prefix(bagua__etcd_t *c, const char *prefix, int64_t *deleted);

/*
 * Compacts the history up to `revision` and waits until etcd has applied it. Watches that ask
 * for an older revision afterwards end with a FAILED event. Used by maintenance and tests.
 */
bagua_status_t bagua__etcd_compact(bagua__etcd_t *c, int64_t revision);

/* ---------------------------------------------------------------------------------------- */
/* Transactions (compare-and-swap)                                                           */
/* ---------------------------------------------------------------------------------------- */

/*
 * Writes `key` only if it does not exist (compare create_revision == 0), in one transaction.
 * `*created` is 1 if this call created it. Optional outputs: `*revision` is the revision of the
 * transaction; `current` gets the pair as it is now (the one just written, or the existing one
 * that won), read in the same transaction. Clear `current` with bagua__etcd_kv_clear.
 */
bagua_status_t bagua__etcd_create_if_absent(bagua__etcd_t *c, const char *key, const void *value,
                                            size_t value_len, int64_t lease, int *created,
                                            int64_t *revision, bagua__etcd_kv_t *current);

/*
 * Writes `key` only if its mod_revision still equals `expect_mod_revision` (0 means "only if
 * absent"). `*swapped` is 1 on success. Outputs as for bagua__etcd_create_if_absent; on a lost
 * race `current` holds the value that won (key NULL if the key was deleted).
 */
bagua_status_t bagua__etcd_cas(bagua__etcd_t *c, const char *key, int64_t expect_mod_revision,
                               const void *value, size_t value_len, int64_t lease, int *swapped,
                               int64_t *revision, bagua__etcd_kv_t *current);

/* Deletes `key` only if its mod_revision equals `expect_mod_revision`; `*deleted` is 1 if so. */
bagua_status_t bagua__etcd_cad(bagua__etcd_t *c, const char *key, int64_t expect_mod_revision,
                               int *deleted);

/* ---------------------------------------------------------------------------------------- */
/* Leases                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* Grants a lease of `ttl_s` seconds (> 0); `*id` gets its id, `granted_ttl_s` (optional) the
 * TTL etcd actually granted (it raises TTLs below its minimum). */
bagua_status_t bagua__etcd_lease_grant(bagua__etcd_t *c, int64_t ttl_s, int64_t *id,
                                       int64_t *granted_ttl_s);

/*
 * Renews lease `id` once. On BAGUA_OK, `*ttl_s` is the renewed TTL, or 0 when etcd reports the
 * lease as expired or unknown: that is definitive (the lease and its keys are gone) and is
 * logged as a warning.
 */
bagua_status_t bagua__etcd_lease_keepalive_once(bagua__etcd_t *c, int64_t id, int64_t *ttl_s);

/* Revokes lease `id`, deleting its keys. A lease that is already gone is not an error. */
bagua_status_t bagua__etcd_lease_revoke(bagua__etcd_t *c, int64_t id);

/*
 * Background keep-alive: a thread with its own connection renews the lease every ttl/3 (but
 * not more often than every 200 ms), each renewal bounded by that period, and retries sooner
 * after a failed attempt. It never revokes the lease.
 */
typedef struct bagua__etcd_keeper bagua__etcd_keeper_t;

/* Starts a keeper for lease `id` of `ttl_s` seconds, using `c`'s endpoints and timeout. */
bagua_status_t bagua__etcd_keeper_start(bagua__etcd_t *c, int64_t id, int64_t ttl_s,
                                        bagua__etcd_keeper_t **out);
/*
 * 1 once the lease is known to be lost: etcd answered that it expired or is unknown, or no
 * renewal has succeeded for longer than the TTL (etcd may have expired it during an outage;
 * the keeper keeps trying, and if etcd later confirms the lease the flag goes back to 0 unless
 * etcd had reported it gone). Thread-safe; cheap enough to poll.
 */
int bagua__etcd_keeper_lost(const bagua__etcd_keeper_t *k);
/* Makes the keeper write a 1 (8 bytes, as to an eventfd) to `fd` whenever its renewals begin
 * or stop failing, and when etcd says the lease is gone; -1 stops it. The descriptor must
 * outlive the keeper (or be set to -1 first). Any thread. */
void bagua__etcd_keeper_set_notify_fd(bagua__etcd_keeper_t *k, int fd);
/* When renewals began to fail: the monotonic time (bagua__now_ms) at which the first renewal
 * since the last successful one was sent, or 0 while they succeed. A holder that sends
 * nothing else to etcd learns of an outage from this within one renewal period. */
int64_t bagua__etcd_keeper_failing_since(const bagua__etcd_keeper_t *k);
/* Milliseconds since the last successful renewal (since start if none). */
int64_t bagua__etcd_keeper_since_ok_ms(const bagua__etcd_keeper_t *k);
/* Stops the thread (at once: a renewal in flight is interrupted) and frees the keeper. The
 * lease itself is left alone; revoke it separately to leave at once. NULL is accepted. */
void bagua__etcd_keeper_stop(bagua__etcd_keeper_t *k);

/* ---------------------------------------------------------------------------------------- */
/* Watch                                                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef enum {
  BAGUA__ETCD_EVENT_PUT = 0,
  BAGUA__ETCD_EVENT_DELETE = 1,
  /* Delivered once, last, when the watch ends by itself: see `status`. */
  BAGUA__ETCD_EVENT_FAILED = 2
} bagua__etcd_event_type_t;

/* Pointers are valid only during the callback. */
typedef struct {
  bagua__etcd_event_type_t type;
  /* Which range of bagua__etcd_watch_ranges the event belongs to (0 for a single watch). */
  int range;
  /* 1 on the last event of one message from etcd. etcd sends all of one revision's events for
   * one range in one message, so a consumer that applies events up to a `last` one has applied
   * whole transactions of that range. */
  int last;
  const char *key; /* NULL for FAILED */
  size_t key_len;
  const char *value; /* NUL-terminated; "" for DELETE */
  size_t value_len;
  int64_t mod_revision;    /* DELETE: the deletion's revision; FAILED: the resume revision */
  int64_t create_revision; /* 0 for DELETE */
  int64_t version;         /* 0 for DELETE */
  int64_t lease;
  /* FAILED only: why the watch ended (BAGUA_ERR_ETCD when the start revision was compacted,
   * then compact_revision is the oldest revision still available; BAGUA_ERR_TIMEOUT when
   * etcd stayed unreachable longer than max_outage_ms, or BAGUA_ERR_ETCD when it kept sending
   * content we cannot parse for that long). */
  bagua_status_t status;
  int64_t compact_revision;
} bagua__etcd_event_t;

/*
 * Called on the watch thread, one event at a time, in revision order. Return 0 to continue or
 * non-zero to end the watch (no FAILED event follows). It should return quickly (hand work to
 * another thread): while it runs the stream is not read, and bagua__etcd_watch_stop waits for
 * it. It must not call bagua__etcd_watch_stop on its own watch.
 */
typedef int (*bagua__etcd_watch_cb)(void *arg, const bagua__etcd_event_t *ev);

typedef struct {
  int prefix;             /* 1: watch every key starting with `key` */
  int64_t start_revision; /* first revision to report (inclusive); 0: changes after the start */
  int max_outage_ms;      /* end with FAILED after this long without a working stream;
                             0: retry until stopped */
} bagua__etcd_watch_opts_t;

typedef struct bagua__etcd_watch bagua__etcd_watch_t;

/*
 * Starts watching `key` (or the prefix) on a thread with its own connection, and returns once
 * etcd has confirmed the watch, so every change made after this returns is reported. When the
 * connection drops (etcd restarted, network error) the thread reconnects with back-off and
 * resumes at the revision after the last one it delivered, so no event is lost or repeated.
 * Fails with BAGUA_ERR_CURL/TIMEOUT when etcd cannot be reached within the client timeout.
 * `opts` may be NULL (exact key, from now, retry forever). `c` is only used to copy endpoints
 * and the timeout; it may be destroyed while the watch runs.
 *
 * A dropped or refused connection is noticed at once, and a vanished peer host through TCP
 * keep-alive (about 25 s). An etcd that is frozen but keeps its connections open is not
 * noticed by the watch; lease renewals (bagua__etcd_keeper_lost) detect that case.
 */
bagua_status_t bagua__etcd_watch_start(bagua__etcd_t *c, const char *key,
                                       const bagua__etcd_watch_opts_t *opts,
                                       bagua__etcd_watch_cb cb, void *arg,
                                       bagua__etcd_watch_t **out);
/*
 * Watches several ranges over one stream (one connection, one thread): every change in any of
 * them is reported with ev->range set to its index. Each range resumes from its own revision
 * after a reconnect. `opts->prefix` is ignored (each span says what it covers); the other
 * options and every guarantee are bagua__etcd_watch_start's. 1..BAGUA_ETCD_READS_MAX ranges.
 */
bagua_status_t bagua__etcd_watch_ranges(bagua__etcd_t *c, const bagua__etcd_span_t *spans, size_t n,
                                        const bagua__etcd_watch_opts_t *opts,
                                        bagua__etcd_watch_cb cb, void *arg,
                                        bagua__etcd_watch_t **out);
/* Next revision the watch will report (last delivered + 1; with several ranges, the lowest of
 * theirs). Thread-safe. */
int64_t bagua__etcd_watch_next_revision(const bagua__etcd_watch_t *w);
/* Stops the watch thread promptly (it wakes from network waits at once), waits for it, and
 * frees the watch. Returns BAGUA_ERR_INVALID_USAGE if called from the watch callback. NULL ok. */
bagua_status_t bagua__etcd_watch_stop(bagua__etcd_watch_t *w);

/* ---------------------------------------------------------------------------------------- */
/* Cluster membership (cluster.c)                                                            */
/* ---------------------------------------------------------------------------------------- */

/* One member of the etcd cluster; a learner added but not yet started has no name and no
 * client URL. URLs are the first of each list. */
typedef struct {
  uint64_t id;
  char name[64];
  char peer[128];
  char client[128];
  int learner;
} bagua__etcd_member_t;

/* The cluster's members, at most `max` into out, their number in *n. */
bagua_status_t bagua__etcd_member_list(bagua__etcd_t *c, bagua__etcd_member_t *out, int max,
                                       int *n);
/* Adds a member at `peer_url` (a learner, which does not vote, when `learner`): its id in *id,
 * and the cluster's members after the change (it included) in members. etcd refuses a change
 * while the cluster settles (BAGUA_ERR_ETCD, logged at INFO only: callers try again). */
bagua_status_t bagua__etcd_member_add(bagua__etcd_t *c, const char *peer_url, int learner,
                                      uint64_t *id, bagua__etcd_member_t *members, int max, int *n);
/* Promotes learner `id` to a voting member. etcd refuses a learner that has not caught up with
 * the leader (BAGUA_ERR_ETCD, its gRPC code in *grpc_code when not NULL): try again later. */
bagua_status_t bagua__etcd_member_promote(bagua__etcd_t *c, uint64_t id, int *grpc_code);
/* Removes member `id` from the cluster (etcd refuses to remove a voter that would cost the
 * cluster its quorum: BAGUA_ERR_ETCD). */
bagua_status_t bagua__etcd_member_remove(bagua__etcd_t *c, uint64_t id);

#endif
