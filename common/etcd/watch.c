/*
 * Watches over the gateway's streaming POST /v3/watch.
 *
 * The reply is a chunked HTTP/1.1 body carrying one JSON object per line; libcurl hands it
 * over in arbitrary pieces, so bytes are collected until a newline completes an object. Each
 * watch runs on its own thread with its own connection; one watch may cover several ranges
 * (one create request each in the request body, told apart by etcd's watch ids). When the stream
 * ends for any reason other than a stop request or a cancellation by etcd, the thread reconnects
 * with back-off and asks for the revision after the last one it delivered, which makes an etcd
 * restart invisible to the callback apart from the delay.
 *
 * etcd's gateway (Go's HTTP/1.1 server) stops reading a request body once it has begun to
 * answer it, and decodes the body in 512-byte reads: the create requests beyond the first read
 * are then sometimes never seen, and those ranges are never confirmed (about one agent's watch
 * in a hundred, at formation). A stream on which etcd confirmed some ranges but not all within
 * PARTIAL_CREATE_MS is therefore dropped and opened again, which costs that long instead of the
 * caller's whole timeout.
 */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "etcd_internal.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
/* How long the other ranges' confirmations may trail the first one's (see above). */
#define PARTIAL_CREATE_MS 500

/* The first problem of an outage is a warning; the same problem on every retry is not. */
#define WATCH_WARN(w, ...)                        \
  do {                                            \
    if ((w)->in_outage)                           \
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, __VA_ARGS__); \
    else                                          \
      BAGUA_WARN(__VA_ARGS__);                    \
  } while (0)

/* One watched range and where it resumes. */
typedef struct {
  char *key, *end; /* end NULL: the key alone, or its prefix when `prefix` */
  int prefix;
  int64_t next_rev; /* atomic: first revision not yet delivered; 0 means "from now" */
  int64_t watch_id; /* etcd's id for it on the current connection */
} watch_range_t;

struct bagua__etcd_watch {
  bagua__etcd_t *c; /* private client: its connection carries the stream */
  char *key;        /* for log lines: the first range's key, "+N" when there are more */
  watch_range_t *r;
  size_t nr;
  int max_outage_ms;
  bagua__etcd_watch_cb cb;
  void *arg;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* bagua__cond_init; signals start confirmation and stop requests */
  int stop;          /* atomic, written under mu */
  int started;       /* under mu: 0 waiting, 1 confirmed by etcd, -1 the first attempt failed */
  bagua_status_t start_status;
  int ep;        /* endpoint index the thread connects to */
  int in_outage; /* watch thread only: repeated problems are logged at INFO, not WARN */

  /* Per-connection state, touched only by the watch thread (inside the write callback). */
  etcd_buf_t line;
  size_t ncreated;          /* ranges etcd confirmed on this connection */
  int partial;              /* the connection ended with some ranges never confirmed */
  int created;              /* etcd confirmed every range on this connection */
  int ended;                /* the watch is over: callback said stop, or etcd cancelled it */
  bagua_status_t stream_st; /* what went wrong on this connection's stream, if anything */
  bagua_status_t fail_st;   /* reported in the FAILED event when ended by etcd */
  int64_t compact_rev;
};

static int stopping(const bagua__etcd_watch_t *w) {
  return __atomic_load_n(&w->stop, __ATOMIC_ACQUIRE);
}

