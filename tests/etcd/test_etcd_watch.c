/*
 * Watches against a real etcd: puts and deletes arrive in order with their revisions, exact
 * keys ignore their neighbours, history replays from a start revision, values too large for
 * one network read arrive whole, a compacted start revision ends the watch with a clear
 * error, the callback can end the watch, and stopping is prompt.
 */
#include <stdlib.h>
#include <string.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "test.h"
#include "watch_recorder.h"

static void test_order(bagua__etcd_t *c) {
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_watch_opts_t opts = {.prefix = 1};
  ASSERT_OK(bagua__etcd_watch_start(c, "/w/", &opts, rec_cb, &rec, &w));
  int64_t r1, r2, r3, r4;
  ASSERT_OK(bagua__etcd_put(c, "/w/a", "1", 1, 0, &r1, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/other", "x", 1, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/w/b", "2", 1, 0, &r2, NULL));
  ASSERT_OK(bagua__etcd_delete(c, "/w/a", NULL));
  int ok = 0;
  ASSERT_OK(bagua__etcd_create_if_absent(c, "/w/c", "3", 1, 0, &ok, &r3, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/w/b", "22", 2, 0, &r4, NULL));
  rec_wait(&rec, 5, 5000);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 5);
  rec_expect(&rec, 0, BAGUA__ETCD_EVENT_PUT, "/w/a", "1");
  rec_expect(&rec, 1, BAGUA__ETCD_EVENT_PUT, "/w/b", "2");
  rec_expect(&rec, 2, BAGUA__ETCD_EVENT_DELETE, "/w/a", "");
  rec_expect(&rec, 3, BAGUA__ETCD_EVENT_PUT, "/w/c", "3");
  rec_expect(&rec, 4, BAGUA__ETCD_EVENT_PUT, "/w/b", "22");
  ASSERT_EQ(rec.ev[0].mod_revision, r1);
  ASSERT_EQ(rec.ev[0].create_revision, r1);
  ASSERT_EQ(rec.ev[1].mod_revision, r2);
  ASSERT_EQ(rec.ev[2].mod_revision, r2 + 1);
  ASSERT_EQ(rec.ev[3].mod_revision, r3);
  ASSERT_EQ(rec.ev[4].mod_revision, r4);
  ASSERT_EQ(rec.ev[4].create_revision, r2);
  rec_free(&rec);
}

/* One stream, three ranges (a key, a prefix, [start, end)): each event names its range, keys
 * outside all three are not reported, a history replay starts every range at the revision
 * asked for, and one revoke that deletes keys of two ranges arrives as one message per range,
 * each ending with its `last` event. */
static void test_ranges(bagua__etcd_t *c) {
  int64_t before = 0, lease = 0;
  bagua__etcd_kv_t kv;
  int found;
  ASSERT_OK(bagua__etcd_get(c, "/x/none", &kv, &found, &before));
  ASSERT_OK(bagua__etcd_put(c, "/x/one", "h", 1, 0, NULL, NULL)); /* history: replayed */
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_span_t spans[3] = {{"/x/one", NULL, 0}, {"/x/p/", NULL, 1}, {"/x/r1", "/x/r3", 0}};
  bagua__etcd_watch_opts_t opts = {.start_revision = before + 1};
  ASSERT_OK(bagua__etcd_watch_ranges(c, spans, 3, &opts, rec_cb, &rec, &w));
  ASSERT_OK(bagua__etcd_lease_grant(c, 30, &lease, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/x/one2", "no", 2, 0, NULL, NULL)); /* next to the key */
  ASSERT_OK(bagua__etcd_put(c, "/x/p/a", "1", 1, lease, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/x/r2", "2", 1, lease, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/x/r3", "no", 2, 0, NULL, NULL)); /* the end is exclusive */
  ASSERT_OK(bagua__etcd_put(c, "/x/r1", "3", 1, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_lease_revoke(c, lease));
  rec_wait(&rec, 6, 5000);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 6);
  /* Each range's events come in revision order; across ranges etcd promises no order (a range
   * that replays history catches up on its own), so they are checked range by range. */
  const char *want[3][3] = {
      {"/x/one", NULL}, {"/x/p/a", "/x/p/a", NULL}, {"/x/r2", "/x/r1", "/x/r2"}};
  const bagua__etcd_event_type_t types[3][3] = {
      {BAGUA__ETCD_EVENT_PUT},
      {BAGUA__ETCD_EVENT_PUT, BAGUA__ETCD_EVENT_DELETE},
      {BAGUA__ETCD_EVENT_PUT, BAGUA__ETCD_EVENT_PUT, BAGUA__ETCD_EVENT_DELETE}};
  int seen[3] = {0, 0, 0};
  int64_t last_rev[3] = {0, 0, 0}, revoke_rev[2] = {0, 0};
  for (int i = 0; i < rec.n; i++) {
    const rec_event_t *e = &rec.ev[i];
    ASSERT_TRUE(e->range >= 0 && e->range < 3);
    int k = seen[e->range]++;
    ASSERT_TRUE(want[e->range][k] != NULL);
    ASSERT_STREQ(e->key, want[e->range][k]);
    ASSERT_EQ((int)e->type, (int)types[e->range][k]);
    ASSERT_GT(e->mod_revision, last_rev[e->range]);
    last_rev[e->range] = e->mod_revision;
    if (e->type == BAGUA__ETCD_EVENT_DELETE) revoke_rev[e->range - 1] = e->mod_revision;
  }
  ASSERT_TRUE(seen[0] == 1 && seen[1] == 2 && seen[2] == 3);
  /* A message may hold several events (a replay sends revisions in batches), but the last event
   * received of each range ends one. */
  for (int r = 0; r < 3; r++) {
    int last = -1;
    for (int i = 0; i < rec.n; i++)
      if (rec.ev[i].range == r) last = i;
    ASSERT_EQ(rec.ev[last].last, 1);
  }
  /* The revoke deleted both keys at one revision. */
  ASSERT_EQ(revoke_rev[0], revoke_rev[1]);
  rec_free(&rec);
  /* Bad arguments are refused by name, before any thread starts. */
  ASSERT_EQ(bagua__etcd_watch_ranges(c, spans, 0, NULL, rec_cb, NULL, &w), BAGUA_ERR_INVALID_ARG);
  bagua__etcd_span_t empty = {"", NULL, 0};
  ASSERT_EQ(bagua__etcd_watch_ranges(c, &empty, 1, NULL, rec_cb, NULL, &w), BAGUA_ERR_INVALID_ARG);
}

static void test_exact_key_and_history(bagua__etcd_t *c) {
  int64_t before = 0, last = 0;
  bagua__etcd_kv_t kv;
  int found;
  ASSERT_OK(bagua__etcd_get(c, "/h/k", &kv, &found, &before));
  ASSERT_OK(bagua__etcd_put(c, "/h/k", "a", 1, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/h/k2", "not me", 6, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/h/k", "b", 1, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_delete(c, "/h/k", NULL));
  ASSERT_OK(bagua__etcd_put(c, "/h/k", "c", 1, 0, &last, NULL));

  /* Replays history from the revision after the read, then continues live. */
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_watch_opts_t opts = {.start_revision = before + 1};
  ASSERT_OK(bagua__etcd_watch_start(c, "/h/k", &opts, rec_cb, &rec, &w));
  ASSERT_OK(bagua__etcd_put(c, "/h/k", "d", 1, 0, NULL, NULL));
  rec_wait(&rec, 5, 5000);
  rec_expect(&rec, 0, BAGUA__ETCD_EVENT_PUT, "/h/k", "a");
  rec_expect(&rec, 1, BAGUA__ETCD_EVENT_PUT, "/h/k", "b");
  rec_expect(&rec, 2, BAGUA__ETCD_EVENT_DELETE, "/h/k", "");
  rec_expect(&rec, 3, BAGUA__ETCD_EVENT_PUT, "/h/k", "c");
  rec_expect(&rec, 4, BAGUA__ETCD_EVENT_PUT, "/h/k", "d");
  ASSERT_EQ(rec.ev[3].mod_revision, last);
  ASSERT_EQ(bagua__etcd_watch_next_revision(w), rec.ev[4].mod_revision + 1);
  /* Stopping an idle watch returns at once, not after a network timeout. */
  long long t0 = etcd_fixture_now_ms();
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_LT(etcd_fixture_now_ms() - t0, 300);
  ASSERT_EQ(rec.n, 5);
  rec_free(&rec);
}

static void test_big_value(bagua__etcd_t *c) {
  /* About 1.3 MiB of base64 on one line: libcurl delivers it in many pieces. */
  size_t len = 1000 * 1000;
  char *big = malloc(len + 1);
  ASSERT_TRUE(big != NULL);
  for (size_t i = 0; i < len; i++) big[i] = (char)('A' + i % 23);
  big[len] = '\0';
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  ASSERT_OK(bagua__etcd_watch_start(c, "/big", NULL, rec_cb, &rec, &w));
  ASSERT_OK(bagua__etcd_put(c, "/big", big, len, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/big", "small", 5, 0, NULL, NULL));
  rec_wait(&rec, 2, 5000);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.ev[0].value_len, len);
  ASSERT_TRUE(memcmp(rec.ev[0].value, big, len) == 0);
  rec_expect(&rec, 1, BAGUA__ETCD_EVENT_PUT, "/big", "small");
  free(big);
  rec_free(&rec);
}

static void test_callback_ends_watch(bagua__etcd_t *c) {
  recorder_t rec;
  rec_init(&rec);
  rec.stop_after = 2;
  bagua__etcd_watch_t *w = NULL;
  ASSERT_OK(bagua__etcd_watch_start(c, "/cb", NULL, rec_cb, &rec, &w));
  for (int i = 0; i < 4; i++) ASSERT_OK(bagua__etcd_put(c, "/cb", "x", 1, 0, NULL, NULL));
  rec_wait(&rec, 2, 5000);
  /* Later events are not delivered, and no FAILED event follows a callback stop. */
  ASSERT_OK(bagua__etcd_put(c, "/cb", "y", 1, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 2);
  rec_free(&rec);
}

static void test_compacted(bagua__etcd_t *c) {
  int64_t rev = 0;
  ASSERT_OK(bagua__etcd_put(c, "/cmp", "1", 1, 0, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/cmp", "2", 1, 0, &rev, NULL));
  ASSERT_OK(bagua__etcd_compact(c, rev));
  recorder_t rec;
  rec_init(&rec);
  bagua__etcd_watch_t *w = NULL;
  bagua__etcd_watch_opts_t opts = {.start_revision = 1};
  ASSERT_OK(bagua__etcd_watch_start(c, "/cmp", &opts, rec_cb, &rec, &w));
  rec_wait(&rec, 1, 5000);
  ASSERT_EQ(rec.ev[0].type, BAGUA__ETCD_EVENT_FAILED);
  ASSERT_STATUS(rec.ev[0].status, BAGUA_ERR_ETCD);
  ASSERT_EQ(rec.ev[0].compact_revision, rev);
  ASSERT_OK(bagua__etcd_watch_stop(w));
  ASSERT_EQ(rec.n, 1);
  rec_free(&rec);
  /* Compacting again to the same revision is an etcd error, reported as such. */
  ASSERT_STATUS(bagua__etcd_compact(c, rev), BAGUA_ERR_ETCD);
}

static void test_bad_args(bagua__etcd_t *c) {
  bagua__etcd_watch_t *w = (bagua__etcd_watch_t *)0x1;
  recorder_t rec;
  ASSERT_STATUS(bagua__etcd_watch_start(c, "", NULL, rec_cb, &rec, &w), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(w == NULL);
  ASSERT_STATUS(bagua__etcd_watch_start(c, "/k", NULL, NULL, &rec, &w), BAGUA_ERR_INVALID_ARG);
  ASSERT_OK(bagua__etcd_watch_stop(NULL));
}

int main(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(fx.endpoint, 5000, &c));
  test_order(c);
  test_exact_key_and_history(c);
  test_ranges(c);
  test_big_value(c);
  test_callback_ends_watch(c);
  test_compacted(c);
  test_bad_args(c);
  bagua__etcd_destroy(c);
  etcd_fixture_stop(&fx);
  printf("PASS test_etcd_watch\n");
  return 0;
}
