#include "base64.h"

#include <stdint.h>
#include <stdlib.h>

static const char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Maps an input character to its 6-bit value, or -1 for anything outside the alphabet. */
static int sextet(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

size_t bagua__base64_encoded_len(size_t n) {
  return (n + 2) / 3 * 4;
}

size_t bagua__base64_decoded_max(size_t n) {
  return n / 4 * 3;
}

size_t bagua__base64_encode(const void *src, size_t n, char *dst) {
  const unsigned char *s = src;
  size_t o = 0, i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
    dst[o++] = k_alphabet[v >> 18];
    dst[o++] = k_alphabet[(v >> 12) & 63];
    dst[o++] = k_alphabet[(v >> 6) & 63];
    dst[o++] = k_alphabet[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)s[i] << 16;
    dst[o++] = k_alphabet[v >> 18];
    dst[o++] = k_alphabet[(v >> 12) & 63];
    dst[o++] = '=';
    dst[o++] = '=';
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
    dst[o++] = k_alphabet[v >> 18];
    dst[o++] = k_alphabet[(v >> 12) & 63];
    dst[o++] = k_alphabet[(v >> 6) & 63];
    dst[o++] = '=';
  }
  dst[o] = '\0';
  return o;
}

bagua_status_t bagua__base64_decode(const char *src, size_t n, void *dst, size_t cap,
                                    size_t *out_len) {
  const unsigned char *s = (const unsigned char *)src;
  unsigned char *d = dst;
  if (n % 4 != 0) return BAGUA_ERR_INVALID_ARG;
  size_t pad = 0;
  if (n > 0 && s[n - 1] == '=') {
    pad++;
    if (s[n - 2] == '=') pad++;
  }
  size_t len = n / 4 * 3 - pad;
  if (len > cap) return BAGUA_ERR_INVALID_ARG;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int last = i + 4 == n;
    int v[4];
    for (int k = 0; k < 4; k++) {
      /* Padding is only legal in the final quantum, at the positions counted above. */
      if (last && s[i + k] == '=' && k >= 4 - (int)pad) {
        v[k] = 0;
        continue;
      }
      v[k] = sextet(s[i + k]);
      if (v[k] < 0) return BAGUA_ERR_INVALID_ARG;
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    int nout = last ? 3 - (int)pad : 3;
    /* Non-zero bits below the last encoded byte would make a second encoding of the same data. */
    if (nout == 1 && (w & 0xffff) != 0) return BAGUA_ERR_INVALID_ARG;
    if (nout == 2 && (w & 0xff) != 0) return BAGUA_ERR_INVALID_ARG;
    d[o++] = (unsigned char)(w >> 16);
    if (nout > 1) d[o++] = (unsigned char)(w >> 8);
    if (nout > 2) d[o++] = (unsigned char)w;
  }
  *out_len = o;
  return BAGUA_OK;
}

char *bagua__base64_encode_alloc(const void *src, size_t n) {
  char *out = malloc(bagua__base64_encoded_len(n) + 1);
  if (out) bagua__base64_encode(src, n, out);
  return out;
}

bagua_status_t bagua__base64_decode_alloc(const char *src, size_t n, char **out, size_t *out_len) {
  size_t cap = bagua__base64_decoded_max(n);
  char *buf = malloc(cap + 1);
  if (!buf) return BAGUA_ERR_NO_MEMORY;
  size_t len = 0;
  bagua_status_t st = bagua__base64_decode(src, n, buf, cap, &len);
  if (st != BAGUA_OK) {
    free(buf);
    return st;
  }
  buf[len] = '\0';
  *out = buf;
  *out_len = len;
  return BAGUA_OK;
}
