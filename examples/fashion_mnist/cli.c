/*
 * Command-line parsing and validation (see cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bagua/ddp.h"
#include "bagua/params.h"
#include "dataset.h"

#define PROG "fashion_mnist"

static const char *const alg_names[FM_ALG__COUNT] = {
    "gradient_allreduce",          "bytegrad", "decentralized",
    "low_precision_decentralized", "qadam",    "async"};
static const char *const peer_names[] = {"all", "shift_one", "ring"};

const char *fm_algorithm_name(fm_algorithm_t a) {
  return (unsigned)a < FM_ALG__COUNT ? alg_names[a] : "?";
}
const char *fm_peer_mode_name(fm_peer_mode_t p) {
  return (unsigned)p < 3 ? peer_names[p] : "?";
}

#define ANY_ALGORITHM "*"

typedef enum { V_NONE, V_REQUIRED, V_BOOL } value_kind_t;

/* One row per flag: its name, whether it takes a value, what it accepts (for messages), the
 * bagua_ddp_config_t field it sets (libbagua says which algorithms have it,
 * bagua_ddp_algorithm_options; ANY_ALGORITHM: every one; NULL: not an algorithm option) and
 * its bit in fm_options_t.given. */
typedef struct {
  const char *name;
  const char *meta; /* the value's placeholder in --help */
  value_kind_t kind;
  const char *accepts;
  const char *field;
  unsigned bit;
  const char *help;
} opt_spec_t;

static const opt_spec_t specs[] = {
    {"--epochs", "N", V_REQUIRED, "an integer 0..100000", NULL, 0,
     "passes over the training set (10)"},
    {"--batch-size", "B", V_REQUIRED, "an integer 1..65536", NULL, 0,
     "examples per step per rank (64)"},
    {"--lr", "X", V_REQUIRED, "a number > 0 and <= 100", NULL, 0, "learning rate (0.02)"},
    {"--momentum", "X", V_REQUIRED, "a number >= 0 and < 1", NULL, 0, "SGD momentum (0.9)"},
    {"--weight-decay", "X", V_REQUIRED, "a number >= 0 and <= 1", NULL, 0, "L2 weight decay (0)"},
    {"--hidden", "W1,W2,...", V_REQUIRED, "a comma-separated list of 1..16 widths, each 1..65536",
     NULL, 0, "hidden layer widths (512,512)"},
    {"--seed", "S", V_REQUIRED, "an unsigned 64-bit integer", NULL, 0,
     "initialisation and shuffling seed, the same on every rank (1)"},
    {"--data-dir", "DIR", V_REQUIRED, "a directory", NULL, 0,
     "directory with the IDX files (" FM_DEFAULT_DATA_DIR ")"},
    {"--limit-train", "N", V_REQUIRED, "an integer 0..100000000 (0: all)", NULL, 0,
     "use only the first N training examples (0: all)"},
    {"--limit-test", "N", V_REQUIRED, "an integer 0..100000000 (0: all)", NULL, 0,
     "evaluate on the first N test examples only (0: all)"},
    {"--algorithm", "NAME", V_REQUIRED,
     "gradient_allreduce, bytegrad, decentralized, low_precision_decentralized, qadam, async", NULL,
     0, "communication algorithm (BAGUA_ALGORITHM, else gradient_allreduce)"},
    {"--hierarchical", "[=BOOL]", V_BOOL, "nothing, or =1/0, =true/false, =on/off", "hierarchical",
     FM_OPT_HIERARCHICAL, "communicate within nodes first (on, except for gradient_allreduce)"},
    {"--peer-mode", "MODE", V_REQUIRED, "all, shift_one or ring", "peer_mode", FM_OPT_PEER_MODE,
     "decentralized peer selection (all)"},
    {"--comm-interval", "N", V_REQUIRED, "an integer 1..1000000", "comm_interval",
     FM_OPT_COMM_INTERVAL, "communicate weights every N steps (1)"},
    {"--error-feedback", "[=BOOL]", V_BOOL, "nothing, or =1/0, =true/false, =on/off",
     "error_feedback", FM_OPT_ERROR_FEEDBACK,
     "carry the quantisation error into the next step (off)"},
    {"--warmup-steps", "N", V_REQUIRED, "an integer 0..1000000000", "warmup_steps",
     FM_OPT_WARMUP_STEPS, "full-precision gradient allreduce steps first (qadam 100, async 0)"},
    {"--sync-interval-ms", "MS", V_REQUIRED, "an integer 1..3600000", "sync_interval_ms",
     FM_OPT_SYNC_INTERVAL_MS, "async model averaging period (500)"},
    {"--bucket-mb", "MB", V_REQUIRED, "a number of MiB from 0.00390625 (4 KiB) to 4096",
     ANY_ALGORITHM, FM_OPT_BUCKET_MB,
     "gradient bucket size (library default: BAGUA_BUCKET_SIZE, 10 MiB)"},
    {"--elastic", "[=BOOL]", V_BOOL, "nothing, or =1/0, =true/false, =on/off", ANY_ALGORITHM,
     FM_OPT_ELASTIC,
     "in-process elasticity under bagua-agent/bagua-launch: workers survive world changes, every "
     "algorithm (off)"},
    {"--device", "NAME", V_REQUIRED, "cpu or cuda", NULL, 0,
     "where the model trains: cpu, or cuda (one GPU per rank, local rank modulo the visible "
     "GPUs; needs a build with CUDA and NCCL) (cpu)"},
    {"--help", "", V_NONE, "", NULL, 0, "print this help and exit"},
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

/* Whether algorithm `a` has option `s` (libbagua's table of algorithms says which). */
static int applies(const opt_spec_t *s, fm_algorithm_t a) {
  if (!s->field) return 0;
  if (!strcmp(s->field, ANY_ALGORITHM)) return 1;
  const char *fields = bagua_ddp_algorithm_options(alg_names[a]);
  size_t n = strlen(s->field);
  for (const char *p = fields; p && *p;) {
    size_t k = strcspn(p, " ");
    if (k == n && !strncmp(p, s->field, n)) return 1;
    p += k + (p[k] == ' ');
  }
  return 0;
}

static void usage(FILE *out) {
  fprintf(out, "usage: " PROG
               " [options]\n"
               "Trains an MLP on Fashion-MNIST, data-parallel across the ranks given by RANK,\n"
               "WORLD_SIZE, MASTER_ADDR and MASTER_PORT (one process when WORLD_SIZE is unset).\n"
               "Values follow the flag (--lr 0.1) or an equals sign (--lr=0.1).\n\n");
  for (size_t i = 0; i < NSPECS; i++) {
    char left[64];
    snprintf(left, sizeof(left), "%s%s%s", specs[i].name, specs[i].kind == V_REQUIRED ? " " : "",
             specs[i].meta);
    fprintf(out, "  %-26s %s\n", left, specs[i].help);
  }
  fprintf(out,
          "\nAlgorithms: gradient_allreduce, bytegrad, decentralized, "
          "low_precision_decentralized,\nqadam, async. Algorithm options are accepted only with "
          "an algorithm that has them.\nBoolean flags also have a --no- form "
          "(--no-hierarchical).\n");
}

static int bad(FILE *err, const opt_spec_t *s, const char *value) {
  fprintf(err, PROG ": %s: \"%s\" is not accepted; expected %s\n", s->name, value, s->accepts);
  return FM_CLI_ERROR;
}

static int parse_long(const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) return -1;
  *out = x;
  return 0;
}

