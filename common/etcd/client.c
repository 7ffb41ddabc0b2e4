/*
 * The etcd client's HTTP layer: endpoint parsing, one libcurl connection per client, bounded
 * POST requests with failover between endpoints, and the mapping of transport failures and
 * gateway errors onto bagua_status_t.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "common/time.h"
#include "etcd_internal.h"

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc;

/* curl_global_init is not thread-safe and must run once before any other libcurl call. */
static void curl_init_once(void) {
  g_curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

int bagua__etcd_buf_append(etcd_buf_t *b, const void *p, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

void bagua__etcd_buf_free(etcd_buf_t *b) {
  free(b->data);
  memset(b, 0, sizeof(*b));
}

/* ---- Connection ---- */

bagua_status_t bagua__etcd_conn_init(etcd_conn_t *conn) {
  memset(conn, 0, sizeof(*conn));
  conn->interrupt_fd = -1;
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_init_rc != CURLE_OK) {
    BAGUA_WARN("curl_global_init failed: %s", curl_easy_strerror(g_curl_init_rc));
    return BAGUA_ERR_CURL;
  }
  conn->easy = curl_easy_init();
  conn->multi = curl_multi_init();
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  /* Without this libcurl sends "Expect: 100-continue" for bodies over 1 KiB and may stall. */
  if (h) conn->headers = curl_slist_append(h, "Expect:");
  if (!conn->headers) curl_slist_free_all(h);
  if (!conn->easy || !conn->multi || !conn->headers) {
    BAGUA_WARN("out of memory creating a libcurl handle for etcd");
    bagua__etcd_conn_free(conn);
    return BAGUA_ERR_NO_MEMORY;
  }
  CURL *e = conn->easy;
  /* Timeouts must not be implemented with signals in a multi-threaded process. */
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, conn->errbuf);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, conn->headers);
  /*
   * An empty proxy string disables proxies, including http_proxy from the environment: etcd is
   * reached directly, and environment settings are read only through the parameter registry.
   */
  curl_easy_setopt(e, CURLOPT_PROXY, "");
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  /* Keep-alive probes let a watch notice a peer host that vanished without closing. */
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 10L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
  return BAGUA_OK;
}

void bagua__etcd_conn_free(etcd_conn_t *conn) {
  if (conn->easy) curl_easy_cleanup(conn->easy);
  if (conn->multi) curl_multi_cleanup(conn->multi);
  curl_slist_free_all(conn->headers);
  memset(conn, 0, sizeof(*conn));
}

void bagua__etcd_conn_interrupt(etcd_conn_t *conn, int on) {
  __atomic_store_n(&conn->abort, on, __ATOMIC_SEQ_CST);
  if (on) curl_multi_wakeup(conn->multi);
}

void bagua__etcd_conn_setup(etcd_conn_t *conn, const char *url, const char *body,
                            curl_write_callback write_cb, void *userdata, long timeout_ms,
                            long connect_ms) {
  CURL *e = conn->easy;
  conn->errbuf[0] = '\0';
  conn->give_up_at = 0;
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, userdata);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms > 0 ? connect_ms : 1L);
}

/* Whether the interrupt descriptor is readable now. */
static int fd_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

