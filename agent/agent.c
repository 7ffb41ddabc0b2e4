/*
 * The agent's control loop and the job's start and end.
 *
 * One thread runs everything that decides. It waits (wait.c) until something happens: a
 * signal, a worker's exit, a liveness event, a watch event on the keys it follows, or one of
 * its own timers (the leader's windows, a retry). Then it brings its copy of those keys up to
 * date (mirror.h: events only, no read), takes a snapshot of the copy and acts on it
 * (register.c, ring_watch.c, follow.c, lead.c). An agent at rest sends etcd nothing but the
 * lease renewals of its keeper thread.
 *
 * What it follows: the leader the job's whole prefix; every other agent the job's few
 * singleton keys and its own records (follower_ranges), so a membership change costs each
 * follower one round record, not a thousand node records.
 *
 * Nothing waits without a bound: etcd calls carry the client's timeout, the stop of workers a
 * grace period, and an etcd outage longer than --rdzv-timeout ends the agent with status 3.
 * The outage is noticed by the keeper's failing renewals (within a third of the lease TTL),
 * or by a request of this thread that fails.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/params.h"
#include "common/time.h"
#include "marks.h"

/* The loop's wait when no timer is due: long, since every event wakes it anyway. */
#define IDLE_WAIT_MS 3600000
/* Metrics are rendered at most this often, and at least this often while served. */
#define METRICS_MS 1000

/* ---------------------------------------------------------------------------------------- */
/* What an agent follows                                                                    */
/* ---------------------------------------------------------------------------------------- */

/*
 * A follower's keys: config, failure and leader (one range up to nodes/), its own node,
 * progress and assignment records (its place in the round: not the round itself, whose member
 * list is O(N) bytes), secret and status (one range from "rounds0", just past every rounds/
 * key, to the end of the prefix), and its own clash/<id> (another agent refused its id: the
 * name sorts before "config", so other nodes' records stay out of the first range). Six ranges
 * over one watch stream.
 */
#define FOLLOWER_RANGES 6
static size_t follower_ranges(const bagua__agent_t *a, bagua__mirror_range_t *r) {
  char rounds[BAGUA_RDZV_KEY_MAX];
  memset(r, 0, FOLLOWER_RANGES * sizeof(*r));
  bagua__agent_key(a, r[0].key, sizeof(r[0].key), BAGUA__RDZV_KEY_CONFIG, 0, NULL);
  bagua__agent_key(a, r[0].end, sizeof(r[0].end), BAGUA__RDZV_KEY_NODES_DIR, 0, NULL);
  bagua__agent_key(a, r[1].key, sizeof(r[1].key), BAGUA__RDZV_KEY_NODE, 0, a->cfg->node_id);
  bagua__agent_key(a, r[2].key, sizeof(r[2].key), BAGUA__RDZV_KEY_PROGRESS, 0, a->cfg->node_id);
  bagua__agent_key(a, r[3].key, sizeof(r[3].key), BAGUA__RDZV_KEY_ASSIGN, 0, a->cfg->node_id);
  bagua__agent_key(a, rounds, sizeof(rounds), BAGUA__RDZV_KEY_ROUNDS_DIR, 0, NULL);
  bagua__rdzv_key_end(r[4].key, sizeof(r[4].key), rounds);
  bagua__rdzv_key_end(r[4].end, sizeof(r[4].end), a->prefix);
  bagua__agent_key(a, r[5].key, sizeof(r[5].key), BAGUA__RDZV_KEY_CLASH, 0, a->cfg->node_id);
  return FOLLOWER_RANGES;
}

static void follow_keys(bagua__agent_t *a, int full) {
  bagua__mirror_range_t r[FOLLOWER_RANGES];
  size_t n = 1;
  if (full) {
    memset(r, 0, sizeof(r[0]));
    snprintf(r[0].key, sizeof(r[0].key), "%s", a->prefix);
    r[0].prefix = 1;
  } else {
    n = follower_ranges(a, r);
  }
  bagua__mirror_set_ranges(a->mirror, r, n);
  a->mirror_full = full;
}

