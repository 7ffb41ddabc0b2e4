/*
 * Leases: grant, one-shot keep-alive, revoke, and the background keeper thread that agents use
 * to keep their registration keys alive.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "etcd_internal.h"
#include "raw.h"

static cJSON *id_request(int64_t id) {
  cJSON *req = cJSON_CreateObject();
  if (req && bagua__etcd_json_add_i64(req, "ID", id) != 0) {
    cJSON_Delete(req);
    return NULL;
  }
  return req;
}

bagua_status_t bagua__etcd_lease_grant(bagua__etcd_t *c, int64_t ttl_s, int64_t *id,
                                       int64_t *granted_ttl_s) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  int64_t got_id = 0, got_ttl = 0;
  *id = 0;
  if (ttl_s <= 0) {
    BAGUA_WARN("etcd lease TTL must be positive (got %lld s)", (long long)ttl_s);
    return BAGUA_ERR_INVALID_ARG;
  }
  cJSON *req = cJSON_CreateObject();
  if (!req || bagua__etcd_json_add_i64(req, "TTL", ttl_s) != 0) {
    cJSON_Delete(req);
    BAGUA_WARN("out of memory building an etcd lease request");
    return BAGUA_ERR_NO_MEMORY;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/lease/grant", req, &reply, 0, NULL), st, out);
  if (bagua__etcd_json_i64(reply, "ID", &got_id) != 1 || got_id == 0 ||
      bagua__etcd_json_i64(reply, "TTL", &got_ttl) != 1 || got_ttl <= 0) {
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(reply, "error");
    BAGUA_WARN("etcd lease grant reply lacks a valid ID and TTL%s%s",
               cJSON_IsString(err) ? ": " : "", cJSON_IsString(err) ? err->valuestring : "");
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  *id = got_id;
  if (granted_ttl_s) *granted_ttl_s = got_ttl;
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd lease %lld granted, TTL %lld s", (long long)got_id,
             (long long)got_ttl);
out:
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

/*
 * The gateway exposes the keep-alive stream as a POST whose reply carries one message per
 * request message; one request gives one {"result": ...} or a stream {"error": ...}.
 */
/* The renewal over the keeper's own HTTP client (raw.h): the reply object, or an error logged
 * as bagua__etcd_call logs it. */
static bagua_status_t raw_call(bagua__etcd_t *c, bagua__etcd_raw_t *raw, const cJSON *req,
                               cJSON **reply, int flags) {
  const char *ep = bagua__etcd_endpoint(c), *path = "/v3/lease/keepalive";
  etcd_buf_t buf = {0};
  long http = 0;
  *reply = NULL;
  char *text = cJSON_PrintUnformatted(req);
  bagua_status_t st = text ? bagua__etcd_raw_post(raw, path, text, c->timeout_ms, &buf, &http)
                           : BAGUA_ERR_NO_MEMORY;
  free(text);
  if (st == BAGUA_OK) {
    cJSON *j = buf.data ? cJSON_ParseWithLength(buf.data, buf.len) : NULL;
    if (http == 200 && cJSON_IsObject(j)) {
      *reply = j;
    } else {
      BAGUA_WARN("etcd %s%s: HTTP %ld: \"%.80s\"", ep, path, http, buf.data ? buf.data : "");
      cJSON_Delete(j);
      st = BAGUA_ERR_ETCD;
    }
  } else if (st != BAGUA_ERR_ABORTED) {
    if (flags & ETCD_CALL_QUIET_TRANSPORT)
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd %s%s: %s (timeout %d ms)", ep, path, bagua_err_name(st),
                 c->timeout_ms);
    else
      BAGUA_WARN("etcd %s%s: %s (timeout %d ms)", ep, path, bagua_err_name(st), c->timeout_ms);
  }
  bagua__etcd_buf_free(&buf);
  return st;
}

