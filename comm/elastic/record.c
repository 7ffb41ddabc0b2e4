/*
 * Round records: the JSON that bagua-agent publishes under /bagua/<job>/round ({"round": N,
 * "world_size": W, "members": [node ids], "nprocs": [workers per member]}), read here for its
 * number, its members, and this worker's place in it (the agent's rank rule).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "elastic_internal.h"

int64_t bagua__elastic_round_number(const char *json) {
  cJSON *o = cJSON_Parse(json);
  int64_t r = -1;
  const cJSON *n = o ? cJSON_GetObjectItemCaseSensitive(o, "round") : NULL;
  if (cJSON_IsNumber(n) && n->valuedouble >= 0) r = (int64_t)n->valuedouble;
  cJSON_Delete(o);
  return r;
}

void bagua__elastic_free_members(char **m, int n) {
  for (int i = 0; i < n; i++) free(m[i]);
  free(m);
}

bagua_status_t bagua__elastic_members(const char *json, char ***out, int *n) {
  *out = NULL;
  *n = 0;
  cJSON *o = cJSON_Parse(json);
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(o, "members");
  int count = cJSON_IsArray(members) ? cJSON_GetArraySize(members) : -1;
  if (count < 0 || count > BAGUA__ELASTIC_MAX_MEMBERS) {
    cJSON_Delete(o);
    return BAGUA_ERR_ETCD;
  }
  char **m = calloc((size_t)count + 1, sizeof(*m));
  if (!m) {
    cJSON_Delete(o);
    return BAGUA_ERR_NO_MEMORY;
  }
  const cJSON *it;
  int i = 0;
  cJSON_ArrayForEach(it, members) {
    m[i] = strdup(cJSON_IsString(it) ? it->valuestring : "");
    if (!m[i]) {
      bagua__elastic_free_members(m, i);
      cJSON_Delete(o);
      return BAGUA_ERR_NO_MEMORY;
    }
    i++;
  }
  cJSON_Delete(o);
  *out = m;
  *n = count;
  return BAGUA_OK;
}

int bagua__elastic_drops_member(char *const *members, int n, const char *json) {
  char **m = NULL;
  int nm = 0, dropped = 0;
  if (!members || bagua__elastic_members(json, &m, &nm) != BAGUA_OK) return 0;
  for (int i = 0; i < n && !dropped; i++) {
    int found = 0;
    for (int j = 0; j < nm && !found; j++) found = strcmp(members[i], m[j]) == 0;
    dropped = !found;
  }
  bagua__elastic_free_members(m, nm);
  return dropped;
}

bagua_status_t bagua__elastic_place(const char *json, const char *key, const char *node_id,
                                    int local_rank, int64_t *round, int *rank, int *size,
                                    char ***members_out, int *nmembers_out) {
  bagua_status_t st = BAGUA_ERR_ETCD;
  cJSON *o = cJSON_Parse(json);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "round");
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(o, "world_size");
  const cJSON *members = cJSON_GetObjectItemCaseSensitive(o, "members");
  const cJSON *nprocs = cJSON_GetObjectItemCaseSensitive(o, "nprocs");
  if (!cJSON_IsNumber(r) || !cJSON_IsNumber(ws) || !cJSON_IsArray(members) ||
      (nprocs && !cJSON_IsArray(nprocs))) {
    BAGUA_WARN("elastic: %s is not a round record (need round, world_size, members): %.200s", key,
               json);
    goto out;
  }
  int base = 0, found = -1, i = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, members) {
    const cJSON *np = nprocs ? cJSON_GetArrayItem(nprocs, i) : NULL;
    int n = cJSON_IsNumber(np) ? np->valueint : 1;
    if (cJSON_IsString(m) && strcmp(m->valuestring, node_id) == 0) {
      found = i;
      if (local_rank >= n) {
        BAGUA_WARN("elastic: LOCAL_RANK %d is not below nprocs %d of node %s in round %lld",
                   local_rank, n, node_id, (long long)r->valuedouble);
        st = BAGUA_ERR_ABORTED;
        goto out;
      }
      break;
    }
    base += n;
    i++;
  }
  if (found < 0) {
    BAGUA_WARN("elastic: node %s is not a member of round %lld; this worker leaves the job",
               node_id, (long long)r->valuedouble);
    st = BAGUA_ERR_ABORTED;
    goto out;
  }
  *round = (int64_t)r->valuedouble;
  *size = ws->valueint;
  *rank = base + local_rank;
  if (*rank >= *size) {
    BAGUA_WARN("elastic: rank %d computed for node %s is not below world_size %d in round %lld",
               *rank, node_id, *size, (long long)*round);
    goto out;
  }
  if (members_out && (st = bagua__elastic_members(json, members_out, nmembers_out)) != BAGUA_OK)
    goto out;
  st = BAGUA_OK;
out:
  cJSON_Delete(o);
  return st;
}
