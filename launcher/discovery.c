/*
 * Host discovery: parsing a discovery script's output, the difference between the hosts that
 * run and the hosts the script reports, and running the script with a bound on its time and
 * output (discovery.h has the contract).
 */
#include "discovery.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/time.h"
#include "launch.h"

void bagua__discovery_hosts_free(bagua__discovery_host_t *hosts, int n) {
  for (int i = 0; i < n; i++) free(hosts[i].name);
  free(hosts);
}

int bagua__discovery_parse(const char *text, size_t len, bagua__discovery_host_t **hosts, int *n,
                           char *err, size_t errlen) {
  bagua__discovery_host_t *h = NULL;
  int count = 0, line = 0;
  char what[512];
  *hosts = NULL;
  *n = 0;
  for (size_t pos = 0; pos < len;) {
    const char *start = text + pos;
    const char *nl = memchr(start, '\n', len - pos);
    size_t ll = nl ? (size_t)(nl - start) : len - pos;
    pos += ll + (nl ? 1 : 0);
    line++;
    /* A line is copied so it can be cut at '#' and trimmed; host lines are short. */
    char buf[320];
    if (memchr(start, '\0', ll)) {
      snprintf(err, errlen, "line %d: contains a NUL byte; accepted: " BAGUA_DISCOVERY_ACCEPTED,
               line);
      goto fail;
    }
    if (ll >= sizeof(buf)) {
      snprintf(err, errlen,
               "line %d: longer than %zu characters; accepted: " BAGUA_DISCOVERY_ACCEPTED, line,
               sizeof(buf) - 1);
      goto fail;
    }
    memcpy(buf, start, ll);
    buf[ll] = '\0';
    char *hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    char *s = buf;
    while (*s == ' ' || *s == '\t' || *s == '\r') s++;
    size_t sl = strlen(s);
    while (sl > 0 && (s[sl - 1] == ' ' || s[sl - 1] == '\t' || s[sl - 1] == '\r')) s[--sl] = '\0';
    if (!*s) continue;
    char shown[320];
    snprintf(shown, sizeof(shown), "%s", s);
    char *colon = strchr(s, ':');
    if (colon) *colon = '\0';
    int slots = 0;
    if (bagua__launch_check_host_name(s, what, sizeof(what)) != 0 ||
        (colon && bagua__launch_check_slots(colon + 1, &slots, what, sizeof(what)) != 0)) {
      snprintf(err, errlen, "line %d: \"%s\": %s; accepted: " BAGUA_DISCOVERY_ACCEPTED, line, shown,
               what);
      goto fail;
    }
    for (int i = 0; i < count; i++) {
      if (strcmp(h[i].name, s) != 0) continue;
      snprintf(err, errlen,
               "line %d: \"%s\": host %s is listed again (first on line %d); "
               "accepted: " BAGUA_DISCOVERY_ACCEPTED,
               line, shown, s, h[i].line);
      goto fail;
    }
    bagua__discovery_host_t *nh = realloc(h, sizeof(*nh) * (size_t)(count + 1));
    if (!nh) goto oom;
    h = nh;
    h[count] = (bagua__discovery_host_t){.name = strdup(s), .slots = slots, .line = line};
    if (!h[count++].name) goto oom;
  }
  if (count == 0) {
    /* An empty answer is far more often a broken script than a cluster with no host left;
     * taking it literally would drain every agent and end the job. */
    snprintf(err, errlen, "it printed no host; accepted: " BAGUA_DISCOVERY_ACCEPTED);
    goto fail;
  }
  *hosts = h;
  *n = count;
  return 0;
oom:
  snprintf(err, errlen, "out of memory");
fail:
  bagua__discovery_hosts_free(h, count);
  return -1;
}

void bagua__discovery_diff_free(bagua__discovery_diff_t *d) {
  free(d->start);
  free(d->drain);
  free(d->waiting);
  free(d->changed);
  memset(d, 0, sizeof(*d));
}

static int in_list(const char *name, const char *const *list, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(list[i], name) == 0) return i;
  return -1;
}

