/*
 * Agent command lines and processes.
 *
 * A local agent is exec'ed directly and inherits the environment. An agent on another host is
 * started through the remote command template: "{host}" is replaced in every word, and the
 * agent's command ("env NAME=VALUE ... bagua-agent ...") goes where "{cmd}" (separate words,
 * for commands that exec their arguments, such as "ip netns exec {host}" or srun) or
 * "{cmdline}" (one shell-quoted word, for commands that hand a string to a remote shell) is.
 * Without either, it is appended: quoted for ssh, which joins its arguments into a remote
 * shell command line, as separate words for anything else.
 *
 * A value that any local user could read there (/proc/<pid>/cmdline) is never a word: a
 * registry secret (BAGUA_JOB_SECRET), and the [env] and -x values, reach a remote agent on
 * its stdin.
 */
#include "agents.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bagua/params.h"
#include "common/output.h"
#include "common/flags.h"
#include "common/params.h"
#include "common/worker_env.h"

int bagua__launch_find_agent(const char *configured, int need_local, char *out, size_t outlen,
                             char *err, size_t errlen) {
  if (configured && configured[0]) {
    snprintf(out, outlen, "%s", configured);
    if (need_local && strchr(configured, '/') && access(configured, X_OK) != 0) {
      snprintf(err, errlen, "bagua-launch: cannot run agent %s: %s; accepted: --agent PATH",
               configured, strerror(errno));
      return -1;
    }
    return 0;
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    snprintf(err, errlen,
             "bagua-launch: cannot locate bagua-launch itself: %s; accepted: "
             "--agent PATH",
             strerror(errno));
    return -1;
  }
  self[n] = '\0';
  char *dir = dirname(self);
  char cand[2][PATH_MAX + 32];
  snprintf(cand[0], sizeof(cand[0]), "%s/bagua-agent", dir);
  snprintf(cand[1], sizeof(cand[1]), "%s/../agent/bagua-agent", dir);
  for (int i = 0; i < 2; i++) {
    char real[PATH_MAX];
    if (access(cand[i], X_OK) == 0 && realpath(cand[i], real)) {
      snprintf(out, outlen, "%s", real);
      return 0;
    }
  }
  /* Remote hosts may have it even where this machine does not. */
  snprintf(out, outlen, "%s", cand[0]);
  if (!need_local) return 0;
  snprintf(err, errlen,
           "bagua-launch: bagua-agent not found next to bagua-launch (%s); accepted: --agent PATH",
           cand[0]);
  return -1;
}

static int push(bagua__launch_argv_t *a, const char *s) {
  return bagua__launch_argv_push(a, s);
}

static int push_kv(bagua__launch_argv_t *a, const char *flag, const char *value) {
  return push(a, flag) || push(a, value);
}

/* The agent's own command line (contract in docs/launcher.md). */
/* `slot`: this agent's index among the agents on its host, which offsets its metrics port so
 * that agents sharing a host do not collide. */
static int agent_argv(const bagua__launch_config_t *cfg, const char *agent_path,
                      const char *endpoint, int nproc, const char *node_id, int slot, int env_stdin,
                      bagua__launch_argv_t *a) {
  char num[32];
  int rc = push(a, agent_path);
  if (env_stdin) rc = rc || push(a, "--env-stdin");
  /* Every flag the agent shares with the launcher (common/flags.def), in the table's order:
   * the values the launcher computes per agent, then the settings it passes on when set. */
  for (int f = 0; f < BAGUA__FLAG_COUNT && !rc; f++) {
    const char *flag = bagua__flag((bagua__flag_t)f)->flag;
    const char *value = NULL;
    switch ((bagua__flag_t)f) {
      case BAGUA__FLAG_RDZV_ENDPOINT:
        value = endpoint;
        break;
      case BAGUA__FLAG_NPROC_PER_NODE:
        snprintf(num, sizeof(num), "%d", nproc);
        value = num;
        break;
      case BAGUA__FLAG_NODE_ID:
        value = node_id;
        break;
      case BAGUA__FLAG_METRICS_PORT:
        /* Off unless asked for; agents sharing a host take consecutive ports. */
        if (cfg->v[LS_METRICS_PORT].i <= 0) break;
        snprintf(num, sizeof(num), "%lld", (long long)(cfg->v[LS_METRICS_PORT].i + slot));
        value = num;
        break;
      case BAGUA__FLAG_METRICS_ADDR:
        if (cfg->v[LS_METRICS_PORT].i > 0) value = cfg->v[LS_METRICS_ADDR].s;
        break;
      default: {
        /* A PASSED row: the launcher's setting as it is. A LAUNCHER row is computed by a
         * case above; one without its case would be passed nothing. */
        int s = bagua__launch_find_shared((bagua__flag_t)f);
        if (bagua__flag((bagua__flag_t)f)->how == BAGUA__FLAG_PASSED && s >= 0) value = cfg->v[s].s;
        break;
      }
    }
    if (value && value[0]) rc = push_kv(a, flag, value);
  }
  /* torchrun's --node_rank, for the one agent of a launch without --hosts (torchrun.c). */
  if (cfg->node_rank_set && !rc) {
    snprintf(num, sizeof(num), "%d", cfg->node_rank);
    rc = push_kv(a, "--node-rank", num);
  }
  rc = rc || push(a, "--");
  for (int i = 0; i < cfg->program.n; i++) rc = rc || push(a, cfg->program.v[i]);
  return rc ? -1 : 0;
}

