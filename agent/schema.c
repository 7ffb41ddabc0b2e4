/*
 * JSON encoding of the agent's etcd records. The values are small objects that people also
 * read with etcdctl, so field names are spelled out and numbers are plain JSON numbers
 * (every integer here is far below 2^53).
 */
#include "schema.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static int get_str(const cJSON *o, const char *name, char *dst, size_t len, int required) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsString(f)) {
    dst[0] = '\0';
    return required ? -1 : 0;
  }
  snprintf(dst, len, "%s", f->valuestring);
  return 0;
}

static int get_i64(const cJSON *o, const char *name, int64_t *out, int required) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
  *out = 0;
  if (!cJSON_IsNumber(f)) return required ? -1 : 0;
  /* Converting an out-of-range double is undefined behaviour: a foreign value must not get
   * that far. Every number the agent writes is far below 2^53. */
  if (!(f->valuedouble >= -9007199254740992.0 && f->valuedouble <= 9007199254740992.0)) return -1;
  *out = (int64_t)f->valuedouble;
  return 0;
}

static int get_int(const cJSON *o, const char *name, int *out, int required) {
  int64_t v = 0;
  int rc = get_i64(o, name, &v, required);
  if (v < -2147483647 || v > 2147483647) return -1;
  *out = (int)v;
  return rc;
}

static char *finish(cJSON *o, int ok) {
  char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}

/* ---------------------------------------------------------------------------------------- */
/* nodes/<id>                                                                                */
/* ---------------------------------------------------------------------------------------- */

char *bagua__agent_node_encode(const bagua__agent_node_t *n) {
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
  return finish(o, ok);
}