bagua_status_t bagua__etcd_conn_perform(etcd_conn_t *conn, CURLcode *res) {
  *res = CURLE_OK;
  int ifd = __atomic_load_n(&conn->interrupt_fd, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&conn->abort, __ATOMIC_SEQ_CST) || fd_readable(ifd)) return BAGUA_ERR_ABORTED;
  CURLMcode mc = curl_multi_add_handle(conn->multi, conn->easy);
  if (mc != CURLM_OK) {
    BAGUA_WARN("curl_multi_add_handle failed: %s", curl_multi_strerror(mc));
    return BAGUA_ERR_CURL;
  }
  bagua_status_t st = BAGUA_OK;
  for (;;) {
    int running = 0, left = 0, done = 0;
    mc = curl_multi_perform(conn->multi, &running);
    if (mc != CURLM_OK) {
      BAGUA_WARN("curl_multi_perform failed: %s", curl_multi_strerror(mc));
      st = BAGUA_ERR_CURL;
      break;
    }
    CURLMsg *m;
    while ((m = curl_multi_info_read(conn->multi, &left)) != NULL) {
      if (m->msg == CURLMSG_DONE && m->easy_handle == conn->easy) {
        *res = m->data.result;
        done = 1;
      }
    }
    if (done) break;
    if (__atomic_load_n(&conn->abort, __ATOMIC_SEQ_CST)) {
      st = BAGUA_ERR_ABORTED;
      break;
    }
    int64_t now = bagua__now_ms(), wait_ms = 60000;
    if (conn->give_up_at && now >= conn->give_up_at) {
      st = BAGUA_ERR_TIMEOUT;
      break;
    }
    if (conn->give_up_at && conn->give_up_at - now < wait_ms) wait_ms = conn->give_up_at - now;
    /* libcurl shortens this wait to its own next timeout (the transfer's, for a request); a
     * wakeup or the interrupt descriptor ends it at once. So the bound here only matters for a
     * watch's stream, which has no timeout: long, since an idle watch thread that woke every
     * second would cost a thousand agents a thousand wake-ups a second. */
    struct curl_waitfd extra = {.fd = ifd, .events = CURL_WAIT_POLLIN, .revents = 0};
    mc = curl_multi_poll(conn->multi, ifd >= 0 ? &extra : NULL, ifd >= 0 ? 1 : 0, (int)wait_ms,
                         NULL);
    if (mc != CURLM_OK) {
      BAGUA_WARN("curl_multi_poll failed: %s", curl_multi_strerror(mc));
      st = BAGUA_ERR_CURL;
      break;
    }
    if (extra.revents) {
      st = BAGUA_ERR_ABORTED;
      break;
    }
  }
  curl_multi_remove_handle(conn->multi, conn->easy);
  return st;
}

/* ---- Client ---- */

/* Turns "host:port" or a URL into a base URL without a trailing slash. */
static char *normalise_endpoint(const char *s, size_t n) {
  while (n > 0 && (*s == ' ' || *s == '\t')) s++, n--;
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '/')) n--;
  if (n == 0) return NULL;
  int has_scheme = memmem(s, n, "://", 3) != NULL;
  const char *scheme = has_scheme ? "" : "http://";
  size_t len = strlen(scheme) + n;
  char *out = malloc(len + 1);
  if (!out) return NULL;
  memcpy(out, scheme, strlen(scheme));
  memcpy(out + strlen(scheme), s, n);
  out[len] = '\0';
  return out;
}

