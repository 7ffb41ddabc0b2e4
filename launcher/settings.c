/*
 * The launcher's settings table: every scalar setting is described once here, with its INI
 * key, flag, environment variable, type and bounds, together with the lifetime of the data
 * the settings are parsed into (layers and the resolved configuration).
 *
 * Settings that are also BAGUA_* registry parameters take their default, bounds and accepted
 * words from the registry (common/params.h), so the launcher, the agent and the library can
 * never disagree on what a value may be.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/params.h"
#include "launch.h"

static bagua__launch_desc_t g_desc[LS__COUNT] = {
    [LS_JOB_ID] = {"job_id", "job", "--job-id", "BAGUA_JOB_ID", LT_ID, 0, 0, "", "ID",
                   "job identity shared by all agents (default: a fresh random id)", NULL},
    /* Environment variables are read only when the registry declares them (it declares both
     * BAGUA_NNODES and BAGUA_NPROC_PER_NODE). */
    [LS_NNODES] = {"nnodes", "job", "--nnodes", "BAGUA_NNODES", LT_NNODES, 1, LAUNCH_MAX_NODES,
                   "1:1", "N|MIN:MAX", "nodes in the job; MIN:MAX makes it elastic", NULL},
    [LS_NPROC] = {"nproc_per_node", "job", "--nproc-per-node", "BAGUA_NPROC_PER_NODE", LT_INT, 1,
                  LAUNCH_MAX_NPROC, "1", "N", "workers per node (a host entry may override it)",
                  NULL},
    [LS_MAX_RESTARTS] = {"max_restarts", "job", "--max-restarts", "BAGUA_MAX_RESTARTS", LT_INT, 0,
                         0, "", "K", "worker-failure restarts before the job fails", NULL},
    [LS_LOG_DIR] = {"log_dir", "job", "--log-dir", "BAGUA_LOG_DIR", LT_STR, 0, 0, "", "DIR",
                    "directory for per-rank log files", NULL},
    [LS_NODE_ID] = {"node_id", "job", "--node-id", "BAGUA_NODE_ID", LT_ID, 0, 0, "", "ID",
                    "node id of the single local agent (default: the agent's choice)", NULL},
    [LS_NODE_ADDR] = {"node_addr", "job", "--node-addr", NULL, LT_HOST, 0, 0, "", "ADDR",
                      "address other nodes reach the single local agent's workers on", NULL},
    [LS_GRACE_MS] = {"stop_grace_ms", "job", "--grace-ms", "BAGUA_STOP_GRACE_MS", LT_INT, 0, 0, "",
                     "MS", "time between SIGTERM and SIGKILL when stopping", NULL},
    [LS_ELASTIC_MODE] = {"elastic_mode", "job", "--elastic-mode", "BAGUA_ELASTIC_MODE", LT_CHOICE,
                         0, 0, "auto", "MODE",
                         "workers on membership changes: auto, restart or in-process",
                         "auto|restart|in-process"},
    [LS_AGENT] = {"agent", "job", "--agent", NULL, LT_STR, 0, 0, "", "PATH",
                  "bagua-agent binary (default: the one next to bagua-launch)", NULL},
    /* BAGUA_PYTHON beats the INI's python and the script's #! line: program_argv (config.c)
     * reads the #! line only while the interpreter is still the default. */
    [LS_PYTHON] = {"python", "job", "--python", "BAGUA_PYTHON", LT_STR, 0, 0, LAUNCH_DEFAULT_PYTHON,
                   "PATH", "interpreter for a .py program and for -m MODULE", NULL},
    [LS_NET_PLUGIN] = {"net_plugin", "job", "--net-plugin", NULL, LT_STR, 0, 0, "", "NAME|PATH",
                       "NCCL network plugin for the workers: bagua (Bagua-Net), none, or a path",
                       NULL},
    [LS_REMOTE_CMD] = {"remote_cmd", "job", "--remote-cmd", NULL, LT_TEMPLATE, 0, 0,
                       LAUNCH_DEFAULT_REMOTE_CMD, "TEMPLATE",
                       "how an agent is started on another host ({host}, {cmd}, {cmdline})", NULL},
    /* Host discovery (docs/launcher.md, "Host discovery"); no environment variable: the
     * registry declares none, and a script is a per-job choice. */
    [LS_DISCOVERY_SCRIPT] = {"host_discovery_script", "job", "--host-discovery-script", NULL,
                             LT_STR, 0, 0, "", "PATH",
                             "prints HOST[:SLOTS] lines: the hosts (re-run while elastic)", NULL},
    [LS_DISCOVERY_INTERVAL_MS] = {"discovery_interval_ms", "job", "--discovery-interval-ms", NULL,
                                  LT_INT, 100, 3600000, "1000", "MS",
                                  "how often an elastic job re-runs the discovery script", NULL},
    [LS_DISCOVERY_TIMEOUT_MS] = {"discovery_timeout_ms", "job", "--discovery-timeout-ms", NULL,
                                 LT_INT, 100, 600000, "10000", "MS",
                                 "a discovery script still running after MS is killed (failed)",
                                 NULL},
    [LS_METRICS_PORT] = {"metrics_port", "job", "--metrics-port", "BAGUA_METRICS_PORT", LT_INT, 0,
                         65535, "0", "PORT",
                         "each agent serves Prometheus metrics on PORT (+ its index among the "
                         "agents on its host); 0: off",
                         NULL},
    [LS_METRICS_ADDR] = {"metrics_addr", "job", "--metrics-addr", "BAGUA_METRICS_ADDR", LT_HOST, 0,
                         0, "127.0.0.1", "ADDR", "address the agents' metrics endpoints bind",
                         NULL},
    [LS_ENDPOINT] = {"endpoint", "rendezvous", "--rdzv-endpoint", "BAGUA_RDZV_ENDPOINT",
                     LT_ENDPOINTS, 0, 0, "", "HOST:PORT[,...]",
                     "etcd to rendezvous through (default: start a private etcd)", NULL},
    [LS_RDZV_HOST] = {"host", "rendezvous", "--rdzv-host", NULL, LT_HOST, 0, 0, "", "ADDR",
                      "private etcd address when --hosts spans several hosts", NULL},
    [LS_LEASE_TTL] = {"lease_ttl", "rendezvous", "--lease-ttl", "BAGUA_LEASE_TTL_S", LT_INT, 0, 0,
                      "", "S", "an agent that stops renewing its lease is lost after S seconds",
                      NULL},
    [LS_RDZV_TIMEOUT] = {"timeout", "rendezvous", "--rdzv-timeout", "BAGUA_RDZV_TIMEOUT_S", LT_INT,
                         0, 0, "", "S", "fail when fewer than MIN nodes are there for S seconds",
                         NULL},
    [LS_LAST_CALL_MS] = {"last_call_ms", "rendezvous", "--last-call-ms", "BAGUA_RDZV_LAST_CALL_MS",
                         LT_INT, 0, 0, "", "MS", "wait for more nodes after MIN have joined", NULL},
    [LS_SETTLE_MS] = {"settle_ms", "rendezvous", "--settle-ms", "BAGUA_RDZV_SETTLE_MS", LT_INT, 0,
                      0, "", "MS", "batch membership changes within this window", NULL},
    [LS_ETCD_TIMEOUT_MS] = {"etcd_timeout_ms", "rendezvous", "--etcd-timeout-ms",
                            "BAGUA_ETCD_TIMEOUT_MS", LT_INT, 0, 0, "", "MS",
                            "bound on one etcd request (and on the reachability check)", NULL},
    [LS_ETCD_BIN] = {"etcd_bin", "rendezvous", "--etcd-bin", NULL, LT_STR, 0, 0,
                     LAUNCH_DEFAULT_ETCD_BIN, "PATH", "etcd binary for the private etcd", NULL},
};

