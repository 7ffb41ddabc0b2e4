/*
 * netplugin-bench's entry point (usage in netplugin-bench.c): the options, the pair of
 * processes (network namespaces, connections set up as NCCL's proxy does) and the mode each
 * runs (netplugin-bench-run.c).
 */
#include "netplugin-bench.h"

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
#include <unistd.h>

#define CONNECT_TIMEOUT_S 30.0

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
  if (np_load(&p->api, o->plugin, o->api_version) != 0) return 1;
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
    if (np_load(&a, o.plugin, o.api_version) != 0) return 1;
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
