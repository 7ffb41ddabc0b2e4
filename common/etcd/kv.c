/*
 * Key-value calls and compare-and-swap transactions on the gateway's /v3/kv endpoints.
 */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "etcd_internal.h"

static bagua_status_t check_key(const char *key, const char *what) {
  if (key == NULL || key[0] == '\0') {
    BAGUA_WARN("etcd %s needs a non-empty key", what);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

static bagua_status_t no_memory(const char *what) {
  BAGUA_WARN("out of memory building an etcd %s request", what);
  return BAGUA_ERR_NO_MEMORY;
}

/* Builds a RequestPut object: {"key", "value", "lease"}. Returns NULL on out-of-memory. */
static cJSON *put_request(const char *key, const void *value, size_t value_len, int64_t lease) {
  cJSON *req = cJSON_CreateObject();
  if (!req || bagua__etcd_json_add_b64(req, "key", key, strlen(key)) != 0 ||
      bagua__etcd_json_add_b64(req, "value", value, value_len) != 0 ||
      (lease != 0 && bagua__etcd_json_add_i64(req, "lease", lease) != 0)) {
    cJSON_Delete(req);
    return NULL;
  }
  return req;
}

/* Reads the optional revision out-parameter from a reply's header. */
static bagua_status_t header_revision(const cJSON *reply, int64_t *revision) {
  if (!revision) return BAGUA_OK;
  return bagua__etcd_json_header_revision(reply, revision);
}

static bagua_status_t parse_kvs(const cJSON *range, bagua__etcd_kv_t **out, size_t *n) {
  return bagua__etcd_json_kvs(range, out, n);
}

bagua_status_t bagua__etcd_put(bagua__etcd_t *c, const char *key, const void *value,
                               size_t value_len, int64_t lease, int64_t *revision,
                               bagua__etcd_kv_t *prev) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  if (prev) memset(prev, 0, sizeof(*prev));
  BAGUA_CHECK(check_key(key, "put"));
  cJSON *req = put_request(key, value, value_len, lease);
  if (!req || (prev && !cJSON_AddTrueToObject(req, "prev_kv"))) {
    cJSON_Delete(req);
    return no_memory("put");
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/kv/put", req, &reply, 0, NULL), st, out);
  BAGUA_CHECK_GOTO(header_revision(reply, revision), st, out);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(reply, "prev_kv");
  if (prev && p) BAGUA_CHECK_GOTO(bagua__etcd_json_kv(p, prev), st, out);
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd put %s (%zu bytes, lease %lld)", key, value_len,
             (long long)lease);
out:
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_get(bagua__etcd_t *c, const char *key, bagua__etcd_kv_t *kv, int *found,
                               int64_t *revision) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  memset(kv, 0, sizeof(*kv));
  *found = 0;
  BAGUA_CHECK(check_key(key, "get"));
  cJSON *req = cJSON_CreateObject();
  if (!req || bagua__etcd_json_add_key_range(req, key, 0) != 0) {
    cJSON_Delete(req);
    return no_memory("get");
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/kv/range", req, &reply, 0, NULL), st, out);
  BAGUA_CHECK_GOTO(header_revision(reply, revision), st, out);
  BAGUA_CHECK_GOTO(parse_kvs(reply, &kvs, &n), st, out);
  if (n > 1 || (n == 1 && strcmp(kvs[0].key, key) != 0)) {
    BAGUA_WARN("etcd answered a read of key \"%s\" with %zu other key(s)", key, n);
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (n == 1) {
    *kv = kvs[0];
    memset(&kvs[0], 0, sizeof(kvs[0]));
    *found = 1;
  }
out:
  bagua__etcd_kvs_free(kvs, n);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_range_prefix(bagua__etcd_t *c, const char *prefix,
                                        bagua__etcd_kv_t **kvs, size_t *n, int64_t *revision) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  *kvs = NULL;
  *n = 0;
  if (!prefix) return BAGUA_ERR_INVALID_ARG;
  cJSON *req = cJSON_CreateObject();
  if (!req || bagua__etcd_json_add_key_range(req, prefix, 1) != 0) {
    cJSON_Delete(req);
    return no_memory("range");
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/kv/range", req, &reply, 0, NULL), st, out);
  BAGUA_CHECK_GOTO(header_revision(reply, revision), st, out);
  BAGUA_CHECK_GOTO(parse_kvs(reply, kvs, n), st, out);
out:
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

static bagua_status_t delete_range(bagua__etcd_t *c, const char *key, int prefix,
                                   int64_t *deleted) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  int64_t count = 0;
  if (deleted) *deleted = 0;
  BAGUA_CHECK(check_key(key, prefix ? "delete by prefix" : "delete"));
  cJSON *req = cJSON_CreateObject();
  if (!req || bagua__etcd_json_add_key_range(req, key, prefix) != 0) {
    cJSON_Delete(req);
    return no_memory("delete");
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/kv/deleterange", req, &reply, 0, NULL), st, out);
  if (bagua__etcd_json_i64(reply, "deleted", &count) < 0) {
    BAGUA_WARN("etcd delete reply has a malformed \"deleted\" count");
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (deleted) *deleted = count;
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd delete %s%s: %lld key(s)", key, prefix ? "*" : "",
             (long long)count);
out:
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_delete(bagua__etcd_t *c, const char *key, int64_t *deleted) {
  return delete_range(c, key, 0, deleted);
}

bagua_status_t bagua__etcd_delete_prefix(bagua__etcd_t *c, const char *prefix, int64_t *deleted) {
  return delete_range(c, prefix, 1, deleted);
}

bagua_status_t bagua__etcd_compact(bagua__etcd_t *c, int64_t revision) {
  cJSON *reply = NULL;
  cJSON *req = cJSON_CreateObject();
  if (!req || bagua__etcd_json_add_i64(req, "revision", revision) != 0 ||
      !cJSON_AddTrueToObject(req, "physical")) {
    cJSON_Delete(req);
    return no_memory("compaction");
  }
  bagua_status_t st = bagua__etcd_call(c, "/v3/kv/compaction", req, &reply, 0, NULL);
  if (st == BAGUA_OK)
    BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd history compacted up to revision %lld",
               (long long)revision);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

/* ---- Transactions ---- */

/* Appends {"<name>": obj} to `array`, taking ownership of obj. Returns -1 on out-of-memory. */
static int add_op(cJSON *array, const char *name, cJSON *obj) {
  cJSON *op = obj ? cJSON_CreateObject() : NULL;
  if (!op) {
    cJSON_Delete(obj);
    return -1;
  }
  cJSON_AddItemToObject(op, name, obj);
  cJSON_AddItemToArray(array, op);
  return 0;
}

static cJSON *range_request(const char *key) {
  cJSON *r = cJSON_CreateObject();
  if (r && bagua__etcd_json_add_key_range(r, key, 0) != 0) {
    cJSON_Delete(r);
    return NULL;
  }
  return r;
}

/*
 * One guarded write: if `key`'s `target` ("CREATE" or "MOD") equals `expect`, run the put (or
 * the delete when value is NULL and do_delete is set); otherwise nothing. When `current` is
 * wanted, both branches end with a read of the key, so the caller sees the state right after
 * the transaction without a second round trip (etcd runs the operations of one branch in
 * order, so the read after a put sees it).
 */
static bagua_status_t guarded_txn(bagua__etcd_t *c, const char *key, const char *target,
                                  int64_t expect, int do_delete, const void *value,
                                  size_t value_len, int64_t lease, int *succeeded,
                                  int64_t *revision, bagua__etcd_kv_t *current) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  *succeeded = 0;
  if (current) memset(current, 0, sizeof(*current));
  BAGUA_CHECK(check_key(key, "transaction"));
  const char *field = strcmp(target, "CREATE") == 0 ? "create_revision" : "mod_revision";
  cJSON *req = cJSON_CreateObject();
  cJSON *cmp = cJSON_CreateObject();
  cJSON *cmps = cJSON_AddArrayToObject(req, "compare");
  cJSON *success = cJSON_AddArrayToObject(req, "success");
  cJSON *failure = cJSON_AddArrayToObject(req, "failure");
  int bad = !req || !cmp || !cmps || !success || !failure;
  if (!bad) {
    cJSON_AddItemToArray(cmps, cmp);
    bad = bagua__etcd_json_add_b64(cmp, "key", key, strlen(key)) != 0 ||
          !cJSON_AddStringToObject(cmp, "target", target) ||
          !cJSON_AddStringToObject(cmp, "result", "EQUAL") ||
          bagua__etcd_json_add_i64(cmp, field, expect) != 0;
    cmp = NULL;
  }
  if (!bad) {
    bad = do_delete ? add_op(success, "request_delete_range", range_request(key))
                    : add_op(success, "request_put", put_request(key, value, value_len, lease));
  }
  if (!bad && current && !do_delete)
    bad = add_op(success, "request_range", range_request(key)) != 0 ||
          add_op(failure, "request_range", range_request(key)) != 0;
  if (bad) {
    cJSON_Delete(cmp);
    cJSON_Delete(req);
    return no_memory("transaction");
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/kv/txn", req, &reply, 0, NULL), st, out);
  BAGUA_CHECK_GOTO(header_revision(reply, revision), st, out);
  const cJSON *ok = cJSON_GetObjectItemCaseSensitive(reply, "succeeded");
  if (ok && !cJSON_IsBool(ok)) {
    BAGUA_WARN("etcd transaction reply has a non-boolean \"succeeded\"");
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  if (current && !do_delete) {
    /* The read is the last response of whichever branch ran. */
    const cJSON *resps = cJSON_GetObjectItemCaseSensitive(reply, "responses");
    int count = cJSON_IsArray(resps) ? cJSON_GetArraySize(resps) : 0;
    const cJSON *last = count > 0 ? cJSON_GetArrayItem(resps, count - 1) : NULL;
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(last, "response_range");
    if (!cJSON_IsObject(range)) {
      BAGUA_WARN("etcd transaction reply lacks the read of key \"%s\"", key);
      st = BAGUA_ERR_ETCD;
      goto out;
    }
    BAGUA_CHECK_GOTO(parse_kvs(range, &kvs, &n), st, out);
    if (n > 1) {
      BAGUA_WARN("etcd transaction read of key \"%s\" returned %zu keys", key, n);
      st = BAGUA_ERR_ETCD;
      goto out;
    }
    if (n == 1) {
      *current = kvs[0];
      memset(&kvs[0], 0, sizeof(kvs[0]));
    }
  }
  *succeeded = cJSON_IsTrue(ok);
  BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd txn %s %s if %s == %lld: %s", do_delete ? "delete" : "put",
             key, field, (long long)expect, *succeeded ? "done" : "compare failed");
out:
  bagua__etcd_kvs_free(kvs, n);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_create_if_absent(bagua__etcd_t *c, const char *key, const void *value,
                                            size_t value_len, int64_t lease, int *created,
                                            int64_t *revision, bagua__etcd_kv_t *current) {
  return guarded_txn(c, key, "CREATE", 0, 0, value, value_len, lease, created, revision, current);
}

bagua_status_t bagua__etcd_cas(bagua__etcd_t *c, const char *key, int64_t expect_mod_revision,
                               const void *value, size_t value_len, int64_t lease, int *swapped,
                               int64_t *revision, bagua__etcd_kv_t *current) {
  return guarded_txn(c, key, "MOD", expect_mod_revision, 0, value, value_len, lease, swapped,
                     revision, current);
}

bagua_status_t bagua__etcd_cad(bagua__etcd_t *c, const char *key, int64_t expect_mod_revision,
                               int *deleted) {
  return guarded_txn(c, key, "MOD", expect_mod_revision, 1, NULL, 0, 0, deleted, NULL, NULL);
}
