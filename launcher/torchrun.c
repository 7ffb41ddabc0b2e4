/*
 * torchrun's options on bagua-launch (torchrun.h). The table below is the one place that says
 * what each of them does here; docs/launcher.md's torchrun table lists the same rows.
 */
#include "torchrun.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bagua/params.h"
#include "common/validate.h"

typedef enum {
  TR_BACKEND,
  TR_CONF,
  TR_NODE_RANK,
  TR_MASTER_ADDR,
  TR_MASTER_PORT,
  TR_MONITOR,
  TR_START_METHOD,
  TR_ROLE,
  TR_REDIRECTS,
  TR_TEE,
  TR_RUN_PATH,
  TR_REFUSED
} tr_kind_t;

static const struct {
  const char *flag;
  tr_kind_t kind;
  int takes_value;
  const char *hint; /* TR_REFUSED: why, and what to use instead */
} k_tr[] = {
    {"--rdzv-backend", TR_BACKEND, 1, NULL},
    {"--rdzv-conf", TR_CONF, 1, NULL},
    {"--node-rank", TR_NODE_RANK, 1, NULL},
    {"--master-addr", TR_MASTER_ADDR, 1, NULL},
    {"--master-port", TR_MASTER_PORT, 1, NULL},
    {"--monitor-interval", TR_MONITOR, 1, NULL},
    {"--start-method", TR_START_METHOD, 1, NULL},
    {"--role", TR_ROLE, 1, NULL},
    {"--redirects", TR_REDIRECTS, 1, NULL},
    {"-r", TR_REDIRECTS, 1, NULL},
    {"--tee", TR_TEE, 1, NULL},
    {"-t", TR_TEE, 1, NULL},
    {"--run-path", TR_RUN_PATH, 0, NULL},
    /* torch 2.2 and later. */
    {"--local-ranks-filter", TR_REFUSED, 1,
     "every rank's lines reach the console, each prefixed [node/rank]; accepted: leave it out, "
     "with --log-dir DIR for one file per rank"},
    {"--logs-specs", TR_REFUSED, 1,
     "log files are bagua-launch's own (--log-dir DIR: one file per rank); accepted: --log-dir "
     "DIR"},
};
#define NTR ((int)(sizeof(k_tr) / sizeof(k_tr[0])))

#define BACKENDS "static|c10d|etcd|etcd-v2"
#define CONF_KEYS                                                                 \
  "join_timeout, timeout, last_call_timeout, read_timeout, keep_alive_interval, " \
  "keep_alive_max_attempt (seconds), is_host and rank (no effect)"
/* torch's keep-alive defaults, for a --rdzv-conf that gives only one of the two. */
#define KEEP_ALIVE_INTERVAL_S 5.0
#define KEEP_ALIVE_MAX_ATTEMPT 3.0
/* --monitor-interval is checked as torchrun would take it, though it sets nothing here. */
#define MONITOR_MAX_S 86400.0

int bagua__launch_torchrun_find(const char *flag, int *takes_value) {
  for (int i = 0; i < NTR; i++)
    if (strcmp(k_tr[i].flag, flag) == 0) {
      if (takes_value) *takes_value = k_tr[i].takes_value;
      return i;
    }
  return -1;
}

const char *bagua__launch_torchrun_flag(int i) {
  return i >= 0 && i < NTR ? k_tr[i].flag : NULL;
}

/* A finite number (torch takes these as floats); -1 when `text` is not one. */
static int parse_number(const char *text, double *out) {
  char *end;
  if (!*text || isspace((unsigned char)*text)) return -1;
  double d = strtod(text, &end);
  if (*end || !isfinite(d)) return -1;
  *out = d;
  return 0;
}

/* Sets setting `s` of the layer from --rdzv-conf's `key`, as if its own flag gave `text`. */
static int conf_set(bagua__launch_layer_t *l, bagua__launch_setting_t s, const char *key,
                    const char *given, const char *text, char *err, size_t errlen) {
  char what[LAUNCH_ERR_LEN];
  const bagua__launch_desc_t *d = bagua__launch_desc(s);
  if (bagua__launch_parse_value(s, text, &l->v[s], what, sizeof(what)) != 0) {
    snprintf(err, errlen, "bagua-launch: --rdzv-conf %s=%s (%s %s): %s", key, given, d->flag, text,
             what);
    return LAUNCH_EXIT_USAGE;
  }
  bagua__launch_origin_set(&l->v[s].origin, LO_FLAG, "%s (torchrun's --rdzv-conf %s)", d->flag,
                           key);
  return 0;
}

