/*
 * Starting and stopping worker processes.
 *
 * The agent has other threads (etcd keeper and watch, output), and the child shares the
 * agent's memory until it execs (vfork), so a child may only make system calls between vfork()
 * and exec(): the environment, argument vector, log file and messages are all prepared before,
 * and the child only rearranges descriptors, sets its process group, parent-death signal and
 * signal mask, and execs.
 */
#include "workers.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/check.h"
#include "common/file.h"
#include "common/log.h"
#include "common/params.h"
#include "common/rdzv/rdzv.h"
#include "common/sock.h"
#include "common/validate.h"
#include "marks.h"
#include "progress.h"
#include "common/time.h"
#include "common/worker_env.h"

extern char **environ;

/* Whether an inherited "NAME=VALUE" entry gives way to the agent's value: every variable of
 * the worker contract, except one the user may choose (USER_FIRST, DEFAULT) when the agent
 * does not set it. */
static int owned(const bagua__agent_config_t *cfg, const char *entry, const char *bootstrap) {
  int v = bagua__worker_var_find(entry, strcspn(entry, "="));
  if (v < 0) return 0;
  switch (bagua__worker_var_kind((bagua__worker_var_t)v)) {
    case BAGUA__WV_USER_FIRST:
      return bootstrap != NULL;
    case BAGUA__WV_DEFAULT:
      return cfg->omp_default; /* the one DEFAULT row; chosen only when the user set none */
    default:
      return 1;
  }
}

typedef struct {
  char **v;
  size_t n, cap;
} strvec_t;

static int vec_add(strvec_t *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int vec_add(strvec_t *sv, const char *fmt, ...) {
  if (sv->n + 2 > sv->cap) {
    size_t nc = sv->cap ? sv->cap * 2 : 64;
    char **nv = realloc(sv->v, nc * sizeof(*nv));
    if (!nv) return -1;
    sv->v = nv;
    sv->cap = nc;
  }
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&sv->v[sv->n], fmt, ap);
  va_end(ap);
  if (rc < 0) return -1;
  sv->v[++sv->n] = NULL;
  return 0;
}

static void vec_free(strvec_t *sv) {
  for (size_t i = 0; i < sv->n; i++) free(sv->v[i]);
  free(sv->v);
  memset(sv, 0, sizeof(*sv));
}

/* Adds worker contract variable `v` for one worker; a variable the agent has no value for
 * (no mark directory, no --log-dir, ...) is left out. Every row of common/worker_env.def has a
 * case here: the switch has no default, so the compiler names a row without one. */
