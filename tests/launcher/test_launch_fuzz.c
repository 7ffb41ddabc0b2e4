/*
 * Fuzz-style robustness test of the launcher's parsers: random and mutated INI text, and
 * random argument lists, for a bounded number of iterations with a fixed seed (reproducible;
 * pass another seed and counts as arguments to explore). It asserts only that nothing
 * crashes, every result is "accepted" or "usage error" with a message, and (under the ASan
 * build) that nothing leaks or overflows.
 *
 *   test_launch_fuzz [SEED [INI_ITERATIONS [ARGV_ITERATIONS]]]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "test.h"

static uint64_t g_rng;

static uint64_t rnd(void) {
  /* xorshift64*: fast, and enough to spread mutations. */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}

static size_t pick(size_t n) {
  return n ? (size_t)(rnd() % n) : 0;
}

static const char *const k_seeds[] = {
    "[job]\nnnodes = 2:4\nnproc_per_node = 2\nprogram = ./train\nargs = --lr 0.1 \"a b\"\n",
    ("[rendezvous]\nendpoint = 127.0.0.1:2379,http://h:1\nlease_ttl = 5\ntimeout = 10\n"
     "last_call_ms = 0\nsettle_ms = 9\netcd_timeout_ms = 100\nhost = 10.0.0.1\n"),
    "[algorithm]\nname = qadam\nnet_nstreams = 3\nwarmup_steps = 100\n[env]\nOMP_NUM_THREADS=1\n",
    "[hosts]\nnode1 = 2\nnode1 = 2\nnode2 =\nlocalhost:4\n",
    "; comment\n# comment\n\n[job]\n  job_id = x.y_z-1 ; inline\n  max_restarts=0\n",
    "\xEF\xBB\xBF[job]\r\nlog_dir = /tmp/a b\r\nremote_cmd = ssh -p 22 {host}\r\n",
    "[env]\nBAGUA_TRANSPORT = tcp\nX=\n[job]\nagent = /bin/true\nstop_grace_ms = 10\n",
    "[job]\nelastic_mode = in-process\n[env]\nBAGUA_ELASTIC_MARK = x\n",
};

static const char *const k_tokens[] = {"[job]\n",
                                       "[rendezvous]\n",
                                       "[algorithm]\n",
                                       "[hosts]\n",
                                       "[env]\n",
                                       "[",
                                       "]",
                                       "=",
                                       ":",
                                       ";",
                                       "#",
                                       "\n",
                                       " ",
                                       "\t",
                                       "\r\n",
                                       "nnodes",
                                       "2:4",
                                       "0",
                                       "-1",
                                       "99999999999999999999",
                                       "job_id",
                                       "program",
                                       "args",
                                       "name",
                                       "bytegrad",
                                       "RANK",
                                       "BAGUA_NET_NSTREAMS",
                                       "BAGUA_MAX_RESTARTS",
                                       "\"",
                                       "'",
                                       "\\",
                                       "{host}",
                                       "\xEF\xBB\xBF",
                                       "\xff",
                                       "%s%n",
                                       "/",
                                       "endpoint",
                                       "a:1,,b",
                                       "host",
                                       "lease_ttl",
                                       "[jobs]\n",
                                       "key",
                                       "=value\n"};

static void mutate(char *buf, size_t *len, size_t cap) {
  int nmut = 1 + (int)pick(8);
  for (int m = 0; m < nmut; m++) {
    size_t pos = pick(*len + 1);
    switch (pick(6)) {
      case 0: { /* insert a token */
        const char *t = k_tokens[pick(sizeof(k_tokens) / sizeof(k_tokens[0]))];
        size_t tl = strlen(t);
        if (*len + tl >= cap) break;
        memmove(buf + pos + tl, buf + pos, *len - pos);
        memcpy(buf + pos, t, tl);
        *len += tl;
        break;
      }
      case 1: { /* delete a range */
        size_t n = pick(16);
        if (pos + n > *len) n = *len - pos;
        memmove(buf + pos, buf + pos + n, *len - pos - n);
        *len -= n;
        break;
      }
      case 2: /* flip a byte (NUL included) */
        if (*len) buf[pick(*len)] = (char)rnd();
        break;
      case 3: { /* a long run, to cross inih's line limit */
        size_t n = 150 + pick(200);
        if (*len + n >= cap) break;
        memmove(buf + pos + n, buf + pos, *len - pos);
        memset(buf + pos, "x=;[ "[pick(5)], n);
        *len += n;
        break;
      }
      case 4: /* truncate */
        *len = pos;
        break;
      default: { /* duplicate a range */
        size_t n = pick(64);
        if (pos + n > *len) n = *len - pos;
        if (*len + n >= cap) break;
        memmove(buf + pos + n, buf + pos, *len - pos);
        memcpy(buf + pos + n, buf + pos, n);
        *len += n;
      }
    }
  }
}

