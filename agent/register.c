/*
 * Membership of this node: its lease, its nodes/<id> record and its bid for leadership.
 *
 * The lease is the node's heartbeat: every key the agent must not leave behind when it dies
 * (its node record, the leader key) is attached to it, so a dead agent's keys disappear one
 * TTL after its last renewal and the others see a DELETE.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/time.h"

/*
 * A port that is free on this host now, for MASTER_PORT should this node become the round's
 * first node. Ports are picked afresh for every round, so a restarted rank 0 never has to
 * bind a port whose old connections linger in TIME_WAIT.
 */
int bagua__agent_pick_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof(sa);
  int port = -1;
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

/*
 * The address other nodes reach this node at, when --node-addr is not given: the source
 * address the kernel would use towards the first etcd endpoint. A connected UDP socket gives
 * it without sending anything.
 */
void bagua__agent_detect_addr(bagua__agent_t *a) {
  bagua__agent_config_t *cfg = a->cfg;
  if (cfg->node_addr[0]) return;
  uint32_t addr = 0;
  /* bagua__route_addr() warns with the reason (a malformed port, an unknown host). */
  if (bagua__route_addr(cfg->endpoints, &addr) == BAGUA_OK)
    bagua__ipv4_str(addr, cfg->node_addr, sizeof(cfg->node_addr));
  if (!cfg->node_addr[0]) {
    snprintf(cfg->node_addr, sizeof(cfg->node_addr), "%s", a->host);
    BAGUA_WARN(
        "agent: cannot tell the local address towards etcd at %s; advertising the host "
        "name %s (use --node-addr to choose)",
        cfg->endpoints, a->host);
  }
}

static char *node_record(const bagua__agent_t *a) {
  bagua__rdzv_node_t n;
  memset(&n, 0, sizeof(n));
  snprintf(n.host, sizeof(n.host), "%s", a->host);
  snprintf(n.addr, sizeof(n.addr), "%s", a->cfg->node_addr);
  snprintf(n.tag, sizeof(n.tag), "%s", a->cfg->tag);
  snprintf(n.version, sizeof(n.version), "%s", BAGUA_VERSION_STRING);
  n.nproc = a->cfg->nproc;
  n.pid = (int)getpid();
  n.master_port = a->master_port;
  n.live_port = a->live ? bagua__liveness_port(a->live) : 0;
  n.join_ms = a->join_ms;
  n.has_node_rank = a->cfg->node_rank >= 0;
  n.node_rank = n.has_node_rank ? a->cfg->node_rank : 0;
  return bagua__rdzv_node_encode(&n);
}

/*
 * This agent was refused node id cfg->node_id: `holder` (its node record, created at revision
 * `holder_rev`) is a live registration of another agent. Tells that agent through
 * clash/<node>, on this agent's lease (docs/agent.md, "A duplicate node id"): one put, and
 * the holder reads it through the watch it has anyway, so the duplicate costs each of them
 * O(1) requests. Returns 1 when the record was written (the lease must then be left to
 * expire rather than revoked), else 0.
 */
static int clash_holder(bagua__agent_t *a, int64_t holder_rev, const bagua__rdzv_node_t *holder) {
  const bagua__agent_config_t *cfg = a->cfg;
  bagua__rdzv_clash_t c;
  memset(&c, 0, sizeof(c));
  snprintf(c.host, sizeof(c.host), "%s", a->host);
  snprintf(c.addr, sizeof(c.addr), "%s", cfg->node_addr[0] ? cfg->node_addr : a->host);
  c.pid = (int)getpid();
  c.time_ms = bagua__wall_ms();
  c.holder_rev = holder_rev;
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_CLASH, 0, cfg->node_id);
  char *v = bagua__rdzv_clash_encode(&c);
  bagua_status_t st =
      v ? bagua__etcd_put(a->etcd, key, v, strlen(v), a->lease, NULL, NULL) : BAGUA_ERR_NO_MEMORY;
  free(v);
  char told[BAGUA_RDZV_KEY_MAX + 96];
  if (st == BAGUA_OK)
    snprintf(told, sizeof(told), "told that agent through etcd (%s)", key);
  else
    snprintf(told, sizeof(told), "could not tell that agent through etcd (%s: %s)", key,
             bagua_strerror(st));
  bagua__agent_say(
      "node id \"%s\" is in use by a live agent of job %s (pid %d on host %s, address %s); this "
      "agent is refused, and %s; accepted: a --node-id (or BAGUA_NODE_ID) that no other agent "
      "of the job uses, one per agent (default: the host name)",
      cfg->node_id, cfg->job_id, holder->pid, holder->host, holder->addr, told);
  return st == BAGUA_OK;
}