/*
 * A registry parameter that names something of this machine (TMPDIR): the registry reads it,
 * but it is no job setting. The environment's value is never forwarded to other hosts, and an
 * [env] entry sets it like any other variable, as before the registry declared it.
 */
static int host_local(const char *env) {
  return strcmp(env, "TMPDIR") == 0 || strcmp(env, "CUDA_VISIBLE_DEVICES") == 0;
}

/* A registry parameter the launcher's environment provides for every agent: environment >
 * INI, and forwarded to remote agents. */
static int env_provides(const char *env) {
  return !host_local(env) && bagua_param_get(env) != NULL;
}

/* The launcher's environment keeps a registry parameter that the INI file also sets
 * (environment > INI); -x is a flag and beats both. */
static int env_keeps(const bagua__launch_var_t *v) {
  return v->origin.kind != LO_FLAG && env_provides(v->name);
}

/* Registry parameters that the agent sets per worker (the worker contract) or that are passed
 * as agent flags: never forwarded. */
static int forwardable(const char *env) {
  if (host_local(env) || bagua__worker_var_agent_owned(env)) return 0;
  return bagua__launch_find_env(env) < 0;
}

/* A registry secret (BAGUA_PARAM_SECRET in common/params.def). */
static int secret(const char *env) {
  return bagua__param_name_is_secret(env);
}

/* Whether a -x flag names `env`: it beats the environment's value. */
static int flag_sets(const bagua__launch_config_t *cfg, const char *env) {
  for (int i = 0; i < cfg->nenv; i++)
    if (cfg->env[i].origin.kind == LO_FLAG && strcmp(cfg->env[i].name, env) == 0) return 1;
  return 0;
}

/* Whether the environment's value of registry secret `env` goes to remote agents (on their
 * stdin, as any forwarded setting would go, but never as a word). */
static int env_secret_sent(const bagua__launch_config_t *cfg, const char *env) {
  return secret(env) && forwardable(env) && bagua_param_get(env) && !flag_sets(cfg, env);
}

/* The first registry secret a remote agent gets, and where its value comes from; NULL when
 * there is none. */
static const char *secret_sent(const bagua__launch_config_t *cfg, const char **from) {
  for (int id = 0; id < BAGUA_P__COUNT; id++) {
    const char *env = bagua__param_env_name((bagua__param_id_t)id);
    if (!env_secret_sent(cfg, env)) continue;
    *from = "bagua-launch's environment";
    return env;
  }
  for (int i = 0; i < cfg->nenv; i++)
    if (secret(cfg->env[i].name)) {
      *from = cfg->env[i].origin.text;
      return cfg->env[i].name;
    }
  return NULL;
}

/*
 * "NAME=VALUE" words for a remote agent: the launcher's BAGUA_* settings and the INI's
 * [algorithm], so a remote worker sees what a local one would inherit. These are settings,
 * shown so that a command line explains itself. Registry secrets and [env] and -x values
 * (often secrets too: tokens, passwords) go to the agent's stdin instead (env_block); only
 * when `with_env` (the remote command allocates a terminal, which would echo its input) are
 * [env] and -x values words too, secrets never (build_one refuses such a job).
 */
