/*
 * The launcher's main loop. One thread: a signalfd delivers SIGINT/SIGTERM/SIGHUP (forwarded
 * to the agents) and SIGCHLD (agents reaped), the private etcd's keeper reports etcd's death
 * through a pipe, and etcd is read every LAUNCH_POLL_MS for the job's status and round.
 *
 * The agents decide the job's fate among themselves through etcd; the launcher only steps in
 * when they cannot: a usage error (every agent got the same flags), a private etcd that died,
 * agents that linger after the job has ended, and signals sent to the launcher itself.
 */
#include "supervise.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/rdzv/rdzv.h"
#include "common/output.h"
#include "common/sock.h"
#include "common/time.h"
#include "discovery.h"
#include "fanout.h"
#include "launch_progress.h"
#include "status.h"

typedef struct {
  bagua__launch_run_t *r;
  int stop_sig;          /* first stop signal bagua-launch received */
  int stopping;          /* SIGTERM (or the forwarded signal) sent to the agents */
  int64_t kill_deadline; /* monotonic ms: SIGKILL what is left; 0 when none */
  int killed;
  int etcd_dead;
  int64_t end_deadline; /* the job ended in etcd: agents still running then are stopped */
  char end_state[16];
  int64_t last_poll;
  int poll_failures;
  /* The agents' start (fanout.h), and the registrations it waits for. */
  bagua__launch_fanout_t fan;
  int spawn_failed; /* this machine could not start an agent (fork, pipe): the job stops */
  int fan_shown;    /* the live line shows the start's counts */
  int64_t last_reg_poll;
  int reg_failures;
  bagua__launch_round_t round;
  /* An agent the host could not start made the job fail (not elastic, or below MIN). */
  const bagua__launch_agent_t *start_failure;
  /* Host discovery during an elastic job: the agents array grows (agents_cap), the script
   * runs every discovery_interval_ms, one run at a time. */
  int agents_cap;
  int discovering;
  bagua__discovery_run_t disc;
  int disc_running;
  int64_t disc_next_ms;
  char disc_error[LAUNCH_ERR_LEN]; /* last failure reported (reported again only when it
                                      changes, so a broken script does not flood the console) */
  char disc_note[1024];            /* last "waits"/"slots changed" note, likewise */
} sup_t;

/* The launcher's own messages start at column 0: the live progress line (a terminal only) is
 * erased first and drawn again at the next poll. */
#define say(...) (bagua__launch_progress_clear(stderr), bagua__say(LAUNCH_TOOL, __VA_ARGS__))

/* Copies what a remote command printed (ssh's warnings, say) to the console, starting at
 * column 0: the live line is erased first, as for the launcher's own messages. */
static void pump(bagua__launch_agent_t *a) {
  if (a->err_fd < 0) return;
  bagua__launch_progress_clear(stderr);
  bagua__launch_pump_stderr(a);
}

static int alive(const sup_t *s) {
  int n = 0;
  for (int i = 0; i < s->r->nagents; i++) n += s->r->agents[i].started && !s->r->agents[i].exited;
  return n;
}

/* Sends `sig` to every running agent and arms the SIGKILL deadline. */
static void signal_agents(sup_t *s, int sig) {
  for (int i = 0; i < s->r->nagents; i++) {
    bagua__launch_agent_t *a = &s->r->agents[i];
    if (!a->started || a->exited) continue;
    /* SIGKILL goes to the agent's whole process group, to catch workers it left behind. */
    kill(sig == SIGKILL ? -a->pid : a->pid, sig);
  }
  if (sig == SIGKILL) {
    s->killed = 1;
    return;
  }
  s->stopping = 1;
  /* An agent whose workers follow rounds by themselves (elastic modes other than restart)
   * first gives them the grace period to leave on their own, and only then signals them and
   * waits the grace period again. */
  int64_t grace = s->r->cfg->v[LS_GRACE_MS].i;
  if (strcmp(s->r->cfg->v[LS_ELASTIC_MODE].s, "restart") != 0) grace *= 2;
  if (!s->kill_deadline) s->kill_deadline = bagua__now_ms() + grace + LAUNCH_KILL_MARGIN_MS;
}

/* "exit code N" or "signal N (SIGX)" for an agent that ended. */
static void describe_exit(const bagua__launch_agent_t *a, char *out, size_t len) {
  if (a->exit_signal)
    bagua__launch_format_code(a->exit_signal, 1, out, len);
  else
    bagua__launch_format_code(a->code, 0, out, len);
}

/* 1 when registrations can be seen: the launcher has an etcd client. */
static int r_nodes_known(const sup_t *s) {
  return s->r->etcd != NULL;
}

