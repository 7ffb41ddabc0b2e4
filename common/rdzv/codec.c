/*
 * JSON codec of the rendezvous records (rdzv.h). The values are small objects that people
 * also read with etcdctl, so field names are spelled out and numbers are plain JSON numbers
 * (every integer here is far below 2^53, where doubles are exact).
 *
 * Decoding is strict: a field of the wrong JSON type, a number that is not an integer or not
 * in its range, or a string longer than its buffer refuses the whole record and says which
 * field. Fields the decoder does not know are ignored, so records can grow.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "rdzv.h"

/* ---------------------------------------------------------------------------------------- */
/* nodes/<id>                                                                                */
/* ---------------------------------------------------------------------------------------- */

char *bagua__rdzv_node_encode(const bagua__rdzv_node_t *n) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok =
      cJSON_AddStringToObject(o, "host", n->host) && cJSON_AddStringToObject(o, "addr", n->addr) &&
      cJSON_AddNumberToObject(o, "nproc", n->nproc) && cJSON_AddNumberToObject(o, "pid", n->pid) &&
      cJSON_AddStringToObject(o, "version", n->version) &&
      cJSON_AddNumberToObject(o, "join_ms", (double)n->join_ms) &&
      cJSON_AddNumberToObject(o, "master_port", n->master_port) &&
      cJSON_AddStringToObject(o, "tag", n->tag);
  /* Written only when there is one, so records stay what older agents wrote and read. */
  if (ok && n->live_port > 0) ok = cJSON_AddNumberToObject(o, "live_port", n->live_port) != NULL;
  if (ok && n->has_node_rank) ok = cJSON_AddNumberToObject(o, "node_rank", n->node_rank) != NULL;
  return finish(o, ok);
}

int bagua__rdzv_node_decode(const char *json, bagua__rdzv_node_t *n, char *why, size_t len) {
  why_t w = {why, len};
  CLEAR_KEEPING(n, id);
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  int rc = get_str(o, "host", 1, 1, n->host, sizeof(n->host), &w) ||
           get_str(o, "addr", 1, 1, n->addr, sizeof(n->addr), &w) ||
           get_int(o, "nproc", 1, 1, BAGUA_RDZV_NPROC_MAX, &n->nproc, &w) ||
           get_int(o, "pid", 0, 0, INT_MAX_, &n->pid, &w) ||
           get_str(o, "version", 0, 0, n->version, sizeof(n->version), &w) ||
           get_i64(o, "join_ms", 0, 0, I53, &n->join_ms, &w) ||
           get_int(o, "master_port", 1, 1, PORT_MAX, &n->master_port, &w) ||
           get_str(o, "tag", 0, 0, n->tag, sizeof(n->tag), &w) ||
           get_int(o, "live_port", 0, 0, PORT_MAX, &n->live_port, &w) ||
           get_int(o, "node_rank", 0, 0, BAGUA_RDZV_MEMBERS_MAX - 1, &n->node_rank, &w);
  n->has_node_rank = rc == 0 && cJSON_GetObjectItemCaseSensitive(o, "node_rank") != NULL;
  cJSON_Delete(o);
  return rc ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* round                                                                                     */
/* ---------------------------------------------------------------------------------------- */

void bagua__rdzv_round_clear(bagua__rdzv_round_t *r) {
  if (!r) return;
  free(r->members);
  memset(r, 0, sizeof(*r));
}

int bagua__rdzv_round_copy(bagua__rdzv_round_t *dst, const bagua__rdzv_round_t *src) {
  *dst = *src;
  dst->members = NULL;
  if (src->nmembers > 0) {
    dst->members = malloc((size_t)src->nmembers * sizeof(*dst->members));
    if (!dst->members) {
      memset(dst, 0, sizeof(*dst));
      return -1;
    }
    memcpy(dst->members, src->members, (size_t)src->nmembers * sizeof(*dst->members));
  }
  return 0;
}

int bagua__rdzv_round_find(const bagua__rdzv_round_t *r, const char *node) {
  for (int i = 0; i < r->nmembers; i++)
    if (strcmp(r->members[i].id, node) == 0) return i;
  return -1;
}

char *bagua__rdzv_round_encode(const bagua__rdzv_round_t *r) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON *members = cJSON_AddArrayToObject(o, "members");
  cJSON *nprocs = cJSON_AddArrayToObject(o, "nprocs");
  cJSON *revs = cJSON_AddArrayToObject(o, "member_revs");
  int ok = members && nprocs && revs;
  for (int i = 0; ok && i < r->nmembers; i++) {
    cJSON *id = cJSON_CreateString(r->members[i].id);
    cJSON *np = cJSON_CreateNumber(r->members[i].nproc);
    cJSON *rv = cJSON_CreateNumber((double)r->members[i].rev);
    ok = id && np && rv;
    if (id) cJSON_AddItemToArray(members, id);
    if (np) cJSON_AddItemToArray(nprocs, np);
    if (rv) cJSON_AddItemToArray(revs, rv);
  }
  ok = ok && cJSON_AddNumberToObject(o, "round", (double)r->round) &&
       cJSON_AddNumberToObject(o, "world_size", r->world_size) &&
       cJSON_AddStringToObject(o, "master_addr", r->master_addr) &&
       cJSON_AddNumberToObject(o, "master_port", r->master_port) &&
       cJSON_AddNumberToObject(o, "restart_count", r->restart_count) &&
       cJSON_AddStringToObject(o, "reason", bagua__round_reason_word(r->reason)) &&
       cJSON_AddStringToObject(o, "leader", r->leader) &&
       cJSON_AddNumberToObject(o, "time_ms", (double)r->time_ms) &&
       cJSON_AddNumberToObject(o, "departed", r->departed);
  return finish(o, ok);
}

