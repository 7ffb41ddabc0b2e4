/*
 * IDX and data set loading: the real Debian files (magic numbers, dimensions, the balanced
 * label histogram), limits, normalisation, and every way a file can be wrong.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dataset.h"
#include "idx.h"
#include "test.h"

static char tmpdir[] = "/tmp/fm_idx_XXXXXX";

/* Writes an IDX file (gzip-compressed when gz) with the given header words and payload. */
static void write_idx(const char *name, int gz, const uint32_t *hdr, int nhdr, const void *data,
                      size_t len) {
  char path[512];
  unsigned char buf[64];
  snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
  for (int i = 0; i < nhdr; i++) {
    buf[4 * i] = (unsigned char)(hdr[i] >> 24);
    buf[4 * i + 1] = (unsigned char)(hdr[i] >> 16);
    buf[4 * i + 2] = (unsigned char)(hdr[i] >> 8);
    buf[4 * i + 3] = (unsigned char)hdr[i];
  }
  if (gz) {
    gzFile f = gzopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ(gzwrite(f, buf, 4u * (unsigned)nhdr), 4 * nhdr);
    if (len) ASSERT_EQ(gzwrite(f, data, (unsigned)len), (int)len);
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ(fwrite(buf, 4, (size_t)nhdr, f), (size_t)nhdr);
    if (len) ASSERT_EQ(fwrite(data, 1, len, f), len);
    ASSERT_EQ(fclose(f), 0);
  }
}

static fm_idx_status_t load_tmp(const char *name, uint32_t magic, fm_idx_t *f, char *err,
                                size_t errlen) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
  return fm_idx_load(path, magic, 0, f, err, errlen);
}

