/*
 * What the schema needs beyond parsing: reporting refused records without flooding the log,
 * and generating the per-job secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

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
