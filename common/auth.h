/*
 * Per-job authentication: SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), a constant-time
 * comparison, random nonces and the job secret (docs/security.md).
 *
 * The job secret is BAGUA_JOB_SECRET: exactly 64 hexadecimal digits, the 32-byte key. bagua-agent
 * generates it (or the user gives it), keeps it in etcd under the job and passes it to its
 * workers through the environment, never on a command line. Every TCP handshake between Bagua
 * processes (bootstrap, data streams, agent liveness) proves knowledge of the key by a
 * challenge-response; without the variable the channels run unauthenticated, as a program started
 * without an agent always did.
 *
 * Everything here is pure computation on caller-owned buffers, thread-safe, and never blocks
 * (except bagua__auth_random, which reads the kernel's random source once per call).
 */
#ifndef BAGUA_COMMON_AUTH_H
#define BAGUA_COMMON_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"

#define BAGUA_SHA256_BYTES 32
#define BAGUA_AUTH_KEY_BYTES 32
#define BAGUA_AUTH_NONCE_BYTES 32

typedef struct {
  uint32_t h[8];
  uint64_t bytes; /* message length so far */
  uint8_t buf[64];
  size_t len; /* bytes waiting in buf */
} bagua__sha256_t;

void bagua__sha256_init(bagua__sha256_t *s);
void bagua__sha256_update(bagua__sha256_t *s, const void *data, size_t len);
void bagua__sha256_final(bagua__sha256_t *s, uint8_t out[BAGUA_SHA256_BYTES]);
void bagua__sha256(const void *data, size_t len, uint8_t out[BAGUA_SHA256_BYTES]);

/* HMAC-SHA256, incremental: init with the key, update with each part, final. */
typedef struct {
  bagua__sha256_t inner, outer;
} bagua__hmac_t;

void bagua__hmac_init(bagua__hmac_t *m, const void *key, size_t keylen);
void bagua__hmac_update(bagua__hmac_t *m, const void *data, size_t len);
void bagua__hmac_final(bagua__hmac_t *m, uint8_t out[BAGUA_SHA256_BYTES]);
void bagua__hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        uint8_t out[BAGUA_SHA256_BYTES]);

/* 1 when a and b hold the same len bytes; the time taken does not depend on where they differ. */
int bagua__auth_equal(const void *a, const void *b, size_t len);

/* Fills buf with len bytes from the kernel's random source (getrandom, else /dev/urandom). */
bagua_status_t bagua__auth_random(void *buf, size_t len);

/* Lower-case hex of len bytes into out (2 * len + 1 bytes); parsing the reverse returns 0 when
 * `hex` holds exactly 2 * len hex digits. */
void bagua__auth_hex(const uint8_t *bytes, size_t len, char *out);
int bagua__auth_unhex(const char *hex, uint8_t *bytes, size_t len);

/*
 * The job secret from the parameter registry. Unset or empty: *have = 0 and BAGUA_OK (the
 * channels are unauthenticated). Set: *have = 1 and the key, or BAGUA_ERR_INVALID_ARG with a
 * warning that names BAGUA_JOB_SECRET and what is accepted (the value itself is never printed).
 */
bagua_status_t bagua__auth_job_key(uint8_t key[BAGUA_AUTH_KEY_BYTES], int *have);

#endif
