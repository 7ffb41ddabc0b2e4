/*
 * The agent's control loop and the job's start and end.
 *
 * One thread runs everything that decides: it waits (poll) on a signalfd (worker exits and
 * the signals the agent handles), an eventfd the etcd watch pokes, and a timeout (the
 * leader's windows, and a 1 s safety tick); then it reads the job's keys in one snapshot and
 * acts on them (register.c, follow.c, lead.c). Nothing waits without a bound: etcd calls
 * carry the client's timeout, the stop of workers a grace period, and an etcd outage longer
 * than --rdzv-timeout ends the agent with status 3.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_internal.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"
#include "marks.h"

void bagua__agent_format_time(int64_t wall_ms, char *out, size_t len) {
  time_t t = (time_t)(wall_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char base[32];
  strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, len, "%s.%03dZ", base, (int)(wall_ms % 1000));
}

/* ---------------------------------------------------------------------------------------- */
/* Waiting                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void reap(bagua__agent_t *a) {
  int status;
  pid_t pid;
  /* Helpers a worker forked and left behind are reaped here too, and ignored. */
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) bagua__workers_on_exit(&a->ws, pid, status);
}

/* The poll array: the signalfd, the eventfd, then the liveness channel's descriptors. Returns
 * the array and sets *nlive (0 when there is no channel, or no memory for it this time). */
static struct pollfd *poll_set(bagua__agent_t *a, struct pollfd base[2], size_t *nlive) {
  size_t nl = a->live ? bagua__liveness_nfds(a->live) : 0;
  struct pollfd *pfd = base;
  if (nl > 0 && a->pfd_cap < 2 + nl) {
    struct pollfd *p = realloc(a->pfd, (2 + nl) * sizeof(*p));
    if (p) {
      a->pfd = p;
      a->pfd_cap = 2 + nl;
    }
  }
  if (nl > 0 && a->pfd_cap >= 2 + nl) {
    pfd = a->pfd;
    bagua__liveness_fill(a->live, pfd + 2);
  } else {
    nl = 0;
  }
  pfd[0] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
  pfd[1] = (struct pollfd){.fd = a->wake_fd, .events = POLLIN};
  *nlive = nl;
  return pfd;
}

int bagua__agent_wait(void *arg, int timeout_ms) {
  bagua__agent_t *a = arg;
  struct pollfd base[2];
  size_t nlive = 0;
  struct pollfd *pfd = poll_set(a, base, &nlive);
  int rc = poll(pfd, 2 + nlive, timeout_ms < 0 ? 0 : timeout_ms);
  /* A liveness connection that ended is queued as a death; the caller's loop reads a fresh
   * snapshot right after this wait returns and acts on it (bagua__agent_revoke_dead). */
  if (rc > 0 && nlive > 0) bagua__liveness_handle(a->live, pfd + 2, nlive);
  if (rc > 0 && pfd[1].revents) {
    uint64_t v;
    ssize_t r = read(a->wake_fd, &v, sizeof(v));
    (void)r;
  }
  if (rc > 0 && pfd[0].revents) {
    struct signalfd_siginfo si;
    while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      int sig = (int)si.ssi_signo;
      if (sig == SIGCHLD) continue;
      if (sig == SIGUSR1 || sig == SIGUSR2) {
        bagua__workers_signal(&a->ws, sig);
        continue;
      }
      if (!a->term_sig)
        a->term_sig = sig;
      else
        a->term_again = 1;
    }
  }
  reap(a);
  return a->term_again;
}

void bagua__agent_stop_workers(bagua__agent_t *a, int sig) {
  bagua__workers_stop(&a->ws, sig, a->term_again ? 0 : a->cfg->grace_ms, bagua__agent_wait, a);
}

/* ---------------------------------------------------------------------------------------- */
/* Start: first contact, state left by an earlier run, job-wide settings                    */
/* ---------------------------------------------------------------------------------------- */

static int interrupted_code(int sig) {
  return 128 + sig;
}

static int first_contact(bagua__agent_t *a, bagua__agent_snap_t *s) {
  const bagua__agent_config_t *cfg = a->cfg;
  int64_t t0 = bagua__now_ms(), deadline = t0 + (int64_t)cfg->rdzv_timeout_s * 1000;
  int backoff = 250, said = 0;
  for (;;) {
    bagua_status_t st = bagua__agent_snap_read(a->etcd, a->prefix, s);
    if (st == BAGUA_OK) return -1;
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
    if (a->term_sig) return interrupted_code(a->term_sig);
    if (backoff < 4000) backoff *= 2;
  }
}

