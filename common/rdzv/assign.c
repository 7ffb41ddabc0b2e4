/*
 * assign/<node> (rdzv.h): a node's place in the current round, derived from the round by the
 * rank rule and the liveness ring's rule, and its strict JSON codec.
 */
#include <stdlib.h>

#include "fields.h"
#include "rdzv.h"

/* Fills what every node's assignment shares: the round's number, world and master. */
static void common_part(const bagua__rdzv_round_t *r, bagua__rdzv_assign_t *a) {
  memset(a, 0, sizeof(*a));
  a->round = r->round;
  a->restart_count = r->restart_count;
  a->reason = r->reason;
  snprintf(a->leader, sizeof(a->leader), "%s", r->leader);
  a->time_ms = r->time_ms;
  a->world_size = r->world_size;
  a->nmembers = r->nmembers;
  a->departed = r->departed;
  snprintf(a->master_addr, sizeof(a->master_addr), "%s", r->master_addr);
  a->master_port = r->master_port;
  a->index = -1;
}

/* The member's own part: its place, and the members that follow it on the ring. */
static void member_part(const bagua__rdzv_round_t *r, int idx, int base, int k,
                        bagua__rdzv_assign_t *a) {
  const bagua__rdzv_member_t *m = &r->members[idx];
  snprintf(a->node, sizeof(a->node), "%s", m->id);
  a->index = idx;
  a->rank_base = base;
  a->nproc = m->nproc;
  a->rev = m->rev;
  if (k > BAGUA_RDZV_WATCH_MAX) k = BAGUA_RDZV_WATCH_MAX;
  for (int d = 1; d < r->nmembers && a->nwatch < k; d++) {
    const bagua__rdzv_member_t *w = &r->members[(idx + d) % r->nmembers];
    snprintf(a->watch[a->nwatch].id, sizeof(a->watch[a->nwatch].id), "%s", w->id);
    a->watch[a->nwatch++].rev = w->rev;
  }
}

void bagua__rdzv_assign_of(const bagua__rdzv_round_t *r, int idx, int k, bagua__rdzv_assign_t *a) {
  common_part(r, a);
  if (idx >= 0 && idx < r->nmembers) member_part(r, idx, bagua__rdzv_rank_base(r, idx), k, a);
}

void bagua__rdzv_assign_all(const bagua__rdzv_round_t *r, int k, bagua__rdzv_assign_t *out) {
  int base = 0;
  for (int i = 0; i < r->nmembers; i++) {
    common_part(r, &out[i]);
    member_part(r, i, base, k, &out[i]);
    base += r->members[i].nproc;
  }
}

char *bagua__rdzv_assign_encode(const bagua__rdzv_assign_t *a) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int ok = cJSON_AddNumberToObject(o, "round", (double)a->round) &&
           cJSON_AddNumberToObject(o, "restart_count", a->restart_count) &&
           cJSON_AddStringToObject(o, "reason", bagua__round_reason_word(a->reason)) &&
           cJSON_AddStringToObject(o, "leader", a->leader) &&
           cJSON_AddNumberToObject(o, "time_ms", (double)a->time_ms) &&
           cJSON_AddNumberToObject(o, "world_size", a->world_size) &&
           cJSON_AddNumberToObject(o, "nmembers", a->nmembers) &&
           cJSON_AddNumberToObject(o, "departed", a->departed) &&
           cJSON_AddStringToObject(o, "master_addr", a->master_addr) &&
           cJSON_AddNumberToObject(o, "master_port", a->master_port) &&
           cJSON_AddNumberToObject(o, "index", a->index);
  if (ok && a->index >= 0) {
    ok = cJSON_AddNumberToObject(o, "rank_base", a->rank_base) &&
         cJSON_AddNumberToObject(o, "nproc", a->nproc) &&
         cJSON_AddNumberToObject(o, "rev", (double)a->rev);
    cJSON *ids = ok ? cJSON_AddArrayToObject(o, "watch") : NULL;
    cJSON *revs = ok ? cJSON_AddArrayToObject(o, "watch_revs") : NULL;
    ok = ids && revs;
    for (int i = 0; ok && i < a->nwatch; i++) {
      cJSON *id = cJSON_CreateString(a->watch[i].id);
      cJSON *rv = cJSON_CreateNumber((double)a->watch[i].rev);
      ok = id && rv;
      if (id) cJSON_AddItemToArray(ids, id);
      if (rv) cJSON_AddItemToArray(revs, rv);
    }
  }
  return finish(o, ok);
}