/* 1 when the job's status in etcd (this run's, not a stale one) is terminal. */
static int job_ended(sup_t *s) {
  bagua__launch_status_t st;
  bagua__launch_run_t *r = s->r;
  if (!r->etcd || s->etcd_dead ||
      bagua__launch_read_status(r->etcd, r->cfg->v[LS_JOB_ID].s, &st) != BAGUA_OK)
    return 0;
  return st.found && st.mod_revision != r->stale_status_rev && strcmp(st.state, "running") != 0;
}

/* What the host said, for a report: the remote command's last stderr line, or a pointer to
 * the local agent's own message. */
static const char *host_text(const bagua__launch_agent_t *a) {
  if (a->err_line[0]) return a->err_line;
  return a->local ? "its message is above" : "it printed nothing";
}

/*
 * An agent that ended before its node ever registered was not started by its host (ssh could
 * not connect, the agent binary is missing there, ...). Waiting for it would cost the whole
 * --rdzv-timeout, so: a job that needs it fails now, exit 3; an elastic job that can still
 * reach MIN nodes goes on without it.
 */
static void on_start_failure(sup_t *s, bagua__launch_agent_t *a) {
  bagua__launch_run_t *r = s->r;
  const bagua__launch_value_t *nn = &r->cfg->v[LS_NNODES];
  char what[64];
  describe_exit(a, what, sizeof(what));
  a->start_failed = 1;
  /* Agents still waiting for their start (the fan-out) will run too. */
  int viable = 0;
  for (int i = 0; i < r->nagents; i++) {
    const bagua__launch_agent_t *b = &r->agents[i];
    viable += (b->started || !b->exited) && !b->start_failed && !(b->exited && b->code != 0);
  }
  /* MIN above this launcher's agents: other launchers bring nodes; the rendezvous decides. */
  int can_go_on = nn->i < nn->i2 && (viable >= nn->i || nn->i > r->nagents);
  if (can_go_on) {
    say("the agent for host %s could not be started (%s: %s); the elastic job goes on "
        "without it (nnodes %s, %d agent(s) of this launcher left)",
        a->host, what, host_text(a), nn->s, viable);
    return;
  }
  if (!s->start_failure) s->start_failure = a;
  if (s->stopping) return;
  say("the agent for host %s could not be started (%s: %s); stopping the job", a->host, what,
      host_text(a));
  if (alive(s) > 0) signal_agents(s, SIGTERM);
}

static void on_exit_status(sup_t *s, bagua__launch_agent_t *a, int status) {
  a->exited = 1;
  a->exit_ms = bagua__wall_ms();
  a->exit_mono = bagua__now_ms();
  a->exit_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  a->code = WIFEXITED(status)     ? WEXITSTATUS(status)
            : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                  : 1;
  char what[64];
  if (WIFSIGNALED(status))
    bagua__launch_format_code(WTERMSIG(status), 1, what, sizeof(what));
  else
    bagua__launch_format_code(a->code, 0, what, sizeof(what));
  BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "agent on %s (node %s, pid %d) ended: %s", a->host,
             a->node_id ? a->node_id : "-", (int)a->pid, what);
  pump(a); /* what the remote command said last */
  /* A drained agent left because its host left: what the job asked of it, no failure. */
  if (a->draining) {
    say("discovery: the agent for host %s left the job (%s)", a->host, what);
    return;
  }
  /* An agent started by discovery got the flags the others run with, so its usage error is
   * about its host (its node id still held, say): that host is reported, the job goes on. */
  if (a->discovered && a->code == LAUNCH_EXIT_USAGE && !s->stopping && !s->stop_sig) {
    say("discovery: the agent for host %s refused to start (exit 2; its message is "
        "above); the job goes on without it",
        a->host);
    return;
  }
  /* Every agent got the same flags, so a usage error is everyone's: stop the rest now. */
  if (a->code == LAUNCH_EXIT_USAGE && !s->stopping && alive(s) > 0) {
    say("stopping the other agents after a usage error");
    signal_agents(s, SIGTERM);
    return;
  }
  /* Only agents with a known node id can be seen registering: a single local agent chooses
   * its own, and nothing else runs that could wait for it. */
  if (a->code != 0 && a->code != LAUNCH_EXIT_USAGE && !a->registered && a->node_id &&
      !s->stop_sig && !s->stopping && !s->etcd_dead && r_nodes_known(s) && !job_ended(s))
    on_start_failure(s, a);
}

