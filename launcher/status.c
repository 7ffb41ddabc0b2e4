/*
 * Reading the job status and the round from etcd. The agents write these keys; the parsing
 * is lenient about number encodings (JSON numbers or numeric strings) and ignores fields it
 * does not know, so the launcher keeps working as the agent's records grow.
 */
#include "status.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An integer field given as a number or a numeric string; `def` when absent or malformed. */
static int64_t get_int(const cJSON *obj, const char *name, int64_t def) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (cJSON_IsNumber(it)) return (int64_t)it->valuedouble;
  if (cJSON_IsString(it) && it->valuestring[0]) {
    char *end = NULL;
    long long v = strtoll(it->valuestring, &end, 10);
    if (*end == '\0') return v;
  }
  return def;
}

static void get_str(const cJSON *obj, const char *name, char *out, size_t len) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (cJSON_IsString(it))
    snprintf(out, len, "%s", it->valuestring);
  else if (cJSON_IsNumber(it))
    snprintf(out, len, "%lld", (long long)it->valuedouble);
}

int bagua__launch_parse_status(const char *json, size_t len, bagua__launch_status_t *out) {
  memset(out, 0, sizeof(*out));
  out->rank = out->round = out->exit_code = -1;
  cJSON *root = cJSON_ParseWithLength(json, len);
  int rc = -1;
  if (!cJSON_IsObject(root)) goto out;
  const cJSON *state = cJSON_GetObjectItemCaseSensitive(root, "state");
  if (!cJSON_IsString(state)) goto out;
  out->found = 1;
  snprintf(out->state, sizeof(out->state), "%s", state->valuestring);
  out->job_exit_code = get_int(root, "exit_code", -1);
  get_str(root, "message", out->message, sizeof(out->message));
  const cJSON *rcz = cJSON_GetObjectItemCaseSensitive(root, "root_cause");
  if (cJSON_IsObject(rcz)) {
    out->has_root_cause = 1;
    out->time_ms = get_int(rcz, "time_ms", 0);
    get_str(rcz, "node", out->node, sizeof(out->node));
    get_str(rcz, "host", out->host, sizeof(out->host));
    out->rank = get_int(rcz, "rank", -1);
    out->round = get_int(rcz, "round", -1);
    out->signal = get_int(rcz, "signal", 0);
    out->exit_code = get_int(rcz, "exit_code", out->signal > 0 ? -1 : 1);
  }
  rc = 0;
out:
  cJSON_Delete(root);
  return rc;
}

int bagua__launch_parse_round(const char *json, size_t len, bagua__launch_round_t *out) {
  memset(out, 0, sizeof(*out));
  out->round = out->world_size = -1;
  cJSON *root = cJSON_ParseWithLength(json, len);
  int rc = -1;
  if (!cJSON_IsObject(root)) goto out;
  out->found = 1;
  out->round = get_int(root, "round", -1);
  out->world_size = get_int(root, "world_size", -1);
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(root, "members");
  const cJSON *m;
  size_t o = 0;
  cJSON_ArrayForEach(m, members) {
    char name[96] = "?";
    if (cJSON_IsString(m))
      snprintf(name, sizeof(name), "%s", m->valuestring);
    else if (cJSON_IsObject(m)) {
      get_str(m, "node_id", name, sizeof(name));
      get_str(m, "node", name, sizeof(name));
    }
    out->nmembers++;
    if (o + strlen(name) + 8 < sizeof(out->members)) {
      int n = snprintf(out->members + o, sizeof(out->members) - o, "%s%s", o ? ", " : "", name);
      if (n > 0) o += (size_t)n;
    } else if (o + 4 < sizeof(out->members) && !strstr(out->members, "...")) {
      snprintf(out->members + o, sizeof(out->members) - o, "...");
      o += 3;
    }
  }
  rc = 0;
out:
  cJSON_Delete(root);
  return rc;
}

static bagua_status_t read_key(bagua__etcd_t *c, const char *job, const char *leaf,
                               bagua__etcd_kv_t *kv, int *found) {
  char key[256];
  snprintf(key, sizeof(key), "/bagua/%s/%s", job, leaf);
  return bagua__etcd_get(c, key, kv, found, NULL);
}

bagua_status_t bagua__launch_read_status(bagua__etcd_t *c, const char *job,
                                         bagua__launch_status_t *out) {
  bagua__etcd_kv_t kv = {0};
  int found = 0;
  memset(out, 0, sizeof(*out));
  bagua_status_t st = read_key(c, job, "status", &kv, &found);
  if (st == BAGUA_OK && found) {
    bagua__launch_parse_status(kv.value, kv.value_len, out);
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
  bagua_status_t st = read_key(c, job, "round", &kv, &found);
  if (st == BAGUA_OK && found) bagua__launch_parse_round(kv.value, kv.value_len, out);
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