/* The watch list: two arrays as long as each other, of valid ids and revisions. */
static int get_watch(const cJSON *o, bagua__rdzv_assign_t *a, why_t *w) {
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "watch");
  const cJSON *revs = cJSON_GetObjectItemCaseSensitive(o, "watch_revs");
  if (!ids && !revs) return 0;
  int n = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : -1;
  if (n < 0 || n > BAGUA_RDZV_WATCH_MAX)
    return fail(w, "field \"watch\" is not an array of at most %d node ids", BAGUA_RDZV_WATCH_MAX);
  if (!cJSON_IsArray(revs) || cJSON_GetArraySize(revs) != n)
    return fail(w, "field \"watch_revs\" is not an array as long as \"watch\" (%d)", n);
  const cJSON *id = ids->child, *rv = revs->child;
  for (int i = 0; i < n; i++, id = id->next, rv = rv->next) {
    if (!cJSON_IsString(id) || !bagua__rdzv_id_valid(id->valuestring))
      return fail(w, "field \"watch\"[%d] is not a valid node id", i);
    snprintf(a->watch[i].id, sizeof(a->watch[i].id), "%s", id->valuestring);
    double d = cJSON_IsNumber(rv) ? rv->valuedouble : -1.0;
    if (!(d >= 0 && d <= (double)I53) || (double)(int64_t)d != d)
      return fail(w, "field \"watch_revs\"[%d] is not an integer in 0..%lld", i, (long long)I53);
    a->watch[i].rev = (int64_t)d;
  }
  a->nwatch = n;
  return 0;
}

int bagua__rdzv_assign_decode(const char *json, bagua__rdzv_assign_t *a, char *why, size_t len) {
  why_t w = {why, len};
  CLEAR_KEEPING(a, node);
  cJSON *o = parse_object(json, &w);
  if (!o) return -1;
  int rc = get_i64(o, "round", 1, 1, I53, &a->round, &w) ||
                   get_int(o, "restart_count", 0, 0, INT_MAX_, &a->restart_count, &w) ||
                   get_reason(o, "reason", &a->reason, &w) ||
                   get_id(o, "leader", 0, a->leader, sizeof(a->leader), &w) ||
                   get_i64(o, "time_ms", 0, 0, I53, &a->time_ms, &w) ||
                   get_int(o, "world_size", 1, 1, BAGUA_RDZV_WORLD_MAX, &a->world_size, &w) ||
                   get_int(o, "nmembers", 1, 1, BAGUA_RDZV_MEMBERS_MAX, &a->nmembers, &w) ||
                   get_int(o, "departed", 0, 0, BAGUA_RDZV_MEMBERS_MAX, &a->departed, &w) ||
                   get_str(o, "master_addr", 1, 1, a->master_addr, sizeof(a->master_addr), &w) ||
                   get_int(o, "master_port", 1, 1, PORT_MAX, &a->master_port, &w) ||
                   get_int(o, "index", 1, -1, BAGUA_RDZV_MEMBERS_MAX - 1, &a->index, &w)
               ? -1
               : 0;
  if (rc == 0 && a->index >= a->nmembers)
    rc = fail(&w, "field \"index\": %d is not below \"nmembers\" (%d)", a->index, a->nmembers);
  if (rc == 0 && a->index >= 0) {
    rc = get_int(o, "rank_base", 1, 0, BAGUA_RDZV_WORLD_MAX - 1, &a->rank_base, &w) ||
                 get_int(o, "nproc", 1, 1, BAGUA_RDZV_NPROC_MAX, &a->nproc, &w) ||
                 get_i64(o, "rev", 0, 0, I53, &a->rev, &w) || get_watch(o, a, &w)
             ? -1
             : 0;
    /* Summed in 64 bits: both are bounded far below overflow. */
    if (rc == 0 && (int64_t)a->rank_base + a->nproc > a->world_size)
      rc = fail(&w, "fields \"rank_base\" + \"nproc\" (%lld) pass \"world_size\" (%d)",
                (long long)a->rank_base + a->nproc, a->world_size);
  }
  cJSON_Delete(o);
  return rc;
}