static void reap(sup_t *s) {
  for (int i = 0; i < s->r->nagents; i++) {
    bagua__launch_agent_t *a = &s->r->agents[i];
    if (!a->started || a->exited) continue;
    int status;
    pid_t p = waitpid(a->pid, &status, WNOHANG);
    if (p == a->pid) on_exit_status(s, a, status);
    if (p < 0 && errno == ECHILD) on_exit_status(s, a, 1 << 8);
  }
}

static void on_signals(sup_t *s) {
  struct signalfd_siginfo si;
  while (read(s->r->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    int sig = (int)si.ssi_signo;
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) continue;
    if (!s->stop_sig) {
      s->stop_sig = sig;
      bagua__launch_fanout_counts_t c;
      bagua__launch_fanout_count(s->r->agents, s->r->nagents, &c);
      char more[64] = "";
      if (c.waiting > 0) snprintf(more, sizeof(more), ", %d more will not start", c.waiting);
      say("SIG%s received: stopping %d agent(s)%s (grace %lld ms; signal again "
          "to kill at once)",
          sigabbrev_np(sig), alive(s), more, (long long)s->r->cfg->v[LS_GRACE_MS].i);
      /* The agents get the same signal: SIGINT means "interrupted" to them as to us. */
      signal_agents(s, sig);
    } else if (!s->killed) {
      say("SIG%s again: killing the agents", sigabbrev_np(sig));
      signal_agents(s, SIGKILL);
    }
  }
}

/* ---------------------------------------------------------------------------------------- */
/* The agents' start (fanout.h)                                                              */
/* ---------------------------------------------------------------------------------------- */

/* Once the job stops or has ended, no agent starts any more. */
static int starts_closed(const sup_t *s) {
  return s->stop_sig || s->stopping || s->end_deadline || s->etcd_dead || s->start_failure ||
         s->spawn_failed;
}

/* 1 while some agent waits for its start and will still get it. */
static int starts_left(const sup_t *s) {
  bagua__launch_fanout_counts_t c;
  if (starts_closed(s)) return 0;
  bagua__launch_fanout_count(s->r->agents, s->r->nagents, &c);
  return c.waiting > 0;
}

/* 1 while the start of a job of several agents is under way: the terminal shows its counts
 * (`c`) instead of the job's line. A single agent starts as it always did. */
static int fanning(const sup_t *s, bagua__launch_fanout_counts_t *c) {
  bagua__launch_fanout_count(s->r->agents, s->r->nagents, c);
  return c->total > 1 && !starts_closed(s) && (c->waiting > 0 || c->starting > 0);
}

/*
 * Starts one agent. When this machine cannot (fork or pipe failed, which would hit the next
 * agent too), the job stops; a host found by discovery is reported and the job goes on.
 */
static void start_agent(sup_t *s, bagua__launch_agent_t *a) {
  char err[LAUNCH_ERR_LEN];
  if (bagua__launch_start_agent(a, err, sizeof(err)) != 0) {
    a->exited = 1; /* waits no more */
    if (a->discovered) {
      say("discovery: cannot start the agent for host %s: %s", a->host, err);
      /* Kept as an ended entry: the host is not retried until it leaves the list. */
      a->started = 1;
      a->start_failed = 1;
      a->code = 1;
      return;
    }
    say("cannot start the agent for %s: %s", a->host, err);
    s->spawn_failed = 1;
    signal_agents(s, SIGTERM);
    return;
  }
  bagua__launch_fanout_began(&s->fan, a, bagua__now_ms());
  BAGUA_INFO(BAGUA_SUBSYS_LAUNCH,
             "agent %d/%d started for host %s (node %s, pid %d): %d starting, fanout %d",
             s->fan.started, s->r->nagents, a->host, a->node_id ? a->node_id : "-", (int)a->pid,
             s->fan.starting, s->fan.limit);
}

/* Ends the starts that are over, then starts waiting agents while fewer than --fanout are
 * starting. */
static void fanout_step(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  const int64_t now = bagua__now_ms();
  for (int i = 0; i < r->nagents; i++) {
    bagua__launch_agent_t *a = &r->agents[i];
    if (!a->starting || bagua__launch_fanout_settle(&s->fan, a, now) != LAUNCH_START_TIMED_OUT)
      continue;
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "agent for host %s: not registered after %lld ms", a->host,
               (long long)s->fan.timeout_ms);
    if (starts_left(s))
      say("the agent for host %s has not registered within %lld s; the next agents start "
          "without waiting for it",
          a->host, (long long)(s->fan.timeout_ms / 1000));
  }
  bagua__launch_agent_t *a;
  while (!starts_closed(s) && (a = bagua__launch_fanout_next(&s->fan, r->agents, r->nagents)))
    start_agent(s, a);
  bagua__launch_fanout_counts_t c;
  const int on = fanning(s, &c);
  /* The final counts (all started and registered) are shown too, until the job's line
   * replaces them. */
  if (r->progress && (on || (s->fan_shown && !starts_closed(s))))
    bagua__launch_progress_starting(stderr, c.started, c.registered, c.total);
  s->fan_shown = on;
}

