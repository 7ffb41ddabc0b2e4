/*
 * Fashion-MNIST on a CUDA device: both splits are uploaded once (60000 + 10000 images of 784
 * bytes: 55 MB, small next to any GPU's memory), so a training step moves no pixels over PCIe;
 * each batch is gathered and normalised on the device into a float buffer the model reads.
 * An epoch's sample order is uploaded once per epoch (this rank's indices, from the same
 * sampler as the CPU path), and a batch is a slice of it.
 *
 * All work is enqueued on the stream given at creation (the model's), so a gather is ordered
 * before the forward pass that reads it and after the previous step's backward pass, without
 * any synchronisation. Errors follow fm_cuda.h.
 */
#ifndef FM_DATA_CUDA_H
#define FM_DATA_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "fm_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fm_data_cuda fm_data_cuda_t;

/*
 * Uploads `data` (both splits) to the current device for batches of up to max_batch rows and
 * epochs of up to max_indices training indices. Pixels become (float)pixel * scale + shift
 * (fm_dataset_normalisation's constants, so the inputs equal the CPU path's bit for bit).
 * `stream` is a cudaStream_t that must outlive the result. On failure *out is NULL.
 */
int fm_data_cuda_create(const fm_dataset_t *data, size_t max_indices, int max_batch, float scale,
                        float shift, void *stream, fm_data_cuda_t **out);
void fm_data_cuda_destroy(fm_data_cuda_t *d); /* NULL is accepted; waits for the stream */

/* Uploads this rank's n (<= max_indices) training indices of the epoch. The host array may be
 * reused as soon as this returns. */
int fm_data_cuda_set_epoch(fm_data_cuda_t *d, const size_t *idx, size_t n);

/* Fills the batch buffers with the training examples idx[first .. first + n) of the epoch. */
int fm_data_cuda_gather_train(fm_data_cuda_t *d, size_t first, int n);
/* Fills them with test examples first .. first + n - 1. */
int fm_data_cuda_gather_test(fm_data_cuda_t *d, size_t first, int n);

/* The batch buffers on the device: max_batch rows of FM_IMAGE_PIXELS floats, and labels. */
const float *fm_data_cuda_x(const fm_data_cuda_t *d);
const uint8_t *fm_data_cuda_y(const fm_data_cuda_t *d);

#ifdef __cplusplus
}
#endif
#endif