int bagua__agent_register(bagua__agent_t *a) {
  const bagua__agent_config_t *cfg = a->cfg;
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_NODE, 0, cfg->node_id);
  int64_t granted = 0;
  if (bagua__etcd_lease_grant(a->etcd, cfg->lease_ttl_s, &a->lease, &granted) != BAGUA_OK) {
    a->lease = 0;
    return 3;
  }
  /* Before the record exists: whoever connects after reading it must get this lease. */
  if (a->live) bagua__liveness_set_lease(a->live, a->lease);
  int port = bagua__agent_pick_port();
  a->master_port = port > 0 ? port : 29500;
  a->join_ms = bagua__wall_ms();
  char *rec = node_record(a);
  if (!rec) return 3;
  /* A key with our id on another lease is another agent, or a dead one whose lease has not
   * expired yet: give it one TTL (plus etcd's expiry tick) to go away. */
  int64_t deadline = bagua__now_ms() + (int64_t)cfg->lease_ttl_s * 1000 + 1500;
  const int64_t ttl_ms = (granted > 0 ? granted : cfg->lease_ttl_s) * 1000;
  int64_t renewed = bagua__now_ms();
  int said = 0, rc = 3, keep_lease = 0;
  for (;;) {
    int created = 0;
    bagua__etcd_kv_t cur;
    if (bagua__etcd_create_if_absent(a->etcd, key, rec, strlen(rec), a->lease, &created, NULL,
                                     &cur) != BAGUA_OK)
      break;
    if (created) {
      bagua__etcd_kv_clear(&cur);
      rc = 0;
      break;
    }
    bagua__rdzv_node_t other;
    memset(&other, 0, sizeof(other));
    int valid = bagua__rdzv_node_decode(cur.value, &other, NULL, 0) == 0;
    int64_t holder_lease = cur.lease, holder_rev = cur.create_revision;
    bagua__etcd_kv_clear(&cur);
    if (bagua__now_ms() > deadline) {
      if (valid && holder_lease != 0 && holder_lease != a->lease) {
        /* A live registration of another agent: tell it (clash_holder), so that it does not
         * wait for ever for a job that cannot start with two agents claiming one id. */
        keep_lease = clash_holder(a, holder_rev, &other);
      } else {
        /* Nothing renews what holds the key (it is on no lease, or not a node record): no
         * agent to tell, and no expiry to wait for. */
        bagua__agent_say(
            "node id \"%s\": %s holds %s that no agent renews; accepted: remove it (etcdctl del "
            "%s) or give this agent another --node-id",
            cfg->node_id, key,
            valid ? "a node record on no lease" : "a value that is no node record", key);
      }
      rc = 2;
      break;
    }
    if (!said) {
      bagua__agent_say(
          "node id \"%s\" is registered by pid %d on host %s; waiting up to %d s "
          "for that registration to expire",
          cfg->node_id, other.pid, other.host, cfg->lease_ttl_s + 1);
      said = 1;
    }
    bagua__agent_wait(a, 200);
    if (a->term_sig) break;
    /* The wait outlasts a TTL and the keeper starts only once the record is written: renew
     * the lease meanwhile (every third of the TTL, as the keeper does), or the record, or the
     * clash record telling the holder, could not be put on it. */
    if (bagua__now_ms() - renewed >= ttl_ms / 3) {
      int64_t left = -1;
      if (bagua__etcd_lease_keepalive_once(a->etcd, a->lease, &left) == BAGUA_OK && left > 0)
        renewed = bagua__now_ms();
    }
  }
  free(rec);
  if (rc != 0) {
    /* The clash record lives on this lease: revoked now, it could vanish before the holder's
     * watch shows it in a snapshot. Nothing renews it once this agent exits, so it expires
     * after --lease-ttl, taking the record with it. */
    if (!keep_lease) bagua__etcd_lease_revoke(a->etcd, a->lease);
    a->lease = 0;
    return rc;
  }
  if (bagua__etcd_keeper_start(a->etcd, a->lease, granted > 0 ? granted : cfg->lease_ttl_s,
                               &a->keeper) != BAGUA_OK) {
    bagua__etcd_lease_revoke(a->etcd, a->lease);
    a->lease = 0;
    return 3;
  }
  /* The loop waits for events, not periods: the keeper wakes it when etcd stops answering
   * renewals (an outage), answers again, or says the lease is gone. */
  bagua__etcd_keeper_set_notify_fd(a->keeper, a->wake_fd);
  BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: registered %s (lease %lld, ttl %lld s, addr %s)", key,
             (long long)a->lease, (long long)granted, cfg->node_addr);
  return 0;
}

