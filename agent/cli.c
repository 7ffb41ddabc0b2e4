/*
 * Command line of bagua-agent. Flags override the BAGUA_* environment parameters, which
 * override the registry's defaults (DESIGN.md §8). Every rejected value is reported with the
 * flag's name and what is accepted, before anything starts.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "bagua/params.h"
#include "common/params.h"

static char g_name[BAGUA_AGENT_ID_MAX] = "?";

void bagua__agent_set_name(const char *node) {
  snprintf(g_name, sizeof(g_name), "%s", node);
}

void bagua__agent_err(const char *fmt, ...) {
  char line[2048];
  int n = snprintf(line, sizeof(line), "bagua-agent[%s]: ", g_name);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  /* One write per line so messages do not interleave with worker output lines. */
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}

static const char usage_text[] =
    "usage: bagua-agent --rdzv-endpoint HOST:PORT[,HOST:PORT] --job-id ID --nnodes MIN[:MAX]\n"
    "                   --nproc-per-node N [options] -- PROGRAM [ARGS...]\n"
    "\n"
    "One agent runs per node: it registers the node in etcd, joins rendezvous rounds and\n"
    "starts the node's N workers for each round (see docs/agent.md).\n"
    "\n"
    "  --rdzv-endpoint E   etcd endpoint list (env BAGUA_RDZV_ENDPOINT)\n"
    "  --job-id ID         job identity, [A-Za-z0-9._-] (env BAGUA_JOB_ID)\n"
    "  --nnodes MIN[:MAX]  nodes needed to run, and the most admitted (1 <= MIN <= MAX)\n"
    "  --nproc-per-node N  workers started on this node (1..4096)\n"
    "  --node-id ID        this node's identity (env BAGUA_NODE_ID; default: host name)\n"
    "  --node-addr ADDR    address other nodes use to reach this node's workers (env\n"
    "                      BAGUA_NODE_ADDR; default: the local address towards etcd)\n"
    "  --max-restarts K    worker-failure restarts before the job fails (BAGUA_MAX_RESTARTS)\n"
    "  --lease-ttl S       etcd lease TTL in seconds (BAGUA_LEASE_TTL_S)\n"
    "  --rdzv-timeout S    fail when below MIN nodes this long (BAGUA_RDZV_TIMEOUT_S)\n"
    "  --last-call-ms MS   wait for more nodes after MIN joined (BAGUA_RDZV_LAST_CALL_MS)\n"
    "  --settle-ms MS      batch membership changes (BAGUA_RDZV_SETTLE_MS)\n"
    "  --grace-ms MS       SIGTERM-to-SIGKILL grace for workers (BAGUA_STOP_GRACE_MS)\n"
    "  --log-dir DIR       also write DIR/<node>/rank<R>.log (BAGUA_LOG_DIR)\n"
    "  --elastic-mode M    auto (default): a membership change keeps the running workers\n"
    "                      when all of them use libbagua's elastic API, else restarts them;\n"
    "                      restart: every new round restarts the workers; in-process: a\n"
    "                      membership change always keeps them (BAGUA_ELASTIC_MODE)\n"
    "  --tag NAME          label recorded in this node's etcd record\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 job succeeded; 1..255 the root-cause worker's exit code (128+signal);\n"
    "2 usage error; 3 rendezvous failed; 130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP.\n";

enum {
  OPT_ENDPOINT = 256,
  OPT_JOB_ID,
  OPT_NNODES,
  OPT_NPROC,
  OPT_NODE_ID,
  OPT_NODE_ADDR,
  OPT_MAX_RESTARTS,
  OPT_LEASE_TTL,
  OPT_RDZV_TIMEOUT,
  OPT_LAST_CALL,
  OPT_SETTLE,
  OPT_LOG_DIR,
  OPT_GRACE,
  OPT_TAG,
  OPT_ELASTIC_MODE,
  OPT_HELP,
  OPT_VERSION
};