static void fuzz_ini(int iterations) {
  enum { CAP = 8192 };
  char *buf = malloc(CAP);
  char err[LAUNCH_ERR_LEN];
  bagua__launch_layer_t cli = {0}, env = {0};
  char *argv[] = {"bagua-launch", "prog", NULL};
  ASSERT_EQ(bagua__launch_parse_cli(2, argv, &cli, err, sizeof(err)), 0);
  int accepted = 0;
  for (int it = 0; it < iterations; it++) {
    const char *seed = k_seeds[pick(sizeof(k_seeds) / sizeof(k_seeds[0]))];
    size_t len = strlen(seed);
    memcpy(buf, seed, len);
    mutate(buf, &len, CAP);
    bagua__launch_layer_t ini = {0};
    /* Text with no terminating NUL: the parser must respect the length. */
    char *exact = malloc(len ? len : 1);
    memcpy(exact, buf, len);
    err[0] = '\0';
    int rc = bagua__launch_read_ini_text("fuzz.ini", exact, len, &ini, err, sizeof(err));
    free(exact);
    if (rc != 0 && rc != LAUNCH_EXIT_USAGE) TEST_FAIL("iteration %d: rc %d", it, rc);
    if (rc != 0 && strncmp(err, "fuzz.ini:", 9) != 0)
      TEST_FAIL("iteration %d: error without FILE:LINE: \"%s\"", it, err);
    if (rc == 0) {
      accepted++;
      bagua__launch_config_t cfg;
      if (bagua__launch_resolve(&cli, &env, &ini, &cfg, err, sizeof(err)) == 0) {
        FILE *null = fopen("/dev/null", "w");
        bagua__launch_dump(&cfg, null);
        fclose(null);
      }
      bagua__launch_config_free(&cfg);
    }
    bagua__launch_layer_free(&ini);
  }
  bagua__launch_layer_free(&cli);
  free(buf);
  printf("ini: %d iterations, %d accepted\n", iterations, accepted);
}

static const char *const k_words[] = {"--nnodes",
                                      "2:4",
                                      "3:2",
                                      "a",
                                      "--nproc-per-node",
                                      "0",
                                      "4",
                                      "--job-id",
                                      "j/1",
                                      "job",
                                      "--hosts",
                                      "a:2,b",
                                      "a,,b",
                                      ":",
                                      "--hostfile",
                                      "/nonexistent",
                                      "--config",
                                      "missing.ini",
                                      "--rdzv-endpoint",
                                      "h:1",
                                      "x",
                                      "--remote-cmd",
                                      "ssh {host}",
                                      "'",
                                      "--",
                                      "-",
                                      "prog",
                                      "--max-restarts",
                                      "-1",
                                      "--dry-run",
                                      "--dry-run=1",
                                      "--help",
                                      "--node-id",
                                      "--lease-ttl=",
                                      "--lease_ttl=3",
                                      "--unknown",
                                      "-x",
                                      "FOO",
                                      "FOO=bar",
                                      "RANK=1",
                                      "-m",
                                      "--module",
                                      "--no-python",
                                      "--python",
                                      "train.py",
                                      "--standalone",
                                      "--rdzv_id",
                                      "--node_rank",
                                      "-np",
                                      "\"quoted\"",
                                      "",
                                      "=",
                                      "--grace-ms",
                                      "--etcd-timeout-ms",
                                      "100",
                                      "--elastic-mode",
                                      "in-process",
                                      "--elastic-mode=auto|restart"};

static void fuzz_argv(int iterations) {
  char err[LAUNCH_ERR_LEN];
  int accepted = 0;
  for (int it = 0; it < iterations; it++) {
    char *argv[12];
    int argc = 1 + (int)pick(10);
    argv[0] = "bagua-launch";
    for (int i = 1; i < argc; i++)
      argv[i] = (char *)k_words[pick(sizeof(k_words) / sizeof(k_words[0]))];
    argv[argc] = NULL;
    bagua__launch_config_t cfg;
    int rc = bagua__launch_configure(argc, argv, &cfg, err, sizeof(err));
    if (rc != 0 && rc != LAUNCH_EXIT_USAGE) TEST_FAIL("iteration %d: rc %d", it, rc);
    if (rc != 0 && !err[0]) TEST_FAIL("iteration %d: usage error without a message", it);
    if (rc == 0) {
      accepted++;
      bagua__launch_config_free(&cfg);
    }
  }
  printf("argv: %d iterations, %d accepted\n", iterations, accepted);
}

int main(int argc, char **argv) {
  g_rng = argc > 1 ? strtoull(argv[1], NULL, 0) : 0x9e3779b97f4a7c15ull;
  if (!g_rng) g_rng = 1;
  int ini_iters = argc > 2 ? atoi(argv[2]) : 50000;
  int argv_iters = argc > 3 ? atoi(argv[3]) : 10000;
  fuzz_ini(ini_iters);
  fuzz_argv(argv_iters);
  return 0;
}
