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
  bagua__launch_round_t round;
  /* An agent the host could not start made the job fail (not elastic, or below MIN). */
  const bagua__launch_agent_t *start_failure;
} sup_t;

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

/* Marks the agents whose node key appeared in etcd (each is read until it has). */
static void check_registered(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  for (int i = 0; i < r->nagents; i++) {
    bagua__launch_agent_t *a = &r->agents[i];
    if (!a->started || a->exited || a->registered || !a->node_id) continue;
    char key[BAGUA_RDZV_KEY_MAX];
    bagua__etcd_kv_t kv = {0};
    int found = 0;
    if (bagua__rdzv_key(key, sizeof(key), r->cfg->v[LS_JOB_ID].s, BAGUA__RDZV_KEY_NODE, 0,
                        a->node_id, 0) != 0)
      continue;
    if (bagua__etcd_get(r->etcd, key, &kv, &found, NULL) == BAGUA_OK && found) a->registered = 1;
    bagua__etcd_kv_clear(&kv);
  }
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
  int viable = 0;
  for (int i = 0; i < r->nagents; i++)
    viable += r->agents[i].started && !r->agents[i].start_failed &&
              !(r->agents[i].exited && r->agents[i].code != 0);
  /* MIN above this launcher's agents: other launchers bring nodes; the rendezvous decides. */
  int can_go_on = nn->i < nn->i2 && (viable >= nn->i || nn->i > r->nagents);
  if (can_go_on) {
    bagua__say(LAUNCH_TOOL,
               "the agent for host %s could not be started (%s: %s); the elastic job goes on "
               "without it (nnodes %s, %d agent(s) of this launcher left)",
               a->host, what, host_text(a), nn->s, viable);
    return;
  }
  if (!s->start_failure) s->start_failure = a;
  if (s->stopping) return;
  bagua__say(LAUNCH_TOOL, "the agent for host %s could not be started (%s: %s); stopping the job",
             a->host, what, host_text(a));
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
  bagua__launch_pump_stderr(a); /* what the remote command said last */
  /* Every agent got the same flags, so a usage error is everyone's: stop the rest now. */
  if (a->code == LAUNCH_EXIT_USAGE && !s->stopping && alive(s) > 0) {
    bagua__say(LAUNCH_TOOL, "stopping the other agents after a usage error");
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
      bagua__say(LAUNCH_TOOL,
                 "SIG%s received: stopping %d agent(s) (grace %lld ms; signal again "
                 "to kill at once)",
                 sigabbrev_np(sig), alive(s), (long long)s->r->cfg->v[LS_GRACE_MS].i);
      /* The agents get the same signal: SIGINT means "interrupted" to them as to us. */
      signal_agents(s, sig);
    } else if (!s->killed) {
      bagua__say(LAUNCH_TOOL, "SIG%s again: killing the agents", sigabbrev_np(sig));
      signal_agents(s, SIGKILL);
    }
  }
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
  check_registered(s);
  if (st.found && st.mod_revision == r->stale_status_rev) st.found = 0; /* an earlier run's */
  if (st.found && strcmp(st.state, "running") != 0 && !s->end_deadline) {
    /* Agents leave by themselves once they see the end; give them their lease TTL and the
     * stop grace before the launcher insists. */
    s->end_deadline = now + r->cfg->v[LS_GRACE_MS].i + 2000 * r->cfg->v[LS_LEASE_TTL].i + 5000;
    snprintf(s->end_state, sizeof(s->end_state), "%s", st.state);
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "job %s ended in etcd: %s", job, st.state);
  }
  if (!r->progress) return;
  bagua__launch_round_t rd;
  if (bagua__launch_read_round(r->etcd, job, &rd) != BAGUA_OK || !rd.found) return;
  if (rd.round == s->round.round && rd.nmembers == s->round.nmembers) return;
  s->round = rd;
  bagua__say(LAUNCH_TOOL, "round %lld: %d node(s) [%s], world size %lld; %d/%d agents here",
             (long long)rd.round, rd.nmembers, rd.members, (long long)rd.world_size, alive(s),
             r->nagents);
}

/* The host of the agent that runs node `node`, or NULL. */
static const char *host_of(const bagua__launch_run_t *r, const char *node) {
  for (int i = 0; i < r->nagents; i++)
    if (r->agents[i].node_id && strcmp(r->agents[i].node_id, node) == 0) return r->agents[i].host;
  return r->nagents == 1 ? r->agents[0].host : NULL;
}

