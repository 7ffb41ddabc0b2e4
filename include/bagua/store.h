/*
 * A small key-value store for one job's set-up data, kept in the job's etcd: what
 * torch.distributed's Store interface needs (set, get that waits, add, compare-and-set, check,
 * delete, count), so that a torch script started by bagua-launch on several hosts can
 * rendezvous its Gloo group without the unauthenticated TCPStore listener torch would open on
 * rank 0. The PyTorch front end wraps it (bagua.torch_api's init_process_group); any program
 * may use it.
 *
 * Keys live under /bagua/<job>/rounds/<round>/store/: each rendezvous round has its own
 * namespace, and the agents delete a round's keys with the round's other records once it is
 * two rounds old. The values are as trustworthy as etcd, like every record of the job (see
 * docs/security.md).
 *
 * Every call is bounded: an etcd request by the store's timeout, bagua_store_get's wait by its
 * own argument. Errors: BAGUA_ERR_INVALID_ARG for a bad argument (the warning names it),
 * BAGUA_ERR_TIMEOUT when a key did not appear in time, BAGUA_ERR_CURL/BAGUA_ERR_TIMEOUT when
 * etcd does not answer, BAGUA_ERR_ETCD for an error etcd reports.
 *
 * Threading: one store may be used by several threads; their etcd requests are serialised.
 * Ownership: bagua_store_open() hands out a store the caller closes with bagua_store_close();
 * values returned through `void **` are the caller's, freed with bagua_store_free().
 */
#ifndef BAGUA_STORE_H
#define BAGUA_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bagua_store_s bagua_store_t;

/*
 * Opens the store of round `round` (>= 0) of job `job_id` (the rule of BAGUA_JOB_ID) in the
 * etcd at `endpoints` (BAGUA_RDZV_ENDPOINT's form: "host:port" or URLs, comma-separated).
 * `timeout_ms` (> 0) bounds each etcd request. No request is made here.
 */
BAGUA_EXTERN bagua_status_t bagua_store_open(const char *endpoints, const char *job_id,
                                             int64_t round, int timeout_ms, bagua_store_t **out);
/* Closes the store (NULL is accepted); the keys stay for the other ranks. */
BAGUA_EXTERN void bagua_store_close(bagua_store_t *store);
/* Frees a value returned by this API (NULL is accepted). */
BAGUA_EXTERN void bagua_store_free(void *value);

/* Keys are NUL-terminated, 1 to 512 bytes; values any bytes (`value` may be NULL if len 0). */
BAGUA_EXTERN bagua_status_t bagua_store_set(bagua_store_t *store, const char *key,
                                            const void *value, size_t len);
/*
 * Reads `key`, waiting up to `wait_ms` (>= 0) for another rank to set it. On success *value
 * is a malloc'ed copy (NUL-terminated one byte past *len) that the caller frees; otherwise it
 * is NULL, and a key that did not appear in time is BAGUA_ERR_TIMEOUT.
 */
BAGUA_EXTERN bagua_status_t bagua_store_get(bagua_store_t *store, const char *key, int wait_ms,
                                            void **value, size_t *len);
/* Adds `delta` to the decimal integer stored at `key` (absent: 0), atomically across ranks;
 * *result gets the new value. A key that holds anything but a decimal int64 (an optional sign
 * and digits), or a sum outside [INT64_MIN, INT64_MAX], is BAGUA_ERR_INVALID_ARG (the warning
 * names the key, the value and the delta) and leaves the key as it was. */
BAGUA_EXTERN bagua_status_t bagua_store_add(bagua_store_t *store, const char *key, int64_t delta,
                                            int64_t *result);
/*
 * Sets `key` to `desired` if it holds `expected`, or if it is absent and `expected_len` is 0,
 * atomically across ranks. *current gets what the key holds afterwards (the desired value on
 * success; the value that stayed otherwise; `expected` itself for an absent key), as torch's
 * stores answer compare_set; the caller frees it.
 */
BAGUA_EXTERN bagua_status_t bagua_store_compare_set(bagua_store_t *store, const char *key,
                                                    const void *expected, size_t expected_len,
                                                    const void *desired, size_t desired_len,
                                                    void **current, size_t *current_len);
/* *exists gets 1 when `key` is set, else 0. */
BAGUA_EXTERN bagua_status_t bagua_store_check(bagua_store_t *store, const char *key, int *exists);
/* Deletes `key`; *deleted (optional) gets 1 if it existed. */
BAGUA_EXTERN bagua_status_t bagua_store_delete(bagua_store_t *store, const char *key, int *deleted);
/* *count gets the number of keys in the store. */
BAGUA_EXTERN bagua_status_t bagua_store_count(bagua_store_t *store, int64_t *count);

#ifdef __cplusplus
}
#endif

#endif
