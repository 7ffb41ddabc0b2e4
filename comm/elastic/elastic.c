/*
 * In-process elasticity (include/bagua/elastic.h): creation and destruction of the elastic
 * context and its accessors. Round records are read in record.c, the commit registry is in
 * registry.c, and the round watch, departure timer and rebuild are in rebuild.c.
 */
#include "bagua/elastic.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/rdzv/rdzv.h"
#include "common/time.h"
#include "elastic_internal.h"

/*
 * Tells bagua-agent (auto elastic mode) that this worker runs the elastic API, by creating
 * the file it named in BAGUA_ELASTIC_MARK. Failing to is not fatal: the agent then restarts
 * the worker on a membership change, which is still correct, only slower.
 */
static void announce_elastic(void) {
  const char *mark = bagua__param_str(BAGUA_P_ELASTIC_MARK);
  if (!mark || !mark[0]) return;
  int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    BAGUA_WARN(
        "elastic: cannot create BAGUA_ELASTIC_MARK file %s; bagua-agent will restart this "
        "worker on membership changes",
        mark);
    return;
  }
  close(fd);
}

/* Resolves `cfg` (unset fields from the parameters, as bagua_comm_create does) into `e`,
 * copying every string the context keeps. */
static bagua_status_t resolve_config(const bagua_elastic_config_t *cfg, bagua_elastic_t *e) {
  static const char who[] = "bagua_elastic_create";
  bagua__comm_settings_t s = BAGUA__COMM_SETTINGS_OF(cfg, BAGUA__CONFIG_UNSET);
  BAGUA_CHECK(bagua__comm_settings_resolve(who, &s));
  /* The fields only the elastic config has are bounded by their parameters too. */
  BAGUA_CHECK(bagua__comm_config_int(who, "config.round", BAGUA_P_ROUND, cfg->round));
  BAGUA_CHECK(
      bagua__comm_config_int(who, "config.local_rank", BAGUA_P_LOCAL_RANK, cfg->local_rank));
  BAGUA_CHECK(bagua__comm_config_int(who, "config.round_wait_ms", BAGUA_P_RDZV_TIMEOUT_MS,
                                     cfg->round_wait_ms));
  const char *boot = bagua__param_str(BAGUA_P_BOOTSTRAP);
  const char *endpoint = cfg->etcd ? cfg->etcd : strncmp(boot, "etcd://", 7) == 0 ? boot + 7 : "";
  int64_t round = cfg->round != BAGUA__CONFIG_UNSET ? cfg->round : bagua__param_int(BAGUA_P_ROUND);
  if (!endpoint[0] || !s.node_id[0] || round < 0 || s.size < 1 || s.rank < 0 || s.rank >= s.size) {
    BAGUA_WARN(
        "bagua_elastic_create: needs an etcd endpoint (BAGUA_BOOTSTRAP=etcd://HOST:PORT), "
        "BAGUA_NODE_ID, BAGUA_ROUND >= 0 and RANK in [0, WORLD_SIZE) (bagua-agent sets "
        "them all); got endpoint \"%s\", node \"%s\", round %lld, rank %d, size %d",
        endpoint, s.node_id, (long long)round, s.rank, s.size);
    return BAGUA_ERR_INVALID_ARG;
  }
  e->endpoint = strdup(endpoint);
  e->job_id = strdup(s.job_id);
  e->node_id = strdup(s.node_id);
  if (!e->endpoint || !e->job_id || !e->node_id) return BAGUA_ERR_NO_MEMORY;
  s.job_id = e->job_id;
  s.node_id = e->node_id;
  e->comm_settings = s;
  e->round = e->cur_round = round;
  e->rank = s.rank;
  e->size = s.size;
  e->local_rank = cfg->local_rank != BAGUA__CONFIG_UNSET ? cfg->local_rank
                  : bagua__param_int(BAGUA_P_LOCAL_RANK) >= 0
                      ? (int)bagua__param_int(BAGUA_P_LOCAL_RANK)
                      : 0;
  /* The agent passes its --rdzv-timeout as BAGUA_RDZV_TIMEOUT_MS: no worker waits longer
   * for a round than the job's rendezvous timeout. A set field means what the variable would:
   * 0 defers to BAGUA_RDZV_TIMEOUT_S. */
  int64_t wait_ms = cfg->round_wait_ms != BAGUA__CONFIG_UNSET
                        ? cfg->round_wait_ms
                        : bagua__param_int(BAGUA_P_RDZV_TIMEOUT_MS);
  if (wait_ms <= 0) wait_ms = bagua__param_int(BAGUA_P_RDZV_TIMEOUT_S) * 1000;
  e->round_wait_ms = (int)wait_ms;
  e->etcd_timeout_ms = (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS);
  e->abort_delay_ms = (int)bagua__param_int(BAGUA_P_ELASTIC_ABORT_DELAY_MS);
  atomic_store(&e->seen_round, round);
  if (bagua__rdzv_key(e->assign_key, sizeof(e->assign_key), e->job_id, BAGUA__RDZV_KEY_ASSIGN, 0,
                      e->node_id, 0) != 0) {
    BAGUA_WARN("bagua_elastic_create: job id \"%.64s...\" and node id are too long", e->job_id);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (bagua__rdzv_key(e->round_key, sizeof(e->round_key), e->job_id, BAGUA__RDZV_KEY_ROUND, 0, NULL,
                      0) != 0) {
    BAGUA_WARN("bagua_elastic_create: job id \"%.64s...\" is too long", e->job_id);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

bagua_status_t bagua_elastic_create(const bagua_elastic_config_t *cfg, bagua_elastic_t **out) {
  bagua_elastic_config_t def = BAGUA_ELASTIC_CONFIG_INIT;
  bagua_status_t st;
  bagua_elastic_t *e = NULL;
  if (!out) return BAGUA_ERR_INVALID_ARG;
  *out = NULL;
  if (!cfg) cfg = &def;
  if (cfg->struct_size < sizeof(bagua_elastic_config_t)) {
    BAGUA_WARN(
        "bagua_elastic_create: config struct_size %zu is smaller than this library's "
        "%zu; initialise it with BAGUA_ELASTIC_CONFIG_INIT",
        cfg->struct_size, sizeof(bagua_elastic_config_t));
    return BAGUA_ERR_INVALID_ARG;
  }
  BAGUA_CALLOC(e, 1);
  pthread_mutex_init(&e->lock, NULL);
  bagua__cond_init(&e->timer_cv);
  BAGUA_CHECK_GOTO(resolve_config(cfg, e), st, fail);
  BAGUA_CHECK_GOTO(bagua__elastic_timer_start(e), st, fail);
  BAGUA_CHECK_GOTO(bagua__etcd_create(e->endpoint, e->etcd_timeout_ms, &e->etcd), st, fail);
  BAGUA_CHECK_GOTO(bagua__elastic_watch_start(e), st, fail);
  BAGUA_CHECK_GOTO(bagua_elastic_register(e, "bagua.step", &e->step, sizeof(e->step)), st, fail);
  BAGUA_CHECK_GOTO(bagua_elastic_register(e, "bagua.epoch", &e->epoch, sizeof(e->epoch)), st, fail);
  bagua__log_set_rank(e->rank);
  bagua_comm_t *c = NULL;
  BAGUA_CHECK_GOTO(bagua__elastic_comm_for_round(e, e->round, e->rank, e->size, &c), st, fail);
  pthread_mutex_lock(&e->lock);
  e->comm = c;
  pthread_mutex_unlock(&e->lock);
  announce_elastic();
  *out = e;
  return BAGUA_OK;
fail:
  bagua_elastic_destroy(e);
  return st;
}

void bagua_elastic_destroy(bagua_elastic_t *e) {
  if (!e) return;
  bagua__elastic_timer_stop(e);
  bagua__etcd_watch_stop(e->watch);
  /* After the assignment's watch, whose callback may have started this one. */
  bagua__etcd_watch_stop(e->round_watch);
  bagua__etcd_destroy(e->etcd);
  bagua_comm_destroy(e->comm);
  bagua__elastic_registry_free(e);
  free(e->endpoint);
  free(e->job_id);
  free(e->node_id);
  pthread_cond_destroy(&e->timer_cv);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

bagua_comm_t *bagua_elastic_comm(const bagua_elastic_t *e) {
  return e ? e->comm : NULL;
}
int64_t bagua_elastic_round(const bagua_elastic_t *e) {
  return e ? e->round : -1;
}
int bagua_elastic_rank(const bagua_elastic_t *e) {
  return e ? e->rank : -1;
}
int bagua_elastic_size(const bagua_elastic_t *e) {
  return e ? e->size : 0;
}
