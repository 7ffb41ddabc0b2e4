/*
 * Reader for IDX files (the format of MNIST and Fashion-MNIST), gzip-compressed or plain.
 *
 * An IDX file is a big-endian header (two zero bytes, a type byte, the number of
 * dimensions, then one 32-bit size per dimension) followed by the items. Only the unsigned
 * byte type (0x08) is accepted, which is what both data sets use: images have the magic
 * 0x00000803 (three dimensions: count, rows, columns) and labels 0x00000801 (one: count).
 */
#ifndef FM_IDX_H
#define FM_IDX_H

#include <stddef.h>
#include <stdint.h>

#define FM_IDX_MAGIC_LABELS 0x00000801u
#define FM_IDX_MAGIC_IMAGES 0x00000803u

typedef enum {
  FM_IDX_OK = 0,
  FM_IDX_MISSING = 1, /* the file does not exist (or cannot be opened) */
  FM_IDX_BAD = 2,     /* wrong magic, implausible dimensions, truncated or corrupt data */
  FM_IDX_NOMEM = 3
} fm_idx_status_t;

typedef struct {
  uint32_t magic;
  int ndims;
  uint32_t dims[4];  /* dims[0] is the number of items in the file */
  size_t count;      /* items read: dims[0], or fewer when a limit was given */
  size_t item_bytes; /* product of dims[1..ndims-1]; 1 for labels, rows*cols for images */
  uint8_t *data;     /* count * item_bytes bytes, owned; free with fm_idx_free() */
} fm_idx_t;

/*
 * Reads `path`, which must have magic `magic` (one of the FM_IDX_MAGIC_* values), and at
 * most `limit` items (0: all). On failure *out is zeroed and `err` (errlen bytes, caller's)
 * holds a sentence naming the file and the problem.
 */
fm_idx_status_t fm_idx_load(const char *path, uint32_t magic, size_t limit, fm_idx_t *out,
                            char *err, size_t errlen);
void fm_idx_free(fm_idx_t *f);

#endif
