/*
 * Resolution of the launcher configuration: command line > environment > INI > default.
 *
 * Every layer has already been validated when it was read, so resolution only picks the
 * highest layer per setting and checks the rules that involve several settings (hosts versus
 * --nnodes, a program to run). The dump prints each value with where it came from; the golden
 * parser tests compare that text.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bagua/error.h"
#include "bagua/params.h"
#include "common/file.h"
#include "common/output.h"
#include "common/params.h"
#include "common/time.h"
#include "agents.h"
#include "discovery.h"
#include "launch.h"
#include "torchrun.h"

/* A fresh job id: "bagua-" and 12 hex digits. A random id by default avoids the stale-state
 * collisions torchrun's fixed default ("none") is known for. */
static void random_job_id(char *out, size_t len) {
  unsigned char r[6];
  if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
    /* getrandom cannot fail for 6 bytes after boot; mix the clocks and pid just in case. */
    uint64_t x =
        (uint64_t)bagua__now_ns() ^ ((uint64_t)bagua__wall_ms() << 20) ^ ((uint64_t)getpid() << 40);
    for (size_t i = 0; i < sizeof(r); i++) r[i] = (unsigned char)(x >> (8 * i));
  }
  snprintf(out, len, "bagua-%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5]);
}

static int copy_value(bagua__launch_value_t *dst, const bagua__launch_value_t *src) {
  *dst = *src;
  dst->s = strdup(src->s ? src->s : "");
  return dst->s ? 0 : -1;
}

static int copy_vars(bagua__launch_var_t **dst, int *ndst, const bagua__launch_var_t *src, int n) {
  *ndst = 0;
  *dst = calloc((size_t)(n ? n : 1), sizeof(**dst));
  if (!*dst) return -1;
  for (int i = 0; i < n; i++) {
    (*dst)[i].origin = src[i].origin;
    (*dst)[i].name = strdup(src[i].name);
    (*dst)[i].key = strdup(src[i].key);
    (*ndst)++;
    /* INI values follow the one quoting rule ("hello world" in quotes is hello world). */
    if (bagua__launch_unquote(src[i].value, &(*dst)[i].value) != 0) return -1;
    if (!(*dst)[i].name || !(*dst)[i].key) return -1;
  }
  return 0;
}

/* The exported variable called `name`, or NULL. */
static bagua__launch_var_t *env_find(bagua__launch_config_t *cfg, const char *name) {
  for (int k = 0; k < cfg->nenv; k++)
    if (strcmp(cfg->env[k].name, name) == 0) return &cfg->env[k];
  return NULL;
}

/* The exported variable called `name`, appended (name set, nothing else) when there is none;
 * NULL when out of memory. */
static bagua__launch_var_t *env_slot(bagua__launch_config_t *cfg, const char *name) {
  bagua__launch_var_t *v = env_find(cfg, name);
  if (v) return v;
  bagua__launch_var_t *nv = realloc(cfg->env, sizeof(*nv) * (size_t)(cfg->nenv + 1));
  if (!nv) return NULL;
  cfg->env = nv;
  v = &nv[cfg->nenv];
  memset(v, 0, sizeof(*v));
  if (!(v->name = strdup(name))) return NULL;
  cfg->nenv++;
  return v;
}

/* -x variables (the command-line layer's env) over the INI's [env]: the same name takes the
 * flag's value, at the INI entry's place. */
static int merge_exports(bagua__launch_config_t *cfg, const bagua__launch_layer_t *cli) {
  for (int i = 0; i < cli->nenv; i++) {
    const bagua__launch_var_t *x = &cli->env[i];
    bagua__launch_var_t *v = env_slot(cfg, x->name);
    if (!v || (!v->key && !(v->key = strdup(x->key)))) return -1;
    char *copy = strdup(x->value);
    if (!copy) return -1;
    free(v->value);
    v->value = copy;
    v->origin = x->origin;
  }
  return 0;
}

/*
 * --net-plugin / [job] net_plugin: which NCCL network plugin the workers' NCCL loads, passed
 * as NCCL_NET_PLUGIN like any exported variable (a user's own NCCL_NET_PLUGIN in [env] or -x
 * gives way to the setting, which is the more specific). "bagua" is Bagua-Net
 * (docs/net-plugin.md): the libnccl-net-bagua.so built or installed next to bagua-launch by
 * absolute path when this machine has one, else the name, which NCCL resolves through the
 * library path. "none" turns plugins off; any other value is a path or a plugin name.
 */
