/*
 * Private to common/etcd: the client structure, the libcurl connection wrapper shared by the
 * unary client, the lease keeper and the watch thread, and the JSON glue for etcd's gateway.
 */
#ifndef BAGUA_COMMON_ETCD_INTERNAL_H
#define BAGUA_COMMON_ETCD_INTERNAL_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"
#include "etcd.h"

/* Largest reply (or watch line) accepted from etcd; anything bigger is treated as corrupt. */
#define ETCD_MAX_REPLY_BYTES ((size_t)64 << 20)

/* gRPC status codes that etcd's gateway reports in error bodies. */
#define ETCD_GRPC_NOT_FOUND 5

/* Growable byte buffer; always NUL-terminated when data is non-NULL. */
typedef struct {
  char *data;
  size_t len, cap;
} etcd_buf_t;

int bagua__etcd_buf_append(etcd_buf_t *b, const void *p, size_t n);
void bagua__etcd_buf_free(etcd_buf_t *b);

/*
 * One libcurl easy handle driven through its own multi handle, so that another thread can
 * interrupt a transfer at once with curl_multi_wakeup() instead of waiting for libcurl's
 * roughly once-per-second progress callback.
 */
typedef struct {
  CURL *easy;
  CURLM *multi;
  struct curl_slist *headers;
  int abort; /* atomic: non-zero makes transfers end with BAGUA_ERR_ABORTED */
  /* atomic: while this descriptor is readable transfers end with BAGUA_ERR_ABORTED; -1: none */
  int interrupt_fd;
  char errbuf[CURL_ERROR_SIZE];
  /* Monotonic ms at which the transfer in flight ends with BAGUA_ERR_TIMEOUT (0: no such
   * bound); set by the transfer's own write callback, on the transfer's thread. */
  int64_t give_up_at;
} etcd_conn_t;

bagua_status_t bagua__etcd_conn_init(etcd_conn_t *conn);
void bagua__etcd_conn_free(etcd_conn_t *conn);
/* Sets the abort flag and wakes the transfer in flight, if any. Any thread. */
void bagua__etcd_conn_interrupt(etcd_conn_t *conn, int on);
/*
 * Prepares a POST of `body` to `url` whose reply bytes go to `write_cb(ptr, 1, n, userdata)`.
 * `timeout_ms` bounds the whole transfer (0: unbounded, for watch streams); `connect_ms`
 * bounds connection set-up.
 */
void bagua__etcd_conn_setup(etcd_conn_t *conn, const char *url, const char *body,
                            curl_write_callback write_cb, void *userdata, long timeout_ms,
                            long connect_ms);
/* Runs the prepared transfer. Returns BAGUA_ERR_ABORTED if interrupted, BAGUA_ERR_TIMEOUT once
 * conn->give_up_at passes, else BAGUA_OK with libcurl's result in *res (which may itself be an
 * error). */
bagua_status_t bagua__etcd_conn_perform(etcd_conn_t *conn, CURLcode *res);

struct bagua__etcd {
  char **endpoints; /* normalised base URLs without a trailing slash */
  int n_endpoints;
  int cur; /* atomic: index of the endpoint that answered last */
  int timeout_ms;
  /* atomic: monotonic ms at which the first call that could not reach etcd began, since the
   * last call that got a reply; 0 while etcd answers (bagua__etcd_unreachable_since_ms). */
  int64_t unreachable_since;
  pthread_mutex_t lock; /* serialises use of `conn` */
  etcd_conn_t conn;
};

/* Flags for bagua__etcd_call. */
enum {
  /* Transport failures are logged at INFO instead of WARN (the caller reports them). */
  ETCD_CALL_QUIET_TRANSPORT = 1 << 0,
  /* An etcd NOT_FOUND error is logged at INFO instead of WARN. */
  ETCD_CALL_QUIET_NOT_FOUND = 1 << 1,
  /* Every etcd error is logged at INFO (a caller that retries, such as membership changes
   * refused while the cluster settles). */
  ETCD_CALL_QUIET_ETCD = 1 << 2,
};

/*
 * POSTs the JSON `body` to `path` (e.g. "/v3/kv/put") with failover and the client timeout.
 * On BAGUA_OK `*reply` is the parsed JSON object (free with cJSON_Delete). On BAGUA_ERR_ETCD
 * `grpc_code` (optional) gets etcd's gRPC code, or -1 when the reply was not an etcd error.
 */
bagua_status_t bagua__etcd_call(bagua__etcd_t *c, const char *path, const cJSON *body,
                                cJSON **reply, int flags, int *grpc_code);

/* A new client with the same endpoints and timeout as `c` (for threads that need their own). */
bagua_status_t bagua__etcd_clone(const bagua__etcd_t *c, bagua__etcd_t **out);

/* ---- JSON glue (json.c) ---- */

/*
 * Reads int64 field `name` of `obj`, which the gateway writes as a decimal string (numbers are
 * accepted too). Returns 1 if present and valid, 0 if absent (then *out = 0; proto3 omits zero
 * values), -1 if present but malformed.
 */
int bagua__etcd_json_i64(const cJSON *obj, const char *name, int64_t *out);
/* Adds int64 `v` to `obj` as a decimal string (how the gateway expects 64-bit ids). */
int bagua__etcd_json_add_i64(cJSON *obj, const char *name, int64_t v);
/* Adds `n` bytes of `p` to `obj` base64-encoded. Returns 0 on success, -1 on out-of-memory. */
int bagua__etcd_json_add_b64(cJSON *obj, const char *name, const void *p, size_t n);
/* Decodes base64 field `name` into a malloc'ed NUL-terminated buffer. Absent gives "" when
 * !required. Returns BAGUA_ERR_ETCD (with a warning) for a missing required or bad field. */
bagua_status_t bagua__etcd_json_b64(const cJSON *obj, const char *name, int required, char **out,
                                    size_t *len);
/* Fills `kv` from a mvccpb.KeyValue JSON object. */
bagua_status_t bagua__etcd_json_kv(const cJSON *obj, bagua__etcd_kv_t *kv);
/* header.revision of a reply; BAGUA_ERR_ETCD if absent or malformed. */
bagua_status_t bagua__etcd_json_header_revision(const cJSON *reply, int64_t *rev);
/* Adds key (and range_end for a prefix) to a range/delete/watch request object. */
int bagua__etcd_json_add_key_range(cJSON *obj, const char *key, int prefix);
/* Adds key and range_end for a span (etcd.h): one key, a prefix, or [key, end). */
int bagua__etcd_json_add_span(cJSON *obj, const bagua__etcd_span_t *span);
/* Parses the "kvs" array of a RangeResponse into a new array (absent: none). */
bagua_status_t bagua__etcd_json_kvs(const cJSON *range, bagua__etcd_kv_t **out, size_t *n);

#endif
