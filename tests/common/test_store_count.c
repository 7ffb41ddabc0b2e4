/*
 * bagua_store_count against a real etcd: it counts the keys of its own store only (another
 * store's keys under a neighbouring prefix are not counted), follows sets and deletes, and
 * still answers once the values together pass the etcd client's 64 MiB reply bound (a count
 * that read every value back failed there). Exits 77 when etcd is not installed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/store.h"
#include "etcd_fixture.h"
#include "test.h"

static etcd_fixture_t g_fx;

enum { VALUE_BYTES = 1 << 20, BIG_KEYS = 72 }; /* 72 MiB of values in all */

int main(void) {
  etcd_fixture_start(&g_fx);
  bagua_store_t *s = NULL, *other = NULL;
  ASSERT_OK(bagua_store_open(g_fx.endpoint, "store-count", 0, 10000, &s));
  /* "store-count" is a prefix of "store-count2"'s keys in etcd only if the store forgot its
   * separator: a count of 0 below shows it did not. */
  ASSERT_OK(bagua_store_open(g_fx.endpoint, "store-count2", 0, 10000, &other));
  int64_t n = -1;
  ASSERT_OK(bagua_store_count(s, &n));
  ASSERT_EQ(n, 0);

  char *value = malloc(VALUE_BYTES);
  ASSERT_TRUE(value != NULL);
  memset(value, 'v', VALUE_BYTES);
  char key[32];
  for (int i = 0; i < BIG_KEYS; i++) {
    snprintf(key, sizeof(key), "big/%02d", i);
    ASSERT_OK(bagua_store_set(other, key, value, VALUE_BYTES));
  }
  ASSERT_OK(bagua_store_count(s, &n));
  ASSERT_EQ(n, 0);
  ASSERT_OK(bagua_store_count(other, &n));
  ASSERT_EQ(n, BIG_KEYS);

  ASSERT_OK(bagua_store_set(s, "a", "1", 1));
  ASSERT_OK(bagua_store_set(s, "b", "2", 1));
  ASSERT_OK(bagua_store_count(s, &n));
  ASSERT_EQ(n, 2);
  int deleted = 0;
  ASSERT_OK(bagua_store_delete(s, "a", &deleted));
  ASSERT_EQ(deleted, 1);
  ASSERT_OK(bagua_store_count(s, &n));
  ASSERT_EQ(n, 1);
  ASSERT_STATUS(bagua_store_count(s, NULL), BAGUA_ERR_INVALID_ARG);

  free(value);
  bagua_store_close(other);
  bagua_store_close(s);
  etcd_fixture_stop(&g_fx);
  printf("store_count: ok\n");
  return 0;
}