static int net_plugin_export(bagua__launch_config_t *cfg, char *err, size_t errlen) {
  const bagua__launch_value_t *np = &cfg->v[LS_NET_PLUGIN];
  if (!np->s[0]) return 0;
  char value[PATH_MAX];
  snprintf(value, sizeof(value), "%s", np->s);
  if (np->s[0] == '/') {
    if (access(np->s, R_OK) != 0) {
      snprintf(err, errlen,
               "bagua-launch: net_plugin %s (%s) cannot be read: %s; accepted: bagua, none, a "
               "plugin name, or the path of a readable libnccl-net-*.so",
               np->s, np->origin.text, strerror(errno));
      return LAUNCH_EXIT_USAGE;
    }
  } else if (strspn(np->s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
             strlen(np->s)) {
    snprintf(err, errlen,
             "bagua-launch: net_plugin \"%s\" (%s) is not a plugin name; accepted: bagua, none, "
             "a name of letters, digits, '_' and '-', or an absolute path",
             np->s, np->origin.text);
    return LAUNCH_EXIT_USAGE;
  } else if (strcmp(np->s, "bagua") == 0) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      const char *dir = dirname(self);
      const char *rel[] = {"../net-plugin", "../lib", "."};
      for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        char cand[PATH_MAX + 64], real[PATH_MAX];
        snprintf(cand, sizeof(cand), "%s/%s/libnccl-net-bagua.so", dir, rel[i]);
        if (access(cand, R_OK) == 0 && realpath(cand, real)) {
          snprintf(value, sizeof(value), "%s", real);
          break;
        }
      }
    }
  }
  bagua__launch_var_t *v = env_slot(cfg, "NCCL_NET_PLUGIN");
  if (!v) return -1;
  free(v->key);
  free(v->value);
  v->key = strdup("net_plugin");
  v->value = strdup(value);
  v->origin = np->origin;
  if (!v->key || !v->value) return -1;
  /* NCCL 2.28 unloads an external plugin when the last communicator using it is destroyed and
   * then cannot load it again (NVIDIA/nccl#1978), so the communicator an elastic round or a
   * torch process group rebuilds would fail. A starting reference count of 1 keeps it loaded;
   * a user's own NCCL_NET_PLUGIN_REF_COUNT is left alone. */
  if (strcmp(value, "none") == 0 || env_find(cfg, "NCCL_NET_PLUGIN_REF_COUNT")) return 0;
  if (!(v = env_slot(cfg, "NCCL_NET_PLUGIN_REF_COUNT"))) return -1;
  v->key = strdup("net_plugin");
  v->value = strdup("1");
  v->origin = np->origin;
  return v->key && v->value ? 0 : -1;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/*
 * The interpreter line of a script this machine can read ("#!/usr/bin/python3", "#!/usr/bin/env
 * python3"), split into its (at most two, as the kernel does) words, when it names a python;
 * else no words. The script's author chose that interpreter (the one with torch installed, say),
 * so it beats a bare "python3" from PATH; --python beats both.
 */
static int shebang_python(const char *path, bagua__launch_argv_t *out) {
  char line[256];
  char what[600];
  /* Only a regular file has a #! line worth reading; a FIFO must not hold bagua-launch in
   * open() (the program itself is checked where it is run). */
  int fd = bagua__open_regular(path, O_RDONLY, 0, what, sizeof(what));
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return 0;
  }
  int ok = fgets(line, sizeof(line), f) != NULL;
  fclose(f);
  if (!ok || strncmp(line, "#!", 2) != 0 || !strchr(line, '\n') || !strstr(line, "python"))
    return 0;
  line[strcspn(line, "\r\n")] = '\0';
  char *p = line + 2;
  p += strspn(p, " \t");
  size_t n = strcspn(p, " \t");
  char *arg = p[n] ? p + n + 1 : p + n;
  p[n] = '\0';
  arg += strspn(arg, " \t");
  size_t m = strlen(arg);
  while (m > 0 && (arg[m - 1] == ' ' || arg[m - 1] == '\t')) arg[--m] = '\0';
  if (!*p || bagua__launch_argv_push(out, p) != 0) return -1;
  if (*arg && bagua__launch_argv_push(out, arg) != 0) return -1;
  return 0;
}

