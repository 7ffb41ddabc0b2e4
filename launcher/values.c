/*
 * The launcher's settings table and the parsing of single values.
 *
 * Every scalar setting is described once here: its INI key, flag, environment variable,
 * type and bounds. Integer settings that are also BAGUA_* registry parameters take their
 * default and bounds from common/params.def, so the launcher, the agent and the library can
 * never disagree on what a value may be.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/params.h"
#include "launch.h"

/* The registry entries, read through the same X-macro the library uses. */
typedef struct {
  const char *env;
  int is_int;
  int64_t def, lo, hi;
  const char *sdef, *choices; /* STR entries: the default and "a|b|c" ("" for any string) */
} reg_entry_t;

#define R_INT(def, lo, hi) 1, (def), (lo), (hi), NULL, NULL
#define R_STR(def, lo, hi) 0, 0, 0, 0, (def), (hi)
static const reg_entry_t k_registry[] = {
#define BAGUA_PARAM(id, env, type, def, lo, hi, help) {env, R_##type(def, lo, hi)},
#include "common/params.def"
#undef BAGUA_PARAM
};

static bagua__launch_desc_t g_desc[LS__COUNT] = {
    [LS_JOB_ID] = {"job_id", "job", "--job-id", "BAGUA_JOB_ID", LT_ID, 0, 0, "", "ID",
                   "job identity shared by all agents (default: a fresh random id)"},
    /* BAGUA_NNODES and BAGUA_NPROC_PER_NODE are read only once the registry declares them. */
    [LS_NNODES] = {"nnodes", "job", "--nnodes", "BAGUA_NNODES", LT_NNODES, 1, LAUNCH_MAX_NODES,
                   "1:1", "N|MIN:MAX", "nodes in the job; MIN:MAX makes it elastic"},
    [LS_NPROC] = {"nproc_per_node", "job", "--nproc-per-node", "BAGUA_NPROC_PER_NODE", LT_INT, 1,
                  LAUNCH_MAX_NPROC, "1", "N", "workers per node (a host entry may override it)"},
    [LS_MAX_RESTARTS] = {"max_restarts", "job", "--max-restarts", "BAGUA_MAX_RESTARTS", LT_INT, 0,
                         0, "", "K", "worker-failure restarts before the job fails"},
    [LS_LOG_DIR] = {"log_dir", "job", "--log-dir", "BAGUA_LOG_DIR", LT_STR, 0, 0, "", "DIR",
                    "directory for per-rank log files"},
    [LS_NODE_ID] = {"node_id", "job", "--node-id", "BAGUA_NODE_ID", LT_ID, 0, 0, "", "ID",
                    "node id of the single local agent (default: the agent's choice)"},
    [LS_NODE_ADDR] = {"node_addr", "job", "--node-addr", NULL, LT_HOST, 0, 0, "", "ADDR",
                      "address other nodes reach the single local agent's workers on"},
    [LS_GRACE_MS] = {"stop_grace_ms", "job", "--grace-ms", "BAGUA_STOP_GRACE_MS", LT_INT, 0, 0, "",
                     "MS", "time between SIGTERM and SIGKILL when stopping"},
    [LS_ELASTIC_MODE] = {"elastic_mode", "job", "--elastic-mode", "BAGUA_ELASTIC_MODE", LT_CHOICE,
                         0, 0, "auto", "MODE",
                         "workers on membership changes: auto, restart or in-process",
                         "auto|restart|in-process"},
    [LS_AGENT] = {"agent", "job", "--agent", NULL, LT_STR, 0, 0, "", "PATH",
                  "bagua-agent binary (default: the one next to bagua-launch)"},
    [LS_REMOTE_CMD] = {"remote_cmd", "job", "--remote-cmd", NULL, LT_TEMPLATE, 0, 0,
                       LAUNCH_DEFAULT_REMOTE_CMD, "TEMPLATE",
                       "how an agent is started on another host ({host}, {cmd}, {cmdline})"},
    [LS_ENDPOINT] = {"endpoint", "rendezvous", "--rdzv-endpoint", "BAGUA_RDZV_ENDPOINT",
                     LT_ENDPOINTS, 0, 0, "", "HOST:PORT[,...]",
                     "etcd to rendezvous through (default: start a private etcd)"},
    [LS_RDZV_HOST] = {"host", "rendezvous", "--rdzv-host", NULL, LT_HOST, 0, 0, "", "ADDR",
                      "private etcd address when --hosts spans several hosts"},
    [LS_LEASE_TTL] = {"lease_ttl", "rendezvous", "--lease-ttl", "BAGUA_LEASE_TTL_S", LT_INT, 0, 0,
                      "", "S", "an agent that stops renewing its lease is lost after S seconds"},
    [LS_RDZV_TIMEOUT] = {"timeout", "rendezvous", "--rdzv-timeout", "BAGUA_RDZV_TIMEOUT_S", LT_INT,
                         0, 0, "", "S", "fail when fewer than MIN nodes are there for S seconds"},
    [LS_LAST_CALL_MS] = {"last_call_ms", "rendezvous", "--last-call-ms", "BAGUA_RDZV_LAST_CALL_MS",
                         LT_INT, 0, 0, "", "MS", "wait for more nodes after MIN have joined"},
    [LS_SETTLE_MS] = {"settle_ms", "rendezvous", "--settle-ms", "BAGUA_RDZV_SETTLE_MS", LT_INT, 0,
                      0, "", "MS", "batch membership changes within this window"},
    [LS_ETCD_TIMEOUT_MS] = {"etcd_timeout_ms", "rendezvous", "--etcd-timeout-ms",
                            "BAGUA_ETCD_TIMEOUT_MS", LT_INT, 0, 0, "", "MS",
                            "bound on one etcd request (and on the reachability check)"},
    [LS_ETCD_BIN] = {"etcd_bin", "rendezvous", "--etcd-bin", NULL, LT_STR, 0, 0,
                     LAUNCH_DEFAULT_ETCD_BIN, "PATH", "etcd binary for the private etcd"},
};

