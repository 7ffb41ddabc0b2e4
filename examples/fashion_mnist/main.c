/*
 * fashion_mnist: data-parallel MLP training on Fashion-MNIST with Bagua-C.
 *
 * Run it as one process, or as N processes with the torchrun-style variables RANK,
 * WORLD_SIZE, MASTER_ADDR and MASTER_PORT (bagua-launch sets them); see
 * docs/fashion_mnist.md. Exit status: 0 success, 1 runtime failure, 2 bad flags or data,
 * 3 --device cuda on a rank (or with a peer) that has no usable CUDA device.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bagua/bagua.h"
#include "cli.h"
#include "dataset.h"
#include "grad_sync.h"
#include "train.h"
#ifdef FM_HAVE_CUDA
#include "fm_cuda.h"
#include "train_cuda.h"
#endif

/*
 * Joins the job. Without WORLD_SIZE this is a single-process run, so the communicator is
 * created with an explicit rank 0 of 1; otherwise the library reads the worker variables
 * itself (and rejects bad values with a message naming them). Only the presence of
 * WORLD_SIZE is looked at here.
 */
static bagua_status_t join(bagua_comm_t **comm) {
  bagua_comm_config_t cfg = BAGUA_COMM_CONFIG_INIT;
  if (bagua_param_get("WORLD_SIZE")) return bagua_comm_create(NULL, comm);
  cfg.rank = 0;
  cfg.size = 1;
  return bagua_comm_create(&cfg, comm);
}

/*
 * 1 when every rank passes ok != 0. Ranks agree on whether the data loaded before training,
 * so that a rank with a missing file does not leave the others blocked in their first
 * allreduce until the communication timeout.
 */
static int all_ranks_ok(bagua_comm_t *comm, int ok) {
  int32_t v = ok;
  if (bagua_comm_size(comm) == 1) return ok;
  if (bagua_allreduce(comm, &v, &v, 1, BAGUA_I32, BAGUA_MIN) != BAGUA_OK) return 0;
  return v;
}

/*
 * --device cuda: picks this rank's GPU (local rank modulo the visible devices) and makes sure
 * every rank has one before anything else happens, so that a machine without a GPU or driver
 * fails at once with the runtime's reason, on every rank, instead of deep inside the set-up.
 * Returns 0 with *device set, or the exit status 3.
 */
static int select_device(const fm_options_t *o, bagua_comm_t *comm, int *device) {
  *device = -1;
  if (o->device != FM_DEVICE_CUDA) return 0;
#ifdef FM_HAVE_CUDA
  int ok = fm_cuda_select_device(bagua_comm_local_rank(comm), device) == 0;
  if (!ok) fprintf(stderr, "fashion_mnist: no CUDA device: %s\n", fm_cuda_error());
  if (all_ranks_ok(comm, ok)) return 0;
  if (ok)
    fprintf(stderr, "fashion_mnist: rank %d: another rank has no usable CUDA device\n",
            bagua_comm_rank(comm));
#else
  (void)comm; /* unreachable: the command line rejects --device cuda in this build */
#endif
  return 3;
}

/* The non-elastic training loop for the chosen device. */
static int train(const fm_options_t *o, bagua_comm_t *comm, const fm_dataset_t *data, int device) {
#ifdef FM_HAVE_CUDA
  if (o->device == FM_DEVICE_CUDA) return fm_train_run_cuda(o, comm, data, device);
#else
  (void)device;
#endif
  return fm_train_run(o, comm, data);
}

int main(int argc, char **argv) {
  fm_options_t o;
  fm_dataset_t data = {0};
  bagua_comm_t *comm = NULL;
  char err[8192];
  int status = 2;

  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = fm_cli_parse(argc, argv, &o, stdout, stderr);
  if (rc != FM_CLI_OK) return rc == FM_CLI_HELP ? 0 : 2;
  if (!fm_grad_sync_supported(&o, stderr)) return 2;

  bagua_elastic_t *elastic = NULL;
  bagua_status_t st;
  fm_idx_status_t ds = FM_IDX_OK;
  if (o.elastic) {
    /* An elastic worker may join a running job whose ranks wait in the rebuild that admits it,
     * so it loads the data before joining (they do not wait for that), and fails on its own if
     * it cannot: the running ranks take part in no check of it. */
    ds = fm_dataset_load(o.data_dir, (size_t)o.limit_train, (size_t)o.limit_test, &data, err,
                         sizeof(err));
    if (ds != FM_IDX_OK) {
      fprintf(stderr, "fashion_mnist: %s\n", err);
      fm_dataset_free(&data);
      return ds == FM_IDX_NOMEM ? 1 : 2;
    }
    /* Round, rank and world come from bagua-agent (auto or in-process elastic mode). */
    st = bagua_elastic_create(NULL, &elastic);
    if (st == BAGUA_OK) comm = bagua_elastic_comm(elastic);
  } else {
    st = join(&comm);
  }
  if (st != BAGUA_OK) {
    fprintf(stderr, "fashion_mnist: joining the job failed: %s%s%s\n", bagua_strerror(st),
            *bagua_last_error() ? ": " : "", bagua_last_error());
    fm_dataset_free(&data);
    return st == BAGUA_ERR_INVALID_ARG ? 2 : 1;
  }
  int device = -1;
  if (!elastic) {
    if ((status = select_device(&o, comm, &device)) != 0) goto out;
    ds = fm_dataset_load(o.data_dir, (size_t)o.limit_train, (size_t)o.limit_test, &data, err,
                         sizeof(err));
    if (ds != FM_IDX_OK) fprintf(stderr, "fashion_mnist: %s\n", err);
    if (!all_ranks_ok(comm, ds == FM_IDX_OK)) {
      if (ds == FM_IDX_OK)
        fprintf(stderr, "fashion_mnist: rank %d: another rank could not load the data set\n",
                bagua_comm_rank(comm));
      status = ds == FM_IDX_NOMEM ? 1 : 2;
      goto out;
    }
  }
  status = elastic ? fm_train_run_elastic(&o, elastic, &data) : train(&o, comm, &data, device);
out:
  fm_dataset_free(&data);
  if (elastic)
    bagua_elastic_destroy(elastic); /* also destroys the communicator */
  else
    bagua_comm_destroy(comm);
  return status;
}