/*
 * The argument vector the agents run. A .py program runs under an interpreter (torchrun users
 * type "bagua-launch train.py": a script without its execute bit, or not in PATH, would
 * otherwise fail): --python when given, else the interpreter its #! line names when this
 * machine can read it, else python3. -m MODULE runs "python -m MODULE"; --no-python runs the
 * program as it is.
 */
static int program_argv(const bagua__launch_layer_t *cli, const bagua__launch_layer_t *pl,
                        bagua__launch_config_t *cfg, char *err, size_t errlen) {
  const char *python = cfg->v[LS_PYTHON].s;
  int module = pl == cli && cli->module;
  char *prog = NULL;
  if (cli->module && cli->no_python) {
    snprintf(err, errlen,
             "bagua-launch: -m runs a module with the interpreter, --no-python runs the program "
             "as it is; accepted: one of them");
    return -1;
  }
  if (cli->module && pl != cli) {
    snprintf(err, errlen,
             "bagua-launch: -m needs a module name; accepted: bagua-launch [options] -m MODULE "
             "[ARGS...]");
    return -1;
  }
  /* The INI's program = "my prog" follows the quoting rule (args were split by it already). */
  if (pl != cli ? bagua__launch_unquote(pl->program.v[0], &prog) != 0
                : !(prog = strdup(pl->program.v[0])))
    goto oom;
  /* torchrun's --run-path runs the script under the interpreter, --no-python or not. */
  int no_python = cli->no_python && !cli->torchrun.run_path;
  int interp = module || (!no_python && ends_with(prog, ".py"));
  int from_shebang = 0;
  if (interp && !module && cfg->v[LS_PYTHON].origin.kind == LO_DEFAULT) {
    if (shebang_python(prog, &cfg->program) != 0) goto oom;
    from_shebang = cfg->program.n > 0;
  }
  if (interp && !from_shebang && bagua__launch_argv_push(&cfg->program, python) != 0) goto oom;
  if (module && bagua__launch_argv_push(&cfg->program, "-m") != 0) goto oom;
  if (bagua__launch_argv_push(&cfg->program, prog) != 0) goto oom;
  for (int i = 1; i < pl->program.n; i++)
    if (bagua__launch_argv_push(&cfg->program, pl->program.v[i]) != 0) goto oom;
  free(prog);
  cfg->program_origin = pl->program_origin;
  if (from_shebang)
    bagua__launch_origin_set(&cfg->program_origin, pl->program_origin.kind,
                             "%s (.py: run with the interpreter of its #! line)",
                             pl->program_origin.text);
  else if (interp)
    bagua__launch_origin_set(&cfg->program_origin, pl->program_origin.kind,
                             "%s (%s: run with python = %.40s)", pl->program_origin.text,
                             module ? "-m MODULE" : ".py", python);
  return 0;
oom:
  free(prog);
  snprintf(err, errlen, "bagua-launch: out of memory");
  return -1;
}

/* The value of setting `s` from the highest layer that has one, or NULL. */
static const bagua__launch_value_t *pick(const bagua__launch_layer_t *const order[3],
                                         bagua__launch_setting_t s) {
  for (int k = 0; k < 3; k++)
    if (order[k]->v[s].set) return &order[k]->v[s];
  return NULL;
}

/*
 * Runs the host discovery script once, before anything starts, and takes its hosts (in the
 * order printed; the count beyond MAX of --nnodes is trimmed once nnodes is resolved). A
 * failing script stops the launch with exit 2, as any bad configuration does: at start there
 * are no current hosts to keep.
 */
static int discovery_hosts(const bagua__launch_layer_t *const order[3], bagua__launch_config_t *cfg,
                           char *err, size_t errlen) {
  const bagua__launch_value_t *script = pick(order, LS_DISCOVERY_SCRIPT);
  const bagua__launch_value_t *tv = pick(order, LS_DISCOVERY_TIMEOUT_MS);
  int timeout = tv ? (int)tv->i : atoi(bagua__launch_desc(LS_DISCOVERY_TIMEOUT_MS)->def);
  bagua__discovery_host_t *found = NULL;
  int n = 0;
  char what[LAUNCH_ERR_LEN];
  if (bagua__discovery_once(script->s, timeout, &found, &n, what, sizeof(what)) != 0) {
    snprintf(err, errlen, "bagua-launch: %s (%s)", what, script->origin.text);
    return -1;
  }
  cfg->hosts = calloc((size_t)n, sizeof(*cfg->hosts));
  if (!cfg->hosts) goto oom;
  for (int i = 0; i < n; i++) {
    bagua__launch_host_t *h = &cfg->hosts[i];
    h->name = found[i].name;
    found[i].name = NULL;
    h->nproc = found[i].slots;
    bagua__launch_origin_set(&h->origin, script->origin.kind, "discovery script, line %d",
                             found[i].line);
    cfg->nhosts++;
  }
  bagua__launch_origin_set(&cfg->hosts_origin, script->origin.kind,
                           "host discovery script %.80s (%.60s)", script->s, script->origin.text);
  bagua__discovery_hosts_free(found, n);
  return 0;
oom:
  bagua__discovery_hosts_free(found, n);
  snprintf(err, errlen, "bagua-launch: out of memory");
  return -1;
}

