/*
 * Slurm allocations: host-list expansion, tasks per node, and the hosts of the environment
 * layer (slurm.h has the contract).
 *
 * The SLURM_* variables are read with getenv: they are Slurm's, not BAGUA_* parameters, so the
 * parameter registry does not declare them.
 */
#include "slurm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bagua__slurm_names_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

typedef struct {
  char **v;
  int n, cap;
} names_t;

static int push_name(names_t *l, const char *s, size_t len, char *err, size_t errlen) {
  char what[256];
  char *copy = strndup(s, len);
  if (!copy) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (bagua__launch_check_host_name(copy, what, sizeof(what)) != 0) {
    snprintf(err, errlen, "%s; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED, what);
    free(copy);
    return -1;
  }
  if (l->n >= LAUNCH_MAX_NODES) {
    snprintf(err, errlen, "more than %d hosts; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED,
             LAUNCH_MAX_NODES);
    free(copy);
    return -1;
  }
  if (l->n == l->cap) {
    int ncap = l->cap ? 2 * l->cap : 16;
    char **nv = realloc(l->v, sizeof(char *) * (size_t)ncap);
    if (!nv) {
      free(copy);
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    l->v = nv;
    l->cap = ncap;
  }
  l->v[l->n++] = copy;
  return 0;
}

/* A range bound: digits only, at most 9 of them (no overflow, and far beyond real lists). */
static int parse_bound(const char *s, size_t len, long *out) {
  if (len == 0 || len > 9) return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/*
 * Expands one entry (no top-level comma): the first bracket group is replaced by each of its
 * numbers in turn, and the result expanded again, so later groups vary fastest.
 */
static int expand_entry(const char *e, size_t len, names_t *out, char *err, size_t errlen) {
  const char *lb = memchr(e, '[', len);
  if (!lb) return push_name(out, e, len, err, errlen);
  const char *rb = memchr(lb, ']', len - (size_t)(lb - e));
  /* The top-level split has already checked that brackets balance and do not nest. */
  if (!rb) {
    snprintf(err, errlen, "\"%.*s\": '[' without ']'; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED,
             (int)len, e);
    return -1;
  }
  size_t pre = (size_t)(lb - e), post = len - (size_t)(rb + 1 - e);
  const char *in = lb + 1;
  size_t inlen = (size_t)(rb - in);
  if (inlen == 0) {
    snprintf(err, errlen, "\"%.*s\": empty brackets; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED,
             (int)len, e);
    return -1;
  }
  for (size_t o = 0; o <= inlen;) {
    const char *item = in + o;
    const char *comma = memchr(item, ',', inlen - o);
    size_t il = comma ? (size_t)(comma - item) : inlen - o;
    o += il + 1;
    const char *dash = memchr(item, '-', il);
    long lo, hi;
    size_t lol = dash ? (size_t)(dash - item) : il;
    if (parse_bound(item, lol, &lo) != 0 ||
        (dash ? parse_bound(dash + 1, il - lol - 1, &hi) : (hi = lo, 0)) != 0) {
      snprintf(err, errlen,
               "\"%.*s\": range \"%.*s\" is not N or LO-HI (digits); accepted: "
               "" BAGUA_SLURM_HOSTLIST_ACCEPTED,
               (int)len, e, (int)il, item);
      return -1;
    }
    if (lo > hi) {
      snprintf(err, errlen,
               "\"%.*s\": range \"%.*s\" has LO %ld larger than HI %ld; accepted: "
               "" BAGUA_SLURM_HOSTLIST_ACCEPTED,
               (int)len, e, (int)il, item, lo, hi);
      return -1;
    }
    if (hi - lo >= LAUNCH_MAX_NODES) {
      snprintf(err, errlen,
               "\"%.*s\": more than %d hosts; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED, (int)len,
               e, LAUNCH_MAX_NODES);
      return -1;
    }
    /* Zero padding: every number is as wide as LO is written ("01-10": 01 ... 10). */
    int width = (int)lol;
    for (long v = lo; v <= hi; v++) {
      char buf[1024];
      int w = snprintf(buf, sizeof(buf), "%.*s%0*ld%.*s", (int)pre, e, width, v, (int)post, rb + 1);
      if (w < 0 || (size_t)w >= sizeof(buf)) {
        snprintf(err, errlen, "\"%.*s\": a host name is too long; accepted: at most %zu characters",
                 (int)len, e, sizeof(buf) - 1);
        return -1;
      }
      if (expand_entry(buf, (size_t)w, out, err, errlen) != 0) return -1;
    }
  }
  return 0;
}

int bagua__slurm_expand_hostlist(const char *text, char ***names, int *n, char *err,
                                 size_t errlen) {
  names_t out = {0};
  *names = NULL;
  *n = 0;
  size_t len = strlen(text), start = 0;
  int depth = 0, entry = 0;
  if (len == 0) {
    snprintf(err, errlen, "the host list is empty; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED);
    return -1;
  }
  /* A comma after the last character ends the last entry. */
  for (size_t i = 0; i <= len; i++) {
    char c = i < len ? text[i] : ',';
    if (i == len && depth > 0) {
      snprintf(err, errlen, "'[' without ']'; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED);
      goto fail;
    }
    if (c == '[') {
      if (depth++ > 0) {
        snprintf(err, errlen,
                 "nested '[' at character %zu; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED, i + 1);
        goto fail;
      }
    } else if (c == ']') {
      if (depth-- == 0) {
        snprintf(err, errlen,
                 "']' without '[' at character %zu; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED,
                 i + 1);
        goto fail;
      }
    } else if (c == ',' && depth == 0) {
      entry++;
      if (i == start) {
        snprintf(err, errlen, "entry %d is empty; accepted: " BAGUA_SLURM_HOSTLIST_ACCEPTED, entry);
        goto fail;
      }
      if (expand_entry(text + start, i - start, &out, err, errlen) != 0) goto fail;
      start = i + 1;
    }
  }
  *names = out.v;
  *n = out.n;
  return 0;
fail:
  bagua__slurm_names_free(out.v, out.n);
  return -1;
}

int bagua__slurm_parse_tasks(const char *text, int nnodes, int **slots, char *err, size_t errlen) {
  int *s = calloc((size_t)(nnodes > 0 ? nnodes : 1), sizeof(int));
  int filled = 0, entry = 0;
  char what[256];
  *slots = NULL;
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  const char *p = text;
  if (!*p) {
    snprintf(err, errlen, "the value is empty; accepted: " BAGUA_SLURM_TASKS_ACCEPTED);
    goto fail;
  }
  for (;;) {
    size_t il = strcspn(p, ",");
    char item[64];
    entry++;
    if (il == 0 || il >= sizeof(item)) {
      snprintf(err, errlen, "entry %d \"%.*s\" is %s; accepted: " BAGUA_SLURM_TASKS_ACCEPTED, entry,
               (int)(il < 40 ? il : 40), p, il == 0 ? "empty" : "too long");
      goto fail;
    }
    memcpy(item, p, il);
    item[il] = '\0';
    long repeat = 1;
    char *paren = strchr(item, '(');
    if (paren) {
      /* "N(xM)": N tasks on each of M nodes. */
      char *end = NULL;
      size_t pl = strlen(paren);
      errno = 0;
      if (pl < 4 || paren[1] != 'x' || paren[pl - 1] != ')' || !isdigit((unsigned char)paren[2]) ||
          (repeat = strtol(paren + 2, &end, 10), errno != 0) || end != paren + pl - 1 ||
          repeat < 1 || repeat > LAUNCH_MAX_NODES) {
        snprintf(err, errlen,
                 "entry %d \"%s\": the repeat is not (xM) with M in [1, %d]; accepted: "
                 "" BAGUA_SLURM_TASKS_ACCEPTED,
                 entry, item, LAUNCH_MAX_NODES);
        goto fail;
      }
      *paren = '\0';
    }
    int count;
    if (bagua__launch_check_slots(item, &count, what, sizeof(what)) != 0) {
      snprintf(err, errlen, "entry %d: %s; accepted: " BAGUA_SLURM_TASKS_ACCEPTED, entry, what);
      goto fail;
    }
    /* One bare count for all nodes: SLURM_NTASKS_PER_NODE, or a uniform allocation. */
    if (entry == 1 && !paren && !p[il]) repeat = nnodes;
    if (filled + repeat > nnodes) {
      snprintf(err, errlen,
               "it gives counts for more than the %d node(s) of SLURM_JOB_NODELIST; accepted: "
               "" BAGUA_SLURM_TASKS_ACCEPTED,
               nnodes);
      goto fail;
    }
    for (long r = 0; r < repeat; r++) s[filled++] = count;
    p += il;
    if (!*p) break;
    p++;
  }
  if (filled != nnodes) {
    snprintf(err, errlen,
             "it gives counts for %d node(s) but SLURM_JOB_NODELIST has %d; accepted: "
             "" BAGUA_SLURM_TASKS_ACCEPTED,
             filled, nnodes);
    goto fail;
  }
  *slots = s;
  return 0;
fail:
  free(s);
  return -1;
}

/* A variable's value, NULL when unset or empty (an empty variable counts as unset). */
static const char *slurm_var(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

int bagua__slurm_read_env(bagua__launch_layer_t *l, char *err, size_t errlen) {
  const char *job = slurm_var("SLURM_JOB_ID"), *list = slurm_var("SLURM_JOB_NODELIST");
  if (!job || !list) return 0;
  char what[LAUNCH_ERR_LEN];
  char **names = NULL;
  int n = 0, *slots = NULL;
  if (bagua__slurm_expand_hostlist(list, &names, &n, what, sizeof(what)) != 0) {
    snprintf(err, errlen, "bagua-launch: environment SLURM_JOB_NODELIST=\"%.200s\": %s", list,
             what);
    return LAUNCH_EXIT_USAGE;
  }
  /* --ntasks-per-node is the user's explicit request; SLURM_TASKS_PER_NODE always describes
   * the allocation. Without either, nproc_per_node applies. */
  const char *tvar = slurm_var("SLURM_NTASKS_PER_NODE")  ? "SLURM_NTASKS_PER_NODE"
                     : slurm_var("SLURM_TASKS_PER_NODE") ? "SLURM_TASKS_PER_NODE"
                                                         : NULL;
  if (tvar && bagua__slurm_parse_tasks(slurm_var(tvar), n, &slots, what, sizeof(what)) != 0) {
    snprintf(err, errlen, "bagua-launch: environment %s=\"%.100s\": %s", tvar, slurm_var(tvar),
             what);
    bagua__slurm_names_free(names, n);
    return LAUNCH_EXIT_USAGE;
  }
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    bagua__launch_origin_t origin;
    char num[16];
    bagua__launch_origin_set(&origin, LO_ENV, "SLURM_JOB_NODELIST%s%s", tvar ? ", slots " : "",
                             tvar ? tvar : "");
    snprintf(num, sizeof(num), "%d", slots ? slots[i] : 0);
    if (bagua__launch_add_host(l, names[i], slots ? num : NULL, &origin, what, sizeof(what)) != 0) {
      snprintf(err, errlen, "bagua-launch: environment SLURM_JOB_NODELIST: %s", what);
      rc = LAUNCH_EXIT_USAGE;
    }
  }
  if (rc == 0)
    bagua__launch_origin_set(&l->hosts_origin, LO_ENV, "SLURM_JOB_NODELIST (Slurm job %.40s)", job);
  bagua__slurm_names_free(names, n);
  free(slots);
  return rc;
}
