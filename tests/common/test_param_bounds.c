/*
 * bagua__param_check_int: a value given in a config struct is bounded by its parameter's
 * registry row exactly as the variable is, for every integer parameter, and the refusal names
 * the field, the value, the range and the variable.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../test.h"
#include "common/params.h"

static char g_err[512];

/* The field check and the variable's check give the same verdict on `v`. */
static void same_verdict(bagua__param_id_t id, int64_t v, bagua_status_t want) {
  char text[32];
  snprintf(text, sizeof(text), "%" PRId64, v);
  bagua_status_t field = bagua__param_check_int(id, "config.field", v, g_err, sizeof(g_err));
  bagua_status_t var = bagua__param_parse(id, text, NULL, g_err, sizeof(g_err));
  if (field != want || var != want)
    TEST_FAIL("%s %s: field %d, variable %d, expected %d", bagua__param_env_name(id), text, field,
              var, want);
}

int main(void) {
  int ints = 0;
  for (int i = 0; i < BAGUA_P__COUNT; i++) {
    bagua__param_id_t id = (bagua__param_id_t)i;
    if (!bagua__param_is_int(id)) continue;
    int64_t lo = 0, hi = 0;
    bagua__param_bounds(id, &lo, &hi);
    same_verdict(id, lo, BAGUA_OK);
    same_verdict(id, hi, BAGUA_OK);
    same_verdict(id, bagua__param_int_default(id), BAGUA_OK);
    same_verdict(id, lo - 1, BAGUA_ERR_INVALID_ARG);
    same_verdict(id, hi + 1, BAGUA_ERR_INVALID_ARG);
    ints++;
  }
  ASSERT_GE(ints, 20);

  ASSERT_STATUS(bagua__param_check_int(BAGUA_P_COMM_TIMEOUT_MS, "config.timeout_ms", 10, g_err,
                                       sizeof(g_err)),
                BAGUA_ERR_INVALID_ARG);
  const char *want =
      "config.timeout_ms 10 is out of range; accepted: an integer in [50, 86400000] "
      "(the bounds of BAGUA_COMM_TIMEOUT_MS)";
  ASSERT_STREQ(g_err, want);
  /* A string parameter has no bounds: asking is a programming error, refused with a reason. */
  ASSERT_STATUS(bagua__param_check_int(BAGUA_P_JOB_ID, "config.job_id", 1, g_err, sizeof(g_err)),
                BAGUA_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(g_err, "BAGUA_JOB_ID is not an integer parameter") != NULL);
  printf("param bounds: ok\n");
  return 0;
}