static int env_words(const bagua__launch_config_t *cfg, int with_env, bagua__launch_argv_t *a) {
  char kv[4096];
  for (int id = 0; id < BAGUA_P__COUNT; id++) {
    const char *env = bagua__param_env_name((bagua__param_id_t)id);
    if (!forwardable(env) || secret(env) || !bagua_param_get(env)) continue;
    snprintf(kv, sizeof(kv), "%s=%s", env, bagua_param_get(env));
    if (push(a, kv)) return -1;
  }
  /* The one launcher setting that is not an agent flag: the agent reads it from its
   * environment. */
  snprintf(kv, sizeof(kv), "BAGUA_ETCD_TIMEOUT_MS=%s", cfg->v[LS_ETCD_TIMEOUT_MS].s);
  if (push(a, kv)) return -1;
  const bagua__launch_var_t *lists[2] = {cfg->algo, cfg->env};
  int counts[2] = {cfg->nalgo, with_env ? cfg->nenv : 0};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < counts[k]; i++) {
      const bagua__launch_var_t *v = &lists[k][i];
      if (env_keeps(v)) continue; /* forwarded above with the environment's value */
      if (secret(v->name)) continue;
      size_t need = strlen(v->name) + strlen(v->value) + 2;
      char *w = malloc(need);
      if (!w) return -1;
      snprintf(w, need, "%s=%s", v->name, v->value);
      int rc = push(a, w);
      free(w);
      if (rc) return -1;
    }
  }
  return 0;
}

/* Writes "NAME=VALUE\0" at b + o when b is not NULL; returns its length. */
static size_t put_entry(char *b, size_t o, const char *name, const char *value) {
  size_t nl = strlen(name), vl = strlen(value);
  if (b) {
    memcpy(b + o, name, nl);
    b[o + nl] = '=';
    memcpy(b + o + nl + 1, value, vl + 1); /* keeps the NUL */
  }
  return nl + vl + 2;
}

/*
 * What a remote agent gets on its stdin, as "NAME=VALUE\0" entries (a value never contains
 * NUL): the registry secrets set in the launcher's environment (unless -x names them), then
 * the [env] and -x variables. Returns 0 with *len 0 when there are none, -1 on OOM.
 */
static int env_block(const bagua__launch_config_t *cfg, char **data, size_t *len) {
  char *b = NULL;
  *data = NULL;
  *len = 0;
  /* The first pass measures, the second writes. */
  for (int pass = 0; pass < 2; pass++) {
    size_t o = 0;
    for (int id = 0; id < BAGUA_P__COUNT; id++) {
      const char *env = bagua__param_env_name((bagua__param_id_t)id);
      if (env_secret_sent(cfg, env)) o += put_entry(b, o, env, bagua_param_get(env));
    }
    for (int i = 0; i < cfg->nenv; i++) {
      const bagua__launch_var_t *v = &cfg->env[i];
      /* The environment's value was forwarded (as a word, or above for a secret). */
      if (env_keeps(v)) continue;
      o += put_entry(b, o, v->name, v->value);
    }
    if (o == 0) return 0;
    if (pass == 0 && !(b = malloc(o))) return -1;
    if (pass == 1) *len = o;
  }
  *data = b;
  return 0;
}

/* ssh options that take an argument: the word after one of them is no destination. */
static int ssh_option_with_arg(const char *w) {
  return w[0] == '-' && w[1] && !w[2] && strchr("BbcDEeFIiJLlmOopQRSWw", w[1]) != NULL;
}

/* 1 for the base name of an ssh binary ("ssh", "/usr/bin/ssh"). */
static int is_ssh(const char *word) {
  const char *base = strrchr(word, '/');
  return strcmp(base ? base + 1 : word, "ssh") == 0;
}

/*
 * 1 when the remote command template allocates a terminal (ssh -t, -tt): a terminal echoes
 * what it reads, so the [env] block cannot travel on the agent's stdin without being printed.
 */
static int template_has_tty(const char *tmpl) {
  bagua__launch_argv_t w = {0};
  char serr[128];
  int tty = 0;
  if (bagua__launch_split_words(tmpl, &w, serr, sizeof(serr)) != 0) return 0;
  if (w.n > 0 && is_ssh(w.v[0]))
    for (int i = 1; i < w.n && !tty; i++) {
      const char *o = w.v[i];
      if (strcmp(o, "--") == 0 || o[0] != '-') break;
      if (ssh_option_with_arg(o)) {
        i++;
        continue;
      }
      tty = o[1] != '-' && strchr(o + 1, 't') != NULL &&
            strspn(o + 1, "46AaCfGgKkMNnqsTtVvXxYy") == strlen(o + 1);
    }
  bagua__launch_argv_free(&w);
  return tty;
}