/* Element i of an array (f) as an integer in [lo, hi]. */
static int array_i64(const cJSON *f, const char *name, int i, int64_t lo, int64_t hi, int64_t *out,
                     why_t *w) {
  double d = cJSON_IsNumber(f) ? f->valuedouble : (double)lo - 1.0;
  if (!(d >= (double)lo && d <= (double)hi) || (double)(int64_t)d != d)
    return fail(w, "field \"%s\"[%d] is not an integer in %lld..%lld", name, i, (long long)lo,
                (long long)hi);
  *out = (int64_t)d;
  return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether a round names a node twice (sorted: O(n log n), not a comparison of every pair). */
static int duplicate_member(const bagua__rdzv_round_t *r, why_t *w) {
  const char **ids = malloc((size_t)r->nmembers * sizeof(*ids));
  if (!ids) return fail(w, "out of memory");
  for (int i = 0; i < r->nmembers; i++) ids[i] = r->members[i].id;
  qsort(ids, (size_t)r->nmembers, sizeof(*ids), cmp_str_ptr);
  int rc = 0;
  for (int i = 1; i < r->nmembers && !rc; i++)
    if (strcmp(ids[i - 1], ids[i]) == 0)
      rc = fail(w, "field \"members\" names node \"%s\" twice", ids[i]);
  free(ids);
  return rc;
}

int bagua__rdzv_round_decode(const char *json, bagua__rdzv_round_t *r, char *why, size_t len) {
  why_t w = {why, len};
  memset(r, 0, sizeof(*r));
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(o, "members");
  const cJSON *nprocs = cJSON_GetObjectItemCaseSensitive(o, "nprocs");
  const cJSON *revs = cJSON_GetObjectItemCaseSensitive(o, "member_revs");
  int n = cJSON_IsArray(members) ? cJSON_GetArraySize(members) : -1;
  if (n < 1 || n > BAGUA_RDZV_MEMBERS_MAX) {
    fail(&w, "field \"members\" is not an array of 1..%d node ids", BAGUA_RDZV_MEMBERS_MAX);
    goto fail;
  }
  if (!cJSON_IsArray(nprocs) || cJSON_GetArraySize(nprocs) != n) {
    fail(&w, "field \"nprocs\" is not an array as long as \"members\" (%d)", n);
    goto fail;
  }
  if (revs && (!cJSON_IsArray(revs) || cJSON_GetArraySize(revs) != n)) {
    fail(&w, "field \"member_revs\" is not an array as long as \"members\" (%d)", n);
    goto fail;
  }
  r->members = calloc((size_t)n, sizeof(*r->members));
  if (!r->members) {
    fail(&w, "out of memory");
    goto fail;
  }
  r->nmembers = n;
  /* Summed in 64 bits: n * NPROC_MAX cannot overflow it, and the bound is checked below. The
   * three arrays are walked together (cJSON_GetArrayItem walks from the head each time: a
   * thousand members would cost a million steps). */
  int64_t world = 0;
  const cJSON *id = members->child, *np = nprocs->child, *rv = revs ? revs->child : NULL;
  for (int i = 0; i < n; i++, id = id->next, np = np->next, rv = rv ? rv->next : NULL) {
    if (!cJSON_IsString(id) || !bagua__rdzv_id_valid(id->valuestring)) {
      fail(&w, "field \"members\"[%d] is not a valid node id", i);
      goto fail;
    }
    snprintf(r->members[i].id, sizeof(r->members[i].id), "%s", id->valuestring);
    int64_t v = 0;
    if (array_i64(np, "nprocs", i, 1, BAGUA_RDZV_NPROC_MAX, &v, &w) != 0) goto fail;
    r->members[i].nproc = (int)v;
    world += v;
    if (revs && array_i64(rv, "member_revs", i, 0, I53, &r->members[i].rev, &w) != 0) goto fail;
  }
  if (duplicate_member(r, &w)) goto fail;
  if (get_i64(o, "round", 1, 1, I53, &r->round, &w) ||
      get_int(o, "world_size", 1, 1, BAGUA_RDZV_WORLD_MAX, &r->world_size, &w) ||
      get_str(o, "master_addr", 1, 1, r->master_addr, sizeof(r->master_addr), &w) ||
      get_int(o, "master_port", 1, 1, PORT_MAX, &r->master_port, &w) ||
      get_int(o, "restart_count", 0, 0, INT_MAX_, &r->restart_count, &w) ||
      get_reason(o, "reason", &r->reason, &w) ||
      get_id(o, "leader", 0, r->leader, sizeof(r->leader), &w) ||
      get_i64(o, "time_ms", 0, 0, I53, &r->time_ms, &w) ||
      get_int(o, "departed", 0, 0, BAGUA_RDZV_MEMBERS_MAX, &r->departed, &w))
    goto fail;
  if (world != r->world_size) {
    fail(&w, "field \"world_size\": %d is not the sum of \"nprocs\" (%lld)", r->world_size,
         (long long)world);
    goto fail;
  }
  cJSON_Delete(o);
  return 0;
fail:
  cJSON_Delete(o);
  bagua__rdzv_round_clear(r);
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Failures, done records, status                                                            */
/* ---------------------------------------------------------------------------------------- */

static int add_failure(cJSON *o, const bagua__rdzv_failure_t *f) {
  int ok = cJSON_AddStringToObject(o, "node", f->node) &&
           cJSON_AddStringToObject(o, "host", f->host) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)f->time_ms) &&
           cJSON_AddNumberToObject(o, "round", (double)f->round) &&
           cJSON_AddNumberToObject(o, "rank", f->rank) &&
           cJSON_AddNumberToObject(o, "local_rank", f->local_rank) &&
           cJSON_AddNumberToObject(o, "pid", f->pid);
  if (!ok) return 0;
  if (f->reason[0] && !cJSON_AddStringToObject(o, "reason", f->reason)) return 0;
  if (f->permanent && !cJSON_AddTrueToObject(o, "permanent")) return 0;
  /* Optional, so a record without an error file is byte for byte what it always was. */
  if (f->error[0] && !cJSON_AddStringToObject(o, "error", f->error)) return 0;
  if (f->signal) return cJSON_AddNumberToObject(o, "signal", f->signal) != NULL;
  return cJSON_AddNumberToObject(o, "exit_code", f->exit_code) != NULL;
}

