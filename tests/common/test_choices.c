/*
 * One case rule for words. Every reader of a word setting gives the same verdict for the same
 * value, and the readers that pass the value on hand over its canonical spelling:
 *
 *  - the registry, which libbagua and bagua-agent's environment defaults read
 *    (bagua__params_check, bagua__param_str);
 *  - bagua_param_get, through which bagua-launch reads its environment and the Python front
 *    end reads every variable;
 *  - bagua_param_validate, which checks bagua-launch's [env] and [algorithm] entries;
 *  - bagua__check_choice, which checks bagua-launch's flags and INI keys and bagua-agent's
 *    flags;
 *  - bagua_params_print, which is bagua-launch --print-params.
 *
 * The rule: a word matches its list's word in any ASCII case; the empty text and anything
 * else are refused with the accepted words.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "bagua/params.h"
#include "common/params.h"
#include "common/validate.h"

static char g_err[512];

/* `n` bytes of `word`, with the case of every letter changed by `how`: 'U' upper, 'C' the
 * first letter upper and the rest as given. */
static void recase(char *out, size_t len, const char *word, size_t n, char how) {
  snprintf(out, len, "%.*s", (int)n, word);
  for (char *p = out; *p; p++) {
    if (how == 'U' || p == out) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
  }
}

/* The CURRENT column of `env`'s line in bagua_params_print's table, into out. */
static void printed_current(const char *env, char out[64]) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  ASSERT_TRUE(f != NULL);
  bagua_params_print(f);
  fclose(f);
  out[0] = '\0';
  size_t n = strlen(env);
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    if (strncmp(line, env, n) == 0 && line[n] == ' ') {
      char name[64], type[8], def[64], acc[128];
      /* NAME TYPE DEFAULT ACCEPTED CURRENT HELP: no column but HELP holds blanks. */
      ASSERT_EQ(sscanf(line, "%63s %7s %63s %127s %63s", name, type, def, acc, out), 5);
      break;
    }
    line = next ? next + 1 : NULL;
  }
  free(text);
}

/* Sets `env` to `value` (NULL: unset) and makes the registry read it again. */
static void set_env(const char *env, const char *value) {
  if (value)
    setenv(env, value, 1);
  else
    unsetenv(env);
  bagua__params_reload();
}

/*
 * Every reader's verdict on word parameter `id` given `value`; `canon` is the canonical
 * spelling expected when accepted, NULL when every reader must refuse.
 */
static void expect_verdict(bagua__param_id_t id, const char *value, const char *canon) {
  const char *env = bagua__param_env_name(id);
  const char *choices = bagua__param_choices(id);
  char current[64];
  int list = choices[0] == ',';
  set_env(env, value);
  bagua_status_t registry = bagua__params_check();
  bagua_status_t validate = bagua_param_validate(env, value, g_err, sizeof(g_err));
  bagua_status_t parse = bagua__param_parse(id, value, NULL, g_err, sizeof(g_err));
  /* The tools check single words with bagua__check_choice; lists only as variables. */
  bagua_status_t tool = list ? validate : bagua__check_choice(value, choices, g_err, sizeof(g_err));
  printed_current(env, current);
  if (!canon) {
    if (registry == BAGUA_OK || validate == BAGUA_OK || parse == BAGUA_OK || tool == BAGUA_OK)
      TEST_FAIL("%s=\"%s\": registry %d, validate %d, parse %d, tools %d; expected all refused",
                env, value, registry, validate, parse, tool);
    ASSERT_TRUE(bagua_param_get(env) == NULL);
    ASSERT_STREQ(current, "(invalid)");
    return;
  }
  if (registry != BAGUA_OK || validate != BAGUA_OK || parse != BAGUA_OK || tool != BAGUA_OK)
    TEST_FAIL("%s=\"%s\": registry %d, validate %d, parse %d, tools %d; expected all accepted", env,
              value, registry, validate, parse, tool);
  ASSERT_STREQ(bagua__param_str(id), canon);
  ASSERT_TRUE(bagua_param_get(env) != NULL);
  ASSERT_STREQ(bagua_param_get(env), canon);
  ASSERT_STREQ(current, canon);
}