void bagua__agent_refresh_record(bagua__agent_t *a) {
  int port = bagua__agent_pick_port();
  if (port <= 0 || a->lease == 0) return;
  a->master_port = port;
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_NODE, 0, a->cfg->node_id);
  char *rec = node_record(a);
  /* A plain put keeps the key's create_revision, so the node keeps its registration order. */
  if (rec) bagua__etcd_put(a->etcd, key, rec, strlen(rec), a->lease, NULL, NULL);
  free(rec);
}

void bagua__agent_deregister(bagua__agent_t *a) {
  bagua__etcd_keeper_stop(a->keeper);
  a->keeper = NULL;
  /* Once the registration is gone, the watchers are told this node leaves on purpose when
   * its liveness connections close (a goodbye line), so they revoke nothing. */
  if (a->lease && bagua__etcd_lease_revoke(a->etcd, a->lease) == BAGUA_OK)
    bagua__liveness_leaving(a->live);
  a->lease = 0;
  a->is_leader = 0;
}

int bagua__agent_check_registration(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  const bagua__rdzv_node_t *me = bagua__agent_snap_node(s, a->cfg->node_id);
  int lost = a->keeper == NULL || bagua__etcd_keeper_lost(a->keeper);
  /* No record of ours: the lease may have been revoked (the leader drops a member that did
   * not act in its round, leader.c), which the keeper notices only at its next renewal; a
   * record written back on a revoked lease would be refused. */
  if (a->keeper && (lost || !me)) {
    /* The keeper also says "lost" during an outage longer than a TTL; etcd is answering
     * again (we hold a fresh snapshot), so ask it whether the lease still exists. */
    int64_t ttl = -1;
    if (bagua__etcd_lease_keepalive_once(a->etcd, a->lease, &ttl) != BAGUA_OK) return 0;
    lost = ttl == 0;
  }
  if (lost) {
    if (a->keeper)
      bagua__agent_say(
          "lost the etcd lease (it expired, or was revoked); registering again as a new "
          "node");
    bagua__etcd_keeper_stop(a->keeper);
    a->keeper = NULL;
    a->lease = 0;
    a->is_leader = 0;
    int rc = bagua__agent_register(a);
    return rc == 3 ? 0 : rc; /* etcd trouble: try again on the next pass */
  }
  if (me && me->lease == a->lease) return 0;
  if (me) {
    bagua__agent_say(
        "node id \"%s\" was taken over by another agent (pid %d on host %s); "
        "give every agent its own --node-id",
        a->cfg->node_id, me->pid, me->host);
    return BAGUA_AGENT_EXIT_USAGE;
  }
  /*
   * No valid record of ours under a live lease. Either the key vanished (a concurrent
   * stale-state reset removed it, or someone deleted it), or it holds what the snapshot
   * refused: a value someone wrote by hand, or a plain put that took it off our lease. Both
   * are repaired the same way, or the node would drop out of the job and the leader would
   * fail it after --rdzv-timeout: the record is written again on our lease, compare-and-swap
   * on what was read (a put keeps the key's create_revision, so the node keeps its
   * registration order). A valid record on another lease is another agent (above).
   */
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_NODE, 0, a->cfg->node_id);
  char *rec = node_record(a);
  if (!rec) return 0;
  int created = 0, swapped = 0;
  bagua__etcd_kv_t cur;
  memset(&cur, 0, sizeof(cur));
  if (bagua__etcd_create_if_absent(a->etcd, key, rec, strlen(rec), a->lease, &created, NULL,
                                   &cur) == BAGUA_OK &&
      !created && cur.value) {
    bagua__rdzv_node_t other;
    memset(&other, 0, sizeof(other));
    char why[160] = "";
    int valid = bagua__rdzv_node_decode(cur.value, &other, why, sizeof(why)) == 0;
    /* Valid and on a lease: a registration that appeared since the snapshot; the next pass
     * judges it. */
    if (!valid || cur.lease == 0) {
      if (bagua__etcd_cas(a->etcd, key, cur.mod_revision, rec, strlen(rec), a->lease, &swapped,
                          NULL, NULL) == BAGUA_OK &&
          swapped)
        bagua__agent_say("%s held %s: rewrote this node's record", key,
                         valid ? "a record on no lease" : "a corrupt value");
    }
  }
  bagua__etcd_kv_clear(&cur);
  free(rec);
  return 0;
}

