/*
 * Argument lists and POSIX shell words: splitting a remote command template into words the
 * way a shell would, and quoting words for the remote shell that ssh hands a command line to.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

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

int bagua__launch_unquote(const char *value, char **out) {
  size_t n = strlen(value);
  *out = NULL;
  if (n >= 2 && (value[0] == '"' || value[0] == '\'') && value[n - 1] == value[0]) {
    bagua__launch_argv_t w = {0};
    char serr[64];
    /* One quoted word, by the same rules as args; anything else ("a" "b") stays literal. */
    if (bagua__launch_split_words(value, &w, serr, sizeof(serr)) == 0 && w.n <= 1) {
      *out = strdup(w.n ? w.v[0] : "");
      bagua__launch_argv_free(&w);
      return *out ? 0 : -1;
    }
    bagua__launch_argv_free(&w);
  }
  *out = strdup(value);
  return *out ? 0 : -1;
}
