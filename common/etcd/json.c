/*
 * JSON glue for etcd's gateway: 64-bit integers travel as decimal strings, bytes as base64,
 * and proto3 leaves out every field whose value is the default (0, "", false, empty list).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "common/check.h"
#include "common/log.h"
#include "etcd_internal.h"

int bagua__etcd_json_i64(const cJSON *obj, const char *name, int64_t *out) {
  *out = 0;
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (f == NULL || cJSON_IsNull(f)) return 0;
  if (cJSON_IsString(f)) {
    const char *s = f->valuestring;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || errno != 0 || *end != '\0') return -1;
    *out = v;
    return 1;
  }
  if (cJSON_IsNumber(f)) {
    double d = f->valuedouble;
    /* A double holds integers exactly only up to 2^53; beyond that the id was already lost. */
    if (d != d || d > 9007199254740992.0 || d < -9007199254740992.0 || d != (double)(int64_t)d)
      return -1;
    *out = (int64_t)d;
    return 1;
  }
  return -1;
}

int bagua__etcd_json_add_i64(cJSON *obj, const char *name, int64_t v) {
  char tmp[32];
  snprintf(tmp, sizeof(tmp), "%" PRId64, v);
  return cJSON_AddStringToObject(obj, name, tmp) ? 0 : -1;
}

int bagua__etcd_json_add_b64(cJSON *obj, const char *name, const void *p, size_t n) {
  char *enc = bagua__base64_encode_alloc(p ? p : "", p ? n : 0);
  if (!enc) return -1;
  int rc = cJSON_AddStringToObject(obj, name, enc) ? 0 : -1;
  free(enc);
  return rc;
}

bagua_status_t bagua__etcd_json_b64(const cJSON *obj, const char *name, int required, char **out,
                                    size_t *len) {
  *out = NULL;
  *len = 0;
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
  const char *s = "";
  if (f == NULL || cJSON_IsNull(f)) {
    if (required) {
      BAGUA_WARN("etcd reply lacks the required field \"%s\"", name);
      return BAGUA_ERR_ETCD;
    }
  } else if (cJSON_IsString(f)) {
    s = f->valuestring;
  } else {
    BAGUA_WARN("etcd reply field \"%s\" is not a string", name);
    return BAGUA_ERR_ETCD;
  }
  bagua_status_t st = bagua__base64_decode_alloc(s, strlen(s), out, len);
  if (st == BAGUA_ERR_INVALID_ARG) {
    BAGUA_WARN("etcd reply field \"%s\" is not valid base64 (\"%.40s\")", name, s);
    return BAGUA_ERR_ETCD;
  }
  if (st != BAGUA_OK) BAGUA_WARN("out of memory decoding etcd field \"%s\"", name);
  return st;
}

void bagua__etcd_kv_clear(bagua__etcd_kv_t *kv) {
  if (!kv) return;
  free(kv->key);
  free(kv->value);
  memset(kv, 0, sizeof(*kv));
}

void bagua__etcd_kvs_free(bagua__etcd_kv_t *kvs, size_t n) {
  if (!kvs) return;
  for (size_t i = 0; i < n; i++) bagua__etcd_kv_clear(&kvs[i]);
  free(kvs);
}

bagua_status_t bagua__etcd_json_kv(const cJSON *obj, bagua__etcd_kv_t *kv) {
  bagua_status_t st = BAGUA_OK;
  memset(kv, 0, sizeof(*kv));
  if (!cJSON_IsObject(obj)) {
    BAGUA_WARN("etcd reply has a key-value entry that is not a JSON object");
    return BAGUA_ERR_ETCD;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_json_b64(obj, "key", 1, &kv->key, &kv->key_len), st, fail);
  BAGUA_CHECK_GOTO(bagua__etcd_json_b64(obj, "value", 0, &kv->value, &kv->value_len), st, fail);
  if (bagua__etcd_json_i64(obj, "create_revision", &kv->create_revision) < 0 ||
      bagua__etcd_json_i64(obj, "mod_revision", &kv->mod_revision) < 0 ||
      bagua__etcd_json_i64(obj, "version", &kv->version) < 0 ||
      bagua__etcd_json_i64(obj, "lease", &kv->lease) < 0) {
    BAGUA_WARN("etcd reply has a malformed revision, version or lease for key \"%s\"", kv->key);
    st = BAGUA_ERR_ETCD;
    goto fail;
  }
  return BAGUA_OK;
fail:
  bagua__etcd_kv_clear(kv);
  return st;
}

bagua_status_t bagua__etcd_json_header_revision(const cJSON *reply, int64_t *rev) {
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(reply, "header");
  if (!cJSON_IsObject(h) || bagua__etcd_json_i64(h, "revision", rev) != 1) {
    BAGUA_WARN("etcd reply lacks a valid header.revision");
    return BAGUA_ERR_ETCD;
  }
  return BAGUA_OK;
}

int bagua__etcd_json_add_key_range(cJSON *obj, const char *key, int prefix) {
  size_t n = strlen(key);
  if (bagua__etcd_json_add_b64(obj, "key", key, n) != 0) return -1;
  if (!prefix) return 0;
  /*
   * The end of a prefix range is the prefix with its last byte incremented, after dropping
   * trailing 0xff bytes (they cannot be incremented). An empty or all-0xff prefix has no upper
   * bound, which etcd spells as range_end "\0" together with key "\0" (every key).
   */
  char *end = malloc(n + 1);
  if (!end) return -1;
  memcpy(end, key, n);
  size_t m = n;
  while (m > 0 && (unsigned char)end[m - 1] == 0xff) m--;
  int rc;
  if (m == 0) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "key");
    rc = bagua__etcd_json_add_b64(obj, "key", "", 1) == 0 &&
                 bagua__etcd_json_add_b64(obj, "range_end", "", 1) == 0
             ? 0
             : -1;
  } else {
    end[m - 1] = (char)((unsigned char)end[m - 1] + 1);
    rc = bagua__etcd_json_add_b64(obj, "range_end", end, m);
  }
  free(end);
  return rc;
}

int bagua__etcd_json_add_span(cJSON *obj, const bagua__etcd_span_t *span) {
  if (!span->end || span->prefix)
    return bagua__etcd_json_add_key_range(obj, span->key, span->prefix);
  return bagua__etcd_json_add_b64(obj, "key", span->key, strlen(span->key)) == 0 &&
                 bagua__etcd_json_add_b64(obj, "range_end", span->end, strlen(span->end)) == 0
             ? 0
             : -1;
}

bagua_status_t bagua__etcd_json_kvs(const cJSON *range, bagua__etcd_kv_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(range, "kvs");
  if (kvs == NULL || cJSON_IsNull(kvs)) return BAGUA_OK;
  if (!cJSON_IsArray(kvs)) {
    BAGUA_WARN("etcd range reply has a \"kvs\" field that is not an array");
    return BAGUA_ERR_ETCD;
  }
  int count = cJSON_GetArraySize(kvs);
  if (count == 0) return BAGUA_OK;
  bagua__etcd_kv_t *arr;
  BAGUA_CALLOC(arr, count);
  size_t i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, kvs) {
    bagua_status_t st = bagua__etcd_json_kv(item, &arr[i]);
    if (st != BAGUA_OK) {
      bagua__etcd_kvs_free(arr, i);
      return st;
    }
    i++;
  }
  *out = arr;
  *n = i;
  return BAGUA_OK;
}
