/* Elastic marks (see marks.h). */
#include "marks.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/params.h"

const char *bagua__marks_parent(void) {
  /* The registry keeps an empty TMPDIR as set; an empty directory name means the default. */
  const char *tmp = bagua__param_str(BAGUA_P_TMPDIR);
  return tmp && tmp[0] ? tmp : bagua__param_str_default(BAGUA_P_TMPDIR);
}

int bagua__marks_create(const char *node_id, char *dir, size_t len) {
  const char *tmp = bagua__marks_parent();
  /* The pid in the name lets whoever outlives this agent (bagua-launch, after reaping it)
   * find and remove the directory of a dead agent (launcher/tmpdirs.c). */
  int n = snprintf(dir, len, "%s/bagua-agent.%s.%d.XXXXXX", tmp, node_id, (int)getpid());
  if (n < 0 || (size_t)n >= len) {
    dir[0] = '\0';
    errno = ENAMETOOLONG;
    return -1;
  }
  if (!mkdtemp(dir)) {
    int e = errno;
    dir[0] = '\0';
    errno = e;
    return -1;
  }
  return 0;
}

void bagua__marks_clear(const char *dir) {
  if (!dir || !dir[0]) return;
  DIR *d = opendir(dir);
  if (!d) return;
  /* Only the workers write here, and only plain files: no recursion is needed, and unlinkat
   * relative to the open directory cannot be led elsewhere by a renamed path. */
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

void bagua__marks_remove(const char *dir) {
  if (!dir || !dir[0]) return;
  bagua__marks_clear(dir);
  rmdir(dir);
}

int bagua__marks_path(const char *dir, int local_rank, int64_t round, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/elastic.%d.%lld", dir, local_rank, (long long)round);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

int bagua__marks_missing(const char *dir, const bagua__workers_t *ws) {
  for (int i = 0; i < ws->n; i++) {
    const bagua__worker_t *w = &ws->w[i];
    if (!w->running) continue;
    char path[4200];
    if (bagua__marks_path(dir, w->local_rank, ws->start_round, path, sizeof(path)) != 0 ||
        access(path, F_OK) != 0)
      return w->local_rank;
  }
  return -1;
}
