/*
 * BAGUA_LOG_TIME: with 1, the tools' lines (bagua__say) and the library's log lines start with
 * the UTC time in ISO 8601 with milliseconds; with 0 (the default) they start as before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "bagua/error.h"
#include "common/log.h"
#include "common/output.h"
#include "common/params.h"
#include "common/time.h"

/* What `fn` writes to stderr (through a pipe), NUL-terminated. */
static void capture(void (*fn)(void), char *out, size_t len) {
  int p[2], saved = dup(STDERR_FILENO);
  ASSERT_EQ(pipe(p), 0);
  dup2(p[1], STDERR_FILENO);
  fn();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(p[1]);
  ssize_t n = read(p[0], out, len - 1);
  close(p[0]);
  out[n > 0 ? n : 0] = '\0';
}

static void say_line(void) {
  bagua__say("tool", "hello %d", 7);
}
static void warn_line(void) {
  BAGUA_WARN("careful %d", 8);
}

/* "2026-12-04T05:13:19.123Z " at the start of `s`. */
static int starts_with_time(const char *s) {
  static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ ";
  for (size_t i = 0; i < sizeof(shape) - 1; i++) {
    if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i]) return 0;
  }
  return 1;
}

static void test_format(void) {
  char buf[40];
  bagua__format_wall_ms(1764825199123LL, buf, sizeof(buf)); /* 2025-12-04T05:13:19.123Z */
  ASSERT_STREQ(buf, "2025-12-04T05:13:19.123Z");
  bagua__format_wall_ms(5, buf, sizeof(buf));
  ASSERT_STREQ(buf, "1970-01-01T00:00:00.005Z");
}

static void test_off_by_default(void) {
  char out[1024];
  unsetenv("BAGUA_LOG_TIME");
  bagua__params_reload();
  capture(say_line, out, sizeof(out));
  ASSERT_STREQ(out, "tool: hello 7\n");
  capture(warn_line, out, sizeof(out));
  ASSERT_TRUE(!starts_with_time(out) && strstr(out, " WARN careful 8 (") != NULL);
}

static void test_on(void) {
  char out[1024];
  setenv("BAGUA_LOG_TIME", "1", 1);
  bagua__params_reload();
  capture(say_line, out, sizeof(out));
  ASSERT_TRUE(starts_with_time(out));
  ASSERT_STREQ(out + 25, "tool: hello 7\n");
  capture(warn_line, out, sizeof(out));
  ASSERT_TRUE(starts_with_time(out) && strstr(out, " WARN careful 8 (") != NULL);
  /* Out of range: refused by the registry's check, never taken as "on". */
  setenv("BAGUA_LOG_TIME", "2", 1);
  bagua__params_reload();
  ASSERT_EQ(bagua__param_int(BAGUA_P_LOG_TIME), 0);
  ASSERT_NE(bagua__params_check(), BAGUA_OK);
  unsetenv("BAGUA_LOG_TIME");
  bagua__params_reload();
}

int main(int argc, char **argv) {
  TEST_RUN_CASES(argc, argv, "log_time", TEST_CASE(format), TEST_CASE(off_by_default),
                 TEST_CASE(on));
}
