/*
 * bagua_store_*: a job's key-value store in its etcd (include/bagua/store.h), built on the
 * internal etcd client. Reads that wait poll with a growing pause (1 ms to 20 ms): a store
 * serves a rendezvous, a handful of keys per rank, where a watch's extra connection per call
 * would cost more than a few polls.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/store.h"
#include "common/check.h"
#include "common/etcd/etcd.h"
#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "common/time.h"
#include "common/validate.h"

/* The longest key a caller may use; etcd itself takes far longer ones. */
#define STORE_KEY_MAX 512

struct bagua_store_s {
  bagua__etcd_t *etcd;
  char prefix[BAGUA_RDZV_KEY_MAX]; /* /bagua/<job>/rounds/<round>/store/ */
};

bagua_status_t bagua_store_open(const char *endpoints, const char *job_id, int64_t round,
                                int timeout_ms, bagua_store_t **out) {
  char err[256];
  if (out) *out = NULL;
  if (!out || !endpoints || !*endpoints || !job_id) {
    BAGUA_WARN("bagua_store_open: out, endpoints and job_id are required");
    return BAGUA_ERR_INVALID_ARG;
  }
  if (bagua__check_id(job_id, err, sizeof(err)) != BAGUA_OK) {
    BAGUA_WARN("bagua_store_open: job id \"%.80s\" is invalid: %s", job_id, err);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (round < 0 || timeout_ms <= 0) {
    BAGUA_WARN("bagua_store_open: round %" PRId64
               " and timeout_ms %d; accepted: round >= 0, "
               "timeout_ms > 0",
               round, timeout_ms);
    return BAGUA_ERR_INVALID_ARG;
  }
  bagua_store_t *s = calloc(1, sizeof(*s));
  if (!s) return BAGUA_ERR_NO_MEMORY;
  char dir[BAGUA_RDZV_KEY_MAX];
  bagua_status_t st = BAGUA_OK;
  if (bagua__rdzv_key(dir, sizeof(dir), job_id, BAGUA__RDZV_KEY_ROUND_DIR, round, NULL, 0) != 0 ||
      snprintf(s->prefix, sizeof(s->prefix), "%sstore/", dir) >= (int)sizeof(s->prefix)) {
    BAGUA_WARN("bagua_store_open: job id \"%.64s...\" is too long for an etcd key", job_id);
    st = BAGUA_ERR_INVALID_ARG;
    goto fail;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_create(endpoints, timeout_ms, &s->etcd), st, fail);
  *out = s;
  return BAGUA_OK;
fail:
  free(s);
  return st;
}

void bagua_store_close(bagua_store_t *store) {
  if (!store) return;
  bagua__etcd_destroy(store->etcd);
  free(store);
}

void bagua_store_free(void *value) {
  free(value);
}

/* The etcd key of `key`, malloc'ed; NULL (with a warning naming `what`) for a bad key. */
static char *full_key(const bagua_store_t *s, const char *key, const char *what) {
  size_t n = key ? strlen(key) : 0;
  if (!s || n == 0 || n > STORE_KEY_MAX) {
    BAGUA_WARN("%s: %s; accepted: an open store and a key of 1 to %d bytes", what,
               !s ? "no store" : "the key is empty or too long", STORE_KEY_MAX);
    return NULL;
  }
  size_t p = strlen(s->prefix);
  char *k = malloc(p + n + 1);
  if (!k) return NULL;
  memcpy(k, s->prefix, p);
  memcpy(k + p, key, n + 1);
  return k;
}

/* A copy of `len` bytes of `v` (NULL allowed when len is 0), NUL-terminated past them. */
static void *copy_value(const void *v, size_t len) {
  char *c = malloc(len + 1);
  if (!c) return NULL;
  if (len) memcpy(c, v, len);
  c[len] = '\0';
  return c;
}

bagua_status_t bagua_store_set(bagua_store_t *store, const char *key, const void *value,
                               size_t len) {
  if (!value && len) {
    BAGUA_WARN("bagua_store_set: value is NULL with length %zu", len);
    return BAGUA_ERR_INVALID_ARG;
  }
  char *k = full_key(store, key, "bagua_store_set");
  if (!k) return BAGUA_ERR_INVALID_ARG;
  bagua_status_t st = bagua__etcd_put(store->etcd, k, value, len, 0, NULL, NULL);
  free(k);
  return st;
}

bagua_status_t bagua_store_get(bagua_store_t *store, const char *key, int wait_ms, void **value,
                               size_t *len) {
  if (value) *value = NULL;
  if (len) *len = 0;
  if (!value || !len || wait_ms < 0) {
    BAGUA_WARN("bagua_store_get: value and len are required and wait_ms (%d) must be >= 0",
               wait_ms);
    return BAGUA_ERR_INVALID_ARG;
  }
  char *k = full_key(store, key, "bagua_store_get");
  if (!k) return BAGUA_ERR_INVALID_ARG;
  bagua_status_t st = BAGUA_OK;
  bagua__etcd_kv_t kv = {0};
  int64_t deadline = bagua__now_ms() + wait_ms, pause = 1;
  for (;;) {
    int found = 0;
    BAGUA_CHECK_GOTO(bagua__etcd_get(store->etcd, k, &kv, &found, NULL), st, out);
    if (found) break;
    int64_t left = deadline - bagua__now_ms();
    if (left <= 0) {
      BAGUA_WARN("bagua_store_get: key \"%.200s\" was not set within %d ms", key, wait_ms);
      st = BAGUA_ERR_TIMEOUT;
      goto out;
    }
    bagua__sleep_ms(pause < left ? pause : left);
    if (pause < 20) pause *= 2;
  }
  *value = copy_value(kv.value, kv.value_len);
  if (!*value) {
    st = BAGUA_ERR_NO_MEMORY;
    goto out;
  }
  *len = kv.value_len;
out:
  bagua__etcd_kv_clear(&kv);
  free(k);
  return st;
}

/* Parses a whole decimal int64 of `len` bytes: an optional sign and digits, nothing else
 * (strtoll alone would take leading blanks and clamp an out-of-range value to INT64_MAX or
 * INT64_MIN without a word). 0 on success. */
static int parse_int(const char *v, size_t len, int64_t *out) {
  char buf[32];
  if (len == 0 || len >= sizeof(buf)) return -1;
  memcpy(buf, v, len);
  buf[len] = '\0';
  const char *digits = buf + (buf[0] == '-' || buf[0] == '+');
  if (*digits < '0' || *digits > '9') return -1;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(buf, &end, 10);
  if (errno == ERANGE || *end != '\0') return -1;
  *out = x;
  return 0;
}

/* cur + delta without overflow: 0, or -1 when the sum leaves [INT64_MIN, INT64_MAX]. */
static int add_checked(int64_t cur, int64_t delta, int64_t *sum) {
  if ((delta > 0 && cur > INT64_MAX - delta) || (delta < 0 && cur < INT64_MIN - delta)) return -1;
  *sum = cur + delta;
  return 0;
}

bagua_status_t bagua_store_add(bagua_store_t *store, const char *key, int64_t delta,
                               int64_t *result) {
  char *k = full_key(store, key, "bagua_store_add");
  if (!k) return BAGUA_ERR_INVALID_ARG;
  bagua_status_t st = BAGUA_OK;
  bagua__etcd_kv_t kv = {0};
  int found = 0;
  BAGUA_CHECK_GOTO(bagua__etcd_get(store->etcd, k, &kv, &found, NULL), st, out);
  /* Compare-and-swap on the key's revision until no other rank wrote in between. Each round
   * trip is bounded, and a rank loses a race only to another rank's successful write. A value
   * that is not an int64, or a sum outside int64, is refused before anything is written. */
  for (;;) {
    int64_t cur = 0, sum = 0;
    if (found && parse_int(kv.value, kv.value_len, &cur) != 0) {
      BAGUA_WARN(
          "bagua_store_add: key \"%.200s\" holds \"%.40s\"%s (%zu bytes), not a decimal "
          "integer in [%" PRId64 ", %" PRId64 "]; nothing was changed",
          key, kv.value, kv.value_len > 40 ? "..." : "", kv.value_len, INT64_MIN, INT64_MAX);
      st = BAGUA_ERR_INVALID_ARG;
      goto out;
    }
    if (add_checked(cur, delta, &sum) != 0) {
      BAGUA_WARN("bagua_store_add: key \"%.200s\" holds %" PRId64 "; adding %" PRId64
                 " leaves the accepted range [%" PRId64 ", %" PRId64 "]; nothing was changed",
                 key, cur, delta, INT64_MIN, INT64_MAX);
      st = BAGUA_ERR_INVALID_ARG;
      goto out;
    }
    char next[32];
    int n = snprintf(next, sizeof(next), "%" PRId64, sum);
    int swapped = 0;
    int64_t expect = found ? kv.mod_revision : 0;
    bagua__etcd_kv_clear(&kv);
    BAGUA_CHECK_GOTO(
        bagua__etcd_cas(store->etcd, k, expect, next, (size_t)n, 0, &swapped, NULL, &kv), st, out);
    if (swapped) {
      if (result) *result = sum;
      break;
    }
    found = kv.key != NULL;
  }
out:
  bagua__etcd_kv_clear(&kv);
  free(k);
  return st;
}

bagua_status_t bagua_store_compare_set(bagua_store_t *store, const char *key, const void *expected,
                                       size_t expected_len, const void *desired, size_t desired_len,
                                       void **current, size_t *current_len) {
  if (current) *current = NULL;
  if (current_len) *current_len = 0;
  if (!current || !current_len || (!expected && expected_len) || (!desired && desired_len)) {
    BAGUA_WARN(
        "bagua_store_compare_set: current and current_len are required, and a value "
        "pointer may be NULL only with length 0");
    return BAGUA_ERR_INVALID_ARG;
  }
  char *k = full_key(store, key, "bagua_store_compare_set");
  if (!k) return BAGUA_ERR_INVALID_ARG;
  bagua_status_t st = BAGUA_OK;
  bagua__etcd_kv_t kv = {0};
  int found = 0;
  const void *result = NULL;
  size_t result_len = 0;
  BAGUA_CHECK_GOTO(bagua__etcd_get(store->etcd, k, &kv, &found, NULL), st, out);
  for (;;) {
    int match = found ? kv.value_len == expected_len &&
                            (expected_len == 0 || !memcmp(kv.value, expected, expected_len))
                      : expected_len == 0;
    if (!match) {
      /* As torch's stores: an absent key answers with the expected value. */
      result = found ? (const void *)kv.value : expected;
      result_len = found ? kv.value_len : expected_len;
      break;
    }
    int swapped = 0;
    int64_t expect = found ? kv.mod_revision : 0;
    bagua__etcd_kv_clear(&kv);
    BAGUA_CHECK_GOTO(
        bagua__etcd_cas(store->etcd, k, expect, desired, desired_len, 0, &swapped, NULL, &kv), st,
        out);
    if (swapped) {
      result = desired;
      result_len = desired_len;
      break;
    }
    found = kv.key != NULL; /* another rank changed it: decide again on what it holds now */
  }
  *current = copy_value(result, result_len);
  if (!*current) {
    st = BAGUA_ERR_NO_MEMORY;
    goto out;
  }
  *current_len = result_len;
out:
  bagua__etcd_kv_clear(&kv);
  free(k);
  return st;
}

bagua_status_t bagua_store_check(bagua_store_t *store, const char *key, int *exists) {
  if (!exists) {
    BAGUA_WARN("bagua_store_check: exists is required");
    return BAGUA_ERR_INVALID_ARG;
  }
  *exists = 0;
  char *k = full_key(store, key, "bagua_store_check");
  if (!k) return BAGUA_ERR_INVALID_ARG;
  bagua__etcd_kv_t kv = {0};
  bagua_status_t st = bagua__etcd_get(store->etcd, k, &kv, exists, NULL);
  bagua__etcd_kv_clear(&kv);
  free(k);
  return st;
}

bagua_status_t bagua_store_delete(bagua_store_t *store, const char *key, int *deleted) {
  if (deleted) *deleted = 0;
  char *k = full_key(store, key, "bagua_store_delete");
  if (!k) return BAGUA_ERR_INVALID_ARG;
  int64_t n = 0;
  bagua_status_t st = bagua__etcd_delete(store->etcd, k, &n);
  if (st == BAGUA_OK && deleted) *deleted = n > 0;
  free(k);
  return st;
}

bagua_status_t bagua_store_count(bagua_store_t *store, int64_t *count) {
  if (!store || !count) {
    BAGUA_WARN("bagua_store_count: store and count are required");
    return BAGUA_ERR_INVALID_ARG;
  }
  *count = 0;
  /* etcd counts the keys itself: reading them back would move every value (and fail once
   * they pass the client's 64 MiB reply bound) only to count them. */
  bagua__etcd_read_t r = {.span = {.key = store->prefix, .prefix = 1}, .count_only = 1};
  bagua_status_t st = bagua__etcd_read_ranges(store->etcd, &r, 1, NULL);
  if (st == BAGUA_OK) *count = r.count;
  bagua__etcd_reads_clear(&r, 1);
  return st;
}