static void test_synthetic(void) {
  char err[1024];
  fm_idx_t f;
  uint8_t pix[2 * 28 * 28], lab[2] = {3, 9};
  for (size_t i = 0; i < sizeof(pix); i++) pix[i] = (uint8_t)i;
  uint32_t img_hdr[4] = {FM_IDX_MAGIC_IMAGES, 2, 28, 28}, lab_hdr[2] = {FM_IDX_MAGIC_LABELS, 2};

  /* A good gzip file and the same content uncompressed both load. */
  write_idx("good.gz", 1, img_hdr, 4, pix, sizeof(pix));
  ASSERT_EQ(load_tmp("good.gz", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(f.ndims, 3);
  ASSERT_EQ(f.count, 2);
  ASSERT_EQ(f.item_bytes, 784);
  ASSERT_EQ(memcmp(f.data, pix, sizeof(pix)), 0);
  fm_idx_free(&f);
  write_idx("plain", 0, lab_hdr, 2, lab, 2);
  ASSERT_EQ(load_tmp("plain", FM_IDX_MAGIC_LABELS, &f, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(f.count, 2);
  ASSERT_EQ(f.data[1], 9);
  fm_idx_free(&f);

  /* Labels where images are expected: the magic names both values. */
  ASSERT_EQ(load_tmp("plain", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "magic 0x00000801, expected 0x00000803") != NULL);
  ASSERT_TRUE(f.data == NULL);

  /* Fewer data bytes than the header promises. */
  write_idx("short.gz", 1, img_hdr, 4, pix, 100);
  ASSERT_EQ(load_tmp("short.gz", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "truncated") != NULL);
  ASSERT_TRUE(strstr(err, "short.gz") != NULL);

  /* A header cut in the middle, and a file that is not IDX at all. */
  write_idx("cut", 0, img_hdr, 2, NULL, 0);
  ASSERT_EQ(load_tmp("cut", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "truncated IDX header") != NULL);
  uint32_t zero_dim[4] = {FM_IDX_MAGIC_IMAGES, 2, 0, 28};
  write_idx("zero", 0, zero_dim, 4, NULL, 0);
  ASSERT_EQ(load_tmp("zero", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "dimension 1 is 0") != NULL);
  uint32_t huge[4] = {FM_IDX_MAGIC_IMAGES, 0xffffffffu, 28, 28};
  write_idx("huge", 0, huge, 4, NULL, 0);
  ASSERT_EQ(load_tmp("huge", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "implausible") != NULL);

  /* A missing file is told apart from a bad one. */
  ASSERT_EQ(load_tmp("absent.gz", FM_IDX_MAGIC_IMAGES, &f, err, sizeof(err)), FM_IDX_MISSING);
  ASSERT_TRUE(strstr(err, "No such file") != NULL);

  /* A whole data set directory: consistent files load, then each inconsistency is caught. */
  fm_dataset_t d;
  write_idx("train-images-idx3-ubyte.gz", 1, img_hdr, 4, pix, sizeof(pix));
  write_idx("train-labels-idx1-ubyte.gz", 1, lab_hdr, 2, lab, 2);
  write_idx("t10k-images-idx3-ubyte", 0, img_hdr, 4, pix, sizeof(pix));
  write_idx("t10k-labels-idx1-ubyte", 0, lab_hdr, 2, lab, 2);
  ASSERT_EQ(fm_dataset_load(tmpdir, 0, 1, &d, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(d.train.count, 2);
  ASSERT_EQ(d.test.count, 1);
  ASSERT_EQ(d.test.file_count, 2);
  fm_dataset_free(&d);
  uint8_t bad_lab[2] = {3, 10};
  write_idx("train-labels-idx1-ubyte.gz", 1, lab_hdr, 2, bad_lab, 2);
  ASSERT_EQ(fm_dataset_load(tmpdir, 0, 0, &d, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "label 1 is 10") != NULL);
  uint32_t three[2] = {FM_IDX_MAGIC_LABELS, 3};
  uint8_t lab3[3] = {1, 2, 3};
  write_idx("train-labels-idx1-ubyte.gz", 1, three, 2, lab3, 3);
  ASSERT_EQ(fm_dataset_load(tmpdir, 0, 0, &d, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "holds 3 labels but") != NULL);
  uint32_t small_img[4] = {FM_IDX_MAGIC_IMAGES, 2, 14, 56};
  write_idx("train-labels-idx1-ubyte.gz", 1, lab_hdr, 2, lab, 2);
  write_idx("train-images-idx3-ubyte.gz", 1, small_img, 4, pix, sizeof(pix));
  ASSERT_EQ(fm_dataset_load(tmpdir, 0, 0, &d, err, sizeof(err)), FM_IDX_BAD);
  ASSERT_TRUE(strstr(err, "not 28x28") != NULL);

  /* A directory without the files: the message names the Debian package and the command. */
  char empty[600];
  snprintf(empty, sizeof(empty), "%s/empty", tmpdir);
  ASSERT_EQ(mkdir(empty, 0700), 0);
  ASSERT_EQ(fm_dataset_load(empty, 0, 0, &d, err, sizeof(err)), FM_IDX_MISSING);
  ASSERT_TRUE(strstr(err, "train-images-idx3-ubyte.gz") != NULL);
  ASSERT_TRUE(strstr(err, "dataset-fashion-mnist") != NULL);
  ASSERT_TRUE(strstr(err, "apt-get install dataset-fashion-mnist") != NULL);
  ASSERT_TRUE(d.train.images.data == NULL);
  rmdir(empty);
  const char *names[] = {"good.gz",
                         "plain",
                         "short.gz",
                         "cut",
                         "zero",
                         "huge",
                         "train-images-idx3-ubyte.gz",
                         "train-labels-idx1-ubyte.gz",
                         "t10k-images-idx3-ubyte",
                         "t10k-labels-idx1-ubyte"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
    unlink(path);
  }
}

static void check_split(const char *prefix, uint32_t count) {
  char path[512], err[1024];
  fm_idx_t img, lab;
  snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", FM_DEFAULT_DATA_DIR, prefix);
  ASSERT_EQ(fm_idx_load(path, FM_IDX_MAGIC_IMAGES, 0, &img, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(img.magic, 0x803);
  ASSERT_EQ(img.ndims, 3);
  ASSERT_EQ(img.dims[0], count);
  ASSERT_EQ(img.dims[1], 28);
  ASSERT_EQ(img.dims[2], 28);
  ASSERT_EQ(img.count, count);
  snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", FM_DEFAULT_DATA_DIR, prefix);
  ASSERT_EQ(fm_idx_load(path, FM_IDX_MAGIC_LABELS, 0, &lab, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(lab.magic, 0x801);
  ASSERT_EQ(lab.ndims, 1);
  ASSERT_EQ(lab.count, count);
  /* Fashion-MNIST is balanced: exactly a tenth of each split per class. */
  size_t hist[10] = {0};
  for (size_t i = 0; i < lab.count; i++) {
    ASSERT_LT(lab.data[i], 10);
    hist[lab.data[i]]++;
  }
  for (int c = 0; c < 10; c++) ASSERT_EQ(hist[c], count / 10);
  /* The first example of both splits is an ankle boot (class 9). */
  ASSERT_EQ(lab.data[0], 9);
  /* A limit reads a prefix of the same bytes. */
  fm_idx_t part;
  ASSERT_EQ(fm_idx_load(path, FM_IDX_MAGIC_LABELS, 100, &part, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(part.count, 100);
  ASSERT_EQ(part.dims[0], count);
  ASSERT_EQ(memcmp(part.data, lab.data, 100), 0);
  fm_idx_free(&part);
  fm_idx_free(&img);
  fm_idx_free(&lab);
}

static void test_real(void) {
  check_split("train", 60000);
  check_split("t10k", 10000);
  /* Normalised pixels of the training set have about zero mean and unit variance. */
  fm_dataset_t d;
  char err[1024];
  ASSERT_EQ(fm_dataset_load(FM_DEFAULT_DATA_DIR, 2000, 10, &d, err, sizeof(err)), FM_IDX_OK);
  ASSERT_EQ(d.train.count, 2000);
  ASSERT_EQ(d.train.file_count, 60000);
  ASSERT_EQ(d.test.count, 10);
  float *x = malloc(sizeof(float) * 2000 * FM_IMAGE_PIXELS);
  uint8_t y[2000];
  ASSERT_TRUE(x != NULL);
  fm_dataset_gather(&d.train, NULL, 0, 2000, x, y);
  double sum = 0, sq = 0;
  for (size_t i = 0; i < 2000u * FM_IMAGE_PIXELS; i++) sum += x[i], sq += (double)x[i] * x[i];
  double mean = sum / (2000.0 * FM_IMAGE_PIXELS);
  ASSERT_NEAR(mean, 0.0, 0.05);
  ASSERT_NEAR(sqrt(sq / (2000.0 * FM_IMAGE_PIXELS) - mean * mean), 1.0, 0.05);
  ASSERT_EQ(y[0], 9);
  /* Gathering by index picks the same rows. */
  size_t idx[2] = {1999, 0};
  fm_dataset_gather(&d.train, idx, 0, 2, x, y);
  ASSERT_EQ(y[1], 9);
  ASSERT_EQ(y[0], d.train.labels.data[1999]);
  free(x);
  fm_dataset_free(&d);
}

int main(void) {
  ASSERT_TRUE(mkdtemp(tmpdir) != NULL);
  test_synthetic();
  rmdir(tmpdir);
  if (access(FM_DEFAULT_DATA_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0)
    TEST_SKIP("%s is not installed (apt-get install %s)", FM_DATASET_PACKAGE, FM_DATASET_PACKAGE);
  test_real();
  printf("ok\n");
  return 0;
}