/* The refusal of a terminal-allocating remote command when a secret would travel to a remote
 * agent: the secret goes on the agent's stdin only, which a terminal echoes. Returns -1 with
 * the message, or 0. */
static int refuse_tty_secret(const bagua__launch_config_t *cfg, char *err, size_t errlen) {
  const char *from = NULL, *name = secret_sent(cfg, &from);
  if (!name || !template_has_tty(cfg->v[LS_REMOTE_CMD].s)) return 0;
  snprintf(err, errlen,
           "bagua-launch: %s (%s) is a secret, which a remote agent gets on its stdin only, but "
           "the remote command \"%s\" (%s) allocates a terminal, which would echo it; accepted: "
           "a remote command without -t or -tt, or no %s for bagua-launch (not exported, no -x, "
           "no [env] entry: the job's agents then make the secret and share it through etcd; "
           "bagua-agent --secret-file reads one on its own host)",
           name, from, cfg->v[LS_REMOTE_CMD].s, cfg->v[LS_REMOTE_CMD].origin.text, name);
  return -1;
}

int bagua__launch_check_remote_secrets(const bagua__launch_config_t *cfg, char *err,
                                       size_t errlen) {
  /* A discovery script may report remote hosts later. */
  int remote = cfg->hosts_source == LH_DISCOVERY;
  for (int i = 0; i < cfg->nhosts && !remote; i++) remote = !cfg->hosts[i].local;
  return remote ? refuse_tty_secret(cfg, err, errlen) : 0;
}

/* Replaces every "{host}" in `word` with `host`. */
static char *subst_host(const char *word, const char *host) {
  size_t n = 0, hl = strlen(host);
  for (const char *p = word; (p = strstr(p, "{host}")); p += 6) n++;
  char *out = malloc(strlen(word) + n * hl + 1);
  if (!out) return NULL;
  char *o = out;
  for (const char *p = word; *p;) {
    if (strncmp(p, "{host}", 6) == 0) {
      memcpy(o, host, hl);
      o += hl;
      p += 6;
    } else {
      *o++ = *p++;
    }
  }
  *o = '\0';
  return out;
}

static char *join_quoted(const bagua__launch_argv_t *a) {
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (int i = 0; i < a->n; i++) {
    char *w = NULL;
    size_t wl = 0, wc = 0;
    if (bagua__launch_shell_quote(a->v[i], &w, &wl, &wc) != 0) {
      free(w);
      goto fail;
    }
    if (len + wl + 2 > cap) {
      size_t ncap = 2 * (len + wl + 2);
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(w);
        goto fail;
      }
      buf = nb;
      cap = ncap;
    }
    if (i) buf[len++] = ' ';
    memcpy(buf + len, w, wl);
    len += wl;
    buf[len] = '\0';
    free(w);
  }
  return buf ? buf : strdup("");
fail:
  free(buf);
  return NULL;
}

