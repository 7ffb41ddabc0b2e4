/*
 * Minimal test harness: assertions print both values and are never compiled out; a failed
 * assertion exits the process with status 1 so ctest reports it. TEST_SKIP exits with 77,
 * which the CMake registration maps to "skipped".
 */
#ifndef BAGUA_TEST_H
#define BAGUA_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_FAIL(...)                                   \
  do {                                                   \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                        \
    fprintf(stderr, "\n");                               \
    exit(1);                                             \
  } while (0)

#define ASSERT_TRUE(c)                            \
  do {                                            \
    if (!(c)) TEST_FAIL("expected true: %s", #c); \
  } while (0)

#define ASSERT_INT_OP(a, op, b)                                                    \
  do {                                                                             \
    long long ta_ = (long long)(a), tb_ = (long long)(b);                          \
    if (!(ta_ op tb_)) TEST_FAIL("%s %s %s: %lld vs %lld", #a, #op, #b, ta_, tb_); \
  } while (0)
#define ASSERT_EQ(a, b) ASSERT_INT_OP(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_OP(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_OP(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_OP(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_INT_OP(a, >, b)
#define ASSERT_GE(a, b) ASSERT_INT_OP(a, >=, b)
#define ASSERT_OK(st)                                                                    \
  do {                                                                                   \
    int ts_ = (int)(st);                                                                 \
    if (ts_ != 0) TEST_FAIL("%s returned %s", #st, bagua_err_name((bagua_status_t)ts_)); \
  } while (0)
#define ASSERT_STATUS(st, want)                                                          \
  do {                                                                                   \
    int ts_ = (int)(st), tw_ = (int)(want);                                              \
    if (ts_ != tw_)                                                                      \
      TEST_FAIL("%s returned %s, expected %s", #st, bagua_err_name((bagua_status_t)ts_), \
                bagua_err_name((bagua_status_t)tw_));                                    \
  } while (0)
#define ASSERT_STREQ(a, b)                                                                \
  do {                                                                                    \
    const char *ta_ = (a), *tb_ = (b);                                                    \
    if (strcmp(ta_, tb_) != 0) TEST_FAIL("%s == %s: \"%s\" vs \"%s\"", #a, #b, ta_, tb_); \
  } while (0)
#define ASSERT_NEAR(a, b, tol)                                                       \
  do {                                                                               \
    double ta_ = (double)(a), tb_ = (double)(b);                                     \
    if (!(ta_ - tb_ <= (tol) && tb_ - ta_ <= (tol)))                                 \
      TEST_FAIL("%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, ta_, tb_, (double)(tol)); \
  } while (0)

#define TEST_SKIP(...)   \
  do {                   \
    printf("SKIP: ");    \
    printf(__VA_ARGS__); \
    printf("\n");        \
    exit(77);            \
  } while (0)

/*
 * Scenario programs: one executable holds several scenarios and ctest runs each by name
 * (`test_x NAME`). test_run_scenario runs the one argv[1] names and prints "PASS NAME", or
 * lists the names and returns 2 when argv[1] names none.
 */
typedef struct {
  const char *name;
  void (*fn)(void);
} test_scenario_t;

static inline int test_run_scenario(int argc, char **argv, const test_scenario_t *list, size_t n) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (size_t i = 0; argc > 1 && i < n; i++) {
    if (strcmp(argv[1], list[i].name) != 0) continue;
    list[i].fn();
    printf("PASS %s\n", argv[1]);
    return 0;
  }
  fprintf(stderr, "usage: %s SCENARIO; scenarios:", argv[0]);
  for (size_t i = 0; i < n; i++) fprintf(stderr, " %s", list[i].name);
  fprintf(stderr, "\n");
  return 2;
}

#define TEST_RUN_SCENARIOS(argc, argv, ...)                                        \
  do {                                                                             \
    static const test_scenario_t list_[] = {__VA_ARGS__};                          \
    return test_run_scenario(argc, argv, list_, sizeof(list_) / sizeof(list_[0])); \
  } while (0)

/*
 * Case tables: a unit-test program lists its cases once, as TEST_CASE(name) entries of
 * TEST_RUN_CASES (each a `static void test_<name>(void)`), and runs them all in order when no
 * argument is given or the one argv[1] names. CMake's bagua_test_cases() (tests/CMakeLists.txt)
 * reads the same entries from the source and registers one ctest per case, `<test>.<name>`, so
 * a case can be selected and run alone and its name is written in one place.
 */
#define TEST_CASE(name) \
  { #name, test_##name }

static inline int test_run_cases(int argc, char **argv, const char *suite,
                                 const test_scenario_t *list, size_t n) {
  if (argc > 1) return test_run_scenario(argc, argv, list, n);
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (size_t i = 0; i < n; i++) {
    list[i].fn();
    printf("PASS %s.%s\n", suite, list[i].name);
  }
  printf("PASS %s (%zu cases)\n", suite, n);
  return 0;
}

#define TEST_RUN_CASES(argc, argv, suite, ...)                                         \
  do {                                                                                 \
    static const test_scenario_t list_[] = {__VA_ARGS__};                              \
    return test_run_cases(argc, argv, suite, list_, sizeof(list_) / sizeof(list_[0])); \
  } while (0)

#endif
