/*
 * What every agent does with a snapshot, leader or not: when a new round appears, stop this
 * node's workers and start the round's (or wait as a spare), unless the round only changed
 * the membership and the workers follow it by themselves (in-process mode, or auto mode with
 * every worker's elastic mark present: adopt_round), and report how the round's workers ended
 * in rounds/<N>/done/<node>.
 *
 * A local worker failure is reported at once and the node's other workers are stopped: in
 * restart mode the whole world is restarted anyway. When another node reports a failure, this
 * node stops its workers too and reports "stopped", so the leader hears from every live
 * member quickly and can tell a plain worker failure (all members answered) from a dead node
 * (one never answers and its lease expires).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent_internal.h"
#include "common/log.h"
#include "marks.h"
#include "common/time.h"

int bagua__agent_workers_elastic(const bagua__agent_t *a, char *why, size_t len) {
  if (why && len) why[0] = '\0';
  if (a->cfg->elastic_mode == BAGUA__ELASTIC_IN_PROCESS) return 1;
  if (a->cfg->elastic_mode == BAGUA__ELASTIC_RESTART) return 0;
  if (!a->mark_dir[0]) {
    if (why) snprintf(why, len, "no directory for the workers' elastic marks");
    return 0;
  }
  int lr = bagua__marks_missing(a->mark_dir, &a->ws);
  if (lr < 0) return 1;
  if (why)
    snprintf(why, len, "worker %d (rank %d) did not announce the elastic API", lr,
             a->ws.w[lr].rank);
  return 0;
}

/*
 * In-process and auto modes: a round formed by a membership change leaves this node's running
 * workers alone when they are all still running, none failed, the node keeps its place with
 * the same number of workers, and (auto mode) every worker announced that it runs the elastic
 * API; they move to the new round themselves (bagua_elastic_rebuild watches the round key).
 * Returns 1 when the round was adopted so.
 */
static int adopt_round(bagua__agent_t *a, const bagua__rdzv_assign_t *P,
                       const bagua__agent_snap_t *s) {
  const bagua__agent_config_t *cfg = a->cfg;
  /* The reason's row says whether its workers move on by themselves (a membership change, or
   * a stall round the workers asked for), common/rdzv/reason.c. */
  if (cfg->elastic_mode == BAGUA__ELASTIC_RESTART ||
      !bagua__round_reason_keeps_workers(P->reason) || !a->member)
    return 0;
  if (a->ws.n != cfg->nproc || a->ws.nrunning != a->ws.n || a->ws.stopping || a->have_report)
    return 0;
  const bagua__rdzv_node_t *me = bagua__agent_snap_node(s, cfg->node_id);
  if (P->index < 0 || P->nproc != cfg->nproc || !me || me->lease != a->lease ||
      (P->rev && me->create_rev != P->rev))
    return 0;
  char why[192];
  if (!bagua__agent_workers_elastic(a, why, sizeof(why))) {
    /* Auto mode with a worker that does not follow rounds by itself: it would wait on a world
     * that no longer exists, so the whole node restarts into the new round. */
    bagua__agent_say("round %lld (%s, restart: %s)", (long long)P->round,
                     bagua__round_reason_word(P->reason), why);
    return 0;
  }
  char how[96] = "";
  if (cfg->elastic_mode == BAGUA__ELASTIC_AUTO)
    snprintf(how, sizeof(how), ": all %d workers use the elastic API", a->ws.n);
  /* The rank rule is the schema's (common/rdzv), the one libbagua applies too. */
  int base = P->rank_base;
  /* The console prefix and the log header follow the workers' new ranks. */
  bagua__workers_renumber(&a->ws, cfg, a->out, P->round, P->restart_count, base);
  bagua__agent_say(
      "round %lld (%s, in-process%s): node %d of %d, ranks %d..%d of %d; workers keep "
      "running and rebuild",
      (long long)P->round, bagua__round_reason_word(P->reason), how, P->index, P->nmembers, base,
      base + cfg->nproc - 1, P->world_size);
  a->cur_round = P->round;
  a->have_report = 0;
  a->reported = 0;
  a->kept = 1;
  return 1;
}

