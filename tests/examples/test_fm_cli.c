/*
 * Command-line parsing: defaults, both value syntaxes, boolean forms, per-algorithm defaults
 * and applicability, and that every rejection names the flag and what it accepts.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "test.h"

static char errbuf[4096];

/* Parses a NULL-terminated argument list; the error text lands in errbuf. */
static int parse(fm_options_t *o, const char *const *args) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = (char *)"fashion_mnist";
  while (*args) argv[argc++] = (char *)*args++;
  FILE *out = fopen("/dev/null", "w"), *err = fmemopen(errbuf, sizeof(errbuf), "w");
  ASSERT_TRUE(out && err);
  int rc = fm_cli_parse(argc, argv, o, out, err);
  fclose(out);
  fclose(err);
  return rc;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void rejects(const char *const *args, const char *must_contain) {
  fm_options_t o;
  errbuf[0] = '\0';
  ASSERT_EQ(parse(&o, args), FM_CLI_ERROR);
  if (!strstr(errbuf, must_contain))
    TEST_FAIL("error \"%s\" does not contain \"%s\"", errbuf, must_contain);
}

int main(void) {
  fm_options_t o;
  ASSERT_EQ(parse(&o, (const char *const[]){NULL}), FM_CLI_OK);
  ASSERT_EQ(o.epochs, 10);
  ASSERT_EQ(o.batch_size, 64);
  ASSERT_EQ(o.nhidden, 2);
  ASSERT_EQ(o.hidden[1], 512);
  ASSERT_EQ(o.algorithm, FM_ALG_GRADIENT_ALLREDUCE);
  ASSERT_EQ(o.hierarchical, 0);
  ASSERT_EQ(o.given, 0);

  ASSERT_EQ(parse(&o, ARGS("--epochs", "3", "--lr=0.2", "--hidden", "128,64,32", "--seed", "0x10",
                           "--momentum=0", "--weight-decay", "5e-4", "--limit-train", "6000",
                           "--limit-test=100", "--data-dir", "/x", "--batch-size=7")),
            FM_CLI_OK);
  ASSERT_EQ(o.epochs, 3);
  ASSERT_NEAR(o.lr, 0.2, 0);
  ASSERT_EQ(o.nhidden, 3);
  ASSERT_EQ(o.hidden[2], 32);
  ASSERT_EQ(o.seed, 16);
  ASSERT_NEAR(o.momentum, 0, 0);
  ASSERT_NEAR(o.weight_decay, 5e-4, 0);
  ASSERT_EQ(o.limit_train, 6000);
  ASSERT_EQ(o.limit_test, 100);
  ASSERT_STREQ(o.data_dir, "/x");
  ASSERT_EQ(o.batch_size, 7);

  /* Algorithm defaults follow Bagua; options given explicitly win wherever they appear. */
  ASSERT_EQ(parse(&o, ARGS("--algorithm", "bytegrad")), FM_CLI_OK);
  ASSERT_EQ(o.hierarchical, 1);
  ASSERT_EQ(o.error_feedback, 0);
  ASSERT_EQ(parse(&o, ARGS("--no-hierarchical", "--error-feedback", "--algorithm=bytegrad")),
            FM_CLI_OK);
  ASSERT_EQ(o.hierarchical, 0);
  ASSERT_EQ(o.error_feedback, 1);
  ASSERT_EQ(parse(&o, ARGS("--algorithm", "qadam")), FM_CLI_OK);
  ASSERT_EQ(o.warmup_steps, 100);
  ASSERT_EQ(parse(&o, ARGS("--algorithm", "async", "--sync-interval-ms", "50", "--warmup-steps",
                           "10", "--bucket-mb", "0.5")),
            FM_CLI_OK);
  ASSERT_EQ(o.sync_interval_ms, 50);
  ASSERT_EQ(o.warmup_steps, 10);
  ASSERT_NEAR(o.bucket_mb, 0.5, 0);
  ASSERT_TRUE(o.given & FM_OPT_BUCKET_MB);
  ASSERT_EQ(parse(&o, ARGS("--algorithm", "decentralized", "--peer-mode", "shift_one",
                           "--comm-interval", "4", "--hierarchical=off")),
            FM_CLI_OK);
  ASSERT_EQ(o.peer_mode, FM_PEER_SHIFT_ONE);
  ASSERT_EQ(o.comm_interval, 4);
  ASSERT_EQ(o.hierarchical, 0);
  ASSERT_EQ(parse(&o, ARGS("--algorithm", "low_precision_decentralized")), FM_CLI_OK);
  ASSERT_EQ(o.peer_mode, FM_PEER_RING);
  ASSERT_EQ(parse(&o, ARGS("--hierarchical=true")), FM_CLI_OK);
  ASSERT_EQ(o.hierarchical, 1);
  ASSERT_EQ(parse(&o, ARGS("--help")), FM_CLI_HELP);
  ASSERT_EQ(parse(&o, ARGS("-h")), FM_CLI_HELP);

  rejects(ARGS("--frobnicate"), "unknown option \"--frobnicate\"");
  rejects(ARGS("--frobnicate"), "--sync-interval-ms");
  rejects(ARGS("-x"), "unknown option");
  rejects(ARGS("--epochs"), "--epochs needs a value");
  rejects(ARGS("--epochs", "ten"), "--epochs: \"ten\" is not accepted; expected an integer");
  rejects(ARGS("--epochs=-1"), "--epochs");
  rejects(ARGS("--batch-size", "0"), "--batch-size: \"0\"");
  rejects(ARGS("--lr", "0"), "--lr: \"0\" is not accepted; expected a number > 0");
  rejects(ARGS("--lr", "nan"), "--lr");
  rejects(ARGS("--lr", "1e400"), "--lr");
  rejects(ARGS("--momentum", "1"), "--momentum");
  rejects(ARGS("--weight-decay", "-0.1"), "--weight-decay");
  rejects(ARGS("--hidden", "512,"), "--hidden");
  rejects(ARGS("--hidden", "0"), "--hidden");
  rejects(ARGS("--hidden", "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"), "1..16 widths");
  rejects(ARGS("--seed", "-3"), "--seed");
  rejects(ARGS("--seed", "99999999999999999999999"), "--seed");
  rejects(ARGS("--data-dir="), "--data-dir");
  rejects(ARGS("--limit-train", "1.5"), "--limit-train");
  rejects(ARGS("--algorithm", "sgd"), "gradient_allreduce, bytegrad, decentralized");
  rejects(ARGS("--algorithm", "decentralized", "--peer-mode", "star"), "all, shift_one or ring");
  rejects(ARGS("--algorithm", "decentralized", "--comm-interval", "0"), "--comm-interval");
  rejects(ARGS("--hierarchical=maybe"), "--hierarchical");
  rejects(ARGS("--no-hierarchical=1"), "--no-hierarchical takes no value");
  rejects(ARGS("--no-epochs"), "unknown option");
  rejects(ARGS("--help=1"), "--help");
  rejects(ARGS("--bucket-mb", "0"), "--bucket-mb");
  rejects(ARGS("--bucket-mb", "5000"), "--bucket-mb");
  rejects(ARGS("--algorithm", "async", "--sync-interval-ms", "0"), "--sync-interval-ms");
  rejects(ARGS("--algorithm", "qadam", "--warmup-steps", "-1"), "--warmup-steps");
  /* Algorithm options that the chosen algorithm does not have. */
  rejects(ARGS("--peer-mode", "all"),
          "--peer-mode does not apply to --algorithm "
          "gradient_allreduce; it is an option of: decentralized");
  rejects(ARGS("--error-feedback", "--algorithm", "decentralized"), "option of: bytegrad qadam");
  rejects(ARGS("--algorithm", "async", "--hierarchical"), "--hierarchical does not apply");
  rejects(ARGS("--sync-interval-ms", "5", "--algorithm", "qadam"), "option of: async");
  rejects(ARGS("--comm-interval", "2"), "decentralized low_precision_decentralized");
  rejects(ARGS("--warmup-steps", "2", "--algorithm", "bytegrad"), "option of: qadam async");
  printf("ok\n");
  return 0;
}
