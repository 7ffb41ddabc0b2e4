/*
 * Leases against a real etcd: expiry removes attached keys, the keeper thread keeps them for
 * several TTLs and lets them expire once stopped, revoke is immediate and idempotent, and a
 * lease etcd no longer knows is reported as lost.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bagua/error.h"
#include "common/etcd/etcd.h"
#include "etcd_fixture.h"
#include "test.h"

#define TTL_S 2

static int key_exists(bagua__etcd_t *c, const char *key) {
  bagua__etcd_kv_t kv;
  int found = 0;
  ASSERT_OK(bagua__etcd_get(c, key, &kv, &found, NULL));
  bagua__etcd_kv_clear(&kv);
  return found;
}

/* Polls until `key` is gone; returns the milliseconds it took, failing after `limit_ms`. */
static long long wait_gone(bagua__etcd_t *c, const char *key, long long limit_ms) {
  long long t0 = etcd_fixture_now_ms();
  while (key_exists(c, key)) {
    if (etcd_fixture_now_ms() - t0 > limit_ms)
      TEST_FAIL("%s still present after %lld ms", key, limit_ms);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  return etcd_fixture_now_ms() - t0;
}

static void test_expiry(bagua__etcd_t *c) {
  int64_t id = 0, granted = 0, ttl = 0;
  ASSERT_OK(bagua__etcd_lease_grant(c, TTL_S, &id, &granted));
  ASSERT_NE(id, 0);
  ASSERT_EQ(granted, TTL_S);
  ASSERT_OK(bagua__etcd_put(c, "/l/expiring", "x", 1, id, NULL, NULL));
  bagua__etcd_kv_t kv;
  int found = 0;
  ASSERT_OK(bagua__etcd_get(c, "/l/expiring", &kv, &found, NULL));
  ASSERT_EQ(kv.lease, id);
  bagua__etcd_kv_clear(&kv);
  ASSERT_OK(bagua__etcd_lease_keepalive_once(c, id, &ttl));
  ASSERT_EQ(ttl, TTL_S);
  long long t0 = etcd_fixture_now_ms();
  wait_gone(c, "/l/expiring", 3 * TTL_S * 1000);
  /* The key lived at least most of its TTL (etcd expires leases on a 500 ms tick). */
  ASSERT_GE(etcd_fixture_now_ms() - t0, TTL_S * 1000 - 600);
  /* A lease etcd has expired is reported as TTL 0, not as a transport error. */
  ASSERT_OK(bagua__etcd_lease_keepalive_once(c, id, &ttl));
  ASSERT_EQ(ttl, 0);
  /* Attaching a key to a dead lease is an etcd error. */
  ASSERT_STATUS(bagua__etcd_put(c, "/l/late", "x", 1, id, NULL, NULL), BAGUA_ERR_ETCD);
}

static void test_keeper(bagua__etcd_t *c) {
  int64_t id = 0;
  ASSERT_OK(bagua__etcd_lease_grant(c, TTL_S, &id, NULL));
  bagua__etcd_keeper_t *k = NULL;
  ASSERT_OK(bagua__etcd_keeper_start(c, id, TTL_S, &k));
  ASSERT_OK(bagua__etcd_put(c, "/l/kept", "x", 1, id, NULL, NULL));
  /* Two full TTLs with the keeper running: the key must stay the whole time. */
  long long t0 = etcd_fixture_now_ms();
  while (etcd_fixture_now_ms() - t0 < 2 * TTL_S * 1000 + 500) {
    ASSERT_TRUE(key_exists(c, "/l/kept"));
    ASSERT_EQ(bagua__etcd_keeper_lost(k), 0);
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
  }
  ASSERT_LT(bagua__etcd_keeper_since_ok_ms(k), TTL_S * 1000);
  /* Stopping is prompt and leaves the lease to expire by itself. */
  long long s0 = etcd_fixture_now_ms();
  bagua__etcd_keeper_stop(k);
  ASSERT_LT(etcd_fixture_now_ms() - s0, 500);
  wait_gone(c, "/l/kept", 3 * TTL_S * 1000);
}

static void test_revoke(bagua__etcd_t *c) {
  int64_t id = 0;
  ASSERT_OK(bagua__etcd_lease_grant(c, 60, &id, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/l/revoked/a", "x", 1, id, NULL, NULL));
  ASSERT_OK(bagua__etcd_put(c, "/l/revoked/b", "y", 1, id, NULL, NULL));
  bagua__etcd_keeper_t *k = NULL;
  ASSERT_OK(bagua__etcd_keeper_start(c, id, 60, &k));
  ASSERT_OK(bagua__etcd_lease_revoke(c, id));
  ASSERT_EQ(key_exists(c, "/l/revoked/a"), 0);
  ASSERT_EQ(key_exists(c, "/l/revoked/b"), 0);
  /* Revoking again is not an error: the goal (no lease) holds. */
  ASSERT_OK(bagua__etcd_lease_revoke(c, id));
  /* The keeper's next renewal (every 20 s here) is not due, so check the one-shot call. */
  int64_t ttl = -1;
  ASSERT_OK(bagua__etcd_lease_keepalive_once(c, id, &ttl));
  ASSERT_EQ(ttl, 0);
  bagua__etcd_keeper_stop(k);

  /* A keeper started on a revoked lease reports it lost as soon as etcd answers. */
  ASSERT_OK(bagua__etcd_keeper_start(c, id, TTL_S, &k));
  long long t0 = etcd_fixture_now_ms();
  while (!bagua__etcd_keeper_lost(k)) {
    if (etcd_fixture_now_ms() - t0 > 3000) TEST_FAIL("keeper did not report a revoked lease lost");
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  ASSERT_LT(etcd_fixture_now_ms() - t0, 1000);
  bagua__etcd_keeper_stop(k);

  ASSERT_STATUS(bagua__etcd_lease_grant(c, 0, &id, NULL), BAGUA_ERR_INVALID_ARG);
  ASSERT_STATUS(bagua__etcd_keeper_start(c, 0, 5, &k), BAGUA_ERR_INVALID_ARG);
}

int main(void) {
  etcd_fixture_t fx;
  etcd_fixture_start(&fx);
  bagua__etcd_t *c = NULL;
  ASSERT_OK(bagua__etcd_create(fx.endpoint, 5000, &c));
  test_revoke(c);
  test_expiry(c);
  test_keeper(c);
  bagua__etcd_destroy(c);
  etcd_fixture_stop(&fx);
  printf("PASS test_etcd_lease\n");
  return 0;
}