/* Integer defaults rendered as text; filled from the registry once. */
static char g_int_defs[LS__COUNT][24];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_from_registry(void) {
  for (int s = 0; s < LS__COUNT; s++) {
    bagua__launch_desc_t *d = &g_desc[s];
    if (!d->env) continue;
    /* A variable the registry does not declare (yet) is not read at all. */
    int found = bagua__param_find(d->env);
    if (found < 0) {
      d->env = NULL;
      continue;
    }
    bagua__param_id_t id = (bagua__param_id_t)found;
    if (d->type == LT_CHOICE && !bagua__param_is_int(id)) {
      /* The accepted words and the default are the registry's, like integer bounds. */
      if (bagua__param_choices(id)[0]) d->choices = bagua__param_choices(id);
      d->def = bagua__param_str_default(id);
    }
    if (d->type != LT_INT || !bagua__param_is_int(id)) continue;
    bagua__param_bounds(id, &d->lo, &d->hi);
    snprintf(g_int_defs[s], sizeof(g_int_defs[s]), "%lld", (long long)bagua__param_int_default(id));
    d->def = g_int_defs[s];
  }
}

const bagua__launch_desc_t *bagua__launch_desc(bagua__launch_setting_t s) {
  pthread_once(&g_once, fill_from_registry);
  return &g_desc[s];
}

int bagua__launch_find_ini(const char *section, const char *key) {
  pthread_once(&g_once, fill_from_registry);
  for (int s = 0; s < LS__COUNT; s++)
    if (strcmp(g_desc[s].section, section) == 0 && strcmp(g_desc[s].name, key) == 0) return s;
  return -1;
}

int bagua__launch_find_env(const char *env) {
  pthread_once(&g_once, fill_from_registry);
  for (int s = 0; s < LS__COUNT; s++)
    if (g_desc[s].env && strcmp(g_desc[s].env, env) == 0) return s;
  return -1;
}

void bagua__launch_origin_set(bagua__launch_origin_t *o, bagua__launch_origin_kind_t kind,
                              const char *fmt, ...) {
  va_list ap;
  o->kind = kind;
  va_start(ap, fmt);
  vsnprintf(o->text, sizeof(o->text), fmt, ap);
  va_end(ap);
}

static void vars_free(bagua__launch_var_t *v, int n) {
  for (int i = 0; i < n; i++) {
    free(v[i].name);
    free(v[i].value);
    free(v[i].key);
  }
  free(v);
}

static void hosts_free(bagua__launch_host_t *h, int n) {
  for (int i = 0; i < n; i++) free(h[i].name);
  free(h);
}

void bagua__launch_layer_free(bagua__launch_layer_t *l) {
  for (int s = 0; s < LS__COUNT; s++) free(l->v[s].s);
  hosts_free(l->hosts, l->nhosts);
  vars_free(l->algo, l->nalgo);
  vars_free(l->env, l->nenv);
  bagua__launch_argv_free(&l->program);
  free(l->config_path);
  memset(l, 0, sizeof(*l));
}

void bagua__launch_config_free(bagua__launch_config_t *c) {
  for (int s = 0; s < LS__COUNT; s++) free(c->v[s].s);
  for (int i = 0; i < c->nhosts_waiting; i++) free(c->hosts_waiting[i]);
  free(c->hosts_waiting);
  hosts_free(c->hosts, c->nhosts);
  vars_free(c->algo, c->nalgo);
  vars_free(c->env, c->nenv);
  bagua__launch_argv_free(&c->program);
  free(c->config_path);
  memset(c, 0, sizeof(*c));
}
