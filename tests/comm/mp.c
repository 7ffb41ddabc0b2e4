#include "mp.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/params.h"
#include "common/sock.h"

double mp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int mp_free_port(void) {
  int port = bagua__sock_spare_port(htonl(INADDR_LOOPBACK));
  if (port < 0) {
    fprintf(stderr, "FAIL: no free loopback port\n");
    exit(1);
  }
  return port;
}

void mp_apply_env(const char *list) {
  if (!list) return;
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", list);
  for (char *save = NULL, *tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) continue;
    *eq = '\0';
    setenv(tok, eq + 1, 1);
  }
  bagua__params_reload();
}

void mp_config(const mp_opts_t *o, int port, int rank, bagua_comm_config_t *cfg) {
  static char boot[64], node[32];
  bagua_comm_config_t def = BAGUA_COMM_CONFIG_INIT;
  *cfg = def;
  snprintf(boot, sizeof(boot), "tcp://127.0.0.1:%d", port);
  cfg->bootstrap = boot;
  cfg->rank = rank;
  cfg->size = o->nranks;
  cfg->transport = o->transport;
  cfg->job_id = "test-job";
  if (o->ranks_per_node > 0) {
    snprintf(node, sizeof(node), "node%d", rank / o->ranks_per_node);
    cfg->node_id = node;
  }
  if (o->timeout_ms > 0) cfg->timeout_ms = o->timeout_ms;
  cfg->connect_timeout_ms = 20000;
}

int mp_run(const mp_opts_t *o, mp_body_fn body, void *arg) {
  int port = mp_free_port();
  pid_t *pids = calloc((size_t)o->nranks, sizeof(pid_t));
  if (!pids) {
    fprintf(stderr, "mp_run: no memory for %d ranks\n", o->nranks);
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < o->nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      mp_apply_env(o->setenv_list);
      bagua_comm_config_t cfg;
      mp_config(o, port, r, &cfg);
      bagua_comm_t *c = NULL;
      bagua_status_t st = bagua_comm_create(&cfg, &c);
      if (st != BAGUA_OK) {
        fprintf(stderr, "rank %d: bagua_comm_create failed: %s\n", r, bagua_err_name(st));
        _exit(3);
      }
      int rc = body(c, arg);
      bagua_comm_destroy(c);
      fflush(stdout);
      _exit(rc);
    }
  }
  double deadline = mp_now() + (o->deadline_s ? o->deadline_s : 60);
  int failed = 0, left = o->nranks;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      left--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "a rank (pid %d) failed: %s %d\n", (int)p,
                WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        failed = 1;
      }
      continue;
    }
    if (mp_now() > deadline) {
      fprintf(stderr, "deadline passed with %d ranks still running: killing them\n", left);
      for (int r = 0; r < o->nranks; r++) kill(pids[r], SIGKILL);
      while (waitpid(-1, &status, 0) > 0) {
      }
      free(pids);
      return 1;
    }
    usleep(2000);
  }
  free(pids);
  return failed;
}

void mp_thread_sched(pid_t tid, char *state, unsigned long *ticks) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may contain blanks */
  unsigned long ut = 0, st = 0;
  if (!p ||
      sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", state, &ut, &st) != 3) {
    fprintf(stderr, "FAIL: cannot read the scheduling state of thread %d from %s\n", (int)tid,
            path);
    exit(1);
  }
  *ticks = ut + st;
}

void mp_wait_blocked(pid_t tid) {
  char state;
  unsigned long t0, t;
  mp_thread_sched(tid, &state, &t0);
  double until = mp_now() + 20;
  for (;;) {
    mp_thread_sched(tid, &state, &t);
    if (state == 'S' || state == 'D' || t >= t0 + 2) return;
    if (mp_now() >= until) {
      fprintf(stderr, "FAIL: thread %d did not block within 20 s (state %c)\n", (int)tid, state);
      exit(1);
    }
    usleep(200);
  }
}