/* Default-origin notes that say what an empty default means. */
static const char *default_note(bagua__launch_setting_t s) {
  switch (s) {
    case LS_JOB_ID:
      return "default (a fresh random id)";
    case LS_ENDPOINT:
      return "default (a private etcd)";
    case LS_AGENT:
      return "default (bagua-agent next to bagua-launch)";
    case LS_NODE_ID:
      return "default (the agent's choice)";
    case LS_NODE_ADDR:
      return "default (the agent's choice)";
    case LS_LOG_DIR:
      return "default (console only)";
    case LS_RDZV_HOST:
      return "default (loopback, or the route to the first remote host)";
    default:
      return "default";
  }
}

int bagua__launch_resolve(const bagua__launch_layer_t *cli, const bagua__launch_layer_t *env,
                          const bagua__launch_layer_t *ini, bagua__launch_config_t *cfg, char *err,
                          size_t errlen) {
  char what[LAUNCH_ERR_LEN];
  const bagua__launch_layer_t *order[3] = {cli, env, ini};
  memset(cfg, 0, sizeof(*cfg));

  /*
   * Hosts come from one source per layer, and the highest layer's source replaces the others
   * as a whole (flag > environment > INI): --hosts, --hostfile or --host-discovery-script on
   * the command line; a Slurm allocation in the environment; [hosts] or host_discovery_script
   * in the INI file. Two sources in one layer are refused, even in a layer another overrides.
   */
  const int cli_disc = cli->v[LS_DISCOVERY_SCRIPT].set, ini_disc = ini->v[LS_DISCOVERY_SCRIPT].set;
  if (cli->hosts_set && cli_disc) {
    snprintf(err, errlen,
             "bagua-launch: --host-discovery-script and %s both give the hosts; accepted: one of "
             "them",
             cli->hosts_origin.text);
    return LAUNCH_EXIT_USAGE;
  }
  if (ini->hosts_set && ini_disc) {
    snprintf(err, errlen,
             "bagua-launch: %s (host_discovery_script) and %s both give the hosts; accepted: one "
             "of them",
             ini->v[LS_DISCOVERY_SCRIPT].origin.text, ini->hosts_origin.text);
    return LAUNCH_EXIT_USAGE;
  }
  const bagua__launch_layer_t *hl = NULL;
  if (cli->hosts_set) {
    hl = cli;
    cfg->hosts_source = LH_LIST;
  } else if (cli_disc) {
    cfg->hosts_source = LH_DISCOVERY;
  } else if (env->hosts_set) {
    hl = env;
    cfg->hosts_source = LH_SLURM;
  } else if (ini_disc) {
    cfg->hosts_source = LH_DISCOVERY;
  } else if (ini->hosts_set) {
    hl = ini;
    cfg->hosts_source = LH_LIST;
  }
  if (cfg->hosts_source == LH_DISCOVERY && discovery_hosts(order, cfg, err, errlen) != 0)
    return LAUNCH_EXIT_USAGE;
  if (hl) {
    cfg->hosts = calloc((size_t)hl->nhosts, sizeof(*cfg->hosts));
    if (!cfg->hosts) goto oom;
    for (int i = 0; i < hl->nhosts; i++) {
      cfg->hosts[i] = hl->hosts[i];
      cfg->hosts[i].name = strdup(hl->hosts[i].name);
      cfg->nhosts++;
      if (!cfg->hosts[i].name) goto oom;
    }
    cfg->hosts_origin = hl->hosts_origin;
  }

  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_value_t *pick = NULL;
    for (int k = 0; k < 3 && !pick; k++)
      if (order[k]->v[s].set) pick = &order[k]->v[s];
    if (pick) {
      if (copy_value(&cfg->v[s], pick) != 0) goto oom;
      continue;
    }
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    char def[64];
    const char *text = d->def;
    const char *note = default_note((bagua__launch_setting_t)s);
    if (s == LS_NNODES && cfg->nhosts > 0) {
      snprintf(def, sizeof(def), "%d:%d", cfg->nhosts, cfg->nhosts);
      text = def;
      note = "default (one node per host)";
    }
    /* An empty default means "none" (a fresh job id, the agent's choice, console only); only
     * a value someone gave is refused for being empty. */
    if (!*text) {
      if (!(cfg->v[s].s = strdup(""))) goto oom;
    } else if (bagua__launch_parse_value((bagua__launch_setting_t)s, text, &cfg->v[s], what,
                                         sizeof(what)) != 0) {
      snprintf(err, errlen, "bagua-launch: internal error: default of %s: %s", d->name, what);
      return LAUNCH_EXIT_USAGE;
    }
    bagua__launch_origin_set(&cfg->v[s].origin, LO_DEFAULT, "%s", note);
  }
  if (cfg->v[LS_JOB_ID].s[0] == '\0') {
    char id[32];
    random_job_id(id, sizeof(id));
    free(cfg->v[LS_JOB_ID].s);
    cfg->v[LS_JOB_ID].s = strdup(id);
    if (!cfg->v[LS_JOB_ID].s) goto oom;
    cfg->job_id_generated = 1;
  }
  /* Slurm's tasks per node are the environment's word on workers per host; nproc_per_node
   * given as a flag or BAGUA_NPROC_PER_NODE is the user's and beats it (flag > environment;
   * BAGUA_NPROC_PER_NODE is the more specific variable). An INI value does not. */
  if (cfg->hosts_source == LH_SLURM && cfg->v[LS_NPROC].origin.kind >= LO_ENV)
    for (int i = 0; i < cfg->nhosts; i++) {
      cfg->hosts[i].nproc = 0;
      bagua__launch_origin_set(&cfg->hosts[i].origin, LO_ENV, "SLURM_JOB_NODELIST, slots %s",
                               cfg->v[LS_NPROC].origin.text);
    }
  /* Inside a Slurm allocation the agents are job steps, unless a remote command was given. */
  if (cfg->hosts_source == LH_SLURM && cfg->v[LS_REMOTE_CMD].origin.kind == LO_DEFAULT) {
    free(cfg->v[LS_REMOTE_CMD].s);
    if (!(cfg->v[LS_REMOTE_CMD].s = strdup(LAUNCH_SLURM_REMOTE_CMD))) goto oom;
    bagua__launch_origin_set(&cfg->v[LS_REMOTE_CMD].origin, LO_DEFAULT,
                             "default inside a Slurm allocation (%.100s)", cfg->hosts_origin.text);
  }
  /* A discovery script may report more hosts than MAX: the first MAX (the order printed) get
   * agents, the others wait for a place (a later run of the script, in an elastic job). */
  if (cfg->hosts_source == LH_DISCOVERY && cfg->nhosts > cfg->v[LS_NNODES].i2) {
    int keep = (int)cfg->v[LS_NNODES].i2;
    cfg->hosts_waiting = calloc((size_t)(cfg->nhosts - keep), sizeof(char *));
    if (!cfg->hosts_waiting) goto oom;
    for (int i = keep; i < cfg->nhosts; i++)
      cfg->hosts_waiting[cfg->nhosts_waiting++] = cfg->hosts[i].name;
    cfg->nhosts = keep;
  }
  for (int i = 0; i < cfg->nhosts; i++) {
    if (cfg->hosts[i].nproc == 0) cfg->hosts[i].nproc = (int)cfg->v[LS_NPROC].i;
    cfg->hosts[i].local = bagua__launch_host_is_local(cfg->hosts[i].name);
  }

  /* --standalone (torchrun's spelling): a private etcd, whatever the environment says. */
  if (cli->standalone) {
    if (cli->v[LS_ENDPOINT].set) {
      snprintf(err, errlen,
               "bagua-launch: --standalone asks for a private etcd but --rdzv-endpoint names one; "
               "accepted: one of them");
      return LAUNCH_EXIT_USAGE;
    }
    free(cfg->v[LS_ENDPOINT].s);
    if (!(cfg->v[LS_ENDPOINT].s = strdup(""))) goto oom;
    bagua__launch_origin_set(&cfg->v[LS_ENDPOINT].origin, LO_FLAG, "--standalone (a private etcd)");
  }

  int tr_rc = bagua__launch_torchrun_resolve(cli, cfg, err, errlen);
  if (tr_rc != 0) return tr_rc;

  /* The program: the command line's replaces the INI's [job] program and args. */
  const bagua__launch_layer_t *pl = cli->program.n ? cli : ini->program.n ? ini : NULL;
  if (!pl) {
    snprintf(err, errlen,
             "bagua-launch: %s; accepted: bagua-launch [options] PROGRAM [ARGS...], "
             "bagua-launch [options] -m MODULE [ARGS...], or program = PATH in [job] of the "
             "--config file",
             cli->module ? "-m needs a module name" : "no program to run");
    return LAUNCH_EXIT_USAGE;
  }
  if (program_argv(cli, pl, cfg, err, errlen) != 0) return LAUNCH_EXIT_USAGE;

  if (copy_vars(&cfg->algo, &cfg->nalgo, ini->algo, ini->nalgo) != 0) goto oom;
  if (copy_vars(&cfg->env, &cfg->nenv, ini->env, ini->nenv) != 0) goto oom;
  if (merge_exports(cfg, cli) != 0) goto oom;
  int np_rc = net_plugin_export(cfg, err, errlen);
  if (np_rc < 0) goto oom;
  if (np_rc > 0) return np_rc;
  if (cli->config_path && !(cfg->config_path = strdup(cli->config_path))) goto oom;

  /* Rules across settings. */
  const bagua__launch_value_t *nn = &cfg->v[LS_NNODES];
  if (cfg->nhosts > nn->i2) {
    snprintf(err, errlen,
             "bagua-launch: %s lists %d agents but nnodes %s (%s) allows at most %lld; accepted: "
             "at most MAX host entries",
             cfg->hosts_origin.text, cfg->nhosts, nn->s, nn->origin.text, (long long)nn->i2);
    return LAUNCH_EXIT_USAGE;
  }
  /* Before anything starts: a secret must not meet a terminal-allocating remote command. */
  if (bagua__launch_check_remote_secrets(cfg, err, errlen) != 0) return LAUNCH_EXIT_USAGE;
  static const bagua__launch_setting_t single[] = {LS_NODE_ID, LS_NODE_ADDR};
  for (size_t k = 0; k < sizeof(single) / sizeof(single[0]); k++) {
    const bagua__launch_value_t *v = &cfg->v[single[k]];
    if (cfg->nhosts > 1 && v->s[0]) {
      const bagua__launch_desc_t *d = bagua__launch_desc(single[k]);
      snprintf(err, errlen,
               "bagua-launch: %s (%s) names a single agent but %s lists %d; accepted: %s "
               "without hosts, or one host",
               d->name, v->origin.text, cfg->hosts_origin.text, cfg->nhosts, d->flag);
      return LAUNCH_EXIT_USAGE;
    }
  }
  return 0;
