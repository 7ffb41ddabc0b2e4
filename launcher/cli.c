/*
 * Command-line layer: bagua-launch [options] PROGRAM [ARGS...].
 *
 * Options stop at the first word that is not an option (the program) or after "--", so the
 * program's own flags are never taken for ours. "--flag value" and "--flag=value" are both
 * accepted, and so is the underscore spelling torchrun users type ("--nproc_per_node").
 */
#include <stdlib.h>
#include <string.h>

#include "bagua/params.h"
#include "launch.h"
#include "slurm.h"
#include "torchrun.h"

/* Options that are not scalar settings. */
typedef enum {
  OPT_CONFIG,
  OPT_HOSTS,
  OPT_HOSTFILE,
  OPT_HELP,
  OPT_VERSION,
  OPT_PRINT,
  OPT_DRY,
  OPT_EXPORT,
  OPT_MODULE,
  OPT_NO_PYTHON,
  OPT_STANDALONE,
  OPT_ADVISE,
  OPT_AUTOTUNE
} opt_t;

static const struct {
  const char *flag;
  opt_t opt;
  int takes_value;
} k_opts[] = {
    {"--config", OPT_CONFIG, 1},
    {"--hosts", OPT_HOSTS, 1},
    {"--hostfile", OPT_HOSTFILE, 1},
    {"--help", OPT_HELP, 0},
    {"-h", OPT_HELP, 0},
    {"--version", OPT_VERSION, 0},
    {"--print-params", OPT_PRINT, 0},
    {"--dry-run", OPT_DRY, 0},
    {"-x", OPT_EXPORT, 1},
    /* -m MODULE takes the module and ends the options, as python's own -m does; torchrun's
     * "-m" and "--module" are switches that make the program word a module: both mean the
     * same when the word after them is not an option. */
    {"-m", OPT_MODULE, 0},
    {"--module", OPT_MODULE, 0},
    {"--no-python", OPT_NO_PYTHON, 0},
    {"--standalone", OPT_STANDALONE, 0},
    /* The advisor (docs/advisor.md): the same as -x BAGUA_ADVISE=1. */
    {"--advise", OPT_ADVISE, 0},
    {"--autotune", OPT_AUTOTUNE, 0},
};
#define NOPTS ((int)(sizeof(k_opts) / sizeof(k_opts[0])))

/*
 * Spellings from torchrun, mpirun and Horovod: an alias is read as our flag; a hint refuses
 * the flag and names what to use instead (what it set is done another way here). The table in
 * docs/launcher.md ("Coming from torchrun, mpirun or Horovod") lists them all.
 */
static const struct {
  const char *flag; /* normalised: "--rdzv-id" stands for --rdzv_id too */
  const char *alias;
  const char *hint;
  const char *tool; /* whose spelling an alias is, for the origin ("torchrun's --rdzv-id") */
} k_foreign[] = {
    {"--rdzv-id", "--job-id", NULL, "torchrun"},
    {"--local-addr", "--node-addr", NULL, "torchrun"},
    {"--max-nodes", NULL, "accepted: --nnodes MIN:MAX", NULL},
    {"--min-nodes", NULL, "accepted: --nnodes MIN:MAX", NULL},
    {"-np", NULL, "accepted: --hosts HOST:N,... (workers per host) or --nproc-per-node N", NULL},
    {"-n", NULL, "accepted: --hosts HOST:N,... (workers per host) or --nproc-per-node N", NULL},
    {"-H", NULL, "accepted: --hosts HOST[:N],...", NULL},
    {"--host", NULL, "accepted: --hosts HOST[:N],...", NULL},
    /* Horovod elastic (horovodrun): --host-discovery-script is spelled as ours. */
    {"--slots-per-host", "--nproc-per-node", NULL, "Horovod"},
    {"--elastic-timeout", "--rdzv-timeout", NULL, "Horovod"},
    {"--min-np", NULL,
     "elasticity counts nodes (agents), not processes; accepted: --nnodes MIN:MAX with "
     "--nproc-per-node N (or per-host slots)",
     NULL},
    {"--max-np", NULL,
     "elasticity counts nodes (agents), not processes; accepted: --nnodes MIN:MAX with "
     "--nproc-per-node N (or per-host slots)",
     NULL},
};
#define NFOREIGN ((int)(sizeof(k_foreign) / sizeof(k_foreign[0])))

