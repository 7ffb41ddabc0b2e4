/*
 * The MLP of mlp.h on a CUDA device: the same layers, the same flat parameter layout (layer l
 * at [layer[l].offset, + layer[l].count): weights in x out row-major, then biases), the same
 * loss and the same backward order, so the data-parallel layer sees exactly the tensors the
 * CPU path registers, only in device memory.
 *
 * The parameters are not initialised here: fm_mlp_cuda_create() uploads those of a host model
 * built by fm_mlp_create(), so a GPU run starts from weights bit-identical to a CPU run's.
 *
 * Everything runs on one stream of the model's own (fm_mlp_cuda_stream()): the matrix products
 * through cuBLAS (FP32 arithmetic, no TF32), the element-wise parts as small kernels. Calls
 * only enqueue work and return; the training loop synchronises once per epoch, when it reads
 * the accumulated loss and accuracy. Errors follow fm_cuda.h: 0, or FM_CUDA_FAILED with
 * fm_cuda_error() saying which call failed.
 *
 * Not thread-safe: one thread drives a model.
 */
#ifndef FM_MLP_CUDA_H
#define FM_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "fm_cuda.h"
#include "mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_mlp_cuda fm_mlp_cuda_t;

/*
 * Builds the device model on the current device (fm_cuda_select_device), with host's layers
 * and a copy of host's parameters, for batches of up to max_batch rows; host is only read, and
 * may be destroyed afterwards. Gradients start at zero. On failure *out is NULL.
 */
int fm_mlp_cuda_create(const fm_mlp_t *host, int max_batch, fm_mlp_cuda_t **out);
void fm_mlp_cuda_destroy(fm_mlp_cuda_t *m); /* NULL is accepted; waits for the stream */

/* The cudaStream_t all the model's work runs on (the data-parallel layer's compute stream). */
void *fm_mlp_cuda_stream(const fm_mlp_cuda_t *m);
/* Device pointers to the nparams parameters and gradients, in the host model's layout. */
float *fm_mlp_cuda_params(const fm_mlp_cuda_t *m);
float *fm_mlp_cuda_grads(const fm_mlp_cuda_t *m);

/* Runs batch rows of x (device, batch x inputs, kept until backward) through the network. */
int fm_mlp_cuda_forward(fm_mlp_cuda_t *m, const float *x, int batch);

/*
 * Softmax cross-entropy of the last forward pass against y (device labels): stores the
 * gradient of the batch's mean loss for backward, and adds the batch's summed loss and its
 * number of correctly classified rows to the model's device-side accumulators.
 */
int fm_mlp_cuda_loss(fm_mlp_cuda_t *m, const uint8_t *y);

/* Adds the number of rows of the last forward pass whose largest logit is the label to the
 * accumulators (evaluation: no loss, no gradient). */
int fm_mlp_cuda_count_correct(fm_mlp_cuda_t *m, const uint8_t *y);

/* Waits for the stream, returns the accumulated loss sum and correct count (either pointer
 * may be NULL) and resets both to zero. */
int fm_mlp_cuda_take_stats(fm_mlp_cuda_t *m, double *loss_sum, int64_t *correct);

/*
 * Backward pass of the last forward pass and loss: writes (not accumulates) every layer's
 * gradient, last layer first, calling cb(ctx, l) right after enqueuing layer l's weight and
 * bias gradient kernels and before enqueuing anything that flows into layer l - 1, so that
 * the data-parallel layer can record its event and communicate layer l while the GPU goes on
 * with the layers below. Layer l's gradient is not touched again in this call after cb.
 * Returns 0, FM_CUDA_FAILED, or cb's non-zero return (which stops the pass).
 */
int fm_mlp_cuda_backward(fm_mlp_cuda_t *m, fm_grad_ready_cb cb, void *ctx);

/* Copies, after waiting for the stream, the parameters or gradients (nparams floats), or the
 * logits of the last forward pass (batch x classes), into host memory. */
typedef enum { FM_MLP_CUDA_PARAMS, FM_MLP_CUDA_GRADS, FM_MLP_CUDA_LOGITS } fm_mlp_cuda_buf_t;
int fm_mlp_cuda_download(fm_mlp_cuda_t *m, fm_mlp_cuda_buf_t which, float *host);

/* "cublas": the matrix-product code, for the run's header line. */
const char *fm_mlp_cuda_gemm_name(void);

#ifdef __cplusplus
}
#endif
#endif