static int parse_double(const char *v, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x)) return -1;
  *out = x;
  return 0;
}

static int parse_bool(const char *v, int *out) {
  static const char *const yes[] = {"1", "true", "on", "yes"}, *const no[] = {"0", "false", "off",
                                                                              "no"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(v, yes[i]) == 0) return *out = 1, 0;
    if (strcasecmp(v, no[i]) == 0) return *out = 0, 0;
  }
  return -1;
}

static int parse_hidden(const char *v, fm_options_t *o) {
  const char *p = v;
  o->nhidden = 0;
  for (;;) {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (errno || end == p || x < 1 || x > 65536 || o->nhidden == FM_MAX_HIDDEN) return -1;
    o->hidden[o->nhidden++] = (int)x;
    if (*end == '\0') return 0;
    if (*end != ',') return -1;
    p = end + 1;
  }
}

static int parse_seed(const char *v, uint64_t *out) {
  char *end;
  errno = 0;
  if (*v == '-' || *v == '\0') return -1;
  unsigned long long x = strtoull(v, &end, 0);
  if (errno || *end) return -1;
  *out = x;
  return 0;
}

/* Applies the value of spec s; returns 0 or -1 when the value is malformed or out of range. */
static int apply(const opt_spec_t *s, const char *v, fm_options_t *o) {
  const char *n = s->name;
  long l;
  double d;
  if (!strcmp(n, "--epochs")) {
    if (parse_long(v, 0, 100000, &l)) return -1;
    o->epochs = (int)l;
  } else if (!strcmp(n, "--batch-size")) {
    if (parse_long(v, 1, 65536, &l)) return -1;
    o->batch_size = (int)l;
  } else if (!strcmp(n, "--lr")) {
    if (parse_double(v, &d) || !(d > 0.0 && d <= 100.0)) return -1;
    o->lr = d;
    o->lr_given = 1;
  } else if (!strcmp(n, "--momentum")) {
    if (parse_double(v, &d) || !(d >= 0.0 && d < 1.0)) return -1;
    o->momentum = d;
  } else if (!strcmp(n, "--weight-decay")) {
    if (parse_double(v, &d) || !(d >= 0.0 && d <= 1.0)) return -1;
    o->weight_decay = d;
  } else if (!strcmp(n, "--hidden")) {
    return parse_hidden(v, o);
  } else if (!strcmp(n, "--seed")) {
    return parse_seed(v, &o->seed);
  } else if (!strcmp(n, "--data-dir")) {
    if (!*v) return -1;
    o->data_dir = v;
  } else if (!strcmp(n, "--limit-train") || !strcmp(n, "--limit-test")) {
    if (parse_long(v, 0, 100000000, &l)) return -1;
    if (!strcmp(n, "--limit-train"))
      o->limit_train = l;
    else
      o->limit_test = l;
  } else if (!strcmp(n, "--algorithm")) {
    for (int a = 0; a < FM_ALG__COUNT; a++) {
      if (!strcmp(v, alg_names[a]))
        return o->algorithm = (fm_algorithm_t)a, o->algorithm_given = 1, 0;
    }
    return -1;
  } else if (!strcmp(n, "--hierarchical")) {
    return parse_bool(v, &o->hierarchical);
  } else if (!strcmp(n, "--peer-mode")) {
    for (int p = 0; p < 3; p++) {
      if (!strcmp(v, peer_names[p])) return o->peer_mode = (fm_peer_mode_t)p, 0;
    }
    return -1;
  } else if (!strcmp(n, "--comm-interval")) {
    if (parse_long(v, 1, 1000000, &l)) return -1;
    o->comm_interval = (int)l;
  } else if (!strcmp(n, "--error-feedback")) {
    return parse_bool(v, &o->error_feedback);
  } else if (!strcmp(n, "--warmup-steps")) {
    return parse_long(v, 0, 1000000000, &o->warmup_steps);
  } else if (!strcmp(n, "--sync-interval-ms")) {
    if (parse_long(v, 1, 3600000, &l)) return -1;
    o->sync_interval_ms = (int)l;
  } else if (!strcmp(n, "--elastic")) {
    return parse_bool(v, &o->elastic);
  } else if (!strcmp(n, "--device")) {
    if (!strcmp(v, "cpu"))
      o->device = FM_DEVICE_CPU;
    else if (!strcmp(v, "cuda"))
      o->device = FM_DEVICE_CUDA;
    else
      return -1;
  } else if (!strcmp(n, "--bucket-mb")) {
    if (parse_double(v, &d) || !(d >= 1.0 / 256 && d <= 4096.0)) return -1;
    o->bucket_mb = d;
  }
  return 0;
}