static int get_failure(const cJSON *o, bagua__rdzv_failure_t *f, why_t *w) {
  memset(f, 0, sizeof(*f));
  return get_id(o, "node", 1, f->node, sizeof(f->node), w) ||
                 get_str(o, "host", 0, 0, f->host, sizeof(f->host), w) ||
                 get_i64(o, "time_ms", 0, 0, I53, &f->time_ms, w) ||
                 get_i64(o, "round", 0, 0, I53, &f->round, w) ||
                 get_int(o, "rank", 0, 0, BAGUA_RDZV_WORLD_MAX, &f->rank, w) ||
                 get_int(o, "local_rank", 0, 0, BAGUA_RDZV_NPROC_MAX, &f->local_rank, w) ||
                 get_int(o, "pid", 0, 0, INT_MAX_, &f->pid, w) ||
                 get_int(o, "signal", 0, 0, 127, &f->signal, w) ||
                 get_int(o, "exit_code", 0, 0, 255, &f->exit_code, w) ||
                 get_str(o, "reason", 0, 0, f->reason, sizeof(f->reason), w) ||
                 get_bool(o, "permanent", &f->permanent, w) ||
                 get_str(o, "error", 0, 0, f->error, sizeof(f->error), w)
             ? -1
             : 0;
}

static const char *done_names[] = {"succeeded", "failed", "stopped"};