int bagua__agent_node_decode(const char *json, bagua__agent_node_t *n) {
  char id[BAGUA_AGENT_ID_MAX];
  memcpy(id, n->id, sizeof(id)); /* the id comes from the key, not the value */
  memset(n, 0, sizeof(*n));
  memcpy(n->id, id, sizeof(id));
  cJSON *o = cJSON_Parse(json);
  if (!cJSON_IsObject(o)) {
    cJSON_Delete(o);
    return -1;
  }
  int rc = 0;
  rc |= get_str(o, "host", n->host, sizeof(n->host), 1);
  rc |= get_str(o, "addr", n->addr, sizeof(n->addr), 1);
  rc |= get_int(o, "nproc", &n->nproc, 1);
  rc |= get_int(o, "pid", &n->pid, 0);
  rc |= get_str(o, "version", n->version, sizeof(n->version), 0);
  rc |= get_i64(o, "join_ms", &n->join_ms, 0);
  rc |= get_int(o, "master_port", &n->master_port, 1);
  rc |= get_str(o, "tag", n->tag, sizeof(n->tag), 0);
  rc |= get_int(o, "live_port", &n->live_port, 0);
  cJSON_Delete(o);
  if (n->nproc < 1 || n->master_port < 1 || n->master_port > 65535) rc = -1;
  if (n->live_port < 0 || n->live_port > 65535) rc = -1;
  return rc ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* round                                                                                     */
/* ---------------------------------------------------------------------------------------- */

void bagua__agent_round_clear(bagua__agent_round_t *r) {
  if (!r) return;
  free(r->members);
  memset(r, 0, sizeof(*r));
}

int bagua__agent_round_copy(bagua__agent_round_t *dst, const bagua__agent_round_t *src) {
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

int bagua__agent_round_find(const bagua__agent_round_t *r, const char *node) {
  for (int i = 0; i < r->nmembers; i++)
    if (strcmp(r->members[i].id, node) == 0) return i;
  return -1;
}

char *bagua__agent_round_encode(const bagua__agent_round_t *r) {
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
       cJSON_AddStringToObject(o, "reason", r->reason) &&
       cJSON_AddStringToObject(o, "leader", r->leader) &&
       cJSON_AddNumberToObject(o, "time_ms", (double)r->time_ms);
  return finish(o, ok);
}

int bagua__agent_round_decode(const char *json, bagua__agent_round_t *r) {
  memset(r, 0, sizeof(*r));
  cJSON *o = cJSON_Parse(json);
  if (!cJSON_IsObject(o)) goto fail;
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(o, "members");
  const cJSON *nprocs = cJSON_GetObjectItemCaseSensitive(o, "nprocs");
  const cJSON *revs = cJSON_GetObjectItemCaseSensitive(o, "member_revs");
  if (!cJSON_IsArray(members) || !cJSON_IsArray(nprocs)) goto fail;
  int n = cJSON_GetArraySize(members);
  if (n < 1 || cJSON_GetArraySize(nprocs) != n) goto fail;
  r->members = calloc((size_t)n, sizeof(*r->members));
  if (!r->members) goto fail;
  r->nmembers = n;
  for (int i = 0; i < n; i++) {
    const cJSON *id = cJSON_GetArrayItem(members, i);
    const cJSON *np = cJSON_GetArrayItem(nprocs, i);
    const cJSON *rv = cJSON_IsArray(revs) ? cJSON_GetArrayItem(revs, i) : NULL;
    if (!cJSON_IsString(id) || !cJSON_IsNumber(np) || !(np->valuedouble >= 1) ||
        np->valuedouble > 1048576)
      goto fail;
    snprintf(r->members[i].id, sizeof(r->members[i].id), "%s", id->valuestring);
    r->members[i].nproc = (int)np->valuedouble;
    r->members[i].rev = cJSON_IsNumber(rv) && rv->valuedouble >= 0 && rv->valuedouble < 9.0e15
                            ? (int64_t)rv->valuedouble
                            : 0;
  }
  int rc = 0;
  rc |= get_i64(o, "round", &r->round, 1);
  rc |= get_int(o, "world_size", &r->world_size, 1);
  rc |= get_str(o, "master_addr", r->master_addr, sizeof(r->master_addr), 1);
  rc |= get_int(o, "master_port", &r->master_port, 1);
  rc |= get_int(o, "restart_count", &r->restart_count, 0);
  rc |= get_str(o, "reason", r->reason, sizeof(r->reason), 0);
  rc |= get_str(o, "leader", r->leader, sizeof(r->leader), 0);
  rc |= get_i64(o, "time_ms", &r->time_ms, 0);
  if (rc || r->round < 1) goto fail;
  cJSON_Delete(o);
  return 0;
fail:
  cJSON_Delete(o);
  bagua__agent_round_clear(r);
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Failures, done records, status                                                            */
/* ---------------------------------------------------------------------------------------- */

static int add_failure(cJSON *o, const bagua__agent_failure_t *f) {
  int ok = cJSON_AddStringToObject(o, "node", f->node) &&
           cJSON_AddStringToObject(o, "host", f->host) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)f->time_ms) &&
           cJSON_AddNumberToObject(o, "round", (double)f->round) &&
           cJSON_AddNumberToObject(o, "rank", f->rank) &&
           cJSON_AddNumberToObject(o, "local_rank", f->local_rank) &&
           cJSON_AddNumberToObject(o, "pid", f->pid);
  if (!ok) return 0;
  if (f->signal) return cJSON_AddNumberToObject(o, "signal", f->signal) != NULL;
  return cJSON_AddNumberToObject(o, "exit_code", f->exit_code) != NULL;
}

static int get_failure(const cJSON *o, bagua__agent_failure_t *f) {
  int rc = 0;
  memset(f, 0, sizeof(*f));
  rc |= get_str(o, "node", f->node, sizeof(f->node), 1);
  rc |= get_str(o, "host", f->host, sizeof(f->host), 0);
  rc |= get_i64(o, "time_ms", &f->time_ms, 0);
  rc |= get_i64(o, "round", &f->round, 0);
  rc |= get_int(o, "rank", &f->rank, 0);
  rc |= get_int(o, "local_rank", &f->local_rank, 0);
  rc |= get_int(o, "pid", &f->pid, 0);
  rc |= get_int(o, "signal", &f->signal, 0);
  rc |= get_int(o, "exit_code", &f->exit_code, 0);
  return rc;
}

static const char *done_names[] = {"succeeded", "failed", "stopped"};

char *bagua__agent_done_encode(const bagua__agent_done_t *d) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddStringToObject(o, "state", done_names[d->state]) != NULL;
  if (ok && d->state == BAGUA__DONE_FAILED) {
    ok = add_failure(o, &d->f);
  } else if (ok) {
    ok = cJSON_AddStringToObject(o, "node", d->f.node) &&
         cJSON_AddNumberToObject(o, "time_ms", (double)d->f.time_ms);
  }
  if (ok && d->kept) ok = cJSON_AddBoolToObject(o, "kept", 1) != NULL;
  return finish(o, ok);
}

