/*
 * Failure paths, no etcd needed: refused and silent endpoints fail within the timeout with a
 * warning naming the endpoint; a call can be aborted from another thread; a keeper without
 * etcd reports its lease lost; and a fake server that sends malformed or incomplete replies
 * produces BAGUA_ERR_ETCD, never a crash. The fake server also checks the request shapes and
 * splits a watch stream into awkward pieces.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "common/etcd/raw.h"
#include "etcd_fixture.h"
#include "test.h"
#include "watch_recorder.h"

/* ---- A loopback listener, optionally serving one canned reply per connection ---- */

typedef struct {
  int fd, port;
  pthread_t thread;
  int serving, stop; /* stop: atomic */
  pthread_mutex_t mu;
  char reply[8192];    /* the full HTTP response (under mu) */
  int fragment;        /* >0: write the reply in pieces of this many bytes */
  char last_path[128]; /* the last request's path and body (under mu) */
  char last_body[4096];
  int requests;
  /* When set, the first connection is sent this instead and held open until the client closes
   * it (a stream that stops in the middle); later ones get `reply`. */
  char first[8192];
} fake_t;

static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Reads one request (headers, then Content-Length bytes of body) and records it. */
static int read_request(fake_t *f, int c) {
  char buf[16384];
  size_t len = 0;
  char *body = NULL;
  size_t need = 0;
  for (;;) {
    struct pollfd p = {c, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return -1;
    ssize_t r = recv(c, buf + len, sizeof(buf) - 1 - len, 0);
    if (r <= 0) return -1;
    len += (size_t)r;
    buf[len] = '\0';
    if (!body && (body = strstr(buf, "\r\n\r\n")) != NULL) {
      body += 4;
      char *cl = strcasestr(buf, "Content-Length:");
      need = cl ? (size_t)strtoul(cl + 15, NULL, 10) : 0;
    }
    if (body && (size_t)(buf + len - body) >= need) break;
    if (len + 1 >= sizeof(buf)) return -1;
  }
  pthread_mutex_lock(&f->mu);
  sscanf(buf, "POST %127s", f->last_path);
  snprintf(f->last_body, sizeof(f->last_body), "%.*s", (int)need, body);
  f->requests++;
  pthread_mutex_unlock(&f->mu);
  return 0;
}

static void *fake_main(void *arg) {
  fake_t *f = arg;
  while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
    struct pollfd p = {f->fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    int c = accept(f->fd, NULL, NULL);
    if (c < 0) continue;
    if (read_request(f, c) == 0) {
      char reply[sizeof(f->reply)];
      pthread_mutex_lock(&f->mu);
      int hold = f->first[0] && f->requests == 1;
      memcpy(reply, hold ? f->first : f->reply, sizeof(reply));
      int frag = f->fragment;
      pthread_mutex_unlock(&f->mu);
      size_t n = strlen(reply), off = 0;
      while (off < n && !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        size_t k = frag > 0 && (size_t)frag < n - off ? (size_t)frag : n - off;
        if (send(c, reply + off, k, MSG_NOSIGNAL) < 0) break;
        off += k;
        /* Pauses make each piece reach libcurl as its own read. */
        if (frag > 0) sleep_ms(2);
      }
      /* Held: wait for the client to give up on the stream. */
      while (hold && !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        struct pollfd q = {c, POLLIN, 0};
        char b[256];
        if (poll(&q, 1, 50) > 0 && recv(c, b, sizeof(b), 0) <= 0) break;
      }
    }
    close(c);
  }
  return NULL;
}

static void fake_start(fake_t *f, int serving) {
  memset(f, 0, sizeof(*f));
  pthread_mutex_init(&f->mu, NULL);
  f->fd = listen_loopback(&f->port);
  f->serving = serving;
  if (serving) ASSERT_EQ(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f) {
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
  if (f->serving) pthread_join(f->thread, NULL);
  close(f->fd);
  pthread_mutex_destroy(&f->mu);
}

/* Sets the reply: an HTTP status line and a body, closed after sending. */
static void fake_reply(fake_t *f, const char *status, const char *body, int fragment) {
  pthread_mutex_lock(&f->mu);
  snprintf(f->reply, sizeof(f->reply),
           "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n%s", status,
           body);
  f->fragment = fragment;
  pthread_mutex_unlock(&f->mu);
}

/* ---- Unreachable endpoints ---- */

static void test_refused(void) {
  int port = etcd_fixture_free_port();
  char ep[64];
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(ep, 500, &c));
  long long t0 = etcd_fixture_now_ms();
  ASSERT_STATUS(bagua__etcd_put(c, "/k", "v", 1, 0, NULL, NULL), BAGUA_ERR_CURL);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 500 + 300);
  ASSERT_TRUE(strstr(bagua_last_error(), ep) != NULL);
  bagua__etcd_watch_t *w = NULL;
  recorder_t rec;
  rec_init(&rec);
  ASSERT_STATUS(bagua__etcd_watch_start(c, "/k", NULL, rec_cb, &rec, &w), BAGUA_ERR_CURL);
  ASSERT_TRUE(w == NULL);
  ASSERT_EQ(rec.n, 0);
  rec_free(&rec);

  /* A keeper that cannot reach etcd reports its lease lost once a TTL has passed. */
  bagua__etcd_keeper_t *k = NULL;
  ASSERT_OK(bagua__etcd_keeper_start(c, 42, 1, &k));
  t0 = etcd_fixture_now_ms();
  while (!bagua__etcd_keeper_lost(k)) {
    if (etcd_fixture_now_ms() - t0 > 3000) TEST_FAIL("keeper without etcd never reported lost");
    sleep_ms(20);
  }
  ASSERT_GE(bagua__etcd_keeper_since_ok_ms(k), 1000);
  bagua__etcd_keeper_stop(k);
  bagua__etcd_destroy(c);
}

