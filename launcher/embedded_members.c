/*
 * The hosted rendezvous grows to three etcd members on three nodes (embedded.h), so that it
 * survives the loss of any one of them, the hosting node included.
 *
 * Keys, outside the job's prefix (the agents read that one and nothing else here):
 *  - /bagua-etcd/<job>/candidate/<node>: "PEER_URL CLIENT_URL", a joining launcher offering a
 *    member on its node; it deletes the key once answered or given up;
 *  - /bagua-etcd/<job>/invite/<node>: "NAME INITIAL_CLUSTER", the host's answer once it has
 *    added that member to the cluster as a learner;
 *  - /bagua-etcd/<job>/full: the cluster has its three voting members; later joiners get none.
 *
 * The host's grower thread adds one learner at a time (etcd 3.4 allows one), and promotes it to
 * a voter once another candidate waits or the cluster has three members: a job of two nodes
 * keeps one voter and one learner, since two voters would make either node's loss fatal. etcd
 * refuses a new member until every member has been connected for 5 s, so the third member
 * comes at least 5 s after the second is promoted; a joining launcher does not wait for it:
 * its agent starts at once, with this node's member-to-be among its endpoints.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/etcd/etcd.h"
#include "common/log.h"
#include "common/output.h"
#include "common/sock.h"
#include "common/time.h"
#include "common/validate.h"
#include "embedded.h"

#define MEMBERS_WANTED 3
#define GROW_TICK_MS 200
#define GROW_IDLE_MS 1000
/* A learner its node has not started this long after it was added never will (that node's
 * etcd failed to start, or the node died first): it is removed, and its slot freed, so that it
 * does not hold the one learner place etcd allows for the rest of the job. A member starts
 * within a second or two of its invitation (read every GROW_TICK_MS). */
#define LEARNER_START_MS 10000

static int etcd_key(char *buf, size_t len, const char *job, const char *what, const char *node) {
  int n = snprintf(buf, len, "/bagua-etcd/%s/%s%s%s", job, what, node ? "/" : "", node ? node : "");
  return n > 0 && (size_t)n < len ? 0 : -1;
}

/* ---- the host's grower ---- */

struct bagua__launch_grower {
  bagua__etcd_t *c;
  char job[BAGUA_ID_MAX_LEN + 1];
  pthread_t thread;
  volatile int stop;
  int next_slot; /* the name of the next member: member-2, member-3, ... */
  /* The members this grower added: name, peer URL and the node that offered it. */
  char names[MEMBERS_WANTED + 1][32], peers[MEMBERS_WANTED + 1][128],
      nodes[MEMBERS_WANTED + 1][128];
  int nnamed;
  int full_said;
  uint64_t learner_id; /* the learner last seen unstarted, and since when (monotonic ms) */
  int64_t learner_since;
};

/* Removes learner `m` that its node never started (LEARNER_START_MS): the member, its
 * invitation and the slot its node holds, so that a later node can offer one. */