bagua_status_t bagua__etcd_create(const char *endpoints, int timeout_ms, bagua__etcd_t **out) {
  bagua_status_t st = BAGUA_OK;
  *out = NULL;
  if (!endpoints || timeout_ms <= 0) {
    BAGUA_WARN("etcd client needs an endpoint list and a positive timeout (got %s, %d ms)",
               endpoints ? endpoints : "NULL", timeout_ms);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua__etcd_t *c;
  BAGUA_CALLOC(c, 1);
  c->timeout_ms = timeout_ms;
  pthread_mutex_init(&c->lock, NULL);
  int n = 1;
  for (const char *p = endpoints; *p; p++) n += *p == ',';
  c->endpoints = calloc((size_t)n, sizeof(char *));
  if (!c->endpoints) {
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  for (const char *p = endpoints;;) {
    size_t len = strcspn(p, ",");
    char *ep = normalise_endpoint(p, len);
    if (ep) c->endpoints[c->n_endpoints++] = ep;
    if (p[len] == '\0') break;
    p += len + 1;
  }
  if (c->n_endpoints == 0) {
    BAGUA_WARN("etcd endpoint list \"%s\" names no endpoint", endpoints);
    st = BAGUA_ERR_INVALID_ARG;
    goto fail;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_conn_init(&c->conn), st, fail);
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd client for %s (%d endpoint%s, timeout %d ms)",
             c->endpoints[0], c->n_endpoints, c->n_endpoints > 1 ? "s" : "", timeout_ms);
  *out = c;
  return BAGUA_OK;
fail:
  bagua__etcd_destroy(c);
  return st;
}

void bagua__etcd_destroy(bagua__etcd_t *c) {
  if (!c) return;
  bagua__etcd_conn_free(&c->conn);
  for (int i = 0; i < c->n_endpoints; i++) free(c->endpoints[i]);
  free(c->endpoints);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

bagua_status_t bagua__etcd_clone(const bagua__etcd_t *c, bagua__etcd_t **out) {
  bagua_status_t st = BAGUA_OK;
  bagua__etcd_t *n;
  BAGUA_CALLOC(n, 1);
  n->timeout_ms = c->timeout_ms;
  n->cur = __atomic_load_n(&c->cur, __ATOMIC_RELAXED);
  pthread_mutex_init(&n->lock, NULL);
  n->endpoints = calloc((size_t)c->n_endpoints, sizeof(char *));
  if (!n->endpoints) {
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  for (int i = 0; i < c->n_endpoints; i++) {
    n->endpoints[i] = strdup(c->endpoints[i]);
    if (!n->endpoints[i]) {
      st = BAGUA_ERR_NO_MEMORY;
      goto fail;
    }
    n->n_endpoints++;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_conn_init(&n->conn), st, fail);
  *out = n;
  return BAGUA_OK;
fail:
  if (st == BAGUA_ERR_NO_MEMORY) BAGUA_WARN("out of memory copying an etcd client");
  bagua__etcd_destroy(n);
  return st;
}

const char *bagua__etcd_endpoint(const bagua__etcd_t *c) {
  return c->endpoints[__atomic_load_n(&c->cur, __ATOMIC_RELAXED)];
}

int bagua__etcd_timeout_ms(const bagua__etcd_t *c) {
  return c->timeout_ms;
}

int64_t bagua__etcd_unreachable_since_ms(const bagua__etcd_t *c) {
  return __atomic_load_n(&c->unreachable_since, __ATOMIC_RELAXED);
}

void bagua__etcd_set_timeout_ms(bagua__etcd_t *c, int timeout_ms) {
  if (c && timeout_ms > 0) c->timeout_ms = timeout_ms;
}

void bagua__etcd_set_interrupt_fd(bagua__etcd_t *c, int fd) {
  __atomic_store_n(&c->conn.interrupt_fd, fd, __ATOMIC_SEQ_CST);
  if (fd >= 0) curl_multi_wakeup(c->conn.multi);
}

void bagua__etcd_abort(bagua__etcd_t *c, int on) {
  bagua__etcd_conn_interrupt(&c->conn, on);
}

/* ---- Requests ---- */

static size_t write_to_buf(char *ptr, size_t size, size_t nmemb, void *userdata) {
  etcd_buf_t *b = userdata;
  size_t n = size * nmemb;
  /* Returning less than n makes libcurl fail the transfer with CURLE_WRITE_ERROR. */
  if (b->len + n > ETCD_MAX_REPLY_BYTES || bagua__etcd_buf_append(b, ptr, n) != 0) return 0;
  return n;
}

/*
 * True when the request cannot have reached a server, so that sending it to another endpoint
 * cannot apply a write twice.
 */
static int failed_before_sending(CURL *e, CURLcode res) {
  if (res == CURLE_COULDNT_CONNECT || res == CURLE_COULDNT_RESOLVE_HOST) return 1;
  if (res != CURLE_OPERATION_TIMEDOUT) return 0;
  long sent = 0;
  curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &sent);
  return sent == 0;
}

/* Logs and maps a failed reply: an etcd error object, or anything else we cannot use. */
static bagua_status_t reply_error(const char *ep, const char *path, long http, const cJSON *j,
                                  const etcd_buf_t *buf, int flags, int *grpc_code) {
  const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
  if (!cJSON_IsString(msg)) msg = cJSON_GetObjectItemCaseSensitive(j, "error");
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "code");
  if (cJSON_IsString(msg)) {
    int gc = cJSON_IsNumber(code) ? code->valueint : -1;
    if (grpc_code) *grpc_code = gc;
    if ((flags & ETCD_CALL_QUIET_ETCD) ||
        ((flags & ETCD_CALL_QUIET_NOT_FOUND) && gc == ETCD_GRPC_NOT_FOUND))
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd %s%s: %s (gRPC code %d, HTTP %ld)", ep, path,
                 msg->valuestring, gc, http);
    else
      BAGUA_WARN("etcd %s%s: %s (gRPC code %d, HTTP %ld)", ep, path, msg->valuestring, gc, http);
  } else if (http == 200) {
    BAGUA_WARN("etcd %s%s returned a reply that is not a JSON object: \"%.80s\"", ep, path,
               buf->data ? buf->data : "");
  } else {
    BAGUA_WARN("etcd %s%s: HTTP %ld: \"%.80s\"", ep, path, http, buf->data ? buf->data : "");
  }
  return BAGUA_ERR_ETCD;
}

