/*
 * SHA-256 after FIPS 180-4 section 6.2, HMAC after RFC 2104, and the job secret (auth.h).
 * Written here rather than taken from a crypto library so that libbagua gains no dependency;
 * tests/comm/test_auth.c checks the NIST and RFC 4231 vectors.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "log.h"
#include "params.h"

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

/* One 64-byte block of the compression function (FIPS 180-4, 6.2.2). */
static void sha256_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 |
           (uint32_t)p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 =
        k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K256[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

void bagua__sha256_init(bagua__sha256_t *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof(iv));
  s->bytes = 0;
  s->len = 0;
}

void bagua__sha256_update(bagua__sha256_t *s, const void *data, size_t len) {
  const uint8_t *p = data;
  s->bytes += len;
  if (s->len) {
    size_t take = 64 - s->len < len ? 64 - s->len : len;
    memcpy(s->buf + s->len, p, take);
    s->len += take;
    p += take;
    len -= take;
    if (s->len < 64) return;
    sha256_block(s->h, s->buf);
    s->len = 0;
  }
  for (; len >= 64; p += 64, len -= 64) sha256_block(s->h, p);
  memcpy(s->buf, p, len);
  s->len = len;
}

void bagua__sha256_final(bagua__sha256_t *s, uint8_t out[BAGUA_SHA256_BYTES]) {
  uint64_t bits = s->bytes * 8;
  /* Padding (5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, then the bit length big-endian. */
  s->buf[s->len++] = 0x80;
  if (s->len > 56) {
    memset(s->buf + s->len, 0, 64 - s->len);
    sha256_block(s->h, s->buf);
    s->len = 0;
  }
  memset(s->buf + s->len, 0, 56 - s->len);
  for (int i = 0; i < 8; i++) s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_block(s->h, s->buf);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(s->h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
    out[4 * i + 3] = (uint8_t)s->h[i];
  }
  memset(s, 0, sizeof(*s));
}

void bagua__sha256(const void *data, size_t len, uint8_t out[BAGUA_SHA256_BYTES]) {
  bagua__sha256_t s;
  bagua__sha256_init(&s);
  bagua__sha256_update(&s, data, len);
  bagua__sha256_final(&s, out);
}

void bagua__hmac_init(bagua__hmac_t *m, const void *key, size_t keylen) {
  uint8_t k[64] = {0}, pad[64];
  /* A key longer than the block is replaced by its hash (RFC 2104, section 2). */
  if (keylen > 64)
    bagua__sha256(key, keylen, k);
  else if (keylen)
    memcpy(k, key, keylen);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  bagua__sha256_init(&m->inner);
  bagua__sha256_update(&m->inner, pad, 64);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  bagua__sha256_init(&m->outer);
  bagua__sha256_update(&m->outer, pad, 64);
  memset(k, 0, sizeof(k));
  memset(pad, 0, sizeof(pad));
}

void bagua__hmac_update(bagua__hmac_t *m, const void *data, size_t len) {
  bagua__sha256_update(&m->inner, data, len);
}

void bagua__hmac_final(bagua__hmac_t *m, uint8_t out[BAGUA_SHA256_BYTES]) {
  uint8_t ih[BAGUA_SHA256_BYTES];
  bagua__sha256_final(&m->inner, ih);
  bagua__sha256_update(&m->outer, ih, sizeof(ih));
  bagua__sha256_final(&m->outer, out);
  memset(ih, 0, sizeof(ih));
}

void bagua__hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        uint8_t out[BAGUA_SHA256_BYTES]) {
  bagua__hmac_t m;
  bagua__hmac_init(&m, key, keylen);
  bagua__hmac_update(&m, data, len);
  bagua__hmac_final(&m, out);
}

int bagua__auth_equal(const void *a, const void *b, size_t len) {
  /* Accumulate every difference so the loop's duration is the same wherever they differ; the
   * volatile keeps the compiler from ending the loop early. */
  const volatile uint8_t *x = a, *y = b;
  uint8_t d = 0;
  for (size_t i = 0; i < len; i++) d |= (uint8_t)(x[i] ^ y[i]);
  return d == 0;
}

bagua_status_t bagua__auth_random(void *buf, size_t len) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  if (len == 0) return BAGUA_OK;
  /* Kernels before 3.17 have no getrandom: the device gives the same bytes. */
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  while (fd >= 0 && len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    len -= (size_t)n;
  }
  if (fd >= 0) close(fd);
  if (len == 0) return BAGUA_OK;
  BAGUA_WARN("cannot read random bytes for a handshake nonce: %s", strerror(errno));
  return BAGUA_ERR_SYSTEM;
}

void bagua__auth_hex(const uint8_t *bytes, size_t len, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * len] = '\0';
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int bagua__auth_unhex(const char *hex, uint8_t *bytes, size_t len) {
  if (strlen(hex) != 2 * len) return -1;
  for (size_t i = 0; i < len; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    bytes[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

bagua_status_t bagua__auth_job_key(uint8_t key[BAGUA_AUTH_KEY_BYTES], int *have) {
  const char *s = bagua__param_str(BAGUA_P_JOB_SECRET);
  *have = 0;
  if (!s || !s[0]) return BAGUA_OK;
  if (bagua__auth_unhex(s, key, BAGUA_AUTH_KEY_BYTES) != 0) {
    /* The value is not printed: even a malformed secret may be most of the real one. */
    BAGUA_WARN(
        "invalid environment setting: BAGUA_JOB_SECRET is not accepted (%zu characters); "
        "accepted: exactly %d hexadecimal digits (a %d-byte key), or unset for unauthenticated "
        "channels",
        strlen(s), 2 * BAGUA_AUTH_KEY_BYTES, BAGUA_AUTH_KEY_BYTES);
    memset(key, 0, BAGUA_AUTH_KEY_BYTES);
    return BAGUA_ERR_INVALID_ARG;
  }
  *have = 1;
  return BAGUA_OK;
}
