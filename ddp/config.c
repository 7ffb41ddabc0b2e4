/*
 * Validation of bagua_ddp_config_t: every name is looked up in a fixed table, every number is
 * range-checked, and every "unset" value is replaced by the BAGUA_* variable of the registry's
 * algorithm group when the environment sets it (bagua-launch exports its [algorithm] section
 * that way), else by the default the header documents. A field the program set wins over the
 * environment: it plays the part of a command-line flag in flag > env > INI > default. A bad
 * field or variable is reported by name together with what it accepts, and nothing is created.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "common/check.h"
#include "common/log.h"
#include "tune.h"
#include "common/params.h"
#include "ddp_internal.h"

/* The algorithms' names, "a, b, ..." (the table's order), into buf, for refusals. */
static const char *algo_names(char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0, n = 0; i < bagua__ddp_nalgorithms && n >= 0 && (size_t)n < len; i++)
    n += snprintf(buf + n, len - (size_t)n, "%s%s", i ? ", " : "", bagua__ddp_algorithms[i]->name);
  return buf;
}

static bagua_status_t bad(const char *field, const char *fmt_value, const char *accepted) {
  BAGUA_WARN("bagua_ddp_create: config.%s = %s is invalid; accepted: %s", field, fmt_value,
             accepted);
  return BAGUA_ERR_INVALID_ARG;
}

static bagua_status_t bad_num(const char *field, double v, const char *accepted) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%g", v);
  return bad(field, buf, accepted);
}

static bagua_status_t bad_str(const char *field, const char *v, const char *accepted) {
  char buf[96];
  snprintf(buf, sizeof(buf), "\"%.80s\"", v);
  return bad(field, buf, accepted);
}

static int has(const bagua__ddp_algo_t *a, unsigned cap) {
  return (a->caps & cap) != 0;
}

/* "why (NAME applies to a, b and c only)": the algorithms that declare `cap`, from the table. */
static const char *only(char *buf, size_t len, const char *lead, const char *what, unsigned cap) {
  int k = 0, n = 0, total = 0;
  for (int i = 0; i < bagua__ddp_nalgorithms; i++) total += has(bagua__ddp_algorithms[i], cap);
  n = snprintf(buf, len, "%s (%s applies to ", lead, what);
  for (int i = 0; i < bagua__ddp_nalgorithms && n > 0 && (size_t)n < len; i++) {
    if (!has(bagua__ddp_algorithms[i], cap)) continue;
    k++;
    n += snprintf(buf + n, len - (size_t)n, "%s%s",
                  k == 1       ? ""
                  : k == total ? " and "
                               : ", ",
                  bagua__ddp_algorithms[i]->name);
  }
  if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, " only)");
  return buf;
}

/*
 * The environment's value of an integer option of the algorithm group for a field the program
 * left unset, or `dflt`. An option that does not apply to the algorithm (`applies` 0) is
 * ignored rather than refused: one launcher configuration serves programs that pick their own
 * algorithm, and BAGUA_COMMUNICATION_INTERVAL must not break a program that runs bytegrad.
 * Values were validated against the registry's bounds, which are the field's own.
 */
static int env_int(bagua__param_id_t id, int applies, int dflt, const char *field) {
  if (!bagua__param_is_set(id)) return dflt;
  const char *env = bagua__param_env_name(id);
  if (!applies) {
    BAGUA_INFO(BAGUA_SUBSYS_ENV,
               "bagua_ddp_create: %s=%lld ignored (config.%s does not apply to this algorithm)",
               env, (long long)bagua__param_int(id), field);
    return dflt;
  }
  int v = (int)bagua__param_int(id);
  BAGUA_INFO(BAGUA_SUBSYS_ENV, "bagua_ddp_create: config.%s = %d from %s", field, v, env);
  return v;
}

/* The algorithm: the program's, else BAGUA_ALGORITHM, else gradient_allreduce. The registry
 * accepts the environment's words in any case, so they are matched without case. */
