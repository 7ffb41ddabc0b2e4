/*
 * Bagua-Net devices: which network interfaces the plugin offers NCCL, and their properties.
 *
 * A device is an up IPv4 interface. BAGUA_NET_IFNAME selects them the way NCCL_SOCKET_IFNAME
 * does: a comma list of name prefixes ("eth,ens"), "=" in front for exact names ("=eth0"),
 * "^" in front to exclude instead ("^docker,lo"). Unset, the first up interface that is not
 * loopback is used, and loopback only when there is nothing else, so a laptop or a CI box
 * still works.
 */
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bnet.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sock.h"
#include "common/time.h"

#define MAX_DEVS 16
/* What /sys reports for a physical NIC; loopback and many virtual interfaces report nothing
 * (or -1), and then NCCL gets the 10 Gbit/s its own socket transport assumes. */
#define DEFAULT_SPEED_MBPS 10000

static bnet_dev_t g_devs[MAX_DEVS];
static int g_ndevs;
static ncclResult_t g_init_result = ncclSuccess;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* 1 when `name` is selected by the BAGUA_NET_IFNAME-style `spec` (never NULL or empty). */
static int ifname_match(const char *spec, const char *name) {
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  int hit = 0;
  const char *p = spec;
  while (*p && !hit) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len > 0) {
      if (exact)
        hit = strlen(name) == len && strncmp(name, p, len) == 0;
      else
        hit = strncmp(name, p, len) == 0;
    }
    p += len + (comma ? 1 : 0);
  }
  return exclude ? !hit : hit;
}

static int read_speed(const char *ifname) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "re");
  int speed = -1;
  if (f) {
    if (fscanf(f, "%d", &speed) != 1) speed = -1;
    fclose(f);
  }
  return speed > 0 ? speed : DEFAULT_SPEED_MBPS;
}

static void add_dev(const char *name, uint32_t addr) {
  for (int i = 0; i < g_ndevs; i++)
    if (strcmp(g_devs[i].name, name) == 0) return; /* a second address of the same interface */
  if (g_ndevs == MAX_DEVS) return;
  bnet_dev_t *d = &g_devs[g_ndevs++];
  snprintf(d->name, sizeof(d->name), "%s", name);
  d->addr = addr;
  d->speed_mbps = read_speed(name);
}

static void enumerate(void) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    BAGUA_WARN("bagua-net: getifaddrs() failed: no network devices");
    g_init_result = ncclSystemError;
    return;
  }
  const char *spec = bagua__param_str(BAGUA_P_NET_IFNAME);
  char seen[512] = "";
  const struct ifaddrs *loopback = NULL;
  for (int pass = 0; pass < 2 && g_ndevs == 0; pass++) {
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      uint32_t addr = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
      int is_lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
      if (pass == 0 && strlen(seen) + strlen(i->ifa_name) + 2 < sizeof(seen)) {
        if (seen[0]) strcat(seen, ",");
        strcat(seen, i->ifa_name);
      }
      if (spec[0]) {
        if (pass == 0 && ifname_match(spec, i->ifa_name)) add_dev(i->ifa_name, addr);
      } else if (!is_lo) {
        add_dev(i->ifa_name, addr);
        break; /* the first one only */
      } else if (!loopback) {
        loopback = i;
      }
    }
    if (!spec[0] && g_ndevs == 0 && loopback) {
      add_dev(loopback->ifa_name,
              ((const struct sockaddr_in *)loopback->ifa_addr)->sin_addr.s_addr);
    }
  }
  freeifaddrs(ifs);
  if (g_ndevs == 0) {
    BAGUA_WARN("bagua-net: BAGUA_NET_IFNAME=\"%s\" selects no up IPv4 interface (up: %s)", spec,
               seen[0] ? seen : "none");
    g_init_result = spec[0] ? ncclInvalidArgument : ncclSystemError;
    return;
  }
  for (int i = 0; i < g_ndevs; i++) {
    char ip[32];
    bagua__ipv4_str(g_devs[i].addr, ip, sizeof(ip));
    BAGUA_INFO(BAGUA_SUBSYS_NET, "bagua-net: device %d is %s (%s, %d Mbit/s)", i, g_devs[i].name,
               ip, g_devs[i].speed_mbps);
  }
}

ncclResult_t bagua__bnet_devices_init(void) {
  pthread_once(&g_once, enumerate);
  return g_init_result;
}

int bagua__bnet_ndevs(void) {
  return g_init_result == ncclSuccess ? g_ndevs : 0;
}

const bnet_dev_t *bagua__bnet_dev(int dev) {
  if (dev < 0 || dev >= bagua__bnet_ndevs()) return NULL;
  return &g_devs[dev];
}

ncclResult_t bagua__bnet_get_properties(int dev, ncclNetProperties_v11_t *props) {
  const bnet_dev_t *d = bagua__bnet_dev(dev);
  if (!d || !props) {
    BAGUA_WARN("bagua-net: getProperties(%d): no such device (there are %d)", dev,
               bagua__bnet_ndevs());
    return ncclInvalidArgument;
  }
  memset(props, 0, sizeof(*props));
  props->name = (char *)d->name;
  props->pciPath = NULL; /* TCP through the kernel: no PCI affinity to report */
  props->guid = (uint64_t)dev;
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->forceFlush = 0;
  props->speed = d->speed_mbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = BNET_MAX_RECVS;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = BNET_MAX_MSG;
  props->maxCollBytes = BNET_MAX_MSG;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t bagua__bnet_params(int *nstreams, uint32_t *chunk_min) {
  /* The registry refuses a bad value of any BAGUA_* variable with a message naming it and the
   * accepted range; Bagua-Net must not run on a silently replaced default either. */
  if (bagua__params_check() != BAGUA_OK) {
    BAGUA_WARN("bagua-net: refusing to start until the setting above is fixed");
    return ncclInvalidArgument;
  }
  if (nstreams) *nstreams = (int)bagua__param_int(BAGUA_P_NET_NSTREAMS);
  if (chunk_min) *chunk_min = (uint32_t)bagua__param_int(BAGUA_P_NET_MIN_CHUNK_BYTES);
  return ncclSuccess;
}

uint64_t bagua__bnet_random64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v)) return v;
  /* No entropy yet (early boot): a unique-enough mix of time and pid still tells handles of
   * different listeners apart, which is all the nonce is for. */
  static uint64_t counter;
  uint64_t c = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  return (uint64_t)bagua__now_ns() ^ ((uint64_t)getpid() << 32) ^ (c * 0x9e3779b97f4a7c15ull);
}