static void set_started(bagua__etcd_watch_t *w, int v, bagua_status_t st) {
  pthread_mutex_lock(&w->mu);
  if (w->started == 0) {
    w->started = v;
    w->start_status = st;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
}

static int is_started(bagua__etcd_watch_t *w) {
  pthread_mutex_lock(&w->mu);
  int v = w->started;
  pthread_mutex_unlock(&w->mu);
  return v;
}

static void advance(watch_range_t *r, int64_t rev) {
  if (rev > __atomic_load_n(&r->next_rev, __ATOMIC_RELAXED))
    __atomic_store_n(&r->next_rev, rev, __ATOMIC_RELEASE);
}

/* The lowest resume revision of the ranges (0 while one of them is still "from now"). */
static int64_t lowest_next(const bagua__etcd_watch_t *w) {
  int64_t low = -1;
  for (size_t i = 0; i < w->nr; i++) {
    int64_t v = __atomic_load_n(&w->r[i].next_rev, __ATOMIC_ACQUIRE);
    if (low < 0 || v < low) low = v;
  }
  return low < 0 ? 0 : low;
}

/* Delivers the events of one message of range `ri`. Returns -1 when the watch must end or
 * reconnect. */
static int deliver_events(bagua__etcd_watch_t *w, size_t ri, const cJSON *events) {
  watch_range_t *r = &w->r[ri];
  /* Anything below this was delivered before (a resumed stream never repeats it). */
  int64_t floor = __atomic_load_n(&r->next_rev, __ATOMIC_RELAXED);
  int left = cJSON_GetArraySize(events);
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    left--;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
    bagua__etcd_event_t ev;
    memset(&ev, 0, sizeof(ev));
    /* PUT is enum value 0, which the gateway leaves out. */
    if (type == NULL || (cJSON_IsString(type) && strcmp(type->valuestring, "PUT") == 0)) {
      ev.type = BAGUA__ETCD_EVENT_PUT;
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "DELETE") == 0) {
      ev.type = BAGUA__ETCD_EVENT_DELETE;
    } else {
      WATCH_WARN(w, "etcd watch on %s: event of unknown type", w->key);
      w->stream_st = BAGUA_ERR_ETCD;
      return -1;
    }
    bagua__etcd_kv_t kv;
    if (bagua__etcd_json_kv(cJSON_GetObjectItemCaseSensitive(e, "kv"), &kv) != BAGUA_OK) {
      w->stream_st = BAGUA_ERR_ETCD;
      return -1;
    }
    if (kv.mod_revision < floor) {
      bagua__etcd_kv_clear(&kv);
      continue;
    }
    ev.key = kv.key;
    ev.key_len = kv.key_len;
    ev.value = kv.value;
    ev.value_len = kv.value_len;
    ev.mod_revision = kv.mod_revision;
    ev.create_revision = kv.create_revision;
    ev.version = kv.version;
    ev.lease = kv.lease;
    ev.range = (int)ri;
    ev.last = left == 0;
    /* Advanced first, so the callback (and any thread it signals) sees the resume point. */
    advance(r, kv.mod_revision + 1);
    int rc = w->cb(w->arg, &ev);
    bagua__etcd_kv_clear(&kv);
    if (rc != 0) {
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd watch on %s ended by its callback", w->key);
      w->ended = 1;
      return -1;
    }
  }
  return 0;
}