/* --rdzv-conf KEY=VALUE,...: torch's rendezvous settings (seconds) as ours. */
static int apply_conf(const char *text, bagua__launch_layer_t *l, char *err, size_t errlen) {
  double interval = -1, attempts = -1;
  char *copy = strdup(text), *save = NULL;
  int rc = 0;
  if (!copy) {
    snprintf(err, errlen, "bagua-launch: out of memory");
    return LAUNCH_EXIT_USAGE;
  }
  for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    while (isspace((unsigned char)*item)) item++;
    if (!*item) continue;
    if (!eq || eq == item) {
      snprintf(err, errlen,
               "bagua-launch: --rdzv-conf \"%s\": \"%.100s\" is not KEY=VALUE; accepted keys: "
               "%s",
               text, item, CONF_KEYS);
      rc = LAUNCH_EXIT_USAGE;
      break;
    }
    *eq = '\0';
    char *key = item, *value = eq + 1;
    for (char *e = eq - 1; e >= key && isspace((unsigned char)*e); e--) *e = '\0';
    while (isspace((unsigned char)*value)) value++;
    for (char *e = value + strlen(value); e > value && isspace((unsigned char)e[-1]); e--)
      e[-1] = '\0';
    if (strcmp(key, "is_host") == 0 || strcmp(key, "rank") == 0) {
      /* Which node hosts torch's store, and the static backend's node rank: the rendezvous
       * here decides both (the node at the endpoint's address hosts it; ranks follow age). */
      continue;
    }
    int known = strcmp(key, "join_timeout") == 0 || strcmp(key, "timeout") == 0 ||
                strcmp(key, "last_call_timeout") == 0 || strcmp(key, "read_timeout") == 0 ||
                strcmp(key, "keep_alive_interval") == 0 ||
                strcmp(key, "keep_alive_max_attempt") == 0;
    if (!known) {
      snprintf(err, errlen,
               "bagua-launch: --rdzv-conf %.100s: no counterpart here; accepted keys: %s", key,
               CONF_KEYS);
      rc = LAUNCH_EXIT_USAGE;
      break;
    }
    double sec;
    if (parse_number(value, &sec) != 0 || sec < 0) {
      snprintf(err, errlen,
               "bagua-launch: --rdzv-conf %s=%.100s is not a number of seconds; accepted: a "
               "number >= 0",
               key, value);
      rc = LAUNCH_EXIT_USAGE;
      break;
    }
    char num[32];
    if (strcmp(key, "join_timeout") == 0 || strcmp(key, "timeout") == 0) {
      snprintf(num, sizeof(num), "%.0f", ceil(sec));
      rc = conf_set(l, LS_RDZV_TIMEOUT, key, value, num, err, errlen);
    } else if (strcmp(key, "last_call_timeout") == 0) {
      snprintf(num, sizeof(num), "%.0f", round(sec * 1000));
      rc = conf_set(l, LS_LAST_CALL_MS, key, value, num, err, errlen);
    } else if (strcmp(key, "read_timeout") == 0) {
      snprintf(num, sizeof(num), "%.0f", round(sec * 1000));
      rc = conf_set(l, LS_ETCD_TIMEOUT_MS, key, value, num, err, errlen);
    } else if (strcmp(key, "keep_alive_interval") == 0) {
      interval = sec;
    } else {
      attempts = sec;
    }
  }
  if (!rc && (interval >= 0 || attempts >= 0)) {
    /* torch declares a node dead after so many missed heartbeats; an etcd lease of that
     * length does the same for a bagua-agent. */
    char num[32], given[64];
    double ttl = ceil((interval >= 0 ? interval : KEEP_ALIVE_INTERVAL_S) *
                      (attempts >= 0 ? attempts : KEEP_ALIVE_MAX_ATTEMPT));
    snprintf(num, sizeof(num), "%.0f", fmin(ttl, 1e15));
    snprintf(given, sizeof(given), "%s s", num);
    rc = conf_set(l, LS_LEASE_TTL, "keep_alive_interval x keep_alive_max_attempt", given, num, err,
                  errlen);
  }
  free(copy);
  return rc;
}

