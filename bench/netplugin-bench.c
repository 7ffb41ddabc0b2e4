/*
 * netplugin-bench: loads an NCCL network plugin with dlopen() and drives its function table
 * as NCCL's proxy thread does, between two processes on this host: init, devices,
 * getProperties, listen, handle exchange (over a socketpair, standing in for NCCL's
 * bootstrap), polled connect/accept, registered buffers, posted isend/irecv polled with test,
 * close and finalize. The modes are in netplugin-bench-run.c.
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

#define CONNECT_TIMEOUT_S 30.0

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

static int load(np_api_t *a, const char *path, int version) {
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

/* ---- Pair set-up ---- */

/* listen, exchange handles, then connect and accept polled together, as NCCL does. */
static int setup(np_peer_t *p) {
  int ndev = 0;
  ncclResult_t rc;
  if ((rc = np_devices(&p->api, &ndev)) != ncclSuccess || ndev < 1) {
    fprintf(stderr, "rank %d: devices() = %d, %d devices\n", p->rank, rc, ndev);
    return -1;
  }
  ncclNetProperties_v11_t props;
  if ((rc = np_properties(&p->api, 0, &props)) != ncclSuccess) {
    fprintf(stderr, "rank %d: getProperties(0) = %d\n", p->rank, rc);
    return -1;
  }
  if (!(props.ptrSupport & NCCL_PTR_HOST) || props.maxRecvs < 1) {
    fprintf(stderr, "rank %d: device 0 cannot move host memory\n", p->rank);
    return -1;
  }
  p->max_recvs = props.maxRecvs > 16 ? 16 : props.maxRecvs;
  p->max_p2p = props.maxP2pBytes;
  if (p->rank == 0)
    printf(
        "# plugin \"%s\" api v%d: %d device(s), dev 0 = %s, %d Mbit/s, maxRecvs %d, "
        "maxP2pBytes %zu\n",
        p->api.name, p->api.version, ndev, props.name, props.speed, props.maxRecvs,
        props.maxP2pBytes);
  char mine[NCCL_NET_HANDLE_MAXSIZE] = {0}, peer[NCCL_NET_HANDLE_MAXSIZE] = {0};
  if ((rc = np_listen(&p->api, 0, mine, &p->listen_comm)) != ncclSuccess) {
    fprintf(stderr, "rank %d: listen = %d\n", p->rank, rc);
    return -1;
  }
  if (np_chan_write(p->chan, mine, sizeof(mine)) != 0 ||
      np_chan_read(p->chan, peer, sizeof(peer), 30000) != 0) {
    fprintf(stderr, "rank %d: handle exchange failed\n", p->rank);
    return -1;
  }
  double deadline = np_now() + CONNECT_TIMEOUT_S;
  long polls = 0;
  while (!p->send_comm || !p->recv_comm) {
    if (!p->send_comm && (rc = np_connect(&p->api, 0, peer, &p->send_comm)) != ncclSuccess) {
      fprintf(stderr, "rank %d: connect = %d\n", p->rank, rc);
      return -1;
    }
    if (!p->recv_comm && (rc = np_accept(&p->api, p->listen_comm, &p->recv_comm)) != ncclSuccess) {
      fprintf(stderr, "rank %d: accept = %d\n", p->rank, rc);
      return -1;
    }
    if (np_now() > deadline) {
      fprintf(stderr, "rank %d: connect/accept not done after %.0f s\n", p->rank,
              CONNECT_TIMEOUT_S);
      return -1;
    }
    if (++polls % 64 == 0) usleep(1000);
  }
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: netplugin-bench [--plugin PATH] [--api 8|9|10|11] [--mode "
          "check|throughput|latency|kill-send|kill-recv|close-early|errors|init] [--nstreams N] "
          "[--max-bytes N] "
          "[--total-bytes N] [--window N] [--expect-init-error CODE] [--netns NS0,NS1]\n");
}

static size_t parse_bytes(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end && (*end == 'K' || *end == 'k')) v *= 1024;
  if (end && (*end == 'M' || *end == 'm')) v *= 1024 * 1024;
  if (end && (*end == 'G' || *end == 'g')) v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