/* Wraps `cmd` (env words + agent argv) in the remote template for `host`. */
static int wrap_remote(const char *tmpl, const char *host, const bagua__launch_argv_t *cmd,
                       bagua__launch_argv_t *out, char *err, size_t errlen) {
  bagua__launch_argv_t words = {0};
  char serr[128];
  int rc = -1, placed = 0;
  char *line = join_quoted(cmd);
  if (!line || bagua__launch_split_words(tmpl, &words, serr, sizeof(serr)) != 0) {
    snprintf(err, errlen, "bagua-launch: remote command \"%s\": %s", tmpl,
             line ? serr : "out of memory");
    goto out;
  }
  /* ssh reads a destination that starts with '-' as an option (-oProxyCommand=...): host
   * names are validated, and "--" before the destination makes sure of it. The destination is
   * the first word that is not an option or an option's argument. */
  const int ssh = words.n > 0 && is_ssh(words.v[0]);
  int dashdash = 0;
  for (int i = 0; i < words.n; i++) {
    if (ssh && !dashdash && i > 0) {
      const char *w = words.v[i];
      if (strcmp(w, "--") == 0) {
        dashdash = 1;
      } else if (ssh_option_with_arg(w)) {
        if (push(out, w)) goto oom;
        if (++i < words.n) {
          char *arg = subst_host(words.v[i], host);
          int prc = !arg || push(out, arg);
          free(arg);
          if (prc) goto oom;
        }
        continue;
      } else if (w[0] != '-') {
        /* The destination: the first word that is no option (a fixed host stays as it is). */
        if (strstr(w, "{host}") && push(out, "--")) goto oom;
        dashdash = 1;
      }
    }
    if (strcmp(words.v[i], "{cmd}") == 0) {
      for (int k = 0; k < cmd->n; k++)
        if (push(out, cmd->v[k])) goto oom;
      placed = 1;
      continue;
    }
    char *w = subst_host(words.v[i], host);
    if (!w) goto oom;
    char *cl = strstr(w, "{cmdline}");
    if (cl) {
      /* Only whole-word {cmdline} is meaningful; a prefix or suffix is kept around it. */
      size_t pre = (size_t)(cl - w);
      char *joined = malloc(strlen(w) + strlen(line) + 1);
      if (!joined) {
        free(w);
        goto oom;
      }
      snprintf(joined, strlen(w) + strlen(line) + 1, "%.*s%s%s", (int)pre, w, line, cl + 9);
      free(w);
      w = joined;
      placed = 1;
    }
    int prc = push(out, w);
    free(w);
    if (prc) goto oom;
  }
  if (!placed) {
    if (ssh) {
      if (push(out, line)) goto oom;
    } else {
      for (int k = 0; k < cmd->n; k++)
        if (push(out, cmd->v[k])) goto oom;
    }
  }
  rc = 0;
  goto out;
oom:
  snprintf(err, errlen, "bagua-launch: out of memory");
out:
  free(line);
  bagua__launch_argv_free(&words);
  return rc;
}

/*
 * Fills one agent entry for host `h` (NULL: the single local agent) with node id `node_id`
 * (NULL: the agent chooses). `warn_tty` prints the warning about a terminal-allocating remote
 * command (once per launch).
 */
static int build_one(const bagua__launch_config_t *cfg, const char *agent_path,
                     const char *endpoint, const bagua__launch_host_t *h, const char *node_id,
                     int slot, int warn_tty, bagua__launch_agent_t *a, char *err, size_t errlen) {
  a->err_fd = -1;
  a->host = strdup(h ? h->name : "localhost");
  a->node_id = node_id ? strdup(node_id) : NULL;
  a->local = h ? h->local : 1;
  a->agent_path = strdup(agent_path);
  a->endpoint = strdup(endpoint);
  if (!a->host || (node_id && !a->node_id) || !a->agent_path || !a->endpoint) goto oom;
  int nproc = h ? h->nproc : (int)cfg->v[LS_NPROC].i;
  a->nproc = nproc;
  if (a->local) {
    if (agent_argv(cfg, agent_path, endpoint, nproc, node_id, slot, 0, &a->argv) != 0) goto oom;
    return 0;
  }
  /* Checked with the configuration already (bagua__launch_check_remote_secrets); this agent
   * is never built with a secret on its command line whatever the caller checked. */
  if (refuse_tty_secret(cfg, err, errlen) != 0) return -1;
  const int tty = template_has_tty(cfg->v[LS_REMOTE_CMD].s);
  if (tty && cfg->nenv > 0 && warn_tty)
    bagua__say(LAUNCH_TOOL,
               "warning: --remote-cmd allocates a terminal (ssh -t), which would echo the "
               "agent's stdin: the [env] and -x values go on the remote command line instead, "
               "where ps on that host shows them");
  if (!tty && env_block(cfg, &a->stdin_data, &a->stdin_len) != 0) goto oom;
  bagua__launch_argv_t cmd = {0};
  if (push(&cmd, "env") || env_words(cfg, tty, &cmd) ||
      agent_argv(cfg, agent_path, endpoint, nproc, node_id, slot, a->stdin_len > 0, &cmd)) {
    bagua__launch_argv_free(&cmd);
    goto oom;
  }
  int rc = wrap_remote(cfg->v[LS_REMOTE_CMD].s, h->name, &cmd, &a->argv, err, errlen);
  bagua__launch_argv_free(&cmd);
  return rc;
oom:
  snprintf(err, errlen, "bagua-launch: out of memory");
  return -1;
}

