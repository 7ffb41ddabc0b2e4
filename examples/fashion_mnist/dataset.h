/*
 * The Fashion-MNIST data set: 60000 training and 10000 test images of 28x28 grey pixels in
 * ten classes, read from the four IDX files Debian's dataset-fashion-mnist package installs.
 * Pixels stay as bytes in memory (47 MB for the training set instead of 188 MB of floats,
 * which matters when several ranks share one host) and are normalised per batch.
 */
#ifndef FM_DATASET_H
#define FM_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "idx.h"

#define FM_IMAGE_SIDE 28
#define FM_IMAGE_PIXELS (FM_IMAGE_SIDE * FM_IMAGE_SIDE)
#define FM_CLASSES 10
#define FM_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define FM_DATASET_PACKAGE "dataset-fashion-mnist"

typedef struct {
  size_t count;      /* images (and labels) loaded */
  size_t file_count; /* images in the file, before any limit */
  fm_idx_t images;   /* count x FM_IMAGE_PIXELS bytes */
  fm_idx_t labels;   /* count bytes, each < FM_CLASSES */
} fm_split_t;

typedef struct {
  fm_split_t train, test;
} fm_dataset_t;

/*
 * Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same names without .gz) from
 * `dir`, keeping the first `limit_train` / `limit_test` examples (0: all). Returns
 * FM_IDX_MISSING when a file is absent (err then also says which Debian package provides the
 * data), FM_IDX_BAD when one is malformed or the files disagree, FM_IDX_NOMEM.
 */
fm_idx_status_t fm_dataset_load(const char *dir, size_t limit_train, size_t limit_test,
                                fm_dataset_t *out, char *err, size_t errlen);
void fm_dataset_free(fm_dataset_t *d);

/*
 * Copies examples idx[0..n) of `s` (or first..first+n when idx is NULL) into x (n rows of
 * FM_IMAGE_PIXELS normalised floats: zero mean, unit variance over the training set) and y.
 */
void fm_dataset_gather(const fm_split_t *s, const size_t *idx, size_t first, size_t n, float *x,
                       uint8_t *y);

/* The normalisation fm_dataset_gather applies: x = (float)pixel * scale + shift, computed as a
 * product then a sum (no fused multiply-add). The GPU gather uses the same two constants, so
 * both paths feed the network bit-identical inputs. */
void fm_dataset_normalisation(float *scale, float *shift);

#endif