char *bagua__rdzv_done_encode(const bagua__rdzv_done_t *d) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = (unsigned)d->state < 3 && cJSON_AddStringToObject(o, "state", done_names[d->state]);
  if (ok && d->state == BAGUA__DONE_FAILED) {
    ok = add_failure(o, &d->f);
  } else if (ok) {
    ok = cJSON_AddStringToObject(o, "node", d->f.node) &&
         cJSON_AddNumberToObject(o, "time_ms", (double)d->f.time_ms);
  }
  if (ok && d->kept) ok = cJSON_AddBoolToObject(o, "kept", 1) != NULL;
  return finish(o, ok);
}

int bagua__rdzv_done_decode(const char *json, bagua__rdzv_done_t *d, char *why, size_t len) {
  why_t w = {why, len};
  memset(d, 0, sizeof(*d));
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  char state[16];
  int rc = get_str(o, "state", 1, 1, state, sizeof(state), &w);
  if (rc == 0) {
    rc = fail(&w, "field \"state\": \"%s\" is not succeeded, failed or stopped", state);
    for (int i = 0; i < 3; i++)
      if (strcmp(state, done_names[i]) == 0) {
        d->state = (bagua__done_state_t)i;
        rc = get_failure(o, &d->f, &w);
      }
  }
  if (rc == 0) rc = get_bool(o, "kept", &d->kept, &w);
  cJSON_Delete(o);
  return rc;
}

static const char *job_names[] = {"running", "succeeded", "failed", "closed"};

const char *bagua__rdzv_job_state_name(bagua__job_state_t st) {
  return (unsigned)st < 4 ? job_names[st] : "unknown";
}

char *bagua__rdzv_status_encode(const bagua__rdzv_status_t *s) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddStringToObject(o, "state", bagua__rdzv_job_state_name(s->state)) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)s->time_ms) &&
           cJSON_AddNumberToObject(o, "round", (double)s->round) &&
           cJSON_AddNumberToObject(o, "exit_code", s->exit_code) &&
           cJSON_AddStringToObject(o, "message", s->message);
  if (ok && s->has_root) {
    cJSON *root = cJSON_AddObjectToObject(o, "root_cause");
    ok = root && add_failure(root, &s->root);
  }
  return finish(o, ok);
}

int bagua__rdzv_status_decode(const char *json, bagua__rdzv_status_t *s, char *why, size_t len) {
  why_t w = {why, len};
  memset(s, 0, sizeof(*s));
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  char state[16];
  int rc = get_str(o, "state", 1, 1, state, sizeof(state), &w);
  if (rc == 0) {
    rc = fail(&w, "field \"state\": \"%s\" is not running, succeeded, failed or closed", state);
    for (int i = 0; i < 4; i++)
      if (strcmp(state, job_names[i]) == 0) {
        s->state = (bagua__job_state_t)i;
        rc = 0;
      }
  }
  if (rc == 0)
    rc = get_i64(o, "time_ms", 0, 0, I53, &s->time_ms, &w) ||
                 get_i64(o, "round", 0, 0, I53, &s->round, &w) ||
                 get_int(o, "exit_code", 0, 0, 255, &s->exit_code, &w) ||
                 get_str(o, "message", 0, 0, s->message, sizeof(s->message), &w)
             ? -1
             : 0;
  const cJSON *root = cJSON_GetObjectItemCaseSensitive(o, "root_cause");
  if (rc == 0 && root) {
    if (!cJSON_IsObject(root)) {
      rc = fail(&w, "field \"root_cause\" is not an object");
    } else {
      s->has_root = 1;
      char inner[200] = "";
      why_t wi = {inner, sizeof(inner)};
      if (get_failure(root, &s->root, &wi) != 0) rc = fail(&w, "field \"root_cause\": %s", inner);
    }
  }
  cJSON_Delete(o);
  return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* rounds/<N>/rebuild/<rank>                                                                 */
/* ---------------------------------------------------------------------------------------- */

char *bagua__rdzv_rebuild_encode(const bagua__rdzv_rebuild_t *r) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddStringToObject(o, "node", r->node) &&
           cJSON_AddNumberToObject(o, "rank", r->rank) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)r->time_ms) &&
           cJSON_AddStringToObject(o, "why", r->why);
  return finish(o, ok);
}