int bagua__launch_torchrun_apply(int i, const char *spelled, const char *value,
                                 bagua__launch_layer_t *l, char *err, size_t errlen) {
  char what[LAUNCH_ERR_LEN];
  bagua__launch_torchrun_t *t = &l->torchrun;
  int64_t n;
  double d;
  switch (k_tr[i].kind) {
    case TR_BACKEND: {
      char word[sizeof(t->backend)];
      if (bagua__choice_parse(value, BACKENDS, word, sizeof(word), what, sizeof(what)) !=
          BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s: %s", spelled, what);
        return LAUNCH_EXIT_USAGE;
      }
      snprintf(t->backend, sizeof(t->backend), "%s", word);
      bagua__launch_origin_set(&t->backend_origin, LO_FLAG, "%s %s", spelled, word);
      return 0;
    }
    case TR_CONF:
      return apply_conf(value, l, err, errlen);
    case TR_NODE_RANK:
      if (bagua__check_int(value, 0, LAUNCH_MAX_NODES - 1, &n, what, sizeof(what)) != BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s: %s", spelled, what);
        return LAUNCH_EXIT_USAGE;
      }
      t->node_rank = (int)n;
      t->node_rank_set = 1;
      return 0;
    case TR_MASTER_ADDR:
      if (strlen(value) >= sizeof(t->master_addr) ||
          bagua__check_host(value, what, sizeof(what)) != BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s: %s", spelled,
                 strlen(value) >= sizeof(t->master_addr)
                     ? "too long; accepted: " BAGUA_HOST_ACCEPTED
                     : what);
        return LAUNCH_EXIT_USAGE;
      }
      snprintf(t->master_addr, sizeof(t->master_addr), "%s", value);
      return 0;
    case TR_MASTER_PORT:
      if (bagua__check_int(value, 1, 65535, &n, what, sizeof(what)) != BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s: %s", spelled, what);
        return LAUNCH_EXIT_USAGE;
      }
      t->master_port = (int)n;
      return 0;
    case TR_MONITOR:
      /* The agent watches its workers continuously (a signalfd): nothing to poll. */
      if (parse_number(value, &d) != 0 || d <= 0 || d > MONITOR_MAX_S) {
        snprintf(err, errlen,
                 "bagua-launch: %s \"%s\": accepted: seconds, a number above 0 and at most %.0f "
                 "(no effect: the agent watches its workers continuously)",
                 spelled, value, MONITOR_MAX_S);
        return LAUNCH_EXIT_USAGE;
      }
      return 0;
    case TR_START_METHOD:
      /* Every worker is a fresh process (fork and exec), whatever torch would have done. */
      if (bagua__choice_parse(value, "spawn|fork|forkserver", NULL, 0, what, sizeof(what)) !=
          BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s: %s (no effect: every worker is exec'ed)", spelled,
                 what);
        return LAUNCH_EXIT_USAGE;
      }
      return 0;
    case TR_ROLE: {
      if (bagua__check_id(value, what, sizeof(what)) != BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s: %s", spelled, what);
        return LAUNCH_EXIT_USAGE;
      }
      /* The agents read BAGUA_ROLE (the default of their --role) and give each worker
       * ROLE_NAME; exported like -x, so that remote agents get it too. */
      size_t len = strlen("BAGUA_ROLE=") + strlen(value) + 1;
      char *spec = malloc(len);
      if (!spec) {
        snprintf(err, errlen, "bagua-launch: out of memory");
        return LAUNCH_EXIT_USAGE;
      }
      snprintf(spec, len, "BAGUA_ROLE=%s", value);
      int rc = bagua__launch_add_export(l, spec, err, errlen);
      free(spec);
      if (rc != 0) return rc;
      for (int k = 0; k < l->nenv; k++)
        if (strcmp(l->env[k].name, "BAGUA_ROLE") == 0)
          bagua__launch_origin_set(&l->env[k].origin, LO_FLAG, "%s (torchrun's ROLE_NAME)",
                                   spelled);
      return 0;
    }
    case TR_REDIRECTS:
    case TR_TEE: {
      int nonzero = 0;
      if (bagua__std_mask(value, -1, NULL, &nonzero, what, sizeof(what)) != BAGUA_OK) {
        snprintf(err, errlen, "bagua-launch: %s %s", spelled, what);
        return LAUNCH_EXIT_USAGE;
      }
      if (k_tr[i].kind == TR_TEE) {
        t->tee |= nonzero;
        return 0;
      }
      t->redirects = nonzero;
      if (!nonzero) return 0;
      /* The agents read BAGUA_REDIRECTS: those streams go to the per-rank files only. */
      char spec[160];
      snprintf(spec, sizeof(spec), "BAGUA_REDIRECTS=%s", value);
      int rc = bagua__launch_add_export(l, spec, err, errlen);
      if (rc != 0) return rc;
      for (int k = 0; k < l->nenv; k++)
        if (strcmp(l->env[k].name, "BAGUA_REDIRECTS") == 0)
          bagua__launch_origin_set(&l->env[k].origin, LO_FLAG, "%s", spelled);
      return 0;
    }
    case TR_RUN_PATH:
      t->run_path = 1;
      return 0;
    case TR_REFUSED:
      snprintf(err, errlen, "bagua-launch: %s is not a bagua-launch option: %s", spelled,
               k_tr[i].hint);
      return LAUNCH_EXIT_USAGE;
  }
  return 0;
}

