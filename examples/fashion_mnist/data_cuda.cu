/*
 * Fashion-MNIST on a CUDA device (see data_cuda.h).
 */
#include <stdlib.h>

#include "data_cuda.h"
#include "fm_cuda_check.cuh"

typedef struct {
  uint8_t *images; /* count x FM_IMAGE_PIXELS */
  uint8_t *labels; /* count */
  size_t count;
} split_t;

struct fm_data_cuda {
  cudaStream_t stream; /* borrowed */
  float scale, shift;
  split_t train, test;
  size_t *idx; /* this rank's training indices of the epoch */
  size_t max_indices, epoch_indices;
  float *x;   /* max_batch x FM_IMAGE_PIXELS */
  uint8_t *y; /* max_batch */
  int max_batch;
};

/*
 * Row r of the batch is example idx[r] (or first + r when idx is NULL). The product and the
 * sum are rounded separately (__fmul_rn, __fadd_rn: never fused into one multiply-add,
 * whatever the compiler flags), as the CPU's fm_dataset_gather computes them.
 */
static __global__ void gather_kernel(const uint8_t *images, const uint8_t *labels,
                                     const size_t *idx, size_t first, int rows, float scale,
                                     float shift, float *x, uint8_t *y) {
  size_t n = (size_t)rows * FM_IMAGE_PIXELS;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / FM_IMAGE_PIXELS, p = i % FM_IMAGE_PIXELS;
    size_t e = idx ? idx[r] : first + r;
    x[i] = __fadd_rn(__fmul_rn((float)images[e * FM_IMAGE_PIXELS + p], scale), shift);
    if (p == 0) y[r] = labels[e];
  }
}

static int upload(split_t *dst, const fm_split_t *src, cudaStream_t stream) {
  size_t bytes = src->count * FM_IMAGE_PIXELS;
  dst->count = src->count;
  FM_CUDA_CHECK(cudaMalloc((void **)&dst->images, bytes ? bytes : 1));
  FM_CUDA_CHECK(cudaMalloc((void **)&dst->labels, src->count ? src->count : 1));
  if (src->count) {
    FM_CUDA_CHECK(
        cudaMemcpyAsync(dst->images, src->images.data, bytes, cudaMemcpyHostToDevice, stream));
    FM_CUDA_CHECK(
        cudaMemcpyAsync(dst->labels, src->labels.data, src->count, cudaMemcpyHostToDevice, stream));
  }
  return 0;
}

static int setup(fm_data_cuda_t *d, const fm_dataset_t *data) {
  if (upload(&d->train, &data->train, d->stream) || upload(&d->test, &data->test, d->stream))
    return FM_CUDA_FAILED;
  FM_CUDA_CHECK(
      cudaMalloc((void **)&d->idx, sizeof(size_t) * (d->max_indices ? d->max_indices : 1)));
  FM_CUDA_CHECK(cudaMalloc((void **)&d->x, sizeof(float) * (size_t)d->max_batch * FM_IMAGE_PIXELS));
  FM_CUDA_CHECK(cudaMalloc((void **)&d->y, (size_t)d->max_batch));
  /* The data set's host copy may be freed once this returns. */
  FM_CUDA_CHECK(cudaStreamSynchronize(d->stream));
  return 0;
}

int fm_data_cuda_create(const fm_dataset_t *data, size_t max_indices, int max_batch, float scale,
                        float shift, void *stream, fm_data_cuda_t **out) {
  *out = NULL;
  if (max_batch < 1)
    return fm_cuda_fail("fm_data_cuda_create", "invalid batch size", __FILE__, __LINE__);
  fm_data_cuda_t *d = (fm_data_cuda_t *)calloc(1, sizeof(*d));
  if (!d) return fm_cuda_fail("calloc", "out of host memory", __FILE__, __LINE__);
  d->stream = (cudaStream_t)stream;
  d->scale = scale;
  d->shift = shift;
  d->max_indices = max_indices;
  d->max_batch = max_batch;
  if (setup(d, data) != 0) {
    fm_data_cuda_destroy(d);
    return FM_CUDA_FAILED;
  }
  *out = d;
  return 0;
}

void fm_data_cuda_destroy(fm_data_cuda_t *d) {
  if (!d) return;
  cudaStreamSynchronize(d->stream);
  cudaFree(d->train.images);
  cudaFree(d->train.labels);
  cudaFree(d->test.images);
  cudaFree(d->test.labels);
  cudaFree(d->idx);
  cudaFree(d->x);
  cudaFree(d->y);
  free(d);
}

int fm_data_cuda_set_epoch(fm_data_cuda_t *d, const size_t *idx, size_t n) {
  if (n > d->max_indices)
    return fm_cuda_fail("fm_data_cuda_set_epoch", "more indices than allocated", __FILE__,
                        __LINE__);
  for (size_t i = 0; i < n; i++)
    if (idx[i] >= d->train.count)
      return fm_cuda_fail("fm_data_cuda_set_epoch", "index beyond the training set", __FILE__,
                          __LINE__);
  /* From pageable memory the copy is staged before the call returns, so the sampler may
   * overwrite idx for the next epoch at once; the stream orders it after the gathers of the
   * epoch before. */
  if (n) {
    FM_CUDA_CHECK(
        cudaMemcpyAsync(d->idx, idx, sizeof(size_t) * n, cudaMemcpyHostToDevice, d->stream));
  }
  d->epoch_indices = n;
  return 0;
}

static int gather(fm_data_cuda_t *d, const split_t *s, const size_t *idx, size_t first, int n) {
  if (n < 1 || n > d->max_batch)
    return fm_cuda_fail("fm_data_cuda_gather", "batch size out of range", __FILE__, __LINE__);
  gather_kernel<<<fm_cuda_blocks((size_t)n * FM_IMAGE_PIXELS), FM_CUDA_THREADS, 0, d->stream>>>(
      s->images, s->labels, idx, first, n, d->scale, d->shift, d->x, d->y);
  FM_CUDA_LAUNCHED("gather_kernel");
  return 0;
}

int fm_data_cuda_gather_train(fm_data_cuda_t *d, size_t first, int n) {
  if (first > d->epoch_indices || (size_t)n > d->epoch_indices - first)
    return fm_cuda_fail("fm_data_cuda_gather_train", "rows beyond the epoch's indices", __FILE__,
                        __LINE__);
  return gather(d, &d->train, d->idx + first, 0, n);
}

int fm_data_cuda_gather_test(fm_data_cuda_t *d, size_t first, int n) {
  if (first > d->test.count || (size_t)n > d->test.count - first)
    return fm_cuda_fail("fm_data_cuda_gather_test", "rows beyond the test set", __FILE__, __LINE__);
  return gather(d, &d->test, NULL, first, n);
}

const float *fm_data_cuda_x(const fm_data_cuda_t *d) {
  return d->x;
}
const uint8_t *fm_data_cuda_y(const fm_data_cuda_t *d) {
  return d->y;
}