/* One renewal of lease `id`: over `raw` when the caller has one, else through libcurl. */
static bagua_status_t keepalive(bagua__etcd_t *c, bagua__etcd_raw_t *raw, int64_t id,
                                int64_t *ttl_s, int flags) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  int64_t got_id = 0, ttl = 0;
  *ttl_s = 0;
  cJSON *req = id_request(id);
  if (!req) {
    BAGUA_WARN("out of memory building an etcd keep-alive request");
    return BAGUA_ERR_NO_MEMORY;
  }
  if (raw)
    BAGUA_CHECK_GOTO(raw_call(c, raw, req, &reply, flags), st, out);
  else
    BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/lease/keepalive", req, &reply, flags, NULL), st, out);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(reply, "error");
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(reply, "result");
  if (err) {
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    BAGUA_WARN("etcd %s/v3/lease/keepalive: %s", bagua__etcd_endpoint(c),
               cJSON_IsString(msg) ? msg->valuestring : "stream error without a message");
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (!cJSON_IsObject(res) || bagua__etcd_json_i64(res, "ID", &got_id) < 0 ||
      bagua__etcd_json_i64(res, "TTL", &ttl) < 0 || (got_id != 0 && got_id != id)) {
    BAGUA_WARN("etcd keep-alive reply for lease %lld is malformed", (long long)id);
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  /* etcd answers an expired or unknown lease with TTL 0, which proto3 leaves out. */
  if (ttl <= 0)
    BAGUA_WARN("etcd lease %lld has expired or is unknown to %s", (long long)id,
               bagua__etcd_endpoint(c));
  *ttl_s = ttl > 0 ? ttl : 0;
out:
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_lease_keepalive_once(bagua__etcd_t *c, int64_t id, int64_t *ttl_s) {
  return keepalive(c, NULL, id, ttl_s, 0);
}

bagua_status_t bagua__etcd_lease_revoke(bagua__etcd_t *c, int64_t id) {
  cJSON *reply = NULL;
  int code = -1;
  cJSON *req = id_request(id);
  if (!req) {
    BAGUA_WARN("out of memory building an etcd revoke request");
    return BAGUA_ERR_NO_MEMORY;
  }
  bagua_status_t st =
      bagua__etcd_call(c, "/v3/lease/revoke", req, &reply, ETCD_CALL_QUIET_NOT_FOUND, &code);
  if (st == BAGUA_ERR_ETCD && code == ETCD_GRPC_NOT_FOUND) st = BAGUA_OK;
  if (st == BAGUA_OK) BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd lease %lld revoked", (long long)id);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

/* ---- Keeper thread ---- */

struct bagua__etcd_keeper {
  bagua__etcd_t *c; /* private client: renewals never queue behind the caller's requests */
  /* Renewals over c's current endpoint through raw.h, when it is plain http://; NULL: libcurl.
   * Keeper thread only, but for the interrupt. */
  bagua__etcd_raw_t *raw;
  int64_t id, ttl_ms, interval_ms;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* bagua__cond_init (monotonic); signalled by stop */
  int stop;           /* under mu */
  int gone;           /* atomic: etcd said the lease expired or is unknown */
  int64_t last_ok_ms; /* atomic; the start time until the first renewal */
  /* atomic: monotonic ms at which the first renewal since the last good one began to fail;
   * 0 while renewals succeed. */
  int64_t failing_since;
  int notify_fd; /* atomic: written when that changes or the lease is gone; -1: none */
};

/* Tells the holder that renewals began or stopped failing, or that the lease is gone: a holder
 * that waits for events learns of an outage without looking every period. */
static void notify(bagua__etcd_keeper_t *k) {
  int fd = __atomic_load_n(&k->notify_fd, __ATOMIC_ACQUIRE);
  uint64_t one = 1;
  if (fd >= 0) {
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
  }
}

/* Sleeps up to `ms` unless stop is requested. Returns 1 when stopping. */
static int keeper_sleep(bagua__etcd_keeper_t *k, int64_t ms) {
  int64_t deadline = bagua__deadline_in(ms);
  pthread_mutex_lock(&k->mu);
  while (!k->stop && bagua__cond_wait_until(&k->cv, &k->mu, deadline) == 0) {
  }
  int stop = k->stop;
  pthread_mutex_unlock(&k->mu);
  return stop;
}

/* After a failed renewal with several endpoints: the next one, over raw.h if it is plain
 * http://, else through libcurl (which rotates by itself). */
static void rotate(bagua__etcd_keeper_t *k) {
  int next = (__atomic_load_n(&k->c->cur, __ATOMIC_RELAXED) + 1) % k->c->n_endpoints;
  __atomic_store_n(&k->c->cur, next, __ATOMIC_RELAXED);
  bagua__etcd_raw_t *r = NULL;
  if (bagua__etcd_raw_create(k->c->endpoints[next], &r) != BAGUA_OK) r = NULL;
  pthread_mutex_lock(&k->mu);
  bagua__etcd_raw_t *old = k->raw;
  k->raw = r;
  /* A stop that came meanwhile must reach the new client too. */
  if (k->stop && r) bagua__etcd_raw_interrupt(r, 1);
  pthread_mutex_unlock(&k->mu);
  bagua__etcd_raw_destroy(old);
}

static void *keeper_main(void *arg) {
  bagua__etcd_keeper_t *k = arg;
  int failures = 0;
  for (;;) {
    int64_t ttl = 0, began = bagua__now_ms();
    bagua_status_t st = keepalive(k->c, k->raw, k->id, &ttl, ETCD_CALL_QUIET_TRANSPORT);
    if (k->raw && (st == BAGUA_ERR_CURL || st == BAGUA_ERR_TIMEOUT) && k->c->n_endpoints > 1)
      rotate(k);
    if (st == BAGUA_ERR_ABORTED) break;
    int64_t wait = k->interval_ms;
    if (st == BAGUA_OK && ttl > 0) {
      if (failures > 0)
        BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd lease %lld renewed again after %d failed attempt(s)",
                   (long long)k->id, failures);
      __atomic_store_n(&k->last_ok_ms, bagua__now_ms(), __ATOMIC_RELEASE);
      __atomic_store_n(&k->failing_since, 0, __ATOMIC_RELEASE);
      if (failures) notify(k);
      failures = 0;
    } else if (st == BAGUA_OK) {
      /* Definitive: the lease and its keys are gone, and renewing cannot bring them back. */
      __atomic_store_n(&k->gone, 1, __ATOMIC_RELEASE);
      notify(k);
      break;
    } else {
      int64_t zero = 0;
      __atomic_compare_exchange_n(&k->failing_since, &zero, began, 0, __ATOMIC_RELEASE,
                                  __ATOMIC_RELAXED);
      if (failures == 0) notify(k);
      if (failures++ == 0)
        BAGUA_WARN("etcd lease %lld: keep-alive to %s failed (%s); retrying", (long long)k->id,
                   bagua__etcd_endpoint(k->c), bagua_err_name(st));
      /* Retry sooner than the normal period so a short outage costs little of the TTL. */
      wait = k->interval_ms / 3 < 100 ? 100 : k->interval_ms / 3;
    }
    if (keeper_sleep(k, wait)) break;
  }
  return NULL;
}

bagua_status_t bagua__etcd_keeper_start(bagua__etcd_t *c, int64_t id, int64_t ttl_s,
                                        bagua__etcd_keeper_t **out) {
  bagua_status_t st = BAGUA_OK;
  *out = NULL;
  if (id == 0 || ttl_s <= 0) {
    BAGUA_WARN("etcd lease keeper needs a lease id and a positive TTL (got %lld, %lld s)",
               (long long)id, (long long)ttl_s);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__etcd_keeper_t *k;
  BAGUA_CALLOC(k, 1);
  k->id = id;
  k->ttl_ms = ttl_s * 1000;
  k->interval_ms = k->ttl_ms / 3 < 200 ? 200 : k->ttl_ms / 3;
  k->last_ok_ms = bagua__now_ms();
  k->notify_fd = -1;
  pthread_mutex_init(&k->mu, NULL);
  bagua__cond_init(&k->cv);
  BAGUA_CHECK_GOTO(bagua__etcd_clone(c, &k->c), st, fail);
  /* One renewal must not outlast the renewal period, or a hung request could eat the TTL. */
  if (k->c->timeout_ms > k->interval_ms) k->c->timeout_ms = (int)k->interval_ms;
  if (bagua__etcd_raw_create(k->c->endpoints[k->c->cur], &k->raw) != BAGUA_OK) k->raw = NULL;
  int rc = pthread_create(&k->thread, NULL, keeper_main, k);
  if (rc != 0) {
    BAGUA_WARN("pthread_create for the etcd lease keeper failed: %s", strerror(rc));
    st = BAGUA_ERR_SYSTEM;
    goto fail;
  }
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd lease %lld: keep-alive every %lld ms", (long long)id,
             (long long)k->interval_ms);
  *out = k;
  return BAGUA_OK;
fail:
  bagua__etcd_raw_destroy(k->raw);
  bagua__etcd_destroy(k->c);
  pthread_cond_destroy(&k->cv);
  pthread_mutex_destroy(&k->mu);
  free(k);
  return st;
}

int bagua__etcd_keeper_lost(const bagua__etcd_keeper_t *k) {
  if (__atomic_load_n(&k->gone, __ATOMIC_ACQUIRE)) return 1;
  return bagua__etcd_keeper_since_ok_ms(k) > k->ttl_ms;
}

void bagua__etcd_keeper_set_notify_fd(bagua__etcd_keeper_t *k, int fd) {
  __atomic_store_n(&k->notify_fd, fd, __ATOMIC_RELEASE);
}

int64_t bagua__etcd_keeper_failing_since(const bagua__etcd_keeper_t *k) {
  return __atomic_load_n(&k->failing_since, __ATOMIC_ACQUIRE);
}

int64_t bagua__etcd_keeper_since_ok_ms(const bagua__etcd_keeper_t *k) {
  return bagua__now_ms() - __atomic_load_n(&k->last_ok_ms, __ATOMIC_ACQUIRE);
}

void bagua__etcd_keeper_stop(bagua__etcd_keeper_t *k) {
  if (!k) return;
  pthread_mutex_lock(&k->mu);
  k->stop = 1;
  pthread_cond_signal(&k->cv);
  /* Ends a renewal in flight at once instead of after the request timeout. */
  if (k->raw) bagua__etcd_raw_interrupt(k->raw, 1);
  pthread_mutex_unlock(&k->mu);
  bagua__etcd_abort(k->c, 1);
  pthread_join(k->thread, NULL);
  bagua__etcd_raw_destroy(k->raw);
  bagua__etcd_destroy(k->c);
  pthread_cond_destroy(&k->cv);
  pthread_mutex_destroy(&k->mu);
  free(k);
}
