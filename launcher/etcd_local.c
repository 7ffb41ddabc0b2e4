/*
 * bagua-launch's private etcd: the common helper under a keeper, with the launcher's
 * messages (the flags that fix a missing binary, the LAUNCH log line the tests look for).
 */
#include "etcd_local.h"

#include <stdio.h>

#include "common/log.h"
#include "common/time.h"

int bagua__launch_etcd_start(const char *bin, const char *addr, int port, int sigfd,
                             bagua__launch_etcd_t *e, char *err, size_t errlen) {
  bagua__etcd_local_opts_t opts = BAGUA__ETCD_LOCAL_OPTS_INIT;
  opts.bin = bin;
  opts.addr = addr;
  opts.client_port = port;
  opts.sigfd = sigfd;
  return bagua__launch_etcd_start_opts(&opts, e, err, errlen);
}

int bagua__launch_etcd_start_opts(bagua__etcd_local_opts_t *o, bagua__launch_etcd_t *e, char *err,
                                  size_t errlen) {
  bagua__etcd_local_opts_t opts = *o;
  if (!opts.name) opts.name = "bagua-launch";
  opts.dir_prefix = "/tmp/bagua-launch";
  opts.keeper = 1;
  int64_t t0 = bagua__now_ms();
  bagua_status_t st = bagua__etcd_local_start(e, &opts);
  switch (st) {
    case BAGUA_OK:
      BAGUA_INFO(BAGUA_SUBSYS_LAUNCH, "private etcd healthy at %s after %lld ms (dir %s)",
                 e->endpoint, (long long)(bagua__now_ms() - t0), e->dir);
      return 0;
    case BAGUA_ERR_ABORTED:
      return e->signo;
    case BAGUA_ERR_INVALID_ARG:
      snprintf(err, errlen,
               "%s; accepted: --etcd-bin PATH, or --rdzv-endpoint of a running etcd (Debian "
               "package etcd-server)",
               e->err);
      return -1;
    default:
      snprintf(err, errlen, "%s", e->err);
      return -1;
  }
}
