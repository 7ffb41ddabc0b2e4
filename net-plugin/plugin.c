/*
 * The tables NCCL loads: ncclNetPlugin_v11, and v10, v9 and v8 adapters over the same
 * implementation, so one .so serves NCCL releases from 2.19 (v8) to 2.28 (v11).
 *
 * v11 calls init once per NCCL communicator and hands the context it returns to listen and
 * connect; finalize ends it. Nothing in Bagua-Net is per NCCL communicator (devices are
 * process-wide, connections are independent), so the context only records the communicator
 * id and traffic class for the logs. The older versions call init once per process; their
 * adapters share the same process-wide set-up.
 */
#include <stdlib.h>
#include <string.h>

#include "bnet.h"
#include "common/log.h"

#define BNET_EXPORT __attribute__((visibility("default")))

typedef struct {
  uint64_t comm_id;
  int traffic_class;
} bnet_ctx_t;

/* NCCL's logger from the latest init, so that the plugin's choice shows up in NCCL_DEBUG=INFO
 * output next to NCCL's own lines. Our own diagnostics go through BAGUA_WARN/BAGUA_INFO. */
static ncclDebugLogger_t g_nccl_log;
static int g_announced;

/* A registration handle: host memory needs none, but NCCL wants a non-NULL one. */
static int g_mr_token;

static ncclResult_t global_init(ncclDebugLogger_t log) {
  if (log) __atomic_store_n(&g_nccl_log, log, __ATOMIC_RELEASE);
  int nstreams = 0;
  uint32_t chunk_min = 0;
  ncclResult_t rc = bagua__bnet_params(&nstreams, &chunk_min);
  if (rc != ncclSuccess) return rc;
  rc = bagua__bnet_devices_init();
  if (rc != ncclSuccess) return rc;
  if (bagua__bnet_ndevs() < 1) return ncclSystemError;
  if (log && !__atomic_exchange_n(&g_announced, 1, __ATOMIC_ACQ_REL)) {
    const bnet_dev_t *d = bagua__bnet_dev(0);
    log(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, __FILE__, __LINE__,
        "NET/" BNET_NAME
        " : %d device(s), first %s; %d TCP data streams per connection, "
        "chunks of at least %u bytes",
        bagua__bnet_ndevs(), d->name, nstreams, chunk_min);
  }
  return ncclSuccess;
}

/* ---- v11 ---- */

static ncclResult_t v11_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                             ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof;
  if (!ctx) return ncclInvalidArgument;
  *ctx = NULL;
  ncclResult_t rc = global_init(log);
  if (rc != ncclSuccess) return rc;
  bnet_ctx_t *c = calloc(1, sizeof(*c));
  if (!c) return ncclSystemError;
  c->comm_id = comm_id;
  c->traffic_class = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net: init for NCCL communicator %016llx",
             (unsigned long long)comm_id);
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t v11_finalize(void *ctx) {
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t net_devices(int *ndev) {
  if (!ndev) return ncclInvalidArgument;
  *ndev = bagua__bnet_ndevs();
  return ncclSuccess;
}

static ncclResult_t v11_get_properties(int dev, ncclNetProperties_v11_t *props) {
  return bagua__bnet_get_properties(dev, props);
}

static ncclResult_t v11_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  (void)ctx;
  return bagua__bnet_listen(dev, handle, listen_comm);
}

static ncclResult_t v11_connect(void *ctx, int dev, void *handle, void **send_comm,
                                ncclNetDeviceHandle_v11_t **dev_comm) {
  (void)ctx;
  (void)dev_comm; /* no device offload: NCCL's proxy drives every request */
  return bagua__bnet_connect(dev, handle, send_comm);
}

static ncclResult_t net_accept(void *listen_comm, void **recv_comm,
                               ncclNetDeviceHandle_v11_t **dev_comm) {
  (void)dev_comm;
  return bagua__bnet_accept(listen_comm, recv_comm);
}