/* NVIDIA GPUs of this machine that CUDA would show this process. */
static int gpu_count(void) {
  int n = 0;
  DIR *dir = opendir("/proc/driver/nvidia/gpus");
  if (dir) {
    for (struct dirent *e = readdir(dir); e; e = readdir(dir))
      if (e->d_name[0] != '.') n++;
    closedir(dir);
  }
  const char *visible = bagua_param_get("CUDA_VISIBLE_DEVICES");
  if (visible) {
    /* CUDA shows the listed devices up to the first that is not one ("-1" hides them all, as
     * does an empty list). */
    int listed = 0;
    for (const char *p = visible; *p && *p != '-';) {
      listed++;
      const char *comma = strchr(p, ',');
      if (!comma) break;
      p = comma + 1;
    }
    if (listed < n) n = listed;
  }
  return n;
}

int bagua__launch_nproc_word(const char *text, char *out, size_t outlen, char *err, size_t errlen) {
  long n;
  if (strcmp(text, "cpu") == 0) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
  } else if (strcmp(text, "gpu") == 0) {
    n = gpu_count();
    if (n == 0) {
      snprintf(err, errlen,
               "gpu: this machine shows no GPU (/proc/driver/nvidia/gpus, CUDA_VISIBLE_DEVICES); "
               "accepted: a number, cpu or auto");
      return -1;
    }
  } else if (strcmp(text, "auto") == 0) {
    n = gpu_count();
    if (n == 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  } else {
    return 1;
  }
  if (n < 1) n = 1;
  snprintf(out, outlen, "%ld", n);
  return 0;
}

static int is_static(const char *backend) {
  return strcmp(backend, "static") == 0 || strcmp(backend, "c10d") == 0;
}

