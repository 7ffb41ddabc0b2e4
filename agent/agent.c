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
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
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
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    if (!bagua__workers_on_exit(&a->ws, pid, status)) continue;
    /* Counted for the metrics endpoint: stopped by the agent, succeeded, or failed. */
    int stopped = a->ws.stopping;
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    a->exits[stopped ? 2 : ok ? 0 : 1]++;
  }
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
    if (st == BAGUA_ERR_ABORTED) { /* a signal that ends the agent is pending */
      bagua__agent_wait(a, 0);
      if (a->term_sig) return interrupted_code(a->term_sig);
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
    if (a->term_sig) return interrupted_code(a->term_sig);
    if (backoff < 4000) backoff *= 2;
  }
}

static int job_exit_code(const bagua__rdzv_status_t *st) {
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

static void describe_end(const bagua__agent_t *a, const bagua__rdzv_status_t *st, const char *how) {
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
  /* A corrupt round or status counts as state too: a new run starts without it. */
  /* Not the config or the secret alone: the first agent of a new run writes both before it
   * registers, and a second agent starting in that window must not take them for an earlier
   * run's leftovers. */
  int any = s->has_status || s->status_bad || s->has_round || s->round_bad || s->nold_rounds > 0;
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
  } else if (s->round_mod_rev) {
    bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_ROUND, 0, NULL);
    if (bagua__etcd_cad(a->etcd, key, s->round_mod_rev, &deleted) != BAGUA_OK) deleted = 0;
  }
  if (deleted) bagua__etcd_delete_prefix(a->etcd, a->prefix, NULL);
  bagua__agent_snap_clear(s);
  return first_contact(a, s);
}

