/*
 * The BAGUA_* parameter registry. This file is the only place that calls getenv().
 */
#include "params.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bagua/params.h"
#include "validate.h"

typedef enum { PARAM_INT, PARAM_STR } param_type_t;

typedef struct {
  const char *env;
  param_type_t type;
  int64_t idef, lo, hi;
  const char *sdef, *choices;
  const char *help;
} param_desc_t;

#define P_INT(def, lo, hi) PARAM_INT, (def), (lo), (hi), NULL, NULL
#define P_STR(def, lo, hi) PARAM_STR, 0, 0, 0, (def), (hi)
static const param_desc_t g_desc[BAGUA_P__COUNT] = {
#define BAGUA_PARAM(id, env, type, def, lo, hi, help) {env, P_##type(def, lo, hi), help},
#include "params.def"
#undef BAGUA_PARAM
};

/* The secret parameters: params.def's BAGUA_PARAM_SECRET rows. */
static const bagua__param_id_t k_secret[] = {
#define BAGUA_PARAM(id, env, type, def, lo, hi, help)
#define BAGUA_PARAM_SECRET(id) BAGUA_P_##id,
#include "params.def"
#undef BAGUA_PARAM_SECRET
#undef BAGUA_PARAM
};

typedef struct {
  int set;      /* the environment provided a value */
  int bad;      /* the provided value was rejected; the default is in effect */
  int64_t ival; /* parsed integer value */
  const char *sval;
} param_val_t;

static param_val_t g_val[BAGUA_P__COUNT];
/* The canonical spelling of a word parameter whose variable spells it in another case (see
 * canonical()); NULL while the variable's own text is canonical. Freed by the next load. */
static char *g_canon[BAGUA_P__COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Whether `word` (n bytes) is one of the '|'-separated `choices`. The rule, ASCII case
 * ignored, is common/validate.c's, which the tools apply to their flags and INI keys, so that a
 * word means the same wherever it is given. */
static int is_choice(const char *choices, const char *word, size_t n) {
  return bagua__choice_find(choices, word, n) != NULL;
}

/* A list parameter (choices ",a|b|c"): every comma-separated word must be a choice, and the
 * warning names the first one that is not, so that a typo in a long list is found at once.
 * An empty value means the parameter's default. */
static int validate_list(const param_desc_t *d, const char *value, char *err, size_t errlen) {
  const char *choices = d->choices + 1;
  if (!value[0]) return 0;
  for (const char *p = value;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (!is_choice(choices, p, n)) {
      snprintf(err, errlen,
               "%s=\"%s\": \"%.*s\" is not accepted; accepted: a comma-separated list of %s",
               d->env, value, (int)n, p, choices);
      return -1;
    }
    if (!comma) return 0;
    p = comma + 1;
  }
}

/* Validates one value against its descriptor; writes a sentence into err on failure. */
static int validate(const param_desc_t *d, const char *value, int64_t *out, char *err,
                    size_t errlen) {
  if (d->type == PARAM_INT) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0') {
      snprintf(err, errlen, "%s=\"%s\" is not an integer; accepted: an integer in [%lld, %lld]",
               d->env, value, (long long)d->lo, (long long)d->hi);
      return -1;
    }
    if (v < d->lo || v > d->hi) {
      snprintf(err, errlen, "%s=%lld is out of range; accepted: an integer in [%lld, %lld]", d->env,
               v, (long long)d->lo, (long long)d->hi);
      return -1;
    }
    if (out) *out = v;
    return 0;
  }
  if (d->choices && d->choices[0] == ',') return validate_list(d, value, err, errlen);
  if (d->choices && d->choices[0]) {
    if (is_choice(d->choices, value, strlen(value))) return 0;
    snprintf(err, errlen, "%s=\"%s\" is not accepted; accepted values: %s", d->env, value,
             d->choices);
    return -1;
  }
  return 0;
}

