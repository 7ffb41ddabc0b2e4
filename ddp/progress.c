/*
 * Progress reports for the worker's agent (docs/observability.md): when BAGUA_PROGRESS_FILE
 * names a file (bagua-agent sets it to a path in its private directory), the DDP context keeps
 * a 128-byte record there up to date after every completed step: step count, the program's
 * stated total, bytes sent, communication time and the wall clock of the step. The agent
 * reads the file about once a second and publishes it in etcd.
 *
 * Cost: the file is mapped once (open, reserve its blocks, mmap when the context becomes ready;
 * reserving first makes a full file system one warning, never a SIGBUS in a later step); a step
 * then only stores a few integers into the mapping, bracketed by a sequence count the reader
 * checks, plus one clock_gettime (vDSO, no system call). Nothing is written, synced or
 * flushed per step: the mapping is the page cache the agent's pread sees. Without the
 * variable nothing happens at all. A file that cannot be opened or mapped is reported once
 * and reporting stays off; training is never affected.
 *
 * Threading: the training thread only (bagua_ddp_ready, bagua_ddp_step, bagua_ddp_destroy).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/file.h"
#include "common/log.h"
#include "common/params.h"
#include "common/rdzv/rdzv.h"
#include "common/time.h"
#include "ddp_internal.h"

void bagua__ddp_progress_open(bagua_ddp_t *d) {
  if (d->progress) return;
  const char *path = bagua__param_str(BAGUA_P_PROGRESS_FILE);
  if (!path || !path[0]) return;
  char err[512];
  int fd = bagua__open_regular(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600, err, sizeof(err));
  if (fd < 0) {
    BAGUA_WARN(
        "BAGUA_PROGRESS_FILE %s; this worker reports no progress to its agent (training "
        "is not affected)",
        err);
    return;
  }
  /* The record's blocks are reserved before the file is mapped: on a full file system a store
   * into a mapped page with no block behind it raises SIGBUS and kills the worker, where this
   * is one warning. */
  int e = bagua__reserve_space(fd, sizeof(bagua__progress_file_t));
  const char *what = "reserve space for";
  void *map = MAP_FAILED;
  if (e == 0) {
    what = "map";
    map = mmap(NULL, sizeof(bagua__progress_file_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) e = errno;
  }
  close(fd); /* the mapping keeps the file */
  if (map == MAP_FAILED) {
    BAGUA_WARN(
        "BAGUA_PROGRESS_FILE=%s: cannot %s it: %s; this worker reports no progress to its "
        "agent (training is not affected)",
        path, what, strerror(e));
    return;
  }
  bagua__progress_file_t *p = map;
  memset(p, 0, sizeof(*p));
  p->magic = BAGUA_PROGRESS_FILE_MAGIC;
  p->version = BAGUA_PROGRESS_FILE_VERSION;
  p->size = sizeof(*p);
  p->pid = getpid();
  if (d->total_steps == 0) d->total_steps = bagua__param_int(BAGUA_P_TOTAL_STEPS);
  p->total_steps = d->total_steps;
  p->step = d->steps;
  p->start_ms = bagua__wall_ms();
  d->progress = p;
}

void bagua__ddp_progress_update(bagua_ddp_t *d) {
  bagua__progress_file_t *p = d->progress;
  if (!p) return;
  /* The sequence count is odd while the fields change: a reader that copied the record in
   * between sees an odd or a changed count and copies again. Release ordering keeps the
   * stores inside the bracket. */
  uint64_t seq = p->seq;
  __atomic_store_n(&p->seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  p->step = d->steps;
  p->total_steps = d->total_steps;
  p->samples = d->samples;
  p->bytes_sent = (int64_t)d->st.bytes_total;
  p->comm_us = (int64_t)(d->st.comm_s_total * 1e6);
  p->update_ms = bagua__wall_ms();
  __atomic_store_n(&p->seq, seq + 2, __ATOMIC_RELEASE);
}

void bagua__ddp_progress_close(bagua_ddp_t *d) {
  if (!d->progress) return;
  munmap(d->progress, sizeof(bagua__progress_file_t));
  d->progress = NULL;
}

bagua_status_t bagua_ddp_set_total_steps(bagua_ddp_t *d, int64_t total_steps) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (total_steps < 0 || total_steps > ((int64_t)1 << 52)) {
    BAGUA_WARN("bagua_ddp_set_total_steps: %lld is invalid; accepted: 0 (unknown) to 2^52",
               (long long)total_steps);
    return BAGUA_ERR_INVALID_ARG;
  }
  d->total_steps = total_steps;
  bagua__ddp_progress_update(d);
  return BAGUA_OK;
}

bagua_status_t bagua_ddp_add_samples(bagua_ddp_t *d, int64_t samples) {
  if (!d) return BAGUA_ERR_INVALID_ARG;
  if (samples < 0 || samples > ((int64_t)1 << 52) - d->samples) {
    BAGUA_WARN("bagua_ddp_add_samples: %lld is invalid; accepted: 0 to 2^52 in all",
               (long long)samples);
    return BAGUA_ERR_INVALID_ARG;
  }
  d->samples += samples;
  return BAGUA_OK;
}
