/*
 * netplugin-bench: drives an NCCL network plugin's function table the way NCCL's proxy thread
 * does, between two processes on this host (docs/net-plugin.md).
 *
 * netplugin-bench.c loads the plugin and hides the differences between plugin API versions;
 * netplugin-bench-run.c holds the modes (correctness, throughput, peer failure, bad
 * arguments); netplugin-bench-main.c sets up the pair of processes and their connections and
 * runs a mode.
 */
#ifndef BAGUA_BENCH_NETPLUGIN_BENCH_H
#define BAGUA_BENCH_NETPLUGIN_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl_net.h"

/* One loaded plugin table, whatever its version. */
typedef struct {
  int version; /* 8..11 */
  const void *table;
  void *ctx; /* v11 per-communicator context */
  void *dl;
  const char *name;
} np_api_t;

/* One side of the pair: its rank, the side channel to the peer, and its comms. */
typedef struct {
  np_api_t api;
  int rank;    /* 0: parent, 1: child */
  int chan;    /* socketpair end for handle exchange and barriers */
  pid_t child; /* rank 0 only */
  void *listen_comm, *send_comm, *recv_comm;
  void *send_mh, *recv_mh;
  int max_recvs;
  size_t max_p2p;
  /* A buffer of a request that failed: the plugin may still touch it until the comms are
   * closed (as with NCCL, buffers stay valid until close), so it is freed after close. */
  void *free_after_close;
} np_peer_t;

typedef struct {
  const char *plugin;
  const char *mode;
  int api_version;
  size_t max_bytes;
  size_t total_bytes;
  int window;
  int quiet;
  const char *netns[2]; /* network namespace of rank 0 and rank 1; NULL: this one */
} np_opts_t;

/* Loads `path` and its ncclNetPlugin_v<version> table into a; 0, or -1 with a message. */
int np_load(np_api_t *a, const char *path, int version);
/* API wrappers (netplugin-bench.c): every size is size_t here and converted per version. */
ncclResult_t np_init(np_api_t *a);
ncclResult_t np_devices(np_api_t *a, int *n);
ncclResult_t np_properties(np_api_t *a, int dev, ncclNetProperties_v11_t *p);
ncclResult_t np_listen(np_api_t *a, int dev, void *handle, void **lc);
ncclResult_t np_connect(np_api_t *a, int dev, void *handle, void **sc);
ncclResult_t np_accept(np_api_t *a, void *lc, void **rc);
ncclResult_t np_reg_mr(np_api_t *a, void *comm, void *data, size_t size, void **mh);
ncclResult_t np_isend(np_api_t *a, void *sc, void *data, size_t size, int tag, void *mh,
                      void **req);
ncclResult_t np_irecv(np_api_t *a, void *rc, int n, void **data, size_t *sizes, int *tags,
                      void **mh, void **req);
ncclResult_t np_test(np_api_t *a, void *req, int *done, int *sizes);
ncclResult_t np_close(np_api_t *a, np_peer_t *p);

/* Side channel helpers: exact reads and writes with a bounded wait; 0 on success. */
int np_chan_write(int fd, const void *buf, size_t len);
int np_chan_read(int fd, void *buf, size_t len, int timeout_ms);
int np_barrier(np_peer_t *p);

/* Process state, for the leak checks. */
int np_count_fds(void);
int np_count_threads(void);
double np_now(void);

/* Modes (netplugin-bench-run.c); each returns the process exit status. */
int np_run_check(np_peer_t *p, const np_opts_t *o);
int np_run_throughput(np_peer_t *p, const np_opts_t *o);
int np_run_latency(np_peer_t *p, const np_opts_t *o);
int np_run_kill(np_peer_t *p, const np_opts_t *o, int survivor_sends);
int np_run_errors(np_peer_t *p, const np_opts_t *o);
int np_run_close_early(np_peer_t *p, const np_opts_t *o);

#endif
