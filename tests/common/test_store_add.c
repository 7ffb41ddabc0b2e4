/*
 * bagua_store_add against a real etcd: sums at the ends of int64 are exact, a sum outside int64
 * is refused with BAGUA_ERR_INVALID_ARG and a warning naming the key, the stored value, the
 * delta and the range, and a stored value that is not a decimal int64 (20 digits, a blank, a
 * trailing letter) is refused instead of being read as a clamped or partial number. A refused
 * add leaves the stored bytes as they were. Exits 77 when etcd is not installed.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bagua/store.h"
#include "etcd_fixture.h"
#include "test.h"

static etcd_fixture_t g_fx;

/* The bytes stored at `key`, which must be `want`. */
static void expect_value(bagua_store_t *s, const char *key, const char *want) {
  void *v = NULL;
  size_t len = 0;
  ASSERT_OK(bagua_store_get(s, key, 0, &v, &len));
  ASSERT_EQ(len, strlen(want));
  ASSERT_STREQ((const char *)v, want);
  bagua_store_free(v);
}

/* An add that must be refused: the status, the warning's words and the value left alone. */
static void expect_refused(bagua_store_t *s, const char *key, const char *stored, int64_t delta,
                           const char *const *words) {
  int64_t got = 12345;
  ASSERT_STATUS(bagua_store_add(s, key, delta, &got), BAGUA_ERR_INVALID_ARG);
  ASSERT_EQ(got, 12345); /* *result is written only on success */
  const char *err = bagua_last_error();
  for (; *words; words++)
    if (!strstr(err, *words)) TEST_FAIL("the warning \"%s\" does not name \"%s\"", err, *words);
  expect_value(s, key, stored);
}

int main(void) {
  etcd_fixture_start(&g_fx);
  bagua_store_t *s = NULL;
  ASSERT_OK(bagua_store_open(g_fx.endpoint, "store-add", 0, 5000, &s));
  int64_t r = 0;

  /* The ends of the range are reachable and exact. */
  ASSERT_OK(bagua_store_add(s, "hi", INT64_MAX - 1, &r));
  ASSERT_EQ(r, INT64_MAX - 1);
  ASSERT_OK(bagua_store_add(s, "hi", 1, &r));
  ASSERT_TRUE(r == INT64_MAX);
  expect_value(s, "hi", "9223372036854775807");
  ASSERT_OK(bagua_store_add(s, "lo", INT64_MIN, &r));
  ASSERT_TRUE(r == INT64_MIN);
  expect_value(s, "lo", "-9223372036854775808");

  /* One past either end: refused, nothing written (the sum once wrapped to the other end). */
  const char *const over[] = {"\"hi\"", "9223372036854775807", "adding 1", "-9223372036854775808",
                              NULL};
  expect_refused(s, "hi", "9223372036854775807", 1, over);
  const char *const under[] = {"\"lo\"", "-9223372036854775808", "adding -1", NULL};
  expect_refused(s, "lo", "-9223372036854775808", -1, under);
  const char *const far[] = {"\"hi\"", "adding 9223372036854775807", NULL};
  expect_refused(s, "hi", "9223372036854775807", INT64_MAX, far);
  /* The other way still works from either end. */
  ASSERT_OK(bagua_store_add(s, "hi", -1, &r));
  ASSERT_EQ(r, INT64_MAX - 1);
  ASSERT_OK(bagua_store_add(s, "lo", INT64_MAX, &r));
  ASSERT_EQ(r, -1);

  /* Stored values that are not a decimal int64. 20 digits once read as INT64_MAX. */
  const char *const bad[] = {
      "99999999999999999999", "-99999999999999999999", " 5", "5 ", "12abc", "+", "-", "", "0x10"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_OK(bagua_store_set(s, "bad", bad[i], strlen(bad[i])));
    const char *const words[] = {"\"bad\"", "not a decimal integer", "nothing was changed", NULL};
    expect_refused(s, "bad", bad[i], 1, words);
    expect_refused(s, "bad", bad[i], 0, words);
  }
  /* A sign and leading zeros are decimal integers. */
  ASSERT_OK(bagua_store_set(s, "signed", "+007", 4));
  ASSERT_OK(bagua_store_add(s, "signed", -10, &r));
  ASSERT_EQ(r, -3);
  expect_value(s, "signed", "-3");

  bagua_store_close(s);
  etcd_fixture_stop(&g_fx);
  printf("PASS test_store_add\n");
  return 0;
}