static void drop_learner(struct bagua__launch_grower *g, const bagua__etcd_member_t *m) {
  if (bagua__etcd_member_remove(g->c, m->id) != BAGUA_OK) return;
  int k = 0;
  while (k < g->nnamed && strcmp(g->peers[k], m->peer) != 0) k++;
  const char *node = k < g->nnamed ? g->nodes[k] : "";
  bagua__say(LAUNCH_TOOL,
             "the job's etcd member %s (node %s, %s) was not started within %d s: removed it; "
             "the next node to offer a member takes its place",
             k < g->nnamed ? g->names[k] : "?", node[0] ? node : "?", m->peer,
             LEARNER_START_MS / 1000);
  char key[320];
  if (node[0] && etcd_key(key, sizeof(key), g->job, "invite", node) == 0)
    bagua__etcd_delete(g->c, key, NULL);
  for (int slot = 2; node[0] && slot <= MEMBERS_WANTED; slot++) {
    char num[8];
    snprintf(num, sizeof(num), "%d", slot);
    bagua__etcd_kv_t kv = {0};
    int found = 0;
    /* Only if it still names that node: deleted if unchanged since this read. */
    if (etcd_key(key, sizeof(key), g->job, "slot", num) == 0 &&
        bagua__etcd_get(g->c, key, &kv, &found, NULL) == BAGUA_OK && found && kv.value &&
        kv.value_len == strlen(node) && memcmp(kv.value, node, kv.value_len) == 0) {
      int deleted = 0;
      bagua__etcd_cad(g->c, key, kv.mod_revision, &deleted);
    }
    bagua__etcd_kv_clear(&kv);
  }
  if (k < g->nnamed) {
    g->nnamed--;
    memmove(g->names[k], g->names[g->nnamed], sizeof(g->names[0]));
    memmove(g->peers[k], g->peers[g->nnamed], sizeof(g->peers[0]));
    memmove(g->nodes[k], g->nodes[g->nnamed], sizeof(g->nodes[0]));
  }
  g->learner_id = 0;
}

/* The name this grower gave the member at `peer`, or the list's name. */
static const char *name_of(const struct bagua__launch_grower *g, const bagua__etcd_member_t *m) {
  if (m->name[0]) return m->name;
  for (int i = 0; i < g->nnamed; i++)
    if (strcmp(g->peers[i], m->peer) == 0) return g->names[i];
  return "";
}

/* One step: promote a learner that is due, or add the next candidate as a learner. Returns 1
 * while a change is under way (a candidate waits or a learner is due). */
static int grow_once(struct bagua__launch_grower *g) {
  bagua__etcd_member_t m[8];
  int n = 0;
  if (bagua__etcd_member_list(g->c, m, 8, &n) != BAGUA_OK) return 0;
  int learner = -1;
  for (int i = 0; i < n; i++)
    if (m[i].learner) learner = i;
  char prefix[320];
  if (etcd_key(prefix, sizeof(prefix), g->job, "candidate/", NULL) != 0) return 0;
  bagua__etcd_kv_t *kvs = NULL;
  size_t nk = 0;
  if (bagua__etcd_range_prefix(g->c, prefix, &kvs, &nk, NULL) != BAGUA_OK) return 0;
  /* A candidate that is not a member yet. */
  const bagua__etcd_kv_t *cand = NULL;
  char peer[128] = "", client[128] = "";
  for (size_t i = 0; i < nk && !cand; i++) {
    if (sscanf(kvs[i].value ? (const char *)kvs[i].value : "", "%127s %127s", peer, client) != 2)
      continue;
    int member = 0;
    for (int j = 0; j < n; j++) member |= strcmp(m[j].peer, peer) == 0;
    if (!member) cand = &kvs[i];
  }
  /* A learner with no name has not started: timed from when this grower first saw it so. */
  if (learner >= 0 && m[learner].name[0]) g->learner_id = 0;
  if (learner >= 0 && !m[learner].name[0] && g->learner_id != m[learner].id) {
    g->learner_id = m[learner].id;
    g->learner_since = bagua__now_ms();
  }
  if (learner >= 0 && g->learner_id == m[learner].id &&
      bagua__now_ms() - g->learner_since >= LEARNER_START_MS) {
    drop_learner(g, &m[learner]);
  } else if (learner >= 0) {
    if (cand || n >= MEMBERS_WANTED) {
      int code = -1;
      if (bagua__etcd_member_promote(g->c, m[learner].id, &code) == BAGUA_OK)
        BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "the job's etcd member %s votes now",
                   name_of(g, &m[learner]));
    }
  } else if (n < MEMBERS_WANTED && cand && g->nnamed < MEMBERS_WANTED) {
    uint64_t id = 0;
    bagua__etcd_member_t after[8];
    int na = 0;
    const char *node = strrchr(cand->key, '/') + 1;
    char name[32];
    snprintf(name, sizeof(name), "member-%d", g->next_slot);
    if (bagua__etcd_member_add(g->c, peer, 1, &id, after, 8, &na) == BAGUA_OK) {
      snprintf(g->names[g->nnamed], sizeof(g->names[0]), "%s", name);
      snprintf(g->peers[g->nnamed], sizeof(g->peers[0]), "%s", peer);
      snprintf(g->nodes[g->nnamed], sizeof(g->nodes[0]), "%s", node);
      g->nnamed++;
      g->next_slot++;
      char cluster[1024] = "", key[320], *p = cluster;
      for (int j = 0; j < na; j++) {
        const char *nm = name_of(g, &after[j]);
        p += snprintf(p, sizeof(cluster) - (size_t)(p - cluster), "%s%s=%s", j ? "," : "", nm,
                      after[j].peer);
        if (p >= cluster + sizeof(cluster)) break;
      }
      char value[1100];
      snprintf(value, sizeof(value), "%s %s", name, cluster);
      if (etcd_key(key, sizeof(key), g->job, "invite", node) == 0)
        bagua__etcd_put(g->c, key, value, strlen(value), 0, NULL, NULL);
      bagua__say(LAUNCH_TOOL, "the job's etcd grows: %s on node %s (%s)", name, node, peer);
    }
  } else if (n >= MEMBERS_WANTED && learner < 0 && !g->full_said) {
    char key[320];
    if (etcd_key(key, sizeof(key), g->job, "full", NULL) == 0 &&
        bagua__etcd_put(g->c, key, "3", 1, 0, NULL, NULL) == BAGUA_OK) {
      g->full_said = 1;
      bagua__say(LAUNCH_TOOL,
                 "the job's etcd has %d voting members: it survives the loss of any "
                 "one node",
                 n);
    }
  }
  int busy = cand != NULL || (learner >= 0 && n >= MEMBERS_WANTED);
  bagua__etcd_kvs_free(kvs, nk);
  return busy;
}