static const struct option long_opts[] = {
    {"rdzv-endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"job-id", required_argument, NULL, OPT_JOB_ID},
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"nproc-per-node", required_argument, NULL, OPT_NPROC},
    {"node-id", required_argument, NULL, OPT_NODE_ID},
    {"node-addr", required_argument, NULL, OPT_NODE_ADDR},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"lease-ttl", required_argument, NULL, OPT_LEASE_TTL},
    {"rdzv-timeout", required_argument, NULL, OPT_RDZV_TIMEOUT},
    {"last-call-ms", required_argument, NULL, OPT_LAST_CALL},
    {"settle-ms", required_argument, NULL, OPT_SETTLE},
    {"log-dir", required_argument, NULL, OPT_LOG_DIR},
    {"grace-ms", required_argument, NULL, OPT_GRACE},
    {"tag", required_argument, NULL, OPT_TAG},
    {"elastic-mode", required_argument, NULL, OPT_ELASTIC_MODE},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0}};

/* Strict decimal integer in [lo, hi]; returns 0 or -1. */
static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (s[0] == '\0' || errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/*
 * Integer flags that mirror a registry parameter are checked against the registry, so the
 * accepted range is defined in one place (common/params.def).
 */
static int parse_param_flag(const char *flag, const char *env, const char *value, int *out) {
  char err[256];
  if (bagua_param_validate(env, value, err, sizeof(err)) != BAGUA_OK) {
    const char *acc = strstr(err, "accepted");
    bagua__agent_err("%s \"%s\" is invalid; %s", flag, value, acc ? acc : err);
    return -1;
  }
  return parse_int(value, -2147483647L, 2147483647L, out) == 0 ? 0 : -1;
}

static const char *const elastic_mode_names[] = {
    [BAGUA__ELASTIC_AUTO] = "auto",
    [BAGUA__ELASTIC_RESTART] = "restart",
    [BAGUA__ELASTIC_IN_PROCESS] = "in-process",
};

const char *bagua__elastic_mode_name(bagua__elastic_mode_t m) {
  return (unsigned)m < sizeof(elastic_mode_names) / sizeof(elastic_mode_names[0])
             ? elastic_mode_names[m]
             : "auto";
}

static int parse_elastic_mode(const char *s, bagua__elastic_mode_t *out) {
  for (size_t i = 0; i < sizeof(elastic_mode_names) / sizeof(elastic_mode_names[0]); i++) {
    if (strcmp(s, elastic_mode_names[i]) != 0) continue;
    *out = (bagua__elastic_mode_t)i;
    return 0;
  }
  return -1;
}

/* Ids become etcd path segments and file names: keep them to a safe alphabet. */
static int valid_id(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= BAGUA_AGENT_ID_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    if (!ok) return 0;
  }
  return 1;
}

static int parse_nnodes(const char *s, bagua__agent_config_t *cfg) {
  char buf[64];
  if (strlen(s) >= sizeof(buf)) goto bad;
  snprintf(buf, sizeof(buf), "%s", s);
  char *colon = strchr(buf, ':');
  if (colon) *colon = '\0';
  if (parse_int(buf, 1, 65536, &cfg->nnodes_min) != 0) goto bad;
  cfg->nnodes_max = cfg->nnodes_min;
  if (colon && parse_int(colon + 1, 1, 65536, &cfg->nnodes_max) != 0) goto bad;
  if (cfg->nnodes_max < cfg->nnodes_min) goto bad;
  return 0;
bad:
  bagua__agent_err(
      "--nnodes \"%s\" is malformed; accepted: N or MIN:MAX with integers 1 <= MIN <= MAX <= "
      "65536",
      s);
  return -1;
}

/* Each endpoint is HOST:PORT (or a URL the etcd client takes as is). */
static int valid_endpoints(const char *list) {
  const char *p = list;
  if (!*p) return 0;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char one[256];
    if (len == 0 || len >= sizeof(one)) return 0;
    memcpy(one, p, len);
    one[len] = '\0';
    if (strstr(one, "://") == NULL) {
      char *colon = strrchr(one, ':');
      int port;
      if (!colon || colon == one || parse_int(colon + 1, 1, 65535, &port) != 0) return 0;
    }
    p += len;
    if (*p == ',') p++;
  }
  return 1;
}

