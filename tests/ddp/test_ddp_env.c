/*
 * The registry's algorithm group (BAGUA_ALGORITHM, BAGUA_HIERARCHICAL, ...) as the defaults of
 * bagua_ddp_config_t: what bagua-launch's [algorithm] section turns into in a worker.
 *
 *   settings  one process, through the resolution itself (bagua__ddp_settings): a field left
 *             unset takes the variable, a field the program set wins, a variable whose option
 *             does not apply to the algorithm is ignored, and a bad variable is refused with
 *             BAGUA_ERR_INVALID_ARG and a warning naming it, its value and what is accepted.
 *   create    2 ranks, through the public API: with BAGUA_ALGORITHM=bytegrad and a NULL
 *             config, bagua_ddp_algorithm() says bytegrad and a step sends the bytes of 8-bit
 *             gradients (fewer than an explicit gradient_allreduce's); a bad BAGUA_ALGORITHM
 *             is refused on every rank before any communication.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "common/params.h"
#include "ddp/ddp_internal.h"
#include "problem.h"

static const char *const k_vars[] = {"BAGUA_ALGORITHM",           "BAGUA_HIERARCHICAL",
                                     "BAGUA_PEER_SELECTION_MODE", "BAGUA_COMMUNICATION_INTERVAL",
                                     "BAGUA_WARMUP_STEPS",        "BAGUA_SYNC_INTERVAL_MS",
                                     "BAGUA_ERROR_FEEDBACK",      "BAGUA_BUCKET_SIZE"};

/* Sets exactly the variables of `list` ("NAME=VALUE;..."; NULL: none) among k_vars. */
static void env(const char *list) {
  for (size_t i = 0; i < sizeof(k_vars) / sizeof(k_vars[0]); i++) unsetenv(k_vars[i]);
  mp_apply_env(list); /* reloads the registry */
}

/* Resolves `cfg` under the environment `list`; fails the test unless it is accepted. */
static bagua__ddp_settings_t resolve(const char *list, const bagua_ddp_config_t *cfg) {
  bagua__ddp_settings_t s;
  env(list);
  bagua_status_t st = bagua__ddp_settings(cfg, &s);
  if (st != BAGUA_OK)
    TEST_FAIL("env \"%s\": bagua__ddp_settings returned %s: %s", list ? list : "",
              bagua_err_name(st), bagua_last_error());
  return s;
}

/* The environment `list` must make `cfg` fail with a warning containing every word. */
static void refused(const char *list, const bagua_ddp_config_t *cfg, const char *const *words) {
  bagua__ddp_settings_t s;
  env(list);
  bagua_status_t st = bagua__ddp_settings(cfg, &s);
  if (st != BAGUA_ERR_INVALID_ARG)
    TEST_FAIL("env \"%s\": returned %s, expected BAGUA_ERR_INVALID_ARG", list, bagua_err_name(st));
  for (int i = 0; words[i]; i++)
    if (!strstr(bagua_last_error(), words[i]))
      TEST_FAIL("env \"%s\": the warning does not mention %s: %s", list, words[i],
                bagua_last_error());
}

