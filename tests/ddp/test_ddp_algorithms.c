/*
 * The table of algorithms (common/algorithms.h) is the one list: the registry's
 * BAGUA_ALGORITHM and BAGUA_AUTO_ALLOW words name exactly its algorithms in its order, every
 * advisor cost model names one of them, the declared capabilities are consistent, and the
 * public lists (bagua_ddp_algorithms, bagua_ddp_algorithm_options) follow the table.
 */
#include <stdio.h>
#include <string.h>

#include "../test.h"
#include "bagua/ddp.h"
#include "common/params.h"
#include "ddp/tune/advisor_model.h"
#include "ddp/ddp_internal.h"

int main(void) {
  char want[512] = "", allow[520] = ",", names[512] = "";
  for (int i = 0; i < bagua__ddp_nalgorithms; i++) {
    const bagua__ddp_algo_t *a = bagua__ddp_algorithms[i];
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s|", a->name);
    snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s", i ? "|" : "", a->name);
    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? " " : "", a->name);
    ASSERT_TRUE(bagua__ddp_algorithm(a->name, 0) == a);
    /* Capabilities that imply others. */
    if (a->caps & BAGUA__ALGO_OWN_OPTIMIZER) ASSERT_TRUE(a->optimizer != NULL);
    if (a->caps & BAGUA__ALGO_PEER_CHOICE) ASSERT_TRUE(a->caps & BAGUA__ALGO_PEERS);
    if (a->caps & BAGUA__ALGO_BACKGROUND) ASSERT_EQ(a->hierarchical_default, 0);
    if (!(a->caps & BAGUA__ALGO_WARMUP)) ASSERT_EQ(a->default_warmup_steps, 0);
    ASSERT_TRUE(bagua_ddp_algorithm_options(a->name) != NULL);
  }
  strcat(want, "auto");
  ASSERT_STREQ(bagua__param_choices(BAGUA_P_ALGORITHM), want);
  ASSERT_STREQ(bagua__param_choices(BAGUA_P_AUTO_ALLOW), allow);
  ASSERT_STREQ(bagua_ddp_algorithms(), names);
  for (int m = 0; m < BAGUA__ADV_COUNT; m++) {
    const char *model = bagua__adv_algo_name((bagua__adv_algo_t)m);
    if (!bagua__ddp_algorithm(model, 0)) TEST_FAIL("advisor model %s names no algorithm", model);
  }
  /* The options follow the capabilities (spot checks of the documented matrix). */
  ASSERT_STREQ(bagua_ddp_algorithm_options("gradient_allreduce"), "hierarchical");
  ASSERT_STREQ(bagua_ddp_algorithm_options("decentralized"),
               "hierarchical peer_mode comm_interval");
  ASSERT_STREQ(bagua_ddp_algorithm_options("async"), "warmup_steps sync_interval_ms");
  ASSERT_TRUE(bagua_ddp_algorithm_options("nope") == NULL);
  ASSERT_TRUE(bagua__ddp_algorithm("ByteGrad", 1) == bagua__ddp_algorithm("bytegrad", 0));
  ASSERT_TRUE(bagua__ddp_algorithm("ByteGrad", 0) == NULL);
  printf("PASS ddp_algorithm_table: %s\n", names);
  return 0;
}