/* ---------------------------------------------------------------------------------------- */
/* The loop                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* Keeps a copy of the last valid round (lead.c restores a corrupt round key from it). */
static void remember_round(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  if (!s->has_round || s->round_mod_rev == a->seen_mod_rev) return;
  bagua__rdzv_round_t copy;
  if (bagua__rdzv_round_copy(&copy, &s->round) != 0) return;
  bagua__rdzv_round_clear(&a->seen);
  a->seen = copy;
  a->seen_mod_rev = s->round_mod_rev;
}

static int finish(bagua__agent_t *a, const bagua__rdzv_status_t *st) {
  bagua__agent_describe_end(a, st, "");
  bagua__agent_stop_workers(a, SIGTERM);
  return bagua__agent_job_exit_code(st);
}

/* Hands the metrics endpoint the current state (at most once a second: rendering is
 * proportional to the node's workers). */
static void publish_metrics(bagua__agent_t *a) {
  int64_t now = bagua__now_ms();
  if (!a->metrics || (a->metrics_at && now - a->metrics_at < METRICS_MS)) return;
  a->metrics_at = now;
  size_t len = 0;
  char *text = bagua__agent_metrics_render(a, &len);
  if (text) bagua__metrics_publish(a->metrics, text, len);
  free(text);
}

/* One pass over a snapshot; returns an exit status, or -1 to keep going. */
static int step(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  if (s->has_status && s->status.state != BAGUA__JOB_RUNNING) return finish(a, &s->status);
  remember_round(a, s);
  if (s->has_place) a->place = s->place;
  bagua__agent_ring_deaths(a, s);
  int rc = bagua__agent_check_registration(a, s);
  if (rc) return rc;
  /* Before the round is followed: a node whose id another agent was refused must not start
   * workers for a job it is about to leave. */
  if ((rc = bagua__agent_check_clash(a, s)) >= 0) return rc;
  bagua__agent_check_secret(a, s);
  bagua__agent_ring_follow(a, s);
  bagua__agent_check_leadership(a, s);
  bagua__agent_follow(a, s);
  a->wake_at = 0;
  /* The leader decides only from the job's whole prefix; the pass that made it the leader
   * switches what it follows, and the next one leads. */
  if (a->is_leader && s->full) bagua__agent_lead(a, s);
  return -1;
}

/* The wait until the next timer: the leader's, the ring's, progress, metrics. */
static int next_timeout(bagua__agent_t *a) {
  int64_t now = bagua__now_ms(), at = 0;
  int64_t ring = bagua__agent_ring_next_ms(a);
  if (a->wake_at) at = a->wake_at;
  if (ring && (!at || ring < at)) at = ring;
  /* A campaign or a leader check waiting for this node's tier (register.c). A check whose
   * time has passed waits for the next event: it failed, and retrying at once would spin. */
  const bagua__agent_leader_check_t *lc = &a->leader_check;
  if (lc->campaign_at && (!at || lc->campaign_at < at)) at = lc->campaign_at;
  if (lc->due_rev != lc->leader_mod_rev && lc->due_ms > now && (!at || lc->due_ms < at))
    at = lc->due_ms;
  if (a->is_leader != a->mirror_full) at = now;
  int timeout = IDLE_WAIT_MS;
  if (at) timeout = at <= now ? 0 : (at - now < IDLE_WAIT_MS ? (int)(at - now) : IDLE_WAIT_MS);
  int next_progress = bagua__agent_progress_tick(a, now);
  if (next_progress >= 0 && next_progress < timeout) timeout = next_progress;
  if (a->metrics && timeout > METRICS_MS) timeout = METRICS_MS;
  return timeout;
}

