/*
 * etcd's cluster membership (etcd.h, "Cluster membership"): list, add (as a learner or a
 * voter), promote and remove, through the JSON gateway's /v3/cluster/member/ calls. The gateway
 * writes the 64-bit member ids as decimal strings; they are sent back the same way, since a JSON
 * number would lose their low bits.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "etcd.h"
#include "etcd_internal.h"

/* A member id as the gateway writes it (a decimal string, or a number for small ids). */
static int member_id(const cJSON *m, uint64_t *id) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "ID");
  if (cJSON_IsString(v)) {
    char *end;
    unsigned long long x = strtoull(v->valuestring, &end, 10);
    if (*end || end == v->valuestring) return -1;
    *id = x;
    return 0;
  }
  if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
    *id = (uint64_t)v->valuedouble;
    return 0;
  }
  return -1;
}

/* The first URL of list `name` of member `m` into out ("" when there is none). */
static void first_url(const cJSON *m, const char *name, char *out, size_t len) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(m, name);
  const cJSON *u = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
  snprintf(out, len, "%s", cJSON_IsString(u) ? u->valuestring : "");
}

static bagua_status_t parse_members(const cJSON *reply, bagua__etcd_member_t *out, int max,
                                    int *n) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(reply, "members");
  *n = 0;
  if (!cJSON_IsArray(list)) return BAGUA_ERR_ETCD;
  const cJSON *m;
  cJSON_ArrayForEach(m, list) {
    if (*n >= max) break;
    bagua__etcd_member_t *o = &out[*n];
    memset(o, 0, sizeof(*o));
    if (member_id(m, &o->id) != 0) return BAGUA_ERR_ETCD;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
    snprintf(o->name, sizeof(o->name), "%s", cJSON_IsString(name) ? name->valuestring : "");
    first_url(m, "peerURLs", o->peer, sizeof(o->peer));
    first_url(m, "clientURLs", o->client, sizeof(o->client));
    o->learner = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "isLearner"));
    (*n)++;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__etcd_member_list(bagua__etcd_t *c, bagua__etcd_member_t *out, int max,
                                       int *n) {
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  if (!req) return BAGUA_ERR_NO_MEMORY;
  bagua_status_t st = bagua__etcd_call(c, "/v3/cluster/member/list", req, &reply, 0, NULL);
  if (st == BAGUA_OK) st = parse_members(reply, out, max, n);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_member_add(bagua__etcd_t *c, const char *peer_url, int learner,
                                      uint64_t *id, bagua__etcd_member_t *members, int max,
                                      int *n) {
  cJSON *req = cJSON_CreateObject(), *reply = NULL, *urls = cJSON_CreateArray();
  bagua_status_t st = BAGUA_ERR_NO_MEMORY;
  if (!req || !urls || !cJSON_AddItemToObject(req, "peerURLs", urls)) {
    cJSON_Delete(urls);
    goto out;
  }
  if (!cJSON_AddItemToArray(urls, cJSON_CreateString(peer_url)) ||
      (learner && !cJSON_AddTrueToObject(req, "isLearner")))
    goto out;
  st = bagua__etcd_call(c, "/v3/cluster/member/add", req, &reply, ETCD_CALL_QUIET_ETCD, NULL);
  if (st != BAGUA_OK) goto out;
  if (member_id(cJSON_GetObjectItemCaseSensitive(reply, "member"), id) != 0) {
    BAGUA_WARN("etcd member add reply has no member id");
    st = BAGUA_ERR_ETCD;
    goto out;
  }
  st = parse_members(reply, members, max, n);
out:
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_member_promote(bagua__etcd_t *c, uint64_t id, int *grpc_code) {
  char text[24];
  snprintf(text, sizeof(text), "%" PRIu64, id);
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  if (!req || !cJSON_AddStringToObject(req, "ID", text)) {
    cJSON_Delete(req);
    return BAGUA_ERR_NO_MEMORY;
  }
  bagua_status_t st = bagua__etcd_call(c, "/v3/cluster/member/promote", req, &reply,
                                       ETCD_CALL_QUIET_ETCD, grpc_code);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}

bagua_status_t bagua__etcd_member_remove(bagua__etcd_t *c, uint64_t id) {
  char text[24];
  snprintf(text, sizeof(text), "%" PRIu64, id);
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  if (!req || !cJSON_AddStringToObject(req, "ID", text)) {
    cJSON_Delete(req);
    return BAGUA_ERR_NO_MEMORY;
  }
  bagua_status_t st =
      bagua__etcd_call(c, "/v3/cluster/member/remove", req, &reply, ETCD_CALL_QUIET_ETCD, NULL);
  cJSON_Delete(req);
  cJSON_Delete(reply);
  return st;
}