/*
 * argparse's abbreviations, which torchrun accepts ("--nnode=1"): a long flag that is not one
 * of ours, torchrun's or a foreign spelling, spelled out, stands for the one flag it is the
 * start of. Writes
 * the flag into `flag` and returns 1; 0 when no flag starts so; -1 with the candidates in err
 * when several do.
 */
static int expand_prefix(char *flag, size_t flaglen, const char *arg, char *err, size_t errlen) {
  const char *cand[LS__COUNT + NOPTS + NFOREIGN + 32];
  int n = 0;
  size_t len = strlen(flag);
  if (strncmp(flag, "--", 2) != 0 || len < 3) return 0;
  for (int s = 0; s < LS__COUNT; s++)
    cand[n++] = bagua__launch_desc((bagua__launch_setting_t)s)->flag;
  for (int i = 0; i < NOPTS; i++) cand[n++] = k_opts[i].flag;
  for (int i = 0; i < NFOREIGN; i++) cand[n++] = k_foreign[i].flag;
  for (int i = 0; bagua__launch_torchrun_flag(i) && n < (int)(sizeof(cand) / sizeof(cand[0])); i++)
    cand[n++] = bagua__launch_torchrun_flag(i);
  for (int i = 0; i < n; i++)
    if (strcmp(cand[i], flag) == 0) return 0; /* spelled out */
  const char *hit = NULL;
  char list[512] = "";
  int hits = 0;
  for (int i = 0; i < n; i++) {
    if (strncmp(cand[i], "--", 2) != 0 || strncmp(cand[i], flag, len) != 0) continue;
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= strcmp(cand[j], cand[i]) == 0;
    if (dup) continue;
    size_t used = strlen(list);
    snprintf(list + used, sizeof(list) - used, "%s%s", hits ? ", " : "", cand[i]);
    hit = cand[i];
    hits++;
  }
  if (hits == 0) return 0;
  if (hits > 1) {
    snprintf(err, errlen,
             "bagua-launch: \"%s\" is ambiguous: it starts %s; accepted: one of them, spelled "
             "out",
             arg, list);
    return -1;
  }
  snprintf(flag, flaglen, "%s", hit);
  return 1;
}