static int job_exit_code(const bagua__agent_status_t *st) {
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

static void describe_end(const bagua__agent_t *a, const bagua__agent_status_t *st,
                         const char *how) {
  char when[40];
  bagua__agent_format_time(st->time_ms, when, sizeof(when));
  if (st->state == BAGUA__JOB_SUCCEEDED) {
    bagua__agent_say("job %s %ssucceeded at %s (round %lld)", a->cfg->job_id, how, when,
                     (long long)st->round);
  } else if (st->state == BAGUA__JOB_FAILED && st->has_root) {
    char what[512], at[40];
    bagua__agent_failure_describe(&st->root, what, sizeof(what));
    bagua__agent_format_time(st->root.time_ms, at, sizeof(at));
    bagua__agent_say("job %s %sfailed at %s: root cause: %s at %s; %s", a->cfg->job_id, how, when,
                     what, at, st->message);
  } else {
    bagua__agent_say("job %s %s%s at %s: %s", a->cfg->job_id, how,
                     bagua__agent_job_state_name(st->state), when, st->message);
  }
}

/*
 * State of an earlier run under the same job id (complaint 4 in reference/elastic.md: a
 * restarted job that reads an old closed rendezvous fails in a loop). The rule:
 *  - a terminal status while agents are still registered is this job ending: a late agent
 *    exits with the job's result instead of starting it again;
 *  - any state with no agent registered (a terminal status, or "running" left by agents that
 *    were all killed) is an earlier run: it is deleted and the job starts afresh.
 * Of several agents starting at once exactly one deletes (a compare-and-delete on the key it
 * saw decides); registrations the others made meanwhile are restored by their loops.
 */
static int handle_stale(bagua__agent_t *a, bagua__agent_snap_t *s) {
  int live = s->nnodes > 0;
  int terminal = s->has_status && s->status.state != BAGUA__JOB_RUNNING;
  if (terminal && live) {
    describe_end(a, &s->status, "already ");
    bagua__agent_say(
        "not starting job %s again: %zu agent(s) of it are still registered; use "
        "another --job-id for a new run",
        a->cfg->job_id, s->nnodes);
    return job_exit_code(&s->status);
  }
  if (live || (!s->has_status && !s->has_round && !s->has_jobcfg && s->nold_rounds == 0)) return -1;
  char when[40] = "an unknown time";
  if (s->has_status) bagua__agent_format_time(s->status.time_ms, when, sizeof(when));
  bagua__agent_say(
      "clearing the state an earlier run of job %s left in etcd (status %s at %s, "
      "no agent registered); starting afresh",
      a->cfg->job_id, s->has_status ? bagua__agent_job_state_name(s->status.state) : "none", when);
  char key[512];
  int deleted = 1;
  if (s->has_status) {
    bagua__agent_key(a, key, sizeof(key), "status");
    if (bagua__etcd_cad(a->etcd, key, s->status_mod_rev, &deleted) != BAGUA_OK) deleted = 0;
  } else if (s->has_round) {
    bagua__agent_key(a, key, sizeof(key), "round");
    if (bagua__etcd_cad(a->etcd, key, s->round_mod_rev, &deleted) != BAGUA_OK) deleted = 0;
  }
  if (deleted) bagua__etcd_delete_prefix(a->etcd, a->prefix, NULL);
  bagua__agent_snap_clear(s);
  return first_contact(a, s);
}

/* The settings that must agree across the job's agents are fixed by the first one. */
static int check_jobcfg(bagua__agent_t *a) {
  const bagua__agent_config_t *cfg = a->cfg;
  bagua__agent_jobcfg_t mine = {cfg->nnodes_min, cfg->nnodes_max, cfg->max_restarts, ""};
  snprintf(mine.node, sizeof(mine.node), "%s", cfg->node_id);
  char key[512];
  bagua__agent_key(a, key, sizeof(key), "config");
  char *v = bagua__agent_jobcfg_encode(&mine);
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
  bagua__agent_jobcfg_t theirs;
  if (!created && bagua__agent_jobcfg_decode(cur.value, &theirs) == 0 &&
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

/* ---------------------------------------------------------------------------------------- */
/* The loop                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static int on_watch(void *arg, const bagua__etcd_event_t *ev) {
  bagua__agent_t *a = arg;
  if (ev->type == BAGUA__ETCD_EVENT_FAILED) __atomic_store_n(&a->watch_failed, 1, __ATOMIC_RELEASE);
  /* Workers' bootstrap records (one per rank and round) concern no agent decision: waking
   * every agent for each of them would cost a range request per rank per agent. */
  if (ev->key && strstr(ev->key, "/bootstrap/")) return 0;
  uint64_t one = 1;
  ssize_t w = write(a->wake_fd, &one, sizeof(one));
  (void)w;
  return 0;
}

static bagua_status_t start_watch(bagua__agent_t *a) {
  bagua__etcd_watch_opts_t opts = {.prefix = 1, .start_revision = 0, .max_outage_ms = 0};
  return bagua__etcd_watch_start(a->etcd, a->prefix, &opts, on_watch, a, &a->watch);
}

static int finish(bagua__agent_t *a, const bagua__agent_status_t *st) {
  describe_end(a, st, "");
  bagua__agent_stop_workers(a, SIGTERM);
  return job_exit_code(st);
}

/* One pass over a snapshot; returns an exit status, or -1 to keep going. */
static int step(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  if (s->has_status && s->status.state != BAGUA__JOB_RUNNING) return finish(a, &s->status);
  /* First, while every death it holds was found before `s` was read: a node that left
   * normally revoked its lease before its sockets closed, so `s` no longer shows it. */
  if (a->live) bagua__agent_revoke_dead(a, s);
  int rc = bagua__agent_check_registration(a, s);
  if (rc) return rc;
  if (a->live) bagua__liveness_update(a->live, s, bagua__now_ms());
  bagua__agent_check_leadership(a, s);
  bagua__agent_follow(a, s);
  a->wake_at = 0;
  if (a->is_leader) bagua__agent_lead(a, s);
  return -1;
}

static int loop(bagua__agent_t *a) {
  const bagua__agent_config_t *cfg = a->cfg;
  int64_t down_since = 0;
  int retry_ms = 250;
  for (;;) {
    if (a->term_sig) return bagua__agent_leave(a);
    if (__atomic_load_n(&a->watch_failed, __ATOMIC_ACQUIRE)) {
      bagua__etcd_watch_stop(a->watch);
      a->watch = NULL;
      __atomic_store_n(&a->watch_failed, 0, __ATOMIC_RELEASE);
    }
    if (!a->watch && start_watch(a) != BAGUA_OK) a->watch = NULL;
    bagua__agent_snap_t s;
    bagua_status_t st = bagua__agent_snap_read(a->etcd, a->prefix, &s);
    int64_t now = bagua__now_ms();
    if (st != BAGUA_OK) {
      /* Workers keep running through an etcd outage; the agent gives up only after the
       * rendezvous timeout, since it can neither report nor learn of rounds meanwhile. */
      if (!down_since) {
        down_since = now;
        bagua__agent_say(
            "lost contact with etcd at %s (%s); workers keep running, giving up "
            "after %d s (--rdzv-timeout)",
            cfg->endpoints, bagua_strerror(st), cfg->rdzv_timeout_s);
      } else if (now - down_since > (int64_t)cfg->rdzv_timeout_s * 1000) {
        bagua__agent_say("giving up: etcd at %s unreachable for %d s (--rdzv-timeout)",
                         cfg->endpoints, cfg->rdzv_timeout_s);
        bagua__agent_stop_workers(a, SIGTERM);
        return BAGUA_AGENT_EXIT_RDZV;
      }
      /* Back off (each failed request logs a warning in the client), but not so far that
       * recovery goes unnoticed for long. */
      bagua__agent_wait(a, retry_ms);
      if (retry_ms < 2000) retry_ms *= 2;
      continue;
    }
    retry_ms = 250;
    if (down_since) {
      bagua__agent_say("etcd at %s answers again after %lld ms", cfg->endpoints,
                       (long long)(now - down_since));
      down_since = 0;
    }
    int rc = step(a, &s);
    bagua__agent_snap_clear(&s);
    if (rc >= 0) return rc;
    int timeout = 1000;
    if (a->wake_at) {
      int64_t left = a->wake_at - bagua__now_ms();
      if (left < timeout) timeout = left < 0 ? 0 : (int)left;
    }
    bagua__agent_wait(a, timeout);
  }
}

int bagua__agent_run(bagua__agent_config_t *cfg, int sigfd) {
  bagua__agent_t a;
  memset(&a, 0, sizeof(a));
  a.cfg = cfg;
  a.sigfd = sigfd;
  a.wake_fd = -1;
  if (gethostname(a.host, sizeof(a.host) - 1) != 0) snprintf(a.host, sizeof(a.host), "unknown");
  snprintf(a.prefix, sizeof(a.prefix), "/bagua/%s/", cfg->job_id);
  /* A BAGUA_BOOTSTRAP the user exported wins; otherwise workers bootstrap through etcd. */
  if (!bagua__param_is_set(BAGUA_P_BOOTSTRAP)) {
    size_t off = (size_t)snprintf(a.bootstrap, sizeof(a.bootstrap), "etcd://");
    for (const char *p = cfg->endpoints; *p && off + 1 < sizeof(a.bootstrap);) {
      if (strncmp(p, "http://", 7) == 0) p += 7;
      a.bootstrap[off++] = *p++;
    }
    a.bootstrap[off] = '\0';
  }
  int rc = BAGUA_AGENT_EXIT_RDZV;
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
  /* Auto mode learns from marks in a private directory which workers run the elastic API;
   * without one it can only restart them. */
  if (cfg->elastic_mode == BAGUA__ELASTIC_AUTO &&
      bagua__marks_create(cfg->node_id, a.mark_dir, sizeof(a.mark_dir)) != 0) {
    int e = errno;
    bagua__agent_say(
        "cannot create a directory for the workers' elastic marks under %s: %s; "
        "--elastic-mode auto restarts the workers on every new round",
        bagua__marks_parent(), strerror(e));
  }
  a.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (a.wake_fd < 0) {
    bagua__agent_say("eventfd failed: %s", strerror(errno));
    rc = 1;
    goto out;
  }
  a.live = bagua__liveness_create(cfg->node_id);
  if (!a.live)
    bagua__agent_say(
        "cannot listen for liveness connections: %s; the other nodes will notice this node's "
        "death only when its lease expires",
        strerror(errno));
  if (bagua__outpump_start(&a.out) != BAGUA_OK ||
      bagua__etcd_create(cfg->endpoints, cfg->etcd_timeout_ms, &a.etcd) != BAGUA_OK) {
    bagua__agent_say("cannot start: %s", bagua_last_error());
    rc = 1;
    goto out;
  }
  bagua__agent_detect_addr(&a);
  if ((rc = first_contact(&a, &s)) >= 0) goto out;
  if ((rc = handle_stale(&a, &s)) >= 0) goto out;
  if ((rc = check_jobcfg(&a)) >= 0) goto out;
  rc = bagua__agent_register(&a);
  if (rc != 0) {
    if (a.term_sig) rc = interrupted_code(a.term_sig);
    goto out;
  }
  BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: node %s (%s, %d workers) joined job %s at %s",
             cfg->node_id, cfg->node_addr, cfg->nproc, cfg->job_id, cfg->endpoints);
  if (start_watch(&a) != BAGUA_OK) a.watch = NULL; /* the loop retries; the 1 s tick covers */
  rc = loop(&a);
out:
  bagua__agent_snap_clear(&s);
  bagua__etcd_watch_stop(a.watch);
  if (a.ws.nrunning > 0) bagua__agent_stop_workers(&a, SIGKILL);
  if (a.lease) bagua__agent_deregister(&a);
  /* Only after deregistering: the others take the end of these connections for a death
   * unless the registration is already gone. */
  bagua__liveness_destroy(a.live);
  a.live = NULL;
  bagua__etcd_keeper_stop(a.keeper);
  if (a.out) {
    bagua__outpump_drain(a.out, 2000);
    bagua__outpump_stop(a.out);
  }
  bagua__workers_clear(&a.ws);
  bagua__marks_remove(a.mark_dir);
  bagua__etcd_destroy(a.etcd);
  if (a.wake_fd >= 0) close(a.wake_fd);
  free(a.pfd);
  return rc;
}
