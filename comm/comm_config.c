/*
 * Configuration of a world communicator: the fields of bagua_comm_config_t (and of the elastic
 * config, through bagua__comm_settings_resolve) that the caller left unset take the BAGUA_*
 * parameters, the fields it set are checked against what the parameter registry accepts, and
 * the bootstrap URL (env://, tcp://HOST:PORT, etcd://HOST:PORT) becomes a bootstrap function
 * and its argument.
 *
 * Bounds come from the registry's own description (bagua__param_bounds), never from numbers
 * written again here, so that a config field and its environment variable accept the same.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bootstrap.h"
#include "comm_internal.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"

/* BAGUA_TRANSPORT as a bagua_transport_kind_t; the registry admits only these three names. */
static int transport_param(void) {
  const char *t = bagua__param_str(BAGUA_P_TRANSPORT);
  return strcasecmp(t, "tcp") == 0   ? BAGUA_TRANSPORT_TCP
         : strcasecmp(t, "shm") == 0 ? BAGUA_TRANSPORT_SHM
                                     : BAGUA_TRANSPORT_AUTO;
}

bagua_status_t bagua__comm_settings_resolve(const char *who, bagua__comm_settings_t *s) {
  BAGUA_CHECK(bagua__params_check());
  if (s->rank < 0) s->rank = (int)bagua__param_int(BAGUA_P_RANK);
  if (s->size < 0) s->size = (int)bagua__param_int(BAGUA_P_WORLD_SIZE);
  if (!s->job_id) s->job_id = bagua__param_str(BAGUA_P_JOB_ID);
  if (!s->node_id) s->node_id = bagua__param_str(BAGUA_P_NODE_ID);
  if (s->transport < 0) {
    s->transport = transport_param();
  } else if (s->transport > BAGUA_TRANSPORT_SHM) {
    BAGUA_WARN("%s: transport %d is invalid; accepted: 0 auto, 1 tcp, 2 shm", who, s->transport);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (s->timeout_ms <= 0) s->timeout_ms = (int)bagua__param_int(BAGUA_P_COMM_TIMEOUT_MS);
  if (s->connect_timeout_ms <= 0)
    s->connect_timeout_ms = (int)bagua__param_int(BAGUA_P_CONNECT_TIMEOUT_MS);
  if (s->nstreams <= 0) s->nstreams = (int)bagua__param_int(BAGUA_P_NET_NSTREAMS);
  int64_t lo, hi;
  bagua__param_bounds(BAGUA_P_NET_NSTREAMS, &lo, &hi);
  if (s->nstreams < lo || s->nstreams > hi) {
    BAGUA_WARN("%s: nstreams %d is invalid; accepted: %lld..%lld (as %s)", who, s->nstreams,
               (long long)lo, (long long)hi, bagua__param_env_name(BAGUA_P_NET_NSTREAMS));
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

/* tcp://HOST:PORT: rank 0 listens on that address, which every rank resolves. The port must be
 * one MASTER_PORT would accept, since it plays the same role. */
static bagua_status_t parse_tcp_url(const char *boot, bagua__boot_tcp_t *tcp) {
  char host[256];
  int64_t lo, hi;
  bagua__param_bounds(BAGUA_P_MASTER_PORT, &lo, &hi);
  const char *colon = strrchr(boot + 6, ':');
  long port = colon ? strtol(colon + 1, NULL, 10) : 0;
  if (!colon || port < lo || port > hi || (size_t)(colon - boot - 6) >= sizeof(host)) {
    BAGUA_WARN("bootstrap \"%s\" is malformed; accepted: env:// or tcp://HOST:PORT", boot);
    return BAGUA_ERR_INVALID_ARG;
  }
  memcpy(host, boot + 6, (size_t)(colon - boot - 6));
  host[colon - boot - 6] = '\0';
  BAGUA_CHECK(bagua__resolve_ipv4(host, &tcp->master_addr));
  tcp->master_port = (uint16_t)port;
  return BAGUA_OK;
}

/* Picks the bootstrap that the URL `boot` names and fills its argument in `args`. */
static bagua_status_t resolve_bootstrap(const char *boot, const char *job,
                                        bagua__comm_boot_args_t *args, bagua__comm_build_t *b) {
  args->tcp = (bagua__boot_tcp_t){0, 0};
  args->etcd = (bagua__boot_etcd_t){boot + 7, job, bagua__param_int(BAGUA_P_ROUND),
                                    (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS)};
  b->boot_fn = bagua__bootstrap_tcp;
  b->boot_arg = &args->tcp;
  b->round = 0;
  if (strncmp(boot, "etcd://", 7) == 0) {
    if (args->etcd.round < 0 || boot[7] == '\0') {
      BAGUA_WARN(
          "bootstrap \"%s\" needs an endpoint and BAGUA_ROUND (bagua-agent sets both); "
          "accepted: etcd://HOST:PORT[,HOST:PORT] with BAGUA_ROUND >= 0",
          boot);
      return BAGUA_ERR_INVALID_ARG;
    }
    b->boot_fn = bagua__bootstrap_etcd;
    b->boot_arg = &args->etcd;
    /* Each rendezvous round builds a distinct communicator, so stale peers cannot join it. */
    b->round = args->etcd.round;
    return BAGUA_OK;
  }
  if (strcmp(boot, "env://") == 0) {
    BAGUA_CHECK(bagua__resolve_ipv4(bagua__param_str(BAGUA_P_MASTER_ADDR), &args->tcp.master_addr));
    args->tcp.master_port = (uint16_t)bagua__param_int(BAGUA_P_MASTER_PORT);
    return BAGUA_OK;
  }
  if (strncmp(boot, "tcp://", 6) == 0) return parse_tcp_url(boot, &args->tcp);
  BAGUA_WARN(
      "bootstrap \"%s\" is not supported by bagua_comm_create; accepted: env://, "
      "tcp://HOST:PORT",
      boot);
  return BAGUA_ERR_INVALID_ARG;
}

bagua_status_t bagua__comm_config_resolve(const bagua_comm_config_t *cfg,
                                          bagua__comm_boot_args_t *args, bagua__comm_build_t *b) {
  if (cfg->struct_size < sizeof(bagua_comm_config_t)) {
    BAGUA_WARN(
        "bagua_comm_create: config struct_size %zu is smaller than this library's %zu; "
        "initialise it with BAGUA_COMM_CONFIG_INIT",
        cfg->struct_size, sizeof(bagua_comm_config_t));
    return BAGUA_ERR_INVALID_ARG;
  }
  memset(b, 0, sizeof(*b));
  b->s = BAGUA__COMM_SETTINGS_OF(cfg, cfg->nstreams);
  BAGUA_CHECK(bagua__comm_settings_resolve("bagua_comm_create", &b->s));
  if (b->s.size < 1 || b->s.rank < 0 || b->s.rank >= b->s.size) {
    BAGUA_WARN(
        "bagua_comm_create: rank %d / world size %d is invalid; set RANK in [0, WORLD_SIZE) "
        "and WORLD_SIZE >= 1 (or the config fields)",
        b->s.rank, b->s.size);
    return BAGUA_ERR_INVALID_ARG;
  }
  const char *boot = cfg->bootstrap ? cfg->bootstrap : bagua__param_str(BAGUA_P_BOOTSTRAP);
  return resolve_bootstrap(boot, b->s.job_id, args, b);
}
