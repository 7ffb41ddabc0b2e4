/*
 * The worker program the agent tests run. It writes the variables the agent gave it to
 * OUT/r<ROUND>.<NODE>.<LOCAL_RANK>.env (atomically, via rename), prints a line on stdout and
 * one on stderr, and then does what the flags say:
 *   --out DIR             where to write the env file (required)
 *   --fail-rank R         rank R fails ...
 *   --code C              ... by exiting with C (default 1) ...
 *   --signal S            ... or by raising signal S
 *   --fail-until K        ... only while BAGUA_RESTART_COUNT < K (default: always)
 *   --wait FILE           every rank waits until FILE exists (at most 50 s), then exits 0
 * Like `env`, it reads its environment by walking environ.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *env(const char *name) {
  size_t n = strlen(name);
  for (char **e = environ; *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return "";
}

static const char *const dumped[] = {"RANK",
                                     "LOCAL_RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_WORLD_SIZE",
                                     "GROUP_RANK",
                                     "GROUP_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "BAGUA_JOB_ID",
                                     "BAGUA_NODE_ID",
                                     "BAGUA_ROUND",
                                     "BAGUA_RESTART_COUNT",
                                     "BAGUA_MAX_RESTARTS",
                                     "BAGUA_BOOTSTRAP",
                                     "BAGUA_RDZV_ENDPOINT",
                                     "TORCHELASTIC_RESTART_COUNT",
                                     "TORCHELASTIC_RUN_ID",
                                     "BAGUA_ELASTIC_MODE",
                                     "AGENT_TEST_MARK",
                                     "BAGUA_JOB_SECRET",
                                     "BAGUA_RDZV_TIMEOUT_MS",
                                     NULL};

int main(int argc, char **argv) {
  const char *out = NULL, *wait_file = NULL;
  int fail_rank = -1, code = 1, sig = 0, fail_until = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--out"))
      out = argv[i + 1];
    else if (!strcmp(argv[i], "--fail-rank"))
      fail_rank = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--code"))
      code = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--signal"))
      sig = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--fail-until"))
      fail_until = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--wait"))
      wait_file = argv[i + 1];
    else {
      fprintf(stderr, "agent_worker: unknown flag %s\n", argv[i]);
      return 64;
    }
  }
  if (!out) {
    fprintf(stderr, "agent_worker: --out DIR is required\n");
    return 64;
  }
  int rank = atoi(env("RANK"));
  char path[1024], tmp[1100];
  snprintf(path, sizeof(path), "%s/r%s.%s.%s.env", out, env("BAGUA_ROUND"), env("BAGUA_NODE_ID"),
           env("LOCAL_RANK"));
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "agent_worker: cannot write %s: %s\n", tmp, strerror(errno));
    return 65;
  }
  for (int i = 0; dumped[i]; i++) fprintf(f, "%s=%s\n", dumped[i], env(dumped[i]));
  /* Then everything else it inherited, so tests can check the whole worker contract. */
  for (char **e = environ; *e; e++) {
    size_t n = strcspn(*e, "=");
    int listed = 0;
    for (int i = 0; dumped[i] && !listed; i++)
      listed = strlen(dumped[i]) == n && strncmp(dumped[i], *e, n) == 0;
    if (!listed && strchr(*e, '\n') == NULL) fprintf(f, "%s\n", *e);
  }
  fprintf(f, "PID=%d\n", (int)getpid());
  fclose(f);
  rename(tmp, path);
  printf("hello from rank %d of %s\n", rank, env("WORLD_SIZE"));
  fprintf(stderr, "stderr line of rank %d\n", rank);
  fflush(stdout);

  int restart = atoi(env("BAGUA_RESTART_COUNT"));
  if (rank == fail_rank && (fail_until < 0 || restart < fail_until)) {
    if (sig) raise(sig);
    return code;
  }
  if (wait_file) {
    for (int i = 0; i < 5000 && access(wait_file, F_OK) != 0; i++) {
      struct timespec ts = {0, 10 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}