static int add_var(const bagua__agent_config_t *cfg, const bagua__worker_assign_t *a,
                   int local_rank, bagua__worker_var_t v, strvec_t *sv) {
  const char *name = bagua__worker_var_name(v);
  char path[4200];
  switch (v) {
    case BAGUA__WV_RANK:
    case BAGUA__WV_ROLE_RANK:
      return vec_add(sv, "%s=%d", name, a->rank_base + local_rank);
    case BAGUA__WV_LOCAL_RANK:
      return vec_add(sv, "%s=%d", name, local_rank);
    case BAGUA__WV_WORLD_SIZE:
    case BAGUA__WV_ROLE_WORLD_SIZE:
      return vec_add(sv, "%s=%d", name, a->world_size);
    case BAGUA__WV_LOCAL_WORLD_SIZE:
      return vec_add(sv, "%s=%d", name, cfg->nproc);
    case BAGUA__WV_GROUP_RANK:
      return vec_add(sv, "%s=%d", name, a->group_rank);
    case BAGUA__WV_GROUP_WORLD_SIZE:
      return vec_add(sv, "%s=%d", name, a->group_world_size);
    case BAGUA__WV_MASTER_ADDR:
      return vec_add(sv, "%s=%s", name, a->master_addr);
    case BAGUA__WV_MASTER_PORT:
      return vec_add(sv, "%s=%d", name, a->master_port);
    case BAGUA__WV_ROUND:
      return vec_add(sv, "%s=%lld", name, (long long)a->round);
    case BAGUA__WV_RESTART_COUNT:
    case BAGUA__WV_TE_RESTART_COUNT:
      return vec_add(sv, "%s=%d", name, a->restart_count);
    case BAGUA__WV_MAX_RESTARTS:
    case BAGUA__WV_TE_MAX_RESTARTS:
      return vec_add(sv, "%s=%d", name, cfg->max_restarts);
    case BAGUA__WV_JOB_ID:
    case BAGUA__WV_TE_RUN_ID:
      return vec_add(sv, "%s=%s", name, cfg->job_id);
    case BAGUA__WV_NODE_ID:
      return vec_add(sv, "%s=%s", name, cfg->node_id);
    case BAGUA__WV_RDZV_ENDPOINT:
      return vec_add(sv, "%s=%s", name, cfg->endpoints);
    case BAGUA__WV_NODE_ADDR:
      return vec_add(sv, "%s=%s", name, cfg->node_addr);
    case BAGUA__WV_ELASTIC_MODE:
      return vec_add(sv, "%s=%s", name, bagua__elastic_mode_name(cfg->elastic_mode));
    case BAGUA__WV_ELASTIC_MARK:
      if (!a->mark_dir) return 0;
      if (bagua__marks_path(a->mark_dir, local_rank, a->round, path, sizeof(path)) != 0) return -1;
      return vec_add(sv, "%s=%s", name, path);
    case BAGUA__WV_PROGRESS_FILE:
      if (!a->progress_dir) return 0;
      if (bagua__agent_progress_path(a->progress_dir, local_rank, path, sizeof(path)) != 0)
        return -1;
      return vec_add(sv, "%s=%s", name, path);
    case BAGUA__WV_BOOTSTRAP:
      return a->bootstrap ? vec_add(sv, "%s=%s", name, a->bootstrap) : 0;
    case BAGUA__WV_LOG_DIR:
      /* The job's log directory, where libbagua writes files such as autotune.csv. */
      return cfg->log_dir ? vec_add(sv, "%s=%s", name, cfg->log_dir) : 0;
    case BAGUA__WV_RDZV_TIMEOUT_MS:
      /* Every wait of the workers' library for a round (bagua_elastic_rebuild) is bounded by
       * the job's rendezvous timeout. */
      return vec_add(sv, "%s=%lld", name, (long long)cfg->rdzv_timeout_s * 1000);
    case BAGUA__WV_TE_USE_AGENT_STORE:
      /* torchrun writes str(bool): workers compare with "True". */
      return vec_add(sv, "%s=False", name);
    case BAGUA__WV_TE_ERROR_FILE:
      if (!a->error_dir) return 0;
      if (bagua__workers_error_path(a->error_dir, local_rank, path, sizeof(path)) != 0) return -1;
      return vec_add(sv, "%s=%s", name, path);
    case BAGUA__WV_ROLE_NAME:
      return vec_add(sv, "%s=%s", name, cfg->role[0] ? cfg->role : "default");
    case BAGUA__WV_OMP_NUM_THREADS:
      return cfg->omp_default ? vec_add(sv, "%s=1", name) : 0;
    case BAGUA__WV_JOB_SECRET:
      /* The job secret goes through the environment only, never a command line. */
      return a->secret && a->secret[0] ? vec_add(sv, "%s=%s", name, a->secret) : 0;
    case BAGUA__WV_COUNT:
      break;
  }
  return -1;
}

/* The environment of one worker: the agent's own, minus what the agent sets, plus the round. */
static int build_env(const bagua__agent_config_t *cfg, const bagua__worker_assign_t *a,
                     int local_rank, strvec_t *sv) {
  for (char **e = environ; e && *e; e++)
    if (!owned(cfg, *e, a->bootstrap) && vec_add(sv, "%s", *e) != 0) return -1;
  int rc = 0;
  for (int i = 0; i < BAGUA__WV_COUNT && rc == 0; i++) rc = add_var(cfg, a, local_rank, i, sv);
  return rc ? -1 : 0;
}