/* Integer defaults rendered as text; filled from the registry once. */
static char g_int_defs[LS__COUNT][24];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_from_registry(void) {
  for (int s = 0; s < LS__COUNT; s++) {
    bagua__launch_desc_t *d = &g_desc[s];
    if (!d->env) continue;
    /* A variable the registry does not declare (yet) is not read at all. */
    int known = 0;
    for (size_t i = 0; i < sizeof(k_registry) / sizeof(k_registry[0]); i++)
      known |= strcmp(k_registry[i].env, d->env) == 0;
    if (!known) d->env = NULL;
    if (d->type == LT_CHOICE && d->env) {
      /* The accepted words and the default are the registry's, like integer bounds. */
      for (size_t i = 0; i < sizeof(k_registry) / sizeof(k_registry[0]); i++) {
        if (k_registry[i].is_int || strcmp(k_registry[i].env, d->env) != 0) continue;
        if (k_registry[i].choices && k_registry[i].choices[0]) d->choices = k_registry[i].choices;
        if (k_registry[i].sdef) d->def = k_registry[i].sdef;
      }
    }
    if (d->type != LT_INT || !d->env) continue;
    for (size_t i = 0; i < sizeof(k_registry) / sizeof(k_registry[0]); i++) {
      if (!k_registry[i].is_int || strcmp(k_registry[i].env, d->env) != 0) continue;
      d->lo = k_registry[i].lo;
      d->hi = k_registry[i].hi;
      snprintf(g_int_defs[s], sizeof(g_int_defs[s]), "%lld", (long long)k_registry[i].def);
      d->def = g_int_defs[s];
    }
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

/* ---------------------------------------------------------------------------------------- */
/* Typed parsers: each writes "<what is wrong>; accepted: <what is>" on failure.             */
/* ---------------------------------------------------------------------------------------- */

/* Strict decimal integer: optional sign, digits, nothing else. */
static int parse_int(const char *text, int64_t *out) {
  if (!*text || isspace((unsigned char)*text)) return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0') return -1;
  *out = v;
  return 0;
}

static int check_int(const char *text, int64_t lo, int64_t hi, int64_t *out, char *err,
                     size_t errlen) {
  if (!*text) {
    snprintf(err, errlen, "the value is empty; accepted: an integer in [%lld, %lld]", (long long)lo,
             (long long)hi);
    return -1;
  }
  if (parse_int(text, out) != 0) {
    snprintf(err, errlen, "\"%s\" is not an integer; accepted: an integer in [%lld, %lld]", text,
             (long long)lo, (long long)hi);
    return -1;
  }
  if (*out < lo || *out > hi) {
    snprintf(err, errlen, "%lld is out of range; accepted: an integer in [%lld, %lld]",
             (long long)*out, (long long)lo, (long long)hi);
    return -1;
  }
  return 0;
}

#define NNODES_ACCEPTED "N or MIN:MAX with 1 <= MIN <= MAX <= 65536"

static int check_nnodes_part(const char *part, const char *whole, int64_t *out, char *err,
                             size_t errlen) {
  if (parse_int(part, out) != 0) {
    if (*part)
      snprintf(err, errlen, "\"%s\" is not an integer; accepted: " NNODES_ACCEPTED, part);
    else
      snprintf(err, errlen, "\"%s\" has an empty number; accepted: " NNODES_ACCEPTED, whole);
    return -1;
  }
  if (*out < 1 || *out > LAUNCH_MAX_NODES) {
    snprintf(err, errlen, "%lld is out of range; accepted: " NNODES_ACCEPTED, (long long)*out);
    return -1;
  }
  return 0;
}

static int check_nnodes(const char *text, int64_t *lo, int64_t *hi, char *err, size_t errlen) {
  char buf[64];
  if (!*text) {
    snprintf(err, errlen, "the value is empty; accepted: " NNODES_ACCEPTED);
    return -1;
  }
  if (strlen(text) >= sizeof(buf)) {
    snprintf(err, errlen, "the value is too long; accepted: " NNODES_ACCEPTED);
    return -1;
  }
  snprintf(buf, sizeof(buf), "%s", text);
  char *colon = strchr(buf, ':');
  if (colon) *colon = '\0';
  if (check_nnodes_part(buf, text, lo, err, errlen) != 0) return -1;
  *hi = *lo;
  if (colon && check_nnodes_part(colon + 1, text, hi, err, errlen) != 0) return -1;
  if (*lo > *hi) {
    snprintf(err, errlen, "\"%s\" has MIN %lld larger than MAX %lld; accepted: " NNODES_ACCEPTED,
             text, (long long)*lo, (long long)*hi);
    return -1;
  }
  return 0;
}

#define ID_ACCEPTED "1 to 64 characters from A-Z a-z 0-9 . _ -"

static int check_id(const char *text, char *err, size_t errlen) {
  size_t n = strlen(text);
  if (n > LAUNCH_MAX_ID_LEN) {
    snprintf(err, errlen, "\"%.20s...\" is longer than %d characters; accepted: " ID_ACCEPTED, text,
             LAUNCH_MAX_ID_LEN);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    if (isalnum(c) || c == '.' || c == '_' || c == '-') continue;
    if (isprint(c))
      snprintf(err, errlen, "\"%s\" contains '%c'; accepted: " ID_ACCEPTED, text, c);
    else
      snprintf(err, errlen, "the value contains byte 0x%02x; accepted: " ID_ACCEPTED, c);
    return -1;
  }
  /* "." and ".." would turn into path components of the etcd keys. */
  if (strcmp(text, ".") == 0 || strcmp(text, "..") == 0) {
    snprintf(err, errlen, "\"%s\" is a path component; accepted: " ID_ACCEPTED, text);
    return -1;
  }
  return 0;
}

#define HOST_ACCEPTED "a host name or an IPv4 address"

static int check_host(const char *text, char *err, size_t errlen) {
  for (const char *p = text; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']')
      continue;
    if (isprint(c))
      snprintf(err, errlen, "\"%s\" contains '%c'; accepted: " HOST_ACCEPTED, text, c);
    else
      snprintf(err, errlen, "the value contains byte 0x%02x; accepted: " HOST_ACCEPTED, c);
    return -1;
  }
  return 0;
}

#define EP_ACCEPTED "HOST:PORT[,HOST:PORT...] (an http:// prefix is optional)"

static int check_endpoints(const char *text, char *err, size_t errlen) {
  const char *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    char one[256];
    if (len == 0) {
      snprintf(err, errlen, "\"%s\" has an empty entry; accepted: " EP_ACCEPTED, text);
      return -1;
    }
    if (len >= sizeof(one)) {
      snprintf(err, errlen, "an entry is longer than %zu characters; accepted: " EP_ACCEPTED,
               sizeof(one) - 1);
      return -1;
    }
    memcpy(one, p, len);
    one[len] = '\0';
    const char *hp = one;
    if (strncmp(hp, "http://", 7) == 0)
      hp += 7;
    else if (strncmp(hp, "https://", 8) == 0)
      hp += 8;
    const char *colon = strrchr(hp, ':');
    int64_t port;
    if (!colon || colon == hp) {
      snprintf(err, errlen, "\"%s\" has no %s; accepted: " EP_ACCEPTED, one,
               colon ? "host" : "port");
      return -1;
    }
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hp), hp);
    if (check_host(host, err, errlen) != 0) {
      snprintf(err, errlen, "\"%s\" has a malformed host; accepted: " EP_ACCEPTED, one);
      return -1;
    }
    if (parse_int(colon + 1, &port) != 0 || port < 1 || port > 65535) {
      snprintf(err, errlen,
               "\"%s\" has port \"%s\"; accepted: " EP_ACCEPTED " with PORT in [1, 65535]", one,
               colon + 1);
      return -1;
    }
    p += len;
    if (*p == '\0') return 0;
    p++; /* the comma; an empty entry after it is reported on the next turn */
  }
}