/* The matching rule itself, and the messages of a refusal. */
static void test_rule(void) {
  const char *modes = "auto|restart|in-process";
  ASSERT_OK(bagua__check_choice("restart", modes, g_err, sizeof(g_err)));
  ASSERT_OK(bagua__check_choice("Restart", modes, g_err, sizeof(g_err)));
  ASSERT_OK(bagua__check_choice("IN-PROCESS", modes, g_err, sizeof(g_err)));
  /* The canonical spelling is the list's, and it must fit the caller's buffer. */
  char word[16];
  ASSERT_OK(bagua__choice_parse("In-Process", modes, word, sizeof(word), g_err, sizeof(g_err)));
  ASSERT_STREQ(word, "in-process");
  ASSERT_STATUS(bagua__choice_parse("In-Process", modes, word, 10, g_err, sizeof(g_err)),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(g_err, "10-byte buffer") != NULL);
  ASSERT_TRUE(bagua__choice_find(modes, "AUTOMATIC", 4) == modes);
  ASSERT_TRUE(bagua__choice_find(modes, "", 0) == NULL);
  const char *refused[] = {"", "live", "restar", "restarts", "auto|restart", " auto", "auto "};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    g_err[0] = '\0';
    if (bagua__check_choice(refused[i], modes, g_err, sizeof(g_err)) == BAGUA_OK)
      TEST_FAIL("\"%s\" accepted", refused[i]);
    if (!strstr(g_err, "accepted: auto, restart or in-process"))
      TEST_FAIL("\"%s\": message \"%s\" does not list the words", refused[i], g_err);
  }
}

/* Every word of every word parameter, in three spellings, and a word no list has. */
static void test_every_reader_agrees(void) {
  int words = 0;
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    bagua__param_id_t id = (bagua__param_id_t)i;
    const char *choices = bagua__param_choices(id);
    if (bagua__param_is_int(id) || !choices[0]) continue;
    const char *env = bagua__param_env_name(id);
    char *saved = getenv(env) ? strdup(getenv(env)) : NULL;
    if (choices[0] == ',') choices++;
    for (const char *p = choices; *p;) {
      size_t n = strcspn(p, "|");
      char canon[64], upper[64], capital[64];
      snprintf(canon, sizeof(canon), "%.*s", (int)n, p);
      recase(upper, sizeof(upper), p, n, 'U');
      recase(capital, sizeof(capital), p, n, 'C');
      expect_verdict(id, canon, canon);
      expect_verdict(id, upper, canon);
      expect_verdict(id, capital, canon);
      words++;
      p += n;
      if (*p == '|') p++;
    }
    expect_verdict(id, "no-such-word", NULL);
    set_env(env, saved);
    free(saved);
  }
  /* The registry has word parameters (BAGUA_ELASTIC_MODE among them); a broken walk finds
   * none and would prove nothing. */
  ASSERT_GE(words, 10);
}

/* The symptom: BAGUA_ELASTIC_MODE=Restart is "restart" everywhere, "live" nowhere. */
static void test_elastic_mode(void) {
  expect_verdict(BAGUA_P_ELASTIC_MODE, "Restart", "restart");
  expect_verdict(BAGUA_P_ELASTIC_MODE, "live", NULL);
  set_env("BAGUA_ELASTIC_MODE", NULL);
}

/* A list takes each word in any case and is handed over word by word canonical. */
static void test_list(void) {
  expect_verdict(BAGUA_P_AUTO_ALLOW, "Bytegrad,QADAM,async", "bytegrad,qadam,async");
  expect_verdict(BAGUA_P_AUTO_ALLOW, "bytegrad,Sgd", NULL);
  set_env("BAGUA_AUTO_ALLOW", NULL);
}

int main(int argc, char **argv) {
  TEST_RUN_CASES(argc, argv, "choices", TEST_CASE(rule), TEST_CASE(elastic_mode), TEST_CASE(list),
                 TEST_CASE(every_reader_agrees));
}