/*
 * The value of word parameter `d` as its consumers must see it: the words of its list in their
 * canonical spelling ("Restart" becomes "restart", "Bytegrad,QADAM" "bytegrad,qadam"), so that
 * no consumer has to know that the case was ignored, and none compares it differently. `value`
 * has passed validate(). Returns `value` itself when it is canonical already, else a copy kept
 * in *keep; NULL when that copy cannot be allocated.
 */
static const char *canonical(const param_desc_t *d, const char *value, char **keep) {
  const char *choices = d->choices[0] == ',' ? d->choices + 1 : d->choices;
  size_t len = strlen(value);
  char *out = NULL;
  for (size_t at = 0; at < len;) {
    /* A single word is one item; a list has comma-separated items. */
    size_t n = d->choices[0] == ',' ? strcspn(value + at, ",") : len;
    const char *word = bagua__choice_find(choices, value + at, n);
    if (word && memcmp(word, value + at, n) != 0) {
      if (!out && !(out = strdup(value))) return NULL;
      memcpy(out + at, word, n);
    }
    at += n + 1;
  }
  if (!out) return value;
  *keep = out;
  return out;
}

static void load(void) {
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    const param_desc_t *d = &g_desc[i];
    param_val_t *v = &g_val[i];
    const char *e = getenv(d->env);
    memset(v, 0, sizeof(*v));
    free(g_canon[i]);
    g_canon[i] = NULL;
    v->ival = d->idef;
    v->sval = d->sdef;
    if (e == NULL || (e[0] == '\0' && d->type == PARAM_INT)) continue;
    char err[256];
    int64_t iv = 0;
    v->set = 1;
    if (validate(d, e, &iv, err, sizeof(err)) != 0) {
      v->bad = 1;
      continue;
    }
    if (d->type == PARAM_INT) {
      v->ival = iv;
    } else if (d->choices[0]) {
      v->sval = canonical(d, e, &g_canon[i]);
      /* Without memory for the canonical copy the value cannot be used as given. */
      if (!v->sval) {
        v->sval = d->sdef;
        v->bad = 1;
      }
    } else {
      v->sval = e;
    }
  }
}

static void ensure_loaded(void) {
  pthread_once(&g_once, load);
}

int64_t bagua__param_int(bagua__param_id_t id) {
  ensure_loaded();
  return g_val[id].ival;
}

const char *bagua__param_str(bagua__param_id_t id) {
  ensure_loaded();
  return g_val[id].sval;
}

const char *bagua__param_env_name(bagua__param_id_t id) {
  return g_desc[id].env;
}

void bagua__param_bounds(bagua__param_id_t id, int64_t *lo, int64_t *hi) {
  if (lo) *lo = g_desc[id].lo;
  if (hi) *hi = g_desc[id].hi;
}

int64_t bagua__param_int_default(bagua__param_id_t id) {
  return g_desc[id].idef;
}

int bagua__param_is_int(bagua__param_id_t id) {
  return g_desc[id].type == PARAM_INT;
}

const char *bagua__param_str_default(bagua__param_id_t id) {
  return g_desc[id].type == PARAM_STR ? g_desc[id].sdef : "";
}

const char *bagua__param_choices(bagua__param_id_t id) {
  return g_desc[id].type == PARAM_STR ? g_desc[id].choices : "";
}

int bagua__param_find(const char *env_name) {
  for (int i = 0; env_name && i < BAGUA_P__COUNT; i++)
    if (strcmp(g_desc[i].env, env_name) == 0) return i;
  return -1;
}

int bagua__param_is_secret(bagua__param_id_t id) {
  for (size_t i = 0; i < sizeof(k_secret) / sizeof(k_secret[0]); i++)
    if (k_secret[i] == id) return 1;
  return 0;
}

int bagua__param_name_is_secret(const char *env_name) {
  int id = bagua__param_find(env_name);
  return id >= 0 && bagua__param_is_secret((bagua__param_id_t)id);
}

