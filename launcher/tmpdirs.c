/*
 * Private directories of agents that died without removing them.
 *
 * Each bagua-agent keeps its workers' elastic marks in $TMPDIR/bagua-agent.<node>.<pid>.XXXXXX
 * and removes it when it exits; an agent killed with SIGKILL (by the launcher's kill path, or
 * by the OOM killer) cannot. Whoever outlives it removes it: bagua-launch for the local agents
 * it started, once they have been reaped. The pid in the name is what makes this safe: a
 * directory is only removed when its pid is one of ours and no longer runs, never one of
 * another job on the same machine, whose node id may well be the same ("localhost").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agents.h"
#include "common/log.h"

/* The pid field of "bagua-agent.<node>.<pid>.XXXXXX", or -1 when the name has another form. */
static long name_pid(const char *name) {
  if (strncmp(name, "bagua-agent.", 12) != 0) return -1;
  const char *last = strrchr(name, '.');
  if (!last || strlen(last + 1) != 6 || last == name + 11) return -1;
  const char *p = last - 1;
  while (p > name + 11 && *p >= '0' && *p <= '9') p--;
  if (*p != '.' || p == last - 1 || p == name + 11) return -1;
  return strtol(p + 1, NULL, 10);
}

/* Removes the files of a private directory (the agent writes plain files only) and the
 * directory itself, relative to the open parent so that a renamed path cannot lead elsewhere. */
static int remove_dir(int parent, const char *name) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
  return unlinkat(parent, name, AT_REMOVEDIR);
}

int bagua__launch_sweep_agent_dirs(const char *parent, pid_t pid) {
  if (!parent || !parent[0]) parent = "/tmp";
  DIR *d = opendir(parent);
  if (!d) return 0;
  int removed = 0;
  struct dirent *e;
  /* A pid that runs again (reused) keeps its directories: they may be its own. */
  int dead = kill(pid, 0) != 0 && errno == ESRCH;
  while (dead && (e = readdir(d)) != NULL) {
    if (name_pid(e->d_name) != (long)pid) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    if (remove_dir(dirfd(d), e->d_name) == 0) {
      removed++;
      BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "removed %s/%s left by agent pid %d", parent, e->d_name,
                 (int)pid);
    }
  }
  closedir(d);
  return removed;
}
