/*
 * etcd bootstrap: the workers of rendezvous round N publish their endpoint records under
 * /bagua/<job>/rounds/<N>/bootstrap/<rank> and poll the prefix until all WORLD_SIZE records
 * are there. bagua-agent starts workers with BAGUA_BOOTSTRAP=etcd://HOST:PORT and BAGUA_ROUND,
 * so communicators form without MASTER_ADDR and without any rank acting as a server.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "common/check.h"
#include "common/etcd/etcd.h"
#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "common/sock.h"
#include "common/validate.h"

bagua_status_t bagua__bootstrap_etcd(void *arg, const bagua__boot_ctx_t *ctx,
                                     bagua__endpoint_t *mine, bagua__endpoint_t *all) {
  const bagua__boot_etcd_t *cfg = arg;
  bagua__etcd_t *etcd = NULL;
  bagua__etcd_kv_t *kvs = NULL;
  size_t nkv = 0;
  bagua_status_t st = BAGUA_OK;
  char job_prefix[BAGUA_RDZV_KEY_MAX], prefix[BAGUA_RDZV_KEY_MAX], key[BAGUA_RDZV_KEY_MAX];
  char err[256];
  /* The communicator's settings checked the id already; this bootstrap builds keys from it,
   * so it refuses an id that would leave the job's prefix (a '/', "..") whoever calls it. */
  if (bagua__check_id(cfg->job_id, err, sizeof(err)) != BAGUA_OK) {
    BAGUA_WARN("etcd bootstrap: job id \"%.80s\" is invalid: %s", cfg->job_id, err);
    return BAGUA_ERR_INVALID_ARG;
  }
  int *seen = calloc((size_t)ctx->size, sizeof(int));
  if (!seen) return BAGUA_ERR_NO_MEMORY;
  /* bagua__route_addr() has said what was wrong with the endpoint; this names the remedy. */
  if (mine->addr == 0 && bagua__route_addr(cfg->endpoint, &mine->addr) != BAGUA_OK) {
    BAGUA_WARN(
        "etcd bootstrap: cannot determine this node's address towards %s; set "
        "BAGUA_NODE_ADDR",
        cfg->endpoint);
    st = BAGUA_ERR_INVALID_ARG;
    goto out;
  }
  if (bagua__rdzv_key(job_prefix, sizeof(job_prefix), cfg->job_id, BAGUA__RDZV_KEY_PREFIX, 0, NULL,
                      0) != 0 ||
      bagua__rdzv_key(prefix, sizeof(prefix), cfg->job_id, BAGUA__RDZV_KEY_BOOTSTRAP_DIR,
                      cfg->round, NULL, 0) != 0 ||
      bagua__rdzv_key(key, sizeof(key), cfg->job_id, BAGUA__RDZV_KEY_BOOTSTRAP, cfg->round, NULL,
                      ctx->rank) != 0) {
    BAGUA_WARN("etcd bootstrap: job id \"%.64s...\" is too long for an etcd key", cfg->job_id);
    st = BAGUA_ERR_INVALID_ARG;
    goto out;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_create(cfg->endpoint, cfg->etcd_timeout_ms, &etcd), st, out);
  BAGUA_CHECK_GOTO(bagua__etcd_put(etcd, key, mine, sizeof(*mine), 0, NULL, NULL), st, out);
  int have = 0, delay_ms = 2;
  while (have < ctx->size) {
    if (bagua__flag_get(ctx->abort_flag)) {
      st = BAGUA_ERR_ABORTED;
      goto out;
    }
    BAGUA_CHECK_GOTO(bagua__etcd_range_prefix(etcd, prefix, &kvs, &nkv, NULL), st, out);
    for (size_t i = 0; i < nkv; i++) {
      /* The schema classifies the key: only rounds/<N>/bootstrap/<rank> of this round, with a
       * rank of this world, is an endpoint record. */
      bagua__rdzv_key_info_t ki;
      if (bagua__rdzv_key_parse(job_prefix, kvs[i].key, &ki) != 0 ||
          ki.kind != BAGUA__RDZV_KEY_BOOTSTRAP || ki.round != cfg->round || ki.index >= ctx->size)
        continue;
      int64_t r = ki.index;
      if (kvs[i].value_len != sizeof(bagua__endpoint_t)) {
        BAGUA_WARN(
            "etcd bootstrap: key %s holds %zu bytes, expected an endpoint record of %zu "
            "(mixed Bagua-C versions?)",
            kvs[i].key, kvs[i].value_len, sizeof(bagua__endpoint_t));
        st = BAGUA_ERR_PROTOCOL;
        goto out;
      }
      if (!seen[r]) have++;
      seen[r] = 1;
      memcpy(&all[r], kvs[i].value, sizeof(bagua__endpoint_t));
    }
    bagua__etcd_kvs_free(kvs, nkv);
    kvs = NULL;
    if (have == ctx->size) break;
    if (bagua__now_ms() >= ctx->deadline_ms) {
      BAGUA_WARN(
          "etcd bootstrap: only %d of %d ranks of round %lld published their endpoints "
          "before the connect timeout",
          have, ctx->size, (long long)cfg->round);
      st = BAGUA_ERR_TIMEOUT;
      goto out;
    }
    struct timespec ts = {0, (long)delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 50) delay_ms *= 2;
  }
  /* Our own record comes back from etcd; keep the local copy (it is authoritative). */
  all[ctx->rank] = *mine;
out:
  bagua__etcd_kvs_free(kvs, nkv);
  bagua__etcd_destroy(etcd);
  free(seen);
  return st;
}
