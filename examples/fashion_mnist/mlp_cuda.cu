/*
 * The MLP on a CUDA device (see mlp_cuda.h).
 *
 * Row-major matrices in cuBLAS. cuBLAS is column-major, and a row-major R x C matrix with
 * leading dimension C is, read column-major, its C x R transpose. So every row-major product
 * C = A * B is issued as the column-major product C^T = B^T * A^T, with the operands swapped
 * and no data moved; the three products of a layer are spelled out where they are issued.
 *
 * The element-wise kernels do exactly the CPU's float operations in the CPU's order (mlp.c):
 * bias then ReLU, the bias gradient as a sum over rows from the first, the softmax with the
 * largest logit subtracted. Only the matrix products (and expf/logf, within a few ulp) round
 * differently, which is why the GPU-versus-CPU test compares with a relative tolerance.
 */
#include <stdlib.h>
#include <string.h>

#include "fm_cuda_check.cuh"
#include "mlp_cuda.h"

/* The per-batch reductions of the loss kernel run in one block of this many threads (a power
 * of two for the tree reduction); rows beyond it are looped over. */
#define LOSS_THREADS 256

/* Accumulated over batches on the device, read by fm_mlp_cuda_take_stats(). */
typedef struct {
  double loss_sum;
  unsigned long long correct;
} stats_t;

struct fm_mlp_cuda {
  int nlayers;
  fm_layer_t layer[FM_MLP_MAX_LAYERS];
  size_t nparams;
  int max_batch, widest;
  float *params, *grads; /* device, nparams each */
  /* Forward state for backward: the input (borrowed) and each layer's output (post-ReLU for
   * hidden layers, logits for the last), max_batch rows each. */
  const float *input;
  int batch;
  float *act[FM_MLP_MAX_LAYERS];
  float *delta[2]; /* ping-pong buffers for the gradient flowing backward */
  stats_t *stats;
  cudaStream_t stream;
  cublasHandle_t blas;
};

/* ---- kernels ---- */

/* out[r][j] = out[r][j] + b[j], then max(., 0) unless this is the last layer. */
static __global__ void bias_act_kernel(float *out, const float *b, size_t n, int cols, int relu) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = out[i] + b[i % (size_t)cols];
    out[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

/* gb[j] = sum over rows r (from 0 up, as mlp.c adds them) of dz[r][j]. */
static __global__ void bias_grad_kernel(const float *dz, int rows, int cols, float *gb) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int r = 0; r < rows; r++) s += dz[(size_t)r * cols + j];
    gb[j] = s;
  }
}

/* Through the ReLU of the layer below: its output was positive exactly where its input was. */
static __global__ void relu_mask_kernel(float *dx, const float *a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    if (a[i] <= 0.0f) dx[i] = 0.0f;
}

/* The first index of the largest logit, as mlp.c's argmax (strict >, so ties keep the first). */
static __device__ int argmax_row(const float *z, int n) {
  int best = 0;
  for (int j = 1; j < n; j++)
    if (z[j] > z[best]) best = j;
  return best;
}

/*
 * One block for the whole batch. Each thread takes rows tid, tid + LOSS_THREADS, ...; per row
 * it counts a correct prediction and, when dz is not NULL, computes the row's loss and writes
 * (softmax - onehot) / batch into dz, with mlp.c's operations. The per-thread sums are then
 * reduced in a fixed tree and thread 0 adds them to the accumulators, so the result does not
 * depend on scheduling (no atomics).
 */
