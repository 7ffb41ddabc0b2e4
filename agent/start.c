/*
 * A job's start as one agent sees it: the first contact with etcd (which waits out an etcd
 * that is not up yet, up to the rendezvous timeout), the state an earlier run of the same job
 * id left behind, and the settings every agent of the job must share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/time.h"

int bagua__agent_interrupted_code(int sig) {
  return 128 + sig;
}

void bagua__agent_probe_clear(bagua__agent_probe_t *p) {
  bagua__agent_snap_clear(&p->s);
  p->nodes = p->round_keys = p->round_rev = 0;
}

/* The probe: the job's status and round, and how many registrations and round keys it has,
 * in one request that sends no node record. */
static bagua_status_t probe(bagua__agent_t *a, bagua__agent_probe_t *p) {
  char status[BAGUA_RDZV_KEY_MAX], round[BAGUA_RDZV_KEY_MAX], nodes[BAGUA_RDZV_KEY_MAX],
      rounds[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, status, sizeof(status), BAGUA__RDZV_KEY_STATUS, 0, NULL);
  bagua__agent_key(a, round, sizeof(round), BAGUA__RDZV_KEY_ROUND, 0, NULL);
  bagua__agent_key(a, nodes, sizeof(nodes), BAGUA__RDZV_KEY_NODES_DIR, 0, NULL);
  bagua__agent_key(a, rounds, sizeof(rounds), BAGUA__RDZV_KEY_ROUNDS_DIR, 0, NULL);
  /* The round's value is not needed (a corrupt one is state too), only whether it exists:
   * keys_only keeps its O(N) member list off the wire. */
  bagua__etcd_read_t rd[4] = {{.span = {status, NULL, 0}},
                              {.span = {round, NULL, 0}, .keys_only = 1},
                              {.span = {nodes, NULL, 1}, .count_only = 1},
                              {.span = {rounds, NULL, 1}, .count_only = 1}};
  memset(p, 0, sizeof(*p));
  bagua_status_t st = bagua__etcd_read_ranges(a->etcd, rd, 4, NULL);
  if (st != BAGUA_OK) return st;
  /* Only the status is parsed: the round came without its value, and judging an empty value
   * would reject a sound round record. */
  int rc = bagua__agent_snap_parse(a->prefix, rd[0].kvs, rd[0].n == 1, &p->s);
  if (rd[1].n == 1) p->round_rev = rd[1].kvs[0].mod_revision;
  p->nodes = rd[2].count;
  p->round_keys = rd[3].count;
  bagua__etcd_reads_clear(rd, 4);
  return rc == 0 ? BAGUA_OK : BAGUA_ERR_NO_MEMORY;
}

int bagua__agent_first_contact(bagua__agent_t *a, bagua__agent_probe_t *p) {
  const bagua__agent_config_t *cfg = a->cfg;
  int64_t t0 = bagua__now_ms(), deadline = t0 + (int64_t)cfg->rdzv_timeout_s * 1000;
  int backoff = 250, said = 0;
  for (;;) {
    bagua_status_t st = probe(a, p);
    if (st == BAGUA_OK) return -1;
    if (st == BAGUA_ERR_ABORTED) { /* a signal that ends the agent is pending */
      bagua__agent_wait(a, 0);
      if (a->term_sig) return bagua__agent_interrupted_code(a->term_sig);
      continue;
    }
    int64_t now = bagua__now_ms();
    if (now >= deadline) {
      bagua__agent_say("giving up: etcd at %s was unreachable for %lld s (--rdzv-timeout %d): %s",
                       cfg->endpoints, (long long)(now - t0) / 1000, cfg->rdzv_timeout_s,
                       bagua_strerror(st));
      return BAGUA_AGENT_EXIT_RDZV;
    }
    if (!said) {
      bagua__agent_say("cannot reach etcd at %s (%s); retrying for up to %d s (--rdzv-timeout)",
                       cfg->endpoints, bagua_strerror(st), cfg->rdzv_timeout_s);
      said = 1;
    }
    int64_t left = deadline - now;
    bagua__agent_wait(a, (int)(left < backoff ? left : backoff));
    if (a->term_sig) return bagua__agent_interrupted_code(a->term_sig);
    if (backoff < 4000) backoff *= 2;
  }
}

int bagua__agent_job_exit_code(const bagua__rdzv_status_t *st) {
  switch (st->state) {
    case BAGUA__JOB_SUCCEEDED:
      return 0;
    case BAGUA__JOB_FAILED:
      if (st->has_root) return bagua__agent_failure_exit_code(&st->root);
      return st->exit_code > 0 && st->exit_code < 256 ? st->exit_code : BAGUA_AGENT_EXIT_RDZV;
    case BAGUA__JOB_CLOSED:
      return BAGUA_AGENT_EXIT_INTERRUPTED;
    default:
      return 1;
  }
}

