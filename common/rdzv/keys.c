/*
 * The keys of a job (rdzv.h): built here and classified here, so that the layout of
 * /bagua/<job>/ is written down once.
 */
#include <stdio.h>
#include <string.h>

#include "common/validate.h"
#include "rdzv.h"

int bagua__rdzv_id_valid(const char *id) {
  return id && bagua__check_id(id, NULL, 0) == BAGUA_OK;
}

int bagua__rdzv_key(char *buf, size_t len, const char *job, bagua__rdzv_key_kind_t kind,
                    int64_t round, const char *name, int64_t index) {
  long long r = (long long)round;
  int n = -1;
  switch (kind) {
    case BAGUA__RDZV_KEY_PREFIX:
      n = snprintf(buf, len, "/bagua/%s/", job);
      break;
    case BAGUA__RDZV_KEY_NODE:
      n = snprintf(buf, len, "/bagua/%s/nodes/%s", job, name);
      break;
    case BAGUA__RDZV_KEY_LEADER:
      n = snprintf(buf, len, "/bagua/%s/leader", job);
      break;
    case BAGUA__RDZV_KEY_ROUND:
      n = snprintf(buf, len, "/bagua/%s/round", job);
      break;
    case BAGUA__RDZV_KEY_STATUS:
      n = snprintf(buf, len, "/bagua/%s/status", job);
      break;
    case BAGUA__RDZV_KEY_CONFIG:
      n = snprintf(buf, len, "/bagua/%s/config", job);
      break;
    case BAGUA__RDZV_KEY_SECRET:
      n = snprintf(buf, len, "/bagua/%s/secret", job);
      break;
    case BAGUA__RDZV_KEY_ROUND_DIR:
      n = snprintf(buf, len, "/bagua/%s/rounds/%lld/", job, r);
      break;
    case BAGUA__RDZV_KEY_DONE:
      n = snprintf(buf, len, "/bagua/%s/rounds/%lld/done/%s", job, r, name);
      break;
    case BAGUA__RDZV_KEY_BOOTSTRAP_DIR:
      n = snprintf(buf, len, "/bagua/%s/rounds/%lld/bootstrap/", job, r);
      break;
    case BAGUA__RDZV_KEY_BOOTSTRAP:
      n = snprintf(buf, len, "/bagua/%s/rounds/%lld/bootstrap/%lld", job, r, (long long)index);
      break;
    case BAGUA__RDZV_KEY_REBUILD:
      n = snprintf(buf, len, "/bagua/%s/rounds/%lld/rebuild/%lld", job, r, (long long)index);
      break;
    case BAGUA__RDZV_KEY_PROGRESS:
      n = snprintf(buf, len, "/bagua/%s/progress/%s", job, name);
      break;
    case BAGUA__RDZV_KEY_FAILURE:
      n = snprintf(buf, len, "/bagua/%s/failure", job);
      break;
    case BAGUA__RDZV_KEY_ASSIGN:
      n = snprintf(buf, len, "/bagua/%s/assign/%s", job, name);
      break;
    case BAGUA__RDZV_KEY_NODES_DIR:
      n = snprintf(buf, len, "/bagua/%s/nodes/", job);
      break;
    case BAGUA__RDZV_KEY_ROUNDS_DIR:
      n = snprintf(buf, len, "/bagua/%s/rounds/", job);
      break;
    case BAGUA__RDZV_KEY_CLASH:
      n = snprintf(buf, len, "/bagua/%s/clash/%s", job, name);
      break;
    case BAGUA__RDZV_KEY_OTHER:
      break;
  }
  if (n < 0 || (size_t)n >= len) {
    if (len) buf[0] = '\0';
    return -1;
  }
  return 0;
}

int bagua__rdzv_key_end(char *buf, size_t len, const char *dir) {
  size_t n = strlen(dir);
  /* Every key this module builds ends in an ASCII character below 0x7f. */
  if (n == 0 || n >= len || (unsigned char)dir[n - 1] >= 0x7f) {
    if (len) buf[0] = '\0';
    return -1;
  }
  memcpy(buf, dir, n + 1);
  buf[n - 1] = (char)(dir[n - 1] + 1);
  return 0;
}

/* A decimal number of at most 15 digits (below 2^53) ending at a '/' or the end; -1 else. */
static int64_t number(const char *p, const char **rest) {
  int64_t v = 0;
  const char *q = p;
  while (*q >= '0' && *q <= '9' && q - p < 15) v = v * 10 + (*q++ - '0');
  if (q == p || (*q && *q != '/')) return -1;
  *rest = q;
  return v;
}

/* A name segment: non-empty, no '/'. */
static int segment(const char *p) {
  return p[0] && !strchr(p, '/');
}

int bagua__rdzv_key_parse(const char *prefix, const char *key, bagua__rdzv_key_info_t *out) {
  size_t plen = strlen(prefix);
  out->kind = BAGUA__RDZV_KEY_OTHER;
  out->round = out->index = -1;
  out->name = NULL;
  if (strncmp(key, prefix, plen) != 0) return -1;
  const char *k = key + plen;
  static const struct {
    const char *leaf;
    bagua__rdzv_key_kind_t kind;
  } leaves[] = {{"leader", BAGUA__RDZV_KEY_LEADER}, {"round", BAGUA__RDZV_KEY_ROUND},
                {"status", BAGUA__RDZV_KEY_STATUS}, {"config", BAGUA__RDZV_KEY_CONFIG},
                {"secret", BAGUA__RDZV_KEY_SECRET}, {"failure", BAGUA__RDZV_KEY_FAILURE}};
  for (size_t i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++)
    if (strcmp(k, leaves[i].leaf) == 0) {
      out->kind = leaves[i].kind;
      return 0;
    }
  if (strncmp(k, "nodes/", 6) == 0) {
    if (segment(k + 6)) {
      out->kind = BAGUA__RDZV_KEY_NODE;
      out->name = k + 6;
    }
    return 0;
  }
  if (strncmp(k, "assign/", 7) == 0) {
    if (segment(k + 7)) {
      out->kind = BAGUA__RDZV_KEY_ASSIGN;
      out->name = k + 7;
    }
    return 0;
  }
  if (strncmp(k, "progress/", 9) == 0) {
    if (segment(k + 9)) {
      out->kind = BAGUA__RDZV_KEY_PROGRESS;
      out->name = k + 9;
    }
    return 0;
  }
  if (strncmp(k, "clash/", 6) == 0) {
    if (segment(k + 6)) {
      out->kind = BAGUA__RDZV_KEY_CLASH;
      out->name = k + 6;
    }
    return 0;
  }
  if (strncmp(k, "rounds/", 7) != 0) return 0;
  const char *rest = NULL;
  int64_t r = number(k + 7, &rest);
  if (r < 0 || *rest != '/') return 0;
  rest++;
  out->round = r;
  out->kind = BAGUA__RDZV_KEY_ROUND_DIR;
  if (strncmp(rest, "done/", 5) == 0 && segment(rest + 5)) {
    out->kind = BAGUA__RDZV_KEY_DONE;
    out->name = rest + 5;
  } else if (strncmp(rest, "bootstrap/", 10) == 0 || strncmp(rest, "rebuild/", 8) == 0) {
    int boot = rest[1] == 'o';
    const char *end = NULL;
    int64_t idx = number(rest + (boot ? 10 : 8), &end);
    if (idx >= 0 && *end == '\0') {
      out->kind = boot ? BAGUA__RDZV_KEY_BOOTSTRAP : BAGUA__RDZV_KEY_REBUILD;
      out->index = idx;
    }
  }
  return 0;
}