static void *grow_main(void *arg) {
  struct bagua__launch_grower *g = arg;
  /* Two requests a tick: every 200 ms while a change is under way, every second while it
   * waits for a candidate (a job of two nodes waits for ever), none once the cluster is full. */
  while (!g->stop && !g->full_said) {
    int busy = grow_once(g);
    int ticks = (busy ? GROW_TICK_MS : GROW_IDLE_MS) / 20;
    for (int t = 0; t < ticks && !g->stop; t++) usleep(20 * 1000);
  }
  return NULL;
}

int bagua__launch_grower_start(const bagua__launch_config_t *cfg, const char *endpoint,
                               bagua__launch_grower_t **out) {
  struct bagua__launch_grower *g = calloc(1, sizeof(*g));
  *out = NULL;
  if (!g) return -1;
  snprintf(g->job, sizeof(g->job), "%s", cfg->v[LS_JOB_ID].s);
  g->next_slot = 2;
  if (bagua__etcd_create(endpoint, 2000, &g->c) != BAGUA_OK) {
    free(g);
    return -1;
  }
  if (pthread_create(&g->thread, NULL, grow_main, g) != 0) {
    bagua__etcd_destroy(g->c);
    free(g);
    return -1;
  }
  *out = g;
  return 0;
}

void bagua__launch_grower_stop(bagua__launch_grower_t *g) {
  if (!g) return;
  g->stop = 1;
  bagua__etcd_abort(g->c, 1);
  pthread_join(g->thread, NULL);
  bagua__etcd_destroy(g->c);
  free(g);
}

/* ---- a joining node's member ---- */