#define TEMPLATE_ACCEPTED                                                                    \
  "a command containing {host}, such as \"ssh -o BatchMode=yes {host}\" or \"ip netns exec " \
  "{host}\""

static int check_template(const char *text, char *err, size_t errlen) {
  bagua__launch_argv_t words = {0};
  char serr[256];
  if (bagua__launch_split_words(text, &words, serr, sizeof(serr)) != 0) {
    snprintf(err, errlen, "\"%s\": %s; accepted: " TEMPLATE_ACCEPTED, text, serr);
    return -1;
  }
  int nwords = words.n;
  bagua__launch_argv_free(&words);
  if (nwords == 0 || !strstr(text, "{host}")) {
    snprintf(err, errlen, "\"%s\" does not contain {host}; accepted: " TEMPLATE_ACCEPTED, text);
    return -1;
  }
  return 0;
}

/* "a|b|c" as "a, b or c" into out. */
static void list_choices(const char *choices, char *out, size_t len) {
  size_t n = 0, words = 1;
  for (const char *p = choices; *p; p++) words += *p == '|';
  out[0] = '\0';
  for (const char *p = choices; *p && n + 1 < len;) {
    size_t w = strcspn(p, "|");
    const char *sep = --words == 0 ? "" : words == 1 ? " or " : ", ";
    int k = snprintf(out + n, len - n, "%.*s%s", (int)w, p, sep);
    if (k < 0) break;
    n += (size_t)k;
    p += w;
    if (*p == '|') p++;
  }
}