int bagua__discovery_diff(const char *const *running, const int *running_slots, int nrunning,
                          const char *const *draining, int ndraining,
                          const bagua__discovery_host_t *found, int nfound, int max,
                          bagua__discovery_diff_t *out) {
  memset(out, 0, sizeof(*out));
  /* Each list holds at most all of its candidates: one allocation each, never grown. */
  out->start = malloc(sizeof(int) * (size_t)(nfound ? nfound : 1));
  out->waiting = malloc(sizeof(int) * (size_t)(nfound ? nfound : 1));
  out->changed = malloc(sizeof(int) * (size_t)(nfound ? nfound : 1));
  out->drain = malloc(sizeof(int) * (size_t)(nrunning ? nrunning : 1));
  if (!out->start || !out->waiting || !out->changed || !out->drain) {
    bagua__discovery_diff_free(out);
    return -1;
  }
  for (int i = 0; i < nrunning; i++) {
    int found_it = 0;
    for (int k = 0; k < nfound && !found_it; k++) found_it = strcmp(found[k].name, running[i]) == 0;
    if (!found_it) out->drain[out->ndrain++] = i;
  }
  /* Agents being drained (now or before) keep their place until they have exited, so a new
   * agent never pushes the job above MAX while an old one is still leaving. */
  int used = nrunning + ndraining;
  for (int k = 0; k < nfound; k++) {
    int r = in_list(found[k].name, running, nrunning);
    if (r >= 0) {
      if (running_slots && found[k].slots && found[k].slots != running_slots[r])
        out->changed[out->nchanged++] = k;
      continue;
    }
    if (in_list(found[k].name, draining, ndraining) >= 0 || used >= max) {
      out->waiting[out->nwaiting++] = k;
      continue;
    }
    out->start[out->nstart++] = k;
    used++;
  }
  return 0;
}