bagua_status_t bagua__etcd_call(bagua__etcd_t *c, const char *path, const cJSON *body,
                                cJSON **reply, int flags, int *grpc_code) {
  bagua_status_t st = BAGUA_OK;
  etcd_buf_t buf = {0};
  char *url = NULL;
  cJSON *j = NULL;
  *reply = NULL;
  if (grpc_code) *grpc_code = -1;
  char *text = cJSON_PrintUnformatted(body);
  if (!text) {
    BAGUA_WARN("out of memory encoding an etcd request for %s", path);
    return BAGUA_ERR_NO_MEMORY;
  }
  /* The deadline starts before the lock, so time spent queued behind another thread's call
   * counts too and no call outlives its timeout by more than that call's own remainder. */
  int64_t started = bagua__now_ms();
  int64_t deadline = bagua__deadline_in(c->timeout_ms);
  pthread_mutex_lock(&c->lock);
  int start = __atomic_load_n(&c->cur, __ATOMIC_RELAXED), idx = start, tried = 0;
  CURLcode res = CURLE_OK;
  for (int i = 0; i < c->n_endpoints; i++) {
    idx = (start + i) % c->n_endpoints;
    tried = i + 1;
    int64_t left = bagua__ms_left(deadline);
    if (left <= 0) {
      res = CURLE_OPERATION_TIMEDOUT;
      snprintf(c->conn.errbuf, sizeof(c->conn.errbuf), "no time left to try this endpoint");
      break;
    }
    free(url);
    url = malloc(strlen(c->endpoints[idx]) + strlen(path) + 1);
    if (!url) {
      BAGUA_WARN("out of memory building an etcd URL");
      st = BAGUA_ERR_NO_MEMORY;
      goto out;
    }
    strcpy(stpcpy(url, c->endpoints[idx]), path);
    buf.len = 0;
    /* Connection set-up gets an equal share of the time left per untried endpoint. */
    long connect_ms = (long)(left / (c->n_endpoints - i));
    bagua__etcd_conn_setup(&c->conn, url, text, write_to_buf, &buf, (long)left, connect_ms);
    st = bagua__etcd_conn_perform(&c->conn, &res);
    if (st != BAGUA_OK || res == CURLE_OK) break;
    if (i + 1 == c->n_endpoints || !failed_before_sending(c->conn.easy, res)) break;
    BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd %s unreachable (%s); trying the next endpoint",
               c->endpoints[idx], c->conn.errbuf[0] ? c->conn.errbuf : curl_easy_strerror(res));
  }
  if (st == BAGUA_ERR_ABORTED) {
    BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd %s%s: aborted", c->endpoints[idx], path);
    goto out;
  }
  if (st != BAGUA_OK) goto out;
  if (res != CURLE_OK) {
    const char *why = c->conn.errbuf[0] ? c->conn.errbuf : curl_easy_strerror(res);
    st = res == CURLE_OPERATION_TIMEDOUT ? BAGUA_ERR_TIMEOUT : BAGUA_ERR_CURL;
    if (res == CURLE_WRITE_ERROR) why = "reply larger than the 64 MiB limit, or out of memory";
    int64_t zero = 0;
    __atomic_compare_exchange_n(&c->unreachable_since, &zero, started, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
    if (flags & ETCD_CALL_QUIET_TRANSPORT)
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd %s%s: %s (timeout %d ms)", c->endpoints[idx], path, why,
                 c->timeout_ms);
    else
      BAGUA_WARN("etcd %s%s: %s (timeout %d ms, %d of %d endpoint(s) tried)", c->endpoints[idx],
                 path, why, c->timeout_ms, tried, c->n_endpoints);
    goto out;
  }
  __atomic_store_n(&c->cur, idx, __ATOMIC_RELAXED);
  __atomic_store_n(&c->unreachable_since, 0, __ATOMIC_RELAXED);
  long http = 0;
  curl_easy_getinfo(c->conn.easy, CURLINFO_RESPONSE_CODE, &http);
  if (buf.data) j = cJSON_ParseWithLength(buf.data, buf.len);
  if (http != 200 || !cJSON_IsObject(j)) {
    st = reply_error(c->endpoints[idx], path, http, j, &buf, flags, grpc_code);
    goto out;
  }
  *reply = j;
  j = NULL;
out:
  pthread_mutex_unlock(&c->lock);
  cJSON_Delete(j);
  free(url);
  free(text);
  bagua__etcd_buf_free(&buf);
  return st;
}