static void start_round(bagua__agent_t *a, const bagua__rdzv_assign_t *P,
                        const bagua__agent_snap_t *s) {
  const bagua__agent_config_t *cfg = a->cfg;
  a->rounds_seen++;
  if (adopt_round(a, P, s)) return;
  if (a->ws.nrunning > 0) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: round %lld replaces round %lld: stopping workers",
               (long long)P->round, (long long)a->cur_round);
    bagua__agent_stop_workers(a, SIGTERM);
  }
  bagua__workers_clear(&a->ws);
  a->cur_round = P->round;
  a->kept = 0;
  a->member = 0;
  a->have_report = 0;
  a->reported = 0;

  const bagua__rdzv_node_t *me = bagua__agent_snap_node(s, cfg->node_id);
  int idx = P->index;
  if (idx < 0) {
    bagua__agent_say(
        "round %lld formed with %d node(s) without this one (--nnodes %d:%d): "
        "waiting as a spare",
        (long long)P->round, P->nmembers, cfg->nnodes_min, cfg->nnodes_max);
    return;
  }
  /* The round names an earlier registration of this node (its lease was lost since): the
   * leader will form another round with the current one, so start nothing now. */
  if (!me || me->lease != a->lease || (P->rev && me->create_rev != P->rev)) return;

  int base = P->rank_base;
  if (P->nproc != cfg->nproc)
    BAGUA_WARN("agent: round %lld lists %d workers for this node, which runs %d",
               (long long)P->round, P->nproc, cfg->nproc);
  bagua__worker_assign_t as = {
      .round = P->round,
      .restart_count = P->restart_count,
      .group_rank = idx,
      .group_world_size = P->nmembers,
      .rank_base = base,
      .world_size = P->world_size,
      .master_addr = P->master_addr,
      .master_port = P->master_port,
      .bootstrap = a->bootstrap[0] ? a->bootstrap : NULL,
      .mark_dir = a->mark_dir[0] && cfg->elastic_mode == BAGUA__ELASTIC_AUTO ? a->mark_dir : NULL,
      .progress_dir = a->mark_dir[0] && cfg->progress_interval_ms > 0 ? a->mark_dir : NULL,
      .error_dir = a->mark_dir[0] ? a->mark_dir : NULL,
      .secret = a->secret[0] ? a->secret : NULL,
  };
  /* Marks, progress and error files of the workers just stopped must not speak for the ones
   * started now. */
  bagua__marks_clear(a->mark_dir);
  bagua__agent_say("round %lld (%s, restart %d): node %d of %d, ranks %d..%d of %d, master %s:%d",
                   (long long)P->round, P->reason ? bagua__round_reason_word(P->reason) : "?",
                   P->restart_count, idx, P->nmembers, base, base + cfg->nproc - 1, P->world_size,
                   P->master_addr, P->master_port);
  a->member = 1;
  /* The job now runs with this node: a duplicate of its id no longer stops it (register.c). */
  a->joined = 1;
  /* From now on workers hold the job secret this agent exported (agent.c, check_secret). */
  a->secret_used = 1;
  bagua_status_t started = bagua__workers_start(&a->ws, cfg, &as, a->out);
  if (started != BAGUA_OK) {
    /* The node cannot run its share (the program cannot be executed, or fork or pipe failed):
     * report it as this node's failure so the leader restarts or fails the job instead of
     * waiting for workers that never ran. The record carries the error itself, so the root
     * cause names it rather than an exit code, and an exec error (not found, not executable),
     * which every restart would repeat, is marked permanent. */
    bagua__agent_say("could not start the workers of round %lld: %s", (long long)P->round,
                     bagua_last_error());
    bagua__agent_stop_workers(a, SIGKILL);
    a->have_report = 1;
    memset(&a->report, 0, sizeof(a->report));
    a->report.state = BAGUA__DONE_FAILED;
    bagua__rdzv_failure_t *f = &a->report.f;
    snprintf(f->node, sizeof(f->node), "%s", cfg->node_id);
    snprintf(f->host, sizeof(f->host), "%s", a->host);
    f->time_ms = bagua__wall_ms();
    f->round = P->round;
    f->rank = base + a->ws.n;
    f->local_rank = a->ws.n;
    f->exit_code = 127;
    f->permanent = started == BAGUA_ERR_INVALID_USAGE;
    const char *why = bagua_last_error();
    if (strncmp(why, "agent: ", 7) == 0) why += 7;
    snprintf(f->reason, sizeof(f->reason), "%s", why);
  }
  /* The first node's port is now rank 0's; advertise a fresh one for the next round. */
  if (idx == 0) bagua__agent_refresh_record(a);
}

/* The failure of worker `w` as the done record and the failure key report it, with the
 * message of its error file when it left one (torch's @record). */
static void fill_failure(const bagua__agent_t *a, const bagua__worker_t *w,
                         bagua__rdzv_failure_t *f) {
  memset(f, 0, sizeof(*f));
  snprintf(f->node, sizeof(f->node), "%s", a->cfg->node_id);
  snprintf(f->host, sizeof(f->host), "%s", a->host);
  f->time_ms = w->exit_ms;
  f->round = a->cur_round;
  f->rank = w->rank;
  f->local_rank = w->local_rank;
  f->pid = (int)w->pid;
  if (WIFSIGNALED(w->wait_status))
    f->signal = WTERMSIG(w->wait_status);
  else
    f->exit_code = WEXITSTATUS(w->wait_status);
  bagua__workers_error_message(a->mark_dir, w->local_rank, w->rank, f->error, sizeof(f->error));
}

/* Another member's failure in our round, or NULL: the job's failure key (which every member
 * follows), or a done record (which only the leader's snapshot holds). */