static ncclResult_t net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  if (type != NCCL_PTR_HOST) {
    BAGUA_WARN(
        "bagua-net: regMr of memory type %d refused: only host memory (NCCL_PTR_HOST) "
        "is supported",
        type);
    return ncclInternalError;
  }
  (void)comm, (void)data, (void)size;
  if (mhandle) *mhandle = &g_mr_token;
  return ncclSuccess;
}

static ncclResult_t net_dereg_mr(void *comm, void *mhandle) {
  (void)comm, (void)mhandle;
  return ncclSuccess;
}

static ncclResult_t check_kind(void *comm, int want_send, const char *call) {
  if (!comm || bagua__bnet_comm_is_send(comm) != want_send) {
    BAGUA_WARN("bagua-net: %s needs a %s comm", call, want_send ? "send" : "receive");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

static ncclResult_t v11_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void *phandle, void **request) {
  (void)mhandle, (void)phandle;
  if (!request) return ncclInvalidArgument;
  *request = NULL;
  ncclResult_t rc = check_kind(send_comm, 1, "isend");
  if (rc != ncclSuccess) return rc;
  return bagua__bnet_isend(send_comm, data, size, tag, request);
}

static ncclResult_t v11_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **phandles, void **request) {
  (void)mhandles, (void)phandles;
  if (!request) return ncclInvalidArgument;
  *request = NULL;
  ncclResult_t rc = check_kind(recv_comm, 0, "irecv");
  if (rc != ncclSuccess) return rc;
  if (!data || !sizes || !tags) return ncclInvalidArgument;
  return bagua__bnet_irecv(recv_comm, n, data, sizes, tags, request);
}

static ncclResult_t net_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                               void **request) {
  /* NCCL flushes only GPU memory received by a plugin that asks for it; host-only
   * Bagua-Net advertises neither, so a call here is a bug in the caller. */
  (void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
  if (request) *request = NULL;
  BAGUA_WARN("bagua-net: iflush is not supported (host memory needs no flush)");
  return ncclInternalError;
}

static ncclResult_t net_test(void *request, int *done, int *sizes) {
  if (!done) return ncclInvalidArgument;
  return bagua__bnet_test(request, done, sizes);
}

static ncclResult_t net_close_send(void *send_comm) {
  return bagua__bnet_comm_close(send_comm);
}

static ncclResult_t net_close_recv(void *recv_comm) {
  return bagua__bnet_comm_close(recv_comm);
}

static ncclResult_t net_close_listen(void *listen_comm) {
  return bagua__bnet_close_listen(listen_comm);
}

BNET_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = BNET_NAME,
    .init = v11_init,
    .devices = net_devices,
    .getProperties = v11_get_properties,
    .listen = v11_listen,
    .connect = v11_connect,
    .accept = net_accept,
    .regMr = net_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = net_dereg_mr,
    .isend = v11_isend,
    .irecv = v11_irecv,
    .iflush = net_iflush,
    .test = net_test,
    .closeSend = net_close_send,
    .closeRecv = net_close_recv,
    .closeListen = net_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = v11_finalize,
    .setNetAttr = NULL,
};

/* ---- v10: process-wide init, per-connection config, profiler handles ---- */

static ncclResult_t v10_init(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof;
  return global_init(log);
}

static ncclResult_t v9_get_properties(int dev, ncclNetProperties_v9_t *props) {
  ncclNetProperties_v11_t p;
  ncclResult_t rc = bagua__bnet_get_properties(dev, &p);
  if (rc != ncclSuccess) return rc;
  /* v9 and v10 are v11 without its last field. */
  memcpy(props, &p, sizeof(*props));
  return ncclSuccess;
}

static ncclResult_t v10_listen(int dev, void *handle, void **listen_comm) {
  return bagua__bnet_listen(dev, handle, listen_comm);
}

static ncclResult_t v10_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                void **send_comm, ncclNetDeviceHandle_v10_t **dev_comm) {
  (void)config, (void)dev_comm;
  return bagua__bnet_connect(dev, handle, send_comm);
}