int bagua__rdzv_rebuild_decode(const char *json, bagua__rdzv_rebuild_t *r, char *why, size_t len) {
  why_t w = {why, len};
  memset(r, 0, sizeof(*r));
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  int rc = get_id(o, "node", 1, r->node, sizeof(r->node), &w) ||
           get_int(o, "rank", 1, 0, BAGUA_RDZV_WORLD_MAX, &r->rank, &w) ||
           get_i64(o, "time_ms", 0, 0, I53, &r->time_ms, &w) ||
           get_str(o, "why", 0, 0, r->why, sizeof(r->why), &w);
  cJSON_Delete(o);
  return rc ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* progress/<node> and the workers' progress files                                           */
/* ---------------------------------------------------------------------------------------- */

void bagua__rdzv_progress_clear(bagua__rdzv_progress_t *p) {
  free(p->w);
  p->w = NULL;
  p->nworkers = 0;
}

char *bagua__rdzv_progress_encode(const bagua__rdzv_progress_t *p) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON *arr = NULL;
  int ok = cJSON_AddNumberToObject(o, "round", (double)p->round) &&
           cJSON_AddNumberToObject(o, "restart_count", p->restart_count) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)p->time_ms) &&
           (arr = cJSON_AddArrayToObject(o, "workers")) != NULL;
  for (int i = 0; ok && i < p->nworkers; i++) {
    const bagua__rdzv_wprogress_t *w = &p->w[i];
    cJSON *e = cJSON_CreateObject();
    ok = e && cJSON_AddItemToArray(arr, e);
    if (!ok) {
      cJSON_Delete(e);
      break;
    }
    ok = cJSON_AddNumberToObject(e, "local_rank", w->local_rank) &&
         cJSON_AddNumberToObject(e, "rank", w->rank) && cJSON_AddNumberToObject(e, "pid", w->pid) &&
         cJSON_AddNumberToObject(e, "step", (double)w->step) &&
         cJSON_AddNumberToObject(e, "total_steps", (double)w->total_steps) &&
         cJSON_AddNumberToObject(e, "samples", (double)w->samples) &&
         cJSON_AddNumberToObject(e, "bytes_sent", (double)w->bytes_sent) &&
         cJSON_AddNumberToObject(e, "comm_ms", (double)w->comm_ms) &&
         cJSON_AddNumberToObject(e, "rate_milli", (double)w->rate_milli) &&
         cJSON_AddNumberToObject(e, "update_ms", (double)w->update_ms);
  }
  return finish(o, ok);
}

int bagua__rdzv_progress_decode(const char *json, bagua__rdzv_progress_t *p, char *why,
                                size_t len) {
  why_t w = {why, len};
  CLEAR_KEEPING(p, node);
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  int rc = get_i64(o, "round", 1, 1, I53, &p->round, &w) ||
           get_int(o, "restart_count", 0, 0, INT_MAX_, &p->restart_count, &w) ||
           get_i64(o, "time_ms", 0, 0, I53, &p->time_ms, &w);
  const cJSON *arr = rc ? NULL : cJSON_GetObjectItemCaseSensitive(o, "workers");
  if (!rc && !cJSON_IsArray(arr)) rc = fail(&w, "field \"workers\" is missing or not an array");
  int n = rc ? 0 : cJSON_GetArraySize(arr);
  if (!rc && n > BAGUA_RDZV_NPROC_MAX)
    rc = fail(&w, "field \"workers\": %d entries, more than %d", n, BAGUA_RDZV_NPROC_MAX);
  if (!rc && n > 0 && !(p->w = calloc((size_t)n, sizeof(*p->w)))) rc = fail(&w, "out of memory");
  for (int i = 0; !rc && i < n; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    bagua__rdzv_wprogress_t *x = &p->w[i];
    if (!cJSON_IsObject(e)) {
      rc = fail(&w, "field \"workers\"[%d] is not an object", i);
      break;
    }
    char inner[160] = "";
    why_t wi = {inner, sizeof(inner)};
    rc = get_int(e, "local_rank", 1, 0, BAGUA_RDZV_NPROC_MAX - 1, &x->local_rank, &wi) ||
         get_int(e, "rank", 1, 0, BAGUA_RDZV_WORLD_MAX - 1, &x->rank, &wi) ||
         get_int(e, "pid", 0, 0, INT_MAX_, &x->pid, &wi) ||
         get_i64(e, "step", 1, 0, I53, &x->step, &wi) ||
         get_i64(e, "total_steps", 0, 0, I53, &x->total_steps, &wi) ||
         get_i64(e, "samples", 0, 0, I53, &x->samples, &wi) ||
         get_i64(e, "bytes_sent", 0, 0, I53, &x->bytes_sent, &wi) ||
         get_i64(e, "comm_ms", 0, 0, I53, &x->comm_ms, &wi) ||
         get_i64(e, "rate_milli", 0, 0, I53, &x->rate_milli, &wi) ||
         get_i64(e, "update_ms", 0, 0, I53, &x->update_ms, &wi);
    if (rc) {
      fail(&w, "field \"workers\"[%d]: %s", i, inner);
      break;
    }
    for (int j = 0; j < i; j++)
      if (p->w[j].local_rank == x->local_rank) {
        rc = fail(&w, "field \"workers\"[%d]: local_rank %d appears twice", i, x->local_rank);
        break;
      }
    p->nworkers = i + 1;
  }
  cJSON_Delete(o);
  if (rc) bagua__rdzv_progress_clear(p);
  return rc ? -1 : 0;
}