/* This node's address towards `host` (a UDP connect sends nothing), or --node-addr. */
static int my_address(const bagua__launch_config_t *cfg, uint32_t host_ip, uint32_t *out) {
  if (cfg->v[LS_NODE_ADDR].s[0])
    return bagua__resolve_ipv4(cfg->v[LS_NODE_ADDR].s, out) == BAGUA_OK ? 0 : -1;
  return bagua__route_addr_ipv4(host_ip, 9, out) == BAGUA_OK ? 0 : -1;
}

/* Appends ",URL" to list when it is not in it yet. */
static void add_endpoint(char *list, size_t len, const char *url) {
  if (strncmp(url, "http://", 7) == 0) url += 7; /* the endpoint's own spelling */
  if (!url[0] || strstr(list, url)) return;
  size_t used = strlen(list);
  snprintf(list + used, len - used, "%s%s", used ? "," : "", url);
}

struct bagua__launch_member {
  const bagua__launch_config_t *cfg;
  bagua__etcd_t *c;
  bagua__launch_etcd_t *etcd;
  char cand[320], invite[320], full[320], offer[300];
  char ip[64];
  int peer_port, client_port;
  pthread_t thread;
  volatile int stop;
  int running; /* the member's etcd runs (set by the thread, read after the join) */
};

/* Reads `key` into out (""when absent); 1 when found. */
static int read_text(bagua__etcd_t *c, const char *key, char *out, size_t len) {
  bagua__etcd_kv_t kv = {0};
  int found = 0;
  out[0] = '\0';
  if (bagua__etcd_get(c, key, &kv, &found, NULL) == BAGUA_OK && found && kv.value)
    snprintf(out, len, "%.*s", (int)kv.value_len, kv.value);
  bagua__etcd_kv_clear(&kv);
  return found;
}

/* Offers the member and waits for the host's answer while the launcher runs: etcd refuses a
 * new member until the last one has been connected for 5 s, so an answer can take a while. */
static void *member_main(void *arg) {
  struct bagua__launch_member *m = arg;
  char answer[1100] = "", scratch[16];
  if (!read_text(m->c, m->full, scratch, sizeof(scratch)) &&
      bagua__etcd_put(m->c, m->cand, m->offer, strlen(m->offer), 0, NULL, NULL) == BAGUA_OK) {
    while (!m->stop && !answer[0] && !read_text(m->c, m->full, scratch, sizeof(scratch))) {
      read_text(m->c, m->invite, answer, sizeof(answer));
      for (int t = 0; t < GROW_TICK_MS / 20 && !m->stop && !answer[0]; t++) usleep(20 * 1000);
    }
    bagua__etcd_delete(m->c, m->cand, NULL);
    /* An answer written as the wait ended still counts: the host added the member. */
    if (!answer[0]) read_text(m->c, m->invite, answer, sizeof(answer));
  }
  char name[32], cluster[1024];
  if (answer[0] && !m->stop && sscanf(answer, "%31s %1023s", name, cluster) == 2) {
    bagua__etcd_local_opts_t o = BAGUA__ETCD_LOCAL_OPTS_INIT;
    o.bin = m->cfg->v[LS_ETCD_BIN].s;
    o.addr = m->ip;
    o.client_port = m->client_port;
    o.peer_addr = m->ip;
    o.peer_port = m->peer_port;
    o.name = name;
    o.initial_cluster = cluster;
    char serr[LAUNCH_ERR_LEN];
    if (bagua__launch_etcd_start_opts(&o, m->etcd, serr, sizeof(serr)) == 0) {
      m->running = 1;
      bagua__say(LAUNCH_TOOL, "running the job's etcd %s here, at %s:%d", name, m->ip,
                 m->client_port);
    } else {
      bagua__say(LAUNCH_TOOL, "the job's etcd %s did not start here: %s", name, serr);
    }
  }
  return NULL;
}