static int outcome(sup_t *s) {
  bagua__launch_run_t *r = s->r;
  const char *job = r->cfg->v[LS_JOB_ID].s;
  if (s->stop_sig) {
    bagua__say(LAUNCH_TOOL, "job %s stopped by SIG%s", job, sigabbrev_np(s->stop_sig));
    return 128 + s->stop_sig;
  }
  if (s->start_failure) {
    const bagua__launch_agent_t *a = s->start_failure;
    char what[64];
    describe_exit(a, what, sizeof(what));
    bagua__say(LAUNCH_TOOL,
               "job %s failed: the agent for host %s could not be started (%s: %s); the job "
               "needs it (nnodes %s)",
               job, a->host, what, host_text(a), r->cfg->v[LS_NNODES].s);
    return LAUNCH_EXIT_RDZV;
  }
  const bagua__launch_agent_t *first = NULL;
  int failed = 0;
  for (int i = 0; i < r->nagents; i++) {
    const bagua__launch_agent_t *a = &r->agents[i];
    if (a->code == 0) continue;
    failed++;
    if (!first || a->exit_mono < first->exit_mono) first = a;
  }
  bagua__launch_status_t st = {0};
  if (r->etcd && !s->etcd_dead && bagua__launch_read_status(r->etcd, job, &st) == BAGUA_OK &&
      st.found && st.mod_revision == r->stale_status_rev)
    st.found = st.has_root_cause = 0;
  if (!failed) {
    BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "job %s succeeded", job);
    if (r->progress) bagua__say(LAUNCH_TOOL, "job %s succeeded", job);
    return 0;
  }
  if (st.found && strcmp(st.state, "succeeded") == 0) {
    bagua__say(LAUNCH_TOOL, "job %s succeeded (%d agent(s) failed along the way)", job, failed);
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
    bagua__say(LAUNCH_TOOL,
               "job %s failed; root cause at %s on host %s (node %s), rank %lld: "
               "%s (round %lld)",
               job, when, host ? host : "?", st.node[0] ? st.node : "?", (long long)st.rank, what,
               (long long)st.round);
    return rc ? rc : 1;
  }
  if (st.found && strcmp(st.state, "running") != 0 && st.message[0]) {
    /* A job that failed without a worker failure: rendezvous timeout, a closed job. */
    int rc = st.job_exit_code > 0 && st.job_exit_code < 256 ? (int)st.job_exit_code : first->code;
    bagua__say(LAUNCH_TOOL, "job %s %s: %s", job, st.state, st.message);
    return rc;
  }
  if (first->code == LAUNCH_EXIT_USAGE) {
    /* The agent refused its command line or program before it joined: its own message,
     * above, says what and why; a "first failure at ..., rank ?" would only confuse. */
    bagua__say(LAUNCH_TOOL,
               "job %s failed: the agent on host %s (node %s) refused to start (exit 2, usage "
               "error; its message is above)",
               job, first->host, first->node_id ? first->node_id : "default");
    return first->code;
  }
  bagua__launch_format_time(first->exit_ms, when, sizeof(when));
  describe_exit(first, what, sizeof(what));
  bagua__say(LAUNCH_TOOL,
             "job %s failed; first failure at %s on host %s (node %s), rank ?: agent "
             "ended with %s (no root cause recorded in etcd)",
             job, when, first->host, first->node_id ? first->node_id : "default", what);
  return first->code;
}

int bagua__launch_supervise(bagua__launch_run_t *r) {
  sup_t s = {.r = r};
  struct pollfd *p = calloc((size_t)r->nagents + 2, sizeof(*p));
  if (!p) {
    bagua__say(LAUNCH_TOOL, "out of memory");
    return 1;
  }
  while (alive(&s) > 0) {
    p[0] = (struct pollfd){.fd = r->sigfd, .events = POLLIN};
    p[1] =
        (struct pollfd){.fd = (r->priv && !s.etcd_dead) ? r->priv->evt_fd : -1, .events = POLLIN};
    for (int i = 0; i < r->nagents; i++)
      p[2 + i] = (struct pollfd){.fd = r->agents[i].err_fd, .events = POLLIN};
    poll(p, (nfds_t)r->nagents + 2, 100);
    for (int i = 0; i < r->nagents; i++)
      if (p[2 + i].fd >= 0 && p[2 + i].revents) bagua__launch_pump_stderr(&r->agents[i]);
    on_signals(&s);
    reap(&s);
    if (r->priv && !s.etcd_dead && bagua__launch_etcd_died(r->priv)) {
      s.etcd_dead = 1;
      bagua__say(LAUNCH_TOOL, "the private etcd exited; stopping the agents");
      bagua__launch_etcd_dump_log(r->priv, 2000);
      if (!s.stopping) signal_agents(&s, SIGTERM);
    }
    poll_etcd(&s);
    int64_t now = bagua__now_ms();
    if (s.end_deadline && now >= s.end_deadline && !s.stopping && alive(&s) > 0) {
      bagua__say(LAUNCH_TOOL, "job is %s but %d agent(s) are still running; stopping them",
                 s.end_state, alive(&s));
      signal_agents(&s, SIGTERM);
    }
    if (s.kill_deadline && now >= s.kill_deadline && !s.killed && alive(&s) > 0) {
      bagua__say(LAUNCH_TOOL, "%d agent(s) still running after the grace period; killing",
                 alive(&s));
      signal_agents(&s, SIGKILL);
    }
  }
  free(p);
  /* What the remote commands printed last (their pipes may outlive them a little). */
  for (int i = 0; i < r->nagents; i++) bagua__launch_pump_stderr(&r->agents[i]);
  return outcome(&s);
}