int bagua__launch_parse_cli(int argc, char **argv, bagua__launch_layer_t *l, char *err,
                            size_t errlen) {
  char what[LAUNCH_ERR_LEN];
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (arg[0] != '-' || arg[1] == '\0') break; /* the program ("-" alone is a name too) */
    /* Split "--flag=value" and normalise "--flag_name" to "--flag-name". */
    char flag[128];
    const char *eq = strchr(arg, '=');
    size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
    if (flen >= sizeof(flag)) flen = sizeof(flag) - 1;
    memcpy(flag, arg, flen);
    flag[flen] = '\0';
    char typed[128]; /* the flag as typed, for messages */
    memcpy(typed, flag, flen + 1);
    for (char *p = flag + 2; *p; p++)
      if (*p == '_') *p = '-';
    if (expand_prefix(flag, sizeof(flag), typed, err, errlen) < 0) return LAUNCH_EXIT_USAGE;
    const char *value = eq ? eq + 1 : NULL;
    const char *spelled = NULL, *tool = NULL; /* a foreign spelling read as one of ours */
    for (int k = 0; k < NFOREIGN; k++) {
      if (strcmp(k_foreign[k].flag, flag) != 0) continue;
      if (!k_foreign[k].alias) {
        snprintf(err, errlen, "bagua-launch: %s is not a bagua-launch option: %s", arg,
                 k_foreign[k].hint);
        return LAUNCH_EXIT_USAGE;
      }
      spelled = k_foreign[k].flag;
      tool = k_foreign[k].tool;
      snprintf(flag, sizeof(flag), "%s", k_foreign[k].alias);
    }

    int setting = -1, opt = -1;
    for (int s = 0; s < LS__COUNT && setting < 0; s++)
      if (strcmp(bagua__launch_desc((bagua__launch_setting_t)s)->flag, flag) == 0) setting = s;
    for (int k = 0; k < NOPTS && setting < 0 && opt < 0; k++)
      if (strcmp(k_opts[k].flag, flag) == 0) opt = k;
    int tr = -1, tr_takes_value = 0;
    if (setting < 0 && opt < 0) tr = bagua__launch_torchrun_find(flag, &tr_takes_value);
    if (setting < 0 && opt < 0 && tr < 0) {
      snprintf(err, errlen,
               "bagua-launch: unknown option \"%s\"; accepted: the options listed by "
               "bagua-launch --help",
               arg);
      return LAUNCH_EXIT_USAGE;
    }
    int takes_value = setting >= 0 || (opt >= 0 ? k_opts[opt].takes_value : tr_takes_value);
    const char *metavar =
        setting >= 0 ? bagua__launch_desc((bagua__launch_setting_t)setting)->metavar : "VALUE";
    if (!takes_value && value) {
      snprintf(err, errlen, "bagua-launch: %s takes no value; accepted: %s alone", flag, flag);
      return LAUNCH_EXIT_USAGE;
    }
    if (takes_value && !value) {
      if (i + 1 >= argc) {
        if (tr >= 0)
          metavar = "VALUE";
        else if (opt >= 0)
          metavar = k_opts[opt].opt == OPT_HOSTS    ? "HOST[:NPROC],..."
                    : k_opts[opt].opt == OPT_EXPORT ? "NAME[=VALUE]"
                                                    : "FILE";
        snprintf(err, errlen, "bagua-launch: %s needs a value; accepted: %s %s", flag, flag,
                 metavar);
        return LAUNCH_EXIT_USAGE;
      }
      value = argv[++i];
    }
    if (tr >= 0) {
      int rc = bagua__launch_torchrun_apply(tr, typed, value, l, err, errlen);
      if (rc != 0) return rc;
      continue;
    }
    char count[32];
    if (setting == LS_NPROC) {
      /* torchrun's words for a worker count, resolved on this machine. */
      int w = bagua__launch_nproc_word(value, count, sizeof(count), what, sizeof(what));
      if (w < 0) {
        snprintf(err, errlen, "bagua-launch: %s: %s", flag, what);
        return LAUNCH_EXIT_USAGE;
      }
      if (w == 0) value = count;
    }
    if (setting >= 0) {
      bagua__launch_value_t *v = &l->v[setting];
      if (bagua__launch_parse_value((bagua__launch_setting_t)setting, value, v, what,
                                    sizeof(what)) != 0) {
        snprintf(err, errlen, "bagua-launch: %s: %s", flag, what);
        return LAUNCH_EXIT_USAGE;
      }
      if (spelled)
        bagua__launch_origin_set(&v->origin, LO_FLAG, "%s (%s's %s)", flag, tool, spelled);
      else
        bagua__launch_origin_set(&v->origin, LO_FLAG, "%s", flag);
      continue;
    }
    switch (k_opts[opt].opt) {
      case OPT_CONFIG:
        free(l->config_path);
        l->config_path = strdup(value);
        if (!l->config_path) {
          snprintf(err, errlen, "bagua-launch: out of memory");
          return LAUNCH_EXIT_USAGE;
        }
        break;
      case OPT_HOSTS:
      case OPT_HOSTFILE:
        if (l->hosts_set) {
          snprintf(err, errlen,
                   "bagua-launch: %s: hosts were already given by %s; accepted: one --hosts or "
                   "--hostfile",
                   flag, l->hosts_origin.text);
          return LAUNCH_EXIT_USAGE;
        }
        if (k_opts[opt].opt == OPT_HOSTS) {
          if (bagua__launch_parse_hosts(value, l, what, sizeof(what)) != 0) {
            snprintf(err, errlen, "bagua-launch: --hosts \"%s\": %s", value, what);
            return LAUNCH_EXIT_USAGE;
          }
        } else if (bagua__launch_read_hostfile(value, l, what, sizeof(what)) != 0) {
          snprintf(err, errlen, "%s", what);
          return LAUNCH_EXIT_USAGE;
        }
        break;
      case OPT_HELP:
        l->help = 1;
        break;
      case OPT_VERSION:
        l->version = 1;
        break;
      case OPT_PRINT:
        l->print_params = 1;
        break;
      case OPT_DRY:
        l->dry_run = 1;
        break;
      case OPT_EXPORT: {
        int rc = bagua__launch_add_export(l, value, err, errlen);
        if (rc != 0) return rc;
        break;
      }
      case OPT_MODULE:
        l->module = 1;
        /* "-m MODULE": the module is the program word; what follows are its arguments. */
        if (i + 1 < argc && argv[i + 1][0] != '-') {
          i++;
          goto program;
        }
        break;
      case OPT_NO_PYTHON:
        l->no_python = 1;
        break;
      case OPT_STANDALONE:
        l->standalone = 1;
        break;
      case OPT_ADVISE: {
        /* An exported variable like -x, so that remote workers get it too. */
        int rc = bagua__launch_add_export(l, "BAGUA_ADVISE=1", err, errlen);
        if (rc != 0) return rc;
        for (int k = 0; k < l->nenv; k++)
          if (strcmp(l->env[k].name, "BAGUA_ADVISE") == 0)
            bagua__launch_origin_set(&l->env[k].origin, LO_FLAG, "--advise");
        break;
      }
      case OPT_AUTOTUNE: {
        /* --autotune is -x BAGUA_AUTOTUNE=1 (docs/autotune.md): libbagua in every worker
         * tunes itself; the origin names the flag. */
        int rc = bagua__launch_add_export(l, "BAGUA_AUTOTUNE=1", err, errlen);
        if (rc != 0) return rc;
        for (int k = 0; k < l->nenv; k++)
          if (strcmp(l->env[k].name, "BAGUA_AUTOTUNE") == 0)
            bagua__launch_origin_set(&l->env[k].origin, LO_FLAG, "--autotune");
        break;
      }
    }
  }