static void set_defaults(fm_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->epochs = 10;
  o->batch_size = 64;
  o->lr = 0.02;
  o->momentum = 0.9;
  o->weight_decay = 0.0;
  o->hidden[0] = o->hidden[1] = 512;
  o->nhidden = 2;
  o->seed = 1;
  o->data_dir = FM_DEFAULT_DATA_DIR;
  o->algorithm = FM_ALG_GRADIENT_ALLREDUCE;
}

/*
 * Without --algorithm the algorithm is the one libbagua will run: BAGUA_ALGORITHM's (what
 * bagua-launch exports for [algorithm] name), read through the parameter registry, which has
 * already checked it (any case; NULL when unset or invalid, and libbagua then refuses an
 * invalid value by name). The example needs to know it for its own choices (the optimizer,
 * qadam's learning rate and warm-up), but leaves config.algorithm unset, so that libbagua
 * applies the variable itself and the flag > environment > default rule has one owner.
 */
static void algorithm_from_env(fm_options_t *o) {
  const char *env = bagua_param_get("BAGUA_ALGORITHM");
  for (int a = 0; env && a < FM_ALG__COUNT; a++)
    if (!strcasecmp(env, alg_names[a])) o->algorithm = (fm_algorithm_t)a;
}

/* Bagua's defaults for the options the user left out, which depend on the algorithm. */
static void algorithm_defaults(fm_options_t *o) {
  if (!(o->given & FM_OPT_HIERARCHICAL))
    o->hierarchical = o->algorithm != FM_ALG_ASYNC && o->algorithm != FM_ALG_GRADIENT_ALLREDUCE;
  if (!(o->given & FM_OPT_PEER_MODE))
    o->peer_mode = o->algorithm == FM_ALG_LOW_PRECISION_DECENTRALIZED ? FM_PEER_RING : FM_PEER_ALL;
  if (!(o->given & FM_OPT_COMM_INTERVAL)) o->comm_interval = 1;
  if (!(o->given & FM_OPT_WARMUP_STEPS)) o->warmup_steps = o->algorithm == FM_ALG_QADAM ? 100 : 0;
  if (!(o->given & FM_OPT_SYNC_INTERVAL_MS)) o->sync_interval_ms = 500;
}