int bagua__workers_error_path(const char *dir, int local_rank, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/error.%d.json", dir, local_rank);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int bagua__workers_error_message(const char *dir, int local_rank, int rank, char *out, size_t len) {
  char path[4200], err[4400], why[256];
  char *buf = NULL;
  int fd = -1, rc = 0;
  if (len) out[0] = '\0';
  if (!dir || !dir[0] || bagua__workers_error_path(dir, local_rank, path, sizeof(path)) != 0)
    return 0;
  /* Without blocking, and never through a link: the worker chose what lies at this name. */
  fd = bagua__open_regular(path, O_RDONLY | O_NOFOLLOW, 0, err, sizeof(err));
  if (fd < 0) {
    if (errno == ENOENT) goto out; /* no file: the program wrote none, as most do */
    if (errno == ELOOP) snprintf(err, sizeof(err), "%s: it is a symbolic link", path);
    BAGUA_WARN(
        "agent: ignoring the error file of rank %d: %s; accepted: a regular file holding "
        "torch's error record (JSON, at most %d bytes)",
        rank, err, BAGUA_RDZV_ERROR_FILE_MAX);
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    BAGUA_WARN("agent: ignoring the error file %s of rank %d: cannot stat it: %s", path, rank,
               strerror(errno));
    goto out;
  }
  if (st.st_size > BAGUA_RDZV_ERROR_FILE_MAX) {
    BAGUA_WARN(
        "agent: ignoring the error file %s of rank %d: %lld bytes; accepted: torch's error "
        "record of at most %d bytes",
        path, rank, (long long)st.st_size, BAGUA_RDZV_ERROR_FILE_MAX);
    goto out;
  }
  /* One byte more than the bound, so a file that grew since fstat is still caught. */
  buf = malloc(BAGUA_RDZV_ERROR_FILE_MAX + 1);
  if (!buf) goto out;
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, BAGUA_RDZV_ERROR_FILE_MAX + 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n > BAGUA_RDZV_ERROR_FILE_MAX) break;
  }
  if (bagua__rdzv_error_file_decode(buf, n, out, len, why, sizeof(why)) != 0) {
    BAGUA_WARN(
        "agent: ignoring the error file %s of rank %d: %s; accepted: torch's error record, "
        "{\"message\": {\"message\": \"...\", \"extraInfo\": {...}}} or {\"message\": \"...\"}",
        path, rank, why);
    goto out;
  }
  rc = 1;
out:
  if (fd >= 0) close(fd);
  free(buf);
  return rc;
}