/* Moves this process into network namespace `name` (NULL: stays). 0 on success. */
static int enter_netns(const char *name, int rank) {
  if (!name) return 0;
  char path[300];
  snprintf(path, sizeof(path), "/var/run/netns/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "rank %d: cannot enter network namespace %s (%s): %s\n", rank, name, path,
            strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

static int run_rank(np_peer_t *p, const np_opts_t *o) {
  if (enter_netns(o->netns[p->rank], p->rank) != 0) return 1;
  int fds0 = np_count_fds(), thr0 = np_count_threads();
  if (load(&p->api, o->plugin, o->api_version) != 0) return 1;
  ncclResult_t rc = np_init(&p->api);
  if (rc != ncclSuccess) {
    fprintf(stderr, "rank %d: init = %d\n", p->rank, rc);
    return 1;
  }
  int status = 1;
  if (setup(p) != 0) goto out;
  if (np_reg_mr(&p->api, p->send_comm, NULL, 0, &p->send_mh) != ncclSuccess ||
      np_reg_mr(&p->api, p->recv_comm, NULL, 0, &p->recv_mh) != ncclSuccess) {
    fprintf(stderr, "rank %d: regMr failed\n", p->rank);
    goto out;
  }
  if (strcmp(o->mode, "check") == 0)
    status = np_run_check(p, o);
  else if (strcmp(o->mode, "throughput") == 0)
    status = np_run_throughput(p, o);
  else if (strcmp(o->mode, "latency") == 0)
    status = np_run_latency(p, o);
  else if (strcmp(o->mode, "kill-send") == 0)
    status = np_run_kill(p, o, 1);
  else if (strcmp(o->mode, "kill-recv") == 0)
    status = np_run_kill(p, o, 0);
  else if (strcmp(o->mode, "close-early") == 0)
    status = np_run_close_early(p, o);
  else if (strcmp(o->mode, "errors") == 0)
    status = np_run_errors(p, o);
out:
  if (np_close(&p->api, p) != ncclSuccess) {
    fprintf(stderr, "rank %d: close failed\n", p->rank);
    status = 1;
  }
  free(p->free_after_close);
  /* Everything the plugin opened or started for these comms must be gone again. */
  int fds1 = np_count_fds(), thr1 = np_count_threads();
#if defined(__SANITIZE_THREAD__)
  thr1 = thr0; /* ThreadSanitizer starts a helper thread of its own at some point */
#endif
  if (fds1 != fds0 || thr1 != thr0) {
    fprintf(stderr, "rank %d: leak: %d fds and %d threads before, %d and %d after close\n", p->rank,
            fds0, thr0, fds1, thr1);
    status = 1;
  } else if (p->rank == 0 && !o->quiet) {
    printf("# rank 0: %d fds and %d threads before init and after close\n", fds0, thr0);
  }
  return status;
}

int main(int argc, char **argv) {
  np_opts_t o = {.plugin = "libnccl-net-bagua.so",
                 .mode = "check",
                 .api_version = 11,
                 .max_bytes = 256u << 20,
                 .total_bytes = 512u << 20,
                 .window = 8};
  int expect_init = -1;
  /* Every option takes a value: the options come in pairs. */
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      usage();
      return 2;
    }
    if (strcmp(a, "--plugin") == 0)
      o.plugin = v;
    else if (strcmp(a, "--mode") == 0)
      o.mode = v;
    else if (strcmp(a, "--api") == 0)
      o.api_version = atoi(v);
    else if (strcmp(a, "--nstreams") == 0)
      setenv("BAGUA_NET_NSTREAMS", v, 1);
    else if (strcmp(a, "--max-bytes") == 0)
      o.max_bytes = parse_bytes(v);
    else if (strcmp(a, "--total-bytes") == 0)
      o.total_bytes = parse_bytes(v);
    else if (strcmp(a, "--window") == 0)
      o.window = atoi(v);
    else if (strcmp(a, "--expect-init-error") == 0)
      expect_init = atoi(v);
    else if (strcmp(a, "--netns") == 0) {
      static char names[256];
      char *comma;
      snprintf(names, sizeof(names), "%s", v);
      if (!(comma = strchr(names, ',')) || comma == names || !comma[1] || strchr(comma + 1, ',')) {
        fprintf(stderr, "--netns \"%s\": accepted two namespace names, NS0,NS1\n", v);
        return 2;
      }
      *comma = '\0';
      o.netns[0] = names;
      o.netns[1] = comma + 1;
    } else {
      usage();
      return 2;
    }
  }
  if (o.api_version < 8 || o.api_version > 11 || o.window < 1 || o.window > 64) {
    usage();
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(o.mode, "init") == 0 || expect_init >= 0) {
    /* Only init: for bad settings, which must be refused before any connection exists. */
    np_api_t a = {0};
    if (load(&a, o.plugin, o.api_version) != 0) return 1;
    ncclResult_t rc = np_init(&a);
    int want = expect_init >= 0 ? expect_init : 0;
    printf("# init returned %d (expected %d)\n", rc, want);
    if (rc == ncclSuccess && a.version == 11) ((const ncclNet_v11_t *)a.table)->finalize(a.ctx);
    return (int)rc == want ? 0 : 1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    perror("socketpair");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  np_peer_t p = {0};
  if (pid == 0) {
    close(sv[0]);
    p.rank = 1;
    p.chan = sv[1];
    _exit(run_rank(&p, &o));
  }
  close(sv[1]);
  p.rank = 0;
  p.chan = sv[0];
  p.child = pid;
  int status = run_rank(&p, &o);
  close(sv[0]);
  /* The child finishes on its own (or, in the kill modes, was killed): wait a bounded time. */
  int wst = 0;
  double deadline = np_now() + 60;
  pid_t w = 0;
  while ((w = waitpid(pid, &wst, WNOHANG)) == 0 && np_now() < deadline) usleep(10000);
  if (w == 0) {
    fprintf(stderr, "rank 1 did not exit: killed\n");
    kill(pid, SIGKILL);
    waitpid(pid, &wst, 0);
    return 1;
  }
  int kill_mode = strncmp(o.mode, "kill", 4) == 0;
  if (w == pid && !kill_mode && !(WIFEXITED(wst) && WEXITSTATUS(wst) == 0)) {
    fprintf(stderr, "rank 1 failed (wait status 0x%x)\n", wst);
    status = 1;
  }
  printf("# %s: %s\n", o.mode, status == 0 ? "PASS" : "FAIL");
  return status;
}
