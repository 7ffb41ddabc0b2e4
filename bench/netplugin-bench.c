/*
 * netplugin-bench: loads an NCCL network plugin with dlopen() and drives its function table
 * as NCCL's proxy thread does, between two processes on this host: init, devices,
 * getProperties, listen, handle exchange (over a socketpair, standing in for NCCL's
 * bootstrap), polled connect/accept, registered buffers, posted isend/irecv polled with test,
 * close and finalize. This file is the table's wrappers and the helpers every mode uses; the
 * modes are in netplugin-bench-run.c, the pair's set-up and main() in netplugin-bench-main.c
 * (so the modes call down into the wrappers and nothing calls back up).
 *
 *   netplugin-bench [--plugin PATH] [--api 8|9|10|11] [--mode MODE] [--nstreams N]
 *                   [--max-bytes N] [--total-bytes N] [--window N] [--expect-init-error CODE]
 *                   [--netns NS0,NS1]
 *
 * --netns runs rank 0 in network namespace NS0 and rank 1 in NS1 (names under /var/run/netns,
 * as `ip netns` makes them; bench/netsim/netsim.sh builds shaped ones), so the plugin's
 * connections cross an emulated link instead of loopback. Needs root.
 * MODE: check (default), throughput, latency, kill-send, kill-recv, close-early, errors, init.
 * Exit status: 0 pass, 1 fail, 77 skipped.
 */
#include "netplugin-bench.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double np_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int np_count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory stream's own fd */
}

int np_count_threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

int np_chan_write(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int np_chan_read(int fd, void *buf, size_t len, int timeout_ms) {
  char *p = buf;
  double deadline = np_now() + timeout_ms / 1000.0;
  while (len > 0) {
    int left = (int)((deadline - np_now()) * 1000);
    if (left <= 0) return -1;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return -1;
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int np_barrier(np_peer_t *p) {
  char b = 'B';
  if (np_chan_write(p->chan, &b, 1) != 0) return -1;
  return np_chan_read(p->chan, &b, 1, 120000);
}

/* ---- The plugin table, whatever its version ---- */

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

#define T(v) ((const ncclNet_v##v##_t *)a->table)

int np_load(np_api_t *a, const char *path, int version) {
  a->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!a->dl) {
    fprintf(stderr, "netplugin-bench: dlopen(%s) failed: %s\n", path, dlerror());
    return -1;
  }
  char sym[32];
  snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", version);
  a->table = dlsym(a->dl, sym);
  if (!a->table) {
    fprintf(stderr, "netplugin-bench: %s has no %s\n", path, sym);
    return -1;
  }
  a->version = version;
  a->name = *(const char *const *)a->table; /* every version starts with the name */
  return 0;
}

ncclResult_t np_init(np_api_t *a) {
  switch (a->version) {
    case 11:
      return T(11)->init(&a->ctx, 0x5eed, NULL, logger, NULL);
    case 10:
      return T(10)->init(logger, NULL);
    case 9:
      return T(9)->init(logger);
    default:
      return T(8)->init(logger);
  }
}

ncclResult_t np_devices(np_api_t *a, int *n) {
  /* devices sits at the same slot in every version. */
  return T(11)->devices(n);
}

ncclResult_t np_properties(np_api_t *a, int dev, ncclNetProperties_v11_t *p) {
  memset(p, 0, sizeof(*p));
  if (a->version == 11) return T(11)->getProperties(dev, p);
  if (a->version >= 9) {
    ncclNetProperties_v9_t q;
    ncclResult_t rc = T(9)->getProperties(dev, &q);
    memcpy(p, &q, sizeof(q));
    p->maxMultiRequestSize = 1;
    return rc;
  }
  ncclNetProperties_v8_t q;
  ncclResult_t rc = T(8)->getProperties(dev, &q);
  p->name = q.name;
  p->ptrSupport = q.ptrSupport;
  p->speed = q.speed;
  p->maxComms = q.maxComms;
  p->maxRecvs = q.maxRecvs;
  p->maxP2pBytes = 0x7fffffff; /* an int size is all v8 can carry */
  return rc;
}

ncclResult_t np_listen(np_api_t *a, int dev, void *handle, void **lc) {
  if (a->version == 11) return T(11)->listen(a->ctx, dev, handle, lc);
  return T(10)->listen(dev, handle, lc);
}

ncclResult_t np_connect(np_api_t *a, int dev, void *handle, void **sc) {
  ncclNetDeviceHandle_v11_t *dh = NULL;
  switch (a->version) {
    case 11:
      return T(11)->connect(a->ctx, dev, handle, sc, &dh);
    case 10: {
      ncclNetCommConfig_v10_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return T(10)->connect(dev, &cfg, handle, sc, &dh);
    }
    case 9:
      return T(9)->connect(dev, handle, sc, &dh);
    default:
      return T(8)->connect(dev, handle, sc, &dh);
  }
}

ncclResult_t np_accept(np_api_t *a, void *lc, void **rc) {
  ncclNetDeviceHandle_v11_t *dh = NULL;
  return T(11)->accept(lc, rc, &dh);
}

ncclResult_t np_reg_mr(np_api_t *a, void *comm, void *data, size_t size, void **mh) {
  return T(11)->regMr(comm, data, size, NCCL_PTR_HOST, mh);
}

ncclResult_t np_isend(np_api_t *a, void *sc, void *data, size_t size, int tag, void *mh,
                      void **req) {
  switch (a->version) {
    case 11:
      return T(11)->isend(sc, data, size, tag, mh, NULL, req);
    case 10:
      return T(10)->isend(sc, data, size, tag, mh, NULL, req);
    case 9:
      return T(9)->isend(sc, data, size, tag, mh, req);
    default:
      return T(8)->isend(sc, data, (int)size, tag, mh, req);
  }
}

ncclResult_t np_irecv(np_api_t *a, void *rc, int n, void **data, size_t *sizes, int *tags,
                      void **mh, void **req) {
  void *ph[16] = {0};
  switch (a->version) {
    case 11:
      return T(11)->irecv(rc, n, data, sizes, tags, mh, ph, req);
    case 10:
      return T(10)->irecv(rc, n, data, sizes, tags, mh, ph, req);
    case 9:
      return T(9)->irecv(rc, n, data, sizes, tags, mh, req);
    default: {
      int isz[16];
      for (int k = 0; k < n && k < 16; k++) isz[k] = (int)sizes[k];
      return T(8)->irecv(rc, n, data, isz, tags, mh, req);
    }
  }
}

ncclResult_t np_test(np_api_t *a, void *req, int *done, int *sizes) {
  return T(11)->test(req, done, sizes);
}

ncclResult_t np_close(np_api_t *a, np_peer_t *p) {
  ncclResult_t rc = ncclSuccess, r;
  /* The close calls and deregMr share their slots across versions. */
  if (p->send_comm) {
    if (p->send_mh) T(11)->deregMr(p->send_comm, p->send_mh);
    if ((r = T(11)->closeSend(p->send_comm)) != ncclSuccess) rc = r;
  }
  if (p->recv_comm) {
    if (p->recv_mh) T(11)->deregMr(p->recv_comm, p->recv_mh);
    if ((r = T(11)->closeRecv(p->recv_comm)) != ncclSuccess) rc = r;
  }
  if (p->listen_comm && (r = T(11)->closeListen(p->listen_comm)) != ncclSuccess) rc = r;
  p->send_comm = p->recv_comm = p->listen_comm = NULL;
  if (a->version == 11 && (r = T(11)->finalize(a->ctx)) != ncclSuccess) rc = r;
  a->ctx = NULL;
  return rc;
}

#undef T
