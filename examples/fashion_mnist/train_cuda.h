/*
 * --device cuda: the training loop of train.c with the model, the data and the optimizer on
 * this rank's GPU, synchronised through the data-parallel layer in its CUDA mode (device
 * buffers, NCCL). It prints the same lines as the CPU loop (report.h), with "gemm cublas" and
 * the device named in the header, and takes every --algorithm and algorithm option the CPU
 * loop takes. Built only where libbagua has CUDA and NCCL (FM_HAVE_CUDA).
 *
 * Unlike the CPU loop, a single rank also goes through the data-parallel layer: it is where
 * the optimizer runs on device buffers. The loss and accuracy of an epoch are accumulated on
 * the device and read once per epoch, so a training step never waits for the GPU.
 */
#ifndef FM_TRAIN_CUDA_H
#define FM_TRAIN_CUDA_H

#include "bagua/bagua.h"
#include "cli.h"
#include "dataset.h"

/* Trains on CUDA device `device`, which fm_cuda_select_device() made current on the calling
 * thread; returns the process exit status (0, 1 on a runtime failure, 2 on a configuration
 * that cannot run). */
int fm_train_run_cuda(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data,
                      int device);

#endif
