/*
 * How the agent's loop waits: on a signalfd (worker exits and the signals the agent handles),
 * the eventfd its copy of etcd pokes (mirror.h), the liveness channel's sockets and a timeout,
 * all in one poll, so that nothing the agent must answer waits behind anything else.
 */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_internal.h"

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
  /* A liveness connection that ended is queued as a death; the caller's loop acts on it right
   * after this wait returns (ring_watch.c). */
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
