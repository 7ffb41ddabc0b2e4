/*
 * Reading the job status and the round from etcd. The records, their keys and their
 * validation are common/rdzv's (the one schema the agents write with): a value the schema
 * refuses is reported with its key and field and counts as absent, never half-trusted.
 */
#include "status.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rdzv/rdzv.h"

/* The value as a NUL-terminated copy (etcd values may be any bytes); NULL when out of memory. */
static char *terminated(const char *json, size_t len) {
  char *v = malloc(len + 1);
  if (v) {
    memcpy(v, json, len);
    v[len] = '\0';
  }
  return v;
}

int bagua__launch_parse_status(const char *json, size_t len, bagua__launch_status_t *out) {
  memset(out, 0, sizeof(*out));
  out->rank = out->round = out->exit_code = out->job_exit_code = -1;
  char *v = terminated(json, len);
  bagua__rdzv_status_t st;
  int rc = v && memchr(json, '\0', len) == NULL ? bagua__rdzv_status_decode(v, &st, NULL, 0) : -1;
  free(v);
  if (rc != 0) return -1;
  out->found = 1;
  snprintf(out->state, sizeof(out->state), "%s", bagua__rdzv_job_state_name(st.state));
  out->job_exit_code = st.exit_code;
  snprintf(out->message, sizeof(out->message), "%.255s", st.message);
  if (st.has_root) {
    out->has_root_cause = 1;
    out->time_ms = st.root.time_ms;
    snprintf(out->node, sizeof(out->node), "%.95s", st.root.node);
    snprintf(out->host, sizeof(out->host), "%s", st.root.host);
    out->rank = st.root.rank;
    out->round = st.root.round;
    out->signal = st.root.signal;
    out->exit_code = st.root.signal > 0 ? -1 : st.root.exit_code;
    snprintf(out->reason, sizeof(out->reason), "%s", st.root.reason);
  }
  return 0;
}

int bagua__launch_parse_round(const char *json, size_t len, bagua__launch_round_t *out) {
  memset(out, 0, sizeof(*out));
  out->round = out->world_size = -1;
  char *v = terminated(json, len);
  bagua__rdzv_round_t r;
  int rc = v && memchr(json, '\0', len) == NULL ? bagua__rdzv_round_decode(v, &r, NULL, 0) : -1;
  free(v);
  if (rc != 0) return -1;
  out->found = 1;
  out->round = r.round;
  out->world_size = r.world_size;
  out->nmembers = r.nmembers;
  size_t o = 0;
  for (int i = 0; i < r.nmembers; i++) {
    const char *name = r.members[i].id;
    if (o + strlen(name) + 8 < sizeof(out->members)) {
      int n = snprintf(out->members + o, sizeof(out->members) - o, "%s%s", o ? ", " : "", name);
      if (n > 0) o += (size_t)n;
    } else if (o + 4 < sizeof(out->members) && !strstr(out->members, "...")) {
      snprintf(out->members + o, sizeof(out->members) - o, "...");
      o += 3;
    }
  }
  bagua__rdzv_round_clear(&r);
  return 0;
}

/* Reads `kind`'s key of `job`; a value the schema refuses is reported once per revision. */
static bagua_status_t read_key(bagua__etcd_t *c, const char *job, bagua__rdzv_key_kind_t kind,
                               bagua__etcd_kv_t *kv, int *found) {
  char key[BAGUA_RDZV_KEY_MAX];
  *found = 0;
  if (bagua__rdzv_key(key, sizeof(key), job, kind, 0, NULL, 0) != 0) return BAGUA_ERR_INVALID_ARG;
  return bagua__etcd_get(c, key, kv, found, NULL);
}

bagua_status_t bagua__launch_read_status(bagua__etcd_t *c, const char *job,
                                         bagua__launch_status_t *out) {
  bagua__etcd_kv_t kv = {0};
  int found = 0;
  memset(out, 0, sizeof(*out));
  bagua_status_t st = read_key(c, job, BAGUA__RDZV_KEY_STATUS, &kv, &found);
  if (st == BAGUA_OK && found) {
    if (bagua__launch_parse_status(kv.value, kv.value_len, out) != 0) {
      char why[160] = "";
      bagua__rdzv_status_t tmp;
      bagua__rdzv_status_decode(kv.value, &tmp, why, sizeof(why));
      bagua__rdzv_reject(kv.key, kv.mod_revision, "a status record", why);
    }
    out->mod_revision = kv.mod_revision;
  }
  bagua__etcd_kv_clear(&kv);
  return st;
}

bagua_status_t bagua__launch_read_round(bagua__etcd_t *c, const char *job,
                                        bagua__launch_round_t *out) {
  bagua__etcd_kv_t kv = {0};
  int found = 0;
  memset(out, 0, sizeof(*out));
  bagua_status_t st = read_key(c, job, BAGUA__RDZV_KEY_ROUND, &kv, &found);
  if (st == BAGUA_OK && found && bagua__launch_parse_round(kv.value, kv.value_len, out) != 0) {
    char why[160] = "";
    bagua__rdzv_round_t tmp;
    if (bagua__rdzv_round_decode(kv.value, &tmp, why, sizeof(why)) == 0)
      bagua__rdzv_round_clear(&tmp);
    bagua__rdzv_reject(kv.key, kv.mod_revision, "a round record", why);
  }
  bagua__etcd_kv_clear(&kv);
  return st;
}

int bagua__launch_status_code(const bagua__launch_status_t *st) {
  if (st->signal > 0) return (int)(128 + st->signal);
  if (st->exit_code >= 0 && st->exit_code <= 255) return (int)st->exit_code;
  return 1;
}

void bagua__launch_format_time(int64_t ms, char *out, size_t len) {
  time_t s = (time_t)(ms / 1000);
  struct tm tm;
  char buf[32];
  if (ms <= 0 || !localtime_r(&s, &tm)) {
    snprintf(out, len, "(unknown time)");
    return;
  }
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  snprintf(out, len, "%s.%03d", buf, (int)(ms % 1000));
}

void bagua__launch_format_code(int code, int is_signal, char *out, size_t len) {
  if (is_signal) {
    const char *abbrev = sigabbrev_np(code);
    if (abbrev)
      snprintf(out, len, "signal %d (SIG%s)", code, abbrev);
    else
      snprintf(out, len, "signal %d", code);
  } else {
    snprintf(out, len, "exit code %d", code);
  }
}