int bagua__discovery_spawn(const char *command, int timeout_ms, bagua__discovery_run_t *r,
                           char *err, size_t errlen) {
  bagua__launch_argv_t words = {0};
  char serr[256];
  int p[2] = {-1, -1};
  memset(r, 0, sizeof(*r));
  r->fd = -1;
  r->timeout_ms = timeout_ms;
  if (bagua__launch_split_words(command, &words, serr, sizeof(serr)) != 0 || words.n == 0) {
    snprintf(err, errlen, "cannot split the command: %s; accepted: PATH [ARGS...]",
             words.n == 0 ? "it is empty" : serr);
    bagua__launch_argv_free(&words);
    return -1;
  }
  if (pipe2(p, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    bagua__launch_argv_free(&words);
    return -1;
  }
  /* The child reports an exec failure through this pipe, so a missing or non-executable
   * script is named as such rather than as "exited with code 127". */
  int ep[2];
  if (pipe2(ep, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "pipe: %s", strerror(errno));
    close(p[0]);
    close(p[1]);
    bagua__launch_argv_free(&words);
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "fork: %s", strerror(errno));
    close(p[0]), close(p[1]), close(ep[0]), close(ep[1]);
    bagua__launch_argv_free(&words);
    return -1;
  }
  if (pid == 0) {
    /* Own process group: a timeout kills whatever the script started too. */
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    dup2(p[1], 1);
    execvp(words.v[0], words.v);
    int e = errno;
    if (write(ep[1], &e, sizeof(e)) < 0) _exit(127);
    _exit(127);
  }
  setpgid(pid, pid);
  close(p[1]);
  close(ep[1]);
  int e = 0;
  ssize_t got;
  do got = read(ep[0], &e, sizeof(e));
  while (got < 0 && errno == EINTR);
  close(ep[0]);
  if (got == (ssize_t)sizeof(e)) {
    snprintf(err, errlen, "cannot run %s: %s; accepted: an executable file (PATH [ARGS...])",
             words.v[0], strerror(e));
    close(p[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    bagua__launch_argv_free(&words);
    return -1;
  }
  bagua__launch_argv_free(&words);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  r->pid = pid;
  r->fd = p[0];
  r->deadline_ms = bagua__now_ms() + timeout_ms;
  return 0;
}

static void kill_run(bagua__discovery_run_t *r) {
  if (r->pid > 0 && !r->reaped) {
    kill(-r->pid, SIGKILL);
    kill(r->pid, SIGKILL);
    /* SIGKILL cannot be caught: this wait ends at once. */
    while (waitpid(r->pid, &r->status, 0) < 0 && errno == EINTR) {
    }
    r->reaped = 1;
  }
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
}

int bagua__discovery_pump(bagua__discovery_run_t *r) {
  char chunk[4096];
  /* Reaped first, read second: once the script has exited, everything it wrote is in the
   * pipe, so the reads below see all of it before the pipe is closed. */
  if (!r->reaped && r->pid > 0) {
    pid_t w = waitpid(r->pid, &r->status, WNOHANG);
    if (w == r->pid) r->reaped = 1;
  }
  while (r->fd >= 0) {
    ssize_t got = read(r->fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) break;
    if (got <= 0) {
      close(r->fd);
      r->fd = -1;
      break;
    }
    if (r->len + (size_t)got > BAGUA_DISCOVERY_MAX_OUTPUT) {
      r->overflow = 1;
      kill_run(r);
      return 1;
    }
    if (r->len + (size_t)got + 1 > r->cap) {
      size_t ncap = 2 * (r->len + (size_t)got + 1);
      char *nb = realloc(r->buf, ncap);
      if (!nb) {
        r->overflow = 1;
        kill_run(r);
        return 1;
      }
      r->buf = nb;
      r->cap = ncap;
    }
    memcpy(r->buf + r->len, chunk, (size_t)got);
    r->len += (size_t)got;
    r->buf[r->len] = '\0';
  }
  /* Over when the script has exited and its stdout is closed. A script that exits but leaves
   * a child holding the pipe is over too: its own exit is the answer. */
  if (r->reaped && r->fd >= 0) {
    close(r->fd);
    r->fd = -1;
  }
  if (r->reaped) return 1;
  if (bagua__now_ms() >= r->deadline_ms) {
    r->timed_out = 1;
    kill_run(r);
    return 1;
  }
  return 0;
}

int bagua__discovery_finish(const bagua__discovery_run_t *r, char *err, size_t errlen) {
  if (r->overflow) {
    snprintf(err, errlen, "it printed more than %d bytes; accepted: " BAGUA_DISCOVERY_ACCEPTED,
             BAGUA_DISCOVERY_MAX_OUTPUT);
    return -1;
  }
  if (r->timed_out) {
    snprintf(err, errlen,
             "it did not finish within %d ms and was killed; accepted: a script that prints its "
             "hosts and exits 0 within --discovery-timeout-ms",
             r->timeout_ms);
    return -1;
  }
  if (WIFSIGNALED(r->status)) {
    snprintf(err, errlen, "it was killed by signal %d (SIG%s); accepted: exit status 0",
             WTERMSIG(r->status), sigabbrev_np(WTERMSIG(r->status)));
    return -1;
  }
  if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) {
    snprintf(err, errlen, "it exited with code %d; accepted: exit status 0",
             WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1);
    return -1;
  }
  return 0;
}

void bagua__discovery_run_free(bagua__discovery_run_t *r) {
  kill_run(r);
  free(r->buf);
  memset(r, 0, sizeof(*r));
  r->fd = -1;
}

int bagua__discovery_once(const char *command, int timeout_ms, bagua__discovery_host_t **hosts,
                          int *n, char *err, size_t errlen) {
  bagua__discovery_run_t r;
  char what[LAUNCH_ERR_LEN];
  *hosts = NULL;
  *n = 0;
  if (bagua__discovery_spawn(command, timeout_ms, &r, what, sizeof(what)) != 0) {
    snprintf(err, errlen, "host discovery script \"%s\": %s", command, what);
    return -1;
  }
  while (!bagua__discovery_pump(&r)) {
    struct pollfd p = {.fd = r.fd, .events = POLLIN};
    /* Short waits: the script's exit is seen by waitpid, not by the pipe. */
    poll(&p, r.fd >= 0 ? 1 : 0, 20);
  }
  int rc = bagua__discovery_finish(&r, what, sizeof(what));
  if (rc == 0) rc = bagua__discovery_parse(r.buf ? r.buf : "", r.len, hosts, n, what, sizeof(what));
  if (rc != 0) snprintf(err, errlen, "host discovery script \"%s\": %s", command, what);
  bagua__discovery_run_free(&r);
  return rc;
}