static bagua_status_t pick_algorithm(const bagua_ddp_config_t *c, bagua__ddp_settings_t *s) {
  if (c->algorithm) {
    if (strcmp(c->algorithm, "auto") == 0) return bagua__ddp_tune_choose_algorithm(s);
    s->algo = bagua__ddp_algorithm(c->algorithm, 0);
    if (!s->algo) {
      char names[256], accepted[320];
      snprintf(accepted, sizeof(accepted),
               "%s, auto (NULL: BAGUA_ALGORITHM, else gradient_allreduce)",
               algo_names(names, sizeof(names)));
      return bad_str("algorithm", c->algorithm, accepted);
    }
    return BAGUA_OK;
  }
  const char *name = bagua__param_str(BAGUA_P_ALGORITHM);
  /* "auto": the advisor picks among BAGUA_AUTO_ALLOW after measuring (ddp/tune/advise.c). */
  if (strcasecmp(name, "auto") == 0) return bagua__ddp_tune_choose_algorithm(s);
  s->algo = bagua__ddp_algorithm(name, 1);
  if (!s->algo) {
    /* Unreachable while the registry's choices and the table agree; say which is wrong. */
    char names[256];
    BAGUA_WARN("bagua_ddp_create: BAGUA_ALGORITHM=\"%.80s\" is invalid; accepted: %s", name,
               algo_names(names, sizeof(names)));
    return BAGUA_ERR_INVALID_ARG;
  }
  if (bagua__param_is_set(BAGUA_P_ALGORITHM))
    BAGUA_INFO(BAGUA_SUBSYS_ENV, "bagua_ddp_create: config.algorithm = %s from BAGUA_ALGORITHM",
               s->algo->name);
  return BAGUA_OK;
}

static bagua_status_t check_device(const bagua_ddp_config_t *c, bagua__ddp_settings_t *s) {
  s->dev = &bagua__ddp_dev_cpu;
  if (c->device && strcmp(c->device, "cuda") == 0) {
    s->dev = bagua__ddp_dev_cuda();
    if (!s->dev) {
      BAGUA_WARN(
          "bagua_ddp_create: config.device = \"cuda\" is not supported by this build of "
          "libbagua (it was built without CUDA and NCCL; see docs/gpu.md); accepted "
          "here: \"cpu\" or NULL");
      return BAGUA_ERR_NOT_SUPPORTED;
    }
  } else if (c->device && strcmp(c->device, "cpu") != 0) {
    return bad_str("device", c->device, "\"cpu\" (NULL) or \"cuda\"");
  }
  if (c->cuda_device < -1)
    return bad_num("cuda_device", c->cuda_device,
                   "-1 (the local rank modulo the visible devices) or a device index >= 0");
  if (s->dev == &bagua__ddp_dev_cpu && (c->cuda_device != -1 || c->cuda_stream))
    return bad_str("device", c->device ? c->device : "NULL",
                   "\"cuda\" when cuda_device or cuda_stream is set");
  s->cuda_device = c->cuda_device;
  s->cuda_stream = c->cuda_stream;
  return BAGUA_OK;
}

