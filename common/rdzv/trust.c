/*
 * What the schema needs beyond parsing: reporting refused records without flooding the log,
 * asking etcd whether a record's lease is alive, and generating the per-job secret.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/etcd/etcd_internal.h"
#include "common/log.h"
#include "rdzv.h"

/* ---------------------------------------------------------------------------------------- */
/* Rejections                                                                                */
/* ---------------------------------------------------------------------------------------- */

/* The (key, revision) pairs already warned about: a small ring of hashes is enough, since a
 * forgotten pair only costs one more warning. */
#define SEEN 64
static pthread_mutex_t g_seen_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_seen[SEEN];
static unsigned g_seen_next;

/* FNV-1a over the key, then the revision; never 0 (an empty slot). */
static uint64_t seen_hash(const char *key, int64_t mod_rev) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)mod_rev;
  for (const unsigned char *p = (const unsigned char *)key; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return h | 1;
}

void bagua__rdzv_reject(const char *key, int64_t mod_rev, const char *what, const char *why) {
  uint64_t h = seen_hash(key, mod_rev);
  int first = 1;
  pthread_mutex_lock(&g_seen_lock);
  for (unsigned i = 0; i < SEEN && first; i++) first = g_seen[i] != h;
  if (first) g_seen[g_seen_next++ % SEEN] = h;
  pthread_mutex_unlock(&g_seen_lock);
  if (first)
    BAGUA_WARN("rdzv: rejecting %s (revision %lld): not %s: %s; it is ignored", key,
               (long long)mod_rev, what, why);
  else
    BAGUA_INFO(BAGUA_SUBSYS_ETCD, "rdzv: still rejecting %s (revision %lld): %s", key,
               (long long)mod_rev, why);
}

/* ---------------------------------------------------------------------------------------- */
/* Leases                                                                                    */
/* ---------------------------------------------------------------------------------------- */

bagua_status_t bagua__rdzv_lease_alive(struct bagua__etcd *c, int64_t id, int *alive) {
  cJSON *req = cJSON_CreateObject(), *reply = NULL;
  if (!req || bagua__etcd_json_add_i64(req, "ID", id) != 0) {
    cJSON_Delete(req);
    return BAGUA_ERR_NO_MEMORY;
  }
  bagua_status_t st =
      bagua__etcd_call(c, "/v3/lease/timetolive", req, &reply, ETCD_CALL_QUIET_NOT_FOUND, NULL);
  cJSON_Delete(req);
  if (st == BAGUA_OK) {
    /* etcd answers an unknown or expired lease with TTL -1 (and older versions with an
     * error, which the call reports as a failure: treated as unknown below). */
    int64_t ttl = -1;
    if (bagua__etcd_json_i64(reply, "TTL", &ttl) < 0) ttl = -1;
    *alive = ttl > 0;
  } else if (st == BAGUA_ERR_ETCD) {
    *alive = 0;
    st = BAGUA_OK;
  }
  cJSON_Delete(reply);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* The job secret                                                                            */
/* ---------------------------------------------------------------------------------------- */

static int fill_random(unsigned char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r > 0) {
      got += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    break;
  }
  if (got == n) return 0;
  /* getrandom() missing (ENOSYS in old kernels or sandboxes): the device gives the same. */
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r > 0)
      got += (size_t)r;
    else if (!(r < 0 && errno == EINTR))
      break;
  }
  close(fd);
  return got == n ? 0 : -1;
}

bagua_status_t bagua__rdzv_secret_generate(char *out) {
  unsigned char raw[BAGUA_RDZV_SECRET_BYTES];
  static const char hex[] = "0123456789abcdef";
  out[0] = '\0';
  if (fill_random(raw, sizeof(raw)) != 0) {
    BAGUA_WARN("rdzv: no randomness for the job secret (getrandom and /dev/urandom failed: %s)",
               strerror(errno));
    return BAGUA_ERR_SYSTEM;
  }
  for (size_t i = 0; i < sizeof(raw); i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[BAGUA_RDZV_SECRET_HEX] = '\0';
  /* Do not leave the raw bytes on the stack for a later crash dump. */
  explicit_bzero(raw, sizeof(raw));
  return BAGUA_OK;
}