static int mode_settings(void) {
  bagua_ddp_config_t init = BAGUA_DDP_CONFIG_INIT, cfg;
  bagua__ddp_settings_t s;

  /* Nothing set: the documented defaults. */
  s = resolve(NULL, &init);
  ASSERT_STREQ(s.algo->name, "gradient_allreduce");
  ASSERT_EQ(s.hierarchical, 0);
  ASSERT_EQ(s.comm_interval, 1);
  ASSERT_EQ(s.error_feedback, 0);
  ASSERT_EQ(s.warmup_steps, 0);
  ASSERT_EQ(s.sync_interval_ms, 500);
  ASSERT_EQ(s.bucket_bytes, 10485760);

  /* The algorithm from the environment, in any case, with its own defaults (hierarchical). */
  s = resolve("BAGUA_ALGORITHM=bytegrad", &init);
  ASSERT_STREQ(s.algo->name, "bytegrad");
  ASSERT_EQ(s.hierarchical, 1);
  s = resolve("BAGUA_ALGORITHM=ByteGrad", &init);
  ASSERT_STREQ(s.algo->name, "bytegrad");
  s = resolve("BAGUA_ALGORITHM=qadam", &init);
  ASSERT_STREQ(s.algo->name, "qadam");
  ASSERT_EQ(s.optimizer, BAGUA__OPT_QADAM);
  ASSERT_EQ(s.warmup_steps, 100);

  /* The program's choice wins. */
  cfg = init;
  cfg.algorithm = "decentralized";
  s = resolve("BAGUA_ALGORITHM=bytegrad", &cfg);
  ASSERT_STREQ(s.algo->name, "decentralized");

  /* Every option of decentralized from the environment, then each one set by the program. */
  const char *dec =
      "BAGUA_ALGORITHM=decentralized;BAGUA_PEER_SELECTION_MODE=ring;"
      "BAGUA_COMMUNICATION_INTERVAL=3;BAGUA_HIERARCHICAL=0;"
      "BAGUA_BUCKET_SIZE=8192";
  s = resolve(dec, &init);
  ASSERT_STREQ(s.algo->name, "decentralized");
  ASSERT_EQ(s.peer_mode, BAGUA__PEER_RING);
  ASSERT_EQ(s.comm_interval, 3);
  ASSERT_EQ(s.hierarchical, 0);
  ASSERT_EQ(s.bucket_bytes, 8192);
  cfg = init;
  cfg.peer_mode = "all";
  cfg.comm_interval = 1;
  cfg.hierarchical = 1;
  cfg.bucket_bytes = 4096;
  s = resolve(dec, &cfg);
  ASSERT_EQ(s.peer_mode, BAGUA__PEER_ALL);
  ASSERT_EQ(s.comm_interval, 1);
  ASSERT_EQ(s.hierarchical, 1);
  ASSERT_EQ(s.bucket_bytes, 4096);

  /* async's options; the program's 500 ms is kept although it is the default. */
  const char *as = "BAGUA_ALGORITHM=async;BAGUA_SYNC_INTERVAL_MS=7;BAGUA_WARMUP_STEPS=4";
  s = resolve(as, &init);
  ASSERT_STREQ(s.algo->name, "async");
  ASSERT_EQ(s.sync_interval_ms, 7);
  ASSERT_EQ(s.warmup_steps, 4);
  cfg = init;
  cfg.sync_interval_ms = 500;
  cfg.warmup_steps = 0;
  s = resolve(as, &cfg);
  ASSERT_EQ(s.sync_interval_ms, 500);
  ASSERT_EQ(s.warmup_steps, 0);

  /* Error feedback for the compressing algorithms; the program's 0 wins. */
  s = resolve("BAGUA_ALGORITHM=qadam;BAGUA_ERROR_FEEDBACK=1;BAGUA_WARMUP_STEPS=4", &init);
  ASSERT_EQ(s.error_feedback, 1);
  ASSERT_EQ(s.warmup_steps, 4);
  cfg = init;
  cfg.error_feedback = 0;
  s = resolve("BAGUA_ALGORITHM=bytegrad;BAGUA_ERROR_FEEDBACK=1", &cfg);
  ASSERT_EQ(s.error_feedback, 0);

  /* Options that do not apply to the algorithm that runs are ignored, not refused. */
  s = resolve(
      "BAGUA_COMMUNICATION_INTERVAL=3;BAGUA_SYNC_INTERVAL_MS=7;BAGUA_ERROR_FEEDBACK=1;"
      "BAGUA_PEER_SELECTION_MODE=ring;BAGUA_WARMUP_STEPS=9",
      &init);
  ASSERT_STREQ(s.algo->name, "gradient_allreduce");
  ASSERT_EQ(s.comm_interval, 1);
  ASSERT_EQ(s.sync_interval_ms, 500);
  ASSERT_EQ(s.error_feedback, 0);
  ASSERT_EQ(s.warmup_steps, 0);
  s = resolve("BAGUA_ALGORITHM=async;BAGUA_HIERARCHICAL=1", &init);
  ASSERT_EQ(s.hierarchical, 0);
  s = resolve("BAGUA_ALGORITHM=low_precision_decentralized;BAGUA_PEER_SELECTION_MODE=all", &init);
  ASSERT_EQ(s.peer_mode, BAGUA__PEER_RING);

  /* Bad variables: refused, naming the variable, the value and what is accepted. */
  refused("BAGUA_ALGORITHM=sgd", &init,
          (const char *const[]){"BAGUA_ALGORITHM", "sgd", "accepted", "bytegrad", NULL});
  refused("BAGUA_COMMUNICATION_INTERVAL=0", &init,
          (const char *const[]){"BAGUA_COMMUNICATION_INTERVAL", "0", "accepted", NULL});
  refused("BAGUA_HIERARCHICAL=yes", &init,
          (const char *const[]){"BAGUA_HIERARCHICAL", "yes", "accepted", NULL});
  refused("BAGUA_PEER_SELECTION_MODE=star", &init,
          (const char *const[]){"BAGUA_PEER_SELECTION_MODE", "star", "shift_one", NULL});
  /* Even when the program set the field: a bad variable is never silently skipped. */
  cfg = init;
  cfg.algorithm = "bytegrad";
  refused("BAGUA_ALGORITHM=sgd", &cfg, (const char *const[]){"BAGUA_ALGORITHM", NULL});
  /* A bad field is still refused whatever the environment says. */
  cfg = init;
  cfg.algorithm = "decentralized";
  cfg.comm_interval = 0;
  refused("BAGUA_COMMUNICATION_INTERVAL=3", &cfg,
          (const char *const[]){"comm_interval", "accepted", NULL});
  env(NULL);
  printf(
      "settings: environment fills unset fields, the program's fields win, bad values are "
      "refused\n");
  return 0;
}

