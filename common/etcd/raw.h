/*
 * A minimal HTTP/1.1 client for the lease keeper's renewals over plain http:// endpoints.
 *
 * A renewal is the only request an agent at rest makes, every third of its lease TTL, and
 * through libcurl's multi interface one took about 370 us of CPU on this project's test host
 * (URL parsing, handle set-up, the connection cache, three context switches); a thousand
 * agents on one host spent 5 % of a core on them. This client keeps one connection, writes the
 * request in one send and reads the reply by its Content-Length or chunks. https:// endpoints
 * (and anything else it cannot parse) stay with libcurl: bagua__etcd_raw_create() then says
 * BAGUA_ERR_NOT_SUPPORTED.
 *
 * Ownership: the caller owns the client; bagua__etcd_raw_destroy() closes its connection.
 * Threading: one thread uses a client; bagua__etcd_raw_interrupt() may be called from any.
 * Failure: BAGUA_ERR_CURL for a transport failure or a reply it cannot read (the connection is
 * closed; the next call connects again), BAGUA_ERR_TIMEOUT, BAGUA_ERR_ABORTED while an
 * interrupt is pending, BAGUA_ERR_NO_MEMORY.
 */
#ifndef BAGUA_COMMON_ETCD_RAW_H
#define BAGUA_COMMON_ETCD_RAW_H

#include "etcd_internal.h"

typedef struct bagua__etcd_raw bagua__etcd_raw_t;

/* Splits "http://HOST:PORT" (a normalised endpoint) into host and port; -1 for anything else
 * (https, a path, IPv6 brackets, user info). */
int bagua__etcd_raw_parse(const char *endpoint, char *host, size_t hlen, char *port, size_t plen);

bagua_status_t bagua__etcd_raw_create(const char *endpoint, bagua__etcd_raw_t **out);
void bagua__etcd_raw_destroy(bagua__etcd_raw_t *r);

/* POSTs `body` to `path` and reads the reply into `reply` (NUL-terminated), its HTTP status
 * into *http, within timeout_ms. A kept connection that etcd closed meanwhile is replaced once. */
bagua_status_t bagua__etcd_raw_post(bagua__etcd_raw_t *r, const char *path, const char *body,
                                    int timeout_ms, etcd_buf_t *reply, long *http);

/* on: calls in flight and to come end with BAGUA_ERR_ABORTED; off: clears that. */
void bagua__etcd_raw_interrupt(bagua__etcd_raw_t *r, int on);

#endif
