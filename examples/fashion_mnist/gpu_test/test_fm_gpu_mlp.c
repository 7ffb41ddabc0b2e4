/*
 * The CUDA model and batch gather (mlp_cuda.cu, data_cuda.cu) against the CPU code they
 * stand in for (mlp.c, dataset.c), on the same weights and the same batch. This is the test
 * that catches a wrong kernel, a transposed cuBLAS operand or a wrong leading dimension: any
 * of those moves some value by O(1), far beyond the tolerance.
 *
 * What must be equal bit for bit: the uploaded parameters, the gathered and normalised batch
 * (the same float operations in the same order), and the gradients of two identical passes
 * (backward writes rather than accumulates, and the GPU path is deterministic). What may
 * differ by rounding: logits, loss and gradients, because cuBLAS sums the products in another
 * order than fm_sgemm and CUDA's expf/logf are within a few ulp of glibc's. For those the
 * largest difference over a tensor must stay below RTOL times the tensor's largest magnitude.
 * Correct-prediction counts must agree except on rows whose two largest logits are so close
 * that rounding may swap them.
 *
 * The batches are synthetic (random pixels and labels), so the test needs no data set; it
 * exits 77 (skipped) when no CUDA device is usable.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_cuda.h"
#include "dataset.h"
#include "mlp.h"
#include "mlp_cuda.h"
#include "rng.h"
#include "test.h"

#define RTOL 1e-4

#define FM_OK(call)                                                      \
  do {                                                                   \
    if ((call) != 0) TEST_FAIL("%s failed: %s", #call, fm_cuda_error()); \
  } while (0)

#define CUDA_OK(call)                                                            \
  do {                                                                           \
    cudaError_t ce_ = (call);                                                    \
    if (ce_ != cudaSuccess) TEST_FAIL("%s: %s", #call, cudaGetErrorString(ce_)); \
  } while (0)

/* The order in which backward reported layers. */
typedef struct {
  int layer[FM_MLP_MAX_LAYERS];
  int n;
} order_t;

static int record(void *ctx, int layer) {
  order_t *o = ctx;
  if (o->n < FM_MLP_MAX_LAYERS) o->layer[o->n] = layer;
  o->n++;
  return 0;
}

/* Fails unless max |gpu - cpu| <= RTOL * max |cpu| over the n values (and all are finite). */
static void compare(const char *what, const float *gpu, const float *cpu, size_t n) {
  double scale = 0.0, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(gpu[i]) || !isfinite(cpu[i]))
      TEST_FAIL("%s: element %zu is %g on the GPU and %g on the CPU", what, i, gpu[i], cpu[i]);
    if (fabs(cpu[i]) > scale) scale = fabs(cpu[i]);
  }
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)gpu[i] - (double)cpu[i]);
    if (d > worst) worst = d, at = i;
  }
  double rel = scale > 0.0 ? worst / scale : worst;
  printf("  %-18s %9zu values: max |GPU - CPU| = %.3g x max |CPU| (%.4g)\n", what, n, rel, scale);
  if (rel > RTOL)
    TEST_FAIL(
        "%s: element %zu is %.9g on the GPU and %.9g on the CPU: difference %.3g is more "
        "than %g x the largest magnitude %.4g",
        what, at, gpu[at], cpu[at], worst, RTOL, scale);
}

/* Rows whose two largest logits are within rounding distance of each other. */
static int near_ties(const float *logits, int rows, int classes) {
  int ties = 0;
  for (int r = 0; r < rows; r++) {
    const float *z = logits + (size_t)r * classes;
    float a = -INFINITY, b = -INFINITY;
    for (int j = 0; j < classes; j++) {
      if (z[j] > a)
        b = a, a = z[j];
      else if (z[j] > b)
        b = z[j];
    }
    ties += a - b <= 1e-3f * (1.0f + fabsf(a));
  }
  return ties;
}

static void check_correct(const char *what, long long gpu, long long cpu, int ties) {
  printf("  %-18s GPU %lld, CPU %lld (%d near-tied rows)\n", what, gpu, cpu, ties);
  if (llabs(gpu - cpu) > ties)
    TEST_FAIL("%s: %lld correct on the GPU, %lld on the CPU, with only %d near-tied rows", what,
              gpu, cpu, ties);
}

/* `count` random images and labels (the gather only needs count and the two data arrays). */
static void make_split(fm_split_t *s, size_t count, fm_rng_t *rng) {
  memset(s, 0, sizeof(*s));
  s->count = s->file_count = count;
  s->images.count = s->labels.count = count;
  s->images.data = malloc(count * FM_IMAGE_PIXELS);
  s->labels.data = malloc(count);
  ASSERT_TRUE(s->images.data && s->labels.data);
  for (size_t i = 0; i < count * FM_IMAGE_PIXELS; i++)
    s->images.data[i] = (uint8_t)(fm_rng_next(rng) >> 56);
  for (size_t i = 0; i < count; i++) s->labels.data[i] = (uint8_t)fm_rng_below(rng, FM_CLASSES);
}