int bagua__launch_build_agents(const bagua__launch_config_t *cfg, const char *agent_path,
                               const char *endpoint, bagua__launch_agent_t **out, char *err,
                               size_t errlen) {
  int n = cfg->nhosts ? cfg->nhosts : 1;
  bagua__launch_agent_t *a = calloc((size_t)n, sizeof(*a));
  if (!a) {
    snprintf(err, errlen, "bagua-launch: out of memory");
    return -1;
  }
  for (int i = 0; i < n; i++) a[i].err_fd = -1;
  for (int i = 0; i < n; i++) {
    const bagua__launch_host_t *h = cfg->nhosts ? &cfg->hosts[i] : NULL;
    char node[BAGUA_ID_MAX_LEN + 1];
    const char *node_id = NULL;
    int index = 0;
    if (h) {
      /* Each agent is one node; a host listed twice gets "-0", "-1", ... suffixes. */
      int dup = 0;
      for (int k = 0; k < cfg->nhosts; k++) {
        if (strcmp(cfg->hosts[k].name, h->name) != 0) continue;
        if (k < i) index++;
        if (k != i) dup = 1;
      }
      /* The host name is cut so that the id, suffix included, stays a valid agent id. */
      char suffix[16] = "";
      if (dup) snprintf(suffix, sizeof(suffix), "-%d", index);
      snprintf(node, sizeof(node), "%.*s%s", (int)(BAGUA_ID_MAX_LEN - strlen(suffix)), h->name,
               suffix);
      node_id = node;
    } else if (cfg->v[LS_NODE_ID].s[0]) {
      node_id = cfg->v[LS_NODE_ID].s;
    }
    if (build_one(cfg, agent_path, endpoint, h, node_id, index, i == 0, &a[i], err, errlen) != 0) {
      bagua__launch_free_agents(a, n);
      return -1;
    }
  }
  *out = a;
  return n;
}

int bagua__launch_build_agent(const bagua__launch_config_t *cfg, const char *agent_path,
                              const char *endpoint, const bagua__launch_host_t *h,
                              bagua__launch_agent_t *out, char *err, size_t errlen) {
  char node[BAGUA_ID_MAX_LEN + 1];
  memset(out, 0, sizeof(*out));
  /* Discovered hosts are unique, so the node id is the host name (cut to a valid id). */
  snprintf(node, sizeof(node), "%.*s", BAGUA_ID_MAX_LEN, h->name);
  if (build_one(cfg, agent_path, endpoint, h, node, 0, 0, out, err, errlen) != 0) {
    bagua__launch_free_agents_in_place(out, 1);
    return -1;
  }
  return 0;
}

void bagua__launch_free_agents_in_place(bagua__launch_agent_t *a, int n) {
  for (int i = 0; i < n; i++) {
    bagua__launch_argv_free(&a[i].argv);
    free(a[i].host);
    free(a[i].node_id);
    free(a[i].stdin_data);
    free(a[i].agent_path);
    free(a[i].endpoint);
    if (a[i].err_fd >= 0) close(a[i].err_fd);
    memset(&a[i], 0, sizeof(a[i]));
    a[i].err_fd = -1;
  }
}

void bagua__launch_free_agents(bagua__launch_agent_t *a, int n) {
  if (!a) return;
  bagua__launch_free_agents_in_place(a, n);
  free(a);
}

int bagua__launch_export_vars(const bagua__launch_config_t *cfg) {
  /* Resolved by the launcher (flag > environment > INI), read by the agent from its
   * environment. */
  if (setenv("BAGUA_ETCD_TIMEOUT_MS", cfg->v[LS_ETCD_TIMEOUT_MS].s, 1) != 0) return -1;
  const bagua__launch_var_t *lists[2] = {cfg->algo, cfg->env};
  int counts[2] = {cfg->nalgo, cfg->nenv};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < counts[k]; i++) {
      const bagua__launch_var_t *v = &lists[k][i];
      if (env_keeps(v)) continue; /* environment > INI for registry parameters */
      if (setenv(v->name, v->value, 1) != 0) return -1;
    }
  return 0;
}

/*
 * A pipe whose read end yields `len` bytes and then end-of-file: the data is written before
 * the agent starts, so the launcher never blocks on a slow remote command. Returns the read
 * end, or -1 with a message.
 */