/* mkdir -p DIR; returns 0 or -1 with errno. */
static int make_dirs(const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

int bagua__workers_log_path(const char *log_dir, const char *node, int local_rank, char *buf,
                            size_t len) {
  int n = snprintf(buf, len, "%s/%s.%d.log", log_dir, node, local_rank);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

void bagua__workers_log_header(const char *job, int64_t round, int restart_count, int rank,
                               const char *how, char *buf, size_t len) {
  snprintf(buf, len, "=== bagua-agent: job %s round %lld restart %d rank %d%s ===\n", job,
           (long long)round, restart_count, rank, how ? how : "");
}

/* The log file of a worker is named by its node and local rank, which a worker keeps for its
 * whole life and its successors inherit, so one slot's output stays in one file across rounds
 * (a rank changes when the membership does). Each round's output is headed by a line naming
 * the round and the rank it had in it. */
static int open_log(const bagua__agent_config_t *cfg, const bagua__worker_assign_t *a, int lr,
                    int rank) {
  if (!cfg->log_dir) return -1;
  char path[4200];
  if (make_dirs(cfg->log_dir) != 0) {
    BAGUA_WARN("agent: cannot create log directory %s: %s (console output only)", cfg->log_dir,
               strerror(errno));
    return -1;
  }
  if (bagua__workers_log_path(cfg->log_dir, cfg->node_id, lr, path, sizeof(path)) != 0) {
    BAGUA_WARN("agent: the log file name under %s is too long (console output only)", cfg->log_dir);
    return -1;
  }
  /* Never blocks: a FIFO someone left at the log file's name would hold open() until a
   * reader came, with every worker of the node waiting behind it. */
  char err[4400];
  int fd = bagua__open_regular(path, O_WRONLY | O_CREAT | O_APPEND, 0644, err, sizeof(err));
  if (fd < 0) {
    BAGUA_WARN("agent: log file %s; accepted: a regular file (console output only)", err);
    return -1;
  }
  char head[512];
  bagua__workers_log_header(cfg->job_id, a->round, a->restart_count, rank, NULL, head,
                            sizeof(head));
  ssize_t w = write(fd, head, strlen(head));
  (void)w;
  return fd;
}

/* The descriptor a child reports a failed exec on (close-on-exec, so a successful exec
 * closes it and the agent reads end-of-file). */
#define EXEC_REPORT_FD 3

static void child(const bagua__agent_config_t *cfg, char **envp, int out_w, int err_w, int report_w,
                  pid_t parent) {
  /* Own process group: the agent signals the whole group, and a terminal's Ctrl-C reaches
   * only the agent, which then decides what the workers get. */
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* The agent may have died between vfork() and prctl(): then nobody would kill us. */
  if (getppid() != parent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* Ignored signals stay ignored across exec; give the program the defaults. The agent ignores
   * SIGPIPE itself, and a shell that started bagua-launch in the background made SIGINT and
   * SIGQUIT ignored too, which would leave workers deaf to the SIGINT a Ctrl-C forwards.
   * (sigaction is async-signal-safe.) */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != STDIN_FILENO) {
    dup2(devnull, STDIN_FILENO);
    close(devnull);
  }
  if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) _exit(127);
  if (out_w > STDERR_FILENO) close(out_w);
  if (err_w > STDERR_FILENO) close(err_w);
  /* dup2 clears close-on-exec on the copy: set it again, so only a failed exec reports. */
  if (report_w != EXEC_REPORT_FD && dup2(report_w, EXEC_REPORT_FD) < 0) _exit(127);
  fcntl(EXEC_REPORT_FD, F_SETFD, FD_CLOEXEC);
  closefrom(EXEC_REPORT_FD + 1);
  execvpe(cfg->argv[0], cfg->argv, envp);
  int e = errno;
  ssize_t w = write(EXEC_REPORT_FD, &e, sizeof(e));
  (void)w;
  _exit(e == ENOENT ? 127 : 126);
}

/*
 * Waits until the child has exec'ed (end-of-file on the report pipe) or failed to (it sends
 * errno and exits). Returns 0, or the exec error. The wait is short: the child does nothing
 * that blocks before exec.
 */
static int exec_result(int report_r) {
  int e = 0;
  ssize_t r;
  do r = read(report_r, &e, sizeof(e));
  while (r < 0 && errno == EINTR);
  return r == (ssize_t)sizeof(e) ? e : 0;
}

static bagua_status_t start_one(bagua__workers_t *ws, const bagua__agent_config_t *cfg,
                                const bagua__worker_assign_t *a, bagua__outpump_t *out, int lr) {
  bagua__worker_t *w = &ws->w[lr];
  int rank = a->rank_base + lr;
  strvec_t env = {0};
  int pout[2] = {-1, -1}, perr[2] = {-1, -1}, prep[2] = {-1, -1};
  bagua_status_t st = BAGUA_OK;
  if (build_env(cfg, a, lr, &env) != 0) {
    BAGUA_WARN("agent: out of memory building the environment of rank %d", rank);
    st = BAGUA_ERR_NO_MEMORY;
    goto fail;
  }
  if (pipe2(pout, O_CLOEXEC) != 0 || pipe2(perr, O_CLOEXEC) != 0 || pipe2(prep, O_CLOEXEC) != 0) {
    /* "Too many open files" under a low `ulimit -n`: the root cause names it. */
    BAGUA_WARN("agent: cannot start rank %d: pipe: %s", rank, strerror(errno));
    st = BAGUA_ERR_SYSTEM;
    goto fail;
  }
  int log_fd = open_log(cfg, a, lr, rank);
  pid_t parent = getpid();
  /* vfork, not fork: the child only makes system calls on its own stack frames and then
   * execs or exits, so it needs no copy of the agent's address space, whose page tables a
   * fork would copy (most of the CPU a node spends on a new round at a thousand nodes). The
   * agent has no signal handlers (a signalfd takes its signals), so none can run on the
   * child's side meanwhile, and only this thread waits for the exec. */
  pid_t pid = vfork();
  if (pid < 0) {
    BAGUA_WARN("agent: vfork for rank %d failed: %s", rank, strerror(errno));
    if (log_fd >= 0) close(log_fd);
    st = BAGUA_ERR_SYSTEM;
    goto fail;
  }
  if (pid == 0) child(cfg, env.v, pout[1], perr[1], prep[1], parent);
  /* Also set the group here, so a signal sent right after vfork() cannot miss it. */
  setpgid(pid, pid);
  close(pout[1]);
  close(perr[1]);
  close(prep[1]);
  pout[1] = perr[1] = prep[1] = -1;
  int e = exec_result(prep[0]);
  if (e) {
    /* The program never ran: reap the child here (it is no worker) and say why, naming the
     * program and the error, which a restart would only repeat. */
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    BAGUA_WARN("agent: cannot run \"%s\" for rank %d: %s", cfg->argv[0], rank, strerror(e));
    if (log_fd >= 0) close(log_fd);
    st = e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR || e == ELOOP ||
                 e == ENAMETOOLONG || e == EISDIR
             ? BAGUA_ERR_INVALID_USAGE
             : BAGUA_ERR_SYSTEM;
    goto fail;
  }
  close(prep[0]);
  prep[0] = -1;
  w->pid = pid;
  w->local_rank = lr;
  w->rank = rank;
  w->running = 1;
  ws->nrunning++;
  ws->n = lr + 1;
  char prefix[192];
  snprintf(prefix, sizeof(prefix), "[%s/%d] ", cfg->node_id, rank);
  bagua__sock_set_nonblock(pout[0], 1);
  bagua__sock_set_nonblock(perr[0], 1);
  int log2 = log_fd >= 0 ? fcntl(log_fd, F_DUPFD_CLOEXEC, 0) : -1;
  /* torchrun's --redirects (BAGUA_REDIRECTS, checked at start): those streams reach the log
   * file only; without a log file every line still reaches the console. */
  int mask = 0;
  const char *redirects = bagua__param_str(BAGUA_P_REDIRECTS);
  char rerr[160];
  if (redirects && redirects[0] &&
      bagua__std_mask(redirects, lr, &mask, NULL, rerr, sizeof(rerr)) != BAGUA_OK)
    mask = 0;
  bagua__outpump_add(out, pout[0], (mask & 1) && log_fd >= 0 ? -1 : STDOUT_FILENO, prefix, log_fd,
                     pid);
  bagua__outpump_add(out, perr[0], (mask & 2) && log2 >= 0 ? -1 : STDERR_FILENO, prefix, log2, pid);
  vec_free(&env);
  return BAGUA_OK;
fail:
  for (int i = 0; i < 2; i++) {
    if (pout[i] >= 0) close(pout[i]);
    if (perr[i] >= 0) close(perr[i]);
    if (prep[i] >= 0) close(prep[i]);
  }
  vec_free(&env);
  return st;
}

bagua_status_t bagua__workers_start(bagua__workers_t *ws, const bagua__agent_config_t *cfg,
                                    const bagua__worker_assign_t *a, bagua__outpump_t *out) {
  bagua__workers_clear(ws);
  BAGUA_CALLOC(ws->w, cfg->nproc);
  ws->round = a->round;
  ws->start_round = a->round;
  for (int lr = 0; lr < cfg->nproc; lr++) {
    bagua_status_t st = start_one(ws, cfg, a, out, lr);
    if (st != BAGUA_OK) return st; /* the caller stops the ones already running */
  }
  return BAGUA_OK;
}

void bagua__workers_renumber(bagua__workers_t *ws, const bagua__agent_config_t *cfg,
                             bagua__outpump_t *out, int64_t round, int restart_count,
                             int rank_base) {
  ws->round = round;
  for (int i = 0; i < ws->n; i++) {
    bagua__worker_t *w = &ws->w[i];
    w->rank = rank_base + w->local_rank;
    if (!out) continue;
    char prefix[192], head[512];
    snprintf(prefix, sizeof(prefix), "[%s/%d] ", cfg->node_id, w->rank);
    bagua__workers_log_header(cfg->job_id, round, restart_count, w->rank, " (in-process)", head,
                              sizeof(head));
    bagua__outpump_retag(out, w->pid, prefix, head);
  }
}

int bagua__workers_on_exit(bagua__workers_t *ws, pid_t pid, int wait_status) {
  for (int i = 0; i < ws->n; i++) {
    bagua__worker_t *w = &ws->w[i];
    if (w->pid != pid || !w->running) continue;
    w->running = 0;
    w->wait_status = wait_status;
    w->exit_ms = bagua__wall_ms();
    w->expected = ws->stopping;
    ws->nrunning--;
    return 1;
  }
  return 0;
}

void bagua__workers_signal(bagua__workers_t *ws, int sig) {
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].running) kill(-ws->w[i].pid, sig);
}