/*
 * Learns which agents registered, with one request however many wait: every
 * LAUNCH_START_POLL_MS while agents are starting (each one seen frees a slot of the fan-out),
 * every LAUNCH_POLL_MS while another running agent is not yet seen (one that ends unseen was
 * not started by its host), and not at all once every agent was seen.
 */
static void poll_registrations(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  if (!r->etcd || s->etcd_dead || !bagua__launch_any_unregistered(r->agents, r->nagents)) return;
  bagua__launch_fanout_counts_t c;
  bagua__launch_fanout_count(r->agents, r->nagents, &c);
  int64_t period = c.starting > 0 ? LAUNCH_START_POLL_MS : LAUNCH_POLL_MS;
  /* After failures, back off as the status poll does: each failure already logged a
   * warning, and each may have waited the whole etcd timeout. */
  if (s->reg_failures > 4) period = 10 * LAUNCH_POLL_MS;
  const int64_t now = bagua__now_ms();
  if (now - s->last_reg_poll < period) return;
  s->last_reg_poll = now;
  if (bagua__launch_read_registered(r->etcd, r->cfg->v[LS_JOB_ID].s, r->agents, r->nagents) ==
      BAGUA_OK)
    s->reg_failures = 0;
  else
    s->reg_failures++;
}

static void poll_etcd(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  int64_t now = bagua__now_ms();
  /* After failures, back off: each failure already logged a warning. */
  int64_t period = LAUNCH_POLL_MS * (s->poll_failures > 4 ? 10 : 1);
  if (!r->etcd || s->etcd_dead || now - s->last_poll < period) return;
  s->last_poll = now;
  const char *job = r->cfg->v[LS_JOB_ID].s;
  bagua__launch_status_t st;
  if (bagua__launch_read_status(r->etcd, job, &st) != BAGUA_OK) {
    s->poll_failures++;
    return;
  }
  s->poll_failures = 0;
  if (st.found && st.mod_revision == r->stale_status_rev) st.found = 0; /* an earlier run's */
  if (st.found && strcmp(st.state, "running") != 0 && !s->end_deadline) {
    /* Agents leave by themselves once they see the end; give them their lease TTL and the
     * stop grace before the launcher insists. */
    s->end_deadline = now + r->cfg->v[LS_GRACE_MS].i + 2000 * r->cfg->v[LS_LEASE_TTL].i + 5000;
    snprintf(s->end_state, sizeof(s->end_state), "%s", st.state);
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "job %s ended in etcd: %s", job, st.state);
  }
  if (!r->progress) return;
  bagua__launch_fanout_counts_t c;
  if (!fanning(s, &c)) bagua__launch_progress_poll(r->etcd, job, now, stderr);
  bagua__launch_round_t rd;
  if (bagua__launch_read_round(r->etcd, job, &rd) != BAGUA_OK || !rd.found) return;
  if (rd.round == s->round.round && rd.nmembers == s->round.nmembers) return;
  s->round = rd;
  say("round %lld: %d node(s) [%s], world size %lld; %d/%d agents here", (long long)rd.round,
      rd.nmembers, rd.members, (long long)rd.world_size, alive(s), r->nagents);
}

/* The host of the agent that runs node `node`, or NULL. */
static const char *host_of(const bagua__launch_run_t *r, const char *node) {
  for (int i = 0; i < r->nagents; i++)
    if (r->agents[i].node_id && strcmp(r->agents[i].node_id, node) == 0) return r->agents[i].host;
  return r->nagents == 1 ? r->agents[0].host : NULL;
}

/*
 * A .py program that exits 1 (Python's status for an uncaught exception, a failed import
 * included) under the default interpreter: the first python3 on the agents' PATH may not be the
 * one the script needs (one without torch, say), so the verdict says which ran and how to
 * choose another.
 */
