/*
 * config.device and config.cuda_device in every build, GPU or not (this is the part of the
 * cuda mode that CI machines without a GPU can check):
 *   config   a device name other than "cpu" and "cuda" (spelling, case and spaces count) and
 *            cuda_device < -1 are refused with BAGUA_ERR_INVALID_ARG and a warning that names
 *            the field and what it accepts, before any communication;
 *   cpu      "cpu" is the default: the same two steps give bit-identical weights with NULL;
 *   cuda     on 1 and on 2 ranks: in a build without CUDA and NCCL, BAGUA_ERR_NOT_SUPPORTED
 *            with a warning that says so; in a build with them but without a usable device,
 *            BAGUA_ERR_CUDA on every rank within seconds (not after a timeout), with nothing
 *            leaked; with a device, creation succeeds (test_gpu_ddp checks the rest).
 * After every refusal the caller's communicator is still in step on every rank.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mp.h"
#include "../test.h"
#include "bagua/nccl.h"
#include "problem.h"

static problem_t prob = {.d_in = 16, .d_out = 4, .n = 32, .nsplit = 4, .noise = 0.1f};

/* Case-insensitive substring test (warnings are prose: "CUDA" and "cuda" both occur). */
static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n) return 1;
  }
  return 0;
}

/* bagua_ddp_create() must refuse the configuration with BAGUA_ERR_INVALID_ARG, leave *out
 * NULL, and warn with the field's name, "accepted" and every word of `accepted_words`. */
static void expect_refused(bagua_comm_t *c, const bagua_ddp_config_t *cfg, const char *what,
                           const char *field, const char *const *accepted_words) {
  bagua_ddp_t *ddp = (bagua_ddp_t *)1;
  bagua_status_t st = bagua_ddp_create(c, cfg, &ddp);
  if (st != BAGUA_ERR_INVALID_ARG)
    TEST_FAIL("%s: bagua_ddp_create returned %s, expected BAGUA_ERR_INVALID_ARG (%s)", what,
              bagua_err_name(st), bagua_last_error());
  ASSERT_TRUE(ddp == NULL);
  const char *msg = bagua_last_error();
  if (!strstr(msg, field)) TEST_FAIL("%s: the warning does not name %s: %s", what, field, msg);
  if (!strstr(msg, "accepted"))
    TEST_FAIL("%s: the warning does not say what is accepted: %s", what, msg);
  for (int i = 0; accepted_words && accepted_words[i]; i++)
    if (!strstr(msg, accepted_words[i]))
      TEST_FAIL("%s: the warning does not mention %s: %s", what, accepted_words[i], msg);
}

static int body_config(bagua_comm_t *c, void *arg) {
  (void)arg;
  static const char *const names[] = {"cpu", "cuda", NULL};
  /* Not "cpu" or "cuda" exactly. */
  static const char *const bad_devices[] = {"tpu", "CUDA ", "gpu", "Cpu", "", " cuda"};
  for (size_t i = 0; i < sizeof(bad_devices) / sizeof(bad_devices[0]); i++) {
    bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
    cfg.device = bad_devices[i];
    char what[64];
    snprintf(what, sizeof(what), "device \"%s\"", bad_devices[i]);
    expect_refused(c, &cfg, what, "device", names);
  }
  /* A bad cuda_device is refused whatever the device; with "cuda" only where that device is
   * built in (elsewhere "cuda" itself is refused first, with BAGUA_ERR_NOT_SUPPORTED). */
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.cuda_device = -2;
  expect_refused(c, &cfg, "cuda_device -2 with the default device", "cuda_device", NULL);
  if (bagua_nccl_available()) {
    cfg.device = "cuda";
    expect_refused(c, &cfg, "cuda_device -2 with \"cuda\"", "cuda_device", NULL);
    cfg.cuda_device = -1000;
    expect_refused(c, &cfg, "cuda_device -1000 with \"cuda\"", "cuda_device", NULL);
  }
  /* Nothing above communicated: the ranks are still in step. */
  ASSERT_OK(bagua_barrier(c));
  if (bagua_comm_rank(c) == 0) printf("config: bad devices and cuda_device refused\n");
  assert_no_leaks();
  return 0;
}

/* Two training steps of the synthetic problem with config.device = `device`. */
static void train2(bagua_comm_t *c, const char *device, const char *algorithm, model_t *m) {
  shard_t s;
  shard_make(&prob, bagua_comm_rank(c), &s);
  model_init(&prob, bagua_comm_rank(c), m);
  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.device = device;
  cfg.algorithm = algorithm;
  cfg.hierarchical = 0;
  cfg.bucket_bytes = 128;
  cfg.lr = 0.1;
  bagua_ddp_t *ddp = NULL;
  ASSERT_OK(bagua_ddp_create(c, &cfg, &ddp));
  model_register(m, ddp, 0x5);
  ASSERT_OK(bagua_ddp_ready(ddp));
  for (int t = 0; t < 2; t++) ASSERT_OK(model_train_step(m, &s, ddp, 0x5));
  bagua_ddp_destroy(ddp);
  shard_free(&s);
}

