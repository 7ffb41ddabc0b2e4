/*
 * Several operations in one request: a transaction whose only branch is a list of them.
 *
 * Reads: every range is read at the transaction's one revision. The agent reads the handful of
 * keys it follows this way (one request instead of one per key), and counts keys it does not
 * need to see (count_only) without their values crossing the network.
 *
 * Writes: up to BAGUA_ETCD_READS_MAX puts at once, so that a leader that writes one small
 * record per node writes a thousand of them in eight requests.
 */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "etcd_internal.h"

void bagua__etcd_reads_clear(bagua__etcd_read_t *r, size_t n) {
  for (size_t i = 0; r && i < n; i++) {
    bagua__etcd_kvs_free(r[i].kvs, r[i].n);
    r[i].kvs = NULL;
    r[i].n = 0;
    r[i].count = 0;
  }
}

static cJSON *read_request(const bagua__etcd_read_t *r) {
  cJSON *req = cJSON_CreateObject();
  cJSON *op = cJSON_CreateObject();
  if (!req || !op || bagua__etcd_json_add_span(req, &r->span) != 0 ||
      (r->count_only && !cJSON_AddTrueToObject(req, "count_only")) ||
      (r->keys_only && !cJSON_AddTrueToObject(req, "keys_only"))) {
    cJSON_Delete(req);
    cJSON_Delete(op);
    return NULL;
  }
  cJSON_AddItemToObject(op, "request_range", req);
  return op;
}

bagua_status_t bagua__etcd_read_ranges(bagua__etcd_t *c, bagua__etcd_read_t *r, size_t n,
                                       int64_t *revision) {
  bagua_status_t st = BAGUA_OK;
  cJSON *reply = NULL;
  bagua__etcd_reads_clear(r, n);
  if (n == 0 || n > BAGUA_ETCD_READS_MAX) {
    BAGUA_WARN("etcd read of %zu ranges: 1..%d ranges per request", n, BAGUA_ETCD_READS_MAX);
    return BAGUA_ERR_INVALID_ARG;
  }
  for (size_t i = 0; i < n; i++) {
    if (!r[i].span.key || !r[i].span.key[0]) {
      BAGUA_WARN("etcd read of several ranges: range %zu has no key", i);
      return BAGUA_ERR_INVALID_ARG;
    }
  }
  cJSON *req = cJSON_CreateObject();
  cJSON *success = req ? cJSON_AddArrayToObject(req, "success") : NULL;
  int bad = !success;
  for (size_t i = 0; i < n && !bad; i++) {
    cJSON *op = read_request(&r[i]);
    if (!op)
      bad = 1;
    else
      cJSON_AddItemToArray(success, op);
  }
  if (bad) {
    cJSON_Delete(req);
    BAGUA_WARN("out of memory building an etcd read of %zu ranges", n);
    return BAGUA_ERR_NO_MEMORY;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_call(c, "/v3/kv/txn", req, &reply, 0, NULL), st, out);
  if (revision) BAGUA_CHECK_GOTO(bagua__etcd_json_header_revision(reply, revision), st, out);
  const cJSON *resps = cJSON_GetObjectItemCaseSensitive(reply, "responses");
  if (!cJSON_IsArray(resps) || cJSON_GetArraySize(resps) != (int)n) {
    BAGUA_WARN("etcd answered a read of %zu ranges with %d responses", n,
               cJSON_IsArray(resps) ? cJSON_GetArraySize(resps) : -1);
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  size_t i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, resps) {
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(item, "response_range");
    if (!cJSON_IsObject(range) || bagua__etcd_json_i64(range, "count", &r[i].count) < 0) {
      BAGUA_WARN("etcd answered range %zu of a read with no valid range response", i);
      st = BAGUA_ERR_ETCD;
      goto out;
    }
    BAGUA_CHECK_GOTO(bagua__etcd_json_kvs(range, &r[i].kvs, &r[i].n), st, out);
    /* A single-key range holds that key or nothing: anything else is not etcd's answer. */
    if (!r[i].span.prefix && !r[i].span.end &&
        (r[i].n > 1 || (r[i].n == 1 && strcmp(r[i].kvs[0].key, r[i].span.key) != 0))) {
      BAGUA_WARN("etcd answered a read of key \"%s\" with other keys", r[i].span.key);
      st = BAGUA_ERR_ETCD;
      goto out;
    }
    i++;
  }
out:
  if (st != BAGUA_OK) bagua__etcd_reads_clear(r, n);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

/* One transaction of `n` puts; BAGUA_ERR_ETCD when etcd refused it (one bad lease refuses all). */
static bagua_status_t put_txn(bagua__etcd_t *c, const bagua__etcd_put_t *p, size_t n, int quiet) {
  cJSON *reply = NULL;
  cJSON *req = cJSON_CreateObject();
  cJSON *success = req ? cJSON_AddArrayToObject(req, "success") : NULL;
  int bad = !success;
  for (size_t i = 0; i < n && !bad; i++) {
    cJSON *op = cJSON_CreateObject();
    cJSON *put = cJSON_CreateObject();
    bad = !op || !put || bagua__etcd_json_add_b64(put, "key", p[i].key, strlen(p[i].key)) != 0 ||
          bagua__etcd_json_add_b64(put, "value", p[i].value, p[i].value_len) != 0 ||
          (p[i].lease && bagua__etcd_json_add_i64(put, "lease", p[i].lease) != 0);
    if (bad) {
      cJSON_Delete(op);
      cJSON_Delete(put);
      break;
    }
    cJSON_AddItemToObject(op, "request_put", put);
    cJSON_AddItemToArray(success, op);
  }
  if (bad) {
    cJSON_Delete(req);
    BAGUA_WARN("out of memory building an etcd write of %zu keys", n);
    return BAGUA_ERR_NO_MEMORY;
  }
  bagua_status_t st =
      bagua__etcd_call(c, "/v3/kv/txn", req, &reply, quiet ? ETCD_CALL_QUIET_NOT_FOUND : 0, NULL);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_put_many(bagua__etcd_t *c, const bagua__etcd_put_t *p, size_t n,
                                    size_t *written) {
  bagua_status_t first = BAGUA_OK;
  size_t done = 0;
  for (size_t off = 0; off < n; off += BAGUA_ETCD_READS_MAX) {
    size_t m = n - off < BAGUA_ETCD_READS_MAX ? n - off : BAGUA_ETCD_READS_MAX;
    bagua_status_t st = put_txn(c, p + off, m, 1);
    if (st == BAGUA_ERR_ETCD) {
      /* A lease that ended meanwhile refuses the whole batch: write its keys one by one, so
       * that only the ones on a gone lease are left out. */
      BAGUA_INFO(BAGUA_SUBSYS_ETCD, "etcd write of %zu keys refused; writing them one by one", m);
      st = BAGUA_OK;
      for (size_t i = 0; i < m; i++) {
        bagua_status_t one = bagua__etcd_put(c, p[off + i].key, p[off + i].value,
                                             p[off + i].value_len, p[off + i].lease, NULL, NULL);
        if (one == BAGUA_OK)
          done++;
        else if (st == BAGUA_OK || st == BAGUA_ERR_ETCD)
          st = one;
        if (one != BAGUA_OK && one != BAGUA_ERR_ETCD) break;
      }
    } else if (st == BAGUA_OK) {
      done += m;
    }
    if (st != BAGUA_OK && first == BAGUA_OK) first = st;
    if (st != BAGUA_OK && st != BAGUA_ERR_ETCD) break; /* unreachable: the rest would fail too */
  }
  if (written) *written = done;
  return first;
}