static bagua_status_t check_optimizer(const bagua_ddp_config_t *c, bagua__ddp_settings_t *s) {
  /* An algorithm with its own optimizer (qadam) takes no other. */
  int qadam = has(s->algo, BAGUA__ALGO_OWN_OPTIMIZER);
  if (!c->optimizer) {
    s->optimizer = qadam ? BAGUA__OPT_QADAM : BAGUA__OPT_SGD;
  } else if (strcmp(c->optimizer, "sgd") == 0 && !qadam) {
    s->optimizer = BAGUA__OPT_SGD;
  } else if (strcmp(c->optimizer, "adam") == 0 && !qadam) {
    s->optimizer = BAGUA__OPT_ADAM;
  } else if (strcmp(c->optimizer, "adamw") == 0 && !qadam) {
    s->optimizer = BAGUA__OPT_ADAMW;
  } else if (strcmp(c->optimizer, "none") == 0 && !qadam) {
    s->optimizer = BAGUA__OPT_NONE;
  } else if (strcmp(c->optimizer, "qadam") == 0 && qadam) {
    s->optimizer = BAGUA__OPT_QADAM;
  } else {
    return bad_str("optimizer", c->optimizer,
                   qadam ? "\"qadam\" or NULL (the qadam algorithm brings its own optimizer)"
                         : "\"sgd\", \"adam\", \"adamw\", \"none\" or NULL (sgd); \"qadam\" "
                           "only with algorithm \"qadam\"");
  }
  int adam_like = s->optimizer != BAGUA__OPT_SGD;
  s->lr = c->lr < 0 ? (adam_like ? 1e-3 : 0.01) : c->lr;
  if (!isfinite(s->lr)) return bad_num("lr", c->lr, "a finite value >= 0 (< 0 for the default)");
  s->weight_decay =
      c->weight_decay < 0 ? (s->optimizer == BAGUA__OPT_ADAMW ? 0.01 : 0.0) : c->weight_decay;
  if (!isfinite(s->weight_decay))
    return bad_num("weight_decay", c->weight_decay, "a finite value >= 0 (< 0 for the default)");
  s->momentum = c->momentum;
  s->dampening = c->dampening;
  s->nesterov = c->nesterov;
  s->beta1 = c->beta1;
  s->beta2 = c->beta2;
  s->eps = c->eps;
  if (!adam_like) {
    if (!(c->momentum >= 0 && c->momentum < 1e6))
      return bad_num("momentum", c->momentum, "a value >= 0 (sgd)");
    if (!(c->dampening >= 0 && c->dampening <= 1))
      return bad_num("dampening", c->dampening, "0 <= dampening <= 1 (sgd)");
    if (c->nesterov != 0 && c->nesterov != 1)
      return bad_num("nesterov", c->nesterov, "0 or 1 (sgd)");
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
      return bad_num("nesterov", c->nesterov,
                     "1 only with momentum > 0 and dampening = 0 (as torch.optim.SGD)");
  } else {
    if (!(c->beta1 >= 0 && c->beta1 < 1)) return bad_num("beta1", c->beta1, "0 <= beta1 < 1");
    if (!(c->beta2 >= 0 && c->beta2 < 1)) return bad_num("beta2", c->beta2, "0 <= beta2 < 1");
    if (!(c->eps > 0 && isfinite(c->eps))) return bad_num("eps", c->eps, "a finite value > 0");
  }
  return BAGUA_OK;
}