static int check_choice(const char *text, const char *choices, char *err, size_t errlen) {
  size_t tl = strlen(text);
  for (const char *p = choices; *p;) {
    size_t w = strcspn(p, "|");
    if (tl > 0 && w == tl && strncmp(p, text, w) == 0) return 0;
    p += w;
    if (*p == '|') p++;
  }
  char list[256];
  list_choices(choices, list, sizeof(list));
  if (!*text)
    snprintf(err, errlen, "the value is empty; accepted: %s", list);
  else
    snprintf(err, errlen, "\"%s\" is invalid; accepted: %s", text, list);
  return -1;
}

int bagua__launch_parse_value(bagua__launch_setting_t s, const char *text,
                              bagua__launch_value_t *out, char *err, size_t errlen) {
  const bagua__launch_desc_t *d = bagua__launch_desc(s);
  int64_t a = 0, b = 0;
  char norm[64] = "";
  const char *keep = text;
  switch (d->type) {
    case LT_INT:
      if (check_int(text, d->lo, d->hi, &a, err, errlen) != 0) return -1;
      snprintf(norm, sizeof(norm), "%lld", (long long)a);
      keep = norm;
      break;
    case LT_NNODES:
      if (check_nnodes(text, &a, &b, err, errlen) != 0) return -1;
      snprintf(norm, sizeof(norm), "%lld:%lld", (long long)a, (long long)b);
      keep = norm;
      break;
    case LT_ID:
      if (check_id(text, err, errlen) != 0) return -1;
      break;
    case LT_HOST:
      if (check_host(text, err, errlen) != 0) return -1;
      break;
    case LT_ENDPOINTS:
      if (*text && check_endpoints(text, err, errlen) != 0) return -1;
      break;
    case LT_TEMPLATE:
      if (check_template(text, err, errlen) != 0) return -1;
      break;
    case LT_CHOICE:
      if (check_choice(text, d->choices ? d->choices : "", err, errlen) != 0) return -1;
      break;
    case LT_STR:
      break;
  }
  char *copy = strdup(keep);
  if (!copy) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  free(out->s);
  out->s = copy;
  out->i = a;
  out->i2 = b;
  out->set = 1;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Variables exported to workers ([env], [algorithm])                                        */
/* ---------------------------------------------------------------------------------------- */

/* Variables every worker gets from its agent; a configuration must not set them. */
static const char *const k_agent_vars[] = {
    "RANK",         "LOCAL_RANK",       "WORLD_SIZE",          "LOCAL_WORLD_SIZE",
    "GROUP_RANK",   "MASTER_ADDR",      "MASTER_PORT",         "BAGUA_ROUND",
    "BAGUA_JOB_ID", "BAGUA_NODE_ID",    "BAGUA_RDZV_ENDPOINT", "BAGUA_BOOTSTRAP",
    "ROLE_RANK",    "GROUP_WORLD_SIZE", "BAGUA_ELASTIC_MARK"};

int bagua__launch_check_var(const char *name, const char *value, char *err, size_t errlen) {
  if (!name[0] || !(isalpha((unsigned char)name[0]) || name[0] == '_')) {
    snprintf(err, errlen,
             "\"%s\" is not a variable name; accepted: a letter or _ followed by letters, digits "
             "or _",
             name);
    return -1;
  }
  for (const char *p = name; *p; p++) {
    if (isalnum((unsigned char)*p) || *p == '_') continue;
    snprintf(err, errlen,
             "\"%s\" is not a variable name; accepted: a letter or _ followed by letters, digits "
             "or _",
             name);
    return -1;
  }
  for (size_t i = 0; i < sizeof(k_agent_vars) / sizeof(k_agent_vars[0]); i++) {
    if (strcmp(name, k_agent_vars[i]) != 0) continue;
    snprintf(err, errlen, "%s is set by bagua-agent for every worker; accepted: any other variable",
             name);
    return -1;
  }
  int s = bagua__launch_find_env(name);
  if (s >= 0) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    snprintf(err, errlen, "%s is a launcher setting; accepted: key \"%s\" in [%s] or %s", name,
             d->name, d->section, d->flag);
    return -1;
  }
  /* Registry parameters are checked against their declared type and bounds. */
  for (size_t i = 0; i < sizeof(k_registry) / sizeof(k_registry[0]); i++) {
    if (strcmp(k_registry[i].env, name) != 0) continue;
    if (bagua_param_validate(name, value, err, errlen) != BAGUA_OK) return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Strings and lists                                                                         */
/* ---------------------------------------------------------------------------------------- */

int bagua__launch_argv_push(bagua__launch_argv_t *a, const char *s) {
  char **nv = realloc(a->v, sizeof(char *) * (size_t)(a->n + 2));
  if (!nv) return -1;
  a->v = nv;
  a->v[a->n] = strdup(s);
  if (!a->v[a->n]) return -1;
  a->n++;
  a->v[a->n] = NULL;
  return 0;
}

void bagua__launch_argv_free(bagua__launch_argv_t *a) {
  for (int i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  a->v = NULL;
  a->n = 0;
}

int bagua__launch_split_words(const char *text, bagua__launch_argv_t *out, char *err,
                              size_t errlen) {
  size_t cap = strlen(text) + 1;
  char *word = malloc(cap);
  if (!word) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  const char *p = text;
  int rc = 0;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (!*p) break;
    size_t n = 0;
    while (*p && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
      if (*p == '\'') {
        const char *close = strchr(p + 1, '\'');
        if (!close) {
          snprintf(err, errlen, "unbalanced single quote");
          rc = -1;
          goto out;
        }
        memcpy(word + n, p + 1, (size_t)(close - p - 1));
        n += (size_t)(close - p - 1);
        p = close + 1;
      } else if (*p == '"') {
        p++;
        while (*p && *p != '"') {
          if (*p == '\\' && (p[1] == '"' || p[1] == '\\' || p[1] == '$' || p[1] == '`')) p++;
          word[n++] = *p++;
        }
        if (*p != '"') {
          snprintf(err, errlen, "unbalanced double quote");
          rc = -1;
          goto out;
        }
        p++;
      } else if (*p == '\\') {
        if (!p[1]) {
          snprintf(err, errlen, "trailing backslash");
          rc = -1;
          goto out;
        }
        word[n++] = p[1];
        p += 2;
      } else {
        word[n++] = *p++;
      }
    }
    word[n] = '\0';
    if (bagua__launch_argv_push(out, word) != 0) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
      goto out;
    }
  }
out:
  free(word);
  if (rc != 0) bagua__launch_argv_free(out);
  return rc;
}

static int buf_add(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t ncap = (*cap ? *cap * 2 : 256);
    while (ncap < *len + n + 1) ncap *= 2;
    char *nb = realloc(*buf, ncap);
    if (!nb) return -1;
    *buf = nb;
    *cap = ncap;
  }
  memcpy(*buf + *len, s, n);
  *len += n;
  (*buf)[*len] = '\0';
  return 0;
}

int bagua__launch_shell_quote(const char *word, char **buf, size_t *len, size_t *cap) {
  int safe = word[0] != '\0';
  for (const char *p = word; *p && safe; p++)
    safe = isalnum((unsigned char)*p) || strchr("_-./:=,@%+", *p) != NULL;
  if (safe) return buf_add(buf, len, cap, word, strlen(word));
  /* Single quotes keep everything literal; an embedded quote becomes '\''. */
  if (buf_add(buf, len, cap, "'", 1) != 0) return -1;
  for (const char *p = word; *p; p++) {
    int rc = *p == '\'' ? buf_add(buf, len, cap, "'\\''", 4) : buf_add(buf, len, cap, p, 1);
    if (rc != 0) return -1;
  }
  return buf_add(buf, len, cap, "'", 1);
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
  hosts_free(c->hosts, c->nhosts);
  vars_free(c->algo, c->nalgo);
  vars_free(c->env, c->nenv);
  bagua__launch_argv_free(&c->program);
  free(c->config_path);
  memset(c, 0, sizeof(*c));
}
