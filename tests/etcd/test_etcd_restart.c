/*
 * etcd restarts (same port, same data dir): a watch resumes after the last delivered revision
 * without losing or repeating events, including ones written before it reconnected; unary
 * calls fail within the timeout while etcd is down and work again on the same client
 * afterwards; a lease keeper rides out the outage.
 */
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <time.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "test.h"
#include "watch_recorder.h"

static void put_str(bagua__etcd_t *c, const char *key, const char *value) {
  ASSERT_OK(bagua__etcd_put(c, key, value, strlen(value), 0, NULL, NULL));
}

int main(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(fx.endpoint, 1000, &c));

  int64_t lease = 0;
  ASSERT_OK(bagua__etcd_lease_grant(c, 5, &lease, NULL));
  bagua__etcd_keeper_t *k = NULL;
  ASSERT_OK(bagua__etcd_keeper_start(c, lease, 5, &k));
  int note = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_TRUE(note >= 0);
  bagua__etcd_keeper_set_notify_fd(k, note);
  ASSERT_OK(bagua__etcd_put(c, "/rs/member", "me", 2, lease, NULL, NULL));

  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_watch_opts_t opts = {.prefix = 1};
  ASSERT_OK(bagua__etcd_watch_start(c, "/rs/w/", &opts, rec_cb, &rec, &w));
  put_str(c, "/rs/w/1", "before");
  rec_wait(&rec, 1, 5000);

  /* Down: calls fail within the timeout, naming the endpoint. */
  ASSERT_EQ(etcd_fixture_down(&fx), 0);
  long long t0 = etcd_fixture_now_ms();
  bagua_status_t st = bagua__etcd_put(c, "/rs/w/x", "lost", 4, 0, NULL, NULL);
  ASSERT_TRUE(st == BAGUA_ERR_CURL || st == BAGUA_ERR_TIMEOUT);
  ASSERT_LT(etcd_fixture_now_ms() - t0, 1000 + 500);
  ASSERT_TRUE(strstr(bagua_last_error(), fx.endpoint) != NULL);
  /* The keeper says when its renewals began to fail, within one renewal period (TTL 5: 1.67 s),
   * which is how an agent that sends nothing else learns of the outage. */
  ASSERT_EQ(bagua__etcd_keeper_failing_since(k), 0);
  long long until = etcd_fixture_now_ms() + 4000;
  while (bagua__etcd_keeper_failing_since(k) == 0 && etcd_fixture_now_ms() < until) {
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  int64_t failing = bagua__etcd_keeper_failing_since(k);
  ASSERT_GT(failing, 0);
  ASSERT_GE(failing + 50, t0);
  /* ... and wakes a holder that waits on the descriptor it was given. */
  struct pollfd pn = {.fd = note, .events = POLLIN};
  ASSERT_EQ(poll(&pn, 1, 1000), 1);
  uint64_t v = 0;
  ASSERT_EQ(read(note, &v, sizeof(v)), (ssize_t)sizeof(v));

  /* Up again; write at once, before the watch has had time to reconnect. */
  ASSERT_EQ(etcd_fixture_up(&fx), 0);
  put_str(c, "/rs/w/2", "after-1");
  put_str(c, "/rs/w/3", "after-2");
  ASSERT_OK(bagua__etcd_delete(c, "/rs/w/1", NULL));
  rec_wait(&rec, 4, 10000);

  /* A second restart while idle, then more writes. */
  ASSERT_EQ(etcd_fixture_restart(&fx), 0);
  put_str(c, "/rs/w/4", "after-3");
  rec_wait(&rec, 5, 10000);

  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 5);
  rec_expect(&rec, 0, BAGUA__ETCD_EVENT_PUT, "/rs/w/1", "before");
  rec_expect(&rec, 1, BAGUA__ETCD_EVENT_PUT, "/rs/w/2", "after-1");
  rec_expect(&rec, 2, BAGUA__ETCD_EVENT_PUT, "/rs/w/3", "after-2");
  rec_expect(&rec, 3, BAGUA__ETCD_EVENT_DELETE, "/rs/w/1", "");
  rec_expect(&rec, 4, BAGUA__ETCD_EVENT_PUT, "/rs/w/4", "after-3");
  for (int i = 1; i < rec.n; i++) ASSERT_GT(rec.ev[i].mod_revision, rec.ev[i - 1].mod_revision);
  rec_free(&rec);

  /* The lease survived both restarts: the keeper renewed it and the key is still there. */
  bagua__etcd_kv_t kv;
  int found = 0;
  long long deadline = etcd_fixture_now_ms() + 5000;
  while (bagua__etcd_keeper_since_ok_ms(k) > 1000 && etcd_fixture_now_ms() < deadline) {
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  ASSERT_EQ(bagua__etcd_keeper_lost(k), 0);
  ASSERT_EQ(bagua__etcd_keeper_failing_since(k), 0); /* renewals succeed again */
  ASSERT_EQ(poll(&pn, 1, 1000), 1);                  /* and the holder is told */
  bagua__etcd_keeper_set_notify_fd(k, -1);
  close(note);
  ASSERT_OK(bagua__etcd_get(c, "/rs/member", &kv, &found, NULL));
  ASSERT_EQ(found, 1);
  ASSERT_EQ(kv.lease, lease);
  bagua__etcd_kv_clear(&kv);
  bagua__etcd_keeper_stop(k);
  ASSERT_OK(bagua__etcd_lease_revoke(c, lease));

  bagua__etcd_destroy(c);
  etcd_fixture_stop(&fx);
  printf("PASS test_etcd_restart\n");
  return 0;
}
