/*
 * Configuration of a world communicator: the fields of bagua_comm_config_t (and of the elastic
 * config, through bagua__comm_settings_resolve) that the caller left unset take the BAGUA_*
 * parameters, the fields it set are checked against what the parameter registry accepts, and
 * the bootstrap URL (env://, tcp://HOST:PORT, etcd://HOST:PORT) becomes a bootstrap function
 * and its argument.
 *
 * Bounds come from the registry's own description (bagua__param_check_int), never from numbers
 * written again here, so that a config field and its environment variable accept the same.
 */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "communicator.h"
#include "common/check.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/validate.h"

/* BAGUA_TRANSPORT as a bagua_transport_kind_t. The registry admits only these three words and
 * hands them over in their canonical (lower-case) spelling, whatever case the variable used. */
static int transport_param(void) {
  const char *t = bagua__param_str(BAGUA_P_TRANSPORT);
  return strcmp(t, "tcp") == 0   ? BAGUA_TRANSPORT_TCP
         : strcmp(t, "shm") == 0 ? BAGUA_TRANSPORT_SHM
                                 : BAGUA_TRANSPORT_AUTO;
}

bagua_status_t bagua__comm_config_int(const char *who, const char *field, bagua__param_id_t id,
                                      int64_t value) {
  char err[256];
  if (value == BAGUA__CONFIG_UNSET ||
      bagua__param_check_int(id, field, value, err, sizeof(err)) == BAGUA_OK)
    return BAGUA_OK;
  int64_t lo = 0;
  bagua__param_bounds(id, &lo, NULL);
  /* -1 is always accepted; say so where the variable's own bounds do not already. */
  BAGUA_WARN("%s: %s%s", who, err, lo > BAGUA__CONFIG_UNSET ? ", or -1 to use the variable" : "");
  return BAGUA_ERR_INVALID_ARG;
}

/*
 * The job id names the job's etcd keys (/bagua/<job>/...) and is hashed into every handshake.
 * The tools refuse an id outside common/validate.h's rule; libbagua applies the same rule to
 * the id it is given directly, before any key is built or any connection made, because an id
 * such as "a/../b" would read and write another job's keys.
 */
static bagua_status_t check_job_id(const char *who, const char *from, const char *id) {
  char err[256];
  if (bagua__check_id(id, err, sizeof(err)) == BAGUA_OK) return BAGUA_OK;
  BAGUA_WARN("%s: job id %s=\"%.*s\" is invalid: %s", who, from, BAGUA_ID_MAX_LEN + 16, id, err);
  return BAGUA_ERR_INVALID_ARG;
}

bagua_status_t bagua__comm_settings_resolve(const char *who, bagua__comm_settings_t *s) {
  BAGUA_CHECK(bagua__params_check());
  /* Every field that was set is checked before any is filled in, so that a caller learns of
   * its own mistake rather than of one the environment's value would have hidden. */
  BAGUA_CHECK(bagua__comm_config_int(who, "config.rank", BAGUA_P_RANK, s->rank));
  BAGUA_CHECK(bagua__comm_config_int(who, "config.size", BAGUA_P_WORLD_SIZE, s->size));
  BAGUA_CHECK(
      bagua__comm_config_int(who, "config.timeout_ms", BAGUA_P_COMM_TIMEOUT_MS, s->timeout_ms));
  BAGUA_CHECK(bagua__comm_config_int(who, "config.connect_timeout_ms", BAGUA_P_CONNECT_TIMEOUT_MS,
                                     s->connect_timeout_ms));
  BAGUA_CHECK(bagua__comm_config_int(who, "config.nstreams", BAGUA_P_NET_NSTREAMS, s->nstreams));
  if (s->transport != BAGUA__CONFIG_UNSET &&
      (s->transport < BAGUA_TRANSPORT_AUTO || s->transport > BAGUA_TRANSPORT_SHM)) {
    BAGUA_WARN(
        "%s: config.transport %d is invalid; accepted: 0 auto, 1 tcp, 2 shm, or -1 to use "
        "BAGUA_TRANSPORT",
        who, s->transport);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (s->job_id) {
    BAGUA_CHECK(check_job_id(who, "config.job_id", s->job_id));
  } else {
    /* An empty variable is no value, as for bagua-launch and bagua-agent. */
    s->job_id = bagua__param_str(BAGUA_P_JOB_ID);
    if (!s->job_id[0]) s->job_id = bagua__param_str_default(BAGUA_P_JOB_ID);
    BAGUA_CHECK(check_job_id(who, bagua__param_env_name(BAGUA_P_JOB_ID), s->job_id));
  }
  if (s->rank == BAGUA__CONFIG_UNSET) s->rank = (int)bagua__param_int(BAGUA_P_RANK);
  if (s->size == BAGUA__CONFIG_UNSET) s->size = (int)bagua__param_int(BAGUA_P_WORLD_SIZE);
  if (!s->node_id) s->node_id = bagua__param_str(BAGUA_P_NODE_ID);
  if (s->transport == BAGUA__CONFIG_UNSET) s->transport = transport_param();
  if (s->timeout_ms == BAGUA__CONFIG_UNSET)
    s->timeout_ms = (int)bagua__param_int(BAGUA_P_COMM_TIMEOUT_MS);
  if (s->connect_timeout_ms == BAGUA__CONFIG_UNSET)
    s->connect_timeout_ms = (int)bagua__param_int(BAGUA_P_CONNECT_TIMEOUT_MS);
  s->nstreams_chosen =
      s->nstreams != BAGUA__CONFIG_UNSET || bagua__param_is_set(BAGUA_P_NET_NSTREAMS);
  if (s->nstreams == BAGUA__CONFIG_UNSET) s->nstreams = (int)bagua__param_int(BAGUA_P_NET_NSTREAMS);
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
