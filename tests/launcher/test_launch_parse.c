/*
 * Golden tests of the launcher's configuration parser (command line + environment + INI).
 *
 *   test_launch_parse CASES GOLDEN_DIR [--update]
 *
 * Each line of CASES is "name | ENV=VALUE ... | arguments...", words split the way the
 * launcher splits them. The case runs bagua__launch_configure() in this process with exactly
 * that environment (every launcher variable unset otherwise) and produces "exit N" followed by
 * the error message (N != 0) or the dump of the resolved configuration; the text must equal
 * GOLDEN_DIR/<name>.txt. The working directory is the folder of the INI inputs, so messages
 * name them by relative path. --update rewrites the golden files (review the diff!).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/params.h"
#include "launch.h"
#include "launch_util.h"
#include "test.h"

static int hex12(const char *p) {
  for (int i = 0; i < 12; i++)
    if (!p[i] || !strchr("0123456789abcdef", p[i])) return 0;
  return !(p[12] && strchr("0123456789abcdef", p[12]));
}

/* Replaces generated job ids ("bagua-" and 12 hex digits) so the text is stable. */
static char *mask_ids(const char *s) {
  size_t n = strlen(s), o = 0;
  char *out = malloc(n + 1);
  ASSERT_TRUE(out != NULL);
  for (size_t i = 0; i < n;) {
    if (strncmp(s + i, "bagua-", 6) == 0 && hex12(s + i + 6)) {
      memcpy(out + o, "bagua-<random>", 14);
      o += 14;
      i += 18;
    } else {
      out[o++] = s[i++];
    }
  }
  out[o] = '\0';
  return out;
}

static void trim(char **s) {
  while (**s == ' ' || **s == '\t') (*s)++;
  size_t n = strlen(*s);
  while (n > 0 && ((*s)[n - 1] == ' ' || (*s)[n - 1] == '\t' || (*s)[n - 1] == '\n'))
    (*s)[--n] = '\0';
}

/* Unsets every variable the launcher reads, so the host environment cannot leak in. */
static void clean_env(void) {
  for (int s = 0; s < LS__COUNT; s++) {
    const bagua__launch_desc_t *d = bagua__launch_desc((bagua__launch_setting_t)s);
    if (d->env) unsetenv(d->env);
  }
  /* Every registry variable, so that one case's environment never leaks into the next. */
  for (int id = 0; id < BAGUA_P__COUNT; id++)
    unsetenv(bagua__param_env_name((bagua__param_id_t)id));
  /* Inside a Slurm allocation the launcher takes its hosts from Slurm: a case sets these
   * itself when it wants that. */
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_JOB_NODELIST");
  unsetenv("SLURM_NTASKS_PER_NODE");
  unsetenv("SLURM_TASKS_PER_NODE");
}

static char *run_case(const bagua__launch_argv_t *env, const bagua__launch_argv_t *args) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  ASSERT_TRUE(out != NULL);
  clean_env();
  for (int i = 0; i < env->n; i++) {
    char *eq = strchr(env->v[i], '=');
    ASSERT_TRUE(eq != NULL);
    *eq = '\0';
    setenv(env->v[i], eq + 1, 1);
    *eq = '=';
  }
  bagua__params_reload();
  char **argv = calloc((size_t)args->n + 2, sizeof(char *));
  argv[0] = "bagua-launch";
  for (int i = 0; i < args->n; i++) argv[i + 1] = args->v[i];
  bagua__launch_config_t cfg;
  char err[LAUNCH_ERR_LEN];
  int rc = bagua__launch_configure(args->n + 1, argv, &cfg, err, sizeof(err));
  fprintf(out, "exit %d\n", rc);
  if (rc != 0)
    fprintf(out, "%s\n", err);
  else if (cfg.help || cfg.version || cfg.print_params)
    fprintf(out, "action:%s%s%s\n", cfg.help ? " help" : "", cfg.version ? " version" : "",
            cfg.print_params ? " print-params" : "");
  else
    bagua__launch_dump(&cfg, out);
  if (rc == 0) bagua__launch_config_free(&cfg);
  free(argv);
  fclose(out);
  clean_env();
  bagua__params_reload();
  char *masked = mask_ids(text);
  free(text);
  return masked;
}

int main(int argc, char **argv) {
  if (argc < 3) TEST_FAIL("usage: %s CASES GOLDEN_DIR [--update]", argv[0]);
  int update = argc > 3 && strcmp(argv[3], "--update") == 0;
  FILE *f = fopen(argv[1], "r");
  if (!f) TEST_FAIL("cannot open %s", argv[1]);
  char *line = NULL;
  size_t cap = 0;
  int ncases = 0, nfail = 0;
  while (getline(&line, &cap, f) >= 0) {
    char *p = line;
    trim(&p);
    if (!*p || *p == '#') continue;
    char *bar1 = strchr(p, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
    if (!bar2) TEST_FAIL("malformed case line: %s", p);
    *bar1 = *bar2 = '\0';
    char *name = p, *envs = bar1 + 1, *args = bar2 + 1;
    trim(&name);
    bagua__launch_argv_t env = {0}, words = {0};
    char serr[128];
    if (bagua__launch_split_words(envs, &env, serr, sizeof(serr)) != 0 ||
        bagua__launch_split_words(args, &words, serr, sizeof(serr)) != 0)
      TEST_FAIL("case %s: %s", name, serr);
    char *got = run_case(&env, &words);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.txt", argv[2], name);
    ncases++;
    if (update) {
      FILE *g = fopen(path, "w");
      if (!g) TEST_FAIL("cannot write %s", path);
      fputs(got, g);
      fclose(g);
    } else {
      char *want = lu_read(path);
      if (!want || strcmp(want, got) != 0) {
        nfail++;
        fprintf(stderr, "FAIL case %s (%s)\n---- expected ----\n%s---- got ----\n%s----\n", name,
                path, want ? want : "(missing golden file)\n", got);
      }
      free(want);
    }
    free(got);
    bagua__launch_argv_free(&env);
    bagua__launch_argv_free(&words);
  }
  free(line);
  fclose(f);
  printf("%d case(s), %d failed%s\n", ncases, nfail, update ? " (golden files rewritten)" : "");
  ASSERT_GT(ncases, 0);
  return nfail ? 1 : 0;
}
