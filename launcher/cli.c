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

/* Options that are not scalar settings. */
typedef enum {
  OPT_CONFIG,
  OPT_HOSTS,
  OPT_HOSTFILE,
  OPT_HELP,
  OPT_VERSION,
  OPT_PRINT,
  OPT_DRY
} opt_t;

static const struct {
  const char *flag;
  opt_t opt;
  int takes_value;
} k_opts[] = {
    {"--config", OPT_CONFIG, 1},      {"--hosts", OPT_HOSTS, 1}, {"--hostfile", OPT_HOSTFILE, 1},
    {"--help", OPT_HELP, 0},          {"-h", OPT_HELP, 0},       {"--version", OPT_VERSION, 0},
    {"--print-params", OPT_PRINT, 0}, {"--dry-run", OPT_DRY, 0},
};
#define NOPTS ((int)(sizeof(k_opts) / sizeof(k_opts[0])))

/* A known flag that starts with `given`, when exactly one does (for "did you mean"). */
static const char *suggest(const char *given) {
  const char *hit = NULL;
  int n = 0;
  size_t len = strlen(given);
  if (len < 4) return NULL;
  for (int s = 0; s < LS__COUNT; s++) {
    const char *f = bagua__launch_desc((bagua__launch_setting_t)s)->flag;
    if (strncmp(f, given, len) == 0) hit = f, n++;
  }
  for (int i = 0; i < NOPTS; i++)
    if (strncmp(k_opts[i].flag, given, len) == 0) hit = k_opts[i].flag, n++;
  return n == 1 ? hit : NULL;
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
    for (char *p = flag + 2; *p; p++)
      if (*p == '_') *p = '-';
    const char *value = eq ? eq + 1 : NULL;

    int setting = -1, opt = -1;
    for (int s = 0; s < LS__COUNT && setting < 0; s++)
      if (strcmp(bagua__launch_desc((bagua__launch_setting_t)s)->flag, flag) == 0) setting = s;
    for (int k = 0; k < NOPTS && setting < 0 && opt < 0; k++)
      if (strcmp(k_opts[k].flag, flag) == 0) opt = k;
    if (setting < 0 && opt < 0) {
      const char *hint = suggest(flag);
      if (hint)
        snprintf(err, errlen,
                 "bagua-launch: unknown option \"%s\" (did you mean %s?); accepted: the options "
                 "listed by bagua-launch --help",
                 arg, hint);
      else
        snprintf(err, errlen,
                 "bagua-launch: unknown option \"%s\"; accepted: the options listed by "
                 "bagua-launch --help",
                 arg);
      return LAUNCH_EXIT_USAGE;
    }
    int takes_value = setting >= 0 || k_opts[opt].takes_value;
    const char *metavar =
        setting >= 0 ? bagua__launch_desc((bagua__launch_setting_t)setting)->metavar : "VALUE";
    if (!takes_value && value) {
      snprintf(err, errlen, "bagua-launch: %s takes no value; accepted: %s alone", flag, flag);
      return LAUNCH_EXIT_USAGE;
    }
    if (takes_value && !value) {
      if (i + 1 >= argc) {
        if (opt >= 0) metavar = k_opts[opt].opt == OPT_HOSTS ? "HOST[:NPROC],..." : "FILE";
        snprintf(err, errlen, "bagua-launch: %s needs a value; accepted: %s %s", flag, flag,
                 metavar);
        return LAUNCH_EXIT_USAGE;
      }
      value = argv[++i];
    }
    if (setting >= 0) {
      bagua__launch_value_t *v = &l->v[setting];
      if (bagua__launch_parse_value((bagua__launch_setting_t)setting, value, v, what,
                                    sizeof(what)) != 0) {
        snprintf(err, errlen, "bagua-launch: %s: %s", flag, what);
        return LAUNCH_EXIT_USAGE;
      }
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
    }
  }
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
    if (!text) continue;
    if (bagua__launch_parse_value((bagua__launch_setting_t)s, text, &l->v[s], what, sizeof(what)) !=
        0) {
      snprintf(err, errlen, "bagua-launch: environment %s: %s", d->env, what);
      return LAUNCH_EXIT_USAGE;
    }
    bagua__launch_origin_set(&l->v[s].origin, LO_ENV, "environment %s", d->env);
  }
  return 0;
}