int bagua__launch_member_start(const bagua__launch_config_t *cfg, const char *node_id,
                               bagua__launch_etcd_t *member, char *endpoints, size_t len,
                               bagua__launch_member_t **out) {
  const char *job = cfg->v[LS_JOB_ID].s;
  char host[256], what[256];
  uint16_t port = 0;
  uint32_t host_ip = 0, ip = 0;
  *out = NULL;
  snprintf(endpoints, len, "%s", cfg->v[LS_ENDPOINT].s);
  struct bagua__launch_member *m = calloc(1, sizeof(*m));
  if (!m) return 0;
  m->cfg = cfg;
  m->etcd = member;
  if (bagua__endpoint_first(cfg->v[LS_ENDPOINT].s, host, sizeof(host), &port, what, sizeof(what)) !=
          BAGUA_OK ||
      bagua__resolve_ipv4(host, &host_ip) != BAGUA_OK || my_address(cfg, host_ip, &ip) != 0 ||
      etcd_key(m->cand, sizeof(m->cand), job, "candidate", node_id) != 0 ||
      etcd_key(m->invite, sizeof(m->invite), job, "invite", node_id) != 0 ||
      etcd_key(m->full, sizeof(m->full), job, "full", NULL) != 0 ||
      bagua__etcd_create(cfg->v[LS_ENDPOINT].s, (int)cfg->v[LS_ETCD_TIMEOUT_MS].i, &m->c) !=
          BAGUA_OK)
    goto none; /* no member: the job runs on the members there are */
  bagua__ipv4_str(ip, m->ip, sizeof(m->ip));
  m->peer_port = bagua__etcd_local_free_port(m->ip);
  do m->client_port = bagua__etcd_local_free_port(m->ip);
  while (m->client_port > 0 && m->client_port == m->peer_port);
  if (m->peer_port < 0 || m->client_port < 0) goto none;
  snprintf(m->offer, sizeof(m->offer), "http://%s:%d http://%s:%d", m->ip, m->peer_port, m->ip,
           m->client_port);
  /* The agents reach every member known now, the host's first; a slot holder lists its own
   * member-to-be second (until it runs, a refused connection moves on at once). */
  bagua__etcd_member_t list[8];
  int n = 0;
  if (bagua__etcd_member_list(m->c, list, 8, &n) == BAGUA_OK)
    for (int i = 0; i < n; i++) add_endpoint(endpoints, len, list[i].client);
  /* Two slots, claimed create-if-absent: only their holders offer and wait, so a thousand
   * nodes joining at once cost the etcd two transactions each and two pollers in all. */
  int claimed = 0;
  for (int slot = 2; slot <= MEMBERS_WANTED && !claimed; slot++) {
    char key[320], num[8];
    snprintf(num, sizeof(num), "%d", slot);
    if (etcd_key(key, sizeof(key), job, "slot", num) == 0 &&
        bagua__etcd_create_if_absent(m->c, key, node_id, strlen(node_id), 0, &claimed, NULL,
                                     NULL) != BAGUA_OK)
      claimed = 0;
  }
  if (!claimed) goto none;
  char mine[96];
  snprintf(mine, sizeof(mine), "http://%s:%d", m->ip, m->client_port);
  char with_mine[4096];
  snprintf(with_mine, sizeof(with_mine), "%s", cfg->v[LS_ENDPOINT].s);
  add_endpoint(with_mine, sizeof(with_mine), mine);
  for (int i = 0; i < n; i++) add_endpoint(with_mine, sizeof(with_mine), list[i].client);
  if (pthread_create(&m->thread, NULL, member_main, m) != 0) goto none;
  snprintf(endpoints, len, "%s", with_mine);
  *out = m;
  return 0;
none:
  bagua__etcd_destroy(m->c);
  free(m);
  return 0;
}

int bagua__launch_member_stop(bagua__launch_member_t *m) {
  if (!m) return 0;
  m->stop = 1;
  bagua__etcd_abort(m->c, 1);
  pthread_join(m->thread, NULL);
  int running = m->running;
  bagua__etcd_destroy(m->c);
  free(m);
  return running;
}