/* The settings that must agree across the job's agents are fixed by the first one. */
static int check_jobcfg(bagua__agent_t *a) {
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

/* ---------------------------------------------------------------------------------------- */
/* The job secret                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* Whether this agent was given the job's secret (--secret-file, or BAGUA_JOB_SECRET in its
 * environment, as a launcher passes it): then it never takes another one. */
static int secret_given(const bagua__agent_t *a) {
  return a->cfg->secret[0] != '\0';
}

/*
 * The job's secret, before any worker starts: the first agent of the job writes one (the one
 * it was given, cfg->secret; else 32 fresh random bytes) with a
 * put-if-absent transaction; every agent then uses the one etcd holds (an agent that was
 * given one refuses another). The workers get it in their environment only (never on a
 * command line). Returns -1 to go on, or an exit status.
 */
static int setup_secret(bagua__agent_t *a) {
  char mine[BAGUA_RDZV_SECRET_HEX + 1], key[BAGUA_RDZV_KEY_MAX], why[160];
  int from_file = a->cfg->secret_file && a->cfg->secret_file[0];
  int rc = -1;
  /* A given secret was read and checked with the command line (cli.c), before this agent
   * wrote anything to etcd. */
  if (secret_given(a)) {
    memcpy(mine, a->cfg->secret, sizeof(mine));
  } else if (bagua__rdzv_secret_generate(mine) != BAGUA_OK) {
    bagua__agent_say("cannot generate the job secret: %s", bagua_last_error());
    return 1;
  }
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_SECRET, 0, NULL);
  int created = 0;
  bagua__etcd_kv_t cur;
  memset(&cur, 0, sizeof(cur));
  bagua_status_t st = bagua__etcd_create_if_absent(a->etcd, key, mine, BAGUA_RDZV_SECRET_HEX, 0,
                                                   &created, NULL, &cur);
  if (st != BAGUA_OK) {
    bagua__agent_say("cannot write %s in etcd at %s: %s", key, a->cfg->endpoints,
                     bagua_strerror(st));
    rc = BAGUA_AGENT_EXIT_RDZV;
  } else if (created) {
    memcpy(a->secret, mine, sizeof(mine));
  } else if (bagua__rdzv_secret_decode(cur.value, cur.value_len, a->secret, why, sizeof(why)) !=
             0) {
    /* Ours for now: agents whose workers hold the job's real secret write it back, and this
     * agent adopts it before it starts any worker (check_secret). */
    bagua__rdzv_reject(key, cur.mod_revision, "a job secret", why);
    memcpy(a->secret, mine, sizeof(mine));
  } else if (secret_given(a) && strcmp(a->secret, mine) != 0) {
    bagua__agent_say("the secret in %s%s is not job %s's secret (stored in %s)",
                     from_file ? "--secret-file " : "BAGUA_JOB_SECRET",
                     from_file ? a->cfg->secret_file : "", a->cfg->job_id, key);
    a->secret[0] = '\0';
    rc = BAGUA_AGENT_EXIT_USAGE;
  }
  bagua__etcd_kv_clear(&cur);
  explicit_bzero(mine, sizeof(mine));
  /* The workers get it in their environment from workers.c (build_env), never from ours. */
  return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Snapshot checks                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* Adopts `secret` as the job's: for this agent and for the workers it starts from now on
 * (workers.c puts a->secret in their environment). */
static void adopt_secret(bagua__agent_t *a, const char *secret) {
  snprintf(a->secret, sizeof(a->secret), "%s", secret);
  if (a->live) bagua__liveness_set_secret(a->live, a->secret);
}

/*
 * Keeps this agent's secret the job's. Agents starting together over an earlier run's state
 * race: the one that clears that state may delete the secret another agent already read
 * (docs/agent.md, "State left by an earlier run"); and anyone with write access to etcd may
 * overwrite it. So:
 *  - an agent that has not started workers yet (and was given no secret) adopts the valid
 *    secret etcd holds, so all agents agree before the first round's workers start;
 *  - otherwise (its workers hold its secret, or it was given one) a missing, corrupt or
 *    different value is written back with its own, compare-and-swap on what it read; every
 *    agent of the job holds the same one, so they all write the same value.
 * A failed write is retried on the next pass.
 */
static void check_secret(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  int given = secret_given(a);
  if (s->has_secret && strcmp(s->secret, a->secret) == 0) return;
  if (s->has_secret && !given && !a->secret_used) {
    BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: adopting job %s's secret (it was replaced in etcd)",
               a->cfg->job_id);
    adopt_secret(a, s->secret);
    return;
  }
  char key[BAGUA_RDZV_KEY_MAX];
  bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_SECRET, 0, NULL);
  int swapped = 0;
  bagua__etcd_kv_t cur;
  memset(&cur, 0, sizeof(cur));
  if (bagua__etcd_cas(a->etcd, key, s->secret_mod_rev, a->secret, strlen(a->secret), 0, &swapped,
                      NULL, &cur) != BAGUA_OK)
    swapped = 0;
  char have[BAGUA_RDZV_SECRET_HEX + 1];
  /* Lost a race to another agent's write: adopt it when we still may (next pass otherwise). */
  if (!swapped && cur.value && !given && !a->secret_used &&
      bagua__rdzv_secret_decode(cur.value, cur.value_len, have, NULL, 0) == 0)
    adopt_secret(a, have);
  bagua__etcd_kv_clear(&cur);
  if (swapped && s->secret_mod_rev)
    bagua__agent_say("%s held another or a corrupt value: wrote this job's secret back", key);
}

static int lease_known(const bagua__agent_t *a, int64_t lease) {
  for (size_t i = 0; i < a->nleases_ok; i++)
    if (a->leases_ok[i] == lease) return 1;
  return 0;
}

/*
 * Leaves out of `s` the node records whose lease etcd does not know (a record that outlived
 * its lease, or one written by hand with a made-up lease): such a node is never admitted.
 * Each other lease is asked about once; when etcd cannot answer, the record stays (it was on
 * a lease when etcd last served it) and is asked about again next time.
 */
