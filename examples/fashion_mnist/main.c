/*
 * fashion_mnist: data-parallel MLP training on Fashion-MNIST with Bagua-C.
 *
 * Run it as one process, or as N processes with the torchrun-style variables RANK,
 * WORLD_SIZE, MASTER_ADDR and MASTER_PORT (bagua-launch sets them); see
 * docs/fashion_mnist.md. Exit status: 0 success, 1 runtime failure, 2 bad flags or data.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bagua/bagua.h"
#include "cli.h"
#include "dataset.h"
#include "grad_sync.h"
#include "train.h"

/*
 * Joins the job. Without WORLD_SIZE this is a single-process run, so the communicator is
 * created with an explicit rank 0 of 1; otherwise the library reads the worker variables
 * itself (and rejects bad values with a message naming them). Only the presence of
 * WORLD_SIZE is looked at here.
 */
static bagua_status_t join(bagua_comm_t **comm) {
  bagua_comm_config_t cfg = BAGUA_COMM_CONFIG_INIT;
  if (getenv("WORLD_SIZE")) return bagua_comm_init(NULL, comm);
  cfg.rank = 0;
  cfg.size = 1;
  return bagua_comm_init(&cfg, comm);
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
  if (!elastic) {
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
  status = elastic ? fm_train_run_elastic(&o, elastic, &data) : fm_train_run(&o, comm, &data);
out:
  fm_dataset_free(&data);
  if (elastic)
    bagua_elastic_destroy(elastic); /* also destroys the communicator */
  else
    bagua_comm_destroy(comm);
  return status;
}