int bagua__progress_file_decode(const void *buf, size_t len, bagua__progress_file_t *out, char *why,
                                size_t whylen) {
  why_t w = {why, whylen};
  memset(out, 0, sizeof(*out));
  if (len != sizeof(*out))
    return fail(&w, "%zu bytes, expected %zu (a progress file of another version?)", len,
                sizeof(*out));
  memcpy(out, buf, sizeof(*out));
  if (out->magic != BAGUA_PROGRESS_FILE_MAGIC) return fail(&w, "bad magic");
  if (out->version != BAGUA_PROGRESS_FILE_VERSION || out->size != sizeof(*out))
    return fail(&w, "version %u size %u, expected version %d size %zu", out->version, out->size,
                BAGUA_PROGRESS_FILE_VERSION, sizeof(*out));
  if (out->seq & 1) return fail(&w, "the writer is inside an update (odd sequence count)");
  const struct {
    const char *name;
    int64_t v;
  } f[] = {{"pid", out->pid},
           {"step", out->step},
           {"total_steps", out->total_steps},
           {"samples", out->samples},
           {"bytes_sent", out->bytes_sent},
           {"comm_us", out->comm_us},
           {"start_ms", out->start_ms},
           {"update_ms", out->update_ms}};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
    if (f[i].v < 0 || f[i].v > I53)
      return fail(&w, "field \"%s\": %lld is not in 0..%lld", f[i].name, (long long)f[i].v,
                  (long long)I53);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* config, leader, secret                                                                    */
/* ---------------------------------------------------------------------------------------- */

char *bagua__rdzv_jobcfg_encode(const bagua__rdzv_jobcfg_t *c) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddNumberToObject(o, "nnodes_min", c->nnodes_min) &&
           cJSON_AddNumberToObject(o, "nnodes_max", c->nnodes_max) &&
           cJSON_AddNumberToObject(o, "max_restarts", c->max_restarts) &&
           cJSON_AddStringToObject(o, "node", c->node);
  return finish(o, ok);
}

int bagua__rdzv_jobcfg_decode(const char *json, bagua__rdzv_jobcfg_t *c, char *why, size_t len) {
  why_t w = {why, len};
  memset(c, 0, sizeof(*c));
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  int rc = get_int(o, "nnodes_min", 1, 1, BAGUA_RDZV_MEMBERS_MAX, &c->nnodes_min, &w) ||
           get_int(o, "nnodes_max", 1, 1, BAGUA_RDZV_MEMBERS_MAX, &c->nnodes_max, &w) ||
           get_int(o, "max_restarts", 1, 0, INT_MAX_, &c->max_restarts, &w) ||
           get_id(o, "node", 0, c->node, sizeof(c->node), &w);
  if (rc == 0 && c->nnodes_max < c->nnodes_min)
    rc = fail(&w, "field \"nnodes_max\": %d is below nnodes_min %d", c->nnodes_max, c->nnodes_min);
  cJSON_Delete(o);
  return rc ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* clash/<node> and the workers' error files                                                 */
/* ---------------------------------------------------------------------------------------- */

char *bagua__rdzv_clash_encode(const bagua__rdzv_clash_t *c) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddStringToObject(o, "host", c->host) &&
           cJSON_AddStringToObject(o, "addr", c->addr) &&
           cJSON_AddNumberToObject(o, "pid", c->pid) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)c->time_ms) &&
           cJSON_AddNumberToObject(o, "holder_rev", (double)c->holder_rev);
  return finish(o, ok);
}