static void vet_leases(bagua__agent_t *a, bagua__agent_snap_t *s) {
  size_t k = 0;
  for (size_t i = 0; i < s->nnodes; i++) {
    const bagua__rdzv_node_t *n = &s->nodes[i];
    int keep = 1;
    if (n->lease != a->lease && !lease_known(a, n->lease)) {
      int alive = 1;
      if (bagua__rdzv_lease_alive(a->etcd, n->lease, &alive) == BAGUA_OK) {
        if (alive && a->nleases_ok == a->leases_cap) {
          size_t nc = a->leases_cap ? a->leases_cap * 2 : 16;
          int64_t *p = realloc(a->leases_ok, nc * sizeof(*p));
          if (p) {
            a->leases_ok = p;
            a->leases_cap = nc;
          }
        }
        if (alive && a->nleases_ok < a->leases_cap) a->leases_ok[a->nleases_ok++] = n->lease;
        keep = alive;
      }
      if (!keep) {
        char key[BAGUA_RDZV_KEY_MAX], why[96];
        bagua__agent_key(a, key, sizeof(key), BAGUA__RDZV_KEY_NODE, 0, n->id);
        snprintf(why, sizeof(why), "its lease %lld is unknown to etcd", (long long)n->lease);
        bagua__rdzv_reject(key, n->create_rev, "a node record", why);
      }
    }
    if (keep && k != i) s->nodes[k] = *n; /* no self-copy: memcpy's ranges must not overlap */
    k += keep;
  }
  s->nnodes = k;
}

/* Keeps a copy of the last valid round (lead.c restores a corrupt round key from it). */
static void remember_round(bagua__agent_t *a, const bagua__agent_snap_t *s) {
  if (!s->has_round || s->round_mod_rev == a->seen_mod_rev) return;
  bagua__rdzv_round_t copy;
  if (bagua__rdzv_round_copy(&copy, &s->round) != 0) return;
  bagua__rdzv_round_clear(&a->seen);
  a->seen = copy;
  a->seen_mod_rev = s->round_mod_rev;
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
  /* Nor do the agents' progress reports (one per node about every second). */
  if (ev->key && strstr(ev->key, "/progress/")) return 0;
  uint64_t one = 1;
  ssize_t w = write(a->wake_fd, &one, sizeof(one));
  (void)w;
  return 0;
}

static bagua_status_t start_watch(bagua__agent_t *a) {
  bagua__etcd_watch_opts_t opts = {.prefix = 1, .start_revision = 0, .max_outage_ms = 0};
  return bagua__etcd_watch_start(a->etcd, a->prefix, &opts, on_watch, a, &a->watch);
}

static int finish(bagua__agent_t *a, const bagua__rdzv_status_t *st) {
  describe_end(a, st, "");
  bagua__agent_stop_workers(a, SIGTERM);
  return job_exit_code(st);
}

/* Hands the metrics endpoint the current state (at most four times a second: rendering is
 * proportional to the node's workers). */