static __global__ void __launch_bounds__(LOSS_THREADS)
    loss_kernel(const float *logits, const uint8_t *y, int batch, int classes, float *dz,
                stats_t *stats) {
  __shared__ double s_loss[LOSS_THREADS];
  __shared__ unsigned long long s_correct[LOSS_THREADS];
  double loss = 0.0;
  unsigned long long correct = 0;
  float inv_batch = 1.0f / (float)batch;
  for (int r = threadIdx.x; r < batch; r += LOSS_THREADS) {
    const float *z = logits + (size_t)r * classes;
    int label = y[r], top = argmax_row(z, classes);
    correct += top == label;
    if (!dz) continue;
    float *d = dz + (size_t)r * classes;
    /* Subtracting the largest logit keeps expf() from overflowing. */
    float zmax = z[top], sum = 0.0f;
    for (int j = 0; j < classes; j++) sum += (d[j] = expf(z[j] - zmax));
    loss += (double)(logf(sum) + zmax - z[label]);
    for (int j = 0; j < classes; j++) d[j] = d[j] / sum * inv_batch;
    d[label] -= inv_batch;
  }
  s_loss[threadIdx.x] = loss;
  s_correct[threadIdx.x] = correct;
  __syncthreads();
  for (int half = LOSS_THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) {
      s_loss[threadIdx.x] += s_loss[threadIdx.x + half];
      s_correct[threadIdx.x] += s_correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats->loss_sum += s_loss[0];
    stats->correct += s_correct[0];
  }
}

/* ---- row-major products through cuBLAS ---- */

static const float k_one = 1.0f, k_zero = 0.0f;

/* out (batch x n) = in (batch x k) * W (k x n).
 * Column-major: out^T (n x batch) = W^T (n x k, ld n) * in^T (k x batch, ld k). */
static int gemm_forward(fm_mlp_cuda_t *m, int batch, int k, int n, const float *in, const float *w,
                        float *out) {
  FM_CUBLAS_CHECK(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, batch, k, &k_one, w, n, in, k,
                              &k_zero, out, n));
  return 0;
}

/* gw (k x n) = in^T (k x batch) * dz (batch x n).
 * Column-major: gw^T (n x k) = dz^T (n x batch, ld n) * (in^T (k x batch, ld k))^T. */
static int gemm_weight_grad(fm_mlp_cuda_t *m, int batch, int k, int n, const float *in,
                            const float *dz, float *gw) {
  FM_CUBLAS_CHECK(cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, n, k, batch, &k_one, dz, n, in, k,
                              &k_zero, gw, n));
  return 0;
}

/* dx (batch x k) = dz (batch x n) * W^T (n x k).
 * Column-major: dx^T (k x batch) = (W^T (n x k, ld n))^T * dz^T (n x batch, ld n). */
static int gemm_input_grad(fm_mlp_cuda_t *m, int batch, int k, int n, const float *dz,
                           const float *w, float *dx) {
  FM_CUBLAS_CHECK(cublasSgemm(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, k, batch, n, &k_one, w, n, dz, n,
                              &k_zero, dx, k));
  return 0;
}

/* ---- life cycle ---- */

static int alloc_floats(float **p, size_t n) {
  FM_CUDA_CHECK(cudaMalloc((void **)p, sizeof(float) * (n ? n : 1)));
  return 0;
}