/* --device cuda needs the GPU code, which is compiled only where libbagua has CUDA and NCCL,
 * and is not offered with --elastic: the elastic loop commits, restores and rebalances state
 * that lives on the host (the model, the sampler position, the coverage bitmap), and moving
 * all of it to the device is a separate piece of work. */
static int device_supported(const fm_options_t *o, FILE *err) {
#ifndef FM_HAVE_CUDA
  (void)o;
  fprintf(err, PROG
          ": --device cuda: this build has no CUDA/NCCL support (it was configured without the "
          "CUDA toolkit or without NCCL; rebuild with -DBAGUA_WITH_CUDA=ON where both are "
          "installed); accepted here: cpu\n");
  return 0;
#else
  if (o->elastic) {
    fprintf(err, PROG
            ": --elastic does not support --device cuda yet (the elastic loop keeps its state on "
            "the host); use --device cpu with --elastic, or drop --elastic\n");
    return 0;
  }
  return 1;
#endif
}

int fm_cli_parse(int argc, char **argv, fm_options_t *o, FILE *out, FILE *err) {
  set_defaults(o);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *eq = strchr(arg, '='), *value = NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    int negated = 0;
    if (!strcmp(arg, "-h")) arg = "--help", len = 6;
    if (!strncmp(arg, "--no-", 5)) negated = 1;
    const opt_spec_t *s = NULL;
    for (size_t k = 0; k < NSPECS && !s; k++) {
      const char *name = specs[k].name;
      if (negated && specs[k].kind == V_BOOL && len == strlen(name) + 3 &&
          !strncmp(arg + 5, name + 2, len - 5))
        s = &specs[k];
      else if (!negated && strlen(name) == len && !strncmp(arg, name, len))
        s = &specs[k];
    }
    if (!s) {
      fprintf(err, PROG ": unknown option \"%s\"; accepted:", argv[i]);
      for (size_t k = 0; k < NSPECS; k++) fprintf(err, " %s", specs[k].name);
      fprintf(err, " (see --help)\n");
      return FM_CLI_ERROR;
    }
    if (s->kind == V_NONE) {
      if (eq) return bad(err, s, eq + 1);
      usage(out);
      return FM_CLI_HELP;
    }
    if (negated) {
      if (eq) {
        fprintf(err, PROG ": --no-%s takes no value\n", s->name + 2);
        return FM_CLI_ERROR;
      }
      value = "0";
    } else if (eq) {
      value = eq + 1;
    } else if (s->kind == V_BOOL) {
      value = "1";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fprintf(err, PROG ": %s needs a value: %s\n", s->name, s->accepts);
      return FM_CLI_ERROR;
    }
    if (apply(s, value, o) != 0) return bad(err, s, value);
    o->given |= s->bit;
  }
  if (!o->algorithm_given) algorithm_from_env(o);
  /* Algorithm options are checked once the algorithm is known, wherever it was given. */
  for (size_t k = 0; k < NSPECS; k++) {
    const opt_spec_t *s = &specs[k];
    if (!(o->given & s->bit) || applies(s, o->algorithm)) continue;
    fprintf(err, PROG ": %s does not apply to --algorithm %s; it is an option of:", s->name,
            alg_names[o->algorithm]);
    for (int a = 0; a < FM_ALG__COUNT; a++)
      if (applies(s, (fm_algorithm_t)a)) fprintf(err, " %s", alg_names[a]);
    fprintf(err, "\n");
    return FM_CLI_ERROR;
  }
  if (o->device == FM_DEVICE_CUDA && !device_supported(o, err)) return FM_CLI_ERROR;
  algorithm_defaults(o);
  return FM_CLI_OK;
}
