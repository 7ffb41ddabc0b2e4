/*
 * The etcd client's reply decoding (common/etcd/json.c, base64.c): the gateway's JSON is
 * parsed by cJSON and then picked apart by our glue, which must refuse anything malformed
 * without crashing. The shapes covered are those the client reads: a range reply
 * ({"header":{...},"kvs":[...]}), a watch reply ({"result":{"events":[{"kv":...,
 * "prev_kv":...}]}}) and a lease reply ({"ID":"...","TTL":"..."}).
 *
 * Also checked: a key range built for any key decodes back to that key, and a prefix
 * range's end is past every key with that prefix.
 */
#include <cjson/cJSON.h>

#include "common/etcd/base64.h"
#include "common/etcd/etcd_internal.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_quiet_log();
  return 0;
}

/* Decodes one mvccpb.KeyValue; on success the strings are NUL-terminated at their length. */
static void decode_kv(const cJSON *obj) {
  if (!obj) return;
  bagua__etcd_kv_t kv;
  if (bagua__etcd_json_kv(obj, &kv) == BAGUA_OK) {
    FUZZ_ASSERT(kv.key && kv.key[kv.key_len] == '\0');
    FUZZ_ASSERT(kv.value && kv.value[kv.value_len] == '\0');
  } else {
    FUZZ_ASSERT(kv.key == NULL && kv.value == NULL);
  }
  bagua__etcd_kv_clear(&kv);
}

static void decode_array(const cJSON *arr, const char *inner) {
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    if (!inner) {
      decode_kv(e);
      continue;
    }
    decode_kv(cJSON_GetObjectItemCaseSensitive(e, inner));
    decode_kv(cJSON_GetObjectItemCaseSensitive(e, "prev_kv"));
  }
}

/* Round trip of the request side: key (and range_end) of a range built for `key`. */
static void check_key_range(const char *key, size_t n, int prefix) {
  cJSON *req = cJSON_CreateObject();
  if (!req) abort();
  if (bagua__etcd_json_add_key_range(req, key, prefix) != 0) abort();
  char *k = NULL, *end = NULL;
  size_t klen = 0, elen = 0;
  FUZZ_ASSERT(bagua__etcd_json_b64(req, "key", 1, &k, &klen) == BAGUA_OK);
  FUZZ_ASSERT(bagua__etcd_json_b64(req, "range_end", 0, &end, &elen) == BAGUA_OK);
  if (!prefix) {
    FUZZ_ASSERT(klen == n && memcmp(k, key, n) == 0 && elen == 0);
  } else if (elen == 1 && end[0] == '\0') {
    /* No upper bound: the whole key space, which etcd spells key "\0". */
    FUZZ_ASSERT(klen == 1 && k[0] == '\0');
  } else {
    FUZZ_ASSERT(klen == n && memcmp(k, key, n) == 0);
    /* range_end is the smallest string greater than every key that starts with `key`. */
    FUZZ_ASSERT(elen >= 1 && elen <= n && memcmp(end, key, elen - 1) == 0);
    FUZZ_ASSERT((unsigned char)end[elen - 1] > (unsigned char)key[elen - 1]);
  }
  free(k);
  free(end);
  cJSON_Delete(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *reply = cJSON_ParseWithLength((const char *)data, size);
  if (reply) {
    int64_t rev = 0, v = 0;
    (void)bagua__etcd_json_header_revision(reply, &rev);
    decode_array(cJSON_GetObjectItemCaseSensitive(reply, "kvs"), NULL);
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(reply, "result");
    decode_array(cJSON_GetObjectItemCaseSensitive(result ? result : reply, "events"), "kv");
    int r = bagua__etcd_json_i64(reply, "ID", &v);
    FUZZ_ASSERT(r >= -1 && r <= 1);
    (void)bagua__etcd_json_i64(reply, "TTL", &v);
    char *b = NULL;
    size_t blen = 0;
    if (bagua__etcd_json_b64(reply, "value", 0, &b, &blen) == BAGUA_OK)
      FUZZ_ASSERT(b && b[blen] == '\0');
    free(b);
    cJSON_Delete(reply);
  }
  /* Keys are C strings: the round trip uses the input up to its first NUL. */
  char *key = fuzz_strndup(data, size);
  size_t n = strlen(key);
  check_key_range(key, n, 0);
  check_key_range(key, n, 1);
  free(key);
  return 0;
}