typedef struct {
  bagua__etcd_t *c;
  bagua_status_t st;
} call_t;

static void *put_in_thread(void *arg) {
  call_t *call = arg;
  call->st = bagua__etcd_put(call->c, "/k", "v", 1, 0, NULL, NULL);
  return NULL;
}

static void test_silent(void) {
  /* Listening but never accepting: TCP connects, the request goes out, no answer ever comes. */
  fake_t f;
  fake_start(&f, 0);
  char ep[64];
  snprintf(ep, sizeof(ep), "127.0.0.1:%d", f.port);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(ep, 300, &c));
  long long t0 = etcd_fixture_now_ms();
  bagua__etcd_kv_t kv;
  int found;
  ASSERT_STATUS(bagua__etcd_get(c, "/k", &kv, &found, NULL), BAGUA_ERR_TIMEOUT);
  long long took = etcd_fixture_now_ms() - t0;
  ASSERT_GE(took, 250);
  ASSERT_LT(took, 300 + 700);
  ASSERT_TRUE(strstr(bagua_last_error(), ep) != NULL);

  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  t0 = etcd_fixture_now_ms();
  ASSERT_STATUS(bagua__etcd_watch_start(c, "/k", NULL, rec_cb, &rec, &w), BAGUA_ERR_TIMEOUT);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 300 + 700);
  rec_free(&rec);
  bagua__etcd_destroy(c);

  /* A long timeout is cut short by an abort from another thread. */
  ASSERT_OK(bagua__etcd_create(ep, 20000, &c));
  pthread_t th;
  call_t call = {c, BAGUA_OK};
  ASSERT_EQ(pthread_create(&th, NULL, put_in_thread, &call), 0);
  sleep_ms(200);
  t0 = etcd_fixture_now_ms();
  bagua__etcd_abort(c, 1);
  pthread_join(th, NULL);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 300);
  ASSERT_STATUS(call.st, BAGUA_ERR_ABORTED);
  /* The flag is sticky until cleared. */
  ASSERT_STATUS(bagua__etcd_delete(c, "/k", NULL), BAGUA_ERR_ABORTED);
  bagua__etcd_abort(c, 0);
  bagua__etcd_destroy(c);
  fake_stop(&f);
}

/* A stream of two ranges on which etcd confirms only the first and then says nothing (its
 * gateway stopped reading the request body after answering it): the client opens the stream
 * again at once, within half a second, instead of failing after its whole timeout. */