static void python_hint(const bagua__launch_config_t *cfg, int rc) {
  const bagua__launch_value_t *py = &cfg->v[LS_PYTHON];
  if (rc != 1 || py->origin.kind != LO_DEFAULT || cfg->program.n < 2 ||
      strcmp(cfg->program.v[0], py->s) != 0)
    return;
  say("the workers ran %s under %s, the first on the agents' PATH (the default); a program "
      "that needs another interpreter: --python PATH, BAGUA_PYTHON=PATH, or a #! line",
      cfg->program.v[1], py->s);
}
static int outcome(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  const char *job = r->cfg->v[LS_JOB_ID].s;
  if (s->stop_sig) {
    say("job %s stopped by SIG%s", job, sigabbrev_np(s->stop_sig));
    return 128 + s->stop_sig;
  }
  if (s->spawn_failed) {
    say("job %s failed: an agent could not be started on this machine (the error is above)", job);
    return 1;
  }
  if (s->start_failure) {
    const bagua__launch_agent_t *a = s->start_failure;
    char what[64];
    describe_exit(a, what, sizeof(what));
    say("job %s failed: the agent for host %s could not be started (%s: %s); the job "
        "needs it (nnodes %s)",
        job, a->host, what, host_text(a), r->cfg->v[LS_NNODES].s);
    return LAUNCH_EXIT_RDZV;
  }
  const bagua__launch_agent_t *first = NULL;
  int failed = 0;
  for (int i = 0; i < r->nagents; i++) {
    const bagua__launch_agent_t *a = &r->agents[i];
    if (a->code == 0 || a->draining) continue;
    failed++;
    if (!first || a->exit_mono < first->exit_mono) first = a;
  }
  bagua__launch_status_t st = {0};
  if (r->etcd && !s->etcd_dead && bagua__launch_read_status(r->etcd, job, &st) == BAGUA_OK &&
      st.found && st.mod_revision == r->stale_status_rev)
    st.found = st.has_root_cause = 0;
  if (!failed) {
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "job %s succeeded", job);
    if (r->progress) say("job %s succeeded", job);
    return 0;
  }
  if (st.found && strcmp(st.state, "succeeded") == 0) {
    say("job %s succeeded (%d agent(s) failed along the way)", job, failed);
    return 0;
  }
  char when[40], what[280];
  if (st.has_root_cause) {
    int rc = bagua__launch_status_code(&st);
    const char *host = st.host[0] ? st.host : host_of(r, st.node);
    bagua__launch_format_time(st.time_ms, when, sizeof(when));
    if (st.reason[0])
      snprintf(what, sizeof(what), "never started: %.240s", st.reason);
    else if (st.signal > 0)
      bagua__launch_format_code((int)st.signal, 1, what, sizeof(what));
    else
      bagua__launch_format_code(rc, 0, what, sizeof(what));
    /* The worker's own message (its error file) last, as the agents print it. */
    say("job %s failed; root cause at %s on host %s (node %s), rank %lld: "
        "%s (round %lld)%s%s",
        job, when, host ? host : "?", st.node[0] ? st.node : "?", (long long)st.rank, what,
        (long long)st.round, st.error[0] ? ": " : "", st.error);
    python_hint(r->cfg, rc);
    return rc ? rc : 1;
  }
  if (st.found && strcmp(st.state, "running") != 0 && st.message[0]) {
    /* A job that failed without a worker failure: rendezvous timeout, a closed job. */
    int rc = st.job_exit_code > 0 && st.job_exit_code < 256 ? (int)st.job_exit_code : first->code;
    say("job %s %s: %s", job, st.state, st.message);
    return rc;
  }
  if (first->code == LAUNCH_EXIT_USAGE) {
    /* The agent refused its command line or program before it joined: its own message,
     * above, says what and why; a "first failure at ..., rank ?" would only confuse. */
    say("job %s failed: the agent on host %s (node %s) refused to start (exit 2, usage "
        "error; its message is above)",
        job, first->host, first->node_id ? first->node_id : "default");
    return first->code;
  }
  bagua__launch_format_time(first->exit_ms, when, sizeof(when));
  describe_exit(first, what, sizeof(what));
  say("job %s failed; first failure at %s on host %s (node %s), rank ?: agent "
      "ended with %s (no root cause recorded in etcd)",
      job, when, first->host, first->node_id ? first->node_id : "default", what);
  return first->code;
}

/* ---------------------------------------------------------------------------------------- */
/* Host discovery during an elastic job                                                      */
/* ---------------------------------------------------------------------------------------- */

/* Time an agent told to leave gets before SIGKILL: as for a stop of the whole job. */
static int64_t drain_grace_ms(const sup_t *s) {
  int64_t grace = s->r->cfg->v[LS_GRACE_MS].i;
  if (strcmp(s->r->cfg->v[LS_ELASTIC_MODE].s, "restart") != 0) grace *= 2;
  return grace + LAUNCH_KILL_MARGIN_MS;
}