static int stdin_pipe(const char *data, size_t len, char *err, size_t errlen) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    return -1;
  }
  /* A pipe holds 64 KiB by default; grow it for a large environment (up to the system's
   * pipe-max-size, 1 MiB by default). */
  if (len > 65536) (void)fcntl(p[1], F_SETPIPE_SZ, (int)(len < (1 << 30) ? len : (1 << 30)));
  int cap = fcntl(p[1], F_GETPIPE_SZ);
  if (cap < 0 || (size_t)cap < len) {
    snprintf(err, errlen,
             "the [env] and -x variables take %zu bytes, more than a pipe holds (%d); accepted: "
             "fewer or shorter variables",
             len, cap);
    goto fail;
  }
  for (size_t o = 0; o < len;) {
    ssize_t w = write(p[1], data + o, len - o);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(err, errlen, "writing the agent's stdin: %s", strerror(errno));
      goto fail;
    }
    o += (size_t)w;
  }
  close(p[1]);
  return p[0];
fail:
  close(p[0]);
  close(p[1]);
  return -1;
}

int bagua__launch_pump_stderr(bagua__launch_agent_t *a) {
  char buf[4096];
  while (a->err_fd >= 0) {
    ssize_t r = read(a->err_fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return 0;
    if (r <= 0) {
      close(a->err_fd);
      a->err_fd = -1;
      break;
    }
    /* One write per read keeps the agent's lines whole on a shared console. */
    for (ssize_t o = 0; o < r;) {
      ssize_t w = write(STDERR_FILENO, buf + o, (size_t)(r - o));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      o += w;
    }
    for (ssize_t i = 0; i < r; i++) {
      if (buf[i] != '\n') {
        if (a->err_part_len + 1 < sizeof(a->err_part)) a->err_part[a->err_part_len++] = buf[i];
        continue;
      }
      if (a->err_part_len == 0) continue;
      a->err_part[a->err_part_len] = '\0';
      snprintf(a->err_line, sizeof(a->err_line), "%s", a->err_part);
      a->err_part_len = 0;
    }
  }
  /* A last line without a newline still counts. */
  if (a->err_part_len > 0) {
    a->err_part[a->err_part_len] = '\0';
    snprintf(a->err_line, sizeof(a->err_line), "%s", a->err_part);
    a->err_part_len = 0;
  }
  return 1;
}

int bagua__launch_start_agent(bagua__launch_agent_t *a, char *err, size_t errlen) {
  pid_t parent = getpid();
  int in = -1, errp[2] = {-1, -1};
  a->err_fd = -1;
  if (a->stdin_len > 0 && (in = stdin_pipe(a->stdin_data, a->stdin_len, err, errlen)) < 0)
    return -1;
  /* A remote command's stderr passes through the launcher: when the host cannot start the
   * agent (ssh: "Could not resolve hostname"), its last line is the job's failure report. */
  if (!a->local && pipe2(errp, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    if (in >= 0) close(in);
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "fork: %s", strerror(errno));
    if (in >= 0) close(in);
    if (errp[0] >= 0) close(errp[0]), close(errp[1]);
    return -1;
  }
  if (pid == 0) {
    /* Own process group: the launcher forwards a terminal's signals exactly once. */
    setpgid(0, 0);
    /* An agent must not outlive the launcher; SIGTERM lets it stop its workers first. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(129);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    int null = in >= 0 ? in : open("/dev/null", O_RDONLY);
    if (null >= 0) {
      dup2(null, 0); /* dup2 clears close-on-exec on the copy */
      if (null > 2) close(null);
    }
    if (errp[1] >= 0) dup2(errp[1], STDERR_FILENO);
    execvp(a->argv.v[0], a->argv.v);
    bagua__say("bagua-launch", "cannot run %s: %s", a->argv.v[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  if (in >= 0) close(in);
  if (errp[1] >= 0) {
    close(errp[1]);
    fcntl(errp[0], F_SETFL, fcntl(errp[0], F_GETFL) | O_NONBLOCK);
    a->err_fd = errp[0];
  }
  a->pid = pid;
  a->started = 1;
  return 0;
}

void bagua__launch_print_command(const bagua__launch_agent_t *a, FILE *out) {
  char *line = join_quoted(&a->argv);
  fprintf(out, "%s\n", line ? line : "(out of memory)");
  free(line);
  if (a->stdin_len == 0) return;
  /* Names only: the values stay off command lines; the [env] section above shows those of
   * [env] and -x, secrets masked. */
  fprintf(out, ";   its stdin (--env-stdin):");
  for (size_t o = 0; o < a->stdin_len; o += strlen(a->stdin_data + o) + 1)
    fprintf(out, " %.*s", (int)strcspn(a->stdin_data + o, "="), a->stdin_data + o);
  fprintf(out, "\n");
}