static void test_watch_partial(void) {
  fake_t f;
  fake_start(&f, 1);
  char ep[64];
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f.port);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(ep, 5000, &c));
  pthread_mutex_lock(&f.mu);
  snprintf(f.first, sizeof(f.first),
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
           "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n");
  pthread_mutex_unlock(&f.mu);
  fake_reply(&f, "200 OK",
             "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n"
             "{\"result\":{\"header\":{\"revision\":\"10\"},\"watch_id\":\"1\","
             "\"created\":true}}\n",
             0);
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_span_t spans[2] = {{"/a", NULL, 0}, {"/b/", NULL, 1}};
  bagua__etcd_watch_t *w = NULL;
  long long t0 = etcd_fixture_now_ms();
  ASSERT_OK(bagua__etcd_watch_ranges(c, spans, 2, NULL, rec_cb, &rec, &w));
  long long took = etcd_fixture_now_ms() - t0;
  printf("partial creation: started after %lld ms and %d connection(s)\n", took, f.requests);
  ASSERT_GE(took, 400);
  ASSERT_LT(took, 2500);
  ASSERT_GE(f.requests, 2);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 0);
  rec_free(&rec);
  bagua__etcd_destroy(c);
  fake_stop(&f);
}

/* ---- Malformed content from a fake server ---- */

static void expect_get_fails(bagua__etcd_t *c, fake_t *f, const char *status, const char *body,
                             const char *want_in_warning) {
  fake_reply(f, status, body, 0);
  bagua__etcd_kv_t kv;
  int found = 7;
  bagua_status_t st = bagua__etcd_get(c, "/k", &kv, &found, NULL);
  if (st != BAGUA_ERR_ETCD) TEST_FAIL("reply %s \"%s\" gave %s", status, body, bagua_err_name(st));
  ASSERT_TRUE(kv.key == NULL && kv.value == NULL);
  ASSERT_EQ(found, 0);
  if (!strstr(bagua_last_error(), want_in_warning))
    TEST_FAIL("warning \"%s\" lacks \"%s\"", bagua_last_error(), want_in_warning);
}