oom:
  snprintf(err, errlen, "bagua-launch: out of memory");
  return LAUNCH_EXIT_USAGE;
}

int bagua__launch_configure(int argc, char **argv, bagua__launch_config_t *cfg, char *err,
                            size_t errlen) {
  bagua__launch_layer_t cli = {0}, env = {0}, ini = {0};
  int rc;
  memset(cfg, 0, sizeof(*cfg));
  err[0] = '\0';
  rc = bagua__launch_parse_cli(argc, argv, &cli, err, errlen);
  if (rc != 0) goto out;
  if (cli.help || cli.version || cli.print_params) {
    cfg->help = cli.help;
    cfg->version = cli.version;
    cfg->print_params = cli.print_params;
    goto out;
  }
  /* A registry variable with a bad value stops everything, as it would stop the workers. */
  if (bagua__params_check() != BAGUA_OK) {
    snprintf(err, errlen, "bagua-launch: %s", bagua_last_error());
    rc = LAUNCH_EXIT_USAGE;
    goto out;
  }
  rc = bagua__launch_read_env(&env, err, errlen);
  if (rc != 0) goto out;
  if (cli.config_path) {
    rc = bagua__launch_read_ini(cli.config_path, &ini, err, errlen);
    if (rc != 0) goto out;
  }
  rc = bagua__launch_resolve(&cli, &env, &ini, cfg, err, errlen);
  cfg->dry_run = cli.dry_run;
out:
  if (rc != 0) bagua__launch_config_free(cfg);
  bagua__launch_layer_free(&cli);
  bagua__launch_layer_free(&env);
  bagua__launch_layer_free(&ini);
  return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Dump                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static void quoted_argv(const bagua__launch_argv_t *a, FILE *out) {
  for (int i = 0; i < a->n; i++) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (bagua__launch_shell_quote(a->v[i], &buf, &len, &cap) == 0)
      fprintf(out, "%s%s", i ? " " : "", buf);
    free(buf);
  }
}