program:
  for (; i < argc; i++) {
    if (bagua__launch_argv_push(&l->program, argv[i]) != 0) {
      snprintf(err, errlen, "bagua-launch: out of memory");
      return LAUNCH_EXIT_USAGE;
    }
  }
  if (l->program.n > 0) bagua__launch_origin_set(&l->program_origin, LO_FLAG, "command line");
  return 0;
}

int bagua__launch_read_env(bagua__launch_layer_t *l, char *err, size_t errlen) {
  char what[LAUNCH_ERR_LEN];
  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    if (!d->env) continue;
    /* NULL when unset, and for names the registry does not (yet) declare. */
    const char *text = bagua_param_get(d->env);
    /* An empty variable is no value, as for bagua-agent: `BAGUA_JOB_ID= cmd` unsets it. */
    if (!text || !*text) continue;
    if (bagua__launch_parse_value((bagua__launch_setting_t)s, text, &l->v[s], what, sizeof(what)) !=
        0) {
      snprintf(err, errlen, "bagua-launch: environment %s: %s", d->env, what);
      return LAUNCH_EXIT_USAGE;
    }
    bagua__launch_origin_set(&l->v[s].origin, LO_ENV, "environment %s", d->env);
  }
  /* Inside a Slurm allocation the environment also names the hosts (SLURM_JOB_NODELIST). */
  return bagua__slurm_read_env(l, err, errlen);
}
