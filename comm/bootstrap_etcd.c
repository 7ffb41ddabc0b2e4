/*
 * etcd bootstrap: rank 0 of rendezvous round N listens on an ephemeral port and publishes
 * that address under /bagua/<job>/rounds/<N>/bootstrap/0; every other rank reads that one key
 * (polling with backoff) and registers with rank 0 through the TCP bootstrap's handshake,
 * which sends the whole table back. bagua-agent starts workers with
 * BAGUA_BOOTSTRAP=etcd://HOST:PORT and BAGUA_ROUND, so communicators form without
 * MASTER_ADDR.
 *
 * Why not every rank's record in etcd: then every rank reads every record, N reads of N records
 * repeated while the last ranks arrive, O(N^2) bytes out of etcd per poll round (at 1024 ranks,
 * 100 MB per round). Here etcd serves one put and, per rank, a few reads of one key: O(N)
 * requests and bytes; rank 0 sends the table to each rank, O(N^2) bytes but over N separate
 * connections and once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "common/check.h"
#include "common/etcd/etcd.h"
#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "common/sock.h"
#include "common/validate.h"

/* The root's record: where rank 0's bootstrap listener is. */
static bagua_status_t publish_root(bagua__etcd_t *etcd, const char *key,
                                   const bagua__endpoint_t *mine, uint16_t port) {
  bagua__endpoint_t rec = *mine;
  rec.port = port;
  rec.rank = 0;
  return bagua__etcd_put(etcd, key, &rec, sizeof(rec), 0, NULL, NULL);
}

/* Polls the root's key until it is there (2 ms doubling to 100 ms), the deadline or abort. */
static bagua_status_t read_root(bagua__etcd_t *etcd, const char *key, const bagua__boot_etcd_t *cfg,
                                const bagua__boot_ctx_t *ctx, bagua__endpoint_t *root) {
  int delay_ms = 2;
  for (;;) {
    if (bagua__flag_get(ctx->abort_flag)) return BAGUA_ERR_ABORTED;
    bagua__etcd_kv_t kv;
    int found = 0;
    BAGUA_CHECK(bagua__etcd_get(etcd, key, &kv, &found, NULL));
    if (found) {
      bagua_status_t st = BAGUA_OK;
      if (kv.value_len != sizeof(*root)) {
        BAGUA_WARN(
            "etcd bootstrap: key %s holds %zu bytes, expected an endpoint record of %zu "
            "(mixed Bagua-C versions?)",
            key, kv.value_len, sizeof(*root));
        st = BAGUA_ERR_PROTOCOL;
      } else {
        memcpy(root, kv.value, sizeof(*root));
        if (root->addr == 0 || root->port == 0) {
          BAGUA_WARN("etcd bootstrap: key %s names no address (addr 0 or port 0)", key);
          st = BAGUA_ERR_PROTOCOL;
        }
      }
      bagua__etcd_kv_clear(&kv);
      return st;
    }
    bagua__etcd_kv_clear(&kv);
    if (bagua__now_ms() + delay_ms >= ctx->deadline_ms) {
      BAGUA_WARN(
          "etcd bootstrap: rank 0 of round %lld did not publish its address (%s) before the "
          "connect timeout",
          (long long)cfg->round, key);
      return BAGUA_ERR_TIMEOUT;
    }
    struct timespec ts = {0, (long)delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (delay_ms < 100) delay_ms *= 2;
  }
}

bagua_status_t bagua__bootstrap_etcd(void *arg, const bagua__boot_ctx_t *ctx,
                                     bagua__endpoint_t *mine, bagua__endpoint_t *all) {
  const bagua__boot_etcd_t *cfg = arg;
  bagua__etcd_t *etcd = NULL;
  bagua_status_t st = BAGUA_OK;
  int lfd = -1;
  char key[BAGUA_RDZV_KEY_MAX];
  char err[256];
  /* The communicator's settings checked the id already; this bootstrap builds keys from it,
   * so it refuses an id that would leave the job's prefix (a '/', "..") whoever calls it. */
  if (bagua__check_id(cfg->job_id, err, sizeof(err)) != BAGUA_OK) {
    BAGUA_WARN("etcd bootstrap: job id \"%.80s\" is invalid: %s", cfg->job_id, err);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (ctx->size == 1) {
    all[0] = *mine;
    return BAGUA_OK;
  }
  /* bagua__route_addr() has said what was wrong with the endpoint; this names the remedy. */
  if (mine->addr == 0 && bagua__route_addr(cfg->endpoint, &mine->addr) != BAGUA_OK) {
    BAGUA_WARN(
        "etcd bootstrap: cannot determine this node's address towards %s; set "
        "BAGUA_NODE_ADDR",
        cfg->endpoint);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (bagua__rdzv_key(key, sizeof(key), cfg->job_id, BAGUA__RDZV_KEY_BOOTSTRAP, cfg->round, NULL,
                      0) != 0) {
    BAGUA_WARN("etcd bootstrap: job id \"%.64s...\" is too long for an etcd key", cfg->job_id);
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CHECK_GOTO(bagua__etcd_create(cfg->endpoint, cfg->etcd_timeout_ms, &etcd), st, out);
  if (ctx->rank == 0) {
    /* Listen before publishing, so that a rank that reads the key finds the port open. */
    uint16_t port = 0;
    BAGUA_CHECK_GOTO(bagua__listen(mine->addr, 0, &lfd, &port), st, out);
    BAGUA_CHECK_GOTO(publish_root(etcd, key, mine, port), st, out);
    /* etcd is not needed while the ranks register. */
    bagua__etcd_destroy(etcd);
    etcd = NULL;
    st = bagua__bootstrap_tcp_root(lfd, ctx, mine, all);
    lfd = -1; /* closed by the root */
  } else {
    bagua__endpoint_t root;
    BAGUA_CHECK_GOTO(read_root(etcd, key, cfg, ctx, &root), st, out);
    bagua__etcd_destroy(etcd);
    etcd = NULL;
    bagua__boot_tcp_t tcp = {root.addr, root.port};
    st = bagua__bootstrap_tcp(&tcp, ctx, mine, all);
  }
out:
  if (lfd >= 0) close(lfd);
  bagua__etcd_destroy(etcd);
  return st;
}
