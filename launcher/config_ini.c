/*
 * INI layer (--config FILE): [job], [rendezvous], [algorithm], [hosts] and [env], read with
 * inih.
 *
 * Debian's libinih is built without line numbers in the handler (INI_HANDLER_LINENO 0), so
 * the file is read into memory and handed to ini_parse_stream() one line at a time by our own
 * reader, which counts lines. The reader also does what inih cannot report precisely: it
 * rejects over-long lines (inih would silently split them), NUL bytes and unknown [section]
 * headers, and it strips leading blanks so an indented "key = value" is never taken for an
 * inih continuation line of the previous key. The first error by line number wins, whether
 * our handler or inih's syntax check found it.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/params.h"
#include "launch.h"

/* Largest configuration file accepted; real ones are a few hundred bytes. */
#define INI_MAX_FILE_BYTES (1 << 20)

#define SECTIONS_ACCEPTED "[job], [rendezvous], [algorithm], [hosts], [env]"

static const char *const k_sections[] = {"job", "rendezvous", "algorithm", "hosts", "env"};

/*
 * The keys of [algorithm]: the registry's algorithm group (common/params.def), which
 * libbagua's DDP layer reads for every setting a program leaves unset, and the bucket size,
 * which it reads too. The key is the variable's name without BAGUA_, in lower case, except
 * that BAGUA_ALGORITHM is "name". Anything else is refused: a key nobody reads used to be
 * exported as BAGUA_<KEY> and silently did nothing.
 */
static const bagua__param_id_t k_algo_params[] = {
    BAGUA_P_ALGORITHM,           BAGUA_P_HIERARCHICAL,
    BAGUA_P_PEER_SELECTION_MODE, BAGUA_P_COMMUNICATION_INTERVAL,
    BAGUA_P_WARMUP_STEPS,        BAGUA_P_SYNC_INTERVAL_MS,
    BAGUA_P_ERROR_FEEDBACK,      BAGUA_P_POWERSGD_RANK,
    BAGUA_P_BUCKET_SIZE,         BAGUA_P_AUTO_ALLOW};
#define NALGO_PARAMS (sizeof(k_algo_params) / sizeof(k_algo_params[0]))

/* The [algorithm] key of k_algo_params[i]. */
static void algo_key(size_t i, char *key, size_t len) {
  if (k_algo_params[i] == BAGUA_P_ALGORITHM) {
    snprintf(key, len, "name");
    return;
  }
  const char *env = bagua__param_env_name(k_algo_params[i]) + strlen("BAGUA_");
  size_t n = 0;
  for (; env[n] && n + 1 < len; n++) key[n] = (char)tolower((unsigned char)env[n]);
  key[n] = '\0';
}

/* The index in k_algo_params of the parameter behind [algorithm] key `key` (or, with `by_env`,
 * of variable `key`), or -1. */
static int algo_find(const char *key, int by_env) {
  char k[64];
  for (size_t i = 0; i < NALGO_PARAMS; i++) {
    algo_key(i, k, sizeof(k));
    if (strcmp(by_env ? bagua__param_env_name(k_algo_params[i]) : k, key) == 0) return (int)i;
  }
  return -1;
}

static void algo_keys(char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < NALGO_PARAMS; i++) {
    char k[64];
    algo_key(i, k, sizeof(k));
    int n = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", k);
    if (n < 0 || (size_t)n >= len - o) return;
    o += (size_t)n;
  }
}

typedef struct {
  char section[32];
  char key[64];
  int line;
} seen_t;

typedef struct {
  const char *name; /* file name used in messages */
  const char *text;
  size_t len, pos;
  int line; /* line most recently handed to inih */
  bagua__launch_layer_t *l;
  int err_line; /* first error found by the reader or the handler (0: none) */
  char *err;
  size_t errlen;
  seen_t *seen;
  int nseen;
  int args_line; /* line of "args" in [job], to report args without a program */
} ini_ctx_t;