int bagua__agent_check_clash(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  if (!s->has_clash || s->clash_mod_rev == a->clash_rev) return -1;
  const bagua__agent_config_t *cfg = a->cfg;
  const bagua__rdzv_clash_t *c = &s->clash;
  const bagua__rdzv_node_t *me = bagua__agent_snap_node(s, cfg->node_id);
  /* About another registration of this id (one this agent held before it lost its lease, say):
   * not about this one, whose id nobody was refused. Looked at again on a later pass only if
   * the record changes or this registration shows up. */
  if (!me || me->lease != a->lease || me->create_rev != c->holder_rev) return -1;
  a->clash_rev = s->clash_mod_rev;
  char when[40], who[1024];
  bagua__agent_format_time(c->time_ms, when, sizeof(when));
  snprintf(who, sizeof(who),
           "another agent (pid %d on host %s, address %s) was started with this node's id \"%s\" "
           "for job %s and refused at %s",
           c->pid, c->host, c->addr, cfg->node_id, cfg->job_id, when);
  /* Joined: the job runs with this node (a round named it under this registration), and the
   * refused agent disturbs nothing: stopping this one would only end its workers. */
  int named =
      s->has_place && s->place.index >= 0 && (!s->place.rev || s->place.rev == me->create_rev);
  if (a->joined || named) {
    bagua__agent_say(
        "%s; this node keeps running (the job runs with it); give that agent its own --node-id",
        who);
    return -1;
  }
  bagua__agent_say(
      "%s; stopping this agent too, before the job starts: two agents cannot share one node id; "
      "accepted: a --node-id (or BAGUA_NODE_ID) that no other agent of the job uses, one per "
      "agent (default: the host name)",
      who);
  return BAGUA_AGENT_EXIT_USAGE;
}

/*
 * Whether the leader key is what a campaign writes: the id of a registered node, on that
 * node's own lease. Anything else (a value someone wrote by hand, a key on no lease) names no
 * agent that will ever form a round, and left alone it would hold the key for ever.
 */
/* This node's tier wait (ring.h) by its place in the current round; 0 with no place yet. */
static int tier_wait_ms(const bagua__agent_snap_t *s) {
  if (!s->has_place) return 0;
  return bagua__ring_campaign_delay_ms(s->place.index, s->place.nmembers, BAGUA__CAMPAIGN_STEP_MS);
}

/*
 * The registration the leader key names: from the snapshot when it holds every node record
 * (the leader's), else read once per value of the key (a follower follows no other node's
 * record). Returns 1 when the node is registered (its lease in *lease), 0 when not, -1 when
 * etcd did not answer (then nothing is judged this pass).
 */