static const bagua__rdzv_done_t *peer_failure(const bagua__agent_t *a,
                                              const bagua__agent_snap_t *s) {
  if (!s->has_place || s->place.round != a->cur_round) return NULL;
  if (s->has_failure && s->failure.f.round == a->cur_round &&
      strcmp(s->failure.f.node, a->cfg->node_id) != 0)
    return &s->failure;
  for (size_t i = 0; i < s->ndone; i++)
    if (s->done[i].done.state == BAGUA__DONE_FAILED && strcmp(s->done[i].node, a->cfg->node_id))
      return &s->done[i].done;
  return NULL;
}

/* Writes the report in rounds/<N>/done/<node> for the leader and, for a failure, in the job's
 * failure key too, which is what the other members follow: one key to watch for every member,
 * instead of every member's done record. */
static int put_report(bagua__agent_t *a) {
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_DONE, a->cur_round, a->cfg->node_id);
  char *v = bagua__rdzv_done_encode(&a->report);
  int ok = v && bagua__etcd_put(a->etcd, key, v, strlen(v), 0, NULL, NULL) == BAGUA_OK;
  if (ok && a->report.state == BAGUA__DONE_FAILED) {
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_FAILURE, 0, NULL);
    ok = bagua__etcd_put(a->etcd, key, v, strlen(v), 0, NULL, NULL) == BAGUA_OK;
  }
  free(v);
  return ok;
}

static void report(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  if (!a->have_report) {
    const bagua__worker_t *w = bagua__workers_first_failure(&a->ws);
    const bagua__rdzv_done_t *peer = NULL;
    memset(&a->report, 0, sizeof(a->report));
    snprintf(a->report.f.node, sizeof(a->report.f.node), "%s", a->cfg->node_id);
    a->report.f.time_ms = bagua__wall_ms();
    if (w) {
      a->report.state = BAGUA__DONE_FAILED;
      a->report.kept = a->kept;
      fill_failure(a, w, &a->report.f);
      char when[40], what[1024];
      bagua__agent_format_time(w->exit_ms, when, sizeof(when));
      bagua__agent_failure_describe(&a->report.f, what, sizeof(what));
      bagua__agent_say("worker failed at %s on host %s: %s", when, a->host, what);
      a->have_report = 1;
      a->reported = put_report(a); /* the leader hears first, then the others are stopped */
      bagua__agent_stop_workers(a, SIGTERM);
    } else if (bagua__workers_all_succeeded(&a->ws)) {
      a->report.state = BAGUA__DONE_SUCCEEDED;
      a->report.kept = a->kept;
      a->have_report = 1;
      BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: round %lld: all %d workers exited 0",
                 (long long)a->cur_round, a->ws.n);
    } else if (a->ws.nrunning > 0 && (peer = peer_failure(a, s)) != NULL) {
      bagua__agent_say("rank %d on node %s failed: stopping this node's workers for a restart",
                       peer->f.rank, peer->f.node);
      a->report.state = BAGUA__DONE_STOPPED;
      a->have_report = 1;
      bagua__agent_stop_workers(a, SIGTERM);
    }
  }
  if (a->have_report && !a->reported) a->reported = put_report(a);
}

/*
 * Acknowledges a round that names this node under its current registration: writes
 * progress/<node> (on this node's lease) naming the round, with no worker yet. The leader drops
 * a member that neither acknowledges its round nor reports its end within
 * BAGUA_RDZV_ACK_TIMEOUT_MS (leader.c): a node record no agent holds. So it is written on the
 * first pass that sees the round, before the previous workers are stopped (their grace period)
 * and whatever the program is (a program that is not a libbagua one writes nothing else). A
 * write that fails is tried again on the next pass. Progress reports (progress.c) then replace
 * the record with the workers' own; they are not suppressed as unchanged after it.
 */
static void acknowledge(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  const bagua__rdzv_assign_t *P = &s->place;
  if (!s->has_place || a->acked_round == P->round || !a->lease) return;
  const bagua__rdzv_node_t *me = bagua__agent_snap_node(s, a->cfg->node_id);
  if (P->index < 0 || !me || me->lease != a->lease || (P->rev && me->create_rev != P->rev)) return;
  bagua__rdzv_progress_t rec;
  memset(&rec, 0, sizeof(rec));
  rec.round = P->round;
  rec.restart_count = P->restart_count;
  rec.time_ms = bagua__wall_ms();
  char *v = bagua__rdzv_progress_encode(&rec);
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_PROGRESS, 0, a->cfg->node_id);
  bagua_status_t st =
      v ? bagua__etcd_put(a->etcd, key, v, strlen(v), a->lease, NULL, NULL) : BAGUA_ERR_NO_MEMORY;
  free(v);
  if (st != BAGUA_OK) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: cannot acknowledge round %lld yet: %s",
               (long long)P->round, bagua_strerror(st));
    return;
  }
  a->acked_round = P->round;
  free(a->prog.sent);
  a->prog.sent = NULL;
}

void bagua__agent_follow(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  acknowledge(a, s);
  if (s->has_place && s->place.round != a->cur_round) start_round(a, &s->place, s);
  if (a->member) report(a, s);
}