/* One more agent for a host the script reported; the fan-out starts it. */
static void start_discovered(sup_t *s, const bagua__discovery_host_t *h) {
  bagua__launch_run_t *r = s->r;
  char err[LAUNCH_ERR_LEN];
  /* Growing may move the array. Nothing keeps a pointer into it across this call: discovery
   * stops before s->start_failure (the one pointer into it) is ever set. */
  if (r->nagents == s->agents_cap) {
    int ncap = 2 * s->agents_cap;
    bagua__launch_agent_t *na = realloc(r->agents, sizeof(*na) * (size_t)ncap);
    if (!na) {
      say("discovery: out of memory; host %s gets no agent", h->name);
      return;
    }
    r->agents = na;
    s->agents_cap = ncap;
  }
  const bagua__launch_agent_t *model = &r->agents[0];
  bagua__launch_host_t host = {.name = h->name,
                               .nproc = h->slots ? h->slots : (int)r->cfg->v[LS_NPROC].i,
                               .local = bagua__launch_host_is_local(h->name)};
  bagua__launch_agent_t *a = &r->agents[r->nagents];
  if (bagua__launch_build_agent(r->cfg, model->agent_path, model->endpoint, &host, a, err,
                                sizeof(err)) != 0) {
    say("discovery: host %s gets no agent: %s", h->name, err);
    return;
  }
  a->discovered = 1;
  r->nagents++;
  say("discovery: host %s appeared: starting its agent (%d worker(s))", h->name, host.nproc);
}

/* Tells the agent of a host that vanished to leave the job (SIGTERM: graceful leave). */
static void drain(sup_t *s, bagua__launch_agent_t *a) {
  a->draining = 1;
  if (!a->started && !a->exited) {
    /* Still waiting for its start: it never gets it (and the host may return for a new one). */
    a->exited = 1;
    say("discovery: host %s is gone before its agent started; it is not started", a->host);
    return;
  }
  if (a->exited) return; /* it had ended already: only forgotten, so a return restarts it */
  a->drain_kill_ms = bagua__now_ms() + drain_grace_ms(s);
  const bagua__launch_value_t *nn = &s->r->cfg->v[LS_NNODES];
  say("discovery: host %s is gone: draining its agent (SIGTERM; it leaves the job and the "
      "others go on, nnodes %s)",
      a->host, nn->s);
  kill(a->pid, SIGTERM);
}

/* Acts on one finished run of the script. */
static void discovery_result(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  const char *script = r->cfg->v[LS_DISCOVERY_SCRIPT].s;
  char what[LAUNCH_ERR_LEN];
  bagua__discovery_host_t *found = NULL;
  int nfound = 0;
  int rc = bagua__discovery_finish(&s->disc, what, sizeof(what));
  if (rc == 0)
    rc = bagua__discovery_parse(s->disc.buf ? s->disc.buf : "", s->disc.len, &found, &nfound, what,
                                sizeof(what));
  if (rc != 0) {
    /* The job keeps the hosts it has: a script that fails now and then must not drain them. */
    if (strcmp(what, s->disc_error) != 0)
      say("host discovery script \"%s\" failed: %s; the job keeps its current hosts", script, what);
    snprintf(s->disc_error, sizeof(s->disc_error), "%s", what);
    return;
  }
  if (s->disc_error[0]) {
    say("host discovery script \"%s\" works again", script);
    s->disc_error[0] = '\0';
  }
  /* Running: agents not drained (also those that ended while their host is listed: they are
   * not started again until the host leaves the list and returns). Draining: told to leave,
   * still running. */
  int n = r->nagents, nrun = 0, ndrn = 0;
  const char **run = calloc((size_t)n + 1, sizeof(char *));
  const char **drn = calloc((size_t)n + 1, sizeof(char *));
  int *slots = calloc((size_t)n + 1, sizeof(int)), *run_idx = calloc((size_t)n + 1, sizeof(int));
  bagua__discovery_diff_t d = {0};
  if (!run || !drn || !slots || !run_idx) goto out;
  for (int i = 0; i < n; i++) {
    bagua__launch_agent_t *a = &r->agents[i];
    if (a->draining) {
      if (!a->exited) drn[ndrn++] = a->host;
      continue;
    }
    run_idx[nrun] = i;
    slots[nrun] = a->nproc;
    run[nrun++] = a->host;
  }
  if (bagua__discovery_diff(run, slots, nrun, drn, ndrn, found, nfound,
                            (int)r->cfg->v[LS_NNODES].i2, &d) != 0)
    goto out;
  for (int k = 0; k < d.ndrain; k++) drain(s, &r->agents[run_idx[d.drain[k]]]);
  for (int k = 0; k < d.nstart; k++) start_discovered(s, &found[d.start[k]]);
  if (d.ndrain > 0) {
    int left = 0;
    for (int i = 0; i < r->nagents; i++)
      left += r->agents[i].started && !r->agents[i].exited && !r->agents[i].draining;
    if (left < r->cfg->v[LS_NNODES].i)
      say("discovery: %d agent(s) of this launcher left, fewer than MIN of nnodes %s: the "
          "job fails unless nodes come within --rdzv-timeout",
          left, r->cfg->v[LS_NNODES].s);
  }
  /* Hosts that wait for a place, and slot counts a running agent cannot change to. */
  char note[1024] = "";
  size_t o = 0;
  for (int k = 0; k < d.nwaiting && o < sizeof(note); k++)
    o += (size_t)snprintf(note + o, sizeof(note) - o, "%s%s",
                          o ? ", " : "waiting: ", found[d.waiting[k]].name);
  for (int k = 0; k < d.nchanged && o < sizeof(note); k++)
    o += (size_t)snprintf(note + o, sizeof(note) - o, "%s%s now has %d slot(s)", o ? "; " : "",
                          found[d.changed[k]].name, found[d.changed[k]].slots);
  if (note[0] && strcmp(note, s->disc_note) != 0)
    say("discovery: %s (nnodes %s allows %lld agents; a host whose agent is still leaving "
        "waits for it; a running agent keeps its worker count)",
        note, r->cfg->v[LS_NNODES].s, (long long)r->cfg->v[LS_NNODES].i2);
  snprintf(s->disc_note, sizeof(s->disc_note), "%s", note);
out:
  bagua__discovery_diff_free(&d);
  free(run);
  free(drn);
  free(slots);
  free(run_idx);
  bagua__discovery_hosts_free(found, nfound);
}

