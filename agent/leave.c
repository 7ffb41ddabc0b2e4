/*
 * Leaving the job on SIGINT, SIGTERM, SIGHUP or SIGQUIT, without ending it for the others.
 *
 * This node never reports its last round, so whatever its departure does to the other nodes'
 * workers is not counted as a worker failure: the leader waits for every member's report or
 * its departure, and a departure is a membership change.
 *
 * Workers that do not follow rounds by themselves (restart mode, or auto mode when one of them
 * did not announce the elastic API) get the signal at once; then the lease is revoked, so the
 * others see this node leave without waiting for its lease to expire.
 *
 * Elastic workers (in-process mode, or auto mode when all of them announced the elastic API)
 * are left running while the lease is revoked first: the leader then forms a round without
 * this node after its settle window, the workers see that their node is not a member of it and
 * leave by themselves (the program exits once bagua_elastic_rebuild() says so), and the other
 * nodes' workers move to that round without being restarted. Only workers still running after
 * the grace period get the signal, and SIGKILL one more grace period later. The wait ends early
 * when no such round can come (fewer than MIN other nodes registered, or the job has ended),
 * and a second signal skips it.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "agent_internal.h"
#include "common/sock.h"
#include "common/time.h"

/* etcd is asked at most this often while waiting (every watch event wakes the wait). */
#define LOOK_MS 100

/*
 * Whether a round without this node can still come: that needs MIN other registered nodes and
 * a running job. Returns 0 when it can, 1 when it cannot (why in `buf`), and -1 when etcd did
 * not answer (the caller stops asking: each request may take the etcd timeout).
 */
static int no_round_coming(bagua__agent_t *a, char *buf, size_t len) {
  /* One request: the status, and how many nodes are registered besides this one (counted by
   * etcd: no record is sent). */
  char status[BAGUA_RDZV_KEY_MAX], nodes[BAGUA_RDZV_KEY_MAX], mine[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, status, sizeof(status), BAGUA__RDZV_KEY_STATUS, 0, NULL);
  bagua__agent_key(a, nodes, sizeof(nodes), BAGUA__RDZV_KEY_NODES_DIR, 0, NULL);
  bagua__agent_key(a, mine, sizeof(mine), BAGUA__RDZV_KEY_NODE, 0, a->cfg->node_id);
  bagua__etcd_read_t rd[3] = {{.span = {status, NULL, 0}},
                              {.span = {nodes, NULL, 1}, .count_only = 1},
                              {.span = {mine, NULL, 0}, .count_only = 1}};
  if (bagua__etcd_read_ranges(a->etcd, rd, 3, NULL) != BAGUA_OK) return -1;
  int rc = 0;
  int64_t others = rd[1].count - rd[2].count;
  bagua__rdzv_status_t st;
  if (rd[0].n == 1 && bagua__rdzv_status_decode(rd[0].kvs[0].value, &st, NULL, 0) == 0 &&
      st.state != BAGUA__JOB_RUNNING) {
    snprintf(buf, len, "job %s has ended (%s)", a->cfg->job_id,
             bagua__rdzv_job_state_name(st.state));
    rc = 1;
  } else if (others < (int64_t)a->cfg->nnodes_min) {
    snprintf(buf, len,
             "%lld other node(s) registered, fewer than the %d needed (--nnodes %d:%d): no round "
             "without this node will come",
             (long long)others, a->cfg->nnodes_min, a->cfg->nnodes_min, a->cfg->nnodes_max);
    rc = 1;
  }
  bagua__etcd_reads_clear(rd, 3);
  return rc;
}

/* Waits up to the grace period for the workers to exit by themselves; returns NULL when they
 * did, else why the wait ended. */
static const char *wait_self_exit(bagua__agent_t *a, int64_t t0, char *buf, size_t len) {
  int64_t deadline = t0 + a->cfg->grace_ms, next_look = 0;
  while (a->ws.nrunning > 0) {
    int64_t now = bagua__now_ms();
    if (now >= deadline) {
      snprintf(buf, len, "the grace period of %d ms is over (--grace-ms)", a->cfg->grace_ms);
      return buf;
    }
    if (now >= next_look) {
      int rc = no_round_coming(a, buf, len);
      if (rc > 0) return buf;
      next_look = rc < 0 ? deadline : now + LOOK_MS;
    }
    int64_t left = deadline - now;
    if (bagua__agent_wait(a, (int)(left < LOOK_MS ? left : LOOK_MS)))
      return "a second signal skips the wait";
  }
  return NULL;
}

int bagua__agent_leave(bagua__agent_t *a) {
  int sig = a->term_sig;
  const char *name = sigabbrev_np(sig);
  bagua__agent_say("received SIG%s: leaving job %s%s", name ? name : "?", a->cfg->job_id,
                   a->cfg->nnodes_max > 1 ? " (the other nodes carry on without this one)" : "");
  int n = a->ws.nrunning;
  if (n == 0 || a->term_again || !bagua__agent_workers_elastic(a, NULL, 0)) {
    a->ws.stopping = 1;
    bagua__workers_signal(&a->ws, sig);
    bagua__agent_deregister(a);
    bagua__agent_stop_workers(a, 0);
    return 128 + sig;
  }
  int64_t t0 = bagua__now_ms();
  /* Exits from now on are this departure's doing, not failures. */
  a->ws.stopping = 1;
  bagua__agent_deregister(a);
  bagua__agent_say(
      "deregistered first: the %d elastic worker(s) get up to %d ms to leave round %lld by "
      "themselves",
      n, a->cfg->grace_ms, (long long)a->cur_round);
  char buf[256];
  const char *why = wait_self_exit(a, t0, buf, sizeof(buf));
  long long took = (long long)(bagua__now_ms() - t0);
  if (!why) {
    bagua__agent_say("all %d worker(s) left the job by themselves %lld ms after SIG%s", n, took,
                     name ? name : "?");
    return 128 + sig;
  }
  bagua__agent_say("%d of %d worker(s) still running after %lld ms (%s): sending SIG%s",
                   a->ws.nrunning, n, took, why, name ? name : "?");
  bagua__agent_stop_workers(a, sig);
  return 128 + sig;
}