void bagua__agent_describe_end(const bagua__agent_t *a, const bagua__rdzv_status_t *st,
                               const char *how) {
  char when[40];
  bagua__agent_format_time(st->time_ms, when, sizeof(when));
  if (st->state == BAGUA__JOB_SUCCEEDED) {
    bagua__agent_say("job %s %ssucceeded at %s (round %lld)", a->cfg->job_id, how, when,
                     (long long)st->round);
  } else if (st->state == BAGUA__JOB_FAILED && st->has_root) {
    char what[1024], at[40];
    /* The worker's own message (its error file) after the time, so that the time is not read
     * as part of it. */
    bagua__rdzv_failure_t root = st->root;
    root.error[0] = '\0';
    bagua__agent_failure_describe(&root, what, sizeof(what));
    bagua__agent_format_time(st->root.time_ms, at, sizeof(at));
    bagua__agent_say("job %s %sfailed at %s: root cause: %s at %s%s%s; %s", a->cfg->job_id, how,
                     when, what, at, st->root.error[0] ? ": " : "", st->root.error, st->message);
  } else {
    bagua__agent_say("job %s %s%s at %s: %s", a->cfg->job_id, how,
                     bagua__rdzv_job_state_name(st->state), when, st->message);
  }
}

/*
 * State of an earlier run under the same job id (a known failure of other elastic launchers:
 * a restarted job that reads an old closed rendezvous fails in a loop). The rule:
 *  - a terminal status while agents are still registered is this job ending: a late agent
 *    exits with the job's result instead of starting it again;
 *  - any state with no agent registered (a terminal status, or "running" left by agents that
 *    were all killed) is an earlier run: it is deleted and the job starts afresh.
 * Of several agents starting at once exactly one deletes (a compare-and-delete on the key it
 * saw decides); registrations the others made meanwhile are restored by their loops.
 */
int bagua__agent_handle_stale(bagua__agent_t *a, bagua__agent_probe_t *p) {
  const bagua__agent_snap_t *s = &p->s;
  int live = p->nodes > 0;
  int terminal = s->has_status && s->status.state != BAGUA__JOB_RUNNING;
  if (terminal && live) {
    bagua__agent_describe_end(a, &s->status, "already ");
    bagua__agent_say(
        "not starting job %s again: %lld agent(s) of it are still registered; use "
        "another --job-id for a new run",
        a->cfg->job_id, (long long)p->nodes);
    return bagua__agent_job_exit_code(&s->status);
  }
  /* A corrupt round or status counts as state too: a new run starts without it. */
  /* Not the config or the secret alone: the first agent of a new run writes both before it
   * registers, and a second agent starting in that window must not take them for an earlier
   * run's leftovers. */
  int any = s->has_status || s->status_bad || p->round_rev || p->round_keys > 0;
  if (live || !any) return -1;
  char when[40] = "an unknown time";
  if (s->has_status) bagua__agent_format_time(s->status.time_ms, when, sizeof(when));
  bagua__agent_say(
      "clearing the state an earlier run of job %s left in etcd (status %s at %s, "
      "no agent registered); starting afresh",
      a->cfg->job_id, s->has_status ? bagua__rdzv_job_state_name(s->status.state) : "none", when);
  char key[BAGUA_RDZV_KEY_MAX];
  int deleted = 1;
  if (s->status_mod_rev) {
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_STATUS, 0, NULL);
    if (bagua__etcd_cad(a->etcd, key, s->status_mod_rev, &deleted) != BAGUA_OK) deleted = 0;
  } else if (p->round_rev) {
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_ROUND, 0, NULL);
    if (bagua__etcd_cad(a->etcd, key, p->round_rev, &deleted) != BAGUA_OK) deleted = 0;
  }
  if (deleted) bagua__etcd_delete_prefix(a->etcd, a->prefix, NULL);
  bagua__agent_probe_clear(p);
  return bagua__agent_first_contact(a, p);
}

/* The settings that must agree across the job's agents are fixed by the first one. */
int bagua__agent_check_jobcfg(bagua__agent_t *a) {
  const bagua__agent_config_t *cfg = a->cfg;
  bagua__rdzv_jobcfg_t mine = {cfg->nnodes_min, cfg->nnodes_max, cfg->max_restarts, ""};
  snprintf(mine.node, sizeof(mine.node), "%s", cfg->node_id);
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_CONFIG, 0, NULL);
  char *v = bagua__rdzv_jobcfg_encode(&mine);
  if (!v) return BAGUA_AGENT_EXIT_RDZV;
  int created = 0;
  bagua__etcd_kv_t cur;
  bagua_status_t st =
      bagua__etcd_create_if_absent(a->etcd, key, v, strlen(v), 0, &created, NULL, &cur);
  free(v);
  if (st != BAGUA_OK) {
    bagua__agent_say("cannot write %s in etcd at %s: %s", key, cfg->endpoints, bagua_strerror(st));
    return BAGUA_AGENT_EXIT_RDZV;
  }
  int rc = -1;
  bagua__rdzv_jobcfg_t theirs;
  if (!created && bagua__rdzv_jobcfg_decode(cur.value, &theirs, NULL, 0) == 0 &&
      (theirs.nnodes_min != mine.nnodes_min || theirs.nnodes_max != mine.nnodes_max ||
       theirs.max_restarts != mine.max_restarts)) {
    bagua__agent_say(
        "--nnodes %d:%d --max-restarts %d differ from job %s's settings (--nnodes "
        "%d:%d --max-restarts %d, fixed by node %s); every node of a job must use "
        "the same values",
        mine.nnodes_min, mine.nnodes_max, mine.max_restarts, cfg->job_id, theirs.nnodes_min,
        theirs.nnodes_max, theirs.max_restarts, theirs.node);
    rc = BAGUA_AGENT_EXIT_USAGE;
  }
  bagua__etcd_kv_clear(&cur);
  return rc;
}
