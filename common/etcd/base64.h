/*
 * Standard base64 (RFC 4648 section 4: alphabet A-Z a-z 0-9 + /, '=' padding), the encoding
 * etcd's JSON gateway uses for every key, value and range_end.
 *
 * The decoder is strict because its input comes from the network: the length must be a
 * multiple of four, padding may only appear at the end, and the unused low bits of the last
 * symbol must be zero, so every byte string has exactly one accepted encoding.
 */
#ifndef BAGUA_COMMON_ETCD_BASE64_H
#define BAGUA_COMMON_ETCD_BASE64_H

#include <stddef.h>

#include "bagua/error.h"

/* Characters needed to encode `n` bytes, not counting the terminating NUL. */
size_t bagua__base64_encoded_len(size_t n);

/* Upper bound on the bytes decoded from `n` characters of input. */
size_t bagua__base64_decoded_max(size_t n);

/*
 * Encodes `n` bytes of `src` into `dst`, which must hold bagua__base64_encoded_len(n) + 1
 * bytes, and NUL-terminates it. Returns the number of characters written (without the NUL).
 */
size_t bagua__base64_encode(const void *src, size_t n, char *dst);

/*
 * Decodes `n` characters of `src` into `dst` (capacity `cap` bytes; bagua__base64_decoded_max
 * is always enough) and stores the decoded length in `*out_len`. Returns BAGUA_ERR_INVALID_ARG
 * for malformed input or a too-small buffer, without logging: callers decide whether a bad
 * encoding deserves a warning. `dst` may be written to even on failure.
 */
bagua_status_t bagua__base64_decode(const char *src, size_t n, void *dst, size_t cap,
                                    size_t *out_len);

/*
 * Convenience forms that allocate. bagua__base64_encode_alloc returns a NUL-terminated string
 * (NULL on out-of-memory); bagua__base64_decode_alloc stores a malloc'ed buffer that is
 * NUL-terminated one byte past `*out_len`, so text values can be used as C strings. The caller
 * frees both with free().
 */
char *bagua__base64_encode_alloc(const void *src, size_t n);
bagua_status_t bagua__base64_decode_alloc(const char *src, size_t n, char **out, size_t *out_len);

#endif