static void test_malformed(void) {
  fake_t f;
  fake_start(&f, 1);
  char ep[64];
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f.port);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(ep, 2000, &c));

  expect_get_fails(c, &f, "200 OK", "{\"header\":{\"revision\":", "not a JSON object");
  expect_get_fails(c, &f, "200 OK", "[1,2,3]", "not a JSON object");
  expect_get_fails(c, &f, "200 OK", "", "not a JSON object");
  expect_get_fails(c, &f, "500 Internal Server Error",
                   "{\"error\":\"etcdserver: boom\",\"message\":\"etcdserver: boom\",\"code\":13}",
                   "etcdserver: boom");
  expect_get_fails(c, &f, "502 Bad Gateway", "<html>proxy</html>", "HTTP 502");
  expect_get_fails(c, &f, "200 OK",
                   "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"!!!!\"}],\"count\":\"1\"}",
                   "not valid base64");
  expect_get_fails(
      c, &f, "200 OK",
      "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"L2s=\",\"value\":\"dg\"}]}",
      "not valid base64");
  expect_get_fails(c, &f, "200 OK",
                   "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"value\":\"dg==\"}]}",
                   "lacks the required field");
  expect_get_fails(c, &f, "200 OK", "{\"header\":{\"revision\":\"5\"},\"kvs\":{\"key\":\"L2s=\"}}",
                   "not an array");
  expect_get_fails(c, &f, "200 OK", "{\"header\":{\"revision\":\"5\"},\"kvs\":[7]}",
                   "not a JSON object");
  expect_get_fails(
      c, &f, "200 OK",
      "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"L2s=\",\"mod_revision\":\"x1\"}]}",
      "malformed revision");
  expect_get_fails(c, &f, "200 OK",
                   "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"L290aGVy\"}]}",
                   "other key");

  /* The request itself has the gateway's shape: base64 key and value, quoted int64 lease. */
  fake_reply(&f, "200 OK", "{\"header\":{}}", 0);
  int64_t rev = 0;
  ASSERT_STATUS(bagua__etcd_put(c, "/foo", "bar", 3, 77, &rev, NULL), BAGUA_ERR_ETCD);
  ASSERT_TRUE(strstr(bagua_last_error(), "header.revision") != NULL);
  ASSERT_STREQ(f.last_path, "/v3/kv/put");
  ASSERT_STREQ(f.last_body, "{\"key\":\"L2Zvbw==\",\"value\":\"YmFy\",\"lease\":\"77\"}");
  /* Without a revision wanted, a bare header is enough for a put. */
  ASSERT_OK(bagua__etcd_put(c, "/foo", "bar", 3, 0, NULL, NULL));

  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 5;
  fake_reply(&f, "200 OK", "{\"header\":{\"revision\":\"5\"}}", 0);
  ASSERT_OK(bagua__etcd_range_prefix(c, "/p/", &kvs, &n, &rev));
  ASSERT_EQ(n, 0);
  ASSERT_EQ(rev, 5);
  ASSERT_STREQ(f.last_body, "{\"key\":\"L3Av\",\"range_end\":\"L3Aw\"}");
  fake_reply(&f, "200 OK",
             "{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"L3AvMQ==\"},{\"key\":\"%%%\"}]}",
             0);
  ASSERT_STATUS(bagua__etcd_range_prefix(c, "/p/", &kvs, &n, NULL), BAGUA_ERR_ETCD);
  ASSERT_TRUE(kvs == NULL && n == 0);

  fake_reply(&f, "200 OK", "{\"header\":{\"revision\":\"5\"},\"deleted\":true}", 0);
  ASSERT_STATUS(bagua__etcd_delete(c, "/k", NULL), BAGUA_ERR_ETCD);

  /* Transactions: a missing read, and a non-boolean "succeeded". */
  int ok = 9;
  bagua__etcd_kv_t cur;
  fake_reply(&f, "200 OK", "{\"header\":{\"revision\":\"5\"},\"succeeded\":true}", 0);
  ASSERT_STATUS(bagua__etcd_create_if_absent(c, "/k", "v", 1, 0, &ok, NULL, &cur), BAGUA_ERR_ETCD);
  ASSERT_EQ(ok, 0);
  ASSERT_TRUE(cur.key == NULL);
  fake_reply(&f, "200 OK", "{\"header\":{\"revision\":\"5\"},\"succeeded\":\"yes\"}", 0);
  ASSERT_STATUS(bagua__etcd_cas(c, "/k", 3, "v", 1, 0, &ok, NULL, NULL), BAGUA_ERR_ETCD);

  /* Leases: no ID, a stream error, an ID that is not ours, and a revoke error. */
  int64_t id = 0, ttl = 0;
  fake_reply(&f, "200 OK", "{\"header\":{\"revision\":\"5\"},\"TTL\":\"5\"}", 0);
  ASSERT_STATUS(bagua__etcd_lease_grant(c, 5, &id, NULL), BAGUA_ERR_ETCD);
  fake_reply(&f, "200 OK", "{\"error\":{\"grpc_code\":14,\"message\":\"unavailable\"}}", 0);
  ASSERT_STATUS(bagua__etcd_lease_keepalive_once(c, 9, &ttl), BAGUA_ERR_ETCD);
  ASSERT_TRUE(strstr(bagua_last_error(), "unavailable") != NULL);
  fake_reply(&f, "200 OK", "{\"result\":{\"ID\":\"8\",\"TTL\":\"5\"}}", 0);
  ASSERT_STATUS(bagua__etcd_lease_keepalive_once(c, 9, &ttl), BAGUA_ERR_ETCD);
  fake_reply(&f, "200 OK", "{\"result\":{\"ID\":\"9\",\"TTL\":\"5\"}}", 0);
  ASSERT_OK(bagua__etcd_lease_keepalive_once(c, 9, &ttl));
  ASSERT_EQ(ttl, 5);
  ASSERT_STREQ(f.last_body, "{\"ID\":\"9\"}");
  fake_reply(&f, "503 Service Unavailable",
             "{\"error\":\"etcdserver: leader changed\",\"message\":\"etcdserver: leader "
             "changed\",\"code\":14}",
             0);
  ASSERT_STATUS(bagua__etcd_lease_revoke(c, 9), BAGUA_ERR_ETCD);

  bagua__etcd_destroy(c);
  fake_stop(&f);
}

/* ---- Watch streams from the fake server ---- */