const bagua__worker_t *bagua__workers_first_failure(const bagua__workers_t *ws) {
  const bagua__worker_t *best = NULL;
  for (int i = 0; i < ws->n; i++) {
    const bagua__worker_t *w = &ws->w[i];
    if (w->running || w->expected) continue;
    if (WIFEXITED(w->wait_status) && WEXITSTATUS(w->wait_status) == 0) continue;
    if (!best || w->exit_ms < best->exit_ms) best = w;
  }
  return best;
}

int bagua__workers_all_succeeded(const bagua__workers_t *ws) {
  if (ws->n == 0 || ws->nrunning > 0) return 0;
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].expected || !WIFEXITED(ws->w[i].wait_status) ||
        WEXITSTATUS(ws->w[i].wait_status) != 0)
      return 0;
  return 1;
}

void bagua__workers_stop(bagua__workers_t *ws, int sig, int grace_ms, bagua__workers_wait_fn wait,
                         void *arg) {
  if (ws->nrunning == 0) return;
  ws->stopping = 1;
  if (sig) bagua__workers_signal(ws, sig);
  int64_t deadline = bagua__now_ms() + grace_ms;
  while (ws->nrunning > 0) {
    int64_t left = deadline - bagua__now_ms();
    if (left <= 0) break;
    if (wait(arg, (int)(left < 200 ? left : 200))) break;
  }
  if (ws->nrunning == 0) return;
  BAGUA_INFO(BAGUA_SUBSYS_AGENT, "agent: %d worker(s) still running after %d ms: SIGKILL",
             ws->nrunning, grace_ms);
  bagua__workers_signal(ws, SIGKILL);
  deadline = bagua__now_ms() + 5000;
  while (ws->nrunning > 0 && bagua__now_ms() < deadline) wait(arg, 100);
  for (int i = 0; i < ws->n; i++)
    if (ws->w[i].running)
      BAGUA_WARN("agent: worker pid %d (rank %d) did not die within 5 s of SIGKILL; leaving it",
                 (int)ws->w[i].pid, ws->w[i].rank);
}

void bagua__workers_clear(bagua__workers_t *ws) {
  free(ws->w);
  memset(ws, 0, sizeof(*ws));
}