static int body_cpu(bagua_comm_t *c, void *arg) {
  (void)arg;
  const char *algos[] = {"gradient_allreduce", "bytegrad"};
  size_t nw = (size_t)prob.d_in * prob.d_out;
  for (int a = 0; a < 2; a++) {
    model_t dflt, cpu;
    train2(c, NULL, algos[a], &dflt);
    train2(c, "cpu", algos[a], &cpu);
    if (memcmp(dflt.w, cpu.w, nw * sizeof(float)) != 0 ||
        memcmp(dflt.b, cpu.b, prob.d_out * sizeof(float)) != 0)
      TEST_FAIL("rank %d, %s: device \"cpu\" trained differently from the default device",
                bagua_comm_rank(c), algos[a]);
    model_free(&dflt);
    model_free(&cpu);
  }
  if (bagua_comm_rank(c) == 0) printf("cpu: device \"cpu\" and NULL give identical weights\n");
  assert_no_leaks();
  return 0;
}

static int body_cuda(bagua_comm_t *c, void *arg) {
  (void)arg;
  int me = bagua_comm_rank(c), n = bagua_comm_size(c);
  /* Should a device exist, the ranks share it; NCCL then needs one host id per rank (see
   * tests/gpu/test_gpu_nccl.c). Set before any NCCL call of this process. */
  char host_id[64];
  snprintf(host_id, sizeof(host_id), "bagua-ddp-device-rank%d", me);
  setenv("NCCL_HOSTID", host_id, 1);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);

  bagua_ddp_config_t cfg = BAGUA_DDP_CONFIG_INIT;
  cfg.device = "cuda";
  bagua_ddp_t *ddp = (bagua_ddp_t *)1;
  double t0 = mp_now();
  bagua_status_t st = bagua_ddp_create(c, &cfg, &ddp);
  double secs = mp_now() - t0;
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", bagua_last_error());

  /* Every rank must end with the same status. */
  int32_t v[2] = {(int32_t)st, -(int32_t)st};
  ASSERT_OK(bagua_allreduce(c, v, v, 2, BAGUA_I32, BAGUA_MIN));
  if (v[0] != (int32_t)st || -v[1] != (int32_t)st)
    TEST_FAIL("rank %d of %d: creation returned %s here but not on every rank", me, n,
              bagua_err_name(st));

  if (!bagua_nccl_available()) {
    if (st != BAGUA_ERR_NOT_SUPPORTED)
      TEST_FAIL("rank %d: \"cuda\" in a build without NCCL returned %s: %s", me, bagua_err_name(st),
                msg);
    ASSERT_TRUE(ddp == NULL);
    if (!contains_nocase(msg, "buil") || !contains_nocase(msg, "cuda") ||
        !contains_nocase(msg, "nccl"))
      TEST_FAIL("rank %d: the warning does not say that the build lacks CUDA/NCCL: %s", me, msg);
    if (me == 0)
      printf("cuda on %d rank(s): BAGUA_ERR_NOT_SUPPORTED in %.3f s: %s\n", n, secs, msg);
  } else if (st == BAGUA_OK) {
    if (me == 0) printf("cuda on %d rank(s): a device is present, created in %.3f s\n", n, secs);
    ASSERT_TRUE(ddp != NULL);
    bagua_ddp_destroy(ddp);
  } else {
    /* No usable device: the ranks must agree on it at once rather than wait for a peer in
     * NCCL's set-up until a timeout. */
    if (st != BAGUA_ERR_CUDA)
      TEST_FAIL("rank %d: \"cuda\" without a device returned %s, expected BAGUA_ERR_CUDA: %s", me,
                bagua_err_name(st), msg);
    ASSERT_TRUE(ddp == NULL);
    if (!(secs < 10.0)) TEST_FAIL("rank %d: the refusal took %.3f s", me, secs);
    /* Confirm that the refusal is right: the NCCL communicator, on this rank alone, finds no
     * device either. */
    bagua_comm_t *solo = NULL;
    ASSERT_OK(bagua_comm_split(c, me, 0, &solo));
    bagua_nccl_comm_t *nc = NULL;
    bagua_status_t pst = bagua_nccl_comm_create(solo, -1, &nc);
    if (pst == BAGUA_OK) {
      bagua_nccl_comm_destroy(nc);
      TEST_FAIL("rank %d: bagua_ddp_create failed (%s) although a device is usable", me, msg);
    }
    bagua_comm_destroy(solo);
    if (me == 0)
      printf("cuda on %d rank(s): no usable device, BAGUA_ERR_CUDA in %.3f s: %s\n", n, secs, msg);
  }
  /* The caller's communicator is still in step. */
  ASSERT_OK(bagua_barrier(c));
  assert_no_leaks();
  return 0;
}

int main(void) {
  double t0 = mp_now();
  mp_opts_t o = {.nranks = 2, .transport = BAGUA_TRANSPORT_AUTO, .deadline_s = 60};
  if (mp_run(&o, body_config, NULL) != 0) TEST_FAIL("config checks failed");
  if (mp_run(&o, body_cpu, NULL) != 0) TEST_FAIL("cpu checks failed");
  for (int n = 1; n <= 2; n++) {
    o.nranks = n;
    if (mp_run(&o, body_cuda, NULL) != 0) TEST_FAIL("cuda checks failed on %d rank(s)", n);
  }
  printf("ddp device: passed (%s) in %.1f s\n",
         bagua_nccl_available() ? "built with CUDA and NCCL" : "built without CUDA and NCCL",
         mp_now() - t0);
  return 0;
}
