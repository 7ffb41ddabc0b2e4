/*
 * IDX reading through zlib's gzread(), which also passes plain (uncompressed) files through
 * unchanged, so a decompressed copy of the data set works as well as the Debian .gz files.
 */
#include "idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Upper bounds that no real IDX file of bytes reaches; they stop a corrupt header from
 * asking for an absurd allocation. */
#define MAX_ITEMS (100u * 1000u * 1000u)
#define MAX_ITEM_BYTES (64u * 1024u * 1024u)

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads exactly `len` bytes; returns the number read (short at end of file) or -1. */
static long long read_full(gzFile gz, void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    /* gzread takes an unsigned int length, so large reads go in pieces. */
    size_t chunk = len - done > (1u << 30) ? (1u << 30) : len - done;
    int n = gzread(gz, (char *)buf + done, (unsigned)chunk);
    if (n < 0) return -1;
    if (n == 0) break;
    done += (size_t)n;
  }
  return (long long)done;
}

fm_idx_status_t fm_idx_load(const char *path, uint32_t magic, size_t limit, fm_idx_t *out,
                            char *err, size_t errlen) {
  fm_idx_status_t st = FM_IDX_BAD;
  unsigned char hdr[4 + 4 * 4];
  int errnum = 0;
  memset(out, 0, sizeof(*out));
  gzFile gz = gzopen(path, "rb");
  if (!gz) {
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno ? errno : ENOMEM));
    return errno == ENOENT || errno == ENOTDIR ? FM_IDX_MISSING : FM_IDX_BAD;
  }
  long long n = read_full(gz, hdr, 4);
  if (n != 4) {
    snprintf(err, errlen, "%s: too short for an IDX header (%s)", path,
             n < 0 ? gzerror(gz, &errnum) : "end of file");
    goto fail;
  }
  uint32_t got_magic = be32(hdr);
  if (got_magic != magic) {
    snprintf(err, errlen, "%s: IDX magic 0x%08x, expected 0x%08x (%s of unsigned bytes)", path,
             got_magic, magic, magic == FM_IDX_MAGIC_IMAGES ? "images" : "labels");
    goto fail;
  }
  out->magic = got_magic;
  out->ndims = hdr[3];
  n = read_full(gz, hdr + 4, 4u * (unsigned)out->ndims);
  if (n != 4 * out->ndims) {
    snprintf(err, errlen, "%s: truncated IDX header", path);
    goto fail;
  }
  out->item_bytes = 1;
  for (int d = 0; d < out->ndims; d++) {
    out->dims[d] = be32(hdr + 4 + 4 * d);
    if (out->dims[d] == 0) {
      snprintf(err, errlen, "%s: dimension %d is 0", path, d);
      goto fail;
    }
    if (d > 0) out->item_bytes *= out->dims[d];
  }
  if (out->dims[0] > MAX_ITEMS || out->item_bytes > MAX_ITEM_BYTES) {
    snprintf(err, errlen, "%s: implausible IDX dimensions (%u items of %zu bytes)", path,
             out->dims[0], out->item_bytes);
    goto fail;
  }
  out->count = limit && limit < out->dims[0] ? limit : out->dims[0];
  size_t bytes = out->count * out->item_bytes;
  out->data = malloc(bytes ? bytes : 1);
  if (!out->data) {
    snprintf(err, errlen, "%s: out of memory for %zu bytes", path, bytes);
    st = FM_IDX_NOMEM;
    goto fail;
  }
  n = read_full(gz, out->data, bytes);
  if (n < 0 || (size_t)n != bytes) {
    snprintf(err, errlen, "%s: %s after %lld of %zu data bytes", path,
             n < 0 ? gzerror(gz, &errnum) : "truncated", n < 0 ? 0 : n, bytes);
    goto fail;
  }
  gzclose(gz);
  return FM_IDX_OK;
fail:
  gzclose(gz);
  fm_idx_free(out);
  return st;
}

void fm_idx_free(fm_idx_t *f) {
  free(f->data);
  memset(f, 0, sizeof(*f));
}