int bagua__launch_torchrun_resolve(const bagua__launch_layer_t *cli, bagua__launch_config_t *cfg,
                                   char *err, size_t errlen) {
  const bagua__launch_torchrun_t *t = &cli->torchrun;
  const bagua__launch_value_t *nn = &cfg->v[LS_NNODES];
  bagua__launch_value_t *ep = &cfg->v[LS_ENDPOINT];
  if (t->node_rank_set && t->node_rank >= nn->i2) {
    snprintf(err, errlen,
             "bagua-launch: --node-rank %d is not a node of nnodes %s (%s); accepted: 0 to %lld",
             t->node_rank, nn->s, nn->origin.text, (long long)nn->i2 - 1);
    return LAUNCH_EXIT_USAGE;
  }
  if (t->node_rank_set && cfg->nhosts) {
    snprintf(err, errlen,
             "bagua-launch: --node-rank %d names the place of one node, and --hosts starts %d; "
             "accepted: --node-rank on a launch of one node (torchrun's static form, one "
             "command per node), or --hosts without it (the hosts take ranks in their order)",
             t->node_rank, cfg->nhosts);
    return LAUNCH_EXIT_USAGE;
  }
  cfg->node_rank_set = t->node_rank_set;
  cfg->node_rank = t->node_rank;
  if (t->redirects && !cfg->v[LS_LOG_DIR].s[0]) {
    snprintf(err, errlen,
             "bagua-launch: --redirects: the redirected streams go to the per-rank files of the "
             "log directory; accepted: --log-dir DIR as well");
    return LAUNCH_EXIT_USAGE;
  }
  if (t->tee && !cfg->v[LS_LOG_DIR].s[0]) {
    snprintf(err, errlen,
             "bagua-launch: --tee: the per-rank files go to the log directory; accepted: "
             "--log-dir DIR as well (every rank's output then reaches the console and DIR)");
    return LAUNCH_EXIT_USAGE;
  }
  if (t->run_path && cli->module) {
    snprintf(err, errlen,
             "bagua-launch: --run-path runs a script by its path and -m runs a module; "
             "accepted: one of them");
    return LAUNCH_EXIT_USAGE;
  }
  /* torchrun's default backend is static, whose endpoint is --master-addr:--master-port (or
   * --rdzv-endpoint), and whose ranks --node-rank gives: any of those asks for it. */
  const char *backend = t->backend[0]                                               ? t->backend
                        : (t->master_addr[0] || t->master_port || t->node_rank_set) ? "static"
                                                                                    : "";
  if (!backend[0] && !cli->standalone && nn->i2 == 1 && !cfg->nhosts && ep->s[0] &&
      ep->origin.kind == LO_FLAG)
    cfg->rdzv_fallback_private = 1; /* an etcd user's endpoint, or torchrun's unused one */
  if (cli->standalone || !backend[0]) return 0;
  if (!cfg->nhosts && cfg->v[LS_NODE_ID].origin.kind == LO_DEFAULT) cfg->anonymous_node = 1;
  if (cfg->job_id_generated && (!is_static(backend) || nn->i2 > 1) && !cfg->nhosts) {
    /* Nodes started one by one share the etcd and must share the id: torchrun's default. */
    free(cfg->v[LS_JOB_ID].s);
    if (!(cfg->v[LS_JOB_ID].s = strdup("none"))) {
      snprintf(err, errlen, "bagua-launch: out of memory");
      return LAUNCH_EXIT_USAGE;
    }
    cfg->job_id_generated = 0;
    bagua__launch_origin_set(&cfg->v[LS_JOB_ID].origin, LO_DEFAULT,
                             "default with --rdzv-backend (torchrun's --rdzv-id none)");
  }
  if (!is_static(backend)) {
    if (!ep->s[0]) {
      snprintf(err, errlen,
               "bagua-launch: %s needs the etcd's HOST:PORT; accepted: --rdzv-endpoint "
               "HOST:PORT, or --standalone (a private etcd)",
               t->backend_origin.text);
      return LAUNCH_EXIT_USAGE;
    }
    return 0;
  }
  /* static or c10d: torch's store that one node hosts. Every node started from here (one
   * node, or --hosts) meets in a private etcd that this machine hosts, which is what the store
   * did; the endpoint a single-node command names is unused, as in torchrun. */
  int one_machine = nn->i2 == 1 || cfg->nhosts > 0;
  if (one_machine) {
    if (ep->s[0] && ep->origin.kind != LO_FLAG) return 0; /* an etcd from INI or environment */
    free(ep->s);
    if (!(ep->s = strdup(""))) {
      snprintf(err, errlen, "bagua-launch: out of memory");
      return LAUNCH_EXIT_USAGE;
    }
    bagua__launch_origin_set(&ep->origin, LO_FLAG, "--rdzv-backend %s%s, %s: a private etcd",
                             backend, t->backend[0] ? "" : " (torchrun's default)",
                             nn->i2 == 1 ? "one node" : "every node started from here");
    return 0;
  }
  /* Across nodes started one by one: the node at the endpoint's address hosts the job's
   * etcd there (embedded.h). c10d names it with --rdzv-endpoint, static with --master-addr and
   * --master-port (torchrun's defaults: 127.0.0.1 and 29500) unless an endpoint is given. */
  char target[300];
  if (ep->s[0] && ep->origin.kind == LO_FLAG) {
    if (strchr(ep->s, ',')) {
      snprintf(err, errlen,
               "bagua-launch: --rdzv-backend %s: the endpoint \"%s\" lists several; accepted: "
               "one HOST:PORT, the address of the node that hosts the rendezvous",
               backend, ep->s);
      return LAUNCH_EXIT_USAGE;
    }
    snprintf(target, sizeof(target), "%s", ep->s);
  } else if (ep->s[0]) {
    return 0; /* an etcd from INI or environment: the etcd backend in all but name */
  } else {
    snprintf(target, sizeof(target), "%s:%d", t->master_addr[0] ? t->master_addr : "127.0.0.1",
             t->master_port ? t->master_port : 29500);
  }
  char *copy = strdup(target);
  if (!copy) {
    snprintf(err, errlen, "bagua-launch: out of memory");
    return LAUNCH_EXIT_USAGE;
  }
  free(ep->s);
  ep->s = copy;
  bagua__launch_origin_set(
      &ep->origin, LO_FLAG,
      "--rdzv-backend %s%s: the job's etcd, hosted by the node at this address", backend,
      t->backend[0] ? "" : " (torchrun's default)");
  cfg->rdzv_embedded = 1;
  return 0;
}