int bagua__agent_done_decode(const char *json, bagua__agent_done_t *d) {
  memset(d, 0, sizeof(*d));
  cJSON *o = cJSON_Parse(json);
  char state[16];
  int rc = -1;
  if (!cJSON_IsObject(o) || get_str(o, "state", state, sizeof(state), 1) != 0) goto out;
  for (int i = 0; i < 3; i++)
    if (strcmp(state, done_names[i]) == 0) {
      d->state = (bagua__done_state_t)i;
      rc = get_failure(o, &d->f);
      d->kept = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "kept"));
      goto out;
    }
out:
  cJSON_Delete(o);
  return rc;
}

static const char *job_names[] = {"running", "succeeded", "failed", "closed"};

const char *bagua__agent_job_state_name(bagua__job_state_t st) {
  return (unsigned)st < 4 ? job_names[st] : "unknown";
}

char *bagua__agent_status_encode(const bagua__agent_status_t *s) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddStringToObject(o, "state", bagua__agent_job_state_name(s->state)) &&
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

int bagua__agent_status_decode(const char *json, bagua__agent_status_t *s) {
  memset(s, 0, sizeof(*s));
  cJSON *o = cJSON_Parse(json);
  char state[16];
  int rc = -1;
  if (!cJSON_IsObject(o) || get_str(o, "state", state, sizeof(state), 1) != 0) goto out;
  int found = 0;
  for (int i = 0; i < 4; i++)
    if (strcmp(state, job_names[i]) == 0) {
      s->state = (bagua__job_state_t)i;
      found = 1;
    }
  if (!found) goto out;
  rc = 0;
  rc |= get_i64(o, "time_ms", &s->time_ms, 0);
  rc |= get_i64(o, "round", &s->round, 0);
  rc |= get_int(o, "exit_code", &s->exit_code, 0);
  rc |= get_str(o, "message", s->message, sizeof(s->message), 0);
  const cJSON *root = cJSON_GetObjectItemCaseSensitive(o, "root_cause");
  if (cJSON_IsObject(root)) {
    s->has_root = 1;
    rc |= get_failure(root, &s->root);
  }
out:
  cJSON_Delete(o);
  return rc;
}

void bagua__agent_failure_describe(const bagua__agent_failure_t *f, char *out, size_t len) {
  char tail[96];
  if (f->signal) {
    const char *name = sigabbrev_np(f->signal);
    snprintf(tail, sizeof(tail), "was killed by signal %d (SIG%s)", f->signal, name ? name : "?");
  } else {
    snprintf(tail, sizeof(tail), "exited with code %d", f->exit_code);
  }
  snprintf(out, len, "rank %d (node %s, host %s, local rank %d, pid %d, round %lld) %s", f->rank,
           f->node, f->host[0] ? f->host : "?", f->local_rank, f->pid, (long long)f->round, tail);
}

int bagua__agent_failure_exit_code(const bagua__agent_failure_t *f) {
  if (f->signal) return 128 + (f->signal & 127);
  return f->exit_code ? (f->exit_code & 255) : 1;
}

/* ---------------------------------------------------------------------------------------- */
/* config                                                                                    */
/* ---------------------------------------------------------------------------------------- */

char *bagua__agent_jobcfg_encode(const bagua__agent_jobcfg_t *c) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddNumberToObject(o, "nnodes_min", c->nnodes_min) &&
           cJSON_AddNumberToObject(o, "nnodes_max", c->nnodes_max) &&
           cJSON_AddNumberToObject(o, "max_restarts", c->max_restarts) &&
           cJSON_AddStringToObject(o, "node", c->node);
  return finish(o, ok);
}

int bagua__agent_jobcfg_decode(const char *json, bagua__agent_jobcfg_t *c) {
  memset(c, 0, sizeof(*c));
  cJSON *o = cJSON_Parse(json);
  int rc = -1;
  if (cJSON_IsObject(o)) {
    rc = 0;
    rc |= get_int(o, "nnodes_min", &c->nnodes_min, 1);
    rc |= get_int(o, "nnodes_max", &c->nnodes_max, 1);
    rc |= get_int(o, "max_restarts", &c->max_restarts, 1);
    rc |= get_str(o, "node", c->node, sizeof(c->node), 0);
  }
  cJSON_Delete(o);
  return rc;
}
