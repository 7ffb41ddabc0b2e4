/*
 * The lines of a training run (see report.h).
 */
#include "report.h"

#include <stdio.h>

void fm_report_header(const fm_options_t *o, bagua_comm_t *comm, const fm_mlp_t *m,
                      const fm_dataset_t *data, size_t per_rank, size_t steps_per_epoch,
                      const char *gemm, const char *device) {
  int world = bagua_comm_size(comm);
  char arch[256];
  int used = snprintf(arch, sizeof(arch), "%d", m->layer[0].in);
  for (int l = 0; l < m->nlayers && used < (int)sizeof(arch); l++)
    used += snprintf(arch + used, sizeof(arch) - (size_t)used, "-%d", m->layer[l].out);
  printf(
      "fashion_mnist: %d rank%s (%s), model %s (%zu params), gemm %s, train %zu (%zu per rank, "
      "%zu steps/epoch), test %zu, batch %d per rank, lr %g momentum %g weight_decay %g "
      "seed %llu, algorithm %s%s%s\n",
      world, world == 1 ? "" : "s", world == 1 ? "single process" : bagua_comm_transport_name(comm),
      arch, m->nparams, gemm, data->train.count, per_rank, steps_per_epoch, data->test.count,
      o->batch_size, o->lr, o->momentum, o->weight_decay, (unsigned long long)o->seed,
      fm_algorithm_name(o->algorithm), device ? ", device " : "", device ? device : "");
}

bagua_status_t fm_report_reduce(bagua_comm_t *comm, fm_epoch_stats_t *es) {
  double stats[2] = {es->loss_sum, es->correct};
  if (bagua_comm_size(comm) == 1) return BAGUA_OK;
  bagua_status_t st = bagua_allreduce(comm, stats, stats, 2, BAGUA_F64, BAGUA_SUM);
  if (st != BAGUA_OK) {
    fprintf(stderr, "fashion_mnist: rank %d: epoch statistics allreduce failed: %s\n",
            bagua_comm_rank(comm), bagua_strerror(st));
    return st;
  }
  es->loss_sum = stats[0];
  es->correct = stats[1];
  return BAGUA_OK;
}

void fm_report_epoch(const fm_options_t *o, int epoch, const fm_epoch_stats_t *es, double total,
                     size_t steps_per_epoch, double test_acc, double overlap) {
  printf(
      "epoch %d/%d loss %.4f train_acc %.4f test_acc %.4f time %.2fs samples/s %.0f "
      "bytes/step %.0f comm %.1f%% overlap %.1f%%\n",
      epoch, o->epochs, es->loss_sum / total, es->correct / total, test_acc, es->seconds,
      total / es->seconds, (double)es->bytes / (double)steps_per_epoch,
      100.0 * es->comm_seconds / es->seconds, 100.0 * overlap);
}

void fm_report_done(int64_t steps, double train_seconds) {
  printf("done: %lld steps in %.1fs of training\n", (long long)steps, train_seconds);
}

void fm_report_final(int rank, int64_t step, uint32_t params_crc, double test_acc) {
  printf("final rank=%d step=%lld params_crc=%08x test_acc=%.4f\n", rank, (long long)step,
         params_crc, test_acc);
}