void bagua__launch_dump(const bagua__launch_config_t *cfg, FILE *out) {
  const char *section = "";
  fprintf(out, "; bagua-launch configuration: value ; where it came from\n");
  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    if (strcmp(section, d->section) != 0) {
      section = d->section;
      fprintf(out, "[%s]\n", section);
    }
    /* Discovery settings are shown always; with a script that is not used, it says why. */
    const int disc =
        s == LS_DISCOVERY_SCRIPT || s == LS_DISCOVERY_INTERVAL_MS || s == LS_DISCOVERY_TIMEOUT_MS;
    const int has_script = cfg->v[LS_DISCOVERY_SCRIPT].s[0] != '\0';
    fprintf(
        out, "%-18s = %-28s ; %s%s\n", d->name, cfg->v[s].s, cfg->v[s].origin.text,
        disc && has_script && cfg->hosts_source != LH_DISCOVERY
            ? " (not used: the hosts come from a higher layer)"
        : s == LS_DISCOVERY_INTERVAL_MS && has_script && cfg->v[LS_NNODES].i == cfg->v[LS_NNODES].i2
            ? " (not used: the job is not elastic, the script runs once)"
            : "");
  }
  fprintf(out, "[hosts]\n");
  /* Lists given as such show their origin per host; a script or Slurm is named once more. */
  if (cfg->hosts_source == LH_DISCOVERY || cfg->hosts_source == LH_SLURM)
    fprintf(out, "; from %s\n", cfg->hosts_origin.text);
  if (cfg->nhosts == 0) fprintf(out, "; none: one local agent\n");
  for (int i = 0; i < cfg->nhosts; i++)
    fprintf(out, "%-18s = %-28d ; %s%s\n", cfg->hosts[i].name, cfg->hosts[i].nproc,
            cfg->hosts[i].origin.text, cfg->hosts[i].local ? " (local)" : "");
  for (int i = 0; i < cfg->nhosts_waiting; i++)
    fprintf(out, "; %s waits: nnodes %s allows %lld agents\n", cfg->hosts_waiting[i],
            cfg->v[LS_NNODES].s, (long long)cfg->v[LS_NNODES].i2);
  const struct {
    const char *name;
    const bagua__launch_var_t *v;
    int n;
  } lists[] = {{"algorithm", cfg->algo, cfg->nalgo}, {"env", cfg->env, cfg->nenv}};
  for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++) {
    fprintf(out, "[%s]\n", lists[k].name);
    if (lists[k].n == 0) fprintf(out, "; none\n");
    for (int i = 0; i < lists[k].n; i++) {
      const bagua__launch_var_t *v = &lists[k].v[i];
      /* A registry variable already set in the environment keeps that value. */
      const char *env = v->origin.kind == LO_FLAG ? NULL : bagua_param_get(v->name);
      /* A registry secret's value is never printed: only that it is set, and its length. */
      const int masked = bagua__param_name_is_secret(v->name);
      char value[64], won[64];
      snprintf(value, sizeof(value), "<secret, %zu characters>", strlen(v->value));
      snprintf(won, sizeof(won), "<secret, %zu characters>", env ? strlen(env) : 0);
      fprintf(out, "%-18s = %-28s ; %s%s%s%s\n", v->name, masked ? value : v->value, v->origin.text,
              env ? " (environment wins: " : "", env ? (masked ? won : env) : "", env ? ")" : "");
    }
  }
  fprintf(out, "[program]\n%-18s = ", "argv");
  quoted_argv(&cfg->program, out);
  fprintf(out, " ; %s\n", cfg->program_origin.text);
}