int bagua__rdzv_clash_decode(const char *json, bagua__rdzv_clash_t *c, char *why, size_t len) {
  why_t w = {why, len};
  CLEAR_KEEPING(c, node);
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  int rc = get_str(o, "host", 1, 1, c->host, sizeof(c->host), &w) ||
           get_str(o, "addr", 1, 1, c->addr, sizeof(c->addr), &w) ||
           get_int(o, "pid", 1, 0, INT_MAX_, &c->pid, &w) ||
           get_i64(o, "time_ms", 0, 0, I53, &c->time_ms, &w) ||
           get_i64(o, "holder_rev", 1, 1, I53, &c->holder_rev, &w);
  cJSON_Delete(o);
  return rc ? -1 : 0;
}

/* The length of the UTF-8 character at p (at most n bytes there), or 0 when the bytes are not
 * one (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_char(const unsigned char *p, size_t n) {
  if (p[0] < 0x80) return 1;
  size_t len = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
  if (len == 0 || len > n || p[0] > 0xf4) return 0;
  for (size_t i = 1; i < len; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  if (len == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0;
  if (len == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
  return len;
}

/* Copies `text` into out[outlen] (outlen >= 8) as one line of printable UTF-8 (see rdzv.h).
 * The message goes into a record that people read in a terminal and bagua-launch prints: a
 * newline or an escape sequence in it would forge or garble lines of the job's output.
 * Returns 0, or -1 when out of memory. */
static int one_line(const char *text, char *out, size_t outlen) {
  const unsigned char *p = (const unsigned char *)text;
  size_t n = strlen(text), o = 0;
  char *clean = malloc(n + 1); /* each byte in gives at most one byte out */
  if (!clean) return -1;
  for (size_t i = 0; i < n;) {
    size_t len = utf8_char(p + i, n - i);
    if (len == 1 && (p[i] < 0x20 || p[i] == 0x7f || p[i] == ' ')) {
      if (o > 0 && clean[o - 1] != ' ') clean[o++] = ' ';
      i++;
    } else if (len == 0) {
      clean[o++] = '?';
      i++;
    } else {
      memcpy(clean + o, p + i, len);
      o += len;
      i += len;
    }
  }
  while (o > 0 && clean[o - 1] == ' ') o--;
  if (o < outlen) {
    memcpy(out, clean, o);
    out[o] = '\0';
  } else {
    /* Cut at a character boundary, leaving room for "..." and the NUL. */
    size_t cut = outlen - 4;
    while (cut > 0 && ((unsigned char)clean[cut] & 0xc0) == 0x80) cut--;
    while (cut > 0 && clean[cut - 1] == ' ') cut--;
    memcpy(out, clean, cut);
    memcpy(out + cut, "...", 4);
  }
  free(clean);
  return 0;
}

/* The last line of a traceback that holds anything but blanks: "ValueError: bad lr". */
static const char *last_line(const char *text, char *buf, size_t len) {
  const char *end = text + strlen(text), *best = NULL, *best_end = NULL;
  for (const char *p = text; p < end;) {
    const char *q = memchr(p, '\n', (size_t)(end - p));
    if (!q) q = end;
    for (const char *c = p; c < q; c++)
      if (*c != ' ' && *c != '\t' && *c != '\r') {
        best = p;
        best_end = q;
        break;
      }
    if (q == end) break;
    p = q + 1;
  }
  if (!best) return NULL;
  size_t n = (size_t)(best_end - best);
  if (n >= len) n = len - 1;
  memcpy(buf, best, n);
  buf[n] = '\0';
  return buf;
}