static void test_watch_stream(void) {
  fake_t f;
  fake_start(&f, 1);
  char ep[64];
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f.port);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(ep, 2000, &c));

  /*
   * A creation line, then two messages in one line each (a PUT without "type", as the gateway
   * writes it, and a DELETE), sent in 7-byte pieces. The server then closes, so the watch
   * reconnects and is sent the same messages again: they are below its resume revision and
   * must not be delivered twice.
   */
  fake_reply(
      &f, "200 OK",
      "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n"
      "{\"result\":{\"header\":{\"revision\":\"11\"},\"events\":[{\"kv\":{\"key\":\"L3cvYQ==\","
      "\"create_revision\":\"11\",\"mod_revision\":\"11\",\"version\":\"1\",\"value\":"
      "\"aGVsbG8=\"}}]}}\n"
      "{\"result\":{\"header\":{\"revision\":\"12\"},\"events\":[{\"type\":\"DELETE\","
      "\"kv\":{\"key\":\"L3cvYQ==\",\"mod_revision\":\"12\"}}]}}\n",
      7);
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_watch_opts_t opts = {.prefix = 1};
  ASSERT_OK(bagua__etcd_watch_start(c, "/w/", &opts, rec_cb, &rec, &w));
  rec_wait(&rec, 2, 5000);
  /* Let it reconnect at least twice more and be served the same history. */
  int before = f.requests;
  long long t0 = etcd_fixture_now_ms();
  while (f.requests < before + 2 && etcd_fixture_now_ms() - t0 < 5000) sleep_ms(10);
  ASSERT_GE(f.requests, before + 2);
  t0 = etcd_fixture_now_ms();
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_LT(etcd_fixture_now_ms() - t0, 300);
  ASSERT_EQ(rec.n, 2);
  rec_expect(&rec, 0, BAGUA__ETCD_EVENT_PUT, "/w/a", "hello");
  rec_expect(&rec, 1, BAGUA__ETCD_EVENT_DELETE, "/w/a", "");
  ASSERT_EQ(rec.ev[0].mod_revision, 11);
  ASSERT_EQ(rec.ev[1].mod_revision, 12);
  /* The reconnects asked to resume after the last delivered revision. */
  ASSERT_TRUE(strstr(f.last_body, "\"start_revision\":\"13\"") != NULL);
  ASSERT_TRUE(strstr(f.last_body, "\"range_end\":\"L3cw\"") != NULL);
  rec_free(&rec);

  /* An error line instead of the creation: the start fails with etcd's message. */
  fake_reply(&f, "200 OK", "{\"error\":{\"grpc_code\":3,\"message\":\"bad watch\"}}\n", 0);
  rec_init(&rec);
  ASSERT_STATUS(bagua__etcd_watch_start(c, "/w/", &opts, rec_cb, &rec, &w), BAGUA_ERR_ETCD);
  rec_free(&rec);

  /* Garbage after the creation, every time: the watch ends with FAILED once the outage limit
   * passes, instead of spinning forever. */
  fake_reply(&f, "200 OK",
             "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n{\"result\":[}\n",
             0);
  rec_init(&rec);
  opts.max_outage_ms = 400;
  ASSERT_OK(bagua__etcd_watch_start(c, "/w/", &opts, rec_cb, &rec, &w));
  rec_wait(&rec, 1, 5000);
  ASSERT_EQ(rec.ev[0].type, BAGUA__ETCD_EVENT_FAILED);
  ASSERT_STATUS(rec.ev[0].status, BAGUA_ERR_ETCD);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 1);
  rec_free(&rec);

  /* An event of a type we do not know is bad content too. */
  fake_reply(&f, "200 OK",
             "{\"result\":{\"header\":{\"revision\":\"10\"},\"created\":true}}\n"
             "{\"result\":{\"events\":[{\"type\":\"MOVE\",\"kv\":{\"key\":\"L3cvYQ==\"}}]}}\n",
             0);
  rec_init(&rec);
  ASSERT_OK(bagua__etcd_watch_start(c, "/w/", &opts, rec_cb, &rec, &w));
  rec_wait(&rec, 1, 5000);
  ASSERT_EQ(rec.ev[0].type, BAGUA__ETCD_EVENT_FAILED);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  rec_free(&rec);

  bagua__etcd_destroy(c);
  fake_stop(&f);
}

/* The keeper's own HTTP client (common/etcd/raw.h): what it accepts as an endpoint, replies by
 * length and in chunks that arrive in pieces, a reply it cannot read, an interrupt. */