/* Handles one complete JSON line of the stream. Returns -1 to end this connection. */
static int handle_line(bagua__etcd_watch_t *w, const char *p, size_t n) {
  int rc = -1;
  while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ')) n--;
  if (n == 0) return 0;
  cJSON *j = cJSON_ParseWithLength(p, n);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "result");
  if (err) {
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    WATCH_WARN(w, "etcd watch on %s: stream error from %s: %s", w->key, bagua__etcd_endpoint(w->c),
               cJSON_IsString(msg) ? msg->valuestring : "(no message)");
    w->stream_st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (!cJSON_IsObject(res)) {
    WATCH_WARN(w, "etcd watch on %s: malformed message from %s: \"%.*s\"", w->key,
               bagua__etcd_endpoint(w->c), (int)(n < 80 ? n : 80), p);
    w->stream_st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "canceled"))) {
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(res, "cancel_reason");
    bagua__etcd_json_i64(res, "compact_revision", &w->compact_rev);
    if (w->compact_rev > 0)
      BAGUA_WARN(
          "etcd watch on %s: revision %lld has been compacted (oldest available %lld); "
          "read the keys again and watch from the revision of that read",
          w->key, (long long)lowest_next(w), (long long)w->compact_rev);
    else
      BAGUA_WARN("etcd watch on %s cancelled by etcd: %s", w->key,
                 cJSON_IsString(why) ? why->valuestring : "no reason given");
    w->ended = 1;
    w->fail_st = BAGUA_ERR_ETCD;
    goto out;
  }
  int64_t rev = 0, id = 0;
  int has_rev =
      bagua__etcd_json_i64(cJSON_GetObjectItemCaseSensitive(res, "header"), "revision", &rev) == 1;
  /* proto3 leaves out watch id 0. */
  if (bagua__etcd_json_i64(res, "watch_id", &id) < 0) {
    WATCH_WARN(w, "etcd watch on %s: malformed watch_id", w->key);
    w->stream_st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "created"))) {
    if (!has_rev || w->ncreated >= w->nr) {
      WATCH_WARN(w, "etcd watch on %s: %s", w->key,
                 has_rev ? "more creation replies than ranges"
                         : "creation reply lacks "
                           "header.revision");
      w->stream_st = BAGUA_ERR_ETCD;
      goto out;
    }
    /* etcd creates the watches of one stream in the order they were asked for. */
    watch_range_t *r = &w->r[w->ncreated++];
    r->watch_id = id;
    /* "From now" becomes a definite revision, so a reconnect cannot skip anything. */
    if (__atomic_load_n(&r->next_rev, __ATOMIC_RELAXED) == 0) advance(r, rev + 1);
    if (w->ncreated == w->nr) {
      w->created = 1;
      w->c->conn.give_up_at = 0;
      set_started(w, 1, BAGUA_OK);
    } else if (w->ncreated == 1) {
      w->c->conn.give_up_at = bagua__now_ms() + PARTIAL_CREATE_MS;
    }
    rc = 0;
    goto out;
  }
  size_t ri = 0;
  while (ri < w->ncreated && w->r[ri].watch_id != id) ri++;
  if (ri == w->ncreated) {
    WATCH_WARN(w, "etcd watch on %s: message for unknown watch %lld", w->key, (long long)id);
    w->stream_st = BAGUA_ERR_ETCD;
    goto out;
  }
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(res, "events");
  if (events && !cJSON_IsArray(events)) {
    WATCH_WARN(w, "etcd watch on %s: \"events\" is not an array", w->key);
    w->stream_st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (cJSON_GetArraySize(events) > 0) {
    rc = deliver_events(w, ri, events);
  } else {
    /* A progress notification: every event up to header.revision has been sent. */
    if (has_rev) advance(&w->r[ri], rev + 1);
    rc = 0;
  }
out:
  cJSON_Delete(j);
  return rc;
}

static size_t watch_write(char *ptr, size_t size, size_t nmemb, void *userdata) {
  bagua__etcd_watch_t *w = userdata;
  size_t n = size * nmemb;
  if (stopping(w) || w->ended) return 0;
  if (w->line.len + n > ETCD_MAX_REPLY_BYTES || bagua__etcd_buf_append(&w->line, ptr, n) != 0) {
    BAGUA_WARN("etcd watch on %s: message larger than 64 MiB or out of memory", w->key);
    w->stream_st = BAGUA_ERR_ETCD;
    return 0;
  }
  size_t start = 0;
  for (;;) {
    char *nl = memchr(w->line.data + start, '\n', w->line.len - start);
    if (!nl) break;
    size_t end = (size_t)(nl - w->line.data);
    if (handle_line(w, w->line.data + start, end - start) != 0) return 0;
    start = end + 1;
  }
  memmove(w->line.data, w->line.data + start, w->line.len - start);
  w->line.len -= start;
  w->line.data[w->line.len] = '\0';
  return n;
}

/* Builds one {"create_request": {...}} line per range for its current resume point: etcd's
 * gateway reads the body as a stream of requests, so one connection carries them all. */
static char *create_body(bagua__etcd_watch_t *w) {
  etcd_buf_t body = {0};
  for (size_t i = 0; i < w->nr; i++) {
    const watch_range_t *r = &w->r[i];
    bagua__etcd_span_t span = {r->key, r->end, r->prefix};
    cJSON *root = cJSON_CreateObject();
    cJSON *req = root ? cJSON_AddObjectToObject(root, "create_request") : NULL;
    int64_t rev = __atomic_load_n(&r->next_rev, __ATOMIC_RELAXED);
    char *text = NULL;
    if (req && bagua__etcd_json_add_span(req, &span) == 0 &&
        (rev == 0 || bagua__etcd_json_add_i64(req, "start_revision", rev) == 0))
      text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    int bad = !text || bagua__etcd_buf_append(&body, text, strlen(text)) != 0 ||
              bagua__etcd_buf_append(&body, "\n", 1) != 0;
    free(text);
    if (bad) {
      bagua__etcd_buf_free(&body);
      return NULL;
    }
  }
  return body.data;
}