bagua_status_t bagua__param_check_int(bagua__param_id_t id, const char *what, int64_t value,
                                      char *err, size_t errlen) {
  const param_desc_t *d = &g_desc[id];
  if (d->type == PARAM_INT && value >= d->lo && value <= d->hi) return BAGUA_OK;
  if (d->type != PARAM_INT)
    snprintf(err, errlen, "%s: %s is not an integer parameter", what, d->env);
  else
    snprintf(err, errlen,
             "%s %lld is out of range; accepted: an integer in [%lld, %lld] (the bounds of %s)",
             what, (long long)value, (long long)d->lo, (long long)d->hi, d->env);
  return BAGUA_ERR_INVALID_ARG;
}

bagua_status_t bagua__param_parse(bagua__param_id_t id, const char *value, int64_t *out, char *err,
                                  size_t errlen) {
  int64_t v = 0;
  if (validate(&g_desc[id], value, &v, err, errlen) != 0) return BAGUA_ERR_INVALID_ARG;
  if (out) *out = v;
  return BAGUA_OK;
}

int bagua__param_is_set(bagua__param_id_t id) {
  ensure_loaded();
  return g_val[id].set && !g_val[id].bad;
}

int bagua__params_first_bad(char *err, size_t errlen) {
  ensure_loaded();
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    if (!g_val[i].bad) continue;
    /* A value can be good and still unusable: no memory for its canonical spelling. */
    if (validate(&g_desc[i], getenv(g_desc[i].env), NULL, err, errlen) == 0)
      snprintf(err, errlen, "%s: out of memory for its value", g_desc[i].env);
    return 1;
  }
  return 0;
}

void bagua__params_load_again(void) {
  ensure_loaded();
  load();
}

bagua_status_t bagua_param_validate(const char *name, const char *value, char *err, size_t errlen) {
  if (!name || !value) {
    snprintf(err, errlen, "parameter name and value must not be NULL");
    return BAGUA_ERR_INVALID_ARG;
  }
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    if (strcmp(g_desc[i].env, name) != 0) continue;
    return validate(&g_desc[i], value, NULL, err, errlen) == 0 ? BAGUA_OK : BAGUA_ERR_INVALID_ARG;
  }
  snprintf(err, errlen, "unknown parameter %s (bagua-launch --print-params lists them)", name);
  return BAGUA_ERR_INVALID_ARG;
}

void bagua_params_print(FILE *out) {
  ensure_loaded();
  fprintf(out, "%-26s %-4s %-12s %-24s %-12s %s\n", "NAME", "TYPE", "DEFAULT", "ACCEPTED",
          "CURRENT", "HELP");
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    const param_desc_t *d = &g_desc[i];
    char def[32], acc[64], cur[64];
    if (d->type == PARAM_INT) {
      snprintf(def, sizeof(def), "%lld", (long long)d->idef);
      snprintf(acc, sizeof(acc), "[%lld, %lld]", (long long)d->lo, (long long)d->hi);
      snprintf(cur, sizeof(cur), "%lld", (long long)g_val[i].ival);
    } else {
      snprintf(def, sizeof(def), "%s", d->sdef[0] ? d->sdef : "\"\"");
      snprintf(acc, sizeof(acc), "%s", d->choices[0] ? d->choices : "any string");
      snprintf(cur, sizeof(cur), "%s", g_val[i].sval[0] ? g_val[i].sval : "\"\"");
      /* A secret (the job secret authenticates every connection of the job): never shown. */
      if (bagua__param_is_secret((bagua__param_id_t)i) && g_val[i].sval[0])
        snprintf(cur, sizeof(cur), "(set)");
    }
    fprintf(out, "%-26s %-4s %-12s %-24s %-12s %s\n", d->env, d->type == PARAM_INT ? "int" : "str",
            def, acc, g_val[i].bad ? "(invalid)" : cur, d->help);
  }
}

const char *bagua_param_get(const char *name) {
  ensure_loaded();
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    if (!name || strcmp(g_desc[i].env, name) != 0) continue;
    if (!g_val[i].set || g_val[i].bad) return NULL;
    /* A word parameter in its canonical spelling, as libbagua itself uses it: the launcher
     * and the Python front end read their settings through here. */
    return g_desc[i].type == PARAM_STR && g_desc[i].choices[0] ? g_val[i].sval : getenv(name);
  }
  return NULL;
}