int bagua__rdzv_error_file_decode(const char *buf, size_t len, char *out, size_t outlen, char *why,
                                  size_t whylen) {
  why_t w = {why, whylen};
  if (outlen) out[0] = '\0';
  if (outlen < 8) return fail(&w, "no room for the message");
  if (len > BAGUA_RDZV_ERROR_FILE_MAX)
    return fail(&w, "%zu bytes, more than %d", len, BAGUA_RDZV_ERROR_FILE_MAX);
  if (len == 0) return fail(&w, "it is empty");
  if (memchr(buf, '\0', len)) return fail(&w, "it holds a NUL byte");
  char *text = malloc(len + 1);
  if (!text) return fail(&w, "out of memory");
  memcpy(text, buf, len);
  text[len] = '\0';
  cJSON *o = parse_object(text, &w);
  free(text);
  if (!o) return -1;
  int rc = -1;
  char line[BAGUA_RDZV_ERROR_MAX * 2];
  const char *msg = NULL;
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "message");
  if (cJSON_IsString(m)) {
    msg = m->valuestring; /* the simple form torch's own handler also reads */
  } else if (cJSON_IsObject(m)) {
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(m, "message");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(m, "extraInfo");
    const cJSON *stack =
        cJSON_IsObject(extra) ? cJSON_GetObjectItemCaseSensitive(extra, "py_callstack") : NULL;
    if (inner && !cJSON_IsString(inner)) {
      fail(&w, "field \"message\".\"message\" is not a string");
      goto out;
    }
    if (extra && !cJSON_IsObject(extra)) {
      fail(&w, "field \"message\".\"extraInfo\" is not an object");
      goto out;
    }
    if (stack && !cJSON_IsString(stack)) {
      fail(&w, "field \"message\".\"extraInfo\".\"py_callstack\" is not a string");
      goto out;
    }
    if (inner && inner->valuestring[0])
      msg = inner->valuestring;
    else if (stack)
      msg = last_line(stack->valuestring, line, sizeof(line));
  } else {
    fail(&w, "field \"message\" is %s; accepted: a string, or an object with a \"message\" string",
         m ? "neither a string nor an object" : "missing");
    goto out;
  }
  if (!msg || !msg[0]) {
    fail(&w, "field \"message\" holds no text");
    goto out;
  }
  if (one_line(msg, out, outlen) != 0) {
    fail(&w, "out of memory");
    goto out;
  }
  if (!out[0]) {
    fail(&w, "field \"message\" holds nothing but blanks");
    goto out;
  }
  rc = 0;
out:
  cJSON_Delete(o);
  return rc;
}

int bagua__rdzv_leader_decode(const char *value, char *out, size_t outlen, char *why,
                              size_t whylen) {
  why_t w = {why, whylen};
  out[0] = '\0';
  if (!value || !bagua__rdzv_id_valid(value))
    return fail(&w, "\"%.64s\" is not a valid node id", value ? value : "");
  if (strlen(value) >= outlen) return fail(&w, "the node id is too long");
  snprintf(out, outlen, "%s", value);
  return 0;
}

int bagua__rdzv_secret_decode(const char *value, size_t len, char *out, char *why, size_t whylen) {
  why_t w = {why, whylen};
  out[0] = '\0';
  if (!value || len != BAGUA_RDZV_SECRET_HEX)
    return fail(&w, "not %d hex digits (%zu bytes)", BAGUA_RDZV_SECRET_HEX, value ? len : 0);
  /* Either case, as libbagua's key decoding (common/auth.c) accepts; the canonical spelling
   * is lower case, so agents that compare the text they hold with etcd's agree. */
  for (size_t i = 0; i < len; i++) {
    char c = value[i];
    if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return fail(&w, "byte %zu is not a hex digit", i);
    out[i] = c;
  }
  out[len] = '\0';
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Rank rule                                                                                 */
/* ---------------------------------------------------------------------------------------- */

int bagua__rdzv_rank_base(const bagua__rdzv_round_t *r, int idx) {
  /* A decoded or leader-built round bounds the sum by BAGUA_RDZV_WORLD_MAX. */
  int64_t base = 0;
  for (int i = 0; i < idx && i < r->nmembers; i++) base += r->members[i].nproc;
  return base > BAGUA_RDZV_WORLD_MAX ? BAGUA_RDZV_WORLD_MAX : (int)base;
}

int bagua__rdzv_place(const bagua__rdzv_round_t *r, const char *node, int local_rank, int *rank,
                      int *group_rank) {
  int idx = bagua__rdzv_round_find(r, node);
  if (idx < 0) return -1;
  if (local_rank < 0 || local_rank >= r->members[idx].nproc) return -2;
  *group_rank = idx;
  *rank = bagua__rdzv_rank_base(r, idx) + local_rank;
  return 0;
}