static void publish_metrics(bagua__agent_t *a) {
  int64_t now = bagua__now_ms();
  if (!a->metrics || (a->metrics_at && now - a->metrics_at < 250)) return;
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
  /* First, while every death it holds was found before `s` was read: a node that left
   * normally revoked its lease before its sockets closed, so `s` no longer shows it. */
  if (a->live) bagua__agent_revoke_dead(a, s);
  int rc = bagua__agent_check_registration(a, s);
  if (rc) return rc;
  check_secret(a, s);
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
  const int etcd_timeout_ms = bagua__etcd_timeout_ms(a->etcd);
  const int64_t rdzv_ms = (int64_t)cfg->rdzv_timeout_s * 1000;
  for (;;) {
    if (a->term_sig) return bagua__agent_leave(a);
    if (__atomic_load_n(&a->watch_failed, __ATOMIC_ACQUIRE)) {
      bagua__etcd_watch_stop(a->watch);
      a->watch = NULL;
      __atomic_store_n(&a->watch_failed, 0, __ATOMIC_RELEASE);
    }
    if (!a->watch && start_watch(a) != BAGUA_OK) a->watch = NULL;
    bagua__agent_snap_t s;
    int64_t before = bagua__now_ms();
    if (down_since) {
      /* During an outage every request fits in what is left of the rendezvous timeout, so
       * the agent gives up when it says it will, not one or more request timeouts later. */
      int64_t left = down_since + rdzv_ms - before;
      bagua__etcd_set_timeout_ms(a->etcd, (int)(left < 100               ? 100
                                                : left < etcd_timeout_ms ? left
                                                                         : etcd_timeout_ms));
    }
    bagua_status_t st = bagua__agent_snap_read(a->etcd, a->prefix, &s);
    int64_t now = bagua__now_ms();
    if (st != BAGUA_OK) {
      /* Workers keep running through an etcd outage; the agent gives up only after the
       * rendezvous timeout, since it can neither report nor learn of rounds meanwhile. The
       * outage counts from the start of the first request that failed. */
      if (!down_since) {
        /* From the first request that failed, which may have been one of the last pass's
         * writes rather than this read. */
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
    vet_leases(a, &s);
    int rc = step(a, &s);
    bagua__agent_snap_clear(&s);
    if (rc >= 0) return rc;
    int timeout = 1000;
    int next_progress = bagua__agent_progress_tick(a, bagua__now_ms());
    if (next_progress >= 0 && next_progress < timeout) timeout = next_progress;
    publish_metrics(a);
    if (a->wake_at) {
      int64_t left = a->wake_at - bagua__now_ms();
      if (left < timeout) timeout = left < 0 ? 0 : (int)left;
    }
    bagua__agent_wait(a, timeout);
  }
}

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
  bagua__agent_snap_t s;
  memset(&s, 0, sizeof(s));
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
  /* Auto mode learns from marks in a private directory which workers run the elastic API, and
   * the workers' progress files live there too; without one auto mode can only restart the
   * workers, and they report no progress. */
  if ((cfg->elastic_mode == BAGUA__ELASTIC_AUTO || cfg->progress_interval_ms > 0) &&
      bagua__marks_create(cfg->node_id, a.mark_dir, sizeof(a.mark_dir)) != 0) {
    int e = errno;
    bagua__agent_say(
        "cannot create the agent's private directory under %s: %s; the workers report no "
        "progress%s",
        bagua__marks_parent(), strerror(e),
        cfg->elastic_mode == BAGUA__ELASTIC_AUTO
            ? ", and --elastic-mode auto restarts them on every new round"
            : "");
  }
  a.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (a.wake_fd < 0) {
    bagua__agent_say("eventfd failed: %s", strerror(errno));
    rc = 1;
    goto out;
  }
  if (bagua__outpump_start(&a.out) != BAGUA_OK ||
      bagua__etcd_create(cfg->endpoints, cfg->etcd_timeout_ms, &a.etcd) != BAGUA_OK) {
    bagua__agent_say("cannot start: %s", bagua_last_error());
    rc = 1;
    goto out;
  }
  bagua__etcd_set_interrupt_fd(a.etcd, endfd);
  bagua__agent_detect_addr(&a);
  if ((rc = first_contact(&a, &s)) >= 0) goto out;
  if ((rc = handle_stale(&a, &s)) >= 0) goto out;
  if ((rc = check_jobcfg(&a)) >= 0) goto out;
  if ((rc = setup_secret(&a)) >= 0) goto out;
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
    if (a.term_sig) rc = interrupted_code(a.term_sig);
    goto out;
  }
  BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: node %s (%s, %d workers) joined job %s at %s",
             cfg->node_id, cfg->node_addr, cfg->nproc, cfg->job_id, cfg->endpoints);
  if (start_watch(&a) != BAGUA_OK) a.watch = NULL; /* the loop retries; the 1 s tick covers */
  looping = 1;
  rc = loop(&a);
out:
  /* A start-up step that failed because a pending signal cut its request short exits as the
   * signal asks, not with that step's error. (The loop handles signals itself.) */
  if (!looping && rc != 0 && rc != BAGUA_AGENT_EXIT_USAGE && a.wake_fd >= 0) {
    if (!a.term_sig) bagua__agent_wait(&a, 0);
    if (a.term_sig) rc = interrupted_code(a.term_sig);
  }
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
  bagua__metrics_stop(a.metrics);
  bagua__agent_progress_free(&a.prog);
  bagua__etcd_destroy(a.etcd);
  if (a.wake_fd >= 0) close(a.wake_fd);
  free(a.pfd);
  free(a.leases_ok);
  bagua__rdzv_round_clear(&a.seen);
  bagua__leader_state_clear(&a.lead);
  explicit_bzero(a.secret, sizeof(a.secret));
  return rc;
}