static int leader_node(bagua__agent_t *a, const bagua__agent_snap_t *s, int64_t *lease) {
  if (s->full) {
    const bagua__rdzv_node_t *n = bagua__agent_snap_node(s, s->leader);
    *lease = n ? n->lease : 0;
    return n != NULL;
  }
  bagua__agent_leader_check_t *lc = &a->leader_check;
  if (lc->leader_mod_rev != s->leader_mod_rev) {
    /* Not all followers at once after a leader change: each waits its tier (ring.h). */
    int64_t now = bagua__now_ms();
    if (lc->due_rev != s->leader_mod_rev) {
      lc->due_rev = s->leader_mod_rev;
      lc->due_ms = now + tier_wait_ms(s);
    }
    if (now < lc->due_ms) return -1;
    char key[BAGUA_RDZV_KEY_MAX];
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_NODE, 0, s->leader);
    bagua__etcd_kv_t kv;
    int found = 0;
    if (bagua__etcd_get(a->etcd, key, &kv, &found, NULL) != BAGUA_OK) return -1;
    bagua__rdzv_node_t n;
    memset(&n, 0, sizeof(n));
    lc->present = found && kv.lease != 0 && bagua__rdzv_node_decode(kv.value, &n, NULL, 0) == 0;
    lc->lease = lc->present ? kv.lease : 0;
    lc->leader_mod_rev = s->leader_mod_rev;
    bagua__etcd_kv_clear(&kv);
  }
  *lease = lc->lease;
  return lc->present;
}

static int leader_genuine(bagua__agent_t *a, const bagua__agent_snap_t *s, char *why, size_t len) {
  if (!s->leader_valid) {
    snprintf(why, len, "it holds no valid node id");
    return 0;
  }
  int64_t lease = 0;
  int present = leader_node(a, s, &lease);
  if (present < 0) return 1; /* not known this pass: judged on a later one */
  if (!present) {
    snprintf(why, len, "it names \"%s\", which is not a registered node", s->leader);
    return 0;
  }
  if (s->leader_lease == 0 || s->leader_lease != lease) {
    snprintf(why, len, "it is not on node %s's lease (lease %lld, the node's %lld)", s->leader,
             (long long)s->leader_lease, (long long)lease);
    return 0;
  }
  return 1;
}

void bagua__agent_check_leadership(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  int was = a->is_leader;
  a->is_leader = s->has_leader && s->leader_valid && a->lease != 0 &&
                 strcmp(s->leader, a->cfg->node_id) == 0 && s->leader_lease == a->lease;
  int vacant = !s->has_leader;
  char why[256];
  /* The leader itself needs no check: it wrote the key on its own lease. */
  if (s->has_leader && a->lease != 0 && !a->is_leader && !leader_genuine(a, s, why, sizeof(why))) {
    /* Deleted only if unchanged since the snapshot: a genuine campaign that won meanwhile is
     * never removed. Every agent may try; one succeeds, and all then campaign. */
    char key[BAGUA_RDZV_KEY_MAX];
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_LEADER, 0, NULL);
    int deleted = 0;
    if (bagua__etcd_cad(a->etcd, key, s->leader_mod_rev, &deleted) == BAGUA_OK && deleted)
      bagua__agent_say("removed a corrupt leader key %s (%s); electing a leader again", key, why);
    vacant = 1;
  }
  bagua__agent_leader_check_t *lc = &a->leader_check;
  lc->campaign_at = 0;
  if (!vacant) lc->vacant_since = 0;
  if (vacant && a->lease != 0 && bagua__agent_snap_node(s, a->cfg->node_id)) {
    /* The first members of the round campaign at once, the others a tier later each, unless
     * a leader came meanwhile (ring.h): one write per candidate, not per survivor. */
    int64_t now = bagua__now_ms();
    if (!lc->vacant_since) lc->vacant_since = now;
    int64_t due = lc->vacant_since + tier_wait_ms(s);
    if (now < due) {
      lc->campaign_at = due;
      return;
    }
    char key[BAGUA_RDZV_KEY_MAX];
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_LEADER, 0, NULL);
    int created = 0;
    const char *id = a->cfg->node_id;
    if (bagua__etcd_create_if_absent(a->etcd, key, id, strlen(id), a->lease, &created, NULL,
                                     NULL) == BAGUA_OK &&
        created)
      a->is_leader = 1;
  }
  if (a->is_leader && !was) {
    bagua__leader_state_clear(&a->lead);
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: %s is now the leader of job %s", a->cfg->node_id,
               a->cfg->job_id);
  }
}
