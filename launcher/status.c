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
    snprintf(out->error, sizeof(out->error), "%s", st.root.error);
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

/* ---------------------------------------------------------------------------------------- */
/* The job view                                                                              */
/* ---------------------------------------------------------------------------------------- */

void bagua__launch_job_clear(bagua__launch_job_t *j) {
  for (size_t i = 0; i < j->nnodes; i++) bagua__rdzv_progress_clear(&j->nodes[i].prog);
  free(j->nodes);
  bagua__rdzv_round_clear(&j->round);
  memset(j, 0, sizeof(*j));
}

const char *bagua__launch_job_state(const bagua__launch_job_t *j) {
  if (j->has_status) return bagua__rdzv_job_state_name(j->status.state);
  if (j->has_round) return "running";
  return j->nnodes > 0 ? "waiting" : "unknown";
}

static bagua__launch_node_view_t *find_node(bagua__launch_job_t *j, const char *id) {
  for (size_t i = 0; i < j->nnodes; i++)
    if (strcmp(j->nodes[i].id, id) == 0) return &j->nodes[i];
  return NULL;
}

static bagua__launch_node_view_t *add_node(bagua__launch_job_t *j, const char *id, size_t *cap) {
  bagua__launch_node_view_t *v = find_node(j, id);
  if (v) return v;
  if (j->nnodes == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    bagua__launch_node_view_t *nv = realloc(j->nodes, nc * sizeof(*nv));
    if (!nv) return NULL;
    j->nodes = nv;
    *cap = nc;
  }
  v = &j->nodes[j->nnodes++];
  memset(v, 0, sizeof(*v));
  snprintf(v->id, sizeof(v->id), "%s", id);
  v->member = -1;
  return v;
}

/* A value as a NUL-terminated string the decoders accept, or NULL (embedded NULs refused). */
static const char *as_text(const bagua__etcd_kv_t *kv) {
  return kv->value && memchr(kv->value, '\0', kv->value_len) == NULL ? kv->value : NULL;
}

static void reject(const bagua__etcd_kv_t *kv, const char *what, const char *why) {
  bagua__rdzv_reject(kv->key, kv->mod_revision, what, why[0] ? why : "not valid");
}

/* Members in round order first (with their ranks), then the registered spares. */
static int order_nodes(bagua__launch_job_t *j) {
  size_t n = j->nnodes;
  bagua__launch_node_view_t *sorted = calloc(n ? n : 1, sizeof(*sorted));
  if (!sorted) return -1;
  size_t k = 0;
  for (int m = 0; j->has_round && m < j->round.nmembers; m++)
    for (size_t i = 0; i < n; i++)
      if (j->nodes[i].member == m) sorted[k++] = j->nodes[i];
  for (size_t i = 0; i < n; i++)
    if (j->nodes[i].member < 0) sorted[k++] = j->nodes[i];
  if (n) memcpy(j->nodes, sorted, n * sizeof(*sorted)); /* j->nodes is NULL without nodes */
  free(sorted);
  return 0;
}

static void summarise(bagua__launch_job_t *j) {
  double rate_sum = 0;
  j->min_step = -1;
  for (size_t i = 0; i < j->nnodes; i++) {
    const bagua__launch_node_view_t *v = &j->nodes[i];
    if (!v->has_progress || v->member < 0 || !j->has_round || v->prog.round != j->round.round)
      continue;
    for (int w = 0; w < v->prog.nworkers; w++) {
      const bagua__rdzv_wprogress_t *x = &v->prog.w[w];
      j->nreporting++;
      if (j->min_step < 0 || x->step < j->min_step) j->min_step = x->step;
      if (x->total_steps > j->total_steps) j->total_steps = x->total_steps;
      rate_sum += (double)x->rate_milli / 1000.0;
    }
  }
  if (j->min_step < 0) j->min_step = 0;
  j->rate = j->nreporting ? rate_sum / j->nreporting : 0;
}