/* Starts, follows and ends runs of the script; stops discovering once the job is stopping. */
static void discovery_step(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  if (!s->discovering) return;
  int64_t now = bagua__now_ms();
  if (s->stop_sig || s->stopping || s->end_deadline || s->etcd_dead || s->start_failure) {
    if (s->disc_running) bagua__discovery_run_free(&s->disc);
    s->disc_running = 0;
    s->discovering = 0;
    return;
  }
  if (!s->disc_running) {
    if (now < s->disc_next_ms) return;
    char err[LAUNCH_ERR_LEN];
    if (bagua__discovery_spawn(r->cfg->v[LS_DISCOVERY_SCRIPT].s,
                               (int)r->cfg->v[LS_DISCOVERY_TIMEOUT_MS].i, &s->disc, err,
                               sizeof(err)) != 0) {
      if (strcmp(err, s->disc_error) != 0)
        say("host discovery script \"%s\" failed: %s; the job keeps its current hosts",
            r->cfg->v[LS_DISCOVERY_SCRIPT].s, err);
      snprintf(s->disc_error, sizeof(s->disc_error), "%s", err);
      s->disc_next_ms = now + r->cfg->v[LS_DISCOVERY_INTERVAL_MS].i;
      return;
    }
    s->disc_running = 1;
  }
  if (!bagua__discovery_pump(&s->disc)) return;
  discovery_result(s);
  bagua__discovery_run_free(&s->disc);
  s->disc_running = 0;
  /* The interval runs from the end of one run to the start of the next, so a slow script
   * never has two runs in flight. */
  s->disc_next_ms = bagua__now_ms() + r->cfg->v[LS_DISCOVERY_INTERVAL_MS].i;
}

/* Drained agents still running after their grace get SIGKILL (their process group). */
static void drain_deadlines(sup_t *s) {
  int64_t now = bagua__now_ms();
  for (int i = 0; i < s->r->nagents; i++) {
    bagua__launch_agent_t *a = &s->r->agents[i];
    if (!a->draining || !a->started || a->exited || !a->drain_kill_ms || now < a->drain_kill_ms)
      continue;
    say("discovery: the agent for host %s is still running %lld ms after "
        "SIGTERM; killing it",
        a->host, (long long)drain_grace_ms(s));
    kill(-a->pid, SIGKILL);
    a->drain_kill_ms = 0;
  }
}