static void fail(ini_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(ini_ctx_t *c, const char *fmt, ...) {
  if (c->err_line) return; /* lines arrive in order: the first error is the earliest */
  c->err_line = c->line;
  int n = snprintf(c->err, c->errlen, "%s:%d: ", c->name, c->line);
  if (n < 0 || (size_t)n >= c->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static int known_section(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof(k_sections) / sizeof(k_sections[0]); i++)
    if (strlen(k_sections[i]) == len && strncmp(k_sections[i], name, len) == 0) return 1;
  return 0;
}

/* inih's line source: one line per call, fgets-style, with our checks applied. */
static char *reader(char *str, int num, void *stream) {
  ini_ctx_t *c = stream;
  if (c->pos >= c->len || num < 3) return NULL;
  const char *start = c->text + c->pos;
  const char *nl = memchr(start, '\n', c->len - c->pos);
  size_t len = nl ? (size_t)(nl - start) : c->len - c->pos;
  c->pos += len + (nl ? 1 : 0);
  c->line++;
  if (len > 0 && start[len - 1] == '\r') len--;
  if (c->line == 1 && len >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0) start += 3, len -= 3;
  while (len > 0 && (*start == ' ' || *start == '\t')) start++, len--;
  if (memchr(start, '\0', len)) {
    fail(c, "the line contains a NUL byte; accepted: text lines");
    len = 0;
  } else if (len + 2 > (size_t)num) {
    fail(c, "the line is longer than %d characters; accepted: lines of at most %d characters",
         num - 2, num - 2);
    len = 0;
  } else if (len > 0 && start[0] == '[') {
    const char *close = memchr(start, ']', len);
    if (close && !known_section(start + 1, (size_t)(close - start - 1)))
      fail(c, "section [%.*s]: unknown section; accepted: " SECTIONS_ACCEPTED,
           (int)(close - start - 1 > 40 ? 40 : close - start - 1), start + 1);
  }
  memcpy(str, start, len);
  str[len] = '\n';
  str[len + 1] = '\0';
  return str;
}

/* Records (section, key) and reports a repeated key. Returns -1 for a repeat. */
static int check_repeat(ini_ctx_t *c, const char *section, const char *key) {
  for (int i = 0; i < c->nseen; i++) {
    if (strcmp(c->seen[i].section, section) != 0 || strcmp(c->seen[i].key, key) != 0) continue;
    fail(c, "key \"%s\" in [%s]: given twice (first on line %d); accepted: one value per key", key,
         section, c->seen[i].line);
    return -1;
  }
  seen_t *ns = realloc(c->seen, sizeof(*ns) * (size_t)(c->nseen + 1));
  if (!ns) return -1;
  c->seen = ns;
  snprintf(ns[c->nseen].section, sizeof(ns[c->nseen].section), "%s", section);
  snprintf(ns[c->nseen].key, sizeof(ns[c->nseen].key), "%s", key);
  ns[c->nseen].line = c->line;
  c->nseen++;
  return 0;
}

/* Appends the accepted keys of [section] ("job" or "rendezvous") to buf. */
static void keys_of(const char *section, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    if (strcmp(d->section, section) != 0) continue;
    int n = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", d->name);
    if (n < 0 || (size_t)n >= len - o) return;
    o += (size_t)n;
  }
  if (strcmp(section, "job") == 0) snprintf(buf + o, len - o, ", program, args");
}

static int add_var(ini_ctx_t *c, bagua__launch_var_t **arr, int *n, const char *name,
                   const char *key, const char *value) {
  bagua__launch_var_t *nv = realloc(*arr, sizeof(*nv) * (size_t)(*n + 1));
  if (!nv) return -1;
  *arr = nv;
  bagua__launch_var_t *v = &nv[*n];
  memset(v, 0, sizeof(*v));
  v->name = strdup(name);
  v->key = strdup(key);
  v->value = strdup(value);
  (*n)++;
  if (!v->name || !v->key || !v->value) return -1;
  bagua__launch_origin_set(&v->origin, LO_INI, "%s:%d", c->name, c->line);
  return 0;
}

static void handle_job(ini_ctx_t *c, const char *section, const char *key, const char *value) {
  char what[LAUNCH_ERR_LEN];
  bagua__launch_layer_t *l = c->l;
  if (strcmp(section, "job") == 0 && strcmp(key, "program") == 0) {
    if (!*value) {
      fail(c, "key \"program\" in [job]: the value is empty; accepted: a program path");
      return;
    }
    /* The program goes first, whatever order program and args appear in. */
    char **nv = realloc(l->program.v, sizeof(char *) * (size_t)(l->program.n + 2));
    if (!nv) return;
    l->program.v = nv;
    memmove(nv + 1, nv, sizeof(char *) * (size_t)l->program.n);
    nv[0] = strdup(value);
    l->program.n++;
    nv[l->program.n] = NULL;
    if (!nv[0]) fail(c, "out of memory");
    bagua__launch_origin_set(&l->program_origin, LO_INI, "%s:%d", c->name, c->line);
    return;
  }
  if (strcmp(section, "job") == 0 && strcmp(key, "args") == 0) {
    char serr[128];
    c->args_line = c->line;
    bagua__launch_argv_t words = {0};
    if (bagua__launch_split_words(value, &words, serr, sizeof(serr)) != 0) {
      fail(c, "key \"args\" in [job]: %s; accepted: words with shell-style quoting", serr);
      return;
    }
    for (int i = 0; i < words.n; i++) bagua__launch_argv_push(&l->program, words.v[i]);
    bagua__launch_argv_free(&words);
    return;
  }
  int s = bagua__launch_find_ini(section, key);
  if (s < 0) {
    char keys[512];
    keys_of(section, keys, sizeof(keys));
    fail(c, "key \"%s\" in [%s]: unknown key; accepted: %s", key, section, keys);
    return;
  }
  if (bagua__launch_parse_value((bagua__launch_setting_t)s, value, &l->v[s], what, sizeof(what)) !=
      0) {
    fail(c, "key \"%s\" in [%s]: %s", key, section, what);
    return;
  }
  bagua__launch_origin_set(&l->v[s].origin, LO_INI, "%s:%d", c->name, c->line);
}

static void handle_algorithm(ini_ctx_t *c, const char *key, const char *value) {
  char what[LAUNCH_ERR_LEN], keys[256];
  int i = algo_find(key, 0);
  if (i < 0) {
    /* A registry parameter of another kind (net_nstreams) is a variable like any other: say
     * where it goes instead. */
    char env[96];
    int n = snprintf(env, sizeof(env), "BAGUA_");
    for (const char *p = key; *p && (size_t)n + 1 < sizeof(env); p++)
      env[n++] = (char)toupper((unsigned char)*p);
    env[n] = '\0';
    algo_keys(keys, sizeof(keys));
    int j = algo_find(env, 1);
    char alias[64];
    if (j >= 0) algo_key((size_t)j, alias, sizeof(alias));
    if (j >= 0)
      fail(c, "key \"%s\" in [algorithm]: unknown key; accepted: %s (%s is key \"%s\")", key, keys,
           env, alias);
    else if (bagua__param_find(env) >= 0)
      fail(c,
           "key \"%s\" in [algorithm]: %s is not an algorithm option; accepted: %s (set %s in "
           "[env])",
           key, env, keys, env);
    else
      fail(c, "key \"%s\" in [algorithm]: unknown key; accepted: %s", key, keys);
    return;
  }
  const char *env = bagua__param_env_name(k_algo_params[i]);
  if (bagua__launch_check_var(env, value, what, sizeof(what)) != 0) {
    fail(c, "key \"%s\" in [algorithm]: %s", key, what);
    return;
  }
  add_var(c, &c->l->algo, &c->l->nalgo, env, key, value);
}

/* [env] NAME = VALUE: any variable the workers may get, except an algorithm option, whose one
 * place is [algorithm] (two places would need a rule for which wins). */
static void handle_env(ini_ctx_t *c, const char *name, const char *value) {
  char what[LAUNCH_ERR_LEN], key[64];
  int i = algo_find(name, 1);
  if (i >= 0) {
    algo_key((size_t)i, key, sizeof(key));
    fail(c, "key \"%s\" in [env]: %s is an algorithm option; accepted: key \"%s\" in [algorithm]",
         name, name, key);
  } else if (bagua__launch_check_var(name, value, what, sizeof(what)) != 0) {
    fail(c, "key \"%s\" in [env]: %s", name, what);
  } else {
    add_var(c, &c->l->env, &c->l->nenv, name, name, value);
  }
}

static int handler(void *user, const char *section, const char *name, const char *value) {
  ini_ctx_t *c = user;
  char what[LAUNCH_ERR_LEN];
  if (c->err_line) return 1; /* keep inih going only to find an earlier syntax error */
  if (!section[0]) {
    fail(c,
         "key \"%s\" in []: the key is outside any section; accepted: " SECTIONS_ACCEPTED
         " before it",
         name);
    return 0;
  }
  if (!known_section(section, strlen(section))) return 0; /* reported by the reader */
  if (strcmp(section, "hosts") == 0) {
    /* Host lines may repeat: each line is one agent. */
    bagua__launch_origin_t origin;
    bagua__launch_origin_set(&origin, LO_INI, "%s:%d", c->name, c->line);
    if (bagua__launch_add_host(c->l, name, *value ? value : NULL, &origin, what, sizeof(what)) !=
        0) {
      fail(c,
           "key \"%s\" in [hosts]: %s; accepted: HOST = NPROC with NPROC in [1, 4096], or HOST = "
           "for nproc_per_node",
           name, what);
      return 0;
    }
    bagua__launch_origin_set(&c->l->hosts_origin, LO_INI, "%s [hosts]", c->name);
    return 1;
  }
  if (check_repeat(c, section, name) != 0) return 0;
  if (strcmp(section, "job") == 0 || strcmp(section, "rendezvous") == 0)
    handle_job(c, section, name, value);
  else if (strcmp(section, "algorithm") == 0)
    handle_algorithm(c, name, value);
  else
    handle_env(c, name, value);
  return c->err_line ? 0 : 1;
}

/* Copies line `n` (1-based) of the text, trimmed and shortened, for a syntax message. */
static void line_text(const char *text, size_t len, int n, char *out, size_t outlen) {
  const char *p = text, *end = text + len;
  for (int i = 1; i < n && p < end; i++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    p = nl ? nl + 1 : end;
  }
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
  while (l > 0 && isspace((unsigned char)*p)) p++, l--;
  while (l > 0 && isspace((unsigned char)p[l - 1])) l--;
  size_t o = 0;
  for (size_t i = 0; i < l && o + 4 < outlen; i++) {
    if (o >= 60) {
      memcpy(out + o, "...", 3);
      o += 3;
      break;
    }
    unsigned char ch = (unsigned char)p[i];
    out[o++] = (ch >= 0x20 && ch < 0x7f && ch != '"') ? (char)ch : '?';
  }
  out[o] = '\0';
}

int bagua__launch_read_ini_text(const char *name, const char *text, size_t len,
                                bagua__launch_layer_t *l, char *err, size_t errlen) {
  ini_ctx_t c = {.name = name, .text = text, .len = len, .l = l, .err = err, .errlen = errlen};
  err[0] = '\0';
  int r = ini_parse_stream(reader, &c, handler, &c);
  free(c.seen);
  if (r == -2) {
    snprintf(err, errlen, "%s: out of memory while parsing", name);
    return LAUNCH_EXIT_USAGE;
  }
  if (r > 0 && (c.err_line == 0 || r < c.err_line)) {
    char shown[80];
    line_text(text, len, r, shown, sizeof(shown));
    snprintf(err, errlen,
             "%s:%d: syntax error: \"%s\" is not a [section], key = value or comment line; "
             "accepted: [section], key = value, ; comment, # comment",
             name, r, shown);
    return LAUNCH_EXIT_USAGE;
  }
  if (c.err_line) return LAUNCH_EXIT_USAGE;
  if (c.args_line && l->program_origin.kind == LO_DEFAULT) {
    snprintf(err, errlen,
             "%s:%d: key \"args\" in [job]: args without a program; accepted: program = PATH "
             "in [job] next to args",
             name, c.args_line);
    return LAUNCH_EXIT_USAGE;
  }
  return 0;
}

int bagua__launch_read_ini(const char *path, bagua__launch_layer_t *l, char *err, size_t errlen) {
  char *buf = NULL;
  int rc = LAUNCH_EXIT_USAGE;
  char what[600];
  /* Opened without blocking: a FIFO given as --config would otherwise hold bagua-launch in
   * open() until some writer came; a device or a directory is no INI file either. */
  int fd = bagua__open_regular(path, O_RDONLY, 0, what, sizeof(what));
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    snprintf(err, errlen, "%s; accepted: a readable INI file", what);
    goto out;
  }
  buf = malloc(INI_MAX_FILE_BYTES + 1);
  if (!buf) {
    snprintf(err, errlen, "%s: out of memory", path);
    goto out;
  }
  size_t n = fread(buf, 1, INI_MAX_FILE_BYTES + 1, f);
  if (ferror(f)) {
    snprintf(err, errlen, "%s: cannot read: %s; accepted: a readable INI file", path,
             strerror(errno));
    goto out;
  }
  if (n > INI_MAX_FILE_BYTES) {
    snprintf(err, errlen, "%s: the file is larger than %d bytes; accepted: a small INI file", path,
             INI_MAX_FILE_BYTES);
    goto out;
  }
  rc = bagua__launch_read_ini_text(path, buf, n, l, err, errlen);
out:
  free(buf);
  if (f) fclose(f);
  return rc;
}