bagua_status_t bagua__ddp_settings(const bagua_ddp_config_t *c, bagua__ddp_settings_t *s) {
  memset(s, 0, sizeof(*s));
  /* `rank` came after the other fields: a config from a header without it is read as -1. */
  const size_t before_rank = offsetof(bagua_ddp_config_t, rank);
  if (c->struct_size < before_rank) {
    BAGUA_WARN(
        "bagua_ddp_create: config.struct_size = %zu is invalid; accepted: >= %zu "
        "(initialise the config with BAGUA_DDP_CONFIG_INIT)",
        c->struct_size, before_rank);
    return BAGUA_ERR_INVALID_ARG;
  }
  int cfg_rank = c->struct_size >= before_rank + sizeof(c->rank) ? c->rank : -1;
  /* A BAGUA_* variable with a bad value refuses the context, as it refuses a communicator or
   * a launch: the warning names the variable, its value and what is accepted. */
  BAGUA_CHECK(bagua__params_check());
  BAGUA_CHECK(pick_algorithm(c, s));
  const bagua__ddp_algo_t *a = s->algo;
  int ef_algo = has(a, BAGUA__ALGO_ERROR_FEEDBACK), warmup_algo = has(a, BAGUA__ALGO_WARMUP);
  int background = has(a, BAGUA__ALGO_BACKGROUND), peers = has(a, BAGUA__ALGO_PEERS);

  if (c->bucket_bytes < 0)
    return bad_num("bucket_bytes", (double)c->bucket_bytes,
                   "a byte count >= 1, or 0 for BAGUA_BUCKET_SIZE");
  s->bucket_bytes =
      c->bucket_bytes > 0 ? (size_t)c->bucket_bytes : (size_t)bagua__param_int(BAGUA_P_BUCKET_SIZE);

  if (c->hierarchical < -1 || c->hierarchical > 1)
    return bad_num("hierarchical", c->hierarchical,
                   "-1 (BAGUA_HIERARCHICAL, else the algorithm's default), 0 or 1");
  int hier = c->hierarchical;
  if (hier < 0) hier = env_int(BAGUA_P_HIERARCHICAL, !background, -1, "hierarchical");
  s->hierarchical = hier < 0 ? a->hierarchical_default : hier;
  if (background && s->hierarchical)
    return bad_num("hierarchical", c->hierarchical,
                   "-1 or 0 for an algorithm that averages in the background, as async (its "
                   "averaging runs among all ranks)");

  const char *pm = c->peer_mode;
  /* The program's words are exact; the environment's, like every registry word, any case. */
  int (*same)(const char *, const char *) = strcmp;
  if (!pm && bagua__param_is_set(BAGUA_P_PEER_SELECTION_MODE)) {
    const char *env = bagua__param_str(BAGUA_P_PEER_SELECTION_MODE);
    if (has(a, BAGUA__ALGO_PEER_CHOICE)) {
      pm = env;
      same = strcasecmp;
      BAGUA_INFO(BAGUA_SUBSYS_ENV,
                 "bagua_ddp_create: config.peer_mode = %s from BAGUA_PEER_SELECTION_MODE", pm);
    } else {
      char why[192];
      BAGUA_INFO(BAGUA_SUBSYS_ENV, "bagua_ddp_create: BAGUA_PEER_SELECTION_MODE=%s ignored%s", env,
                 only(why, sizeof(why), "", "config.peer_mode", BAGUA__ALGO_PEER_CHOICE));
    }
  }
  s->peer_mode = BAGUA__PEER_ALL;
  if (has(a, BAGUA__ALGO_PEER_CHOICE)) {
    if (!pm) pm = "all";
    if (same(pm, "all") == 0)
      s->peer_mode = BAGUA__PEER_ALL;
    else if (same(pm, "shift_one") == 0)
      s->peer_mode = BAGUA__PEER_SHIFT_ONE;
    else if (same(pm, "ring") == 0)
      s->peer_mode = BAGUA__PEER_RING;
    else
      return bad_str("peer_mode", pm, "\"all\" (NULL), \"shift_one\" or \"ring\"");
  } else if (peers) {
    if (pm && strcmp(pm, "ring") != 0)
      return bad_str("peer_mode", pm, "\"ring\" or NULL (this algorithm always uses the ring)");
    s->peer_mode = BAGUA__PEER_RING;
  } else if (pm) {
    char why[192];
    return bad_str("peer_mode", pm,
                   only(why, sizeof(why), "NULL", "peer_mode", BAGUA__ALGO_PEER_CHOICE));
  }

  if (c->comm_interval == 0 || c->comm_interval < -1)
    return bad_num("comm_interval", c->comm_interval,
                   "an integer >= 1, or -1 for BAGUA_COMMUNICATION_INTERVAL (else 1)");
  int interval = c->comm_interval;
  if (interval < 0) interval = env_int(BAGUA_P_COMMUNICATION_INTERVAL, peers, 1, "comm_interval");
  char why[192];
  if (interval != 1 && !peers)
    return bad_num("comm_interval", c->comm_interval,
                   only(why, sizeof(why), "1 or -1", "comm_interval", BAGUA__ALGO_PEERS));
  s->comm_interval = interval;

  if (c->error_feedback < -1 || c->error_feedback > 1)
    return bad_num("error_feedback", c->error_feedback,
                   "0 or 1, or -1 for BAGUA_ERROR_FEEDBACK (else 1 for powersgd, 0 for the "
                   "others)");
  int ef = c->error_feedback;
  if (ef < 0)
    ef = env_int(BAGUA_P_ERROR_FEEDBACK, ef_algo, a->default_error_feedback, "error_feedback");
  if (ef && !ef_algo)
    return bad_num("error_feedback", c->error_feedback,
                   only(why, sizeof(why), "0 or -1", "error feedback", BAGUA__ALGO_ERROR_FEEDBACK));
  s->error_feedback = ef;

  if (c->warmup_steps < -1)
    return bad_num("warmup_steps", c->warmup_steps,
                   "an integer >= 0, or -1 for BAGUA_WARMUP_STEPS (else the default)");
  int warmup = c->warmup_steps;
  if (warmup < 0) warmup = env_int(BAGUA_P_WARMUP_STEPS, warmup_algo, -1, "warmup_steps");
  if (warmup > 0 && !warmup_algo)
    return bad_num("warmup_steps", c->warmup_steps,
                   only(why, sizeof(why), "-1 or 0", "warm-up", BAGUA__ALGO_WARMUP));
  s->warmup_steps = warmup >= 0 ? warmup : a->default_warmup_steps;

  if (c->sync_interval_ms != -1 && (c->sync_interval_ms < 1 || c->sync_interval_ms > 3600 * 1000))
    return bad_num("sync_interval_ms", c->sync_interval_ms,
                   "1 .. 3600000 milliseconds, or -1 for BAGUA_SYNC_INTERVAL_MS (else 500)");
  s->sync_interval_ms = c->sync_interval_ms > 0 ? c->sync_interval_ms
                                                : env_int(BAGUA_P_SYNC_INTERVAL_MS, background, 500,
                                                          "sync_interval_ms");

  /* The bounds are the registry's, so the environment's value needs no second check. */
  int low_rank = has(a, BAGUA__ALGO_LOW_RANK);
  int64_t rank_lo, rank_hi;
  bagua__param_bounds(BAGUA_P_POWERSGD_RANK, &rank_lo, &rank_hi);
  if (cfg_rank != -1 && (cfg_rank < rank_lo || cfg_rank > rank_hi)) {
    char acc[96];
    snprintf(acc, sizeof(acc), "%lld .. %lld, or -1 for BAGUA_POWERSGD_RANK (else %lld)",
             (long long)rank_lo, (long long)rank_hi,
             (long long)bagua__param_int_default(BAGUA_P_POWERSGD_RANK));
    return bad_num("rank", cfg_rank, acc);
  }
  if (cfg_rank != -1 && !low_rank)
    return bad_num("rank", cfg_rank, only(why, sizeof(why), "-1", "rank", BAGUA__ALGO_LOW_RANK));
  int rank = cfg_rank;
  if (rank < 0)
    rank = env_int(BAGUA_P_POWERSGD_RANK, low_rank,
                   (int)bagua__param_int_default(BAGUA_P_POWERSGD_RANK), "rank");
  s->rank = low_rank ? rank : 0;

  /* -1 (auto) is resolved by bagua_ddp_create(), which knows the node's ranks. */
  s->overlap = (int)bagua__param_int(BAGUA_P_OVERLAP);

  BAGUA_CHECK(check_device(c, s));
  return check_optimizer(c, s);
}

void bagua_ddp_config_init(bagua_ddp_config_t *cfg) {
  if (!cfg) return;
  *cfg = (bagua_ddp_config_t)BAGUA_DDP_CONFIG_INIT;
}

const char *bagua_ddp_algorithm(const bagua_ddp_t *ddp) {
  return ddp && ddp->s.algo ? ddp->s.algo->name : NULL;
}