int bagua__launch_supervise(bagua__launch_run_t *r) {
  sup_t s = {.r = r};
  const bagua__launch_value_t *nn = &r->cfg->v[LS_NNODES];
  /* Hosts change only in an elastic job; otherwise the script ran once, at start. */
  s.discovering = r->cfg->hosts_source == LH_DISCOVERY && nn->i < nn->i2 && r->nagents > 0;
  s.disc.fd = -1;
  /* The caller's array stays the caller's: the supervisor works on its own, growable copy
   * (discovery adds agents) and hands the caller's entries back at the end. */
  bagua__launch_agent_t *caller = r->agents;
  const int ncaller = r->nagents;
  s.agents_cap = r->nagents > 4 ? 2 * r->nagents : 8;
  bagua__launch_agent_t *own = calloc((size_t)s.agents_cap, sizeof(*own));
  struct pollfd *p = NULL;
  size_t pcap = 0;
  if (!own) {
    say("out of memory");
    return 1;
  }
  memcpy(own, caller, sizeof(*own) * (size_t)ncaller);
  r->agents = own;
  if (s.discovering) s.disc_next_ms = bagua__now_ms() + r->cfg->v[LS_DISCOVERY_INTERVAL_MS].i;
  bagua__launch_fanout_init(&s.fan, r->cfg);
  BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "an agent counts against the fan-out for at most %lld ms",
             (long long)s.fan.timeout_ms);
  on_signals(&s); /* a signal that came before the first start: nothing starts */
  fanout_step(&s);
  while (alive(&s) > 0 || starts_left(&s)) {
    size_t need = (size_t)r->nagents + 3;
    if (need > pcap) {
      struct pollfd *np = realloc(p, sizeof(*np) * need * 2);
      if (!np) {
        say("out of memory");
        break;
      }
      p = np;
      pcap = need * 2;
    }
    p[0] = (struct pollfd){.fd = r->sigfd, .events = POLLIN};
    p[1] =
        (struct pollfd){.fd = (r->priv && !s.etcd_dead) ? r->priv->evt_fd : -1, .events = POLLIN};
    p[2] = (struct pollfd){.fd = s.disc_running ? s.disc.fd : -1, .events = POLLIN};
    for (int i = 0; i < r->nagents; i++)
      p[3 + i] = (struct pollfd){.fd = r->agents[i].err_fd, .events = POLLIN};
    poll(p, (nfds_t)r->nagents + 3, 100);
    for (int i = 0; i < r->nagents; i++)
      if (p[3 + i].fd >= 0 && p[3 + i].revents) pump(&r->agents[i]);
    on_signals(&s);
    reap(&s);
    discovery_step(&s);
    drain_deadlines(&s);
    if (r->priv && !s.etcd_dead && bagua__launch_etcd_died(r->priv)) {
      s.etcd_dead = 1;
      say("the private etcd exited; stopping the agents");
      bagua__launch_etcd_dump_log(r->priv, 2000);
      if (!s.stopping) signal_agents(&s, SIGTERM);
    }
    poll_etcd(&s);
    poll_registrations(&s);
    fanout_step(&s);
    int64_t now = bagua__now_ms();
    if (s.end_deadline && now >= s.end_deadline && !s.stopping && alive(&s) > 0) {
      say("job is %s but %d agent(s) are still running; stopping them", s.end_state, alive(&s));
      signal_agents(&s, SIGTERM);
    }
    if (s.kill_deadline && now >= s.kill_deadline && !s.killed && alive(&s) > 0) {
      say("%d agent(s) still running after the grace period; killing", alive(&s));
      signal_agents(&s, SIGKILL);
    }
  }
  free(p);
  if (s.disc_running) bagua__discovery_run_free(&s.disc);
  /* What the remote commands printed last (their pipes may outlive them a little). */
  for (int i = 0; i < r->nagents; i++) pump(&r->agents[i]);
  bagua__launch_progress_clear(stderr);
  /* Local agents killed with SIGKILL (or stopped before they set up their handlers) could
   * not remove their private directories. They are swept before the verdict is printed, so
   * that the verdict stays the job's last line. The agents inherited TMPDIR from here, and
   * [env] may have exported it after the registry read the environment at start-up, so the
   * live environment is read here, not the registry's snapshot. */
  const char *tmp = getenv("TMPDIR");
  for (int i = 0; i < r->nagents; i++)
    if (r->agents[i].local && r->agents[i].pid > 0 && r->agents[i].exited)
      bagua__launch_sweep_agent_dirs(tmp, r->agents[i].pid);
  int rc = outcome(&s);
  bagua__launch_free_agents_in_place(r->agents + ncaller, r->nagents - ncaller);
  memcpy(caller, r->agents, sizeof(*caller) * (size_t)ncaller);
  free(r->agents);
  r->agents = caller;
  r->nagents = ncaller;
  return rc;
}
