/*
 * Parsing and validation of single setting values, and of the variables a configuration
 * exports to workers ([env], [algorithm], and -x, which the command line and torchrun's --role
 * add through bagua__launch_add_export).
 *
 * The checks of ids, node counts, hosts, endpoints, integers and word lists are the shared
 * ones of common/validate.h, which bagua-agent applies to its flags too; this file adds what
 * only the launcher has (remote command templates) and what an empty value means here.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/params.h"
#include "common/params.h"
#include "common/validate.h"
#include "common/worker_env.h"
#include "launch.h"

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

/*
 * An empty value given on purpose ("--job-id ''", "log_dir =") is refused rather than read as
 * "not given": an empty job id used to generate a fresh one, which silently split the nodes
 * of a job that meant to share one. Leaving the setting out still means its default.
 */
static int refuse_empty(const bagua__launch_desc_t *d, const char *accepted, char *err,
                        size_t errlen) {
  snprintf(err, errlen, "the value is empty; accepted: %s (leave %s out for %s)", accepted, d->name,
           d->type == LT_ID
               ? (strcmp(d->name, "job_id") == 0 ? "a fresh random id" : "the agent's choice")
           : d->metavar[0] == 'D' ? "console output only"
                                  : "the default");
  return -1;
}

static int check_value(const bagua__launch_desc_t *d, const char *text, int64_t *a, int64_t *b,
                       char *err, size_t errlen) {
  if (!*text && d->type == LT_ID) return refuse_empty(d, BAGUA_ID_ACCEPTED, err, errlen);
  if (!*text && d->type == LT_STR)
    return refuse_empty(d, d->metavar[0] == 'D' ? "a directory" : "a path", err, errlen);
  switch (d->type) {
    case LT_INT:
      return bagua__check_int(text, d->lo, d->hi, a, err, errlen) == BAGUA_OK ? 0 : -1;
    case LT_NNODES:
      return bagua__check_nnodes(text, a, b, err, errlen) == BAGUA_OK ? 0 : -1;
    case LT_ID:
      return bagua__check_id(text, err, errlen) == BAGUA_OK ? 0 : -1;
    case LT_HOST:
      return bagua__check_host(text, err, errlen) == BAGUA_OK ? 0 : -1;
    case LT_LISTEN:
      return bagua__check_listen_addr("", text, err, errlen) == BAGUA_OK ? 0 : -1;
    case LT_ENDPOINTS:
      /* Empty means "start a private etcd". */
      return !*text || bagua__check_endpoints(text, err, errlen) == BAGUA_OK ? 0 : -1;
    case LT_TEMPLATE:
      return check_template(text, err, errlen);
    case LT_CHOICE:
      return bagua__check_choice(text, d->choices ? d->choices : "", err, errlen) == BAGUA_OK ? 0
                                                                                              : -1;
    case LT_STR:
      return 0;
  }
  return 0;
}

int bagua__launch_parse_value(bagua__launch_setting_t s, const char *raw,
                              bagua__launch_value_t *out, char *err, size_t errlen) {
  const bagua__launch_desc_t *d = bagua__launch_desc(s);
  int64_t a = 0, b = 0;
  char norm[64] = "";
  char *text = NULL;
  if (bagua__launch_unquote(raw, &text) != 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  const char *keep = text;
  if (check_value(d, text, &a, &b, err, errlen) != 0) {
    free(text);
    return -1;
  }
  /* Numbers are kept normalised ("+3" is 3, "4" nodes is "4:4"), as the dump shows them. */
  if (d->type == LT_INT) {
    snprintf(norm, sizeof(norm), "%lld", (long long)a);
    keep = norm;
  } else if (d->type == LT_NNODES) {
    snprintf(norm, sizeof(norm), "%lld:%lld", (long long)a, (long long)b);
    keep = norm;
  } else if (d->type == LT_CHOICE) {
    /* The word in its canonical spelling ("Restart" is kept as "restart"), as every other
     * reader of the setting sees it; the value was checked above. */
    (void)bagua__choice_parse(text, d->choices ? d->choices : "", norm, sizeof(norm), err, errlen);
    keep = norm;
  }
  char *copy = strdup(keep);
  free(text);
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

static int check_var(const char *name, const char *value, char *err, size_t errlen);

int bagua__launch_check_var(const char *name, const char *raw, char *err, size_t errlen) {
  /* The value is checked as the workers will see it: unquoted (bagua__launch_unquote). */
  char *value = NULL;
  if (bagua__launch_unquote(raw, &value) != 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int rc = check_var(name, value, err, errlen);
  free(value);
  return rc;
}

static int check_var(const char *name, const char *value, char *err, size_t errlen) {
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
  if (bagua__worker_var_agent_owned(name)) {
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
  if (bagua__param_find(name) >= 0 && bagua_param_validate(name, value, err, errlen) != BAGUA_OK)
    return -1;
  return 0;
}

/*
 * -x NAME (the value of NAME in bagua-launch's environment) or -x NAME=VALUE: one more
 * variable for every worker, local or remote, like mpirun's -x. Checked like an [env] key.
 */
int bagua__launch_add_export(bagua__launch_layer_t *l, const char *spec, char *err, size_t errlen) {
  char what[LAUNCH_ERR_LEN], name[256];
  const char *eq = strchr(spec, '=');
  size_t nl = eq ? (size_t)(eq - spec) : strlen(spec);
  if (nl == 0 || nl >= sizeof(name)) {
    snprintf(err, errlen,
             "bagua-launch: -x \"%.100s\": no variable name; accepted: -x NAME (its value here) "
             "or -x NAME=VALUE",
             spec);
    return LAUNCH_EXIT_USAGE;
  }
  memcpy(name, spec, nl);
  name[nl] = '\0';
  /* Any variable may be forwarded, so this is no registry parameter: read it directly. */
  const char *value = eq ? eq + 1 : getenv(name);
  if (bagua__launch_check_var(name, value ? value : "", what, sizeof(what)) != 0) {
    snprintf(err, errlen, "bagua-launch: -x %s: %s", name, what);
    return LAUNCH_EXIT_USAGE;
  }
  if (!value) {
    snprintf(err, errlen,
             "bagua-launch: -x %s: %s is not set in bagua-launch's environment; accepted: -x "
             "%s=VALUE, or export %s first",
             name, name, name, name);
    return LAUNCH_EXIT_USAGE;
  }
  /* A name given twice takes the later value, as in a shell. */
  bagua__launch_var_t *v = NULL;
  for (int i = 0; i < l->nenv && !v; i++)
    if (strcmp(l->env[i].name, name) == 0) v = &l->env[i];
  if (!v) {
    bagua__launch_var_t *nv = realloc(l->env, sizeof(*nv) * (size_t)(l->nenv + 1));
    if (!nv) goto oom;
    l->env = nv;
    v = &nv[l->nenv++];
    memset(v, 0, sizeof(*v));
    if (!(v->name = strdup(name)) || !(v->key = strdup(name))) goto oom;
  }
  char *copy = strdup(value);
  if (!copy) goto oom;
  free(v->value);
  v->value = copy;
  bagua__launch_origin_set(&v->origin, LO_FLAG, "-x %s", eq ? "NAME=VALUE" : "NAME");
  return 0;
oom:
  snprintf(err, errlen, "bagua-launch: out of memory");
  return LAUNCH_EXIT_USAGE;
}