void bagua__launch_usage(FILE *out) {
  fprintf(out,
          "Usage: bagua-launch [options] PROGRAM [ARGS...]\n"
          "       bagua-launch status --rdzv-endpoint E --job-id J [--json]\n"
          "       bagua-launch list --rdzv-endpoint E [--json]\n"
          "\n"
          "Starts one bagua-agent per node (here, or on each --hosts entry through --remote-cmd)\n"
          "and exits with the job's root-cause exit code. Without --rdzv-endpoint it runs a\n"
          "private etcd for the job and removes it afterwards. Options stop at the first word\n"
          "that is not an option, or after --. status and list (first word only; -- status\n"
          "runs a program named status) read a running job's state from etcd\n"
          "(docs/observability.md).\n"
          "\n"
          "Precedence: flag > environment (BAGUA_*) > --config INI file > default.\n"
          "torchrun's command lines work too: underscores (--nproc_per_node), abbreviations\n"
          "(--nnode=1), --rdzv_id (--job-id), --standalone, --rdzv_backend (c10d and static\n"
          "across nodes: the node at the endpoint's or --master_addr's address hosts the job's\n"
          "etcd), --node_rank, --master_addr, --master_port, --rdzv_conf, --role, --run_path,\n"
          "--tee, --redirects (with --log-dir), --monitor_interval and --start_method (no\n"
          "effect) (docs/launcher.md, \"Coming from torchrun\").\n"
          "\n");
  const char *section = "";
  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    if (strcmp(section, d->section) != 0) {
      section = d->section;
      fprintf(out, "%s options ([%s] in the INI file):\n",
              strcmp(section, "job") == 0 ? "Job" : "Rendezvous", section);
    }
    char left[64];
    snprintf(left, sizeof(left), "  %s %s", d->flag, d->metavar);
    bagua__print_wrapped(out, left, 33, 100, d->help);
    /* Defaults and variables on a second line keep the help within 100 columns. */
    if (d->def[0] || d->env) {
      fprintf(out, "  %-30s", "");
      if (d->def[0]) fprintf(out, " default: %s", d->def);
      if (d->env) fprintf(out, "%s environment: %s", d->def[0] ? ";" : "", d->env);
      fprintf(out, "\n");
    }
  }
  fprintf(out,
          "Hosts ([hosts] in the INI file: one HOST = NPROC line per agent):\n"
          "  %-30s one agent per entry; NPROC defaults to --nproc-per-node\n"
          "  %-30s \"HOST[:NPROC]\" or \"HOST slots=NPROC\" lines, # comments\n"
          "  Or --host-discovery-script (above), or, inside a Slurm allocation (SLURM_JOB_ID and\n"
          "  SLURM_JOB_NODELIST set), the allocation's nodes, started with srun. One source:\n"
          "  a flag beats Slurm's variables, which beat the INI file.\n"
          "Programs and environment:\n"
          "  %-30s run python -m MODULE (ends the options; ARGS follow)\n"
          "  %-30s run a .py program as it is (default: with --python)\n"
          "  %-30s give every worker NAME (its value here, or VALUE); repeatable\n"
          "  %-30s a private etcd (torchrun's spelling; the default anyway)\n"
          "  %-30s rank 0 prints each algorithm's predicted step time (BAGUA_ADVISE=1)\n"
          "  %-30s tune bucket size, hierarchical, streams and segment in the first\n"
          "  %-30s steps (BAGUA_AUTOTUNE=1 for every worker; docs/autotune.md)\n"
          "Other:\n"
          "  %-30s INI file with [job], [rendezvous], [algorithm], [hosts], [env]\n"
          "  %-30s print the configuration and the agent commands; start nothing\n"
          "  %-30s print every BAGUA_* parameter (name, default, accepted, current)\n"
          "  %-30s print the version\n"
          "  %-30s print this help\n"
          "\n"
          "Exit status: 0 success; the root-cause worker's exit code (128+N for signal N);\n"
          "2 usage or configuration error; 3 rendezvous failure (etcd unreachable);\n"
          "128+N when bagua-launch itself was stopped by signal N (130 for Ctrl-C).\n"
          "See docs/launcher.md.\n",
          "--hosts HOST[:NPROC],...", "--hostfile FILE", "-m MODULE", "--no-python",
          "-x NAME[=VALUE]", "--standalone", "--advise", "--autotune", "", "--config FILE",
          "--dry-run", "--print-params", "--version", "--help");
}