int bagua__agent_parse_cli(int argc, char **argv, bagua__agent_config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  char host[256] = "localhost";
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "localhost");
  host[sizeof(host) - 1] = '\0';
  bagua__agent_set_name(host);

  if (bagua__params_check() != BAGUA_OK) {
    bagua__agent_err("bad environment parameter: %s", bagua_last_error());
    return 2;
  }
  cfg->endpoints = bagua__param_str(BAGUA_P_RDZV_ENDPOINT);
  const char *job = bagua__param_is_set(BAGUA_P_JOB_ID) ? bagua__param_str(BAGUA_P_JOB_ID) : "";
  const char *node = bagua__param_is_set(BAGUA_P_NODE_ID) ? bagua__param_str(BAGUA_P_NODE_ID) : "";
  const char *nnodes = NULL, *nproc = NULL;
  cfg->max_restarts = (int)bagua__param_int(BAGUA_P_MAX_RESTARTS);
  cfg->lease_ttl_s = (int)bagua__param_int(BAGUA_P_LEASE_TTL_S);
  cfg->rdzv_timeout_s = (int)bagua__param_int(BAGUA_P_RDZV_TIMEOUT_S);
  cfg->last_call_ms = (int)bagua__param_int(BAGUA_P_RDZV_LAST_CALL_MS);
  cfg->settle_ms = (int)bagua__param_int(BAGUA_P_RDZV_SETTLE_MS);
  cfg->grace_ms = (int)bagua__param_int(BAGUA_P_STOP_GRACE_MS);
  cfg->etcd_timeout_ms = (int)bagua__param_int(BAGUA_P_ETCD_TIMEOUT_MS);
  cfg->log_dir = bagua__param_str(BAGUA_P_LOG_DIR);
  snprintf(cfg->node_addr, sizeof(cfg->node_addr), "%s", bagua__param_str(BAGUA_P_NODE_ADDR));
  cfg->tag = "";
  /* bagua__params_check() above has already limited the variable to the accepted names. */
  if (parse_elastic_mode(bagua__param_str(BAGUA_P_ELASTIC_MODE), &cfg->elastic_mode) != 0)
    cfg->elastic_mode = BAGUA__ELASTIC_AUTO;

  opterr = 0; /* our own messages name the flag and what is accepted */
  optind = 1;
  int c, rc = 0;
  while ((c = getopt_long(argc, argv, "+:h", long_opts, NULL)) != -1) {
    const char *v = optarg;
    switch (c) {
      case OPT_ENDPOINT:
        cfg->endpoints = v;
        break;
      case OPT_JOB_ID:
        job = v;
        break;
      case OPT_NNODES:
        nnodes = v;
        break;
      case OPT_NPROC:
        nproc = v;
        break;
      case OPT_NODE_ID:
        node = v;
        break;
      case OPT_NODE_ADDR:
        snprintf(cfg->node_addr, sizeof(cfg->node_addr), "%s", v);
        break;
      case OPT_MAX_RESTARTS:
        rc |= parse_param_flag("--max-restarts", "BAGUA_MAX_RESTARTS", v, &cfg->max_restarts);
        break;
      case OPT_LEASE_TTL:
        rc |= parse_param_flag("--lease-ttl", "BAGUA_LEASE_TTL_S", v, &cfg->lease_ttl_s);
        break;
      case OPT_RDZV_TIMEOUT:
        rc |= parse_param_flag("--rdzv-timeout", "BAGUA_RDZV_TIMEOUT_S", v, &cfg->rdzv_timeout_s);
        break;
      case OPT_LAST_CALL:
        rc |= parse_param_flag("--last-call-ms", "BAGUA_RDZV_LAST_CALL_MS", v, &cfg->last_call_ms);
        break;
      case OPT_SETTLE:
        rc |= parse_param_flag("--settle-ms", "BAGUA_RDZV_SETTLE_MS", v, &cfg->settle_ms);
        break;
      case OPT_GRACE:
        rc |= parse_param_flag("--grace-ms", "BAGUA_STOP_GRACE_MS", v, &cfg->grace_ms);
        break;
      case OPT_LOG_DIR:
        cfg->log_dir = v;
        break;
      case OPT_TAG:
        cfg->tag = v;
        break;
      case OPT_ELASTIC_MODE:
        if (parse_elastic_mode(v, &cfg->elastic_mode) != 0) {
          bagua__agent_err(
              "--elastic-mode \"%s\" is invalid; accepted: auto, restart or in-process", v);
          rc = 1;
        }
        break;
      case 'h':
      case OPT_HELP:
        fputs(usage_text, stdout);
        return 1;
      case OPT_VERSION:
        printf("bagua-agent %s\n", BAGUA_VERSION_STRING);
        return 1;
      case ':':
        bagua__agent_err("flag %s needs a value; run bagua-agent --help for the flags",
                         argv[optind - 1]);
        return 2;
      default: {
        char shortopt[3] = {'-', (char)optopt, '\0'};
        bagua__agent_err("unknown flag \"%s\"; run bagua-agent --help for the flags",
                         optopt ? shortopt : argv[optind - 1]);
        return 2;
      }
    }
  }
  if (rc) return 2;

  /* The program follows "--" (getopt consumes it) or starts at the first non-flag word. */
  if (optind >= argc) {
    bagua__agent_err("missing the worker program; accepted: ... -- PROGRAM [ARGS...]");
    return 2;
  }
  cfg->argv = argv + optind;
  cfg->argc = argc - optind;

  if (!cfg->endpoints || !cfg->endpoints[0]) {
    bagua__agent_err(
        "--rdzv-endpoint is required (or BAGUA_RDZV_ENDPOINT); accepted: "
        "HOST:PORT[,HOST:PORT]");
    return 2;
  }
  if (!valid_endpoints(cfg->endpoints)) {
    bagua__agent_err(
        "--rdzv-endpoint \"%s\" is malformed; accepted: HOST:PORT[,HOST:PORT] with "
        "ports 1..65535, or http:// URLs",
        cfg->endpoints);
    return 2;
  }
  if (!job[0]) {
    bagua__agent_err(
        "--job-id is required (or BAGUA_JOB_ID); every node of a job passes the "
        "same id");
    return 2;
  }
  if (!valid_id(job)) {
    bagua__agent_err("--job-id \"%s\" is invalid; accepted: 1..127 characters of A-Z a-z 0-9 . _ -",
                     job);
    return 2;
  }
  memcpy(cfg->job_id, job, strlen(job) + 1); /* valid_id() bounded its length */
  if (!node[0]) node = host;
  if (!valid_id(node)) {
    bagua__agent_err(
        "--node-id \"%s\" is invalid; accepted: 1..127 characters of A-Z a-z 0-9 . "
        "_ -",
        node);
    return 2;
  }
  memcpy(cfg->node_id, node, strlen(node) + 1); /* valid_id() bounded its length */
  bagua__agent_set_name(cfg->node_id);
  if (!nnodes) {
    bagua__agent_err("--nnodes is required; accepted: N or MIN:MAX");
    return 2;
  }
  if (parse_nnodes(nnodes, cfg) != 0) return 2;
  if (!nproc) {
    bagua__agent_err("--nproc-per-node is required; accepted: an integer in [1, 4096]");
    return 2;
  }
  if (parse_int(nproc, 1, 4096, &cfg->nproc) != 0) {
    bagua__agent_err("--nproc-per-node \"%s\" is invalid; accepted: an integer in [1, 4096]",
                     nproc);
    return 2;
  }
  if (cfg->log_dir && !cfg->log_dir[0]) cfg->log_dir = NULL;
  return 0;
}