static void test_raw(void) {
  char host[64], port[16];
  ASSERT_EQ(bagua__etcd_raw_parse("http://127.0.0.1:2379", host, sizeof(host), port, sizeof(port)),
            0);
  ASSERT_STREQ(host, "127.0.0.1");
  ASSERT_STREQ(port, "2379");
  ASSERT_EQ(
      bagua__etcd_raw_parse("http://etcd-0.cluster:12", host, sizeof(host), port, sizeof(port)), 0);
  const char *refused[] = {"https://h:2379", "http://h:2379/x", "http://[::1]:2379",
                           "http://h",       "http://h:",       "http://u@h:1",
                           "h:2379",         "http://h:12a"};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
    ASSERT_EQ(bagua__etcd_raw_parse(refused[i], host, sizeof(host), port, sizeof(port)), -1);
  bagua__etcd_raw_t *r = NULL;
  ASSERT_STATUS(bagua__etcd_raw_create("https://127.0.0.1:1", &r), BAGUA_ERR_NOT_SUPPORTED);

  fake_t f;
  fake_start(&f, 1);
  char ep[64];
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f.port);
  ASSERT_OK(bagua__etcd_raw_create(ep, &r));
  etcd_buf_t buf = {0};
  long http = 0;
  /* Chunked, as the gateway streams a renewal's reply, in 5-byte pieces. */
  fake_reply(&f, "200 OK\r\nTransfer-Encoding: chunked",
             "13\r\n{\"result\":{\"ID\":\"5\"\r\n"
             "c\r\n,\"TTL\":\"9\"}}\r\n0\r\n\r\n",
             5);
  ASSERT_OK(bagua__etcd_raw_post(r, "/v3/lease/keepalive", "{\"ID\":\"5\"}", 2000, &buf, &http));
  ASSERT_EQ(http, 200);
  ASSERT_STREQ(buf.data, "{\"result\":{\"ID\":\"5\",\"TTL\":\"9\"}}");
  ASSERT_STREQ(f.last_path, "/v3/lease/keepalive");
  ASSERT_STREQ(f.last_body, "{\"ID\":\"5\"}");
  /* By length, on a new connection (the fake closes after each reply). */
  fake_reply(&f, "404 Not Found\r\nContent-Length: 4", "nope", 0);
  ASSERT_OK(bagua__etcd_raw_post(r, "/x", "{}", 2000, &buf, &http));
  ASSERT_EQ(http, 404);
  ASSERT_STREQ(buf.data, "nope");
  /* Replies it cannot read end with BAGUA_ERR_CURL, never a crash or a hang. */
  fake_reply(&f, "200 OK\r\nTransfer-Encoding: chunked", "zz\r\nabc\r\n0\r\n\r\n", 0);
  ASSERT_STATUS(bagua__etcd_raw_post(r, "/x", "{}", 2000, &buf, &http), BAGUA_ERR_CURL);
  fake_reply(&f, "200 OK", "no length and no chunks", 0);
  ASSERT_STATUS(bagua__etcd_raw_post(r, "/x", "{}", 2000, &buf, &http), BAGUA_ERR_CURL);
  pthread_mutex_lock(&f.mu);
  snprintf(f.reply, sizeof(f.reply), "garbage\r\n\r\n");
  pthread_mutex_unlock(&f.mu);
  ASSERT_STATUS(bagua__etcd_raw_post(r, "/x", "{}", 2000, &buf, &http), BAGUA_ERR_CURL);
  bagua__etcd_raw_destroy(r);
  fake_stop(&f);

  /* A listener that never answers: the timeout, or at once while an interrupt is pending. */
  fake_start(&f, 0);
  snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", f.port);
  ASSERT_OK(bagua__etcd_raw_create(ep, &r));
  long long t0 = etcd_fixture_now_ms();
  ASSERT_STATUS(bagua__etcd_raw_post(r, "/x", "{}", 300, &buf, &http), BAGUA_ERR_TIMEOUT);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 1000);
  bagua__etcd_raw_interrupt(r, 1);
  t0 = etcd_fixture_now_ms();
  ASSERT_STATUS(bagua__etcd_raw_post(r, "/x", "{}", 5000, &buf, &http), BAGUA_ERR_ABORTED);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 500);
  bagua__etcd_raw_interrupt(r, 0);
  bagua__etcd_raw_destroy(r);
  fake_stop(&f);
  bagua__etcd_buf_free(&buf);
}

int main(void) {
  test_raw();
  test_refused();
  test_silent();
  test_malformed();
  test_watch_stream();
  test_watch_partial();
  printf("PASS test_etcd_errors\n");
  return 0;
}