static void free_split(fm_split_t *s) {
  free(s->images.data);
  free(s->labels.data);
}

/* The gathered batch on the device must equal fm_dataset_gather's, bit for bit. */
static void check_batch(const fm_data_cuda_t *gd, void *stream, const float *x, const uint8_t *y,
                        int batch) {
  size_t nx = (size_t)batch * FM_IMAGE_PIXELS;
  float *gx = malloc(sizeof(float) * nx);
  uint8_t *gy = malloc((size_t)batch);
  ASSERT_TRUE(gx && gy);
  FM_OK(fm_cuda_stream_sync(stream));
  CUDA_OK(cudaMemcpy(gx, fm_data_cuda_x(gd), sizeof(float) * nx, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gy, fm_data_cuda_y(gd), (size_t)batch, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < nx; i++)
    if (memcmp(&gx[i], &x[i], sizeof(float)) != 0)
      TEST_FAIL("gathered pixel %zu (row %zu) is %.9g on the GPU and %.9g on the CPU", i,
                i / FM_IMAGE_PIXELS, gx[i], x[i]);
  for (int r = 0; r < batch; r++)
    if (gy[r] != y[r])
      TEST_FAIL("gathered label %d is %u on the GPU and %u on the CPU", r, gy[r], y[r]);
  free(gx);
  free(gy);
}

static void check_order(const char *who, const order_t *o, int nlayers) {
  ASSERT_EQ(o->n, nlayers);
  for (int i = 0; i < nlayers; i++)
    if (o->layer[i] != nlayers - 1 - i)
      TEST_FAIL("%s backward reported layer %d in position %d, expected %d", who, o->layer[i], i,
                nlayers - 1 - i);
}

static void run_case(const int *sizes, int nsizes, int batch, uint64_t seed) {
  printf("layers %d", sizes[0]);
  for (int i = 1; i < nsizes; i++) printf("-%d", sizes[i]);
  printf(", batch %d\n", batch);
  fm_rng_t rng;
  fm_rng_seed(&rng, seed, 12345);
  fm_dataset_t ds;
  size_t count = (size_t)batch * 2 + 3;
  make_split(&ds.train, count, &rng);
  make_split(&ds.test, (size_t)batch, &rng);
  size_t *idx = malloc(sizeof(size_t) * (size_t)batch);
  float *x = malloc(sizeof(float) * (size_t)batch * FM_IMAGE_PIXELS);
  uint8_t *y = malloc((size_t)batch);
  ASSERT_TRUE(idx && x && y);
  for (int r = 0; r < batch; r++) idx[r] = fm_rng_below(&rng, count);

  /* The GPU model is made from the CPU model before either runs: the same weights. */
  fm_mlp_t cpu;
  ASSERT_EQ(fm_mlp_create(&cpu, sizes, nsizes, batch, seed), 0);
  int nl = cpu.nlayers, classes = sizes[nsizes - 1];
  fm_mlp_cuda_t *gm;
  FM_OK(fm_mlp_cuda_create(&cpu, batch, &gm));
  void *stream = fm_mlp_cuda_stream(gm);
  float scale, shift;
  fm_dataset_normalisation(&scale, &shift);
  fm_data_cuda_t *gd;
  FM_OK(fm_data_cuda_create(&ds, (size_t)batch, batch, scale, shift, stream, &gd));
  float *h = malloc(sizeof(float) * cpu.nparams), *h2 = malloc(sizeof(float) * cpu.nparams);
  float *logits = malloc(sizeof(float) * (size_t)batch * (size_t)classes);
  ASSERT_TRUE(h && h2 && logits);
  FM_OK(fm_mlp_cuda_download(gm, FM_MLP_CUDA_PARAMS, h));
  if (memcmp(h, cpu.params, sizeof(float) * cpu.nparams) != 0)
    TEST_FAIL("the parameters on the device differ from the host model's");

  /* Training batch: gather, forward, loss. */
  fm_dataset_gather(&ds.train, idx, 0, (size_t)batch, x, y);
  FM_OK(fm_data_cuda_set_epoch(gd, idx, (size_t)batch));
  FM_OK(fm_data_cuda_gather_train(gd, 0, batch));
  check_batch(gd, stream, x, y, batch);
  const float *cpu_logits = fm_mlp_forward(&cpu, x, batch);
  int cpu_correct = 0;
  double cpu_loss = fm_mlp_loss(&cpu, y, &cpu_correct) * batch;
  FM_OK(fm_mlp_cuda_forward(gm, fm_data_cuda_x(gd), batch));
  FM_OK(fm_mlp_cuda_loss(gm, fm_data_cuda_y(gd)));
  FM_OK(fm_mlp_cuda_download(gm, FM_MLP_CUDA_LOGITS, logits));
  compare("logits", logits, cpu_logits, (size_t)batch * (size_t)classes);
  double gpu_loss;
  int64_t gpu_correct;
  FM_OK(fm_mlp_cuda_take_stats(gm, &gpu_loss, &gpu_correct));
  printf("  %-18s GPU %.9g, CPU %.9g\n", "batch loss sum", gpu_loss, cpu_loss);
  if (!(fabs(gpu_loss - cpu_loss) <= RTOL * fabs(cpu_loss)))
    TEST_FAIL("loss sum %.9g on the GPU, %.9g on the CPU", gpu_loss, cpu_loss);
  check_correct("correct (train)", gpu_correct, cpu_correct, near_ties(cpu_logits, batch, classes));

  /* Backward: the same layer order, gradients within rounding, layer by layer. */
  order_t co = {{0}, 0}, go = {{0}, 0};
  ASSERT_EQ(fm_mlp_backward(&cpu, record, &co), 0);
  FM_OK(fm_mlp_cuda_backward(gm, record, &go));
  check_order("CPU", &co, nl);
  check_order("GPU", &go, nl);
  FM_OK(fm_mlp_cuda_download(gm, FM_MLP_CUDA_GRADS, h));
  for (int l = 0; l < nl; l++) {
    const fm_layer_t *ly = &cpu.layer[l];
    size_t nw = (size_t)ly->in * (size_t)ly->out;
    char what[64];
    snprintf(what, sizeof(what), "layer %d dW", l);
    compare(what, h + ly->offset, cpu.grads + ly->offset, nw);
    snprintf(what, sizeof(what), "layer %d db", l);
    compare(what, h + ly->offset + nw, cpu.grads + ly->offset + nw, (size_t)ly->out);
  }

  /* The same pass again writes the same gradients (no accumulation, deterministic). */
  FM_OK(fm_mlp_cuda_forward(gm, fm_data_cuda_x(gd), batch));
  FM_OK(fm_mlp_cuda_loss(gm, fm_data_cuda_y(gd)));
  FM_OK(fm_mlp_cuda_backward(gm, NULL, NULL));
  FM_OK(fm_mlp_cuda_download(gm, FM_MLP_CUDA_GRADS, h2));
  if (memcmp(h, h2, sizeof(float) * cpu.nparams) != 0)
    TEST_FAIL("a second identical pass gave different gradients");
  FM_OK(fm_mlp_cuda_take_stats(gm, NULL, NULL));

  /* Evaluation path: test rows in order, correct count only. */
  fm_dataset_gather(&ds.test, NULL, 0, (size_t)batch, x, y);
  FM_OK(fm_data_cuda_gather_test(gd, 0, batch));
  check_batch(gd, stream, x, y, batch);
  cpu_logits = fm_mlp_forward(&cpu, x, batch);
  FM_OK(fm_mlp_cuda_forward(gm, fm_data_cuda_x(gd), batch));
  FM_OK(fm_mlp_cuda_count_correct(gm, fm_data_cuda_y(gd)));
  FM_OK(fm_mlp_cuda_take_stats(gm, &gpu_loss, &gpu_correct));
  ASSERT_TRUE(gpu_loss == 0.0); /* counting adds no loss */
  check_correct("correct (test)", gpu_correct, fm_mlp_count_correct(&cpu, y),
                near_ties(cpu_logits, batch, classes));

  fm_data_cuda_destroy(gd);
  fm_mlp_cuda_destroy(gm);
  fm_mlp_destroy(&cpu);
  free_split(&ds.train);
  free_split(&ds.test);
  free(idx);
  free(x);
  free(y);
  free(h);
  free(h2);
  free(logits);
}

int main(void) {
  int device;
  if (fm_cuda_select_device(0, &device) != 0) TEST_SKIP("no CUDA device (%s)", fm_cuda_error());
  char name[256];
  fm_cuda_device_name(name, sizeof(name));
  printf("device %d: %s\n", device, name);
  /* The example's default model and batch. */
  run_case((const int[]){FM_IMAGE_PIXELS, 512, 512, FM_CLASSES}, 4, 64, 1);
  /* Odd widths and batch: no dimension is a multiple of a tile or a warp. */
  run_case((const int[]){FM_IMAGE_PIXELS, 100, 33, FM_CLASSES}, 4, 37, 7);
  /* One layer (no ReLU at all), one row. */
  run_case((const int[]){FM_IMAGE_PIXELS, FM_CLASSES}, 2, 1, 3);
  /* More rows than the loss kernel has threads, so each thread takes several. */
  run_case((const int[]){FM_IMAGE_PIXELS, 256, 64, 32, FM_CLASSES}, 5, 1000, 5);
  printf("ok\n");
  return 0;
}