static problem_t prob = {.d_in = 64, .d_out = 8, .n = 32, .nsplit = 4, .noise = 0.1f};

/* One context over `c` with `cfg` (NULL: all unset): its algorithm's name and the bytes this
 * rank sent for its second step. */
static uint64_t run_steps(bagua_comm_t *c, const bagua_ddp_config_t *cfg, const char **algo) {
  shard_t s;
  model_t m;
  shard_make(&prob, bagua_comm_rank(c), &s);
  model_init(&prob, 1, &m);
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, cfg, &ddp));
  *algo = bagua_ddp_algorithm(ddp);
  model_register(&m, ddp, 0);
  ASSERT_OK(bagua_ddp_ready(ddp));
  for (int t = 0; t < 2; t++) ASSERT_OK(model_train_step(&m, &s, ddp, 0));
  bagua_ddp_stats_t st = {.struct_size = sizeof(st)};
  ASSERT_OK(bagua_ddp_stats(ddp, &st));
  bagua_ddp_destroy(ddp);
  model_free(&m);
  shard_free(&s);
  return st.bytes_last_step;
}

static int body_create(bagua_comm_t *c, void *arg) {
  (void)arg;
  ASSERT_TRUE(bagua_ddp_algorithm(NULL) == NULL);
  /* The environment of this run (mp's setenv_list): BAGUA_ALGORITHM=bytegrad. */
  const char *algo = NULL;
  uint64_t env_bytes = run_steps(c, NULL, &algo);
  ASSERT_STREQ(algo, "bytegrad");
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.algorithm = "gradient_allreduce";
  uint64_t full_bytes = run_steps(c, &cfg, &algo);
  ASSERT_STREQ(algo, "gradient_allreduce");
  /* 8-bit chunks plus their min/max headers against f32: well under half. */
  if (!(env_bytes > 0 && 2 * env_bytes < full_bytes))
    TEST_FAIL(
        "rank %d: the BAGUA_ALGORITHM=bytegrad step sent %llu bytes, gradient_allreduce "
        "%llu: not compressed",
        bagua_comm_rank(c), (unsigned long long)env_bytes, (unsigned long long)full_bytes);

  /* A bad value is refused on every rank before any communication. */
  setenv("BAGUA_ALGORITHM", "bytegrad2", 1);
  bagua__params_reload();
  bagua_ddp_t *ddp = (bagua_ddp_t *)1;
  ASSERT_STATUS(bagua_ddp_create(c, NULL, &ddp), BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(ddp == NULL);
  if (!strstr(bagua_last_error(), "BAGUA_ALGORITHM") || !strstr(bagua_last_error(), "bytegrad2"))
    TEST_FAIL("the warning does not name BAGUA_ALGORITHM and its value: %s", bagua_last_error());
  ASSERT_OK(bagua_barrier(c));
  if (bagua_comm_rank(c) == 0)
    printf(
        "create: BAGUA_ALGORITHM=bytegrad ran bytegrad (%llu bytes/step vs %llu), a bad value "
        "was refused\n",
        (unsigned long long)env_bytes, (unsigned long long)full_bytes);
  assert_no_leaks();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "settings") == 0) return mode_settings();
  if (strcmp(mode, "create") == 0) {
    mp_opts_t o = {.nranks = 2,
                   .transport = BAGUA_TRANSPORT_TCP,
                   .setenv_list = "BAGUA_ALGORITHM=bytegrad;BAGUA_HIERARCHICAL=0"};
    return mp_run(&o, body_create, NULL);
  }
  TEST_FAIL("usage: %s settings|create", argv[0]);
}