/* Sleeps up to `ms` unless stop is requested. Returns 1 when stopping. */
static int watch_sleep(bagua__etcd_watch_t *w, int64_t ms) {
  int64_t deadline = bagua__deadline_in(ms);
  pthread_mutex_lock(&w->mu);
  while (!w->stop && bagua__cond_wait_until(&w->cv, &w->mu, deadline) == 0) {
  }
  int stop = w->stop;
  pthread_mutex_unlock(&w->mu);
  return stop;
}

/* Runs one connection until it ends. Returns the reason it ended (for logs and start-up). */
static bagua_status_t run_stream(bagua__etcd_watch_t *w, char *why, size_t whylen) {
  char *body = create_body(w);
  const char *ep = w->c->endpoints[w->ep];
  char *url = malloc(strlen(ep) + sizeof("/v3/watch"));
  bagua_status_t st = BAGUA_OK;
  if (!body || !url) {
    snprintf(why, whylen, "out of memory");
    st = BAGUA_ERR_NO_MEMORY;
    goto out;
  }
  strcpy(stpcpy(url, ep), "/v3/watch");
  w->line.len = 0;
  w->created = 0;
  w->ncreated = 0;
  w->partial = 0;
  w->stream_st = BAGUA_OK;
  bagua__etcd_conn_setup(&w->c->conn, url, body, watch_write, w, 0, w->c->timeout_ms);
  CURLcode res = CURLE_OK;
  st = bagua__etcd_conn_perform(&w->c->conn, &res);
  if (st == BAGUA_ERR_TIMEOUT && w->ncreated > 0 && w->ncreated < w->nr) {
    w->partial = 1;
    snprintf(why, whylen, "etcd confirmed %zu of the %zu ranges of the stream", w->ncreated, w->nr);
    goto out;
  }
  if (st != BAGUA_OK) {
    snprintf(why, whylen, "%s", bagua_err_name(st));
    goto out;
  }
  long http = 0;
  curl_easy_getinfo(w->c->conn.easy, CURLINFO_RESPONSE_CODE, &http);
  if (w->stream_st != BAGUA_OK) {
    st = w->stream_st;
    snprintf(why, whylen, "bad content in the stream");
  } else if (http != 0 && http != 200) {
    st = BAGUA_ERR_ETCD;
    snprintf(why, whylen, "HTTP %ld: %.80s", http, w->line.data ? w->line.data : "");
  } else if (res != CURLE_OK) {
    st = res == CURLE_OPERATION_TIMEDOUT ? BAGUA_ERR_TIMEOUT : BAGUA_ERR_CURL;
    snprintf(why, whylen, "%s", w->c->conn.errbuf[0] ? w->c->conn.errbuf : curl_easy_strerror(res));
  } else {
    st = BAGUA_ERR_REMOTE;
    snprintf(why, whylen, "etcd closed the stream");
  }
out:
  free(url);
  free(body);
  return st;
}