int bagua__launch_job_parse(const char *job, const bagua__etcd_kv_t *kvs, size_t n,
                            bagua__launch_job_t *out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->job, sizeof(out->job), "%s", job);
  char prefix[BAGUA_RDZV_KEY_MAX], why[256];
  if (bagua__rdzv_key(prefix, sizeof(prefix), job, BAGUA__RDZV_KEY_PREFIX, 0, NULL, 0) != 0)
    return -1;
  size_t cap = 0;
  /* The round first: membership and ranks of the nodes come from it. */
  for (size_t i = 0; i < n; i++) {
    bagua__rdzv_key_info_t ki;
    if (bagua__rdzv_key_parse(prefix, kvs[i].key, &ki) != 0) continue;
    out->nkeys++;
    const char *v = as_text(&kvs[i]);
    why[0] = '\0';
    switch (ki.kind) {
      case BAGUA__RDZV_KEY_ROUND:
        if (v && bagua__rdzv_round_decode(v, &out->round, why, sizeof(why)) == 0)
          out->has_round = 1;
        else
          reject(&kvs[i], "a round record", why);
        break;
      case BAGUA__RDZV_KEY_STATUS:
        if (v && bagua__rdzv_status_decode(v, &out->status, why, sizeof(why)) == 0)
          out->has_status = 1;
        else
          reject(&kvs[i], "a status record", why);
        break;
      case BAGUA__RDZV_KEY_CONFIG:
        if (v && bagua__rdzv_jobcfg_decode(v, &out->cfg, why, sizeof(why)) == 0) out->has_cfg = 1;
        break;
      case BAGUA__RDZV_KEY_LEADER:
        if (!v ||
            bagua__rdzv_leader_decode(v, out->leader, sizeof(out->leader), why, sizeof(why)) != 0)
          out->leader[0] = '\0';
        break;
      default:
        break;
    }
  }
  for (int m = 0; out->has_round && m < out->round.nmembers; m++) {
    bagua__launch_node_view_t *nv = add_node(out, out->round.members[m].id, &cap);
    if (!nv) goto nomem;
    nv->member = m;
    nv->nproc = out->round.members[m].nproc;
    nv->rank_base = bagua__rdzv_rank_base(&out->round, m);
  }
  for (size_t i = 0; i < n; i++) {
    bagua__rdzv_key_info_t ki;
    if (bagua__rdzv_key_parse(prefix, kvs[i].key, &ki) != 0) continue;
    if (ki.kind != BAGUA__RDZV_KEY_NODE && ki.kind != BAGUA__RDZV_KEY_PROGRESS) continue;
    const char *v = as_text(&kvs[i]);
    if (!bagua__rdzv_id_valid(ki.name) || strlen(ki.name) >= BAGUA_RDZV_ID_MAX) continue;
    why[0] = '\0';
    if (ki.kind == BAGUA__RDZV_KEY_NODE) {
      bagua__rdzv_node_t rec;
      memset(&rec, 0, sizeof(rec));
      snprintf(rec.id, sizeof(rec.id), "%s", ki.name);
      if (!v || bagua__rdzv_node_decode(v, &rec, why, sizeof(why)) != 0) {
        reject(&kvs[i], "a node record", why);
        continue;
      }
      bagua__launch_node_view_t *nv = add_node(out, ki.name, &cap);
      if (!nv) goto nomem;
      nv->registered = 1;
      rec.create_rev = kvs[i].create_revision;
      rec.lease = kvs[i].lease;
      nv->rec = rec;
      if (nv->member < 0) nv->nproc = rec.nproc;
    } else {
      bagua__rdzv_progress_t p;
      memset(&p, 0, sizeof(p));
      snprintf(p.node, sizeof(p.node), "%s", ki.name);
      if (!v || bagua__rdzv_progress_decode(v, &p, why, sizeof(why)) != 0) {
        reject(&kvs[i], "a progress record", why);
        continue;
      }
      bagua__launch_node_view_t *nv = add_node(out, ki.name, &cap);
      if (!nv) {
        bagua__rdzv_progress_clear(&p);
        goto nomem;
      }
      bagua__rdzv_progress_clear(&nv->prog);
      nv->prog = p;
      nv->has_progress = 1;
    }
  }
  /* A progress record alone (its node left) is no node of the job. */
  size_t k = 0;
  for (size_t i = 0; i < out->nnodes; i++) {
    if (!out->nodes[i].registered && out->nodes[i].member < 0) {
      bagua__rdzv_progress_clear(&out->nodes[i].prog);
      continue;
    }
    out->nodes[k++] = out->nodes[i];
  }
  out->nnodes = k;
  if (order_nodes(out) != 0) goto nomem;
  summarise(out);
  return 0;
nomem:
  bagua__launch_job_clear(out);
  return -1;
}

bagua_status_t bagua__launch_read_job(bagua__etcd_t *c, const char *job, bagua__launch_job_t *out) {
  char prefix[BAGUA_RDZV_KEY_MAX];
  memset(out, 0, sizeof(*out));
  if (bagua__rdzv_key(prefix, sizeof(prefix), job, BAGUA__RDZV_KEY_PREFIX, 0, NULL, 0) != 0)
    return BAGUA_ERR_INVALID_ARG;
  bagua__etcd_kv_t *kvs = NULL;
  size_t n = 0;
  bagua_status_t st = bagua__etcd_range_prefix(c, prefix, &kvs, &n, NULL);
  if (st != BAGUA_OK) return st;
  int rc = bagua__launch_job_parse(job, kvs, n, out);
  bagua__etcd_kvs_free(kvs, n);
  return rc == 0 ? BAGUA_OK : BAGUA_ERR_NO_MEMORY;
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
