#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "etcd_server.h"
#include "launch_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long long lu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

pid_t lu_spawn(char *const argv[], char *const env[], const char *out_path) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    int fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (null >= 0) dup2(null, 0);
    for (int i = 0; env && env[i]; i++) {
      if (env[i][0] == '-') {
        unsetenv(env[i] + 1);
        continue;
      }
      char *eq = strchr(env[i], '=');
      if (!eq) continue;
      char name[256];
      snprintf(name, sizeof(name), "%.*s", (int)(eq - env[i]), env[i]);
      setenv(name, eq + 1, 1);
    }
    execv(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

int lu_wait(pid_t pid, int timeout_ms) {
  long long deadline = lu_now_ms() + timeout_ms;
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (lu_now_ms() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    sleep_ms(5);
  }
}

int lu_run(char *const argv[], char *const env[], const char *out_path, int timeout_ms) {
  return lu_wait(lu_spawn(argv, env, out_path), timeout_ms);
}

char *lu_read(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t n;
  while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 2) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

char *lu_last_line(const char *text) {
  const char *end = text + strlen(text);
  while (end > text && end[-1] == '\n') end--;
  const char *start = end;
  while (start > text && start[-1] != '\n') start--;
  return strndup(start, (size_t)(end - start));
}

/* Scans /proc; returns the number of matches and the first matching pid in *first. */
static int scan_procs(const char *needle, pid_t *first) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  pid_t self = getpid();
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == self) continue;
    char path[64], buf[8192];
    snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) continue; /* zombies and kernel threads have no command line */
    for (ssize_t i = 0; i < len; i++)
      if (buf[i] == '\0') buf[i] = ' ';
    buf[len] = '\0';
    if (!strstr(buf, needle)) continue;
    if (n++ == 0 && first) *first = (pid_t)pid;
  }
  closedir(d);
  return n;
}

int lu_count_procs(const char *needle) {
  return scan_procs(needle, NULL);
}

pid_t lu_find_proc(const char *needle) {
  pid_t pid = -1;
  scan_procs(needle, &pid);
  return pid;
}

int lu_count_marked(const char *entry) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  size_t elen = strlen(entry);
  pid_t self = getpid();
  struct dirent *e;
  char *buf = malloc(1 << 20);
  while (buf && (e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == self) continue;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t len = 0, r;
    while (len < (1 << 20) && (r = read(fd, buf + len, (size_t)((1 << 20) - len))) > 0) len += r;
    close(fd);
    /* Zombies keep no environment; entries are NUL-separated. */
    for (ssize_t i = 0; i < len;) {
      size_t l = strnlen(buf + i, (size_t)(len - i));
      if (l == elen && memcmp(buf + i, entry, elen) == 0) {
        n++;
        break;
      }
      i += (ssize_t)l + 1;
    }
  }
  free(buf);
  closedir(d);
  return n;
}

int lu_wait_no_marked(const char *entry, int timeout_ms) {
  long long deadline = lu_now_ms() + timeout_ms;
  while (lu_count_marked(entry) > 0) {
    if (lu_now_ms() >= deadline) return 0;
    sleep_ms(10);
  }
  return 1;
}

int lu_wait_no_procs(const char *needle, int timeout_ms) {
  long long deadline = lu_now_ms() + timeout_ms;
  while (lu_count_procs(needle) > 0) {
    if (lu_now_ms() >= deadline) return 0;
    sleep_ms(10);
  }
  return 1;
}

int lu_wait_file(const char *path, int timeout_ms) {
  long long deadline = lu_now_ms() + timeout_ms;
  while (access(path, F_OK) != 0) {
    if (lu_now_ms() >= deadline) return 0;
    sleep_ms(10);
  }
  return 1;
}

int lu_wait_gone(const char *path, int timeout_ms) {
  long long deadline = lu_now_ms() + timeout_ms;
  while (access(path, F_OK) == 0) {
    if (lu_now_ms() >= deadline) return 0;
    sleep_ms(10);
  }
  return 1;
}

int lu_find_etcd_dir(const char *text, char *out, size_t len) {
  const char *p = strstr(text, "(dir /tmp/bagua-launch-");
  if (!p) return 0;
  p += 5;
  size_t n = strcspn(p, ")");
  snprintf(out, len, "%.*s", (int)n, p);
  return 1;
}

void lu_unique(const char *prefix, char *out, size_t len) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(out, len, "%s-%d-%ld", prefix, (int)getpid(), (long)(ts.tv_nsec % 1000000));
}

void lu_mkdtemp(char *out, size_t len) {
  snprintf(out, len, "/tmp/bagua-launch-test-XXXXXX");
  if (!mkdtemp(out)) {
    perror("mkdtemp");
    exit(1);
  }
}

void lu_rmtree(const char *dir) {
  if (dir && dir[0]) bagua__etcd_local_remove_tree(dir);
}

void lu_dump(const char *path) {
  char *t = lu_read(path);
  fprintf(stderr, "---- %s ----\n%s---- end ----\n", path, t ? t : "(unreadable)\n");
  free(t);
}

pid_t lu_start_launcher(const char *launcher, char *const *prefix, char *const *args,
                        const char *tag, char *marker, size_t marker_len, char *const *extra_env,
                        int n_extra, const char *out_path) {
  char *argv[64], *env[24];
  int n = 0, ne = 0;
  argv[n++] = (char *)launcher;
  for (int i = 0; prefix && prefix[i] && n < 40; i++) argv[n++] = prefix[i];
  for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  char unique[64];
  lu_unique(tag, unique, sizeof(unique));
  snprintf(marker, marker_len, "BAGUA_TEST_MARKER=%s", unique);
  env[ne++] = marker;
  env[ne++] = "BAGUA_DEBUG=INFO";
  env[ne++] = "BAGUA_DEBUG_SUBSYS=LAUNCH";
  env[ne++] = "-BAGUA_RDZV_ENDPOINT";
  env[ne++] = "-BAGUA_JOB_ID";
  for (int i = 0; i < n_extra && ne < 23; i++) env[ne++] = extra_env[i];
  env[ne] = NULL;
  return lu_spawn(argv, env, out_path);
}
