/*
 * Loading and batching of Fashion-MNIST.
 */
#include "dataset.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Mean and standard deviation of the training pixels scaled to [0, 1]; normalising with them
 * keeps the first layer's pre-activations at unit scale, which lets plain SGD use a larger
 * learning rate than raw [0, 1] inputs would. */
#define PIXEL_MEAN 0.2860f
#define PIXEL_STD 0.3530f

/* Picks DIR/NAME.gz, or DIR/NAME when only the decompressed file exists. */
static void data_path(const char *dir, const char *name, char *path, size_t len) {
  snprintf(path, len, "%s/%s", dir, name);
  if (access(path, F_OK) == 0) return;
  snprintf(path, len, "%s/%s.gz", dir, name);
}

static fm_idx_status_t load_split(const char *dir, const char *prefix, size_t limit, fm_split_t *s,
                                  char *err, size_t errlen) {
  char ipath[4096], lpath[4096], name[64];
  fm_idx_status_t st;
  snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
  data_path(dir, name, ipath, sizeof(ipath));
  snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
  data_path(dir, name, lpath, sizeof(lpath));
  st = fm_idx_load(ipath, FM_IDX_MAGIC_IMAGES, limit, &s->images, err, errlen);
  if (st != FM_IDX_OK) goto fail;
  st = fm_idx_load(lpath, FM_IDX_MAGIC_LABELS, limit, &s->labels, err, errlen);
  if (st != FM_IDX_OK) goto fail;
  st = FM_IDX_BAD;
  if (s->images.ndims != 3 || s->images.dims[1] != FM_IMAGE_SIDE ||
      s->images.dims[2] != FM_IMAGE_SIDE) {
    snprintf(err, errlen, "%s: images are not %dx%d pixels", ipath, FM_IMAGE_SIDE, FM_IMAGE_SIDE);
    goto fail;
  }
  if (s->labels.ndims != 1 || s->labels.dims[0] != s->images.dims[0]) {
    snprintf(err, errlen, "%s holds %u labels but %s holds %u images", lpath, s->labels.dims[0],
             ipath, s->images.dims[0]);
    goto fail;
  }
  for (size_t i = 0; i < s->labels.count; i++) {
    if (s->labels.data[i] >= FM_CLASSES) {
      snprintf(err, errlen, "%s: label %zu is %u, expected 0..%d", lpath, i, s->labels.data[i],
               FM_CLASSES - 1);
      goto fail;
    }
  }
  s->count = s->images.count;
  s->file_count = s->images.dims[0];
  return FM_IDX_OK;
fail:
  fm_idx_free(&s->images);
  fm_idx_free(&s->labels);
  return st;
}

fm_idx_status_t fm_dataset_load(const char *dir, size_t limit_train, size_t limit_test,
                                fm_dataset_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  fm_idx_status_t st = load_split(dir, "train", limit_train, &out->train, err, errlen);
  if (st == FM_IDX_OK) st = load_split(dir, "t10k", limit_test, &out->test, err, errlen);
  if (st == FM_IDX_MISSING) {
    /* The usual cause is that the package is not installed, so say which one provides it. */
    size_t used = strlen(err);
    snprintf(err + used, errlen - used,
             "\nThe Fashion-MNIST data set is provided by the Debian package %s; install it "
             "with `apt-get install %s`, or pass --data-dir DIR naming a directory that holds "
             "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].",
             FM_DATASET_PACKAGE, FM_DATASET_PACKAGE);
  }
  if (st != FM_IDX_OK) fm_dataset_free(out);
  return st;
}

void fm_dataset_free(fm_dataset_t *d) {
  fm_idx_free(&d->train.images);
  fm_idx_free(&d->train.labels);
  fm_idx_free(&d->test.images);
  fm_idx_free(&d->test.labels);
  memset(d, 0, sizeof(*d));
}

void fm_dataset_normalisation(float *scale, float *shift) {
  *scale = 1.0f / (255.0f * PIXEL_STD);
  *shift = -PIXEL_MEAN / PIXEL_STD;
}

void fm_dataset_gather(const fm_split_t *s, const size_t *idx, size_t first, size_t n, float *x,
                       uint8_t *y) {
  float scale, shift;
  fm_dataset_normalisation(&scale, &shift);
  for (size_t r = 0; r < n; r++) {
    size_t e = idx ? idx[r] : first + r;
    const uint8_t *src = s->images.data + e * FM_IMAGE_PIXELS;
    float *dst = x + r * FM_IMAGE_PIXELS;
    for (int p = 0; p < FM_IMAGE_PIXELS; p++) dst[p] = (float)src[p] * scale + shift;
    y[r] = s->labels.data[e];
  }
}