/* Since when etcd has not answered: the keeper's failing renewals, 0 while they succeed. */
static int64_t etcd_failing_since(const bagua__agent_t *a) {
  return a->keeper ? bagua__etcd_keeper_failing_since(a->keeper) : 0;
}

static int loop(bagua__agent_t *a) {
  const bagua__agent_config_t *cfg = a->cfg;
  int64_t down_since = 0;
  int retry_ms = 250;
  const int etcd_timeout_ms = bagua__etcd_timeout_ms(a->etcd);
  const int64_t rdzv_ms = (int64_t)cfg->rdzv_timeout_s * 1000;
  for (;;) {
    if (a->term_sig) return bagua__agent_leave(a);
    if (a->is_leader != a->mirror_full) follow_keys(a, a->is_leader);
    int64_t before = bagua__now_ms();
    int64_t failing = etcd_failing_since(a);
    if (!down_since && failing) {
      /* Renewals fail: whatever the copy holds may be stale, and writes would wait for their
       * timeouts. Reading the keys again is what ends the outage (below). */
      down_since = failing;
      bagua__mirror_invalidate(a->mirror);
      bagua__agent_say(
          "lost contact with etcd at %s (lease renewals fail); workers keep running, giving up "
          "after %d s (--rdzv-timeout)",
          cfg->endpoints, cfg->rdzv_timeout_s);
    }
    if (down_since) {
      /* During an outage every request fits in what is left of the rendezvous timeout, so
       * the agent gives up when it says it will, not one or more request timeouts later. */
      int64_t left = down_since + rdzv_ms - before;
      bagua__etcd_set_timeout_ms(a->etcd, (int)(left < 100               ? 100
                                                : left < etcd_timeout_ms ? left
                                                                         : etcd_timeout_ms));
    }
    bagua_status_t st = bagua__mirror_sync(a->mirror, a->etcd, NULL);
    int64_t now = bagua__now_ms();
    if (st != BAGUA_OK || (down_since && etcd_failing_since(a))) {
      /* Workers keep running through an etcd outage; the agent gives up only after the
       * rendezvous timeout, since it can neither report nor learn of rounds meanwhile. The
       * outage counts from the start of the first request that failed. */
      if (!down_since) {
        int64_t since = bagua__etcd_unreachable_since_ms(a->etcd);
        down_since = since > 0 && since < before ? since : before;
        bagua__agent_say(
            "lost contact with etcd at %s (%s); workers keep running, giving up "
            "after %d s (--rdzv-timeout)",
            cfg->endpoints, bagua_strerror(st), cfg->rdzv_timeout_s);
      } else if (now - down_since >= rdzv_ms) {
        bagua__agent_say("giving up: etcd at %s unreachable for %d s (--rdzv-timeout)",
                         cfg->endpoints, cfg->rdzv_timeout_s);
        /* The clean-up on the way out (revoking the lease) tries etcd once more, briefly:
         * the timeout has passed, the exit must not wait for another request timeout. */
        bagua__etcd_set_timeout_ms(a->etcd, 300);
        bagua__agent_stop_workers(a, SIGTERM);
        return BAGUA_AGENT_EXIT_RDZV;
      }
      /* Back off (each failed request logs a warning in the client), but not so far that
       * recovery goes unnoticed for long, nor past the rendezvous timeout. */
      int64_t left = down_since + rdzv_ms - bagua__now_ms();
      bagua__agent_wait(a, left < retry_ms ? (int)(left > 0 ? left : 0) : retry_ms);
      if (retry_ms < 2000) retry_ms *= 2;
      continue;
    }
    retry_ms = 250;
    if (down_since) {
      bagua__etcd_set_timeout_ms(a->etcd, etcd_timeout_ms);
      bagua__agent_say("etcd at %s answers again after %lld ms", cfg->endpoints,
                       (long long)(now - down_since));
      down_since = 0;
    }
    size_t n = 0, nrounds = 0;
    bagua__agent_entry_t *e = bagua__mirror_entries(a->mirror, &n);
    const int64_t *rounds = bagua__mirror_rounds(a->mirror, &nrounds);
    bagua__agent_snap_t s;
    int rc = -1;
    if (bagua__agent_snap_build(a->prefix, cfg->node_id, e, n, rounds, nrounds, a->mirror_full,
                                &s) == 0) {
      s.revision = bagua__mirror_revision(a->mirror);
      rc = step(a, &s);
      bagua__agent_snap_clear(&s);
    } else {
      a->wake_at = bagua__now_ms() + 100; /* out of memory: try again shortly */
    }
    if (rc >= 0) return rc;
    publish_metrics(a);
    bagua__agent_wait(a, next_timeout(a));
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Start and end                                                                             */
/* ---------------------------------------------------------------------------------------- */

int bagua__agent_run(bagua__agent_config_t *cfg, int sigfd, int endfd) {
  bagua__agent_t a;
  memset(&a, 0, sizeof(a));
  a.cfg = cfg;
  a.sigfd = sigfd;
  a.wake_fd = -1;
  if (gethostname(a.host, sizeof(a.host) - 1) != 0) snprintf(a.host, sizeof(a.host), "unknown");
  bagua__rdzv_key(a.prefix, sizeof(a.prefix), cfg->job_id, BAGUA__RDZV_KEY_PREFIX, 0, NULL, 0);
  /* A BAGUA_BOOTSTRAP the user exported wins; otherwise workers bootstrap through etcd. */
  if (!bagua__param_is_set(BAGUA_P_BOOTSTRAP)) {
    size_t off = (size_t)snprintf(a.bootstrap, sizeof(a.bootstrap), "etcd://");
    for (const char *p = cfg->endpoints; *p && off + 1 < sizeof(a.bootstrap);) {
      if (strncmp(p, "http://", 7) == 0) p += 7;
      a.bootstrap[off++] = *p++;
    }
    a.bootstrap[off] = '\0';
  }
  int rc = BAGUA_AGENT_EXIT_RDZV, looping = 0;
  bagua__agent_probe_t probe;
  memset(&probe, 0, sizeof(probe));
  a.prog.recovery_ms = -1;
  /* The metrics port is checked first: a port in use is a usage error, and the node must not
   * join the job only to leave it again. */
  if (cfg->metrics_port > 0) {
    char err[512];
    if (bagua__metrics_start(cfg->metrics_addr, cfg->metrics_port, &a.metrics, err, sizeof(err)) !=
        0) {
      bagua__agent_say("%s", err);
      rc = BAGUA_AGENT_EXIT_USAGE;
      goto out;
    }
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: metrics at http://%s:%d/metrics", cfg->metrics_addr,
               bagua__metrics_port(a.metrics));
  }
  /* Auto mode learns from marks in a private directory which workers run the elastic API; the
   * workers' progress files and their TORCHELASTIC_ERROR_FILEs live there too. Without one
   * auto mode can only restart the workers, they report no progress, and a failure is
   * reported without the worker's own message. */
  if (bagua__marks_create(cfg->node_id, a.mark_dir, sizeof(a.mark_dir)) != 0) {
    int e = errno;
    bagua__agent_say(
        "cannot create the agent's private directory under %s: %s; the workers report no "
        "progress and get no TORCHELASTIC_ERROR_FILE%s",
        bagua__marks_parent(), strerror(e),
        cfg->elastic_mode == BAGUA__ELASTIC_AUTO
            ? ", and --elastic-mode auto restarts them on every new round"
            : "");
  }
  /* torchrun's warning, once per agent start (cli.c decided). */
  if (cfg->omp_default)
    bagua__agent_say(
        "setting OMP_NUM_THREADS=1 for each of this node's %d workers (the variable is not set), "
        "as torchrun does, to avoid overloading the node; tune it for your program: export "
        "OMP_NUM_THREADS=N before starting the agent (bagua-launch: -x OMP_NUM_THREADS=N)",
        cfg->nproc);
  a.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (a.wake_fd < 0) {
    bagua__agent_say("eventfd failed: %s", strerror(errno));
    rc = 1;
    goto out;
  }
  a.mirror = bagua__mirror_create(a.prefix, a.wake_fd);
  if (!a.mirror || bagua__outpump_start(&a.out) != BAGUA_OK ||
      bagua__etcd_create(cfg->endpoints, cfg->etcd_timeout_ms, &a.etcd) != BAGUA_OK) {
    bagua__agent_say("cannot start: %s", a.mirror ? bagua_last_error() : "out of memory");
    rc = 1;
    goto out;
  }
  bagua__etcd_set_interrupt_fd(a.etcd, endfd);
  bagua__agent_detect_addr(&a);
  if ((rc = bagua__agent_first_contact(&a, &probe)) >= 0) goto out;
  if ((rc = bagua__agent_handle_stale(&a, &probe)) >= 0) goto out;
  if ((rc = bagua__agent_check_jobcfg(&a)) >= 0) goto out;
  if ((rc = bagua__agent_setup_secret(&a)) >= 0) goto out;
  /* The liveness listener binds the address this node advertises (nothing listens on a
   * wildcard address) and authenticates with the job secret, so both must be known first;
   * the node record that registration writes names its port. */
  a.live = bagua__liveness_create_on(cfg->node_id, cfg->node_addr);
  if (!a.live)
    bagua__agent_say(
        "cannot listen for liveness connections on %s: %s; the other nodes will notice this "
        "node's death only when its lease expires",
        cfg->node_addr, strerror(errno));
  else if (bagua__liveness_set_secret(a.live, a.secret) != 0)
    bagua__agent_say("the liveness channel cannot use the job secret: it runs unauthenticated");
  rc = bagua__agent_register(&a);
  if (rc != 0) {
    if (a.term_sig) rc = bagua__agent_interrupted_code(a.term_sig);
    goto out;
  }
  BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: node %s (%s, %d workers) joined job %s at %s",
             cfg->node_id, cfg->node_addr, cfg->nproc, cfg->job_id, cfg->endpoints);
  follow_keys(&a, 0);
  looping = 1;
  rc = loop(&a);
out:
  /* A start-up step that failed because a pending signal cut its request short exits as the
   * signal asks, not with that step's error. (The loop handles signals itself.) */
  if (!looping && rc != 0 && rc != BAGUA_AGENT_EXIT_USAGE && a.wake_fd >= 0) {
    if (!a.term_sig) bagua__agent_wait(&a, 0);
    if (a.term_sig) rc = bagua__agent_interrupted_code(a.term_sig);
  }
  bagua__agent_probe_clear(&probe);
  bagua__mirror_destroy(a.mirror);
  if (a.ws.nrunning > 0) bagua__agent_stop_workers(&a, SIGKILL);
  if (a.lease) bagua__agent_deregister(&a);
  /* Only after deregistering: the watchers take the end of these connections for a death
   * unless the registration is gone and the goodbye says so. */
  bagua__liveness_destroy(a.live);
  a.live = NULL;
  bagua__etcd_keeper_stop(a.keeper);
  if (a.out) {
    bagua__outpump_drain(a.out, 2000);
    bagua__outpump_stop(a.out);
  }
  bagua__workers_clear(&a.ws);
  bagua__marks_remove(a.mark_dir);
  bagua__metrics_stop(a.metrics);
  bagua__agent_progress_free(&a.prog);
  bagua__etcd_destroy(a.etcd);
  if (a.wake_fd >= 0) close(a.wake_fd);
  free(a.pfd);
  bagua__rdzv_round_clear(&a.seen);
  bagua__leader_state_clear(&a.lead);
  explicit_bzero(a.secret, sizeof(a.secret));
  return rc;
}