static void *watch_main(void *arg) {
  bagua__etcd_watch_t *w = arg;
  int64_t outage_since = 0, backoff = BACKOFF_MIN_MS;
  int initial_attempts = 0;
  while (!stopping(w)) {
    char why[CURL_ERROR_SIZE + 128] = "";
    bagua_status_t st = run_stream(w, why, sizeof(why));
    if (stopping(w) || st == BAGUA_ERR_ABORTED || w->ended) break;
    const char *ep = w->c->endpoints[w->ep];
    if (w->partial) {
      /* Not an outage: the same endpoint at once, on a new connection. The caller's start
       * deadline (or a stop) bounds how often. */
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd watch on %s: %s; opening the stream again", w->key, why);
      if (watch_sleep(w, BACKOFF_MIN_MS)) break;
      continue;
    }
    if (is_started(w) == 0) {
      /* Before etcd first confirms the watch, each endpoint gets one try and then we fail. */
      if (++initial_attempts >= w->c->n_endpoints) {
        BAGUA_WARN("etcd watch on %s: cannot start on %s: %s", w->key, ep, why);
        set_started(w, -1, st);
        return NULL;
      }
      w->ep = (w->ep + 1) % w->c->n_endpoints;
      continue;
    }
    if (w->created && w->stream_st == BAGUA_OK) {
      /*
       * This connection worked, so this is a new outage: restart its clock and back-off. A
       * stream that carried bad content does not count as working, so a server that keeps
       * sending garbage is retried with growing back-off and hits max_outage_ms.
       */
      outage_since = 0;
      backoff = BACKOFF_MIN_MS;
      w->in_outage = 0;
    }
    int64_t now = bagua__now_ms();
    long long next = (long long)lowest_next(w);
    if (outage_since == 0) {
      outage_since = now;
      w->in_outage = 1;
      BAGUA_WARN("etcd watch on %s: lost the stream from %s (%s); resuming at revision %lld",
                 w->key, ep, why, next);
    } else {
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd watch on %s: %s still failing (%s)", w->key, ep, why);
    }
    if (w->max_outage_ms > 0 && now - outage_since >= w->max_outage_ms) {
      BAGUA_WARN("etcd watch on %s: no working stream for %lld ms (limit %d ms); giving up", w->key,
                 (long long)(now - outage_since), w->max_outage_ms);
      w->ended = 1;
      w->fail_st = w->stream_st != BAGUA_OK ? w->stream_st : BAGUA_ERR_TIMEOUT;
      break;
    }
    /* Rotate endpoints only when this one failed outright; a dropped stream retries here. */
    if (!w->created) w->ep = (w->ep + 1) % w->c->n_endpoints;
    if (watch_sleep(w, backoff)) break;
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
  if (is_started(w) != 1) {
    /* Never confirmed: bagua__etcd_watch_start reports the failure instead of a FAILED event. */
    set_started(w, -1, w->fail_st != BAGUA_OK ? w->fail_st : BAGUA_ERR_ABORTED);
    return NULL;
  }
  if (w->ended && w->fail_st != BAGUA_OK && !stopping(w)) {
    bagua__etcd_event_t ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = BAGUA__ETCD_EVENT_FAILED;
    ev.status = w->fail_st;
    ev.compact_revision = w->compact_rev;
    ev.mod_revision = lowest_next(w);
    w->cb(w->arg, &ev);
  }
  return NULL;
}

static void watch_free(bagua__etcd_watch_t *w) {
  bagua__etcd_destroy(w->c);
  bagua__etcd_buf_free(&w->line);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  for (size_t i = 0; w->r && i < w->nr; i++) {
    free(w->r[i].key);
    free(w->r[i].end);
  }
  free(w->r);
  free(w->key);
  free(w);
}

/* Asks the thread to stop and waits for it. */
static void watch_join(bagua__etcd_watch_t *w) {
  pthread_mutex_lock(&w->mu);
  __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  bagua__etcd_conn_interrupt(&w->c->conn, 1);
  pthread_join(w->thread, NULL);
}

bagua_status_t bagua__etcd_watch_ranges(bagua__etcd_t *c, const bagua__etcd_span_t *spans, size_t n,
                                        const bagua__etcd_watch_opts_t *opts,
                                        bagua__etcd_watch_cb cb, void *arg,
                                        bagua__etcd_watch_t **out) {
  bagua_status_t st = BAGUA_OK;
  bagua__etcd_watch_opts_t def = {0};
  *out = NULL;
  if (!opts) opts = &def;
  int bad = !spans || n == 0 || n > BAGUA_ETCD_READS_MAX || !cb || opts->start_revision < 0 ||
            opts->max_outage_ms < 0;
  for (size_t i = 0; !bad && i < n; i++)
    bad = !spans[i].key || (spans[i].key[0] == '\0' && !spans[i].prefix);
  if (bad) {
    BAGUA_WARN(
        "etcd watch needs 1..%d ranges with a key (non-empty unless watching a prefix), a "
        "callback, and a non-negative start revision and outage limit",
        BAGUA_ETCD_READS_MAX);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__etcd_watch_t *w;
  BAGUA_CALLOC(w, 1);
  w->max_outage_ms = opts->max_outage_ms;
  w->cb = cb;
  w->arg = arg;
  pthread_mutex_init(&w->mu, NULL);
  bagua__cond_init(&w->cv);
  w->r = calloc(n, sizeof(*w->r));
  size_t klen = strlen(spans[0].key) + 24;
  w->key = malloc(klen);
  if (!w->r || !w->key) goto oom;
  w->nr = n;
  for (size_t i = 0; i < n; i++) {
    w->r[i].key = strdup(spans[i].key);
    w->r[i].end = spans[i].end && !spans[i].prefix ? strdup(spans[i].end) : NULL;
    w->r[i].prefix = spans[i].prefix;
    w->r[i].next_rev = opts->start_revision;
    if (!w->r[i].key || (spans[i].end && !spans[i].prefix && !w->r[i].end)) goto oom;
  }
  snprintf(w->key, klen, "%s%s", spans[0].key, spans[0].prefix ? "*" : "");
  if (n > 1) snprintf(w->key + strlen(w->key), klen - strlen(w->key), " +%zu", n - 1);
  BAGUA_CHECK_GOTO(bagua__etcd_clone(c, &w->c), st, fail);
  w->ep = w->c->cur;
  int rc = pthread_create(&w->thread, NULL, watch_main, w);
  if (rc != 0) {
    BAGUA_WARN("pthread_create for an etcd watch failed: %s", strerror(rc));
    st = BAGUA_ERR_SYSTEM;
    goto fail;
  }
  /* Wait for etcd to confirm the watch, bounded by the client timeout. */
  int64_t deadline = bagua__deadline_in(c->timeout_ms);
  pthread_mutex_lock(&w->mu);
  while (w->started == 0 && bagua__cond_wait_until(&w->cv, &w->mu, deadline) == 0) {
  }
  int started = w->started;
  st = w->start_status;
  pthread_mutex_unlock(&w->mu);
  if (started != 1) {
    if (started == 0) {
      BAGUA_WARN("etcd watch on %s: %s did not confirm the watch within %d ms", w->key,
                 bagua__etcd_endpoint(c), c->timeout_ms);
      st = BAGUA_ERR_TIMEOUT;
    }
    watch_join(w);
    goto fail;
  }
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd watch on %s from revision %lld", w->key,
             (long long)bagua__etcd_watch_next_revision(w));
  *out = w;
  return BAGUA_OK;
oom:
  BAGUA_WARN("out of memory starting an etcd watch");
  st = BAGUA_ERR_NO_MEMORY;
fail:
  watch_free(w);
  return st;
}

bagua_status_t bagua__etcd_watch_start(bagua__etcd_t *c, const char *key,
                                       const bagua__etcd_watch_opts_t *opts,
                                       bagua__etcd_watch_cb cb, void *arg,
                                       bagua__etcd_watch_t **out) {
  bagua__etcd_span_t span = {key, NULL, opts ? opts->prefix : 0};
  *out = NULL;
  if (!key) {
    BAGUA_WARN("etcd watch needs a key");
    return BAGUA_ERR_INVALID_ARG;
  }
  return bagua__etcd_watch_ranges(c, &span, 1, opts, cb, arg, out);
}

int64_t bagua__etcd_watch_next_revision(const bagua__etcd_watch_t *w) {
  return lowest_next(w);
}

bagua_status_t bagua__etcd_watch_stop(bagua__etcd_watch_t *w) {
  if (!w) return BAGUA_OK;
  if (pthread_equal(pthread_self(), w->thread)) {
    BAGUA_WARN("bagua__etcd_watch_stop called from the watch's own callback");
    return BAGUA_ERR_INVALID_USAGE;
  }
  watch_join(w);
  watch_free(w);
  return BAGUA_OK;
}
