/*
 * Our declaration of the NCCL external network plugin ABI, versions 8 to 11.
 *
 * Written for Bagua-Net from the documented plugin API (docs/net-plugin.md and the field list
 * in NCCL's plugin documentation); it is not NCCL's header. NCCL finds a plugin by dlsym()ing
 * a global table named ncclNetPlugin_vN, newest version first, so what matters here is the
 * binary layout: the order and types of the fields. The layouts below are for LP64 Linux and
 * every size and offset we rely on is pinned by a static assertion at the end of the file, so
 * an accidental edit cannot silently shift a field that NCCL reads.
 *
 * Versions (what each one changed, so the adapters in plugin.c know what to convert):
 *   v8  size_t in regMr; regIsGlobal in the properties.
 *   v9  size_t sizes in isend/irecv; forceFlush, virtual devices, maxP2pBytes/maxCollBytes.
 *   v10 init takes a profiler callback; connect takes a per-connection config (traffic
 *       class); isend/irecv take profiler handles.
 *   v11 init/finalize per communicator with a context pointer that listen and connect
 *       receive; setNetAttr; maxMultiRequestSize in the properties.
 */
#ifndef BAGUA_NET_PLUGIN_NCCL_NET_H
#define BAGUA_NET_PLUGIN_NCCL_NET_H

#include <stddef.h>
#include <stdint.h>

/* Result codes shared by every plugin call; the numbering is NCCL's public one. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;

/* Memory kinds a device can move (ptrSupport is a mask of them). */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* Bytes NCCL reserves for a listen handle; it copies them to the peer through its bootstrap. */
#define NCCL_NET_HANDLE_MAXSIZE 128
/* Requests NCCL keeps in flight per communicator at most. */
#define NCCL_NET_MAX_REQUESTS 32
/* Physical devices one virtual device may merge (v9 to v11). */
#define NCCL_NET_MAX_DEVS_PER_NIC 4

/* NCCL's logger, handed to init(). Levels and subsystem bits are NCCL's values. */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;
#define NCCL_INIT 0x1
#define NCCL_NET 0x10
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);
/* The profiler hook of v10 and v11; Bagua-Net accepts it and emits no events. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **event, int type, void *phandle,
                                               int64_t plugin_id, void *ext_data);

/* Where a device's data path runs: HOST means NCCL's proxy thread drives every request. */
typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;

/* Device offload handle (connect/accept output); unchanged from v7 to v11. Host plugins
 * leave it untouched. */
typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void *handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;

/* A virtual device: the physical devices it merges. */
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;

/* Per-connection (v10) or per-communicator (v11) configuration from NCCL. */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
typedef struct {
  int trafficClass;
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;

/* Device properties. The first thirteen fields are common to every version; v9 inserted
 * forceFlush after regIsGlobal, which is why v8 has a separate struct. */
typedef struct {
  char *name;      /* interface name, for NCCL's logs */
  char *pciPath;   /* sysfs path of the PCI device, or NULL */
  uint64_t guid;   /* identifies the NIC; equal guids are treated as one card */
  int ptrSupport;  /* NCCL_PTR_* mask */
  int regIsGlobal; /* 1: a registration is valid for every comm */
  int speed;       /* Mbit/s */
  int port;        /* port number on the NIC */
  float latency;   /* microseconds */
  int maxComms;    /* connections a device can carry */
  int maxRecvs;    /* buffers one irecv may group */
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush; /* 1: NCCL must call iflush after every receive */
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;  /* largest single isend/irecv for point-to-point traffic */
  size_t maxCollBytes; /* largest single transfer for collective network offload */
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize; /* requests NCCL may fuse into one multi-request */
} ncclNetProperties_v11_t;

/* Hints NCCL passes through setNetAttr (v11). Bagua-Net leaves setNetAttr NULL, which NCCL
 * allows, so the layout is never needed here. */
typedef struct bagua_nccl_net_attr_v11 ncclNetAttr_v11_t;

/* The function tables. Every call returns ncclResult_t; "comm" is a send or receive comm. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(int dev, void *handle, void **send_comm,
                          ncclNetDeviceHandle_v8_t **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm,
                         ncclNetDeviceHandle_v8_t **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, int *sizes, int *tags, void **mhandles,
                        void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
} ncclNet_v8_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(int dev, void *handle, void **send_comm,
                          ncclNetDeviceHandle_v9_t **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm,
                         ncclNetDeviceHandle_v9_t **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *dev, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t log, ncclProfilerCallback_t prof);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **send_comm,
                          ncclNetDeviceHandle_v10_t **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm,
                         ncclNetDeviceHandle_v10_t **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *dev, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                       ncclDebugLogger_t log, ncclProfilerCallback_t prof);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listen_comm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **send_comm,
                          ncclNetDeviceHandle_v11_t **send_dev_comm);
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm,
                         ncclNetDeviceHandle_v11_t **recv_dev_comm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *send_comm);
  ncclResult_t (*closeRecv)(void *recv_comm);
  ncclResult_t (*closeListen)(void *listen_comm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recv_comm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *dev, ncclNetVDeviceProps_v11_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *attr);
} ncclNet_v11_t;

/* ---- Layout pins (LP64). A failure here means the table no longer matches NCCL's. ---- */
#if defined(__x86_64__) || defined(__aarch64__) || defined(__powerpc64__)
_Static_assert(sizeof(ncclResult_t) == 4, "ncclResult_t is an int-sized enum");
_Static_assert(sizeof(ncclNetDeviceHandle_v8_t) == 32, "device handle layout");
_Static_assert(sizeof(ncclNetVDeviceProps_v9_t) == 20, "vProps: ndevs + 4 device ids");
_Static_assert(offsetof(ncclNetProperties_v8_t, ptrSupport) == 24, "v8 props");
_Static_assert(offsetof(ncclNetProperties_v8_t, speed) == 32, "v8 props: no forceFlush");
_Static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "v8 props");
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 props size");
_Static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32, "v9 props");
_Static_assert(offsetof(ncclNetProperties_v9_t, speed) == 36, "v9 props");
_Static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64, "v9 props");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 props");
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9/v10 props size");
_Static_assert(offsetof(ncclNetProperties_v11_t, maxCollBytes) == 96, "v11 props");
_Static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "v11 props");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 props size");
/* name + 18 calls (v8), + makeVDevice (v9, v10), + finalize and setNetAttr (v11). */
_Static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void *), "v8 table");
_Static_assert(sizeof(ncclNet_v9_t) == 20 * sizeof(void *), "v9 table");
_Static_assert(sizeof(ncclNet_v10_t) == 20 * sizeof(void *), "v10 table");
_Static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void *), "v11 table");
_Static_assert(offsetof(ncclNet_v11_t, isend) == 10 * sizeof(void *), "v11 isend slot");
_Static_assert(offsetof(ncclNet_v11_t, test) == 13 * sizeof(void *), "v11 test slot");
_Static_assert(offsetof(ncclNet_v11_t, finalize) == 20 * sizeof(void *), "v11 finalize slot");
#endif

#endif