BNET_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = BNET_NAME,
    .init = v10_init,
    .devices = net_devices,
    .getProperties = v9_get_properties,
    .listen = v10_listen,
    .connect = v10_connect,
    .accept = net_accept,
    .regMr = net_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = net_dereg_mr,
    .isend = v11_isend,
    .irecv = v11_irecv,
    .iflush = net_iflush,
    .test = net_test,
    .closeSend = net_close_send,
    .closeRecv = net_close_recv,
    .closeListen = net_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};

/* ---- v9: no profiler, no connect config ---- */

static ncclResult_t v9_init(ncclDebugLogger_t log) {
  return global_init(log);
}

static ncclResult_t v9_connect(int dev, void *handle, void **send_comm,
                               ncclNetDeviceHandle_v9_t **dev_comm) {
  (void)dev_comm;
  return bagua__bnet_connect(dev, handle, send_comm);
}

static ncclResult_t v9_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request) {
  return v11_isend(send_comm, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t v9_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **request) {
  return v11_irecv(recv_comm, n, data, sizes, tags, mhandles, NULL, request);
}

BNET_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = BNET_NAME,
    .init = v9_init,
    .devices = net_devices,
    .getProperties = v9_get_properties,
    .listen = v10_listen,
    .connect = v9_connect,
    .accept = net_accept,
    .regMr = net_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = net_dereg_mr,
    .isend = v9_isend,
    .irecv = v9_irecv,
    .iflush = net_iflush,
    .test = net_test,
    .closeSend = net_close_send,
    .closeRecv = net_close_recv,
    .closeListen = net_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};

/* ---- v8: int sizes, and properties without forceFlush and what followed it ---- */

static ncclResult_t v8_get_properties(int dev, ncclNetProperties_v8_t *props) {
  ncclNetProperties_v11_t p;
  ncclResult_t rc = bagua__bnet_get_properties(dev, &p);
  if (rc != ncclSuccess) return rc;
  memset(props, 0, sizeof(*props));
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = p.netDeviceType;
  props->netDeviceVersion = p.netDeviceVersion;
  return ncclSuccess;
}

static ncclResult_t v8_isend(void *send_comm, void *data, int size, int tag, void *mhandle,
                             void **request) {
  if (size < 0) {
    if (request) *request = NULL;
    BAGUA_WARN("bagua-net: isend of a negative size (%d) refused", size);
    return ncclInvalidArgument;
  }
  return v11_isend(send_comm, data, (size_t)size, tag, mhandle, NULL, request);
}

static ncclResult_t v8_irecv(void *recv_comm, int n, void **data, int *sizes, int *tags,
                             void **mhandles, void **request) {
  size_t wide[BNET_MAX_RECVS];
  if (request) *request = NULL;
  if (n < 1 || n > BNET_MAX_RECVS || !sizes) {
    BAGUA_WARN("bagua-net: irecv of %d buffers refused: between 1 and maxRecvs = %d", n,
               BNET_MAX_RECVS);
    return ncclInvalidArgument;
  }
  for (int k = 0; k < n; k++) {
    if (sizes[k] < 0) {
      BAGUA_WARN("bagua-net: irecv buffer %d has a negative size (%d)", k, sizes[k]);
      return ncclInvalidArgument;
    }
    wide[k] = (size_t)sizes[k];
  }
  return v11_irecv(recv_comm, n, data, wide, tags, mhandles, NULL, request);
}

BNET_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = BNET_NAME,
    .init = v9_init,
    .devices = net_devices,
    .getProperties = v8_get_properties,
    .listen = v10_listen,
    .connect = v9_connect,
    .accept = net_accept,
    .regMr = net_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = net_dereg_mr,
    .isend = v8_isend,
    .irecv = v8_irecv,
    .iflush = net_iflush,
    .test = net_test,
    .closeSend = net_close_send,
    .closeRecv = net_close_recv,
    .closeListen = net_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
