/*
 * The strict field readers the rendezvous codecs share (codec.c, assign.c): each refuses a
 * field of the wrong JSON type, a number that is not an integer or not in its range, or a string
 * longer than its buffer, and says which field in `why`. Private to common/rdzv.
 */
#ifndef BAGUA_COMMON_RDZV_FIELDS_H
#define BAGUA_COMMON_RDZV_FIELDS_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rdzv.h"

typedef struct {
  char *buf;
  size_t len;
} why_t;

/* Zeroes record *rec before a decode, except its `field` (a node id): that comes from the
 * record's key, which the caller filled in, not from the value being decoded. */
#define CLEAR_KEEPING(rec, field)               \
  do {                                          \
    char keep_[sizeof((rec)->field)];           \
    memcpy(keep_, (rec)->field, sizeof(keep_)); \
    memset((rec), 0, sizeof(*(rec)));           \
    memcpy((rec)->field, keep_, sizeof(keep_)); \
  } while (0)

static inline int fail(why_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int fail(why_t *w, const char *fmt, ...) {
  if (w->buf && w->len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->buf, w->len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* An integer field within [lo, hi]. Absent: 0 when optional (the bounds allow it or not). */
static inline int get_i64(const cJSON *o, const char *name, int required, int64_t lo, int64_t hi,
                          int64_t *out, why_t *w) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
  *out = 0;
  if (!f) return required ? fail(w, "field \"%s\" is missing", name) : 0;
  if (!cJSON_IsNumber(f)) return fail(w, "field \"%s\" is not a number", name);
  double d = f->valuedouble;
  /* Converting an out-of-range double is undefined behaviour: compare as doubles first. */
  if (!(d >= (double)lo && d <= (double)hi))
    return fail(w, "field \"%s\": %.17g is not in %lld..%lld", name, d, (long long)lo,
                (long long)hi);
  int64_t v = (int64_t)d;
  if ((double)v != d) return fail(w, "field \"%s\": %.17g is not an integer", name, d);
  *out = v;
  return 0;
}

static inline int get_int(const cJSON *o, const char *name, int required, int lo, int hi, int *out,
                          why_t *w) {
  int64_t v = 0;
  int rc = get_i64(o, name, required, lo, hi, &v, w);
  *out = (int)v;
  return rc;
}

/* A string field that fits dst (with its NUL); `nonempty` refuses "". Absent optional: "". */
static inline int get_str(const cJSON *o, const char *name, int required, int nonempty, char *dst,
                          size_t size, why_t *w) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
  dst[0] = '\0';
  if (!f) return required ? fail(w, "field \"%s\" is missing", name) : 0;
  if (!cJSON_IsString(f)) return fail(w, "field \"%s\" is not a string", name);
  size_t n = strlen(f->valuestring);
  if (n >= size) return fail(w, "field \"%s\" is longer than %zu bytes", name, size - 1);
  if (nonempty && n == 0) return fail(w, "field \"%s\" is empty", name);
  memcpy(dst, f->valuestring, n + 1);
  return 0;
}

/* A node id field: a valid id (an absent optional one is ""). */
static inline int get_id(const cJSON *o, const char *name, int required, char *dst, size_t size,
                         why_t *w) {
  if (get_str(o, name, required, 0, dst, size, w) != 0) return -1;
  if ((dst[0] || required) && !bagua__rdzv_id_valid(dst))
    return fail(w, "field \"%s\": \"%.64s\" is not a valid node id", name, dst);
  return 0;
}

/* A round reason field: absent or "" is NONE; a word no reason has is refused. */
static inline int get_reason(const cJSON *o, const char *name, bagua__round_reason_t *out,
                             why_t *w) {
  char word[32];
  *out = BAGUA__ROUND_REASON_NONE;
  if (get_str(o, name, 0, 0, word, sizeof(word), w) != 0) return -1;
  if (bagua__round_reason_parse(word, out) != 0)
    return fail(w,
                "field \"%s\": \"%s\" is not a round reason (initial, invalid, failure, stall, "
                "membership)",
                name, word);
  return 0;
}

static inline cJSON *parse_object(const char *json, why_t *w) {
  cJSON *o = json ? cJSON_Parse(json) : NULL;
  if (cJSON_IsObject(o)) return o;
  cJSON_Delete(o);
  fail(w, "not a JSON object");
  return NULL;
}

static inline char *finish(cJSON *o, int ok) {
  char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}

#define PORT_MAX 65535
#define I53 ((int64_t)1 << 53)
#define INT_MAX_ 2147483647

/* An optional boolean: absent is 0; anything but true/false is refused. */
static inline int get_bool(const cJSON *o, const char *name, int *dst, why_t *w) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
  *dst = 0;
  if (!f) return 0;
  if (!cJSON_IsBool(f)) return fail(w, "field \"%s\" is not a boolean", name);
  *dst = cJSON_IsTrue(f);
  return 0;
}

#endif