static int setup(fm_mlp_cuda_t *m, const fm_mlp_t *host) {
  /* A non-blocking stream does not synchronise with the legacy default stream, so nothing a
   * library does there can serialise the training step. */
  FM_CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
  FM_CUBLAS_CHECK(cublasCreate(&m->blas));
  FM_CUBLAS_CHECK(cublasSetStream(m->blas, m->stream));
  /* Plain FP32 products: TF32 tensor-core math (CUBLAS_TF32_TENSOR_OP_MATH) would round the
   * inputs to 10 mantissa bits and move the results far outside the GPU-versus-CPU test's
   * tolerance. No atomics keeps the products deterministic from run to run. */
  FM_CUBLAS_CHECK(cublasSetMathMode(m->blas, CUBLAS_DEFAULT_MATH));
  FM_CUBLAS_CHECK(cublasSetAtomicsMode(m->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
  FM_CUBLAS_CHECK(cublasSetPointerMode(m->blas, CUBLAS_POINTER_MODE_HOST));
  if (alloc_floats(&m->params, m->nparams) || alloc_floats(&m->grads, m->nparams))
    return FM_CUDA_FAILED;
  for (int l = 0; l < m->nlayers; l++)
    if (alloc_floats(&m->act[l], (size_t)m->max_batch * (size_t)m->layer[l].out))
      return FM_CUDA_FAILED;
  for (int i = 0; i < 2; i++)
    if (alloc_floats(&m->delta[i], (size_t)m->max_batch * (size_t)m->widest)) return FM_CUDA_FAILED;
  FM_CUDA_CHECK(cudaMalloc((void **)&m->stats, sizeof(stats_t)));
  FM_CUDA_CHECK(cudaMemcpyAsync(m->params, host->params, sizeof(float) * m->nparams,
                                cudaMemcpyHostToDevice, m->stream));
  FM_CUDA_CHECK(cudaMemsetAsync(m->grads, 0, sizeof(float) * m->nparams, m->stream));
  FM_CUDA_CHECK(cudaMemsetAsync(m->stats, 0, sizeof(stats_t), m->stream));
  /* The caller may free the host model as soon as this returns. */
  FM_CUDA_CHECK(cudaStreamSynchronize(m->stream));
  return 0;
}

int fm_mlp_cuda_create(const fm_mlp_t *host, int max_batch, fm_mlp_cuda_t **out) {
  *out = NULL;
  if (host->nlayers < 1 || host->nlayers > FM_MLP_MAX_LAYERS || max_batch < 1)
    return fm_cuda_fail("fm_mlp_cuda_create", "invalid layer count or batch size", __FILE__,
                        __LINE__);
  fm_mlp_cuda_t *m = (fm_mlp_cuda_t *)calloc(1, sizeof(*m));
  if (!m) return fm_cuda_fail("calloc", "out of host memory", __FILE__, __LINE__);
  m->nlayers = host->nlayers;
  memcpy(m->layer, host->layer, sizeof(m->layer));
  m->nparams = host->nparams;
  m->max_batch = max_batch;
  for (int l = 0; l < m->nlayers; l++) {
    if (m->layer[l].in > m->widest) m->widest = m->layer[l].in;
    if (m->layer[l].out > m->widest) m->widest = m->layer[l].out;
  }
  if (setup(m, host) != 0) {
    fm_mlp_cuda_destroy(m);
    return FM_CUDA_FAILED;
  }
  *out = m;
  return 0;
}

void fm_mlp_cuda_destroy(fm_mlp_cuda_t *m) {
  if (!m) return;
  /* Work still queued may use the buffers; errors are moot here (the model is going away). */
  if (m->stream) cudaStreamSynchronize(m->stream);
  cudaFree(m->params);
  cudaFree(m->grads);
  for (int l = 0; l < FM_MLP_MAX_LAYERS; l++) cudaFree(m->act[l]);
  cudaFree(m->delta[0]);
  cudaFree(m->delta[1]);
  cudaFree(m->stats);
  if (m->blas) cublasDestroy(m->blas);
  if (m->stream) cudaStreamDestroy(m->stream);
  free(m);
}

void *fm_mlp_cuda_stream(const fm_mlp_cuda_t *m) {
  return (void *)m->stream;
}
float *fm_mlp_cuda_params(const fm_mlp_cuda_t *m) {
  return m->params;
}
float *fm_mlp_cuda_grads(const fm_mlp_cuda_t *m) {
  return m->grads;
}
const char *fm_mlp_cuda_gemm_name(void) {
  return "cublas";
}

/* ---- passes ---- */

static const float *weights(const fm_mlp_cuda_t *m, int l) {
  return m->params + m->layer[l].offset;
}
static const float *bias(const fm_mlp_cuda_t *m, int l) {
  return weights(m, l) + (size_t)m->layer[l].in * (size_t)m->layer[l].out;
}

int fm_mlp_cuda_forward(fm_mlp_cuda_t *m, const float *x, int batch) {
  if (batch < 1 || batch > m->max_batch)
    return fm_cuda_fail("fm_mlp_cuda_forward", "batch size out of range", __FILE__, __LINE__);
  m->input = x;
  m->batch = batch;
  const float *in = x;
  for (int l = 0; l < m->nlayers; l++) {
    const fm_layer_t *ly = &m->layer[l];
    float *out = m->act[l];
    if (gemm_forward(m, batch, ly->in, ly->out, in, weights(m, l), out)) return FM_CUDA_FAILED;
    size_t n = (size_t)batch * (size_t)ly->out;
    bias_act_kernel<<<fm_cuda_blocks(n), FM_CUDA_THREADS, 0, m->stream>>>(
        out, bias(m, l), n, ly->out, l < m->nlayers - 1);
    FM_CUDA_LAUNCHED("bias_act_kernel");
    in = out;
  }
  return 0;
}

static int launch_loss(fm_mlp_cuda_t *m, const uint8_t *y, float *dz) {
  if (m->batch < 1)
    return fm_cuda_fail("fm_mlp_cuda_loss", "no forward pass yet", __FILE__, __LINE__);
  loss_kernel<<<1, LOSS_THREADS, 0, m->stream>>>(m->act[m->nlayers - 1], y, m->batch,
                                                 m->layer[m->nlayers - 1].out, dz, m->stats);
  FM_CUDA_LAUNCHED("loss_kernel");
  return 0;
}

int fm_mlp_cuda_loss(fm_mlp_cuda_t *m, const uint8_t *y) {
  return launch_loss(m, y, m->delta[0]);
}

int fm_mlp_cuda_count_correct(fm_mlp_cuda_t *m, const uint8_t *y) {
  return launch_loss(m, y, NULL);
}

int fm_mlp_cuda_take_stats(fm_mlp_cuda_t *m, double *loss_sum, int64_t *correct) {
  stats_t s;
  FM_CUDA_CHECK(cudaMemcpyAsync(&s, m->stats, sizeof(s), cudaMemcpyDeviceToHost, m->stream));
  FM_CUDA_CHECK(cudaMemsetAsync(m->stats, 0, sizeof(stats_t), m->stream));
  FM_CUDA_CHECK(cudaStreamSynchronize(m->stream));
  if (loss_sum) *loss_sum = s.loss_sum;
  if (correct) *correct = (int64_t)s.correct;
  return 0;
}

int fm_mlp_cuda_backward(fm_mlp_cuda_t *m, fm_grad_ready_cb cb, void *ctx) {
  int batch = m->batch, cur = 0;
  if (batch < 1)
    return fm_cuda_fail("fm_mlp_cuda_backward", "no forward pass yet", __FILE__, __LINE__);
  for (int l = m->nlayers - 1; l >= 0; l--) {
    const fm_layer_t *ly = &m->layer[l];
    const float *dz = m->delta[cur];
    const float *in = l > 0 ? m->act[l - 1] : m->input;
    float *gw = m->grads + ly->offset, *gb = gw + (size_t)ly->in * (size_t)ly->out;
    if (gemm_weight_grad(m, batch, ly->in, ly->out, in, dz, gw)) return FM_CUDA_FAILED;
    bias_grad_kernel<<<fm_cuda_blocks((size_t)ly->out), FM_CUDA_THREADS, 0, m->stream>>>(
        dz, batch, ly->out, gb);
    FM_CUDA_LAUNCHED("bias_grad_kernel");
    if (cb) {
      int rc = cb(ctx, l);
      if (rc != 0) return rc;
    }
    if (l == 0) break;
    float *dx = m->delta[cur ^ 1];
    if (gemm_input_grad(m, batch, ly->in, ly->out, dz, weights(m, l), dx)) return FM_CUDA_FAILED;
    size_t n = (size_t)batch * (size_t)ly->in;
    relu_mask_kernel<<<fm_cuda_blocks(n), FM_CUDA_THREADS, 0, m->stream>>>(dx, m->act[l - 1], n);
    FM_CUDA_LAUNCHED("relu_mask_kernel");
    cur ^= 1;
  }
  return 0;
}

int fm_mlp_cuda_download(fm_mlp_cuda_t *m, fm_mlp_cuda_buf_t which, float *host) {
  const float *src = which == FM_MLP_CUDA_PARAMS  ? m->params
                     : which == FM_MLP_CUDA_GRADS ? m->grads
                                                  : m->act[m->nlayers - 1];
  size_t n = which == FM_MLP_CUDA_LOGITS ? (size_t)m->batch * (size_t)m->layer[m->nlayers - 1].out
                                         : m->nparams;
  if (n) {
    FM_CUDA_CHECK(cudaMemcpyAsync(host, src, sizeof(float) * n, cudaMemcpyDeviceToHost, m->stream));
  }
  FM_CUDA_CHECK(cudaStreamSynchronize(m->stream));
  return 0;
}
