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

#include "common/flags.h"
#include "common/params.h"
#include "launch.h"

/* A setting whose flag bagua-agent shares (common/flags.def). */
#define SHARED(flag) (1 + BAGUA__FLAG_##flag)

static bagua__launch_desc_t g_desc[LS__COUNT] = {
    [LS_JOB_ID] = {.name = "job_id",
                   .section = "job",
                   .type = LT_ID,
                   .lo = 0,
                   .hi = 0,
                   .def = "",
                   .shared = SHARED(JOB_ID)},
    /* Environment variables are read only when the registry declares them (it declares both
     * BAGUA_NNODES and BAGUA_NPROC_PER_NODE). */
    [LS_NNODES] = {.name = "nnodes",
                   .section = "job",
                   .type = LT_NNODES,
                   .lo = 1,
                   .hi = LAUNCH_MAX_NODES,
                   .def = "1:1",
                   .shared = SHARED(NNODES)},
    [LS_NPROC] = {.name = "nproc_per_node",
                  .section = "job",
                  .type = LT_INT,
                  .lo = 1,
                  .hi = LAUNCH_MAX_NPROC,
                  .def = "1",
                  .shared = SHARED(NPROC_PER_NODE)},
    [LS_MAX_RESTARTS] = {.name = "max_restarts",
                         .section = "job",
                         .type = LT_INT,
                         .lo = 0,
                         .hi = 0,
                         .def = "",
                         .shared = SHARED(MAX_RESTARTS)},
    [LS_LOG_DIR] = {.name = "log_dir",
                    .section = "job",
                    .type = LT_STR,
                    .lo = 0,
                    .hi = 0,
                    .def = "",
                    .shared = SHARED(LOG_DIR)},
    [LS_NODE_ID] = {.name = "node_id",
                    .section = "job",
                    .type = LT_ID,
                    .lo = 0,
                    .hi = 0,
                    .def = "",
                    .shared = SHARED(NODE_ID)},
    /* BAGUA_NODE_ADDR in the launcher's environment is a worker's (the agent sets it), never a
     * choice for the agents this launcher starts. */
    [LS_NODE_ADDR] = {.name = "node_addr",
                      .section = "job",
                      .type = LT_HOST,
                      .lo = 0,
                      .hi = 0,
                      .def = "",
                      .shared = SHARED(NODE_ADDR),
                      .env_off = 1},
    [LS_GRACE_MS] = {.name = "stop_grace_ms",
                     .section = "job",
                     .type = LT_INT,
                     .lo = 0,
                     .hi = 0,
                     .def = "",
                     .shared = SHARED(GRACE_MS)},
    [LS_ELASTIC_MODE] = {.name = "elastic_mode",
                         .section = "job",
                         .type = LT_CHOICE,
                         .lo = 0,
                         .hi = 0,
                         .def = "auto",
                         .shared = SHARED(ELASTIC_MODE)},
    [LS_AGENT] = {.name = "agent",
                  .section = "job",
                  .flag = "--agent",
                  .type = LT_STR,
                  .def = "",
                  .metavar = "PATH",
                  .help = "bagua-agent binary (default: the one next to bagua-launch)"},
    /* BAGUA_PYTHON beats the INI's python and the script's #! line: program_argv (config.c)
     * reads the #! line only while the interpreter is still the default. */
    [LS_PYTHON] = {.name = "python",
                   .section = "job",
                   .flag = "--python",
                   .env = "BAGUA_PYTHON",
                   .type = LT_STR,
                   .def = LAUNCH_DEFAULT_PYTHON,
                   .metavar = "PATH",
                   .help = "interpreter for a .py program and for -m MODULE"},
    [LS_NET_PLUGIN] =
        {.name = "net_plugin",
         .section = "job",
         .flag = "--net-plugin",
         .type = LT_STR,
         .def = "",
         .metavar = "NAME|PATH",
         .help = "NCCL network plugin for the workers: bagua (Bagua-Net), none, or a path"},
    [LS_REMOTE_CMD] = {.name = "remote_cmd",
                       .section = "job",
                       .flag = "--remote-cmd",
                       .type = LT_TEMPLATE,
                       .def = LAUNCH_DEFAULT_REMOTE_CMD,
                       .metavar = "TEMPLATE",
                       .help =
                           "how an agent is started on another host ({host}, {cmd}, {cmdline})"},
    /* How many agents start at once (docs/launcher.md, "Starting many hosts"); bounds and
     * default are the registry's. */
    [LS_FANOUT] = {.name = "fanout",
                   .section = "job",
                   .flag = "--fanout",
                   .env = "BAGUA_LAUNCH_FANOUT",
                   .type = LT_INT,
                   .def = "",
                   .metavar = "N",
                   .help = "at most N agents starting at once (each until it registers)"},
    /* Host discovery (docs/launcher.md, "Host discovery"); no environment variable: the
     * registry declares none, and a script is a per-job choice. */
    [LS_DISCOVERY_SCRIPT] = {.name = "host_discovery_script",
                             .section = "job",
                             .flag = "--host-discovery-script",
                             .type = LT_STR,
                             .def = "",
                             .metavar = "PATH",
                             .help = "prints HOST[:SLOTS] lines: the hosts (re-run while elastic)"},
    [LS_DISCOVERY_INTERVAL_MS] = {.name = "discovery_interval_ms",
                                  .section = "job",
                                  .flag = "--discovery-interval-ms",
                                  .type = LT_INT,
                                  .lo = 100,
                                  .hi = 3600000,
                                  .def = "1000",
                                  .metavar = "MS",
                                  .help = "how often an elastic job re-runs the discovery script"},
    [LS_DISCOVERY_TIMEOUT_MS] =
        {.name = "discovery_timeout_ms",
         .section = "job",
         .flag = "--discovery-timeout-ms",
         .type = LT_INT,
         .lo = 100,
         .hi = 600000,
         .def = "10000",
         .metavar = "MS",
         .help = "a discovery script still running after MS is killed (failed)"},
    [LS_METRICS_PORT] = {.name = "metrics_port",
                         .section = "job",
                         .type = LT_INT,
                         .lo = 0,
                         .hi = 65535,
                         .def = "0",
                         .shared = SHARED(METRICS_PORT)},
    [LS_METRICS_ADDR] = {.name = "metrics_addr",
                         .section = "job",
                         .type = LT_LISTEN,
                         .lo = 0,
                         .hi = 0,
                         .def = "127.0.0.1",
                         .shared = SHARED(METRICS_ADDR)},
    [LS_ENDPOINT] = {.name = "endpoint",
                     .section = "rendezvous",
                     .type = LT_ENDPOINTS,
                     .lo = 0,
                     .hi = 0,
                     .def = "",
                     .shared = SHARED(RDZV_ENDPOINT)},
    [LS_RDZV_HOST] = {.name = "host",
                      .section = "rendezvous",
                      .flag = "--rdzv-host",
                      .type = LT_HOST,
                      .def = "",
                      .metavar = "ADDR",
                      .help = "private etcd address when --hosts spans several hosts"},
    [LS_LEASE_TTL] = {.name = "lease_ttl",
                      .section = "rendezvous",
                      .type = LT_INT,
                      .lo = 0,
                      .hi = 0,
                      .def = "",
                      .shared = SHARED(LEASE_TTL)},
    [LS_RDZV_TIMEOUT] = {.name = "timeout",
                         .section = "rendezvous",
                         .type = LT_INT,
                         .lo = 0,
                         .hi = 0,
                         .def = "",
                         .shared = SHARED(RDZV_TIMEOUT)},
    [LS_LAST_CALL_MS] = {.name = "last_call_ms",
                         .section = "rendezvous",
                         .type = LT_INT,
                         .lo = 0,
                         .hi = 0,
                         .def = "",
                         .shared = SHARED(LAST_CALL_MS)},
    [LS_SETTLE_MS] = {.name = "settle_ms",
                      .section = "rendezvous",
                      .type = LT_INT,
                      .lo = 0,
                      .hi = 0,
                      .def = "",
                      .shared = SHARED(SETTLE_MS)},
    [LS_ETCD_TIMEOUT_MS] = {.name = "etcd_timeout_ms",
                            .section = "rendezvous",
                            .flag = "--etcd-timeout-ms",
                            .env = "BAGUA_ETCD_TIMEOUT_MS",
                            .type = LT_INT,
                            .def = "",
                            .metavar = "MS",
                            .help = "bound on one etcd request (and on the reachability check)"},
    [LS_ETCD_BIN] = {.name = "etcd_bin",
                     .section = "rendezvous",
                     .flag = "--etcd-bin",
                     .type = LT_STR,
                     .def = LAUNCH_DEFAULT_ETCD_BIN,
                     .metavar = "PATH",
                     .help = "etcd binary for the private etcd"},
};

/* Integer defaults rendered as text; filled from the registry once. */
static char g_int_defs[LS__COUNT][24];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_from_registry(void) {
  for (int s = 0; s < LS__COUNT; s++) {
    bagua__launch_desc_t *d = &g_desc[s];
    if (d->shared) {
      const bagua__flag_desc_t *f = bagua__flag((bagua__flag_t)(d->shared - 1));
      d->flag = f->flag;
      d->metavar = f->metavar;
      d->help = f->help;
      d->env = d->env_off ? NULL : bagua__param_env_name(f->param);
    }
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

int bagua__launch_find_shared(bagua__flag_t f) {
  for (int s = 0; s < LS__COUNT; s++)
    if (g_desc[s].shared == 1 + (int)f) return s;
  return -1;
}
